//! The `Peer` service every worker serves: its partial sums for aggregators, the state of
//! units it hands over, and cells from its cache.
//!
//! The service is the protocol (session check, what is NOT_FOUND); what a worker holds is
//! a [`PeerBackend`]. The worker implements it over its real state; the runtime benchmark's
//! simulated workers over empty sums, so they serve this same service.

use crate::v1::{self, peer_server::Peer};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// What a worker holds that its peers may fetch.
pub trait PeerBackend: Send + Sync + 'static {
    /// Whether `session` is the master session this worker is in (partial sums of another
    /// session are another run's).
    fn in_session(&self, session: &str) -> bool;
    /// Range [begin, end) of this worker's partial sums of `phase`: the units they cover and
    /// the sums as exact-sum bytes; `None` if it holds none of that phase.
    fn partial(&self, phase: u64, begin: usize, end: usize) -> Option<v1::Partial>;
    /// The encoded state of `unit` if this worker holds it at `version`.
    fn unit_state(&self, unit: u32, version: u64) -> Option<Vec<u8>>;
    /// The compressed bytes of a cell in this worker's cache.
    fn cell(&self, block: u32, shard: u32) -> Option<Vec<u8>>;
}

/// The Peer service over a backend.
pub struct PeerService<B> {
    backend: Arc<B>,
}

impl<B> PeerService<B> {
    pub fn new(backend: Arc<B>) -> Self {
        Self { backend }
    }
}

#[tonic::async_trait]
impl<B: PeerBackend> Peer for PeerService<B> {
    async fn fetch_partial(&self, request: Request<v1::FetchPartialRequest>) -> Result<Response<v1::Partial>, Status> {
        let r = request.into_inner();
        if !self.backend.in_session(&r.session) {
            return Err(Status::not_found("partial of another master session"));
        }
        let partial = self.backend.partial(r.phase, r.begin as usize, r.end as usize);
        let partial = partial.ok_or_else(|| Status::not_found(format!("no partial sums of phase {}", r.phase)))?;
        Ok(Response::new(partial))
    }

    async fn fetch_unit(&self, request: Request<v1::FetchUnitRequest>) -> Result<Response<v1::UnitState>, Status> {
        let r = request.into_inner();
        let state = self.backend.unit_state(r.unit, r.version);
        let state =
            state.ok_or_else(|| Status::not_found(format!("no state of unit {} at version {}", r.unit, r.version)))?;
        Ok(Response::new(v1::UnitState { version: r.version, state }))
    }

    async fn fetch_cell(&self, request: Request<v1::FetchCellRequest>) -> Result<Response<v1::CellBytes>, Status> {
        let r = request.into_inner();
        let compressed = self.backend.cell(r.block, r.shard);
        let compressed =
            compressed.ok_or_else(|| Status::not_found(format!("cell {}/{} is not cached here", r.block, r.shard)))?;
        Ok(Response::new(v1::CellBytes { compressed }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::JobSecret;
    use crate::client::{self, Timeouts};

    /// One partial of phase 7 over units 2 and 5, one unit (3 at version 4), one cell (1/2).
    struct Fixed;

    impl PeerBackend for Fixed {
        fn in_session(&self, session: &str) -> bool {
            session == "s1"
        }
        fn partial(&self, phase: u64, begin: usize, end: usize) -> Option<v1::Partial> {
            (phase == 7).then(|| v1::Partial { units: vec![2, 5], sums: vec![1; 16 * (end - begin)] })
        }
        fn unit_state(&self, unit: u32, version: u64) -> Option<Vec<u8>> {
            (unit == 3 && version == 4).then(|| b"state".to_vec())
        }
        fn cell(&self, block: u32, shard: u32) -> Option<Vec<u8>> {
            (block == 1 && shard == 2).then(|| b"cell".to_vec())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_peer_service_serves_its_backend_to_holders_of_the_secret() {
        let secret = JobSecret::generate();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let service = crate::server::peer(Arc::new(Fixed), &secret);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(crate::server::incoming(listener)),
        );
        let channel = client::channel(&address, Timeouts::COMMAND).await.unwrap();
        let mut peer = client::peer(channel.clone(), &secret);

        let request =
            |session: &str, phase| v1::FetchPartialRequest { session: session.into(), phase, begin: 4, end: 7 };
        let partial = peer.fetch_partial(request("s1", 7)).await.unwrap().into_inner();
        assert_eq!((partial.units, partial.sums.len()), (vec![2, 5], 48));
        assert_eq!(peer.fetch_partial(request("s0", 7)).await.unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(peer.fetch_partial(request("s1", 8)).await.unwrap_err().code(), tonic::Code::NotFound);

        let unit = peer.fetch_unit(v1::FetchUnitRequest { unit: 3, version: 4 }).await.unwrap().into_inner();
        assert_eq!((unit.version, unit.state), (4, b"state".to_vec()));
        let stale = peer.fetch_unit(v1::FetchUnitRequest { unit: 3, version: 3 }).await.unwrap_err();
        assert_eq!(stale.code(), tonic::Code::NotFound);
        let cell = peer.fetch_cell(v1::FetchCellRequest { block: 1, shard: 2 }).await.unwrap().into_inner();
        assert_eq!(cell.compressed, b"cell".to_vec());

        let mut intruder = client::peer(channel, &JobSecret::generate());
        let refused = intruder.fetch_cell(v1::FetchCellRequest { block: 1, shard: 2 }).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_bad_address_is_a_usage_error_and_an_absent_master_is_unavailable() {
        let secret = JobSecret::generate();
        let bad = client::connect_master("not an address", &secret, Timeouts::COMMAND).await.unwrap_err();
        assert_eq!(bad.category(), crate::error::Category::Usage);
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let away = client::connect_master(&format!("http://127.0.0.1:{port}"), &secret, Timeouts::COMMAND).await;
        let away = away.unwrap_err();
        assert_eq!(away.category(), crate::error::Category::Unavailable);
        assert!(away.to_string().contains("unreachable"), "{away}");
    }
}
