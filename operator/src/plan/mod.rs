//! What to change, given a job, the objects it should have and what exists: a pure function
//! from (job, built children, observed pods and Service, master progress, now) to a [`Plan`]
//! — the objects to create, pods to delete and drain, the new status, events, and whether
//! the job's TTL has run out. No API calls here; `reconcile` carries the plan out.
//!
//! Rules:
//! - Only objects the job controls (a controller owner reference with its UID) are the job's.
//!   A same-named object that is not is never adopted, changed or deleted: the job says so
//!   (`Created=False`, ResourceConflict, an event naming the object) and waits.
//! - The master Pod never restarts in place (restartPolicy Never). When it fails, a new master
//!   resumes from its checkpoint after an exponential backoff (10 s, 20 s, ... 5 min) and the
//!   job's `restarts` counts it, until `backoffLimit` is exceeded. Exit code 2 (bad data or
//!   arguments) fails the job at once: a restart cannot help. Exit code 143 (the master
//!   stopped on SIGTERM after checkpointing, or SIGTERM killed it) is neither a failure nor
//!   the end: a new master resumes at once, not counted, as after a preemption.
//! - Failed workers are replaced after the same backoff, counted in `workers.failed` with an
//!   event saying why (OOMKilled, exit code, termination message). `workers.recentFailures`
//!   counts the failures since training last advanced (the master reported a new epoch):
//!   past `workerFailureLimit` the job is broken; the backoff doubles with it. A pod that had
//!   run for [`BACKOFF_RESET_AFTER`] before it failed is replaced at once (the kubelet's
//!   crash-loop reset). Preempted, evicted or drained pods are replaced at once and never
//!   count: preemption is not failure.
//! - The master is covered by a PodDisruptionBudget, so a node drain waits for it instead of
//!   evicting it mid-run; workers are not.
//! - The auth Secret gets a generated name; pods are created only once the Secret's name and
//!   UID (from the create's response) are recorded in the status, so a Secret created just
//!   before the operator stopped is never mistaken for someone else's, nor the other way.
//! - At most [`MAX_CREATES_PER_RECONCILE`] pods are created per reconcile, and the status is
//!   written after each batch, so a large job shows progress and the operator stays stoppable.
//! - A pod that cannot start (unschedulable, image pull, missing Secret) shows up in the
//!   `Blocked` condition; events are emitted when a condition changes, not on every pass.
//! - The final status comes from the master's final state: its termination message carries
//!   the epoch count and objective of the model it wrote.

mod master;
mod planner;
mod pods;
#[cfg(test)]
mod tests;
mod workers;

use crate::desired::{self, Children, LABEL_INDEX, LABEL_ROLE, Role};
use crate::elastic;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use linea_crds::status::{condition_status, condition_type, reason};
use linea_crds::{CleanPodPolicy, Phase, Progress, TrainingJob, TrainingJobStatus, WorkerStatus};
use planner::Planner;
use pods::*;
pub use pods::{TERMINATION_TAINTS, backoff, disrupted, node_terminating};
use serde::Deserialize;
use std::time::Duration;

/// Pods created by one reconcile at most. The status is written after every batch, and a
/// reconcile stays short enough for the operator to stop promptly on SIGTERM.
pub const MAX_CREATES_PER_RECONCILE: usize = 20;
/// First delay before replacing a failed pod; doubled for every earlier failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest delay before replacing a failed pod.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A pod that ran this long before it failed is not crash-looping: it is replaced without
/// waiting, as the kubelet resets a container's crash-loop backoff after 10 minutes.
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);
/// Exit code of `linea` for bad input or arguments (dataset missing or corrupt, usage).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code of a `linea master` that stopped on SIGTERM with its last iteration in the
/// checkpoint (128 + SIGTERM, as for any process SIGTERM ended): restart it.
pub const EXIT_STOPPED: i32 = 143;

