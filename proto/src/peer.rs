//! The `Peer` service every worker serves: its partial sums for aggregators, the state of
//! units it hands over, and cells from its cache.
//!
//! The service is the protocol (session check, what is NOT_FOUND); what a worker holds is
//! a [`PeerBackend`]. The worker implements it over its real state; the runtime benchmark's
//! simulated workers over empty sums, so they serve this same service.

use crate::v1::{self, peer_server::Peer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// A chunk of a tree allreduce, once it is ready.
pub type ChunkFuture = Pin<Box<dyn Future<Output = Result<v1::ReduceChunk, Status>> + Send>>;

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
    /// What a merge needs of `unit` as this worker held it in master session `session`
    /// (an earlier configuration's unit, kept for the worker that merges it), with its
    /// checksum; `None` if it holds none.
    fn part(&self, _session: &str, _unit: u32) -> Option<v1::UnitPart> {
        None
    }
    /// A chunk of a tree allreduce (the session already checked), waiting until it is
    /// ready; a backend that takes part in none answers UNIMPLEMENTED.
    fn chunk(&self, _request: v1::FetchChunkRequest) -> ChunkFuture {
        Box::pin(async { Err(Status::unimplemented("this peer takes part in no allreduce")) })
    }
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

    async fn fetch_chunk(&self, request: Request<v1::FetchChunkRequest>) -> Result<Response<v1::ReduceChunk>, Status> {
        let r = request.into_inner();
        if !self.backend.in_session(&r.session) {
            return Err(Status::not_found("allreduce of another master session"));
        }
        Ok(Response::new(self.backend.chunk(r).await?))
    }

    async fn fetch_unit(&self, request: Request<v1::FetchUnitRequest>) -> Result<Response<v1::UnitState>, Status> {
        let r = request.into_inner();
        let state = self.backend.unit_state(r.unit, r.version);
        let state =
            state.ok_or_else(|| Status::not_found(format!("no state of unit {} at version {}", r.unit, r.version)))?;
        Ok(Response::new(v1::UnitState { version: r.version, state }))
    }

    async fn fetch_part(&self, request: Request<v1::FetchPartRequest>) -> Result<Response<v1::UnitPart>, Status> {
        let r = request.into_inner();
        let part = self.backend.part(&r.session, r.unit);
        let part =
            part.ok_or_else(|| Status::not_found(format!("no part of unit {} of session {}", r.unit, r.session)))?;
        Ok(Response::new(part))
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
    use crate::client::{self, Expect, Timeouts};
    use crate::tls::{JobCertificates, Role, Tls, Transport, WORKER_NAME, refusal};

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

    /// Serves the Peer service over `Fixed` on loopback with `transport`; returns its address.
    async fn serve(secret: &JobSecret, transport: &Transport) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let service = crate::server::peer(Arc::new(Fixed), secret);
        let server = crate::server::builder(transport).unwrap().add_service(service);
        tokio::spawn(server.serve_with_incoming(crate::server::incoming(listener)));
        address
    }

    fn job(name: &str) -> JobCertificates {
        JobCertificates::generate(name, &["127.0.0.1".into()]).unwrap()
    }

    fn member(certs: &JobCertificates) -> Transport {
        Transport::Tls(certs.tls(Role::Member).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_peer_service_serves_its_backend_to_holders_of_the_secret() {
        let secret = JobSecret::generate();
        let certs = job("peer");
        let address = serve(&secret, &member(&certs)).await;
        let channel = client::channel(&address, Timeouts::COMMAND, &member(&certs), Expect::Name(WORKER_NAME)).await;
        let channel = channel.unwrap();
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

        // The job's certificate but not its secret: TLS lets it in, the secret does not.
        let mut intruder = client::peer(channel, &JobSecret::generate());
        let refused = intruder.fetch_cell(v1::FetchCellRequest { block: 1, shard: 2 }).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    }

    /// One call with the job's secret over `transport`: the error and whether [`refusal`]
    /// calls it a refusal, or None if it worked.
    async fn call(address: &str, secret: &JobSecret, transport: &Transport) -> Option<(String, bool)> {
        let channel = match client::channel(address, Timeouts::COMMAND, transport, Expect::Name(WORKER_NAME)).await {
            Ok(channel) => channel,
            Err(crate::ProtoError::Unreachable { source, .. }) => {
                return Some((crate::error::chain(&source), refusal(&source).is_some()));
            }
            Err(e) => panic!("{e}"),
        };
        let mut peer = client::peer(channel, secret);
        let status = peer.fetch_cell(v1::FetchCellRequest { block: 1, shard: 2 }).await.err()?;
        Some((crate::error::chain(&status), refusal(&status).is_some()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn only_holders_of_the_jobs_certificate_get_through() {
        let secret = JobSecret::generate();
        let certs = job("job");
        let address = serve(&secret, &member(&certs)).await;
        assert_eq!(call(&address, &secret, &member(&certs)).await, None, "the job's own certificate");
        // The right CA but no certificate of one's own: the server wants one.
        let anonymous = Transport::Tls(Tls::without_identity(&certs.ca_cert));
        // In TLS 1.3 the client's handshake ends before the server checks its certificate, so
        // the client sees either the server's alert (a refusal, not retried) or, when the
        // server's close overtakes its first request, a broken connection. Either way no
        // call gets through.
        let (refused, permanent) = call(&address, &secret, &anonymous).await.expect("no client certificate");
        let alert = refused.contains("CertificateRequired") && permanent;
        let hung_up = ["transport error", "broken pipe", "connection reset"].iter().any(|s| refused.contains(s));
        assert!(alert || hung_up, "{refused}");
        // Another job's certificates: the client does not trust the server's CA (nor it the client's).
        let (refused, permanent) = call(&address, &secret, &member(&job("other"))).await.expect("another CA");
        assert!(refused.contains("invalid peer certificate: UnknownIssuer") && permanent, "{refused}");
        // Plain text to a TLS server: the server hangs up.
        let (refused, _) = call(&address, &secret, &Transport::Plaintext).await.expect("plain text");
        assert!(refused.contains("transport error"), "{refused}");
        // And TLS to a plain-text server fails too: no downgrade either way.
        let plain = serve(&secret, &Transport::Plaintext).await;
        assert_eq!(call(&plain, &secret, &Transport::Plaintext).await, None);
        assert!(call(&plain, &secret, &member(&certs)).await.is_some(), "TLS to a plain-text server");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_bad_address_is_a_usage_error_and_an_absent_master_is_unavailable() {
        let secret = JobSecret::generate();
        let transport = member(&job("j"));
        let bad = client::connect_master("not an address", &secret, &transport, Expect::Host, Timeouts::COMMAND).await;
        assert_eq!(bad.unwrap_err().category(), crate::error::Category::Usage);
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let address = format!("http://127.0.0.1:{port}");
        let away = client::connect_master(&address, &secret, &transport, Expect::Host, Timeouts::COMMAND).await;
        let away = away.unwrap_err();
        assert_eq!(away.category(), crate::error::Category::Unavailable);
        assert!(away.to_string().contains("unreachable"), "{away}");
    }
}
