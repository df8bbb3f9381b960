//! `linea worker --master ADDR`: pulls work items, runs the job's kernel on the units it
//! owns, serves its peers, and survives the master coming and going.
//!
//! Life of a worker ([`session`]): connect (retrying while the master is away), join, run
//! items until released. A new master session (a restarted master) keeps the unit state
//! whose version still matches and drops everything else. SIGTERM (or a Drain) makes it
//! ask for no more work; it exits 0 once the master releases it, i.e. once the units it
//! owned have been fetched by their new owners, or after `--drain-timeout` at the latest.
//!
//! The worker knows phases, units and reductions; the algorithm is a [`DynKernel`] it
//! learns from the master ([`kernels`]).

mod aggregate;
mod allreduce;
mod cells;
pub mod grid;
pub mod handover;
mod kernels;
mod peer;
mod session;
mod unit_grid;
pub mod validate;

use crate::error::{LineaError, Result};
use crate::runtime::auth::JobSecret;
use crate::runtime::client::expect_master;
use crate::runtime::proto::{self, work_item};
use aggregate::Partial;
use grid::Grid;
use kernels::{AnyPhase, AnyState, DynKernel};
use linea_engine::algorithm::{Contribution, Reduction};
use linea_proto::client::{Expect, MasterClient, PeerClient, Timeouts};
use linea_proto::tls::{Transport, WORKER_NAME};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Status;
use tonic::transport::Channel;
use unit_grid::UnitGrid;
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
    /// TLS with the member certificate (to the master, to peers and as a peer server), or
    /// plain text (`--insecure`).
    pub transport: Transport,
    /// The name the master's certificate must carry when `master` is not one of its names
    /// (an IP, a forwarded port); `None`: the host of `master`.
    pub master_name: Option<String>,
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
    /// Merged units (a scale-in's) built from their old units' parts, and those rebuilt
    /// from storage instead (a part did not come in time or failed a check).
    pub merges: AtomicU64,
    pub merge_fallbacks: AtomicU64,
    pub part_bytes_fetched: AtomicU64,
    pub part_bytes_served: AtomicU64,
}

/// How long a worker waits for a peer's copy of a cell before also reading storage.
const HEDGE_AFTER: Duration = Duration::from_millis(50);

/// A decoded phase: decoded once per worker, not once per item.
struct PhaseData {
    /// The session (this worker's count of them, [`WorkerCore::sessions`]) the phase came
    /// in. Phase ids are not unique across sessions: a restarted master numbers its phases
    /// from 1 again.
    session: u64,
    version: u64,
    reduction: Reduction,
    mutates: bool,
    body: AnyPhase,
}

/// A unit's state and the number of state-changing phases it reflects.
struct UnitSlot {
    version: u64,
    state: AnyState,
}

type SharedUnit = Arc<Mutex<Option<UnitSlot>>>;

/// A unit base from the master: its version and bytes.
type FetchedBase = (u64, Arc<Vec<u8>>);

pub struct WorkerCore {
    id: String,
    address: String,
    options: WorkerOptions,
    grid: Mutex<Option<Arc<Grid>>>,
    /// The job's kernel, from the master's JobInfo.
    kernel: Mutex<Option<Arc<dyn DynKernel>>>,
    /// (algorithm, kernel bytes) of the job the units belong to.
    job_kernel: Mutex<(String, Vec<u8>)>,
    session: Mutex<String>,
    units: Mutex<HashMap<u32, SharedUnit>>,
    /// The units of the previous configuration, kept for the workers that merge them.
    retired: Mutex<handover::Retired>,
    partials: Mutex<HashMap<u64, Partial>>,
    /// Sessions started, counted here: an item knows the one it belongs to (see
    /// [`PhaseData::session`]).
    sessions: AtomicU64,
    /// Chunks of the tree allreduces this worker takes part in.
    boards: Arc<crate::runtime::allreduce::board::Boards>,
    phases: Mutex<HashMap<u64, Arc<PhaseData>>>,
    /// Bases fetched from the master, by the kernel's base key: (version, bytes).
    bases: Mutex<HashMap<usize, FetchedBase>>,
    channels: Mutex<HashMap<String, Channel>>,
    /// Units taken over from another worker, and that worker's address.
    peer_hints: Mutex<HashMap<usize, String>>,
    runtime: tokio::runtime::Handle,
    pool: rayon::ThreadPool,
    draining: AtomicBool,
    pub traffic: Traffic,
}

fn remote(peer: &str) -> impl Fn(Status) -> LineaError + '_ {
    move |status| crate::runtime::rpc_error(peer, &status)
}

