//! `linea master`: runs SCD with a [`RemoteExecutor`] whose phases are work items for the
//! workers, serves the `Master` gRPC service, checkpoints after every iteration and writes
//! the model at the end.
//!
//! Threads: the algorithm runs on the calling thread and blocks on each phase's result;
//! the gRPC server runs on a small tokio runtime; both meet in the [`Hub`], where the
//! pure [`Scheduler`] decides and the hub only sends what it returns.

use super::auth::JobSecret;
use super::checkpoint::Checkpoints;
use super::proto::{self, master_message, phase, worker_message};
use super::scheduler::{Collect, Outbox, PhaseOutput, PhaseResult, Scheduler, WorkerKey};
use super::wire;
use crate::error::{LineaError, Result};
use crate::gridload::Layout;
use crate::progress::Progress;
use crate::storage;
use crate::train::{self, TrainOptions, TrainSummary};
use linea_engine::Loss;
use linea_engine::fixed::ExactSums;
use linea_engine::scd::kernels::DirectionSums;
use linea_engine::scd::{Executor, Scd, ScdConfig, Update};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Largest gRPC message: a phase carries whole blocks of parameters.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

pub struct MasterOptions {
    pub train: TrainOptions,
    /// Address to listen on, e.g. `0.0.0.0:7070` (port 0: any free port).
    pub listen: String,
    /// Where to checkpoint; `None`: no checkpoints (a restart starts over).
    pub checkpoint: Option<String>,
    pub secret: JobSecret,
}

/// The parameters that go with the workers' shard state of `version`: what a worker
/// needs to rebuild a shard's predictions and snapshots from scratch.
struct Mirror {
    version: u64,
    theta: Vec<Vec<f64>>,
    snapshots: Vec<Vec<Vec<f64>>>,
}

#[derive(Clone)]
struct RunStatus {
    phase: &'static str,
    epoch: u32,
    iteration: u64,
    objective: f64,
    examples_per_second: f64,
    error: String,
}

type Outboxes = HashMap<WorkerKey, UnboundedSender<Result<proto::MasterMessage, Status>>>;

/// Where the algorithm thread and the gRPC tasks meet.
pub struct Hub {
    state: Mutex<(Scheduler, Outboxes)>,
    mirror: RwLock<Mirror>,
    status: Mutex<RunStatus>,
    job: proto::JobInfo,
    max_epochs: u32,
    model: String,
}

impl Hub {
    /// Runs one scheduler step and sends the messages it returns. A released worker's
    /// outbox is dropped, which ends its stream.
    fn dispatch(&self, step: impl FnOnce(&mut Scheduler) -> Outbox) {
        let mut guard = self.state.lock().expect("hub lock");
        let (scheduler, outboxes) = &mut *guard;
        send(outboxes, step(scheduler));
    }

    fn set_status(&self, update: impl FnOnce(&mut RunStatus)) {
        update(&mut self.status.lock().expect("status lock"));
    }
}

fn send(outboxes: &mut Outboxes, messages: Outbox) {
    for (key, message) in messages {
        let release = matches!(message.body, Some(master_message::Body::Release(_)));
        if let Some(outbox) = outboxes.get(&key) {
            let _ = outbox.send(Ok(message));
        }
        if release {
            outboxes.remove(&key);
        }
    }
}

struct Service {
    hub: Arc<Hub>,
}

#[tonic::async_trait]
impl proto::master_server::Master for Service {
    type WorkStream = UnboundedReceiverStream<Result<proto::MasterMessage, Status>>;

