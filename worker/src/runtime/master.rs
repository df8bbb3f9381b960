//! `linea master`: runs an algorithm with a [`RemoteRunner`] whose phases are work items
//! for the workers, serves the `Master` gRPC service ([`super::hub`]), checkpoints after
//! every iteration and writes the model at the end.
//!
//! Threads: the algorithm runs on the calling thread and blocks on each phase's result;
//! the gRPC server runs on a small tokio runtime; both meet in the [`Hub`].

use super::auth::JobSecret;
use super::checkpoint::Checkpoints;
use super::hub::{Hub, RunStatus, Service, UnitBases};
use super::proto;
use super::scheduler::{Collect, PhaseResult, Scheduler, StartGate};
use super::speculation::Speculation;
use crate::driver::{self, TrainSummary, WithAlgorithm};
use crate::error::{LineaError, Result};
use crate::gridload::Layout;
use crate::interrupt::Interrupt;
use crate::io_runtime::IoRuntime;
use crate::progress::Progress;
use crate::storage;
use crate::trace::TraceFile;
use crate::train::TrainOptions;
use linea_engine::Loss;
use linea_engine::algorithm::{
    Algorithm, Kernel, PhaseOutput, PhaseRequest, Progress as AlgorithmProgress, Reduction, Runner, encode,
    nonzero_pairs,
};
use linea_engine::hybrid::BatchSolver;
use linea_proto::tls::Transport;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

pub struct MasterOptions {
    pub train: TrainOptions,
    /// Address to listen on, e.g. `0.0.0.0:7070` (port 0: any free port).
    pub listen: String,
    /// Where to checkpoint; `None`: no checkpoints (a restart starts over).
    pub checkpoint: Option<String>,
    pub secret: JobSecret,
    /// TLS with the master's certificate, or plain text (`--insecure`).
    pub transport: Transport,
    /// How allreduce phases are summed.
    pub allreduce: AllReduceMode,
    /// When a straggling item is copied to an idle worker.
    pub speculation: Speculation,
    /// A fresh run sends its first item once the gate's workers joined (at most the workers
    /// the algorithm wants; 0: at once), so an elastic run's scale-ins release the workers
    /// it started with rather than finding some still to come; or once its patience ran out.
    pub wait_for_workers: StartGate,
    /// Stop cleanly on SIGTERM or SIGINT ([`Server::stop_on_signals`]): `linea master`. The
    /// embedded mode stops between epochs instead ([`TrainOptions::stop_on_signals`]).
    pub stop_on_signals: bool,
    /// How long a finished run goes on releasing workers that join, when some may still be
    /// reconnecting (it resumed from a checkpoint, or lost a worker's session); see
    /// [`Server::shutdown`].
    pub late_workers: Duration,
}

/// How the master runs a phase the algorithm asks to allreduce (L-BFGS's and the hybrid's
/// gradients and losses). The total is the same bits either way (exact sums).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AllReduceMode {
    /// Up and down a binary tree of the workers, in pipelined chunks over the Peer service.
    Tree,
    /// The master-centred range aggregation (aggregator items pull every worker's partial
    /// of one range and send the range's total to the master). The default: measured 2-4x
    /// faster than the tree on loopback at every size and worker count
    /// (docs/benchmarks/allreduce.md); whether the tree wins on a real network is not
    /// measured yet.
    #[default]
    Ranges,
}

/// The kernel, its mirror, and the unit-state version they match.
pub struct Mirrored<K: Kernel> {
    current: RwLock<(u64, K, K::Mirror)>,
}

impl<K: Kernel> Mirrored<K> {
    fn version(&self) -> u64 {
        self.current.read().expect("mirror lock").0
    }
}

impl<K: Kernel> UnitBases for Mirrored<K> {
    fn base(&self, unit: usize) -> Option<(u64, Vec<u8>)> {
        let guard = self.current.read().expect("mirror lock");
        let (version, kernel, mirror) = &*guard;
        (unit < kernel.units()).then(|| (*version, encode(&kernel.unit_base(mirror, unit))))
    }
}

/// The [`Runner`] whose every phase is work items on the workers.
pub struct RemoteRunner<K: Kernel> {
    hub: Arc<Hub>,
    kernel: K,
    bases: Arc<Mirrored<K>>,
}

impl<K: Kernel> RemoteRunner<K> {
    /// The number of state-changing phases (and reconfigurations) the units have seen.
    pub fn version(&self) -> u64 {
        self.bases.version()
    }
}

impl<K: Kernel> Runner<K> for RemoteRunner<K> {
    type Error = LineaError;