/// Why an item failed.
enum ItemError {
    /// The job cannot go on (corrupt data, a bug): the run fails with this message.
    Fatal(String),
    /// A peer did not answer: the master redoes its part elsewhere.
    LostPeer(String),
    /// A tree allreduce was given up by a peer: the master starts it again.
    Aborted,
    /// A holder did not send its partial sums within the item's patience: the master
    /// finds it stalled and has its part computed again elsewhere.
    SlowPeer(String),
}

impl From<LineaError> for ItemError {
    fn from(e: LineaError) -> Self {
        ItemError::Fatal(e.to_string())
    }
}

impl WorkerCore {
    /// A channel to `address`, expecting `expect` there (the master's own name; for a peer,
    /// the name every worker's certificate carries).
    fn channel(&self, address: &str, expect: Expect) -> Result<Channel> {
        // A lazy channel spawns its connection task on the runtime; items run on rayon threads.
        let _runtime = self.runtime.enter();
        let mut channels = self.channels.lock().expect("channels lock");
        if let Some(c) = channels.get(address) {
            return Ok(c.clone());
        }
        let channel = linea_proto::client::lazy_channel(address, Timeouts::RUNTIME, &self.options.transport, expect)?;
        channels.insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    fn master(&self) -> Result<MasterClient> {
        Ok(linea_proto::client::master(
            self.channel(&self.options.master, expect_master(self.options.master_name.as_deref()))?,
            &self.options.secret,
        ))
    }

    fn peer(&self, address: &str) -> Result<PeerClient> {
        Ok(linea_proto::client::peer(self.channel(address, Expect::Name(WORKER_NAME))?, &self.options.secret))
    }

    /// A new session: open the grid and the kernel if they are another job's, drop partial
    /// sums, phases and fetched bases.
    fn start_session(&self, job: &proto::JobInfo) -> Result<()> {
        let loss = validate::job(job)?;
        let mut grid = self.grid.lock().expect("grid lock");
        let mut job_kernel = self.job_kernel.lock().expect("kernel lock");
        let same_kernel = job_kernel.0 == job.algorithm && job_kernel.1 == job.kernel;
        let same_grid = grid.as_ref().is_some_and(|g| g.location == job.data && g.loss == loss);
        if !same_kernel || !same_grid {
            let kernel = kernels::kernel_for(&job.algorithm, &job.kernel)?;
            // The algorithm reconfigured (a scale-in): the old units may be parts of the new
            // ones, which other workers fetch from here.
            let units = std::mem::take(&mut *self.units.lock().expect("units lock"));
            let reconfigured = same_grid && job_kernel.0 == job.algorithm;
            let old_session = self.session.lock().expect("session lock").clone();
            let old_kernel = self.kernel.lock().expect("kernel lock").clone();
            self.retire(if reconfigured { old_session } else { String::new() }, old_kernel, units);
            // Storage clients block on their own runtime; that must happen off this one.
            tokio::task::block_in_place(|| -> Result<()> {
                *grid = Some(Arc::new(Grid::open(&job.data, loss, self.options.cache_bytes)?));
                Ok(())
            })?;
            *self.kernel.lock().expect("kernel lock") = Some(kernel);
            *job_kernel = (job.algorithm.clone(), job.kernel.clone());
        }
        *self.session.lock().expect("session lock") = job.session.clone();
        {
            let mut partials = self.partials.lock().expect("partials lock");
            self.sessions.fetch_add(1, Ordering::SeqCst);
            partials.clear();
        }
        self.boards.clear();
        self.phases.lock().expect("phases lock").clear();
        self.bases.lock().expect("bases lock").clear();
        Ok(())
    }

    fn grid(&self) -> Arc<Grid> {
        self.grid.lock().expect("grid lock").clone().expect("a session opened the grid")
    }

    fn kernel(&self) -> Arc<dyn DynKernel> {
        self.kernel.lock().expect("kernel lock").clone().expect("a session chose the kernel")
    }

    fn add_phase(&self, phase: proto::Phase) -> Result<()> {
        let reduction = validate::reduction(&phase)?;
        let body = self.kernel().decode_phase(&phase.body)?;
        self.expire_retired(phase.version);
        let session = self.sessions.load(Ordering::SeqCst);
        let data = PhaseData { session, version: phase.version, reduction, mutates: phase.mutates, body };
        let mut phases = self.phases.lock().expect("phases lock");
        // Phases run one at a time; older ones are done.
        phases.retain(|&id, _| id + 2 > phase.id);
        phases.insert(phase.id, Arc::new(data));
        self.partials.lock().expect("partials lock").retain(|&id, _| id + 2 > phase.id);
        Ok(())
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
            Some(work_item::Kind::Unit(u)) => self.run_unit(item.phase, &phase, u),
            Some(work_item::Kind::Aggregate(a)) => {
                self.aggregate(item.phase, phase.reduction, a).map(|sums| (sums, Vec::new()))
            }
            Some(work_item::Kind::Tree(t)) => match self.tree_reduce(item.phase, phase.reduction, t) {
                Ok(done) => {
                    (result.digest, result.units) = (done.digest, done.units);
                    Ok((crate::runtime::wire::from_i128s(&done.total), Vec::new()))
                }
                Err(e) => Err(e),
            },
            None => Err(ItemError::Fatal("empty work item".into())),
        };
        match outcome {
            Ok((sums, payload)) => (result.sums, result.payload) = (sums, payload),
            Err(ItemError::Fatal(message)) => result.error = message,
            Err(ItemError::LostPeer(peer)) => result.lost_peer = peer,
            Err(ItemError::Aborted) => result.aborted = true,
            Err(ItemError::SlowPeer(peer)) => result.slow_peer = peer,
        }
        self.traffic.result_bytes_sent.fetch_add((result.sums.len() + result.payload.len()) as u64, Ordering::Relaxed);
        result
    }