/// Progress as the master's status RPC reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MasterProgress {
    pub epoch: i64,
    pub iteration: i64,
    pub objective: Option<f64>,
    /// The duality gap relative to the objective (CoCoA).
    pub duality_gap: Option<f64>,
    pub examples_per_second: f64,
    pub workers_active: i32,
    pub workers_draining: i32,
    /// The worker count the algorithm wants (elastic CoCoA: its slots now); `None`: any.
    pub desired_workers: Option<i32>,
    /// Worker ids (`<pod name>-<8 hex>`) this master released in a scale-in, oldest first.
    pub released_workers: Vec<String>,
    /// Every scaling decision of the master's algorithm, oldest first (see [`MasterDecision`]).
    pub scaling_decisions: Vec<MasterDecision>,
}

/// One scaling decision as the master's status RPC lists it: numbered from 1, the same number
/// from every master of the job (a restarted one replays them from its checkpoint).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MasterDecision {
    pub number: u32,
    pub epoch: u32,
    pub from: u32,
    pub to: u32,
    /// Worker ids released under it (a restarted master's come from its checkpoint).
    pub released_workers: Vec<String>,
    pub reason: String,
}

/// What `linea master` writes to its termination message after writing the model: the
/// model header's epoch count, objective and (CoCoA) relative duality gap.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MasterSummary {
    pub epochs: i64,
    pub objective: Option<f64>,
    #[serde(default)]
    pub duality_gap: Option<f64>,
}

/// What exists, as read by `reconcile`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// Pods with the job's label, whoever owns them.
    pub pods: &'a [Pod],
    /// The Service named like the job's master Service, if any.
    pub service: Option<&'a Service>,
    /// The PodDisruptionBudget named like the job's, if any.
    pub budget: Option<&'a PodDisruptionBudget>,
    pub progress: Option<&'a MasterProgress>,
    /// Nodes of the job's pods that are about to go ([`node_terminating`]).
    pub leaving_nodes: &'a [String],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    /// The elastic scale-in decision (its number) this event reports: recorded exactly once,
    /// under a name fixed by the decision ([`elastic::event_name`]), before the status that
    /// records it as reported is written.
    pub decision: Option<i32>,
}

/// The API server refuses an event whose note is longer than this (bytes), and the event is
/// then lost: a master's termination message alone can be 4096 bytes.
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `note` cut to [`EVENT_NOTE_LIMIT`] bytes by dropping its middle: the start says what
/// happened, the end has the last lines of the pod's message and "restart 1 of 3".
pub fn event_note(note: &str) -> std::borrow::Cow<'_, str> {
    const GAP: &str = " [...] ";
    if note.len() <= EVENT_NOTE_LIMIT {
        return note.into();
    }
    let half = (EVENT_NOTE_LIMIT - GAP.len()) / 2;
    // (str::floor_char_boundary is newer than the workspace's rust-version, 1.90.)
    let mut head = half;
    while !note.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = note.len() - half;
    while !note.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}{GAP}{}", &note[..head], &note[tail..]).into()
}

/// A pod to delete: its name and UID (the delete's precondition, so a newer pod of the same
/// name is never hit).
#[derive(Debug, Clone, PartialEq)]
pub struct Doomed {
    pub name: String,
    pub uid: Option<String>,
}

/// What to do. `reconcile` destructures it: a new kind of object that is never applied
/// fails to compile there.
#[derive(Debug, Clone)]
pub struct Plan {
    pub status: TrainingJobStatus,
    /// The auth Secret to create (create only, with a generated name: it is never read back
    /// or changed); pods wait until its name is recorded.
    pub secret: Option<Secret>,
    /// The master Service to apply (absent or ours).
    pub service: Option<Service>,
    /// The master's PodDisruptionBudget to apply (absent or ours).
    pub budget: Option<PodDisruptionBudget>,
    /// Pods to create, the master first.
    pub pods: Vec<Pod>,
    /// Running workers on nodes about to go: the master is asked to drain them, so they
    /// hand their shards over and exit before the node is taken away.
    pub drain_workers: Vec<String>,
    pub delete_pods: Vec<Doomed>,
    pub events: Vec<Event>,
    pub delete_job: bool,
    pub requeue: Duration,
    /// When the plan was made: the time of any condition `reconcile` adds.
    pub now: Time,
}

