//! The `Peer` service every worker serves: its partial sums for aggregators, the state of
//! units it hands over, and cells from its cache.

use super::WorkerCore;
use crate::runtime::proto;
use crate::runtime::wire;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tonic::{Request, Response, Status};

pub struct PeerService {
    core: Arc<WorkerCore>,
}

impl PeerService {
    pub fn new(core: Arc<WorkerCore>) -> Self {
        Self { core }
    }
}

#[tonic::async_trait]
impl proto::peer_server::Peer for PeerService {
    async fn fetch_partial(
        &self,
        request: Request<proto::FetchPartialRequest>,
    ) -> Result<Response<proto::Partial>, Status> {
        let r = request.into_inner();
        if *self.core.session.lock().expect("session lock") != r.session {
            return Err(Status::not_found("partial of another master session"));
        }
        let p = self
            .core
            .local_partial(r.phase, r.begin as usize, r.end as usize)
            .ok_or_else(|| Status::not_found(format!("no partial sums of phase {}", r.phase)))?;
        let reply = proto::Partial { units: p.units, sums: wire::from_i128s(&p.sums) };
        self.core.traffic.partial_bytes_served.fetch_add(reply.sums.len() as u64, Ordering::Relaxed);
        Ok(Response::new(reply))
    }

    async fn fetch_cell(
        &self,
        request: Request<proto::FetchCellRequest>,
    ) -> Result<Response<proto::CellBytes>, Status> {
        let r = request.into_inner();
        let grid = self.core.grid.lock().expect("grid lock").clone();
        let bytes = grid.and_then(|g| g.cells.compressed((r.block as usize, r.shard as usize)));
        let bytes =
            bytes.ok_or_else(|| Status::not_found(format!("cell {}/{} is not cached here", r.block, r.shard)))?;
        self.core.traffic.cells_served.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(proto::CellBytes { compressed: bytes.as_ref().clone() }))
    }

    async fn fetch_unit(
        &self,
        request: Request<proto::FetchUnitRequest>,
    ) -> Result<Response<proto::UnitState>, Status> {
        let r = request.into_inner();
        let kernel = self.core.kernel.lock().expect("kernel lock").clone();
        let slot = self.core.units.lock().expect("units lock").get(&r.unit).cloned();
        let state = match (kernel, slot) {
            (Some(kernel), Some(slot)) => {
                let guard = slot.lock().expect("unit lock");
                guard.as_ref().filter(|u| u.version == r.version).map(|u| kernel.encode_state(&u.state))
            }
            _ => None,
        };
        let state =
            state.ok_or_else(|| Status::not_found(format!("no state of unit {} at version {}", r.unit, r.version)))?;
        Ok(Response::new(proto::UnitState { version: r.version, state }))
    }
}
