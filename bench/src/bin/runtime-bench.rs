//! The distributed runtime's master under load: `runtime-bench [--workers 1,2,...,64]
//! [--threads 1,8] [--quick] [--only throughput,barrier,aggregation,balance]`, run by
//! bench/runtime-bench.sh; results in docs/benchmarks/runtime.md.
//!
//! The master is the real one (`runtime::master::Server`: its gRPC service, hub and
//! scheduler on their own tokio runtime), driven from this thread through its
//! `RemoteRunner` with SCD's phases, exactly as `linea master` drives it. The workers are simulated: light
//! tokio tasks on a second runtime that speak the real protocol over loopback gRPC — Work
//! stream (Join, then Completed batches), and the worker's own Peer service
//! (`linea_proto::peer::PeerService`, behind the job secret) over a no-op backend — but do
//! no arithmetic: shard items are answered at once (zero sums of the right length), a
//! statistics item only records which shards the worker's partial holds, FetchPartial
//! answers zeros of the requested range, and an aggregation item really fetches every
//! remote source's range over gRPC (its own partial is read locally, as the real worker
//! does) and returns gradient||curvature sums of the right length.
//!
//! Measured, for every worker count W:
//! 1. throughput: `loss_sum` phases of max(16 W, 256) shard items (about 300,000 items
//!    per configuration, 200 to 1,200 phases, after 5 warm-up phases); items/s = items
//!    completed / wall time;
//! 2. barrier: 1,000 `loss_sum` phases with shards = W (after 20 warm-up phases); wall
//!    time per phase (median, p99) — the per-iteration synchronisation cost, since the
//!    items themselves take no time;
//! 3. aggregation traffic: `statistics` phases of one block of 262,144 features (64
//!    ranges of 4,096) with shards = 4 W; per-worker bytes (partials served + partials
//!    fetched + result sums sent to the master) and what the master received, per phase
//!    (8 phases up to 16 workers, 4 above, after one warm-up phase).
//! 4. load balance (evidence, not a target): 8 workers of one thread, 8 shards whose
//!    items take 5 ms each on the worker's single execution slot.
//!
//! `--quick` cuts every count (about a fifth). A benchmark, not a test: it prints tables,
//! it asserts nothing.

use linea_engine::Loss;
use linea_engine::algorithm::{PhaseRequest, Reduction, Runner};
use linea_engine::fixed::ExactSums;
use linea_engine::scd::kernel::{ScdKernel, ScdParameters, ScdPhase};
use linea_proto::auth::JobSecret;
use linea_proto::client::{Expect, PeerClient, Timeouts};
use linea_proto::peer::PeerBackend;
use linea_proto::tls::{JobCertificates, Role, Transport, WORKER_NAME};
use linea_proto::v1::{self as proto, master_message, work_item, worker_message};
use linea_worker::runtime::master::{Job, RemoteRunner, Server};
use prost::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

const AGG_FEATURES: usize = 262_144;

/// The master's side of the phases the benchmark runs.
trait Phases {
    fn loss_sum(&mut self) -> ExactSums;
    fn statistics(&mut self, features: usize) -> ExactSums;
}

impl Phases for RemoteRunner<ScdKernel> {
    fn loss_sum(&mut self) -> ExactSums {
        let request = PhaseRequest { phase: ScdPhase::Loss, reduction: Reduction::Sum { len: 1 }, mutates: false };
        self.run(request).expect("phase runs").sums
    }

    fn statistics(&mut self, features: usize) -> ExactSums {
        let phase = ScdPhase::Statistics { block: 0, next_block: None, features };
        let request = PhaseRequest { phase, reduction: Reduction::RangeSum { len: 2 * features }, mutates: false };
        self.run(request).expect("phase runs").sums
    }
}

/// What one simulated worker moved and did.
#[derive(Default)]
struct Traffic {
    partial_bytes_served: AtomicU64,
    partial_bytes_fetched: AtomicU64,
    /// Sums bytes in ItemResults (what the real worker's `Traffic` counts).
    result_bytes_sent: AtomicU64,
    /// Encoded WorkerMessage bytes on the Work stream (protobuf, before HTTP/2 framing).
    wire_bytes_to_master: AtomicU64,
    shard_items: AtomicU64,
    range_items: AtomicU64,
    lost_peer_reports: AtomicU64,
}

