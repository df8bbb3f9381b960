//! The master's checkpoints, for any algorithm: a base holding the whole state, and one
//! step per iteration holding what that iteration changed (SCD: one block's parameters;
//! CoCoA: the duals an epoch moved). A restarted master loads the base, replays the steps
//! in order and continues; runs are deterministic, so it produces the model an
//! undisturbed run would have.
//!
//! Objects (under `--checkpoint`, a folder or `s3://` location): `base` (rewritten
//! atomically; it names the first step that follows it) and `step-N`. Each is one JSON line
//! (format, fingerprint, version, trace) followed by the algorithm's state or step encoded
//! by the engine (postcard: compact, f64 and i128 bit for bit). A new base is written at an
//! epoch's end once the steps since the last base are larger than the base itself, so what
//! is written stays within twice what changed, and a resume replays at most about one
//! base's worth of steps. A step is used only if every step before it exists, so a
//! half-finished write can never be mistaken for progress: each object appears whole or not
//! at all (see storage). Every object carries a fingerprint of the data and parameters; a
//! checkpoint of another run is refused, never resumed.

use super::scheduler::Released;
use crate::driver::EpochPoint;
use crate::error::{LineaError, Result};
use crate::storage::{self, Storage};
use linea_engine::algorithm::{Algorithm, Iteration, decode, encode};
use serde::{Deserialize, Serialize};

const FORMAT: &str = "linea-checkpoint/2";
const BASE: &str = "base";

/// The JSON line that opens every checkpoint object.
#[derive(Serialize, Deserialize)]
pub struct Header {
    format: String,
    fingerprint: String,
    /// Version of the workers' unit state that goes with the state after this object.
    version: u64,
    /// A base: the trace so far, and the number of the first step that follows it.
    #[serde(default)]
    trace: Vec<EpochPoint>,
    #[serde(default)]
    next_step: u64,
    /// A step: the trace point of the epoch it ended, if it ended one.
    #[serde(default)]
    point: Option<EpochPoint>,
    /// Every worker released as surplus so far, with the scale-in decision it was released
    /// under (each object has the whole record, which is small: a restarted master reports
    /// each decision with its released workers from the newest object).
    #[serde(default)]
    released: Vec<Released>,
}

/// A checkpoint object's header and body (`key` names it in messages), or why it is not
/// one of this run's (`fingerprint`): the bytes come from storage, so every way they can be
/// wrong is an error here, never a panic.
pub fn parse_object<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    fingerprint: &str,
    key: &str,
) -> std::result::Result<(Header, T), String> {
    let split = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| format!("not a {FORMAT} object"))?;
    let header: Header = serde_json::from_slice(&bytes[..split]).map_err(|e| format!("not a {FORMAT} object ({e})"))?;
    if header.format != FORMAT {
        return Err(format!("not a {FORMAT} object"));
    }
    if header.fingerprint != fingerprint {
        return Err("belongs to a run with other data or parameters; remove it or choose another --checkpoint".into());
    }
    let body = decode(&bytes[split + 1..], key).map_err(|e| e.to_string())?;
    Ok((header, body))
}

/// What a restarted master continues from.
pub struct Resumed {
    pub version: u64,
    pub trace: Vec<EpochPoint>,
    pub released: Vec<Released>,
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
    format!("step-{number}")
}

impl Checkpoints {
    pub fn open(location: &str, fingerprint: String) -> Result<Self> {
        let storage = storage::open(location)?;
        Ok(Self { storage, fingerprint, first_step: 0, next_step: 0, base_bytes: 0, step_bytes: 0 })
    }

    fn header(&self, version: u64) -> Header {
        Header {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            version,
            trace: Vec::new(),
            next_step: 0,
            point: None,
            released: Vec::new(),
        }
    }

    /// An object's header and its decoded body, checked to belong to this run.
    fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<(Header, T, usize)> {
        let bytes = self.storage.read(key)?;
        let (header, body) = parse_object(&bytes, &self.fingerprint, key)
            .map_err(|why| LineaError::data(self.storage.describe(key), why))?;
        Ok((header, body, bytes.len()))
    }

    fn write(&self, key: &str, header: &Header, body: Vec<u8>) -> Result<usize> {
        let mut bytes = serde_json::to_vec(header).expect("serializes");
        bytes.push(b'\n');
        bytes.extend(body);
        self.storage.write(key, &bytes)?;
        Ok(bytes.len())
    }

    /// Brings `algorithm` to the last state saved, if any.
    pub fn load<A: Algorithm>(&mut self, algorithm: &mut A) -> Result<Option<Resumed>> {
        if !self.storage.exists(BASE)? {
            return Ok(None);
        }
        let (base, state, bytes): (Header, A::State, usize) = self.read(BASE)?;
        algorithm.set_state(state);
        let (mut version, mut trace, mut released) = (base.version, base.trace, base.released);
        (self.first_step, self.base_bytes, self.step_bytes) = (base.next_step, bytes, 0);
        let mut number = base.next_step;
        while self.storage.exists(&step_key(number))? {
            let key = step_key(number);
            let (header, step, bytes): (Header, A::Step, usize) = self.read(&key)?;
            algorithm.replay(step).map_err(|e| LineaError::data(self.storage.describe(&key), e.to_string()))?;
            version = header.version;
            trace.extend(header.point);
            released = header.released;
            self.step_bytes += bytes;
            number += 1;
        }
        self.next_step = number;
        Ok(Some(Resumed { version, trace, released }))
    }

    /// After an iteration: a step, or at an epoch's end a new base once the steps since the
    /// last one outweigh it; `released` is the master's record of released workers.
    pub fn save<A: Algorithm>(
        &mut self,
        algorithm: &A,
        iteration: &Iteration<A::Step>,
        version: u64,
        trace: &[EpochPoint],
        released: &[Released],
    ) -> Result<()> {
        if iteration.epoch_done && self.step_bytes >= self.base_bytes {
            return self.save_base(algorithm, version, trace, released);
        }
        let point = if iteration.epoch_done { trace.last().cloned() } else { None };
        let header = Header { point, released: released.to_vec(), ..self.header(version) };
        let bytes = self.write(&step_key(self.next_step), &header, encode(&iteration.step))?;
        self.next_step += 1;
        self.step_bytes += bytes;
        Ok(())
    }

    /// Everything, then the steps it replaces are removed.
    pub fn save_base<A: Algorithm>(
        &mut self,
        algorithm: &A,
        version: u64,
        trace: &[EpochPoint],
        released: &[Released],
    ) -> Result<()> {
        let header = Header {
            trace: trace.to_vec(),
            next_step: self.next_step,
            released: released.to_vec(),
            ..self.header(version)
        };
        let bytes = self.write(BASE, &header, encode(algorithm.state()))?;
        for number in self.first_step..self.next_step {
            self.storage.remove(&step_key(number))?;
        }
        (self.first_step, self.base_bytes, self.step_bytes) = (self.next_step, bytes, 0);
        Ok(())
    }
}