    async fn work(
        &self,
        request: Request<Streaming<proto::WorkerMessage>>,
    ) -> Result<Response<Self::WorkStream>, Status> {
        let mut inbound = request.into_inner();
        let Some(proto::WorkerMessage { body: Some(worker_message::Body::Join(join)) }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument("a session starts with Join"));
        };
        let (outbox, messages) = unbounded_channel();
        let job = proto::MasterMessage { body: Some(master_message::Body::Job(self.hub.job.clone())) };
        outbox.send(Ok(job)).expect("receiver is here");
        let hub = self.hub.clone();
        let key = {
            let mut guard = hub.state.lock().expect("hub lock");
            let (scheduler, outboxes) = &mut *guard;
            let (key, messages) = scheduler.join(join.worker_id.clone(), join.address.clone(), join.threads as usize);
            outboxes.insert(key, outbox);
            send(outboxes, messages);
            key
        };
        tracing::info!(worker = %join.worker_id, address = %join.address, threads = join.threads, "worker joined");
        tokio::spawn(async move {
            loop {
                match inbound.message().await {
                    Ok(Some(proto::WorkerMessage { body: Some(body) })) => match body {
                        worker_message::Body::Completed(done) => hub.dispatch(|s| s.complete(key, done.results)),
                        worker_message::Body::Leave(_) => {
                            tracing::info!(worker = %join.worker_id, "worker draining");
                            hub.dispatch(|s| s.drain(key))
                        }
                        worker_message::Body::Join(_) => {}
                    },
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            hub.state.lock().expect("hub lock").1.remove(&key);
            hub.dispatch(|s| s.lose(key));
            tracing::info!(worker = %join.worker_id, "worker session ended");
        });
        Ok(Response::new(UnboundedReceiverStream::new(messages)))
    }

    async fn get_model(&self, _: Request<proto::GetModelRequest>) -> Result<Response<proto::ModelState>, Status> {
        let mirror = self.hub.mirror.read().expect("mirror lock");
        let blocks = |theta: &Vec<Vec<f64>>| theta.iter().map(|b| wire::from_f64s(b)).collect();
        Ok(Response::new(proto::ModelState {
            version: mirror.version,
            theta: blocks(&mirror.theta),
            snapshots: mirror.snapshots.iter().map(|s| proto::Parameters { theta: blocks(s) }).collect(),
        }))
    }

    async fn status(&self, _: Request<proto::StatusRequest>) -> Result<Response<proto::StatusReply>, Status> {
        Ok(Response::new(status_reply(&self.hub)))
    }

    async fn drain(&self, request: Request<proto::DrainRequest>) -> Result<Response<proto::DrainReply>, Status> {
        let name = request.into_inner().worker;
        let mut found = false;
        self.hub.dispatch(|s| match s.find_worker(&name) {
            Some(key) => {
                found = true;
                s.drain(key)
            }
            None => Outbox::new(),
        });
        Ok(Response::new(proto::DrainReply { found }))
    }
}

fn status_reply(hub: &Hub) -> proto::StatusReply {
    let run = hub.status.lock().expect("status lock").clone();
    let guard = hub.state.lock().expect("hub lock");
    let scheduler = &guard.0;
    let workers: Vec<proto::WorkerStatus> = scheduler
        .workers()
        .map(|(_, w, shards)| proto::WorkerStatus {
            worker_id: w.id.clone(),
            address: w.address.clone(),
            draining: w.draining,
            shards: shards as u32,
        })
        .collect();
    proto::StatusReply {
        phase: run.phase.to_string(),
        epoch: run.epoch,
        iteration: run.iteration,
        objective: run.objective,
        examples_per_second: run.examples_per_second,
        workers_active: workers.iter().filter(|w| !w.draining).count() as u32,
        workers_draining: workers.iter().filter(|w| w.draining).count() as u32,
        workers_lost: scheduler.counters.workers_lost,
        items_completed: scheduler.counters.items_completed,
        model: hub.model.clone(),
        error: run.error,
        workers,
        max_epochs: hub.max_epochs,
    }
}

/// The SCD [`Executor`] whose every call is one phase of work items on the workers.
pub struct RemoteExecutor {
    hub: Arc<Hub>,
    loss: Loss,
    features: Vec<usize>,
    next_block: Option<usize>,
}

impl RemoteExecutor {
    fn run(&mut self, kind: phase::Kind, collect: Collect) -> Result<PhaseOutput> {
        let (reply, result) = std::sync::mpsc::channel::<PhaseResult>();
        let version = self.hub.mirror.read().expect("mirror lock").version;
        let description = proto::Phase { id: 0, version, kind: Some(kind) };
        self.hub.dispatch(|s| s.start_phase(description, collect, reply));
        let outcome = result.recv().expect("the scheduler answers every phase");
        outcome.map_err(|message| LineaError::Remote { peer: "a worker".into(), message })
    }

    fn sums(&mut self, kind: phase::Kind, len: usize) -> Result<ExactSums> {
        match self.run(kind, Collect::Sums(len))? {
            PhaseOutput::Sums(sums) => Ok(sums),
            other => unreachable!("a sums phase returned {other:?}"),
        }
    }

    fn direction_len(&self) -> usize {
        DirectionSums::new(self.loss).0.len()
    }

    /// Records a change of the shard state's parameters, after its phase completed.
    fn advance(&self, change: impl FnOnce(&mut Mirror)) {
        let mut mirror = self.hub.mirror.write().expect("mirror lock");
        change(&mut mirror);
        mirror.version += 1;
    }

    pub fn version(&self) -> u64 {
        self.hub.mirror.read().expect("mirror lock").version
    }
}

impl Executor for RemoteExecutor {
    type Error = LineaError;

