//! `linea worker --master ADDR`: pulls work items, runs the engine's kernels on its row
//! shards, serves its peers, and survives the master coming and going.
//!
//! Life of a worker: connect (retrying while the master is away), join, run items until
//! released. A new master session (a restarted master) keeps the shard state whose
//! version still matches and drops everything else. SIGTERM (or a Drain) makes it ask
//! for no more work; it exits 0 once the master releases it, i.e. once the shards it
//! owned have been fetched by their new owners, or after `--drain-timeout` at the latest.

use super::auth::{Authenticated, JobSecret};
use super::master::MAX_MESSAGE_BYTES;
use super::proto::{self, master_message, phase, work_item, worker_message};
use super::wire;
use super::worker_state::{Grid, ModelAt, Partial, ShardState, rebuild};
use crate::error::{LineaError, Result};
use linea_engine::Loss;
use linea_engine::fixed::{Quantity, SumRange};
use linea_engine::grid::Cell;
use linea_engine::scd::{coarse, kernels};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The master's address, `http://host:port`.
    pub master: String,
    /// Where the peer service listens.
    pub listen: String,
    /// How peers reach it; default: the listen address (or `$POD_IP` with the listen port).
    pub advertise: Option<String>,
    pub threads: usize,
    pub cache_bytes: usize,
    /// How long to keep trying to reach an absent master before giving up.
    pub reconnect_for: Duration,
    /// The longest a draining worker waits to be released.
    pub drain_timeout: Duration,
    pub secret: JobSecret,
}

/// Bytes this worker moved for aggregation (benchmarks read them).
#[derive(Default)]
pub struct Traffic {
    pub partial_bytes_served: AtomicU64,
    pub partial_bytes_fetched: AtomicU64,
    pub result_bytes_sent: AtomicU64,
    pub cells_from_storage: AtomicU64,
    pub cells_from_peers: AtomicU64,
    pub cells_served: AtomicU64,
    pub items: AtomicU64,
}

/// How long a worker waits for a peer's copy of a cell before also reading storage.
const HEDGE_AFTER: Duration = Duration::from_millis(50);

/// A decoded phase: parameters parsed once per worker, not once per item.
struct PhaseData {
    version: u64,
    kind: phase::Kind,
    vectors: Vec<Vec<f64>>,
}

pub struct WorkerCore {
    id: String,
    address: String,
    options: WorkerOptions,
    grid: Mutex<Option<Arc<Grid>>>,
    session: Mutex<String>,
    shards: Mutex<HashMap<u32, Arc<Mutex<Option<ShardState>>>>>,
    partials: Mutex<HashMap<u64, Partial>>,
    phases: Mutex<HashMap<u64, Arc<PhaseData>>>,
    model: Mutex<Option<Arc<ModelAt>>>,
    channels: Mutex<HashMap<String, Channel>>,
    /// Shards taken over from another worker, and that worker's address.
    peer_hints: Mutex<HashMap<usize, String>>,
    runtime: tokio::runtime::Handle,
    pool: rayon::ThreadPool,
    draining: AtomicBool,
    pub traffic: Traffic,
}

fn remote(peer: &str) -> impl Fn(Status) -> LineaError + '_ {
    move |status| super::rpc_error(peer, &status)
}

