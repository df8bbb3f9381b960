//! What to change, given a job and what exists: a pure function from (job, pods, master
//! progress, now) to a [`Plan`] — pods to create and delete, the new status, events, and
//! whether the job's TTL has run out. No API calls here; `reconcile` carries the plan out.
//!
//! Rules: the master Pod never restarts in place (restartPolicy Never); when it fails the
//! job's `restarts` counts it and a new master resumes from its checkpoint, until
//! `backoffLimit` is exceeded. A pod that was preempted or evicted (a `DisruptionTarget`
//! condition, an eviction) is replaced without counting: preemption is not failure. Worker
//! pods that end are replaced while the job runs; the master hands their shards to others.

use crate::desired::{self, LABEL_INDEX, LABEL_ROLE, Role};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use linea_crds::status::{condition_status, condition_type, reason};
use linea_crds::{CleanPodPolicy, Phase, Progress, TrainingJob, TrainingJobStatus, WorkerStatus};
use std::time::Duration;

/// Progress as the master's status RPC reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MasterProgress {
    pub epoch: i64,
    pub iteration: i64,
    pub objective: Option<f64>,
    pub examples_per_second: f64,
    pub workers_active: i32,
    pub workers_draining: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub status: TrainingJobStatus,
    pub create_master: bool,
    pub create_workers: Vec<i32>,
    /// Running workers on nodes about to go: the master is asked to drain them, so they
    /// hand their shards over and exit before the node is taken away.
    pub drain_workers: Vec<String>,
    pub delete_pods: Vec<String>,
    pub events: Vec<Event>,
    pub delete_job: bool,
    pub requeue: Duration,
}

fn phase_of(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

fn pod_condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == condition_status::TRUE))
}

/// Node taints that announce the node's removal (spot interruption notices, Karpenter and
/// cluster-autoscaler scale-down, GKE's impending termination).
pub const TERMINATION_TAINTS: [&str; 5] = [
    "aws-node-termination-handler/spot-itn",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "cloud.google.com/impending-node-termination",
    "ToBeDeletedByClusterAutoscaler",
];

/// Whether a node is about to go: a termination taint, or cordoned.
pub fn node_terminating(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let Some(spec) = &node.spec else { return false };
    spec.unschedulable == Some(true)
        || spec.taints.iter().flatten().any(|t| TERMINATION_TAINTS.contains(&t.key.as_str()))
}

