//! A worker's tree item: its part in a tree allreduce (runtime::allreduce::node) over the
//! partial sums its unit items left, talking to its tree neighbours over the Peer service.

use super::{ItemError, WorkerCore};
use crate::runtime::allreduce::chunks;
use crate::runtime::allreduce::node::{self, GrpcFetch, NodeError, NodeOutcome, NodeSpec};
use crate::runtime::proto;
use linea_engine::algorithm::Reduction;
use std::collections::HashMap;

impl WorkerCore {
    /// Runs this worker's part of the phase's allreduce; the root's outcome holds the total.
    pub(super) fn tree_reduce(
        &self,
        phase_id: u64,
        reduction: Reduction,
        item: &proto::TreeItem,
    ) -> Result<NodeOutcome, ItemError> {
        let len = super::validate::tree_item(item, reduction)?;
        tracing::debug!(phase = phase_id, generation = item.generation, "allreduce: tree item started");
        let board = self.boards.board(phase_id, item.generation);
        let (own, own_units) = {
            let partials = self.partials.lock().expect("partials lock");
            match partials.get(&phase_id) {
                Some(p) => {
                    let (mut held, mut expected) = (p.units.clone(), item.units.clone());
                    held.sort_unstable();
                    expected.sort_unstable();
                    if held != expected || p.sums.len() != len {
                        // The master counts on sums this worker does not hold as it thinks.
                        board.abort();
                        return Err(ItemError::Fatal(format!(
                            "allreduce of phase {phase_id}: this worker holds units {held:?}, the master expects {expected:?}"
                        )));
                    }
                    (p.sums.clone(), held.len() as u32)
                }
                None if item.units.is_empty() => (vec![0; len], 0),
                None => {
                    board.abort();
                    return Err(ItemError::Fatal(format!(
                        "allreduce of phase {phase_id}: no partial sums here, the master expects units {:?}",
                        item.units
                    )));
                }
            }
        };
        let spec = NodeSpec {
            parent: (!item.parent.is_empty()).then(|| item.parent.clone()),
            children: item.children.clone(),
            len,
            chunk: item.chunk as usize,
        };
        let mut clients = HashMap::new();
        for peer in spec.parent.iter().chain(&spec.children) {
            clients.insert(peer.clone(), self.peer(peer)?);
        }
        let fetch = GrpcFetch {
            clients,
            session: self.session.lock().expect("session lock").clone(),
            phase: phase_id,
            generation: item.generation,
            chunks: chunks::ranges(len, spec.chunk).len(),
        };
        self.runtime.block_on(node::run(&spec, &own, own_units, &board, &fetch)).map_err(|e| match e {
            NodeError::Lost(peer) => ItemError::LostPeer(peer),
            NodeError::Aborted => ItemError::Aborted,
        })
    }
}
