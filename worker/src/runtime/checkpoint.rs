//! The master's checkpoints, for any algorithm: a base holding the whole state, and one
//! step per iteration holding what that iteration changed (SCD: one block's parameters;
//! CoCoA: the duals an epoch moved). A restarted master loads the base, replays the steps
//! in order and continues; runs are deterministic, so it produces the model an
//! undisturbed run would have.
//!
//! Objects (under `--checkpoint`, a folder or `s3://` location): two base slots, `base-a`
//! and `base-b`, and one `step-N` per iteration. Each is one JSON line (format, fingerprint,
//! version, trace, the body's CRC-32C) followed by the algorithm's state or step encoded by
//! the engine (postcard: compact, f64 and i128 bit for bit). A new base is written at an
//! epoch's end once the steps since the last base are larger than the base itself, so what
//! is written stays within twice what changed, and a resume replays at most about one
//! base's worth of steps. It goes to the slot that does not hold the current base, and the
//! steps it replaces are removed only after it is written.
//!
//! **Damaged objects are survived, not trusted.** Storage promises whole objects, but an
//! S3-compatible server can commit the part of an upload that arrived before its client was
//! killed (s3s-fs renames the body into place before it checks the checksum). A base or step
//! whose bytes fail a check (the store's checksum, the header's CRC-32C, decoding) is
//! treated as absent: the newest base that reads is used, and the replay stops at the first
//! step that does not. Because runs are deterministic, resuming from an earlier state gives
//! the same model; only work is redone. A checkpoint of another run (another fingerprint or
//! format) is refused, never resumed or overwritten.

use super::scheduler::Released;
use crate::driver::EpochPoint;
use crate::error::{LineaError, Result};
use crate::storage::{self, Storage};
use linea_engine::algorithm::{Algorithm, Iteration, decode, encode};
use serde::{Deserialize, Serialize};

/// The format of every checkpoint object. The body is the engine's postcard encoding, which
/// is not self-describing: a state type that gains, loses or changes a field reads old bytes
/// wrongly or not at all. So any change of the encoded types bumps this string, and a
/// checkpoint of another format is refused with a message that says so (never taken as
/// damaged and silently started over, never misread). `worker/tests/checkpoint_schema.rs`
/// fails when the types' encoding changes under an unchanged string.
pub const FORMAT: &str = "linea-checkpoint/5";
/// The base slots; a new base is written to the one that does not hold the current base.
const BASES: [&str; 2] = ["base-a", "base-b"];

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
    /// CRC-32C of the body: a body cut short or altered is found even in a store that keeps
    /// no checksum of its own.
    #[serde(default)]
    body_crc32c: Option<u32>,
    /// Every worker released as surplus so far, with the scale-in decision it was released
    /// under (each object has the whole record, which is small: a restarted master reports
    /// each decision with its released workers from the newest object).
    #[serde(default)]
    released: Vec<Released>,
}

/// Why a checkpoint object cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Another run's object, or another format: never resumed, never overwritten.
    #[error("{0}")]
    Foreign(String),
    /// Bytes that fail a check (a write cut short, corruption): the object is treated as
    /// absent and the run resumes from the state before it.
    #[error("{0}")]
    Damaged(String),
}

/// A checkpoint object's header and body (`key` names it in messages), or why it is not
/// one of this run's (`fingerprint`): the bytes come from storage, so every way they can be
/// wrong is an error here, never a panic.
pub fn parse_object<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    fingerprint: &str,
    key: &str,
) -> std::result::Result<(Header, T), ObjectError> {
    use ObjectError::{Damaged, Foreign};
    let split =
        bytes.iter().position(|&b| b == b'\n').ok_or_else(|| Damaged(format!("not a whole {FORMAT} object")))?;
    let header: Header =
        serde_json::from_slice(&bytes[..split]).map_err(|e| Damaged(format!("not a whole {FORMAT} object ({e})")))?;
    if header.format != FORMAT {
        return Err(Foreign(match header.format.strip_prefix("linea-checkpoint/") {
            Some(_) => format!(
                "was written by a linea whose checkpoint format is {}; this linea reads {FORMAT} only and cannot \
                 resume it: remove it (the run starts over) or choose another --checkpoint",
                header.format
            ),
            None => format!("not a {FORMAT} object"),
        }));
    }
    if header.fingerprint != fingerprint {
        return Err(Foreign(
            "belongs to a run with other data or parameters; remove it or choose another --checkpoint".into(),
        ));
    }
    let body = &bytes[split + 1..];
    if let Some(expected) = header.body_crc32c
        && crc32c::crc32c(body) != expected
    {
        return Err(Damaged(format!("its body fails its CRC-32C ({} bytes)", body.len())));
    }
    let body = decode(body, key).map_err(|e| Damaged(e.to_string()))?;
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
    /// The slot (index into [`BASES`]) of the current base, if one was written or loaded.
    base_slot: Option<usize>,
    /// Damaged objects the last load passed over, and why (for the master's log).
    pub ignored: Vec<String>,
}

/// What reading a checkpoint object gave: the object, or the damage that makes it absent.
type Read<T> = std::result::Result<(Header, T, usize), String>;

fn step_key(number: u64) -> String {
    format!("step-{number}")
}