/// Taken away rather than failed: preempted, evicted, its node shut down.
pub fn disrupted(pod: &Pod) -> bool {
    let reason = pod.status.as_ref().and_then(|s| s.reason.as_deref()).unwrap_or_default();
    pod_condition(pod, "DisruptionTarget")
        || matches!(reason, "Evicted" | "Preempting" | "Shutdown" | "NodeShutdown" | "Terminated" | "NodeLost")
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn finished_pod(pod: &Pod) -> bool {
    matches!(phase_of(pod), "Succeeded" | "Failed")
}

fn pod_message(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    match terminated {
        Some(t) => {
            format!("exit code {}{}", t.exit_code, t.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())
        }
        None => status.and_then(|s| s.message.clone()).unwrap_or_else(|| "no message".into()),
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

struct Planner<'a> {
    job: &'a TrainingJob,
    pods: &'a [Pod],
    now: Time,
    plan: Plan,
}

impl Planner<'_> {
    fn set(&mut self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) {
        let c = condition(type_, ok, reason, message.into(), &self.now, self.job.metadata.generation);
        self.plan.status.set_condition(c);
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.plan.events.push(Event { warning, reason, note: note.into() });
    }

    fn delete(&mut self, pod: &Pod) {
        if !terminating(pod) && !self.plan.delete_pods.contains(&pod.name_any()) {
            self.plan.delete_pods.push(pod.name_any());
        }
    }

    /// Ends the job: the phase, its condition, the completion time, pods cleaned up.
    fn finish(&mut self, succeeded: bool, why: &'static str, message: String) {
        let (phase, type_) = if succeeded {
            (Phase::Succeeded, condition_type::SUCCEEDED)
        } else {
            (Phase::Failed, condition_type::FAILED)
        };
        self.plan.status.phase = Some(phase);
        self.set(type_, true, why, message.clone());
        self.set(condition_type::RUNNING, false, why, "the job has finished");
        self.plan.status.completion_time = Some(self.now.clone());
        self.event(!succeeded, why, message);
        self.clean_up();
    }

    fn clean_up(&mut self) {
        let pods = self.pods;
        for pod in pods {
            let remove = match self.job.spec.run_policy.clean_pod_policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => !finished_pod(pod),
                CleanPodPolicy::None => false,
            };
            if remove {
                self.delete(pod);
            }
        }
    }

    fn find(&self, name: &str) -> Option<&'_ Pod> {
        self.pods.iter().find(|p| p.name_any() == name)
    }

    fn master(&mut self) {
        let restarts = self.plan.status.restarts;
        let waiting = if restarts > 0 { Phase::Restarting } else { Phase::Pending };
        let name = desired::master_name(self.job);
        let Some(pod) = self.find(&name).cloned() else {
            self.plan.create_master = true;
            self.plan.status.phase = Some(waiting);
            return;
        };
        match phase_of(&pod) {
            _ if terminating(&pod) => self.plan.status.phase = Some(waiting),
            "Succeeded" => {
                let epochs = self.plan.status.progress.as_ref().map_or(0, |p| p.epoch);
                self.finish(
                    true,
                    reason::CONVERGED,
                    format!("model written to {} after {epochs} epochs", self.job.spec.model_uri),
                );
            }
            "Failed" if disrupted(&pod) => {
                self.delete(&pod);
                self.plan.status.phase = Some(Phase::Restarting);
                self.set(
                    condition_type::RUNNING,
                    false,
                    reason::MASTER_RESTARTING,
                    "master preempted; resuming from its checkpoint",
                );
                self.event(
                    true,
                    reason::MASTER_RESTARTING,
                    "master pod preempted or evicted; not counted against backoffLimit",
                );
            }
            "Failed" => {
                let restarts = restarts + 1;
                self.plan.status.restarts = restarts;
                let limit = self.job.spec.run_policy.backoff_limit;
                let message = pod_message(&pod);
                if restarts > limit {
                    let why = format!("master failed {restarts} times (backoffLimit {limit}); last: {message}");
                    self.finish(false, reason::BACKOFF_LIMIT_EXCEEDED, why);
                } else {
                    self.delete(&pod);
                    self.plan.status.phase = Some(Phase::Restarting);
                    let note = format!("master failed ({message}); restart {restarts} of {limit}");
                    self.set(condition_type::RUNNING, false, reason::MASTER_RESTARTING, note.clone());
                    self.event(true, reason::MASTER_RESTARTING, note);
                }
            }
            "Running" => {
                self.plan.status.phase = Some(Phase::Running);
                self.set(condition_type::RUNNING, true, reason::TRAINING, "the master is training");
            }
            _ => {
                self.plan.status.phase = Some(waiting);
                self.set(condition_type::RUNNING, false, reason::MASTER_STARTING, "the master pod is starting");
            }
        }
    }

    fn workers(&mut self, progress: Option<&MasterProgress>, leaving_nodes: &[String]) {
        let desired = self.job.spec.workers.clamped_replicas();
        let mut ready = 0;
        let pods = self.pods;
        let leaving = pods.iter().filter(|p| {
            let on_leaving_node =
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| leaving_nodes.contains(n));
            p.labels().get(LABEL_ROLE).is_some_and(|r| r == Role::Worker.as_str())
                && phase_of(p) == "Running"
                && !terminating(p)
                && (on_leaving_node || pod_condition(p, "DisruptionTarget"))
        });
        for pod in leaving {
            self.plan.drain_workers.push(pod.name_any());
        }
        if !self.plan.drain_workers.is_empty() {
            let names = self.plan.drain_workers.join(", ");
            self.set(condition_type::DRAINING, true, reason::NODE_TERMINATING, format!("draining {names}"));
            self.event(false, reason::NODE_TERMINATING, format!("node going away; draining {names}"));
        } else if self.plan.status.condition(condition_type::DRAINING).is_some() {
            self.set(condition_type::DRAINING, false, reason::STABLE, "no worker is draining");
        }
        for index in 0..desired {
            let name = desired::worker_name(self.job, index);
            match self.find(&name).cloned() {
                None => self.plan.create_workers.push(index),
                Some(pod) if terminating(&pod) => {}
                Some(pod) if finished_pod(&pod) => {
                    if disrupted(&pod) {
                        self.event(false, reason::NODE_TERMINATING, format!("worker {name} preempted; replacing it"));
                    }
                    self.delete(&pod);
                }
                Some(pod) => ready += i32::from(phase_of(&pod) == "Running" && pod_condition(&pod, "Ready")),
            }
        }
        let pods = self.pods;
        let mut extra = 0;
        for pod in pods.iter().filter(|p| p.labels().get(LABEL_ROLE).is_some_and(|r| r == Role::Worker.as_str())) {
            let index: Option<i32> = pod.labels().get(LABEL_INDEX).and_then(|i| i.parse().ok());
            if index.is_none_or(|i| i >= desired) {
                extra += 1;
                self.delete(pod);
            }
        }
        let ready = progress.map_or(ready, |p| p.workers_active);
        self.scaling(desired, ready, extra);
        self.plan.status.workers = Some(WorkerStatus {
            desired,
            ready,
            draining: progress.map_or(0, |p| p.workers_draining),
            selector: Some(desired::selector(self.job, Some(Role::Worker))),
        });
        if let Some(p) = progress {
            self.plan.status.progress = Some(Progress {
                epoch: p.epoch,
                iteration: p.iteration,
                objective: p.objective,
                duality_gap: None,
                examples_per_second: Some(p.examples_per_second),
            });
        }
    }

    /// `Scaling` follows a change of the worker count (`kubectl scale tj`, an edit of
    /// `spec.workers.replicas`): True from the change until `desired` workers are ready and
    /// the extra ones are gone. A replaced worker is not scaling: the count did not change.
    fn scaling(&mut self, desired: i32, ready: i32, extra: usize) {
        let before = self.plan.status.workers.as_ref().map(|w| w.desired);
        match before {
            Some(before) if before != desired => {
                let note = format!("scaling from {before} to {desired} workers");
                self.set(condition_type::SCALING, true, reason::REPLICAS_CHANGED, note.clone());
                self.event(false, reason::REPLICAS_CHANGED, note);
            }
            _ if self.plan.status.is_condition_true(condition_type::SCALING) && ready == desired && extra == 0 => {
                self.set(condition_type::SCALING, false, reason::STABLE, format!("{desired} workers ready"));
                self.event(false, reason::STABLE, format!("scaled to {desired} workers"));
            }
            _ => {}
        }
    }
}