impl Traffic {
    fn snapshot(&self) -> [u64; 7] {
        [
            &self.partial_bytes_served,
            &self.partial_bytes_fetched,
            &self.result_bytes_sent,
            &self.wire_bytes_to_master,
            &self.shard_items,
            &self.range_items,
            &self.lost_peer_reports,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// The run's certificates: the master's and the simulated workers' transports, TLS unless
/// `--insecure` (what TLS costs is the difference).
#[derive(Clone)]
struct Transports {
    master: Transport,
    member: Transport,
}

impl Transports {
    fn new(insecure: bool) -> Self {
        if insecure {
            return Self { master: Transport::Plaintext, member: Transport::Plaintext };
        }
        let certs = JobCertificates::generate("bench", &["127.0.0.1".into()]).expect("certificates");
        Self {
            master: Transport::Tls(certs.tls(Role::Master).expect("master certificate")),
            member: Transport::Tls(certs.tls(Role::Member).expect("member certificate")),
        }
    }
}

static TRANSPORTS: std::sync::OnceLock<Transports> = std::sync::OnceLock::new();

fn transports() -> &'static Transports {
    TRANSPORTS.get().expect("set in main")
}

struct SimWorker {
    address: String,
    secret: JobSecret,
    session: Mutex<String>,
    /// Statistics phase -> the shards this worker's (fake) partial holds.
    partials: Mutex<HashMap<u64, Vec<u32>>>,
    channels: Mutex<HashMap<String, Channel>>,
    traffic: Arc<Traffic>,
}

impl SimWorker {
    fn peer(&self, address: &str) -> Result<PeerClient, String> {
        let channel = {
            let mut channels = self.channels.lock().unwrap();
            match channels.get(address) {
                Some(c) => c.clone(),
                None => {
                    let c = linea_proto::client::lazy_channel(
                        address,
                        Timeouts::RUNTIME,
                        &transports().member,
                        Expect::Name(WORKER_NAME),
                    )
                    .map_err(|e| e.to_string())?;
                    channels.insert(address.to_string(), c.clone());
                    c
                }
            }
        };
        Ok(linea_proto::client::peer(channel, &self.secret))
    }

    /// Range [begin, end) of every source's partial, summed (here: only fetched and checked).
    async fn aggregate(&self, phase: u64, item: &proto::AggregateItem) -> Result<Vec<u8>, String> {
        let n = (item.end - item.begin) as usize;
        let session = self.session.lock().unwrap().clone();
        for source in &item.sources {
            let (units, len) = if source.address == self.address {
                (self.partials.lock().unwrap().get(&phase).cloned(), n * 16)
            } else {
                let request =
                    proto::FetchPartialRequest { session: session.clone(), phase, begin: item.begin, end: item.end };
                let mut client = self.peer(&source.address).map_err(|_| source.address.clone())?;
                match client.fetch_partial(request).await {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        self.traffic.partial_bytes_fetched.fetch_add(reply.sums.len() as u64, Ordering::Relaxed);
                        (Some(reply.units), reply.sums.len())
                    }
                    Err(_) => (None, 0),
                }
            };
            let mut expected = source.units.clone();
            expected.sort_unstable();
            match units {
                Some(mut s) if len == n * 16 => {
                    s.sort_unstable();
                    if s != expected {
                        return Err(source.address.clone());
                    }
                }
                _ => return Err(source.address.clone()),
            }
        }
        Ok(vec![0u8; n * 16])
    }
}

/// The no-op side of the worker's Peer service: the units a partial covers (recorded by
/// statistics items) and zeros for its sums; no unit state, no cells.
impl PeerBackend for SimWorker {
    fn in_session(&self, session: &str) -> bool {
        *self.session.lock().unwrap() == session
    }

    fn partial(&self, phase: u64, begin: usize, end: usize) -> Option<proto::Partial> {
        let units = self.partials.lock().unwrap().get(&phase).cloned()?;
        let n = end.saturating_sub(begin) * 16;
        self.traffic.partial_bytes_served.fetch_add(n as u64, Ordering::Relaxed);
        Some(proto::Partial { units, sums: vec![0u8; n] })
    }

    fn unit_state(&self, _: u32, _: u64) -> Option<Vec<u8>> {
        None
    }