    fn run(&mut self, request: PhaseRequest<K::Phase>) -> Result<PhaseOutput> {
        let (reply, result) = std::sync::mpsc::channel::<PhaseResult>();
        let reduction = match (request.reduction, self.hub.allreduce) {
            (Reduction::AllReduce { len }, AllReduceMode::Ranges) => Reduction::RangeSum { len },
            // Range-aggregated on the wire; the non-zero entries of the total are kept below.
            (Reduction::SparseSum { len }, _) => Reduction::RangeSum { len },
            (reduction, _) => reduction,
        };
        let description = proto::Phase {
            id: 0,
            version: self.version(),
            body: encode(&request.phase),
            reduction: match reduction {
                Reduction::None => proto::Reduction::None,
                Reduction::Sum { .. } => proto::Reduction::Sum,
                Reduction::RangeSum { .. } | Reduction::SparseSum { .. } => proto::Reduction::RangeSum,
                Reduction::AllReduce { .. } => proto::Reduction::AllReduce,
            } as i32,
            len: request.reduction.len() as u32,
            mutates: request.mutates,
        };
        self.hub.dispatch(|s| s.start_phase(description, Collect::from(reduction), reply));
        let mut output = result.recv().expect("the scheduler answers every phase").map_err(|message| {
            match self.hub.stopped_by() {
                // Stopped on a signal: the phase was abandoned, nothing failed.
                Some(signal) => LineaError::Stopped(format!("{signal}: {message}")),
                None => LineaError::Remote { peer: "a worker".into(), message },
            }
        })?;
        if let Reduction::SparseSum { .. } = request.reduction {
            output.pairs = nonzero_pairs(&std::mem::take(&mut output.sums).sums);
        }
        if request.mutates {
            let mut guard = self.bases.current.write().expect("mirror lock");
            self.kernel.commit(&mut guard.2, &request.phase, &output);
            guard.0 += 1;
        }
        Ok(output)
    }

    /// A new kernel between phases: the version goes up so that no unit state of the old
    /// configuration is used again, every worker is sent the new job description (a worker
    /// keeps its old units aside for the workers that merge them, and rebuilds its new ones
    /// from the new bases), and the scheduler forgets who owned which unit, remembering for
    /// each merged unit ([`Kernel::merges_from`]) where its old units are, so their rows are
    /// fetched from those workers rather than read from storage.
    fn reconfigure(&mut self, kernel: K, mirror: K::Mirror) -> Result<()> {
        {
            let mut guard = self.bases.current.write().expect("mirror lock");
            *guard = (guard.0 + 1, kernel.clone(), mirror);
        }
        let (units, bytes) = (kernel.units(), encode(&kernel));
        let merges = (0..units).map(|unit| kernel.merges_from(&self.kernel, unit)).collect();
        self.kernel = kernel;
        let hub = &self.hub;
        let old_session = hub.job.lock().expect("job lock").session.clone();
        hub.dispatch(|s| s.reconfigure(units, hub.set_kernel(bytes), merges, old_session));
        Ok(())
    }
}

/// What workers and status callers are told about the job.
pub struct Job {
    pub data: String,
    pub algorithm: &'static str,
    pub loss: Loss,
    pub model: String,
    pub max_epochs: u32,
    /// Where the run starts (a resumed run reports its checkpoint's progress at once).
    pub progress: AlgorithmProgress,
    pub allreduce: AllReduceMode,
    pub speculation: Speculation,
}