    fn unit_grid(self: &Arc<Self>, unit: usize) -> UnitGrid<'_> {
        let peer = self.peer_hints.lock().expect("hints lock").get(&unit).cloned();
        UnitGrid { core: self, grid: self.grid(), peer }
    }

    /// Runs a phase on one unit; returns its exact sums (Sum phases) and its payload.
    fn run_unit(
        self: &Arc<Self>,
        phase_id: u64,
        phase: &PhaseData,
        item: &proto::UnitItem,
    ) -> Result<(Vec<u8>, Vec<u8>), ItemError> {
        let slot = self.unit_state(item, phase.version)?;
        let mut guard = slot.lock().expect("unit lock");
        let unit = guard.as_mut().expect("unit_state filled it");
        let kernel = self.kernel();
        let output =
            kernel.run(&phase.body, item.unit as usize, &mut unit.state, &self.unit_grid(item.unit as usize))?;
        if phase.mutates {
            unit.version += 1;
        }
        drop(guard);
        let sums = match phase.reduction {
            Reduction::None => Vec::new(),
            Reduction::Sum { len } => {
                let mut sums = vec![0i128; len];
                output.sums.add_to(&mut sums);
                crate::runtime::wire::from_i128s(&sums)
            }
            // SparseSum arrives as RangeSum (the master asks for its range sums).
            Reduction::RangeSum { len } | Reduction::AllReduce { len } | Reduction::SparseSum { len } => {
                let mut partials = self.partials.lock().expect("partials lock");
                // An item of a session that has ended (the master was restarted, or gave up
                // on this worker, while it ran) must not leave its sums among the new
                // session's: they would be added to those of a phase with the same id, and
                // its aggregator would find units it did not expect and report this worker
                // lost. The count changes under this lock, with the partials cleared.
                if self.sessions.load(Ordering::SeqCst) != phase.session {
                    return Err(ItemError::Aborted);
                }
                let partial =
                    partials.entry(phase_id).or_insert_with(|| Partial { units: Vec::new(), sums: vec![0; len] });
                if let Contribution::Dense(v) = &output.sums
                    && v.len() != len
                {
                    return Err(ItemError::Fatal(format!("unit {} returned {} sums of {len}", item.unit, v.len())));
                }
                output.sums.add_to(&mut partial.sums);
                partial.units.push(item.unit);
                Vec::new()
            }
        };
        // Added up: the kernel reuses their memory for the next unit (linea_engine::scratch).
        kernel.recycle(output.sums);
        Ok((sums, output.payload))
    }

    /// The unit's state at `version`: kept, fetched from its previous owner, merged from
    /// its old units' parts, or rebuilt.
    fn unit_state(self: &Arc<Self>, item: &proto::UnitItem, version: u64) -> Result<SharedUnit> {
        let (unit, prior) = (item.unit, item.prior_owner.as_str());
        let slot = self.units.lock().expect("units lock").entry(unit).or_default().clone();
        let mut state = slot.lock().expect("unit lock");
        if state.as_ref().is_some_and(|s| s.version == version) {
            drop(state);
            return Ok(slot);
        }
        let handed_over = !prior.is_empty() && prior != self.address;
        if handed_over {
            // Its cells are likely in the previous owner's cache too.
            self.peer_hints.lock().expect("hints lock").insert(unit as usize, prior.to_string());
        }
        let fetched = handed_over
            .then(|| self.fetch_unit(prior, unit, version))
            .and_then(|r| r.inspect_err(|e| tracing::warn!(unit, %e, "fetching unit state failed; rebuilding")).ok());
        let state_now = match fetched {
            Some(s) => s,
            None if !item.parts.is_empty() && version > 0 => {
                let base = self.base(unit as usize, version)?;
                match self.merged(unit, &base, &item.parts, &item.parts_session) {
                    Ok(merged) => {
                        self.traffic.merges.fetch_add(1, Ordering::Relaxed);
                        merged
                    }
                    Err(e) => {
                        tracing::warn!(unit, %e, "merging from the old units' holders failed; reading storage");
                        self.traffic.merge_fallbacks.fetch_add(1, Ordering::Relaxed);
                        self.kernel().restore(unit as usize, &base, &self.unit_grid(unit as usize))?
                    }
                }
            }
            None => self.rebuild(unit as usize, version)?,
        };
        *state = Some(UnitSlot { version, state: state_now });
        drop(state);
        Ok(slot)
    }

    fn fetch_unit(self: &Arc<Self>, peer: &str, unit: u32, version: u64) -> Result<AnyState> {
        let mut client = self.peer(peer)?;
        let reply = self
            .runtime
            .block_on(client.fetch_unit(proto::FetchUnitRequest { unit, version }))
            .map_err(remote(peer))?
            .into_inner();
        if reply.version != version {
            return Err(LineaError::Remote { peer: peer.into(), message: "sent state of another version".into() });
        }
        self.kernel().decode_state(unit as usize, &reply.state, &self.unit_grid(unit as usize))
    }

    /// Rebuilds a unit: fresh at version 0, else from the master's base for it.
    fn rebuild(self: &Arc<Self>, unit: usize, version: u64) -> Result<AnyState> {
        let (kernel, grid) = (self.kernel(), self.unit_grid(unit));
        if version == 0 {
            return kernel.fresh(unit, &grid);
        }
        kernel.restore(unit, &self.base(unit, version)?, &grid)
    }

    /// The master's base for `unit` at `version`, fetched once per base key.
    fn base(self: &Arc<Self>, unit: usize, version: u64) -> Result<Arc<Vec<u8>>> {
        let kernel = self.kernel();
        let key = kernel.base_key(unit);
        let cached = self.bases.lock().expect("bases lock").get(&key).filter(|b| b.0 == version).map(|b| b.1.clone());
        let base = match cached {
            Some(base) => base,
            None => {
                let mut client = self.master()?;
                let reply = self
                    .runtime
                    .block_on(client.get_unit_base(proto::GetUnitBaseRequest { unit: unit as u32 }))
                    .map_err(remote(&self.options.master))?
                    .into_inner();
                if reply.version != version {
                    return Err(LineaError::Remote {
                        peer: self.options.master.clone(),
                        message: format!("sent a base of version {} for a phase of version {version}", reply.version),
                    });
                }
                let base = Arc::new(reply.base);
                self.bases.lock().expect("bases lock").insert(key, (version, base.clone()));
                base
            }
        };
        Ok(base)
    }
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
        kernel: Mutex::new(None),
        job_kernel: Mutex::new((String::new(), Vec::new())),
        units: Mutex::new(HashMap::new()),
        retired: Mutex::default(),
        partials: Mutex::new(HashMap::new()),
        sessions: AtomicU64::new(0),
        boards: Arc::default(),
        phases: Mutex::new(HashMap::new()),
        bases: Mutex::new(HashMap::new()),
        channels: Mutex::new(HashMap::new()),
        peer_hints: Mutex::new(HashMap::new()),
        runtime: runtime.handle().clone(),
        pool,
        draining: AtomicBool::new(false),
        traffic: Traffic::default(),
        options,
    });
    let outcome = runtime.block_on(session::serve(core.clone(), listener));
    let (t, cells) = (&core.traffic, &core.grid.lock().expect("grid lock").clone());
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    tracing::info!(
        "worker {} done: {} items; cells: {} cached, {} from storage, {} from peers, {} served to peers; \
         merged units: {} from parts ({} bytes fetched), {} from storage; {} part bytes served",
        core.id,
        load(&t.items),
        cells.as_ref().map_or(0, |g| load(&g.cells.hits)),
        load(&t.cells_from_storage),
        load(&t.cells_from_peers),
        load(&t.cells_served),
        load(&t.merges),
        load(&t.part_bytes_fetched),
        load(&t.merge_fallbacks),
        load(&t.part_bytes_served),
    );
    outcome
}

fn hostname() -> String {
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "worker".into())
}
