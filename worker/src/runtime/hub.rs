//! Where the master's algorithm thread and its gRPC tasks meet: the pure [`Scheduler`]
//! decides, the hub sends what it returns; and the `Master` service workers and status
//! callers talk to.

use super::proto::{self, master_message, worker_message};
use super::scheduler::{Outbox, Scheduler, WorkerKey};
use linea_engine::algorithm::{Gap, ScalingDecision};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone)]
pub struct RunStatus {
    pub phase: &'static str,
    pub epoch: u32,
    pub iteration: u64,
    pub objective: f64,
    pub gap: Option<Gap>,
    pub desired_workers: Option<u32>,
    /// Every decision of the algorithm about the worker count, numbered (see
    /// [`RunStatus::record_decisions`]); the status reply adds the workers released under
    /// each from the scheduler's record.
    pub decisions: Vec<proto::ScalingDecision>,
    pub examples_per_second: f64,
    pub error: String,
    /// When this master last wrote a checkpoint (its `/metrics` exports the age).
    pub checkpointed: Option<std::time::Instant>,
}

impl RunStatus {
    /// Brings the reported decisions up to the algorithm's list (`all`, oldest first: the
    /// known ones keep their numbers, the n-th is number n).
    pub fn record_decisions(&mut self, all: &[ScalingDecision]) {
        let known = self.decisions.len();
        for (i, d) in all.iter().enumerate().skip(known) {
            self.decisions.push(proto::ScalingDecision {
                number: u32::try_from(i + 1).unwrap_or(u32::MAX),
                epoch: d.epoch,
                from_workers: d.from,
                to_workers: d.to,
                released_workers: Vec::new(),
                reason: d.reason.clone(),
            });
        }
    }
}

pub type Outboxes = HashMap<WorkerKey, UnboundedSender<Result<proto::MasterMessage, Status>>>;

/// Where the algorithm thread and the gRPC tasks meet.
pub struct Hub {
    pub state: Mutex<(Scheduler, Outboxes)>,
    /// What rebuilding a unit needs, always matching the units' current version.
    pub bases: Arc<dyn UnitBases>,
    pub status: Mutex<RunStatus>,
    /// What a joining worker is told; the kernel changes when the algorithm reconfigures.
    pub job: Mutex<proto::JobInfo>,
    pub max_epochs: u32,
    pub model: String,
    pub allreduce: super::master::AllReduceMode,
    /// The signal that stopped the run ([`Hub::stop`]), if one did.
    pub stopped_by: Mutex<Option<&'static str>>,
    /// Woken by [`Hub::stop`]: ends a finished master's wait for late workers early.
    pub stop_notice: tokio::sync::Notify,
    /// The run is over ([`super::master::Server::shutdown`]): a worker that joins is released.
    pub finished: AtomicBool,
}

/// A unit's base for a worker that rebuilds it: the version and the encoded base.
pub trait UnitBases: Send + Sync {
    fn base(&self, unit: usize) -> Option<(u64, Vec<u8>)>;
}

impl Hub {
    /// Runs one scheduler step and sends the messages it returns (see [`deliver`]).
    pub fn dispatch(&self, step: impl FnOnce(&mut Scheduler) -> Outbox) {
        let mut guard = self.state.lock().expect("hub lock");
        let (scheduler, outboxes) = &mut *guard;
        let messages = step(scheduler);
        deliver(scheduler, outboxes, messages);
    }

    /// Runs one scheduler step and returns its messages unsent, for a caller that must
    /// record something first (the master checkpoints whom a scale-in releases before it
    /// tells them); [`Hub::send`] sends them.
    pub fn step<T>(&self, step: impl FnOnce(&mut Scheduler) -> (Outbox, T)) -> (Outbox, T) {
        step(&mut self.state.lock().expect("hub lock").0)
    }

    /// Sends messages a [`Hub::step`] returned.
    pub fn send(&self, outbox: Outbox) {
        let mut guard = self.state.lock().expect("hub lock");
        let (scheduler, outboxes) = &mut *guard;
        deliver(scheduler, outboxes, outbox);
    }

    /// The run is over: every open session is released, the scheduler's workers and any
    /// it no longer counts, so no worker is left waiting on a session that ends with the
    /// master.
    pub fn release_all(&self) {
        let mut guard = self.state.lock().expect("hub lock");
        let (scheduler, outboxes) = &mut *guard;
        scheduler.release_all();
        for (_, outbox) in outboxes.drain() {
            let _ = outbox.send(Ok(release()));
        }
    }

    /// The job description with a new kernel and a new session (so workers drop what they
    /// hold of the old one), as the message to send to every worker.
    pub fn set_kernel(&self, kernel: Vec<u8>) -> proto::MasterMessage {
        let mut job = self.job.lock().expect("job lock");
        job.kernel = kernel;
        job.session = new_session();
        proto::MasterMessage { body: Some(master_message::Body::Job(job.clone())) }
    }

    pub fn set_status(&self, update: impl FnOnce(&mut RunStatus)) {
        update(&mut self.status.lock().expect("status lock"));
    }

