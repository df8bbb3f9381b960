//! The master's checkpoints: a full base at the start of every epoch and one small step
//! per block iteration holding only the block that changed. A restarted master loads the
//! base, replays the steps, and continues from the next block of the same epoch order;
//! the run is deterministic, so it produces the model an undisturbed run would have.
//!
//! Objects (under `--checkpoint`, a folder or `s3://` location):
//! `base.json` (rewritten atomically each epoch; it names its epoch) and
//! `epoch-E/step-P.json` (written after iteration P of epoch E). A step is used only if
//! every step before it exists, so a half-finished write can never be mistaken for progress:
//! each object appears whole or not at all (see storage). Both carry a fingerprint of the
//! data and parameters; a checkpoint of another run is refused, never resumed.

use crate::error::{LineaError, Result};
use crate::storage::{self, Storage};
use crate::train::EpochPoint;
use linea_engine::scd::{Scd, ScdState};
use serde::{Deserialize, Serialize};

const FORMAT: &str = "linea-checkpoint/1";
const BASE: &str = "base.json";

#[derive(Serialize, Deserialize)]
struct Base {
    format: String,
    fingerprint: String,
    state: ScdState,
    /// Version of the workers' shard state that goes with `state`.
    version: u64,
    trace: Vec<EpochPoint>,
}

#[derive(Serialize, Deserialize)]
struct Step {
    format: String,
    fingerprint: String,
    epoch: u32,
    position: usize,
    version: u64,
    objectives: Vec<f64>,
    block: usize,
    theta: Vec<f64>,
}

/// What a restarted master continues from.
pub struct Resumed {
    pub state: ScdState,
    pub version: u64,
    pub trace: Vec<EpochPoint>,
}

pub struct Checkpoints {
    storage: Box<dyn Storage>,
    fingerprint: String,
}

fn step_key(epoch: u32, position: usize) -> String {
    format!("epoch-{epoch}/step-{position}.json")
}

impl Checkpoints {
    pub fn open(location: &str, fingerprint: String) -> Result<Self> {
        Ok(Self { storage: storage::open(location)?, fingerprint })
    }

    fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<T> {
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
        serde_json::from_value(value).map_err(|e| bad(e.to_string()))
    }

    /// The last state saved, if any.
    pub fn load(&self) -> Result<Option<Resumed>> {
        if !self.storage.exists(BASE)? {
            return Ok(None);
        }
        let base: Base = self.read(BASE)?;
        let (mut state, mut version) = (base.state, base.version);
        for position in state.position + 1.. {
            let key = step_key(state.epoch, position);
            if !self.storage.exists(&key)? {
                break;
            }
            let step: Step = self.read(&key)?;
            if step.epoch != state.epoch || step.position != position || step.block >= state.theta.len() {
                return Err(LineaError::data(self.storage.describe(&key), "step does not follow its base"));
            }
            state.theta[step.block] = step.theta;
            state.position = position;
            state.objectives = step.objectives;
            version = step.version;
        }
        Ok(Some(Resumed { state, version, trace: base.trace }))
    }

    /// After a block iteration: that block's parameters and where the epoch is.
    pub fn save_step(&self, scd: &Scd, block: usize, version: u64) -> Result<()> {
        let state = &scd.state;
        let step = Step {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            epoch: state.epoch,
            position: state.position,
            version,
            objectives: state.objectives.clone(),
            block,
            theta: state.theta[block].clone(),
        };
        self.storage.write(&step_key(state.epoch, state.position), &serde_json::to_vec(&step).expect("serializes"))
    }

    /// At an epoch boundary (and at the start): everything, then the previous epoch's
    /// steps are removed.
    pub fn save_base(&self, scd: &Scd, version: u64, trace: &[EpochPoint]) -> Result<()> {
        let base = Base {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            state: scd.state.clone(),
            version,
            trace: trace.to_vec(),
        };
        self.storage.write(BASE, &serde_json::to_vec(&base).expect("serializes"))?;
        if let Some(previous) = scd.state.epoch.checked_sub(1) {
            for position in 1..=scd.shapes.len() {
                self.storage.remove(&step_key(previous, position))?;
            }
        }
        Ok(())
    }
}