    fn statistics(&mut self, block: usize) -> Result<(ExactSums, ExactSums)> {
        let features = self.features[block];
        let kind = phase::Kind::Statistics(proto::Statistics {
            block: block as u32,
            next_block: self.next_block.map(|b| b as u32),
            features: features as u32,
        });
        match self.run(kind, Collect::Aggregated(features))? {
            PhaseOutput::Statistics(g, h) => Ok((g, h)),
            other => unreachable!("a statistics phase returned {other:?}"),
        }
    }

    fn direction_sums(&mut self, block: usize, delta: &[f64]) -> Result<ExactSums> {
        let len = self.direction_len();
        self.sums(phase::Kind::Direction(proto::Direction { block: block as u32, delta: wire::from_f64s(delta) }), len)
    }

    fn update_predictions(&mut self, block: usize, old: &[f64], new: &[f64]) -> Result<()> {
        let kind = phase::Kind::Update(proto::Update {
            block: block as u32,
            old: wire::from_f64s(old),
            new: wire::from_f64s(new),
        });
        self.run(kind, Collect::Nothing)?;
        self.advance(|m| m.theta[block] = new.to_vec());
        Ok(())
    }

    fn loss_sum(&mut self) -> Result<i128> {
        Ok(self.sums(phase::Kind::Loss(proto::LossSum {}), 1)?.sums[0])
    }

    fn snapshot(&mut self, keep: usize) -> Result<()> {
        self.run(phase::Kind::Snapshot(proto::Snapshot { keep: keep as u32 }), Collect::Nothing)?;
        self.advance(|m| {
            let theta = m.theta.clone();
            m.snapshots.push(theta);
            if m.snapshots.len() > keep {
                m.snapshots.remove(0);
            }
        });
        Ok(())
    }

    fn coarse_statistics(&mut self, blocks: bool, hessian_stride: usize) -> Result<ExactSums> {
        let snapshots = self.hub.mirror.read().expect("mirror lock").snapshots.len();
        let dims = if blocks { self.features.len() } else { 0 } + snapshots;
        let kind =
            phase::Kind::CoarseStatistics(proto::CoarseStatistics { blocks, hessian_stride: hessian_stride as u32 });
        self.sums(kind, linea_engine::scd::coarse::statistics_len(dims))
    }

    fn coarse_direction_sums(&mut self, blocks: bool, t: &[f64]) -> Result<ExactSums> {
        let len = self.direction_len();
        self.sums(phase::Kind::CoarseDirection(proto::CoarseDirection { blocks, t: wire::from_f64s(t) }), len)
    }

