//! A scale-in's merged units built from the parts the old units' holders hand over (elastic
//! CoCoA: the old slots' rows), instead of from storage.
//!
//! When the algorithm reconfigures, every worker keeps its units of the old configuration
//! aside ([`Retired`]) under the old master session, and serves them as parts
//! ([`WorkerCore::part`]). The worker that runs a merged unit first fetches its parts from
//! the holders the master named, all at once, each checked against its CRC-32C and by the
//! kernel ([`linea_engine::algorithm::Kernel::decode_part`]), and merges them with the
//! master's base. Hedged: if a part does not come within [`PART_PATIENCE`] (a holder killed,
//! stalled or gone) or fails a check, the unit is rebuilt as before — its base from the
//! master, its rows from storage. Either way the bytes are the same: a merge of the old
//! rows equals a gathering of the new slot, field by field (engine merge tests).

use super::kernels::{AnyState, DynKernel};
use super::{SharedUnit, WorkerCore};
use crate::error::{LineaError, Result};
use crate::runtime::proto;
use linea_proto::client::PeerClient;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a worker waits for all the parts of a merged unit before reading storage
/// instead. A part is at most a slot's rows (tens of MB on the largest sets, well under a
/// second on any network a cluster has); a holder that is gone refuses the connection at
/// once, so this bounds only a holder that hangs.
pub const PART_PATIENCE: Duration = Duration::from_secs(5);

/// The units of the previous configuration this worker held, kept for the workers that
/// merge them, until the first phase of the configuration after that.
#[derive(Default)]
pub(super) struct Retired {
    /// The master session they were built in; empty: none kept.
    session: String,
    kernel: Option<Arc<dyn DynKernel>>,
    units: HashMap<u32, SharedUnit>,
    /// The unit-state version of the first phase that came after they were retired: a
    /// phase of a later version means every merged unit was built.
    first_version: Option<u64>,
}

/// The bytes of a part that passed its checksum.
pub fn verified(part: proto::UnitPart) -> std::result::Result<Vec<u8>, String> {
    let sum = crc32c::crc32c(&part.part);
    if sum != part.crc32c {
        return Err(format!("part fails its checksum ({sum:08x}, sent {:08x})", part.crc32c));
    }
    Ok(part.part)
}

/// A part with its checksum, as a holder sends it.
pub fn sealed(part: Vec<u8>) -> proto::UnitPart {
    proto::UnitPart { crc32c: crc32c::crc32c(&part), part }
}

/// Fetches every part from its holder at once; all of them verified, in order, or why not
/// (the first failure, or that `patience` ran out).
pub async fn fetch_all(
    requests: Vec<(String, PeerClient, proto::FetchPartRequest)>,
    patience: Duration,
) -> std::result::Result<Vec<Vec<u8>>, String> {
    let fetches: Vec<_> = requests
        .into_iter()
        .map(|(address, mut client, request)| {
            tokio::spawn(async move {
                let unit = request.unit;
                let reply = client.fetch_part(request).await.map_err(|s| format!("{address}, part {unit}: {s}"))?;
                verified(reply.into_inner()).map_err(|why| format!("{address}, part {unit}: {why}"))
            })
        })
        .collect();
    let all = async {
        let mut parts = Vec::with_capacity(fetches.len());
        for fetch in fetches {
            parts.push(fetch.await.map_err(|e| format!("a part's fetch failed: {e}"))??);
        }
        Ok(parts)
    };
    tokio::time::timeout(patience, all).await.map_err(|_| format!("parts not all in within {patience:?}"))?
}

impl WorkerCore {
    /// Keeps the units of the configuration just replaced aside for the workers that merge
    /// them (called with the units lock's contents when the kernel changes).
    pub(super) fn retire(&self, session: String, kernel: Option<Arc<dyn DynKernel>>, units: HashMap<u32, SharedUnit>) {
        *self.retired.lock().expect("retired lock") = Retired { session, kernel, units, first_version: None };
    }

    /// Drops the retired units once a phase of a later version than the first one after
    /// the reconfiguration comes: every merged unit was built by then.
    pub(super) fn expire_retired(&self, version: u64) {
        let mut retired = self.retired.lock().expect("retired lock");
        match retired.first_version {
            None => retired.first_version = Some(version),
            Some(first) if version > first => *retired = Retired::default(),
            Some(_) => {}
        }
    }

    /// What a merge needs of `unit` as held in master session `session`: from the retired
    /// units, or from the current ones if this worker has not heard of the new
    /// configuration yet.
    pub(super) fn part_bytes(&self, session: &str, unit: u32) -> Option<Vec<u8>> {
        let current = || {
            if *self.session.lock().expect("session lock") != session {
                return None;
            }
            Some((
                self.kernel.lock().expect("kernel lock").clone()?,
                self.units.lock().expect("units lock").get(&unit).cloned()?,
            ))
        };
        let retired = || {
            let retired = self.retired.lock().expect("retired lock");
            (retired.session == session).then(|| Some((retired.kernel.clone()?, retired.units.get(&unit).cloned()?)))?
        };
        // Looked up as current first, then as retired: a reconfiguration between the two
        // moves it from one to the other.
        let (kernel, slot) = current().or_else(retired)?;
        let guard = slot.lock().expect("unit lock");
        kernel.encode_part(&guard.as_ref()?.state)
    }

    /// A merged unit from its parts and `base`, or why not (then it is rebuilt from storage).
    pub(super) fn merged(
        self: &Arc<Self>,
        unit: u32,
        base: &[u8],
        sources: &[proto::PartSource],
        session: &str,
    ) -> Result<AnyState> {
        let kernel = self.kernel();
        // Parts this worker holds itself are taken as they are; the others are fetched.
        let mut parts: Vec<Option<AnyState>> = sources
            .iter()
            .map(|s| (s.address == self.address).then(|| self.take_retired(session, s.unit)).flatten())
            .collect();
        let mut requests = Vec::new();
        for (source, part) in sources.iter().zip(&parts) {
            if part.is_none() {
                let request = proto::FetchPartRequest { session: session.to_string(), unit: source.unit };
                requests.push((source.address.clone(), self.peer(&source.address)?, request));
            }
        }
        let fetched = self
            .runtime
            .block_on(fetch_all(requests, PART_PATIENCE))
            .map_err(|message| LineaError::Remote { peer: "a part's holder".into(), message })?;
        let bytes: usize = fetched.iter().map(Vec::len).sum();
        self.traffic.part_bytes_fetched.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut fetched = fetched.into_iter();
        for part in parts.iter_mut().filter(|p| p.is_none()) {
            *part = Some(kernel.decode_part(&fetched.next().expect("one per missing part"))?);
        }
        let parts: Vec<AnyState> = parts.into_iter().map(|p| p.expect("filled above")).collect();
        kernel.merge(unit as usize, base, parts, &self.unit_grid(unit as usize))
    }

    /// A retired unit of this worker's, taken out (it goes into one merged unit only).
    fn take_retired(&self, session: &str, unit: u32) -> Option<AnyState> {
        let retired = self.retired.lock().expect("retired lock");
        if retired.session != session {
            return None;
        }
        let slot = retired.units.get(&unit)?.clone();
        drop(retired);
        let state = slot.lock().expect("unit lock").take()?.state;
        Some(state)
    }
}

#[cfg(test)]
mod tests;
