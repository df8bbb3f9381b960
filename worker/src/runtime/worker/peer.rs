//! What this worker serves its peers (linea_proto's Peer service over [`WorkerCore`]): its
//! partial sums for aggregators, the state of units it hands over, and cells from its cache.

use super::WorkerCore;
use crate::runtime::allreduce::board::Pass;
use crate::runtime::allreduce::node::{WAIT, wait_status};
use crate::runtime::proto;
use crate::runtime::wire;
use linea_proto::peer::{ChunkFuture, PeerBackend};
use std::sync::atomic::Ordering;

impl PeerBackend for WorkerCore {
    fn in_session(&self, session: &str) -> bool {
        *self.session.lock().expect("session lock") == session
    }

    fn partial(&self, phase: u64, begin: usize, end: usize) -> Option<proto::Partial> {
        let partials = self.partials.lock().expect("partials lock");
        let p = partials.get(&phase)?;
        // The range comes from a peer's request: out of bounds is "none here", not a panic.
        let sums = p.sums.get(begin..end)?;
        let reply = proto::Partial { units: p.units.clone(), sums: wire::from_i128s(sums) };
        self.traffic.partial_bytes_served.fetch_add(reply.sums.len() as u64, Ordering::Relaxed);
        Some(reply)
    }

    fn unit_state(&self, unit: u32, version: u64) -> Option<Vec<u8>> {
        let kernel = self.kernel.lock().expect("kernel lock").clone()?;
        let slot = self.units.lock().expect("units lock").get(&unit).cloned()?;
        let guard = slot.lock().expect("unit lock");
        guard.as_ref().filter(|u| u.version == version).map(|u| kernel.encode_state(&u.state))
    }

    fn part(&self, session: &str, unit: u32) -> Option<proto::UnitPart> {
        let part = self.part_bytes(session, unit)?;
        self.traffic.part_bytes_served.fetch_add(part.len() as u64, Ordering::Relaxed);
        Some(super::handover::sealed(part))
    }

    fn chunk(&self, r: proto::FetchChunkRequest) -> ChunkFuture {
        let board = self.boards.board(r.phase, r.generation);
        let pass = if r.down { Pass::Down } else { Pass::Up };
        Box::pin(async move {
            let chunk = board.wait(pass, r.chunk as usize, r.chunks as usize, WAIT).await.map_err(wait_status)?;
            Ok(proto::ReduceChunk { sums: wire::from_i128s(&chunk.sums), units: chunk.units })
        })
    }

    fn cell(&self, block: u32, shard: u32) -> Option<Vec<u8>> {
        let grid = self.grid.lock().expect("grid lock").clone()?;
        let bytes = grid.cells.compressed((block as usize, shard as usize))?;
        self.traffic.cells_served.fetch_add(1, Ordering::Relaxed);
        Some(bytes.as_ref().clone())
    }
}