impl Checkpoints {
    pub fn open(location: &str, fingerprint: String) -> Result<Self> {
        let storage = storage::open(location)?;
        Ok(Self {
            storage,
            fingerprint,
            first_step: 0,
            next_step: 0,
            base_bytes: 0,
            step_bytes: 0,
            base_slot: None,
            ignored: Vec::new(),
        })
    }

    fn header(&self, version: u64) -> Header {
        Header {
            format: FORMAT.into(),
            fingerprint: self.fingerprint.clone(),
            version,
            trace: Vec::new(),
            next_step: 0,
            point: None,
            body_crc32c: None,
            released: Vec::new(),
        }
    }

    /// An object's header and its decoded body, checked to belong to this run. `Ok(Err(why))`:
    /// the object is damaged (see the module's doc); `Err`: storage failed for good, or the
    /// object is another run's.
    fn read<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Read<T>> {
        let bytes = match self.storage.read(key) {
            Ok(bytes) => bytes,
            // The store's own checksum failed on every attempt.
            Err(e @ (LineaError::Data { .. } | LineaError::Engine { .. })) => return Ok(Err(e.to_string())),
            Err(e) => return Err(e),
        };
        let object = || self.storage.describe(key);
        match parse_object(&bytes, &self.fingerprint, key) {
            Ok((header, body)) => Ok(Ok((header, body, bytes.len()))),
            Err(ObjectError::Damaged(why)) => Ok(Err(format!("{}: {why}", object()))),
            Err(ObjectError::Foreign(why)) => Err(LineaError::data(object(), why)),
        }
    }

    fn write(&self, key: &str, header: Header, body: Vec<u8>) -> Result<usize> {
        let header = Header { body_crc32c: Some(crc32c::crc32c(&body)), ..header };
        let mut bytes = serde_json::to_vec(&header).expect("serializes");
        bytes.push(b'\n');
        bytes.extend(body);
        self.storage.write(key, &bytes)?;
        Ok(bytes.len())
    }

    /// The newest base that reads (its slot, header, state and size), if any.
    fn newest_base<S: serde::de::DeserializeOwned>(&mut self) -> Result<Option<(usize, Header, S, usize)>> {
        let mut newest: Option<(usize, Header, S, usize)> = None;
        for (slot, key) in BASES.iter().enumerate() {
            if !self.storage.exists(key)? {
                continue;
            }
            match self.read::<S>(key)? {
                Ok((header, state, bytes)) => {
                    if newest.as_ref().is_none_or(|(_, n, ..)| header.next_step > n.next_step) {
                        newest = Some((slot, header, state, bytes));
                    }
                }
                Err(why) => self.ignored.push(why),
            }
        }
        Ok(newest)
    }

    /// Brings `algorithm` to the last state saved, if any.
    pub fn load<A: Algorithm>(&mut self, algorithm: &mut A) -> Result<Option<Resumed>> {
        let (mut version, mut trace, mut released) = (0, Vec::new(), Vec::new());
        let mut resumed = false;
        if let Some((slot, base, state, bytes)) = self.newest_base::<A::State>()? {
            algorithm.set_state(state);
            (version, trace, released) = (base.version, base.trace, base.released);
            (self.first_step, self.base_bytes, self.base_slot) = (base.next_step, bytes, Some(slot));
            resumed = true;
        }
        // Without a base that reads, the steps from 0 follow the initial state: the first
        // base is written before any step, and steps are removed only after a newer base.
        let mut number = self.first_step;
        self.step_bytes = 0;
        while self.storage.exists(&step_key(number))? {
            let key = step_key(number);
            let (header, step, bytes): (Header, A::Step, usize) = match self.read(&key)? {
                Ok(read) => read,
                Err(why) => {
                    self.ignored.push(why);
                    break;
                }
            };
            algorithm.replay(step).map_err(|e| LineaError::data(self.storage.describe(&key), e.to_string()))?;
            version = header.version;
            trace.extend(header.point);
            released = header.released;
            self.step_bytes += bytes;
            number += 1;
            resumed = true;
        }
        self.next_step = number;
        Ok(resumed.then_some(Resumed { version, trace, released }))
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
        let bytes = self.write(&step_key(self.next_step), header, encode(&iteration.step))?;
        self.next_step += 1;
        self.step_bytes += bytes;
        Ok(())
    }

    /// Everything, into the slot that does not hold the current base; then the steps it
    /// replaces are removed.
    pub fn save_base<A: Algorithm>(
        &mut self,
        algorithm: &A,
        version: u64,
        trace: &[EpochPoint],
        released: &[Released],
    ) -> Result<()> {
        let slot = self.base_slot.map_or(0, |current| 1 - current);
        let header = Header {
            trace: trace.to_vec(),
            next_step: self.next_step,
            released: released.to_vec(),
            ..self.header(version)
        };
        let bytes = self.write(BASES[slot], header, encode(algorithm.state()))?;
        for number in self.first_step..self.next_step {
            self.storage.remove(&step_key(number))?;
        }
        (self.first_step, self.base_bytes, self.step_bytes, self.base_slot) = (self.next_step, bytes, 0, Some(slot));
        Ok(())
    }
}