/// A master's gRPC server on its own tokio runtime, fed phases by a [`RemoteRunner`].
pub struct Server<K: Kernel> {
    pub address: SocketAddr,
    hub: Arc<Hub>,
    kernel: K,
    bases: Arc<Mirrored<K>>,
    /// Dropped without blocking, should the server be dropped without [`Server::shutdown`].
    runtime: IoRuntime,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl<K: Kernel> Server<K> {
    /// Listens on `listen` for the workers of a job running `kernel`, whose units' state
    /// starts at `version`, rebuilt from `mirror`.
    pub fn start(
        listen: &str,
        secret: &JobSecret,
        transport: &Transport,
        job: Job,
        kernel: K,
        mirror: K::Mirror,
        version: u64,
    ) -> Result<Self> {
        let bases = Arc::new(Mirrored { current: RwLock::new((version, kernel.clone(), mirror)) });
        let hub = Arc::new(Hub {
            state: Mutex::new((Scheduler::new(kernel.units()).with_speculation(job.speculation), HashMap::new())),
            bases: bases.clone(),
            status: Mutex::new(RunStatus {
                phase: "training",
                epoch: job.progress.epoch,
                iteration: 0,
                objective: job.progress.objective.unwrap_or(f64::NAN),
                gap: job.progress.gap,
                desired_workers: job.progress.desired_workers,
                decisions: Vec::new(),
                examples_per_second: 0.0,
                error: String::new(),
                checkpointed: None,
            }),
            job: Mutex::new(proto::JobInfo {
                data: job.data,
                loss: job.loss.name().to_string(),
                session: super::hub::new_session(),
                algorithm: job.algorithm.to_string(),
                kernel: encode(&kernel),
            }),
            max_epochs: job.max_epochs,
            model: job.model,
            allreduce: job.allreduce,
            stopped_by: Mutex::new(None),
            stop_notice: Default::default(),
            finished: Default::default(),
        });
        let runtime = IoRuntime::new(2, "linea-master-io").map_err(LineaError::io("tokio runtime"))?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(listen)).map_err(LineaError::io(listen))?;
        let address = listener.local_addr().map_err(LineaError::io(listen))?;
        tracing::info!(%address, "master listening");
        runtime.spawn(super::hub::tick_scheduler(Arc::downgrade(&hub)));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = linea_proto::server::master(Service { hub: hub.clone() }, secret);
        let builder = linea_proto::server::builder(transport)?;
        let task = runtime.spawn(
            builder
                .http2_keepalive_interval(Some(Duration::from_secs(10)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .add_service(service)
                .serve_with_incoming_shutdown(linea_proto::server::incoming(listener), async {
                    let _ = stopped.await;
                }),
        );
        Ok(Server { address, hub, kernel, bases, runtime, stop, task })
    }

    /// Serves the master's `/metrics` ([`super::metrics`]) on `listen` until [`Server::shutdown`];
    /// returns the bound address (port 0: any free port).
    pub fn serve_metrics(&self, listen: &str) -> Result<SocketAddr> {
        let listener = self.runtime.block_on(tokio::net::TcpListener::bind(listen)).map_err(LineaError::io(listen))?;
        let address = listener.local_addr().map_err(LineaError::io(listen))?;
        tracing::info!(%address, "master metrics listening");
        self.runtime.spawn(super::metrics::serve(listener, self.hub.clone()));
        Ok(address)
    }

    pub fn runner(&self) -> RemoteRunner<K> {
        RemoteRunner { hub: self.hub.clone(), kernel: self.kernel.clone(), bases: self.bases.clone() }
    }

    /// Releases every worker and stops serving. Released workers hang up at once; one
    /// that does not is not waited for long. For `late_workers` more (or until SIGTERM)
    /// it goes on serving to release every worker that joins: after a restart or a lost
    /// session some workers may still be reconnecting, and a master that is gone would
    /// leave them retrying for their --reconnect-for and then failing.
    pub fn shutdown(self, late_workers: Duration) {
        // Set before the release: a worker joining meanwhile is released either here (it
        // is among the workers) or at its join (the flag is set).
        self.hub.finished.store(true, std::sync::atomic::Ordering::SeqCst);
        self.hub.release_all();
        if !late_workers.is_zero() && self.hub.stopped_by().is_none() {
            tracing::info!(
                seconds = late_workers.as_secs(),
                "the run is over; serving on to release workers still reconnecting"
            );
            let hub = self.hub.clone();
            self.runtime.block_on(async move {
                tokio::select! {
                    _ = tokio::time::sleep(late_workers) => {}
                    _ = hub.stop_notice.notified() => {}
                }
            });
        }
        self.close();
    }

    /// Stops serving without releasing anyone (after [`Hub::stop`], which refuses new
    /// sessions): every worker's session ends, and the workers keep trying to reach a master
    /// (`--reconnect-for`), which is how they find the restarted one.
    pub fn leave_workers_waiting(self) {
        self.hub.state.lock().expect("hub lock").1.clear();
        self.close();
    }

    fn close(self) {
        let _ = self.stop.send(());
        let task = self.task;
        let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }

    /// From now on SIGTERM and SIGINT stop the run ([`Hub::stop`]) instead of killing the
    /// process: the iteration in flight is abandoned, the one before it is already in the
    /// checkpoint (a checkpoint write in flight finishes first: the algorithm thread writes
    /// it between phases), and the master exits with [`crate::error::EXIT_STOPPED`]. The
    /// handlers are in place when this returns.
    pub fn stop_on_signals(&self) -> Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = self.runtime.block_on(async {
            let term = signal(SignalKind::terminate()).map_err(LineaError::io("SIGTERM handler"))?;
            let int = signal(SignalKind::interrupt()).map_err(LineaError::io("SIGINT handler"))?;
            Ok::<_, LineaError>((term, int))
        })?;
        let hub = self.hub.clone();
        self.runtime.spawn(async move {
            let signal = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal, "stopping: no more phases; the checkpoint keeps the last completed iteration");
            hub.stop(signal);
        });
        Ok(())
    }