    fn upcoming(&mut self, next_block: Option<usize>) {
        self.next_block = next_block;
    }
}

/// What workers and status callers are told about the job.
pub struct Job {
    pub data: String,
    pub loss: Loss,
    pub model: String,
    pub max_epochs: u32,
}

/// A master's gRPC server on its own tokio runtime, fed phases by [`RemoteExecutor`]s.
pub struct Server {
    pub address: SocketAddr,
    hub: Arc<Hub>,
    features: Vec<usize>,
    loss: Loss,
    runtime: tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl Server {
    /// Listens on `listen` for the workers of a grid with `shards` row shards and blocks
    /// of `features` features; the shard state starts at `version` with `scd`'s parameters.
    pub fn start(
        listen: &str,
        secret: &JobSecret,
        shards: usize,
        features: Vec<usize>,
        job: Job,
        scd: &Scd,
        version: u64,
    ) -> Result<Server> {
        let hub = Arc::new(Hub {
            state: Mutex::new((Scheduler::new(shards), HashMap::new())),
            mirror: RwLock::new(Mirror {
                version,
                theta: scd.state.theta.clone(),
                snapshots: scd.state.history.clone(),
            }),
            status: Mutex::new(RunStatus {
                phase: "training",
                epoch: scd.state.epoch,
                iteration: 0,
                objective: scd.state.objectives.last().copied().unwrap_or(f64::NAN),
                examples_per_second: 0.0,
                error: String::new(),
            }),
            job: proto::JobInfo {
                data: job.data,
                loss: job.loss.name().to_string(),
                session: format!("{:016x}", rand::random::<u64>()),
            },
            max_epochs: job.max_epochs,
            model: job.model,
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("linea-master-io")
            .enable_all()
            .build()
            .map_err(LineaError::io("tokio runtime"))?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(listen)).map_err(LineaError::io(listen))?;
        let address = listener.local_addr().map_err(LineaError::io(listen))?;
        tracing::info!(%address, "master listening");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = tonic::service::interceptor::InterceptedService::new(
            proto::master_server::MasterServer::new(Service { hub: hub.clone() })
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            secret.check(),
        );
        let task = runtime.spawn(
            tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(Duration::from_secs(10)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .add_service(service)
                .serve_with_incoming_shutdown(super::incoming(listener), async {
                    let _ = stopped.await;
                }),
        );
        Ok(Server { address, hub, features, loss: job.loss, runtime, stop, task })
    }

    pub fn executor(&self) -> RemoteExecutor {
        RemoteExecutor { hub: self.hub.clone(), loss: self.loss, features: self.features.clone(), next_block: None }
    }

    /// Releases every worker and stops serving. Released workers hang up at once; one
    /// that does not is not waited for long.
    pub fn shutdown(self) {
        self.hub.dispatch(Scheduler::release_all);
        let _ = self.stop.send(());
        let task = self.task;
        let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }

    /// Scheduler counters (benchmarks read them).
    pub fn counters(&self) -> super::scheduler::Counters {
        self.hub.state.lock().expect("hub lock").0.counters
    }
}

/// Identifies a run: a checkpoint is resumed only by the same data and parameters.
fn fingerprint(config: &ScdConfig, layout: &Layout) -> String {
    let manifest = serde_json::to_vec(&layout.manifest).expect("serializes");
    format!("{}|manifest-crc32c:{:08x}", serde_json::to_string(config).expect("serializes"), crc32c::crc32c(&manifest))
}

/// Stops a running master from outside (the embedded mode, when its workers are gone).
#[derive(Clone)]
pub struct AbortHandle(Arc<Hub>);

impl AbortHandle {
    pub fn abort(&self, reason: String) {
        self.0.dispatch(|s| s.abort(reason));
    }
}

/// Trains as the master of a job. `on_listening` learns the bound address (the embedded
/// mode starts its workers there). Returns when the model is written, or on failure.
pub fn run(
    options: &MasterOptions,
    progress: &Progress,
    on_listening: impl FnOnce(SocketAddr, AbortHandle),
) -> Result<TrainSummary> {
    let train = &options.train;
    let started = Instant::now();
    let config = train.config()?;
    let layout = Layout::read(storage::open(&train.data)?.as_ref())?;
    train::describe_grid(&layout, &train.data, started, progress);
    let config = layout.manifest.fit_ranges(config.fitted_to(layout.shapes.len(), layout.manifest.rows))?;
    let mut scd = Scd::new(config, layout.shapes.clone());
    let checkpoints = options.checkpoint.as_deref().map(|c| Checkpoints::open(c, fingerprint(&config, &layout)));
    let checkpoints = checkpoints.transpose()?;
    let (mut version, mut trace) = (0, Vec::new());
    match checkpoints.as_ref().map(Checkpoints::load).transpose()?.flatten() {
        Some(resumed) => {
            progress.always(&format!(
                "resuming from checkpoint: epoch {}, iteration {}",
                resumed.state.epoch, resumed.state.position
            ));
            (scd.state, version, trace) = (resumed.state, resumed.version, resumed.trace);
        }
        None => {
            if let Some(c) = &checkpoints {
                c.save_base(&scd, 0, &trace)?;
            }
        }
    }
    let job = Job { data: train.data.clone(), loss: train.loss, model: train.model.clone(), max_epochs: train.epochs };
    let features = layout.shapes.iter().map(|s| s.features).collect();
    let server =
        Server::start(&options.listen, &options.secret, layout.manifest.shards.len(), features, job, &scd, version)?;
    on_listening(server.address, AbortHandle(server.hub.clone()));
    let hub = server.hub.clone();
    let mut executor = server.executor();
    let sizes = (layout.manifest.rows as f64, layout.manifest.nnz as f64);
    let rows = sizes.0;
    let outcome = train::drive(
        &mut scd,
        &mut executor,
        sizes,
        progress,
        &mut trace,
        |scd, report| {
            hub.set_status(|s| s.iteration += 1);
            match (&checkpoints, report.update) {
                (Some(c), Update::Block(block)) => c.save_step(scd, block, hub.mirror.read().expect("lock").version),
                _ => Ok(()),
            }
        },
        |scd, trace| {
            let version = hub.mirror.read().expect("mirror lock").version;
            if let Some(c) = &checkpoints {
                c.save_base(scd, version, trace)?;
            }
            let seconds = match trace {
                [.., a, b] => b.seconds - a.seconds,
                _ => 0.0,
            };
            hub.set_status(|s| {
                s.epoch = scd.state.epoch;
                let objective = *scd.state.objectives.last().expect("an epoch ran");
                s.objective = layout.manifest.target_scale(train.loss).unscale_objective(objective);
                s.examples_per_second = rows / seconds.max(1e-9);
            });
            Ok(())
        },
    )
    .and_then(|seconds| train::finish(train, &layout, &scd, trace, seconds));
    hub.set_status(|s| match &outcome {
        Ok(_) => s.phase = "succeeded",
        Err(e) => {
            s.phase = "failed";
            s.error = e.to_string();
        }
    });
    server.shutdown();
    outcome
}
