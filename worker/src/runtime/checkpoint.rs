//! The master's checkpoints, for any algorithm: a base holding the whole state, and one
//! step per iteration holding what that iteration changed (SCD: one block's parameters;
//! CoCoA: the duals an epoch moved). A restarted master loads the base, replays the steps
//! in order and continues; runs are deterministic, so it produces the model an
//! undisturbed run would have.
//!
//! Objects (under `--checkpoint`, a folder or `s3://` location): `base.json` (rewritten
//! atomically; it names the first step that follows it) and `step-N.json`. A new base is
//! written at an epoch's end once the steps since the last base are larger than the base
//! itself, so what is written stays within twice what changed, and a resume replays at
//! most about one base's worth of steps. A step is used only if every step before it
//! exists, so a half-finished write can never be mistaken for progress: each object
//! appears whole or not at all (see storage). Every object carries a fingerprint of the
//! data and parameters; a checkpoint of another run is refused, never resumed.

use crate::driver::EpochPoint;
use crate::error::{LineaError, Result};
use crate::storage::{self, Storage};
use linea_engine::algorithm::{Algorithm, Iteration};
use serde::{Deserialize, Serialize};

const FORMAT: &str = "linea-checkpoint/2";
const BASE: &str = "base.json";

#[derive(Serialize, Deserialize)]
struct Base<S> {
    format: String,
    fingerprint: String,
    state: S,
    /// Version of the workers' unit state that goes with `state`.
    version: u64,
    trace: Vec<EpochPoint>,
    /// The number of the first step that follows this base.
    next_step: u64,
}

#[derive(Serialize, Deserialize)]
struct Step<T> {
    format: String,
    fingerprint: String,
    version: u64,
    step: T,
    /// The trace point of the epoch this step ended, if it ended one.
    point: Option<EpochPoint>,
}

/// What a restarted master continues from.
pub struct Resumed {
    pub version: u64,
    pub trace: Vec<EpochPoint>,
}

pub struct Checkpoints {
    storage: Box<dyn Storage>,
    fingerprint: String,
    /// Steps since the last base: the first one's number, and the next one's.
    first_step: u64,
    next_step: u64,
    base_bytes: usize,
    step_bytes: usize,
}

fn step_key(number: u64) -> String {
    format!("step-{number}.json")
}

impl Checkpoints {
    pub fn open(location: &str, fingerprint: String) -> Result<Self> {
        let storage = storage::open(location)?;
        Ok(Self { storage, fingerprint, first_step: 0, next_step: 0, base_bytes: 0, step_bytes: 0 })
    }

    fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<(T, usize)> {
        let bytes = self.storage.read(key)?;
        let bad = |why: String| LineaError::data(self.storage.describe(key), why);
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if value["format"] != FORMAT {
            return Err(bad(format!("not a {FORMAT} object")));
        }
        if value["fingerprint"] != self.fingerprint.as_str() {
            return Err(bad(
                "belongs to a run with other data or parameters; remove it or choose another --checkpoint".into(),
            ));
        }
        Ok((serde_json::from_value(value).map_err(|e| bad(e.to_string()))?, bytes.len()))
    }

    /// Brings `algorithm` to the last state saved, if any.
    pub fn load<A: Algorithm>(&mut self, algorithm: &mut A) -> Result<Option<Resumed>> {
        if !self.storage.exists(BASE)? {
            return Ok(None);
        }
        let (base, bytes): (Base<A::State>, usize) = self.read(BASE)?;
        algorithm.set_state(base.state);
        let (mut version, mut trace) = (base.version, base.trace);
        (self.first_step, self.base_bytes, self.step_bytes) = (base.next_step, bytes, 0);
        let mut number = base.next_step;
        while self.storage.exists(&step_key(number))? {
            let key = step_key(number);
            let (step, bytes): (Step<A::Step>, usize) = self.read(&key)?;
            algorithm.replay(step.step).map_err(|e| LineaError::data(self.storage.describe(&key), e.to_string()))?;
            version = step.version;
            trace.extend(step.point);
            self.step_bytes += bytes;
            number += 1;
        }
        self.next_step = number;
        Ok(Some(Resumed { version, trace }))
    }

    /// After an iteration: a step, or at an epoch's end a new base once the steps since the
    /// last one outweigh it.
    pub fn save<A: Algorithm>(
        &mut self,
        algorithm: &A,
        iteration: &Iteration<A::Step>,
        version: u64,
        trace: &[EpochPoint],
    ) -> Result<()> {
        if iteration.epoch_done && self.step_bytes >= self.base_bytes {
            return self.save_base(algorithm, version, trace);
        }
        let point = if iteration.epoch_done { trace.last().cloned() } else { None };
        let step = Step {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            version,
            step: &iteration.step,
            point,
        };
        let bytes = serde_json::to_vec(&step).expect("serializes");
        self.storage.write(&step_key(self.next_step), &bytes)?;
        self.next_step += 1;
        self.step_bytes += bytes.len();
        Ok(())
    }

    /// Everything, then the steps it replaces are removed.
    pub fn save_base<A: Algorithm>(&mut self, algorithm: &A, version: u64, trace: &[EpochPoint]) -> Result<()> {
        let base = Base {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            state: algorithm.state(),
            version,
            trace: trace.to_vec(),
            next_step: self.next_step,
        };
        let bytes = serde_json::to_vec(&base).expect("serializes");
        self.storage.write(BASE, &bytes)?;
        for number in self.first_step..self.next_step {
            self.storage.remove(&step_key(number))?;
        }
        (self.first_step, self.base_bytes, self.step_bytes) = (self.next_step, bytes.len(), 0);
        Ok(())
    }
}