    /// Scheduler counters (benchmarks read them).
    pub fn counters(&self) -> super::scheduler::Counters {
        self.hub.state.lock().expect("hub lock").0.counters
    }
}

/// Identifies a run: a checkpoint is resumed only by the same algorithm, parameters and data.
fn fingerprint(options: &TrainOptions, layout: &Layout) -> String {
    let manifest = serde_json::to_vec(&layout.manifest).expect("serializes");
    format!(
        "{:?}|{}|l2={}|l1={}|epochs={}|tolerance={}|seed={}|slots={}|passes={}|gap={}|gap_every_epoch={}|elastic={:?}|accelerate={:?}|memory={}|precondition={:?}|rate={}|gradient={}|mixing={:?}|manifest-crc32c:{:08x}",
        options.algorithm,
        options.loss.name(),
        options.l2,
        options.l1,
        options.epochs,
        options.tolerance,
        options.seed,
        options.slots,
        options.local_passes,
        options.gap_tolerance,
        options.gap_every_epoch,
        options.elastic,
        options.accelerate,
        options.memory,
        options.precondition,
        options.rate,
        options.gradient_tolerance,
        options.mixing,
        crc32c::crc32c(&manifest)
    ) + &solver_mark(options.solver)
}

/// The batch solver's part of the fingerprint: nothing for L-BFGS, so the runs that
/// existed before there was a choice keep their fingerprints (and resume).
fn solver_mark(solver: BatchSolver) -> String {
    match solver {
        BatchSolver::Lbfgs => String::new(),
        BatchSolver::Newton => format!("|solver={}", solver.name()),
    }
}

/// The number of the newest of `count` decisions (they are numbered from 1; 0: none).
fn decision_number(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
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
    let started = Instant::now();
    let layout = Layout::read(storage::open(&options.train.data)?.as_ref())?;
    driver::describe_grid(&layout, &options.train.data, started, progress);
    let master = AsMaster { options, layout: &layout, progress, on_listening };
    driver::with_algorithm(&options.train, &layout, master)
}

struct AsMaster<'a, F> {
    options: &'a MasterOptions,
    layout: &'a Layout,
    progress: &'a Progress,
    on_listening: F,
}