    /// Stops the run on `signal`: no phase is handed out any more (the one in flight fails,
    /// and so does every later one) and no worker is taken in. Workers are not released:
    /// they keep trying to reach a master, and a restarted one takes them back.
    pub fn stop(&self, signal: &'static str) {
        self.stopped_by.lock().expect("stop lock").get_or_insert(signal);
        self.stop_notice.notify_one();
        if self.finished.load(Ordering::SeqCst) {
            // Only the wait for late workers was left: the run's outcome stands.
            return;
        }
        self.set_status(|s| s.phase = "stopping");
        self.dispatch(|s| s.abort(format!("the master is stopping ({signal})")));
    }

    /// The signal that stopped the run, if one did.
    pub fn stopped_by(&self) -> Option<&'static str> {
        *self.stopped_by.lock().expect("stop lock")
    }
}

/// Ticks the scheduler's clock every [`super::speculation::TICK`] until the hub is gone:
/// what depends on time alone happens then (no message would prompt it): stragglers found
/// (a stalled worker sends nothing), a start gate opened when its patience ran out.
pub async fn tick_scheduler(hub: Weak<Hub>) {
    let mut interval = tokio::time::interval(super::speculation::TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let Some(hub) = hub.upgrade() else { return };
        hub.dispatch(Scheduler::tick);
    }
}

/// A random session name: workers tell one master session's partial sums from another's.
pub fn new_session() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn release() -> proto::MasterMessage {
    proto::MasterMessage { body: Some(master_message::Body::Release(proto::Release {})) }
}

/// Sends `messages`. A released worker's outbox is dropped, which ends its stream once the
/// release is read; so is a lost worker's (the scheduler gave up on it while its session
/// may still be open: a peer could not reach it), and that worker joins again as a new one.
fn deliver(scheduler: &mut Scheduler, outboxes: &mut Outboxes, messages: Outbox) {
    for (key, message) in messages {
        let release = matches!(message.body, Some(master_message::Body::Release(_)));
        if let Some(outbox) = outboxes.get(&key) {
            let _ = outbox.send(Ok(message));
        }
        if release {
            outboxes.remove(&key);
        }
    }
    for key in scheduler.take_lost_sessions() {
        if outboxes.remove(&key).is_some() {
            tracing::info!(
                key,
                "ended the session of a worker given up on (a peer could not reach it): it joins again"
            );
        }
    }
}

pub struct Service {
    pub hub: Arc<Hub>,
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
        let hub = self.hub.clone();
        let key = {
            // The job is read under the hub lock, so a reconfiguration either reaches this
            // worker through its outbox or is already in the description it gets here.
            let mut guard = hub.state.lock().expect("hub lock");
            if hub.finished.load(Ordering::SeqCst) {
                // The run is over: a worker that comes back only now (it was reconnecting
                // while the others were released) is released too, instead of retrying for
                // --reconnect-for and then exiting with an error.
                tracing::info!(worker = %join.worker_id, "worker released on joining: the run is over");
                outbox.send(Ok(release())).expect("receiver is here");
                return Ok(Response::new(UnboundedReceiverStream::new(messages)));
            }
            // Under the hub lock, which the stopping master takes to drop every session: a
            // worker is either refused here (it retries, and finds the restarted master) or
            // its session is dropped with the others.
            if hub.stopped_by().is_some() {
                return Err(Status::unavailable("the master is stopping"));
            }
            let job = hub.job.lock().expect("job lock").clone();
            outbox
                .send(Ok(proto::MasterMessage { body: Some(master_message::Body::Job(job)) }))
                .expect("receiver is here");
            let (scheduler, outboxes) = &mut *guard;
            let (key, messages) = scheduler.join(join.worker_id.clone(), join.address.clone(), join.threads as usize);
            outboxes.insert(key, outbox);
            deliver(scheduler, outboxes, messages);
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

    async fn get_unit_base(
        &self,
        request: Request<proto::GetUnitBaseRequest>,
    ) -> Result<Response<proto::UnitBase>, Status> {
        let unit = request.into_inner().unit as usize;
        let (version, base) =
            self.hub.bases.base(unit).ok_or_else(|| Status::not_found(format!("no unit {unit} in this job")))?;
        Ok(Response::new(proto::UnitBase { version, base }))
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

pub fn status_reply(hub: &Hub) -> proto::StatusReply {
    let run = hub.status.lock().expect("status lock").clone();
    let guard = hub.state.lock().expect("hub lock");
    let scheduler = &guard.0;
    let workers: Vec<proto::WorkerStatus> = scheduler
        .workers()
        .map(|(key, w, shards)| proto::WorkerStatus {
            worker_id: w.id.clone(),
            address: w.address.clone(),
            draining: w.draining,
            shards: shards as u32,
            tree_parent: scheduler
                .tree_place(key)
                .1
                .map(|parent| parent.and_then(|p| scheduler.worker_id(p)).unwrap_or_default()),
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
        algorithm: hub.job.lock().expect("job lock").algorithm.clone(),
        gap_absolute: run.gap.map(|g| g.absolute),
        gap_relative: run.gap.map(|g| g.relative),
        desired_workers: run.desired_workers,
        released_workers: scheduler.released_ids(),
        allreduce_generation: scheduler.tree_generation(),
        // Whom each decision released: the scheduler's record, which it keeps as it releases
        // them (and a restarted master restores from the checkpoint).
        scaling_decisions: run
            .decisions
            .into_iter()
            .map(|d| proto::ScalingDecision { released_workers: scheduler.released_for(d.number), ..d })
            .collect(),
    }
}