    fn cell(&self, _: u32, _: u32) -> Option<Vec<u8>> {
        None
    }
}

#[derive(Clone, Copy)]
struct SimOptions {
    threads: u32,
    /// How long a shard item takes on one of the worker's `threads` execution slots;
    /// `None`: answered at once.
    item_time: Option<Duration>,
}

/// One simulated worker's life: serve Peer, join, answer items until released.
async fn simulated_worker(
    master: String,
    secret: JobSecret,
    options: SimOptions,
    traffic: Arc<Traffic>,
    joined: Arc<AtomicUsize>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let address = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let sim = Arc::new(SimWorker {
        address: address.clone(),
        secret: secret.clone(),
        session: Mutex::new(String::new()),
        partials: Mutex::new(HashMap::new()),
        channels: Mutex::new(HashMap::new()),
        traffic: traffic.clone(),
    });
    let peer = linea_proto::server::peer(sim.clone(), &secret);
    let (stop_peer, peer_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut builder = linea_proto::server::builder(&transports().member).map_err(|e| e.to_string())?;
    tokio::spawn(builder.add_service(peer).serve_with_incoming_shutdown(
        linea_proto::server::incoming(listener),
        async {
            let _ = peer_stopped.await;
        },
    ));

    let mut client =
        linea_proto::client::connect_master(&master, &secret, &transports().member, Expect::Host, Timeouts::RUNTIME)
            .await
            .map_err(|e| e.to_string())?;
    let (outbound, messages) = unbounded_channel::<proto::WorkerMessage>();
    let send = |out: &UnboundedSender<proto::WorkerMessage>, body: worker_message::Body| {
        let message = proto::WorkerMessage { body: Some(body) };
        traffic.wire_bytes_to_master.fetch_add(message.encoded_len() as u64, Ordering::Relaxed);
        let _ = out.send(message);
    };
    let id = format!("sim-{address}");
    send(&outbound, worker_message::Body::Join(proto::Join { worker_id: id, address, threads: options.threads }));
    let mut inbound =
        client.work(UnboundedReceiverStream::new(messages)).await.map_err(|e| e.to_string())?.into_inner();
    let (results, mut completed) = unbounded_channel::<proto::ItemResult>();
    let slots = Arc::new(tokio::sync::Semaphore::new(options.threads.max(1) as usize));
    let mut phases: HashMap<u64, proto::Phase> = HashMap::new();
    let sent_sums = |r: &proto::ItemResult| traffic.result_bytes_sent.fetch_add(r.sums.len() as u64, Ordering::Relaxed);
    let outcome = loop {
        tokio::select! {
            message = inbound.message() => {
                let body = match message {
                    Ok(Some(proto::MasterMessage { body: Some(body) })) => body,
                    Ok(Some(_)) => continue,
                    Ok(None) => break Err("the master ended the session".to_string()),
                    Err(status) => break Err(status.to_string()),
                };
                match body {
                    master_message::Body::Job(job) => {
                        *sim.session.lock().unwrap() = job.session;
                        sim.partials.lock().unwrap().clear();
                        joined.fetch_add(1, Ordering::SeqCst);
                    }
                    master_message::Body::Assignment(assignment) => {
                        for p in assignment.phases {
                            phases.retain(|&id, _| id + 2 > p.id);
                            sim.partials.lock().unwrap().retain(|&id, _| id + 2 > p.id);
                            phases.insert(p.id, p);
                        }
                        let mut batch = Vec::new();
                        for item in assignment.items {
                            let mut result = proto::ItemResult { item: item.id, ..Default::default() };
                            match item.kind {
                                Some(work_item::Kind::Unit(unit)) => {
                                    traffic.shard_items.fetch_add(1, Ordering::Relaxed);
                                    match phases.get(&item.phase).map(|p| (proto::Reduction::try_from(p.reduction), p.len)) {
                                        Some((Ok(proto::Reduction::Sum), len)) => result.sums = vec![0u8; 16 * len as usize],
                                        Some((Ok(proto::Reduction::RangeSum), _)) => {
                                            sim.partials.lock().unwrap().entry(item.phase).or_default().push(unit.unit);
                                        }
                                        Some(_) => {}
                                        None => result.error = format!("item {} of unknown phase {}", item.id, item.phase),
                                    }
                                    match options.item_time {
                                        None => batch.push(result),
                                        Some(time) => {
                                            let (slots, results) = (slots.clone(), results.clone());
                                            tokio::spawn(async move {
                                                let _slot = slots.acquire().await;
                                                tokio::time::sleep(time).await;
                                                let _ = results.send(result);
                                            });
                                        }
                                    }
                                }
                                Some(work_item::Kind::Aggregate(range)) => {
                                    traffic.range_items.fetch_add(1, Ordering::Relaxed);
                                    let (sim, results, traffic) = (sim.clone(), results.clone(), traffic.clone());
                                    tokio::spawn(async move {
                                        match sim.aggregate(item.phase, &range).await {
                                            Ok(sums) => result.sums = sums,
                                            Err(peer) => {
                                                traffic.lost_peer_reports.fetch_add(1, Ordering::Relaxed);
                                                result.lost_peer = peer;
                                            }
                                        }
                                        let _ = results.send(result);
                                    });
                                }
                                // The benchmark runs SCD's phases, which never allreduce
                                // (allreduce-bench measures the tree).
                                Some(work_item::Kind::Tree(_)) => {
                                    result.error = "the simulated worker takes part in no allreduce".into();
                                    batch.push(result);
                                }
                                None => {
                                    result.error = "empty work item".into();
                                    batch.push(result);
                                }
                            }
                        }
                        if !batch.is_empty() {
                            batch.iter().for_each(|r| { sent_sums(r); });
                            send(&outbound, worker_message::Body::Completed(proto::Completed { results: batch }));
                        }
                    }
                    master_message::Body::Drain(_) => {}
                    master_message::Body::Release(_) => break Ok(()),
                }
            }
            Some(first) = completed.recv() => {
                let mut batch = vec![first];
                while let Ok(more) = completed.try_recv() {
                    batch.push(more);
                }
                batch.iter().for_each(|r| { sent_sums(r); });
                send(&outbound, worker_message::Body::Completed(proto::Completed { results: batch }));
            }
        }
    };
    sim.channels.lock().unwrap().clear();
    let _ = stop_peer.send(());
    outcome
}

/// A master with `shards` shards and one block of `features` features, `workers`
/// simulated workers joined to it; `body` drives it; everything is torn down after.
fn session<R>(
    sims: &tokio::runtime::Runtime,
    workers: usize,
    options: SimOptions,
    shards: usize,
    features: usize,
    body: impl FnOnce(&mut RemoteRunner<ScdKernel>, &[Arc<Traffic>]) -> R,
) -> (R, linea_worker::runtime::scheduler::Counters) {
    let secret = JobSecret::generate();
    let kernel = ScdKernel::new(Loss::Logistic, shards);
    let mirror = ScdParameters { theta: vec![vec![0.0; features].into()], snapshots: Vec::new() };
    let job = Job {
        data: "simulated".into(),
        algorithm: "scd",
        loss: Loss::Logistic,
        model: "none".into(),
        max_epochs: 1,
        progress: Default::default(),
        allreduce: Default::default(),
        speculation: Default::default(),
    };
    let server =
        Server::start("127.0.0.1:0", &secret, &transports().master, job, kernel, mirror, 0).expect("master starts");
    let master = format!("http://{}", server.address);
    let joined = Arc::new(AtomicUsize::new(0));
    let traffic: Vec<Arc<Traffic>> = (0..workers).map(|_| Arc::new(Traffic::default())).collect();
    let tasks: Vec<_> = traffic
        .iter()
        .map(|t| sims.spawn(simulated_worker(master.clone(), secret.clone(), options, t.clone(), joined.clone())))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while joined.load(Ordering::SeqCst) < workers {
        assert!(Instant::now() < deadline, "only {} of {workers} workers joined", joined.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut executor = server.runner();
    let result = body(&mut executor, &traffic);
    let counters = server.counters();
    server.shutdown(Duration::ZERO);
    sims.block_on(async {
        for task in tasks {
            match tokio::time::timeout(Duration::from_secs(10), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("a simulated worker ended with: {e}"),
                Ok(Err(e)) => eprintln!("a simulated worker panicked: {e}"),
                Err(_) => eprintln!("a simulated worker was not released within 10 s"),
            }
        }
    });
    (result, counters)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn mib(bytes: f64) -> String {
    format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
}

struct Throughput {
    workers: usize,
    threads: u32,
    shards: usize,
    phases: usize,
    items: u64,
    seconds: f64,
    steals: u64,
}

fn throughput(sims: &tokio::runtime::Runtime, workers: usize, threads: u32, scale: f64) -> Throughput {
    let shards = (16 * workers).max(256);
    let phases = (((300_000.0 * scale) / shards as f64).ceil() as usize).clamp((200.0 * scale) as usize, 1200);
    let options = SimOptions { threads, item_time: None };
    let ((items, seconds), counters) = session(sims, workers, options, shards, 1, |exec, _| {
        for _ in 0..5 {
            exec.loss_sum();
        }
        let before = Instant::now();
        for _ in 0..phases {
            exec.loss_sum();
        }
        ((phases * shards) as u64, before.elapsed().as_secs_f64())
    });
    Throughput { workers, threads, shards, phases, items, seconds, steals: counters.steals }
}

struct Barrier {
    workers: usize,
    phases: usize,
    median_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    used: usize,
}

fn barrier(sims: &tokio::runtime::Runtime, workers: usize, phases: usize) -> Barrier {
    let options = SimOptions { threads: 1, item_time: None };
    let ((mut times, used), _) = session(sims, workers, options, workers, 1, |exec, traffic| {
        for _ in 0..20 {
            exec.loss_sum();
        }
        let before: Vec<u64> = traffic.iter().map(|t| t.shard_items.load(Ordering::Relaxed)).collect();
        let times: Vec<f64> = (0..phases)
            .map(|_| {
                let start = Instant::now();
                exec.loss_sum();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let used = traffic.iter().zip(before).filter(|(t, b)| t.shard_items.load(Ordering::Relaxed) > *b).count();
        (times, used)
    });
    times.sort_by(f64::total_cmp);
    Barrier {
        workers,
        phases,
        median_ms: percentile(&times, 0.5),
        p99_ms: percentile(&times, 0.99),
        max_ms: *times.last().unwrap(),
        used,
    }
}

struct Aggregation {
    workers: usize,
    phases: usize,
    per_worker_mean: f64,
    per_worker_max: f64,
    served_mean: f64,
    fetched_mean: f64,
    sent_mean: f64,
    master_sums: f64,
    master_wire: f64,
    aggregators: usize,
    ms_per_phase: f64,
    lost: u64,
}

fn aggregation(sims: &tokio::runtime::Runtime, workers: usize, phases: usize) -> Aggregation {
    let options = SimOptions { threads: 1, item_time: None };
    let ((deltas, seconds), _) = session(sims, workers, options, 4 * workers, AGG_FEATURES, |exec, traffic| {
        exec.statistics(AGG_FEATURES);
        let before: Vec<[u64; 7]> = traffic.iter().map(|t| t.snapshot()).collect();
        let start = Instant::now();
        for _ in 0..phases {
            let sums = exec.statistics(AGG_FEATURES);
            assert_eq!(sums.sums.len(), 2 * AGG_FEATURES);
        }
        let seconds = start.elapsed().as_secs_f64();
        let deltas: Vec<[u64; 7]> = traffic
            .iter()
            .zip(before)
            .map(|(t, b)| {
                let now = t.snapshot();
                std::array::from_fn(|i| now[i] - b[i])
            })
            .collect();
        (deltas, seconds)
    });
    let p = phases as f64;
    let w = workers as f64;
    let per_worker: Vec<f64> = deltas.iter().map(|d| (d[0] + d[1] + d[2]) as f64 / p).collect();
    let mean = |i: usize| deltas.iter().map(|d| d[i] as f64).sum::<f64>() / w / p;
    Aggregation {
        workers,
        phases,
        per_worker_mean: per_worker.iter().sum::<f64>() / w,
        per_worker_max: per_worker.iter().copied().fold(0.0, f64::max),
        served_mean: mean(0),
        fetched_mean: mean(1),
        sent_mean: mean(2),
        master_sums: deltas.iter().map(|d| d[2] as f64).sum::<f64>() / p,
        master_wire: deltas.iter().map(|d| d[3] as f64).sum::<f64>() / p,
        aggregators: deltas.iter().filter(|d| d[5] > 0).count(),
        ms_per_phase: seconds * 1e3 / p,
        lost: deltas.iter().map(|d| d[6]).sum(),
    }
}

/// 8 single-thread workers, 8 shards, 5 ms items: ideally one item per worker and 5 ms
/// per phase.
fn balance(sims: &tokio::runtime::Runtime, phases: usize) -> (f64, usize) {
    let workers = 8;
    let options = SimOptions { threads: 1, item_time: Some(Duration::from_millis(5)) };
    let ((median, used), _) = session(sims, workers, options, workers, 1, |exec, traffic| {
        for _ in 0..3 {
            exec.loss_sum();
        }
        let before: Vec<u64> = traffic.iter().map(|t| t.shard_items.load(Ordering::Relaxed)).collect();
        let mut times: Vec<f64> = (0..phases)
            .map(|_| {
                let start = Instant::now();
                exec.loss_sum();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let used = traffic.iter().zip(before).filter(|(t, b)| t.shard_items.load(Ordering::Relaxed) > *b).count();
        (percentile(&times, 0.5), used)
    });
    (median, used)
}

fn list(value: &str) -> Vec<usize> {
    value.split(',').map(|v| v.trim().parse().expect("a comma-separated list of numbers")).collect()
}

fn main() {
    let mut workers = vec![1, 2, 4, 8, 16, 32, 64];
    let mut threads = vec![1usize, 8];
    let mut quick = false;
    let mut insecure = false;
    let mut only: Vec<String> = ["throughput", "barrier", "aggregation", "balance"].map(String::from).to_vec();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workers" => workers = list(&args.next().expect("--workers LIST")),
            "--threads" => threads = list(&args.next().expect("--threads LIST")),
            "--quick" => quick = true,
            "--insecure" => insecure = true,
            "--only" => only = args.next().expect("--only LIST").split(',').map(String::from).collect(),
            _ => {
                eprintln!(
                    "usage: runtime-bench [--workers 1,2,4,8,16,32,64] [--threads 1,8] [--quick] [--insecure] \
                     [--only throughput,barrier,aggregation,balance]"
                );
                std::process::exit(2);
            }
        }
    }
    let scale = if quick { 0.2 } else { 1.0 };
    TRANSPORTS.set(Transports::new(insecure)).ok().expect("set once");
    println!("transport: {}", if insecure { "plain text (--insecure)" } else { "TLS, mutual authentication" });
    let started = Instant::now();
    let sims = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sim-workers")
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!(
        "runtime-bench: real master (2 tokio threads) + simulated workers (one process, 2 tokio threads), loopback gRPC; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let run = |part: &str| only.iter().any(|o| o == part);
    let mut rows = Vec::new();
    for &w in workers.iter().filter(|_| run("throughput")) {
        for &t in &threads {
            let r = throughput(&sims, w, t as u32, scale);
            eprintln!("  throughput W={w} threads={t}: {:.0} items/s", r.items as f64 / r.seconds);
            rows.push(r);
        }
    }
    if !rows.is_empty() {
        println!("\n### 1. Work-item throughput (loss_sum phases, instant items; target >= 100,000 items/s)\n");
        println!(
            "| workers | threads/worker (in flight) | shards = items/phase | phases | items/s | us/phase | steals | target |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |");
        for r in &rows {
            let rate = r.items as f64 / r.seconds;
            println!(
                "| {} | {} ({}) | {} | {} | {:.0} | {:.0} | {} | {} |",
                r.workers,
                r.threads,
                2 * r.threads as usize * r.workers,
                r.shards,
                r.phases,
                rate,
                r.seconds * 1e6 / r.phases as f64,
                r.steals,
                if rate >= 100_000.0 { "met" } else { "missed" }
            );
        }
    }

    let barrier_phases = if quick { 200 } else { 1000 };
    let mut barriers = Vec::new();
    for &w in workers.iter().filter(|_| run("barrier")) {
        let b = barrier(&sims, w, barrier_phases);
        eprintln!("  barrier W={w}: median {:.3} ms", b.median_ms);
        barriers.push(b);
    }
    if !barriers.is_empty() {
        println!(
            "\n### 2. Barrier overhead (shards = workers, 1 thread each, instant items; target < 2 ms at 64 workers)\n"
        );
        println!("| workers | phases | median ms/phase | p99 ms/phase | max ms | workers given items | target |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | :---: |");
        for b in &barriers {
            let target = if b.workers == 64 {
                if b.p99_ms < 2.0 {
                    "met (p99)"
                } else if b.median_ms < 2.0 {
                    "median only"
                } else {
                    "missed"
                }
            } else {
                "-"
            };
            println!(
                "| {} | {} | {:.3} | {:.3} | {:.3} | {} of {} | {} |",
                b.workers, b.phases, b.median_ms, b.p99_ms, b.max_ms, b.used, b.workers, target
            );
        }
    }

    let mut aggs = Vec::new();
    for &w in workers.iter().filter(|_| run("aggregation")) {
        let phases = if quick {
            1
        } else if w <= 16 {
            8
        } else {
            4
        };
        let a = aggregation(&sims, w, phases);
        eprintln!("  aggregation W={w}: {} per worker", mib(a.per_worker_mean));
        aggs.push(a);
    }
    if !aggs.is_empty() {
        println!(
            "\n### 3. Aggregation traffic per statistics phase (block of {AGG_FEATURES} features = {} ranges, shards = 4 x workers, 1 thread each)\n",
            (2 * AGG_FEATURES).div_ceil(linea_worker::runtime::scheduler::RANGE_LEN)
        );
        println!(
            "| workers | phases | per worker mean (served + fetched + sent) | per worker max | workers that aggregated | master received: sums / wire | ms/phase |"
        );
        println!("| ---: | ---: | --- | ---: | ---: | --- | ---: |");
        for a in &aggs {
            println!(
                "| {} | {} | {} ({} + {} + {}) | {} | {} of {} | {} / {} | {:.0} |",
                a.workers,
                a.phases,
                mib(a.per_worker_mean),
                mib(a.served_mean),
                mib(a.fetched_mean),
                mib(a.sent_mean),
                mib(a.per_worker_max),
                a.aggregators,
                a.workers,
                mib(a.master_sums),
                mib(a.master_wire),
                a.ms_per_phase,
            );
            if a.lost > 0 {
                println!("|   | (!) {} aggregation items reported a lost peer | | | | | |", a.lost);
            }
        }
    }

    if run("balance") {
        let (balance_ms, balance_used) = balance(&sims, if quick { 20 } else { 60 });
        println!("\n### 4. Load balance (not a target): 8 workers x 1 thread, 8 shards, items of 5 ms\n");
        println!(
            "median {balance_ms:.2} ms per phase (ideal: one item per worker, ~5 ms); {balance_used} of 8 workers given items"
        );
    }

    println!("\n### Targets\n");
    let best =
        |w: usize| rows.iter().filter(|r| r.workers == w).map(|r| r.items as f64 / r.seconds).fold(0.0, f64::max);
    let worst_rate = rows.iter().map(|r| r.items as f64 / r.seconds).fold(f64::INFINITY, f64::min);
    let best_rate = rows.iter().map(|r| r.items as f64 / r.seconds).fold(0.0, f64::max);
    let met_all = !rows.is_empty() && rows.iter().all(|r| r.items as f64 / r.seconds >= 100_000.0);
    if !rows.is_empty() {
        println!(
            "- throughput >= 100,000 items/s: {} (lowest {:.0}, highest {:.0}; best at 64 workers {:.0})",
            if met_all {
                "met in every configuration"
            } else if best_rate >= 100_000.0 {
                "met in some configurations only"
            } else {
                "missed"
            },
            worst_rate,
            best_rate,
            best(64)
        );
    }
    if let Some(b) = barriers.iter().find(|b| b.workers == 64) {
        println!(
            "- barrier < 2 ms at 64 workers: {} (median {:.3} ms, p99 {:.3} ms)",
            if b.p99_ms < 2.0 {
                "met"
            } else if b.median_ms < 2.0 {
                "met at the median, missed at p99"
            } else {
                "missed"
            },
            b.median_ms,
            b.p99_ms
        );
    }
    if let (Some(small), Some(big)) =
        (aggs.iter().find(|a| a.workers == 8), aggs.iter().find(|a| a.workers == *workers.iter().max().unwrap()))
    {
        let (mean_ratio, max_ratio) =
            (big.per_worker_mean / small.per_worker_mean, big.per_worker_max / small.per_worker_max);
        println!(
            "- flat per-worker traffic (mean and max at {} workers within 1.25x of 8 workers): {} (mean {:.2}x, max {:.2}x; ideal with ranges spread evenly: 2 x {} x (W-1)/W + {} / W)",
            big.workers,
            if mean_ratio <= 1.25 && max_ratio <= 1.25 {
                "met"
            } else if mean_ratio <= 1.25 {
                "met for the mean, not the max"
            } else {
                "missed"
            },
            mean_ratio,
            max_ratio,
            mib((AGG_FEATURES * 32) as f64),
            mib((AGG_FEATURES * 32) as f64),
        );
    }
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