/// Decides what to do about `job`, whose pods are `pods`, at `now`; `leaving_nodes` are
/// the nodes of its pods that are about to go ([`node_terminating`]).
pub fn plan(
    job: &TrainingJob,
    pods: &[Pod],
    progress: Option<&MasterProgress>,
    leaving_nodes: &[String],
    now: Timestamp,
) -> Plan {
    let mut status = job.status.clone().unwrap_or_default();
    let before = status.phase;
    status.observed_generation = job.metadata.generation;
    status.algorithm = Some(job.spec.algorithm_name().to_string());
    status.model_uri = Some(job.spec.model_uri.clone());
    let plan = Plan {
        status,
        create_master: false,
        create_workers: Vec::new(),
        drain_workers: Vec::new(),
        delete_pods: Vec::new(),
        events: Vec::new(),
        delete_job: false,
        requeue: Duration::from_secs(10),
    };
    let mut p = Planner { job, pods, now: Time(now), plan };

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
    let invalid = job.spec.validate().map_err(|e| e.to_string()).and_then(|()| desired::runnable(job));
    if let Err(why) = invalid {
        p.finish(false, reason::INVALID_SPEC, why);
        return p.plan;
    }
    if p.plan.status.start_time.is_none() {
        p.plan.status.start_time = Some(p.now.clone());
        p.set(condition_type::CREATED, true, reason::RESOURCES_CREATED, "master, service and workers requested");
        p.event(false, reason::RESOURCES_CREATED, "created the master, its service and the workers");
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
    p.master();
    if p.plan.status.is_finished() {
        return p.plan;
    }
    p.workers(progress, leaving_nodes);
    if before != p.plan.status.phase && p.plan.status.phase == Some(Phase::Running) {
        p.event(false, reason::TRAINING, "the master is running");
    }
    p.plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::{job, options};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    const SPEC: &str = "datasetUri: s3://d/grid\nmodelUri: s3://m/model\nworkers: {replicas: 2}\nrunPolicy: {backoffLimit: 1, ttlSecondsAfterFinished: 60}\n";

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn with_phase(mut pod: Pod, phase: &str) -> Pod {
        let ready = PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() };
        pod.status = Some(PodStatus { phase: Some(phase.into()), conditions: Some(vec![ready]), ..Default::default() });
        pod
    }

    /// The job after applying `plan`'s status, as the next reconcile would see it.
    fn next(mut job: TrainingJob, plan: &Plan) -> TrainingJob {
        job.status = Some(plan.status.clone());
        job
    }

    #[test]
    fn a_new_job_gets_a_master_and_its_workers() {
        let job = job(SPEC);
        let plan = plan(&job, &[], None, &[], now());
        assert!(plan.create_master);
        assert_eq!(plan.create_workers, [0, 1]);
        assert_eq!(plan.status.phase, Some(Phase::Pending));
        assert!(plan.status.is_condition_true(condition_type::CREATED));
        assert_eq!(plan.events[0].reason, reason::RESOURCES_CREATED);
    }

    #[test]
    fn conditions_follow_the_pods_to_success_and_the_ttl_removes_the_job() {
        let j = job(SPEC);
        let first = plan(&j, &[], None, &[], now());
        let pods = vec![
            with_phase(desired::master_pod(&j, &options()), "Running"),
            with_phase(desired::worker_pod(&j, 0, &options()), "Running"),
            with_phase(desired::worker_pod(&j, 1, &options()), "Running"),
        ];
        let j = next(j, &first);
        let progress = MasterProgress { epoch: 3, workers_active: 2, objective: Some(1.5), ..Default::default() };
        let running = plan(&j, &pods, Some(&progress), &[], now());
        assert_eq!(running.status.phase, Some(Phase::Running));
        assert!(running.status.is_condition_true(condition_type::RUNNING));
        assert_eq!(running.status.workers.as_ref().unwrap().ready, 2);
        assert_eq!(running.status.progress.as_ref().unwrap().epoch, 3);
        assert!(running.create_workers.is_empty() && !running.create_master && running.delete_pods.is_empty());

        let j = next(j, &running);
        let mut done = pods.clone();
        done[0] = with_phase(done[0].clone(), "Succeeded");
        let succeeded = plan(&j, &done, None, &[], now());
        assert_eq!(succeeded.status.phase, Some(Phase::Succeeded));
        assert!(succeeded.status.is_condition_true(condition_type::SUCCEEDED));
        assert_eq!(succeeded.delete_pods, ["ads-worker-0", "ads-worker-1"], "running pods cleaned, the master kept");

        let j = next(j, &succeeded);
        let later = plan(&j, &[], None, &[], now() + SignedDuration::from_secs(30));
        assert!(!later.delete_job && later.requeue == Duration::from_secs(30));
        assert!(plan(&j, &[], None, &[], now() + SignedDuration::from_secs(60)).delete_job, "TTL after finish");
    }

    #[test]
    fn a_failing_master_is_retried_up_to_the_backoff_limit_but_preemption_does_not_count() {
        let j = job(SPEC);
        let failed = with_phase(desired::master_pod(&j, &options()), "Failed");
        let first = plan(&j, std::slice::from_ref(&failed), None, &[], now());
        assert_eq!((first.status.phase, first.status.restarts), (Some(Phase::Restarting), 1));
        assert_eq!(first.delete_pods, ["ads-master"]);

        let j = next(j, &first);
        let mut preempted = failed.clone();
        let disruption = PodCondition { type_: "DisruptionTarget".into(), status: "True".into(), ..Default::default() };
        preempted.status.as_mut().unwrap().conditions.as_mut().unwrap().push(disruption);
        let after_preemption = plan(&j, std::slice::from_ref(&preempted), None, &[], now());
        assert_eq!(after_preemption.status.restarts, 1, "preemption is not a failure");
        assert_eq!(after_preemption.status.phase, Some(Phase::Restarting));

        let j = next(j, &after_preemption);
        let second = plan(&j, std::slice::from_ref(&failed), None, &[], now());
        assert_eq!(second.status.phase, Some(Phase::Failed));
        let c = second.status.condition(condition_type::FAILED).unwrap();
        assert_eq!(c.reason, reason::BACKOFF_LIMIT_EXCEEDED);
        assert!(c.message.contains("failed 2 times (backoffLimit 1)"), "{}", c.message);
    }

    #[test]
    fn ended_workers_are_replaced_and_extra_ones_removed() {
        let j = job(SPEC);
        let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
        let pods = vec![
            with_phase(desired::master_pod(&j, &options()), "Running"),
            with_phase(desired::worker_pod(&j, 0, &options()), "Failed"),
            with_phase(desired::worker_pod(&j, 1, &options()), "Running"),
            with_phase(desired::worker_pod(&j, 2, &options()), "Running"),
        ];
        let p = plan(&j, &pods, None, &[], now());
        assert_eq!(p.delete_pods, ["ads-worker-0", "ads-worker-2"]);
        assert_eq!(p.status.phase, Some(Phase::Running));
    }

    #[test]
    fn a_changed_worker_count_is_scaling_until_the_pods_match_but_a_replacement_is_not() {
        let j = job(SPEC);
        let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
        let running = |j: &TrainingJob, n: i32| {
            let mut pods = vec![with_phase(desired::master_pod(j, &options()), "Running")];
            pods.extend((0..n).map(|i| with_phase(desired::worker_pod(j, i, &options()), "Running")));
            pods
        };
        let steady = plan(&j, &running(&j, 2), None, &[], now());
        assert!(steady.status.condition(condition_type::SCALING).is_none(), "nothing changed");

        let mut up = next(j, &steady);
        up.spec.workers.replicas = 3;
        let scaling = plan(&up, &running(&up, 2), None, &[], now());
        assert_eq!(scaling.create_workers, [2]);
        let c = scaling.status.condition(condition_type::SCALING).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", reason::REPLICAS_CHANGED));
        assert_eq!(c.message, "scaling from 2 to 3 workers");
        assert!(scaling.events.iter().any(|e| e.reason == reason::REPLICAS_CHANGED));

        let up = next(up, &scaling);
        let mut starting = running(&up, 3);
        starting[3] = with_phase(starting[3].clone(), "Pending");
        let waiting = plan(&up, &starting, None, &[], now());
        assert!(waiting.status.is_condition_true(condition_type::SCALING), "the third worker is not ready");
        let done = plan(&up, &running(&up, 3), None, &[], now());
        assert_eq!(done.status.condition(condition_type::SCALING).unwrap().reason, reason::STABLE);
        assert!(!done.status.is_condition_true(condition_type::SCALING));

        let mut down = next(up, &done);
        down.spec.workers.replicas = 1;
        let shrinking = plan(&down, &running(&down, 3), None, &[], now());
        assert_eq!(shrinking.delete_pods, ["ads-worker-1", "ads-worker-2"]);
        assert!(shrinking.status.is_condition_true(condition_type::SCALING));
        let down = next(down, &shrinking);
        let leftover = plan(&down, &running(&down, 2), None, &[], now());
        assert!(leftover.status.is_condition_true(condition_type::SCALING), "worker 1 is still there");
        let settled = plan(&down, &running(&down, 1), None, &[], now());
        assert!(!settled.status.is_condition_true(condition_type::SCALING));

        let settled = next(down, &settled);
        let mut pods = running(&settled, 1);
        pods[1] = with_phase(pods[1].clone(), "Failed");
        let replaced = plan(&settled, &pods, None, &[], now());
        assert_eq!(replaced.delete_pods, ["ads-worker-0"]);
        assert!(!replaced.status.is_condition_true(condition_type::SCALING), "a replacement is not scaling");
    }

    #[test]
    fn workers_on_nodes_about_to_go_are_drained() {
        use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
        let j = job(SPEC);
        let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
        let mut on_spot = with_phase(desired::worker_pod(&j, 1, &options()), "Running");
        on_spot.spec.as_mut().unwrap().node_name = Some("spot-1".into());
        let pods = vec![
            with_phase(desired::master_pod(&j, &options()), "Running"),
            with_phase(desired::worker_pod(&j, 0, &options()), "Running"),
            on_spot,
        ];
        let p = plan(&j, &pods, None, &["spot-1".to_string()], now());
        assert_eq!(p.drain_workers, ["ads-worker-1"]);
        assert!(p.status.is_condition_true(condition_type::DRAINING));
        assert!(p.delete_pods.is_empty(), "a draining worker finishes its handover before it goes");
        let calm = plan(&next(j, &p), &pods, None, &[], now());
        assert!(calm.drain_workers.is_empty() && !calm.status.is_condition_true(condition_type::DRAINING));

        let taint = |key: &str| Taint { key: key.into(), effect: "NoSchedule".into(), ..Default::default() };
        let node = |taints: Vec<Taint>, cordoned| Node {
            spec: Some(NodeSpec { taints: Some(taints), unschedulable: Some(cordoned), ..Default::default() }),
            ..Default::default()
        };
        assert!(node_terminating(&node(vec![taint("aws-node-termination-handler/spot-itn")], false)));
        assert!(node_terminating(&node(vec![], true)), "a cordoned node is leaving");
        assert!(!node_terminating(&node(vec![taint("cloud.google.com/gke-spot")], false)), "spot is not leaving");
    }

    #[test]
    fn a_job_past_its_deadline_fails_and_an_unrunnable_one_says_why() {
        let j = job("datasetUri: s3://d/grid\nmodelUri: s3://m/model\nrunPolicy: {activeDeadlineSeconds: 100}\n");
        let j = next(j.clone(), &plan(&j, &[], None, &[], now()));
        let late = plan(&j, &[], None, &[], now() + SignedDuration::from_secs(100));
        assert_eq!(late.status.condition(condition_type::FAILED).unwrap().reason, reason::DEADLINE_EXCEEDED);
        let cocoa = job("datasetUri: s3://d/g\nmodelUri: s3://m/x\nalgorithm: {cocoa: {}}\n");
        let refused = plan(&cocoa, &[], None, &[], now());
        assert_eq!(refused.status.phase, Some(Phase::Failed));
        assert!(!refused.create_master);
        assert_eq!(refused.status.condition(condition_type::FAILED).unwrap().reason, reason::INVALID_SPEC);
    }
}