impl Plan {
    /// A plan that creates, deletes and drains nothing: `status` and `events` as given.
    pub fn empty(status: TrainingJobStatus, events: Vec<Event>, requeue: Duration, now: Time) -> Plan {
        Plan {
            status,
            secret: None,
            service: None,
            budget: None,
            pods: Vec::new(),
            drain_workers: Vec::new(),
            delete_pods: Vec::new(),
            events,
            delete_job: false,
            requeue,
            now,
        }
    }

    /// Names of the pods to create.
    pub fn created(&self) -> Vec<String> {
        self.pods.iter().map(ResourceExt::name_any).collect()
    }

    /// Names of the pods to delete.
    pub fn deleted(&self) -> Vec<String> {
        self.delete_pods.iter().map(|d| d.name.clone()).collect()
    }

    /// Drops every object the plan would create or apply: what the job has stays as it is.
    fn create_nothing(&mut self) {
        self.secret = None;
        self.service = None;
        self.budget = None;
        self.pods.clear();
    }

    fn set(&mut self, job: &TrainingJob, type_: &str, ok: bool, why: &str, message: String) -> bool {
        let c = condition(type_, ok, why, message, &self.now, job.metadata.generation);
        self.status.set_condition(c)
    }

    /// `what` (e.g. `service ml/ads-master`) exists and is not the job's: create nothing,
    /// say so in `Created` and, when that is news, in an event.
    pub fn conflict(&mut self, job: &TrainingJob, what: &str) {
        let message = format!(
            "{what} exists and is not owned by this TrainingJob; the operator does not adopt or delete it: \
             delete or rename it and the job continues"
        );
        self.create_nothing();
        if self.set(job, condition_type::CREATED, false, reason::RESOURCE_CONFLICT, message.clone()) {
            self.events.push(Event { warning: true, reason: reason::RESOURCE_CONFLICT, note: message, decision: None });
        }
    }

    /// Every object could be created or was already the job's: a conflict reported earlier
    /// is over.
    pub fn resolved(&mut self, job: &TrainingJob) {
        let conflicted =
            self.status.condition(condition_type::CREATED).is_some_and(|c| c.reason == reason::RESOURCE_CONFLICT);
        if conflicted {
            self.set(
                job,
                condition_type::CREATED,
                true,
                reason::RESOURCES_CREATED,
                "the conflicting object is gone".into(),
            );
        }
    }

    /// The API server refused to create `what` (`pod NAME`, `secret NAME`, ...: a quota, an
    /// admission policy): stop creating, say why; `reconcile` retries with exponential backoff.
    pub fn refused(&mut self, job: &TrainingJob, what: &str, message: &str) {
        let message = format!("creating {what} was refused: {message}");
        let why = if what.starts_with("pod ") { reason::POD_CREATION_REFUSED } else { reason::CREATION_REFUSED };
        self.create_nothing();
        if self.set(job, condition_type::BLOCKED, true, why, message.clone()) {
            self.events.push(Event { warning: true, reason: why, note: message, decision: None });
        }
    }

    /// The API server found an object built from the spec invalid: the job cannot run as
    /// specified, so it fails with the server's message (which names the field).
    pub fn invalid(&mut self, job: &TrainingJob, message: &str) {
        let message = format!("the API server refused the job's objects: {message}");
        self.create_nothing();
        self.status.phase = Some(Phase::Failed);
        self.set(job, condition_type::FAILED, true, reason::INVALID_SPEC, message.clone());
        self.set(job, condition_type::RUNNING, false, reason::INVALID_SPEC, "the job has finished".into());
        self.status.completion_time = Some(self.now.clone());
        self.events.push(Event { warning: true, reason: reason::INVALID_SPEC, note: message, decision: None });
    }
}

fn condition(type_: &str, ok: bool, reason: &str, message: String, now: &Time, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { condition_status::TRUE } else { condition_status::FALSE }.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: generation,
    }
}