impl<F: FnOnce(SocketAddr, AbortHandle)> WithAlgorithm for AsMaster<'_, F> {
    type Output = TrainSummary;

    fn run<A: Algorithm>(self, mut algorithm: A) -> Result<TrainSummary> {
        let (options, layout, progress) = (self.options, self.layout, self.progress);
        let train = &options.train;
        let checkpoints = options.checkpoint.as_deref().map(|c| Checkpoints::open(c, fingerprint(train, layout)));
        let mut checkpoints = checkpoints.transpose()?;
        let (mut version, mut trace) = (0, Vec::new());
        let mut checkpointed = None;
        let mut released = Vec::new();
        let loaded = checkpoints.as_mut().map(|c| c.load(&mut algorithm)).transpose()?.flatten();
        for why in checkpoints.iter().flat_map(|c| &c.ignored) {
            progress
                .always(&format!("checkpoint object ignored as damaged (resuming from the state before it): {why}"));
        }
        // What the checkpoint holds (epoch, unit-state version): what a stop reports.
        let mut kept = None;
        let resuming = match loaded {
            Some(resumed) => {
                let at = algorithm.progress();
                progress.always(&format!(
                    "resuming from checkpoint: epoch {}, unit-state version {}",
                    at.epoch, resumed.version
                ));
                kept = Some((at.epoch, resumed.version));
                (version, trace, released) = (resumed.version, resumed.trace, resumed.released);
                true
            }
            None => {
                if let Some(c) = &mut checkpoints {
                    c.save_base(&algorithm, 0, &trace, &released)?;
                    checkpointed = Some(Instant::now());
                    kept = Some((algorithm.progress().epoch, 0));
                }
                false
            }
        };
        let job = Job {
            data: train.data.clone(),
            algorithm: algorithm.name(),
            loss: train.loss,
            model: train.model.clone(),
            max_epochs: train.epochs,
            progress: algorithm.progress(),
            allreduce: options.allreduce,
            speculation: options.speculation,
        };
        let server = Server::start(
            &options.listen,
            &options.secret,
            &options.transport,
            job,
            algorithm.kernel().clone(),
            algorithm.mirror(),
            version,
        )?;
        let hub = server.hub.clone();
        // The decisions replayed from the checkpoint, reported as they were: with their
        // numbers and the workers an earlier master released under each.
        let replayed = algorithm.scaling_decisions();
        let desired = algorithm.progress().desired_workers.map(|n| n as usize);
        let gate = options.wait_for_workers;
        let wait =
            StartGate { workers: if resuming { 0 } else { gate.workers.min(desired.unwrap_or(usize::MAX)) }, ..gate };
        hub.dispatch(|s| {
            s.released = released;
            s.start_with(wait);
            s.set_desired(desired, decision_number(replayed.len()))
        });
        hub.set_status(|s| {
            s.checkpointed = checkpointed;
            s.record_decisions(&replayed);
        });
        if options.stop_on_signals {
            server.stop_on_signals()?;
        }
        if let Some(listen) = &train.metrics_listen {
            let address = server.serve_metrics(listen)?;
            progress.always(&format!("master metrics on http://{address}/metrics"));
        }
        (self.on_listening)(server.address, AbortHandle(server.hub.clone()));
        let mut runner = server.runner();
        let sizes = (layout.manifest.rows as f64, layout.manifest.nnz as f64);
        let scale = layout.manifest.target_scale(train.loss);
        let mut trace_file = TraceFile::for_run(train.trace.as_deref(), driver::ran(&algorithm), scale)?;
        // `linea master` stops through its hub (`stop_on_signals`); `linea train --workers N`
        // between epochs, keeping their model, as in one process (`TrainOptions`).
        let interrupt = if train.stop_on_signals { Interrupt::on_signals()? } else { Interrupt::none() };
        let outcome = driver::drive(
            &mut algorithm,
            &mut runner,
            sizes,
            progress,
            &mut trace,
            checkpoints.is_some(),
            &interrupt,
            |algorithm, iteration, trace| {
                if let Some(file) = &mut trace_file {
                    file.append(trace)?;
                }
                let version = server.bases.version();
                let report = algorithm.progress();
                let decisions = algorithm.scaling_decisions();
                // Whom a scale-in releases is decided here, under the decision's number, and
                // checkpointed before they are told: a restarted master lists them as this
                // one would have.
                let (release, record) = hub.step(|s| {
                    let outbox =
                        s.set_desired(report.desired_workers.map(|n| n as usize), decision_number(decisions.len()));
                    (outbox, s.released.clone())
                });
                let mut saved = None;
                if let Some(c) = &mut checkpoints {
                    c.save(algorithm, iteration, version, trace, &record)?;
                    saved = Some(Instant::now());
                    kept = Some((report.epoch, version));
                }
                hub.send(release);
                hub.set_status(|s| {
                    s.checkpointed = saved.or(s.checkpointed);
                    s.iteration += 1;
                    s.epoch = report.epoch;
                    s.objective = scale.unscale_objective(report.objective.unwrap_or(f64::NAN));
                    s.gap = report.gap;
                    s.desired_workers = report.desired_workers;
                    s.record_decisions(&decisions);
                    if let (true, [.., a, b]) = (iteration.epoch_done, trace) {
                        s.examples_per_second = sizes.0 / (b.seconds - a.seconds).max(1e-9);
                    }
                });
                Ok(())
            },
        )
        .and_then(|seconds| driver::finish(train, layout, &algorithm, trace, seconds, &interrupt));
        if let (Err(LineaError::Stopped(_)), Some(signal)) = (&outcome, hub.stopped_by()) {
            // Stopped between iterations: what the last one left is in the checkpoint (it
            // was written before the next phase was asked for), so this is all there is to
            // keep. The workers stay, waiting for the master that resumes from it.
            let message = match kept {
                Some((epoch, version)) => format!(
                    "on {signal}, with epoch {epoch} (unit-state version {version}) in the checkpoint: a restarted master resumes there"
                ),
                None => format!("on {signal}, with no --checkpoint: a restarted master starts over"),
            };
            server.leave_workers_waiting();
            return Err(LineaError::Stopped(message));
        }
        hub.set_status(|s| match &outcome {
            Ok(_) => s.phase = "succeeded",
            Err(e) => {
                s.phase = "failed";
                s.error = e.to_string();
            }
        });
        // Workers this master never saw may still be reconnecting: those of the master it
        // resumed from, and any whose session it lost.
        let lost = hub.state.lock().expect("hub lock").0.counters.workers_lost;
        let late_workers = if resuming || lost > 0 { options.late_workers } else { Duration::ZERO };
        server.shutdown(late_workers);
        outcome
    }
}