impl WorkerCore {
    fn channel(&self, address: &str) -> Result<Channel> {
        // A lazy channel spawns its connection task on the runtime; items run on rayon threads.
        let _runtime = self.runtime.enter();
        let mut channels = self.channels.lock().expect("channels lock");
        if let Some(c) = channels.get(address) {
            return Ok(c.clone());
        }
        let channel = Endpoint::from_shared(address.to_string())
            .map_err(|e| LineaError::Usage(format!("{address}: not a valid address: {e}")))?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .connect_lazy();
        channels.insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    fn master(&self) -> Result<proto::master_client::MasterClient<Authenticated>> {
        let client = proto::master_client::MasterClient::with_interceptor(
            self.channel(&self.options.master)?,
            self.options.secret.attach(),
        );
        Ok(client.max_decoding_message_size(MAX_MESSAGE_BYTES).max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    fn peer(&self, address: &str) -> Result<proto::peer_client::PeerClient<Authenticated>> {
        let client =
            proto::peer_client::PeerClient::with_interceptor(self.channel(address)?, self.options.secret.attach());
        Ok(client.max_decoding_message_size(MAX_MESSAGE_BYTES).max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// A new session: open the grid if it is another one, drop partial sums and phases.
    fn start_session(&self, job: &proto::JobInfo) -> Result<()> {
        let loss = match job.loss.as_str() {
            "squared" => Loss::Squared,
            "logistic" => Loss::Logistic,
            other => return Err(LineaError::Usage(format!("the master asked for an unknown loss {other:?}"))),
        };
        let mut grid = self.grid.lock().expect("grid lock");
        if grid.as_ref().is_none_or(|g| g.location != job.data || g.loss != loss) {
            // Storage clients block on their own runtime; that must happen off this one.
            tokio::task::block_in_place(|| -> Result<()> {
                *grid = Some(Arc::new(Grid::open(&job.data, loss, self.options.cache_bytes)?));
                Ok(())
            })?;
            self.shards.lock().expect("shards lock").clear();
        }
        *self.session.lock().expect("session lock") = job.session.clone();
        self.partials.lock().expect("partials lock").clear();
        self.phases.lock().expect("phases lock").clear();
        Ok(())
    }

    fn grid(&self) -> Arc<Grid> {
        self.grid.lock().expect("grid lock").clone().expect("a session opened the grid")
    }

    fn add_phase(&self, phase: proto::Phase) {
        let Some(kind) = phase.kind else { return };
        let vectors = match &kind {
            phase::Kind::Direction(d) => vec![wire::f64s(&d.delta)],
            phase::Kind::Update(u) => vec![wire::f64s(&u.old), wire::f64s(&u.new)],
            phase::Kind::CoarseDirection(c) => vec![wire::f64s(&c.t)],
            _ => Vec::new(),
        };
        let mut phases = self.phases.lock().expect("phases lock");
        // Phases run one at a time; older ones are done.
        phases.retain(|&id, _| id + 2 > phase.id);
        phases.insert(phase.id, Arc::new(PhaseData { version: phase.version, kind, vectors }));
        self.partials.lock().expect("partials lock").retain(|&id, _| id + 2 > phase.id);
    }

    /// Runs one item; the result says what went wrong instead of failing.
    fn execute(self: &Arc<Self>, item: &proto::WorkItem) -> proto::ItemResult {
        self.traffic.items.fetch_add(1, Ordering::Relaxed);
        let mut result = proto::ItemResult { item: item.id, ..Default::default() };
        let phase = self.phases.lock().expect("phases lock").get(&item.phase).cloned();
        let Some(phase) = phase else {
            result.error = format!("item {} of unknown phase {}", item.id, item.phase);
            return result;
        };
        let outcome = match &item.kind {
            Some(work_item::Kind::Shard(s)) => self.run_shard(item.phase, &phase, s),
            Some(work_item::Kind::Aggregate(a)) => self.aggregate(item.phase, a),
            None => Err(ItemError::Fatal("empty work item".into())),
        };
        match outcome {
            Ok(sums) => result.sums = sums,
            Err(ItemError::Fatal(message)) => result.error = message,
            Err(ItemError::LostPeer(peer)) => result.lost_peer = peer,
        }
        self.traffic.result_bytes_sent.fetch_add(result.sums.len() as u64, Ordering::Relaxed);
        result
    }

    /// The shard's state at `version`: kept, fetched from its previous owner, or rebuilt.
    fn shard_state(&self, shard: u32, version: u64, prior: &str) -> Result<Arc<Mutex<Option<ShardState>>>> {
        let slot = self.shards.lock().expect("shards lock").entry(shard).or_default().clone();
        let mut state = slot.lock().expect("shard lock");
        if state.as_ref().is_some_and(|s| s.version == version) {
            drop(state);
            return Ok(slot);
        }
        let handed_over = !prior.is_empty() && prior != self.address;
        if handed_over {
            // Its cells are likely in the previous owner's cache too.
            self.peer_hints.lock().expect("hints lock").insert(shard as usize, prior.to_string());
        }
        let fetched = handed_over
            .then(|| self.fetch_shard(prior, shard, version))
            .and_then(|r| r.inspect_err(|e| tracing::warn!(shard, %e, "fetching shard state failed; rebuilding")).ok());
        *state = Some(match fetched {
            Some(s) => s,
            None => self.rebuild(shard as usize, version)?,
        });
        drop(state);
        Ok(slot)
    }

    fn fetch_shard(&self, peer: &str, shard: u32, version: u64) -> Result<ShardState> {
        let mut client = self.peer(peer)?;
        let reply = self
            .runtime
            .block_on(client.fetch_shard(proto::FetchShardRequest { shard, version }))
            .map_err(remote(peer))?
            .into_inner();
        let state = ShardState {
            version: reply.version,
            predictions: wire::i64s(&reply.predictions),
            snapshots: reply.snapshots.iter().map(|s| wire::i64s(s)).collect(),
        };
        if state.version != version || state.predictions.len() != self.grid().rows(shard as usize) {
            return Err(LineaError::Remote { peer: peer.into(), message: "sent state of another version".into() });
        }
        Ok(state)
    }

    fn rebuild(&self, shard: usize, version: u64) -> Result<ShardState> {
        let grid = self.grid();
        if version == 0 {
            // Nothing trained yet: every prediction is 0 and there are no snapshots.
            return Ok(ShardState { version, predictions: vec![0; grid.rows(shard)], snapshots: Vec::new() });
        }
        let cached = self.model.lock().expect("model lock").clone().filter(|m| m.version == version);
        let model = match cached {
            Some(m) => m,
            None => {
                let mut client = self.master()?;
                let reply = self
                    .runtime
                    .block_on(client.get_model(proto::GetModelRequest {}))
                    .map_err(remote(&self.options.master))?
                    .into_inner();
                let blocks = |theta: &[Vec<u8>]| theta.iter().map(|b| wire::f64s(b)).collect::<Vec<_>>();
                let model = Arc::new(ModelAt {
                    version: reply.version,
                    theta: blocks(&reply.theta),
                    snapshots: reply.snapshots.iter().map(|s| blocks(&s.theta)).collect(),
                });
                *self.model.lock().expect("model lock") = Some(model.clone());
                model
            }
        };
        if model.version != version {
            return Err(LineaError::Remote {
                peer: self.options.master.clone(),
                message: format!("sent model version {} for a phase of version {version}", model.version),
            });
        }
        rebuild(grid.rows(shard), grid.manifest.blocks.len(), &model, |block| self.cell(block, shard))
    }

    fn run_shard(
        self: &Arc<Self>,
        phase_id: u64,
        phase: &PhaseData,
        item: &proto::ShardItem,
    ) -> Result<Vec<u8>, ItemError> {
        let grid = self.grid();
        let shard = item.shard as usize;
        let slot = self.shard_state(item.shard, phase.version, &item.prior_owner)?;
        let mut guard = slot.lock().expect("shard lock");
        let state = guard.as_mut().expect("shard_state filled it");
        let targets = grid.targets(shard)?;
        let loss = grid.loss;
        let all_cells = |blocks: bool| -> Result<Vec<Arc<linea_engine::grid::Cell>>> {
            if !blocks {
                return Ok(Vec::new());
            }
            (0..grid.manifest.blocks.len()).map(|b| self.cell(b, shard)).collect()
        };
        let range = SumRange::for_partials(grid.manifest.shards.len());
        let exact = |quantity, partial: Vec<f64>| -> Result<Vec<u8>, ItemError> {
            Ok(wire::from_i128s(&range.exact(quantity, &partial)?.sums))
        };
        Ok(match &phase.kind {
            phase::Kind::Statistics(s) => {
                let cell = self.cell(s.block as usize, shard)?;
                if let Some(next) = s.next_block {
                    self.prefetch(next as usize, shard);
                }
                let local = kernels::cell_statistics(&cell, &targets, &state.predictions, loss);
                let features = s.features as usize;
                let mut partials = self.partials.lock().expect("partials lock");
                let partial = partials.entry(phase_id).or_insert_with(|| Partial {
                    shards: Vec::new(),
                    gradient: vec![0; features],
                    curvature: vec![0; features],
                });
                kernels::accumulate_statistics(&range, &cell, local, &mut partial.gradient, &mut partial.curvature)?;
                partial.shards.push(item.shard);
                Vec::new()
            }
            phase::Kind::Direction(d) => {
                let cell = self.cell(d.block as usize, shard)?;
                let sums = kernels::cell_direction_sums(&cell, &phase.vectors[0], &targets, &state.predictions, loss);
                exact(Quantity::LineSearch, sums)?
            }
            phase::Kind::Update(u) => {
                let cell = self.cell(u.block as usize, shard)?;
                kernels::cell_update_predictions(&cell, &phase.vectors[0], &phase.vectors[1], &mut state.predictions);
                state.version += 1;
                Vec::new()
            }
            phase::Kind::Loss(_) => {
                wire::from_i128s(&[kernels::shard_loss_sum(&range, &targets, &state.predictions, loss)?])
            }
            phase::Kind::Snapshot(s) => {
                state.snapshots.push(state.predictions.clone());
                if state.snapshots.len() > s.keep as usize {
                    state.snapshots.remove(0);
                }
                state.version += 1;
                Vec::new()
            }
            phase::Kind::CoarseStatistics(c) => {
                let cells = all_cells(c.blocks)?;
                let cells: Vec<&linea_engine::grid::Cell> = cells.iter().map(|c| c.as_ref()).collect();
                let snapshots: Vec<&[i64]> = state.snapshots.iter().map(Vec::as_slice).collect();
                let hessian = coarse::takes_hessian(shard, c.hessian_stride as usize);
                let sums =
                    coarse::shard_coarse_statistics(&cells, &snapshots, &targets, &state.predictions, loss, hessian);
                exact(Quantity::Coarse, sums)?
            }
            phase::Kind::CoarseDirection(c) => {
                let cells = all_cells(c.blocks)?;
                let cells: Vec<&linea_engine::grid::Cell> = cells.iter().map(|c| c.as_ref()).collect();
                let snapshots: Vec<&[i64]> = state.snapshots.iter().map(Vec::as_slice).collect();
                let t = &phase.vectors[0];
                let sums =
                    coarse::shard_coarse_direction_sums(&cells, &snapshots, t, &targets, &state.predictions, loss);
                exact(Quantity::LineSearch, sums)?
            }
        })
    }

    /// Loads the next block's cell of a shard in the background, so the next statistics
    /// item finds it in the cache.
    fn prefetch(self: &Arc<Self>, block: usize, shard: usize) {
        let core = self.clone();
        self.runtime.spawn_blocking(move || {
            if let Err(e) = core.cell(block, shard) {
                tracing::debug!(block, shard, %e, "prefetch failed; the item will read it again");
            }
        });
    }

    /// A cell: from the cache, else from the shard's previous owner (if it was handed
    /// over) hedged by a storage read, else from storage.
    fn cell(&self, block: usize, shard: usize) -> Result<Arc<Cell>> {
        let grid = self.grid();
        if let Some(cell) = grid.cells.get((block, shard)) {
            return Ok(cell);
        }
        let peer = self.peer_hints.lock().expect("hints lock").get(&shard).cloned();
        let bytes = match peer {
            Some(peer) => self.hedged_cell_bytes(&grid, &peer, block, shard)?,
            None => {
                self.traffic.cells_from_storage.fetch_add(1, Ordering::Relaxed);
                grid.read_cell_bytes(block, shard)?
            }
        };
        let cell = Arc::new(grid.decode_cell(block, shard, &bytes)?);
        grid.cells.insert((block, shard), cell.clone(), Arc::new(bytes));
        Ok(cell)
    }

    /// Asks `peer` for a cell's bytes; if it has not answered after [`HEDGE_AFTER`] (or
    /// cannot help), reads storage too; the first good answer wins, the other is dropped.
    /// Peer bytes are checked against the manifest's checksum like storage bytes.
    fn hedged_cell_bytes(&self, grid: &Arc<Grid>, peer: &str, block: usize, shard: usize) -> Result<Vec<u8>> {
        let (answers, answer) = std::sync::mpsc::channel::<(bool, Result<Vec<u8>>)>();
        let mut client = self.peer(peer)?;
        let to_us = answers.clone();
        let (peer_name, request) =
            (peer.to_string(), proto::FetchCellRequest { block: block as u32, shard: shard as u32 });
        let asking = self.runtime.spawn(async move {
            let reply = client.fetch_cell(request).await;
            let _ = to_us.send((true, reply.map(|r| r.into_inner().compressed).map_err(remote(&peer_name))));
        });
        let expected = grid.manifest.blocks[block].cells[shard].crc32c;
        let read_storage = || {
            let (grid, to_us) = (grid.clone(), answers.clone());
            std::thread::spawn(move || {
                let _ = to_us.send((false, grid.read_cell_bytes(block, shard)));
            });
        };
        let mut storage_asked = false;
        loop {
            let (from_peer, result) = match answer.recv_timeout(HEDGE_AFTER) {
                Ok(received) => received,
                Err(_) if !storage_asked => {
                    storage_asked = true;
                    read_storage();
                    continue;
                }
                Err(_) => continue,
            };
            match (from_peer, result) {
                (true, Ok(bytes)) if linea_engine::codec::checksum(&bytes) == expected => {
                    self.traffic.cells_from_peers.fetch_add(1, Ordering::Relaxed);
                    return Ok(bytes);
                }
                (true, outcome) => {
                    if let Err(LineaError::Remote { message, .. }) = &outcome
                        && message.contains("unreachable")
                    {
                        self.peer_hints.lock().expect("hints lock").retain(|_, p| p != peer);
                    }
                    if !storage_asked {
                        storage_asked = true;
                        read_storage();
                    }
                }
                (false, outcome) => {
                    asking.abort();
                    self.traffic.cells_from_storage.fetch_add(1, Ordering::Relaxed);
                    return outcome;
                }
            }
        }
    }

    /// Sums range `[begin, end)` of a statistics phase over every source's partial.
    fn aggregate(&self, phase_id: u64, item: &proto::AggregateItem) -> Result<Vec<u8>, ItemError> {
        let (begin, end) = (item.begin as usize, item.end as usize);
        let (mut g, mut h) = (vec![0i128; end - begin], vec![0i128; end - begin]);
        let session = self.session.lock().expect("session lock").clone();
        for source in &item.sources {
            let partial = if source.address == self.address {
                self.local_partial(phase_id, begin, end)
            } else {
                let request = proto::FetchPartialRequest {
                    session: session.clone(),
                    phase: phase_id,
                    begin: begin as u32,
                    end: end as u32,
                };
                let mut client = self.peer(&source.address)?;
                match self.runtime.block_on(client.fetch_partial(request)) {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        let bytes = (reply.gradient.len() + reply.curvature.len()) as u64;
                        self.traffic.partial_bytes_fetched.fetch_add(bytes, Ordering::Relaxed);
                        Some(Partial {
                            shards: reply.shards,
                            gradient: wire::i128s(&reply.gradient),
                            curvature: wire::i128s(&reply.curvature),
                        })
                    }
                    Err(status) => {
                        tracing::warn!(peer = %source.address, %status, "partial statistics unavailable");
                        None
                    }
                }
            };
            let mut expected = source.shards.clone();
            expected.sort_unstable();
            let Some(mut partial) = partial.filter(|p| p.gradient.len() == end - begin) else {
                return Err(ItemError::LostPeer(source.address.clone()));
            };
            partial.shards.sort_unstable();
            if partial.shards != expected {
                return Err(ItemError::LostPeer(source.address.clone()));
            }
            for (a, b) in g.iter_mut().zip(&partial.gradient) {
                *a = a.wrapping_add(*b);
            }
            for (a, b) in h.iter_mut().zip(&partial.curvature) {
                *a = a.wrapping_add(*b);
            }
        }
        g.extend(h);
        Ok(wire::from_i128s(&g))
    }

    fn local_partial(&self, phase: u64, begin: usize, end: usize) -> Option<Partial> {
        let partials = self.partials.lock().expect("partials lock");
        let p = partials.get(&phase)?;
        (end <= p.gradient.len()).then(|| Partial {
            shards: p.shards.clone(),
            gradient: p.gradient[begin..end].to_vec(),
            curvature: p.curvature[begin..end].to_vec(),
        })
    }
}

enum ItemError {
    /// The job cannot go on (corrupt data, a bug): the run fails with this message.
    Fatal(String),
    /// A peer did not answer: the master redoes its part elsewhere.
    LostPeer(String),
}

impl From<linea_engine::EngineError> for ItemError {
    fn from(e: linea_engine::EngineError) -> Self {
        ItemError::Fatal(e.to_string())
    }
}

impl From<LineaError> for ItemError {
    fn from(e: LineaError) -> Self {
        ItemError::Fatal(e.to_string())
    }
}

struct PeerService {
    core: Arc<WorkerCore>,
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
            .ok_or_else(|| Status::not_found(format!("no partial statistics of phase {}", r.phase)))?;
        let reply = proto::Partial {
            shards: p.shards,
            gradient: wire::from_i128s(&p.gradient),
            curvature: wire::from_i128s(&p.curvature),
        };
        let bytes = (reply.gradient.len() + reply.curvature.len()) as u64;
        self.core.traffic.partial_bytes_served.fetch_add(bytes, Ordering::Relaxed);
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

    async fn fetch_shard(
        &self,
        request: Request<proto::FetchShardRequest>,
    ) -> Result<Response<proto::ShardState>, Status> {
        let r = request.into_inner();
        let slot = self.core.shards.lock().expect("shards lock").get(&r.shard).cloned();
        let state = slot.and_then(|s| s.lock().expect("shard lock").clone()).filter(|s| s.version == r.version);
        let state = state
            .ok_or_else(|| Status::not_found(format!("no state of shard {} at version {}", r.shard, r.version)))?;
        Ok(Response::new(proto::ShardState {
            version: state.version,
            predictions: wire::from_i64s(&state.predictions),
            snapshots: state.snapshots.iter().map(|s| wire::from_i64s(s)).collect(),
        }))
    }
}

/// How a session with the master ended.
enum SessionEnd {
    Released,
    /// The master refused this worker (wrong secret): retrying cannot help.
    Refused(LineaError),
    /// The connection failed or dropped; `joined` if the master had taken the worker in.
    Lost {
        error: LineaError,
        joined: bool,
    },
}

/// Runs a worker until the master releases it. Blocks; owns its tokio runtime.
pub fn run(options: WorkerOptions) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("linea-worker-io")
        .enable_all()
        .build()
        .map_err(LineaError::io("tokio runtime"))?;
    let listener =
        runtime.block_on(tokio::net::TcpListener::bind(&options.listen)).map_err(LineaError::io(&options.listen))?;
    let bound = listener.local_addr().map_err(LineaError::io(&options.listen))?;
    let address = match &options.advertise {
        Some(a) => a.clone(),
        None if bound.ip().is_unspecified() => match std::env::var("POD_IP") {
            Ok(ip) => format!("http://{ip}:{}", bound.port()),
            Err(_) => return Err(LineaError::Usage("listening on all interfaces needs --advertise or $POD_IP".into())),
        },
        None => format!("http://{bound}"),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads.max(1))
        .thread_name(|i| format!("linea-worker-{i}"))
        .build()
        .map_err(|e| LineaError::Usage(format!("thread pool: {e}")))?;
    let core = Arc::new(WorkerCore {
        id: format!("{}-{:08x}", hostname(), rand::random::<u32>()),
        address,
        grid: Mutex::new(None),
        session: Mutex::new(String::new()),
        shards: Mutex::new(HashMap::new()),
        partials: Mutex::new(HashMap::new()),
        phases: Mutex::new(HashMap::new()),
        model: Mutex::new(None),
        channels: Mutex::new(HashMap::new()),
        peer_hints: Mutex::new(HashMap::new()),
        runtime: runtime.handle().clone(),
        pool,
        draining: AtomicBool::new(false),
        traffic: Traffic::default(),
        options,
    });
    let outcome = runtime.block_on(serve(core.clone(), listener));
    let (t, cells) = (&core.traffic, &core.grid.lock().expect("grid lock").clone());
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    tracing::info!(
        "worker {} done: {} items; cells: {} cached, {} from storage, {} from peers, {} served to peers",
        core.id,
        load(&t.items),
        cells.as_ref().map_or(0, |g| load(&g.cells.hits)),
        load(&t.cells_from_storage),
        load(&t.cells_from_peers),
        load(&t.cells_served),
    );
    outcome
}

fn hostname() -> String {
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "worker".into())
}

async fn serve(core: Arc<WorkerCore>, listener: tokio::net::TcpListener) -> Result<()> {
    let peer = tonic::service::interceptor::InterceptedService::new(
        proto::peer_server::PeerServer::new(PeerService { core: core.clone() })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        core.options.secret.check(),
    );
    tokio::spawn(tonic::transport::Server::builder().add_service(peer).serve_with_incoming(super::incoming(listener)));
    let terminate = Arc::new(tokio::sync::Notify::new());
    spawn_signal_watch(terminate.clone());
    tracing::info!(id = %core.id, address = %core.address, master = %core.options.master, "worker starting");
    let mut last_contact = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut drain_started: Option<Instant> = None;
    loop {
        match session(&core, &terminate, &mut drain_started).await {
            SessionEnd::Released => {
                tracing::info!(id = %core.id, "released by the master");
                return Ok(());
            }
            SessionEnd::Refused(e) => return Err(e),
            SessionEnd::Lost { error: e, joined } => {
                if joined {
                    // Contact counts from the last session the master accepted.
                    last_contact = Instant::now();
                    delay = Duration::from_millis(50);
                }
                if core.draining.load(Ordering::SeqCst) {
                    // Draining with no master to hand over to: nothing more to do.
                    return Ok(());
                }
                if last_contact.elapsed() > core.options.reconnect_for {
                    return Err(LineaError::Remote {
                        peer: core.options.master.clone(),
                        message: format!("{e}; gave up after {:.0}s", core.options.reconnect_for.as_secs_f64()),
                    });
                }
                tracing::debug!(%e, "master unavailable; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = terminate.notified() => { core.draining.store(true, Ordering::SeqCst); return Ok(()); }
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn spawn_signal_watch(terminate: Arc<tokio::sync::Notify>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            terminate.notify_one();
        }
    });
}

async fn session(
    core: &Arc<WorkerCore>,
    terminate: &tokio::sync::Notify,
    drain_started: &mut Option<Instant>,
) -> SessionEnd {
    let mut joined = false;
    let lost = |status: &Status, joined: bool| match status.code() {
        tonic::Code::Unauthenticated => SessionEnd::Refused(super::rpc_error(&core.options.master, status)),
        _ => SessionEnd::Lost { error: super::rpc_error(&core.options.master, status), joined },
    };
    let disconnected = |error: LineaError, joined: bool| SessionEnd::Lost { error, joined };
    let mut client = match core.master() {
        Ok(c) => c,
        Err(e) => return disconnected(e, false),
    };
    let (outbound, messages) = unbounded_channel::<proto::WorkerMessage>();
    let send = |out: &UnboundedSender<proto::WorkerMessage>, body| {
        let _ = out.send(proto::WorkerMessage { body: Some(body) });
    };
    let join =
        proto::Join { worker_id: core.id.clone(), address: core.address.clone(), threads: core.options.threads as u32 };
    send(&outbound, worker_message::Body::Join(join));
    if core.draining.load(Ordering::SeqCst) {
        send(&outbound, worker_message::Body::Leave(proto::Leave {}));
    }
    let mut inbound = match client.work(UnboundedReceiverStream::new(messages)).await {
        Ok(r) => r.into_inner(),
        Err(status) => return lost(&status, false),
    };
    let (results, mut completed) = unbounded_channel::<proto::ItemResult>();
    let drain_deadline = |started: &Option<Instant>| {
        let remaining = started.map(|s| core.options.drain_timeout.saturating_sub(s.elapsed()));
        async move {
            match remaining {
                Some(r) => tokio::time::sleep(r).await,
                None => std::future::pending().await,
            }
        }
    };
    loop {
        tokio::select! {
            message = inbound.message() => {
                let body = match message {
                    Ok(Some(proto::MasterMessage { body: Some(body) })) => body,
                    Ok(Some(_)) => continue,
                    Ok(None) => return disconnected(LineaError::Remote { peer: core.options.master.clone(), message: "ended the session".into() }, joined),
                    Err(status) => return lost(&status, joined),
                };
                match body {
                    master_message::Body::Job(job) => {
                        if let Err(e) = core.start_session(&job) {
                            tracing::error!(%e, "cannot open the job's data");
                            return disconnected(e, false);
                        }
                        joined = true;
                    }
                    master_message::Body::Assignment(assignment) => {
                        for phase in assignment.phases {
                            core.add_phase(phase);
                        }
                        for item in assignment.items {
                            let (core2, results) = (core.clone(), results.clone());
                            core.pool.spawn(move || {
                                let _ = results.send(core2.execute(&item));
                            });
                        }
                    }
                    master_message::Body::Drain(_) => {
                        core.draining.store(true, Ordering::SeqCst);
                        drain_started.get_or_insert_with(Instant::now);
                    }
                    master_message::Body::Release(_) => return SessionEnd::Released,
                }
            }
            Some(first) = completed.recv() => {
                let mut batch = vec![first];
                while let Ok(more) = completed.try_recv() {
                    batch.push(more);
                }
                send(&outbound, worker_message::Body::Completed(proto::Completed { results: batch }));
            }
            _ = terminate.notified() => {
                tracing::info!(id = %core.id, "SIGTERM: draining");
                core.draining.store(true, Ordering::SeqCst);
                drain_started.get_or_insert_with(Instant::now);
                send(&outbound, worker_message::Body::Leave(proto::Leave {}));
            }
            _ = drain_deadline(drain_started) => {
                tracing::warn!(id = %core.id, "drain timeout: leaving before the master released this worker");
                return SessionEnd::Released;
            }
        }
    }
}