/// Decides what to do about `job`, whose objects should be `children`, given what exists.
pub fn plan(job: &TrainingJob, children: Children, observed: Observed<'_>, now: Timestamp) -> Plan {
    let mut status = job.status.clone().unwrap_or_default();
    let before = status.phase;
    status.observed_generation = job.metadata.generation;
    status.algorithm = Some(job.spec.algorithm_name().to_string());
    let plan = Plan::empty(status, Vec::new(), Duration::from_secs(10), Time(now));
    let pods = observed.pods.iter().filter(|p| desired::owned_by(&p.metadata, job)).collect();
    let mut p = Planner { job, pods, children, now: Time(now), blocked: Vec::new(), plan };

    if p.plan.status.is_finished() {
        p.clean_up();
        p.plan.requeue = Duration::from_secs(300);
        let ttl = job.spec.run_policy.ttl_seconds_after_finished;
        if let (Some(ttl), Some(done)) = (ttl, &p.plan.status.completion_time) {
            let expires = done.0 + SignedDuration::from_secs(ttl.into());
            if now >= expires {
                p.plan.delete_job = true;
            } else {
                let left = expires.duration_since(now).as_secs_f64().max(0.0);
                p.plan.requeue = Duration::from_secs_f64(left);
            }
        }
        return p.plan;
    }
    if let Err(why) = job.validate() {
        p.finish(false, reason::INVALID_SPEC, why.to_string());
        return p.plan;
    }
    let foreign_service =
        observed.service.filter(|s| !desired::owned_by(&s.metadata, job)).map(|s| ("service", &s.metadata));
    let foreign_budget =
        observed.budget.filter(|b| !desired::owned_by(&b.metadata, job)).map(|b| ("poddisruptionbudget", &b.metadata));
    if let Some((kind, meta)) = foreign_service.or(foreign_budget) {
        let what = format!(
            "{kind} {}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        p.plan.status.phase.get_or_insert(Phase::Pending);
        p.plan.conflict(job, &what);
        p.plan.requeue = Duration::from_secs(30);
        return p.plan;
    }
    if p.plan.status.start_time.is_none() {
        p.plan.status.start_time = Some(p.now.clone());
    }
    if let (Some(deadline), Some(start)) = (job.spec.run_policy.active_deadline_seconds, &p.plan.status.start_time) {
        let ends = start.0 + SignedDuration::from_secs(deadline);
        if now >= ends {
            p.finish(false, reason::DEADLINE_EXCEEDED, format!("ran longer than activeDeadlineSeconds ({deadline} s)"));
            return p.plan;
        }
        let left = Duration::from_secs_f64(ends.duration_since(now).as_secs_f64().max(0.0));
        p.plan.requeue = p.plan.requeue.min(left);
    }
    // Raw data first becomes the grid; nothing else exists until it is ready.
    if !p.prepare() {
        if !p.plan.status.is_finished() {
            p.blocked();
            p.requeue_within(Duration::from_secs(10));
        }
        return p.plan;
    }
    if p.plan.status.condition(condition_type::CREATED).is_none() {
        p.set(condition_type::CREATED, true, reason::RESOURCES_CREATED, "master, service and workers requested");
        p.event(false, reason::RESOURCES_CREATED, "created the master, its service and the workers");
    }
    if desired::secret_name(job).is_none() {
        p.plan.secret = p.children.secret.take();
    }
    p.plan.service = Some(p.children.service.clone());
    p.plan.budget = Some(p.children.budget.clone());
    p.master(observed.progress);
    if p.plan.status.is_finished() {
        return p.plan;
    }
    p.workers(observed.progress, observed.leaving_nodes);
    if p.plan.status.is_finished() {
        return p.plan;
    }
    p.blocked();
    p.await_secret();
    p.batch();
    if before != p.plan.status.phase && p.plan.status.phase == Some(Phase::Running) {
        p.event(false, reason::TRAINING, "the master is running");
    }
    p.plan
}
