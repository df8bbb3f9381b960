//! `status`: what the operator observed. Written only by the operator, through the status
//! subresource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition types of a TrainingJob (`status.conditions[].type`).
pub mod condition_type {
    /// The master pod, its Service and the worker pods have been created.
    pub const CREATED: &str = "Created";
    /// The grid at datasetUri is ready (True: prepared from spec.rawData, or kept because it
    /// was prepared from the same input before) or is being prepared (False). Only for jobs
    /// with spec.rawData.
    pub const PREPARED: &str = "Prepared";
    /// The master is training (True) or is not (False, e.g. while it restarts).
    pub const RUNNING: &str = "Running";
    /// The worker count is changing (elastic decision or `kubectl scale`).
    pub const SCALING: &str = "Scaling";
    /// Some workers are draining ahead of a node termination or a scale-in.
    pub const DRAINING: &str = "Draining";
    /// Some pod of the job cannot start or is held back (unschedulable, image pull, missing
    /// Secret, backoff after a failure, creation refused by quota or admission); the message
    /// names each pod and why.
    pub const BLOCKED: &str = "Blocked";
    /// Training finished and the final model was written.
    pub const SUCCEEDED: &str = "Succeeded";
    /// The job stopped without a model (see the reason).
    pub const FAILED: &str = "Failed";

    /// Every condition type, in lifecycle order.
    pub const ALL: [&str; 8] = [PREPARED, CREATED, RUNNING, SCALING, DRAINING, BLOCKED, SUCCEEDED, FAILED];
}

/// Condition reasons (`status.conditions[].reason`): CamelCase, machine-readable.
pub mod reason {
    /// Created: the job's objects were created.
    pub const RESOURCES_CREATED: &str = "ResourcesCreated";
    /// Running False: the master pod is not ready yet.
    pub const MASTER_STARTING: &str = "MasterStarting";
    /// Running True: the master reports training progress.
    pub const TRAINING: &str = "Training";
    /// Running False: the master failed and is being restarted from its last checkpoint.
    pub const MASTER_RESTARTING: &str = "MasterRestarting";
    /// Scaling: the master's elastic policy lowered the worker count.
    pub const ELASTIC_SCALE_IN: &str = "ElasticScaleIn";
    /// Scaling: spec.workers.replicas changed.
    pub const REPLICAS_CHANGED: &str = "ReplicasChanged";
    /// Scaling False / Draining False: the worker count matches the desired count.
    pub const STABLE: &str = "Stable";
    /// Draining: a node running workers got a termination notice (spot interruption, drain,
    /// autoscaler scale-down).
    pub const NODE_TERMINATING: &str = "NodeTerminating";
    /// Succeeded: the stopping criterion (tolerance, duality gap) was met before the epoch
    /// limit (the master's final epoch count, from its termination message).
    pub const CONVERGED: &str = "Converged";
    /// Succeeded: the maximum number of epochs (scd.epochs, cocoa.maxEpochs) ran.
    pub const MAX_EPOCHS_REACHED: &str = "MaxEpochsReached";
    /// Failed: the master failed more than runPolicy.backoffLimit times.
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    /// Failed: runPolicy.activeDeadlineSeconds passed.
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// Failed: the spec passed API validation but cannot run (e.g. missing Secret).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Failed: the master exited with code 2: the dataset could not be read (missing,
    /// corrupt, bad checksum) or its arguments are wrong; a restart cannot help.
    pub const DATASET_ERROR: &str = "DatasetError";
    /// Failed: more worker failures than runPolicy.workerFailureLimit.
    pub const WORKER_FAILURE_LIMIT_EXCEEDED: &str = "WorkerFailureLimitExceeded";
    /// Event: a worker failed (OOMKilled, a non-zero exit); the note has the termination message.
    pub const WORKER_FAILED: &str = "WorkerFailed";
    /// Draining: the master is draining workers (scale-in or a drain it was asked for).
    pub const WORKERS_DRAINING: &str = "WorkersDraining";
    /// Created False: an object with the name a job's object needs exists and is not owned by
    /// the job; the operator leaves it alone until it is deleted or renamed.
    pub const RESOURCE_CONFLICT: &str = "ResourceConflict";
    /// Blocked: a pod cannot be scheduled (the scheduler's message follows).
    pub const POD_UNSCHEDULABLE: &str = "PodUnschedulable";
    /// Blocked: a container cannot start (ImagePullBackOff, CreateContainerConfigError, ...).
    pub const CONTAINER_WAITING: &str = "ContainerWaiting";
    /// Blocked: a failed pod is replaced after an exponential backoff.
    pub const BACKOFF: &str = "Backoff";
    /// Blocked: the API server refused to create a pod (ResourceQuota, admission policy);
    /// retried with exponential backoff.
    pub const POD_CREATION_REFUSED: &str = "PodCreationRefused";
    /// Blocked: the API server refused to create or apply another of the job's objects (its
    /// Secret, Service or PodDisruptionBudget: ResourceQuota, admission policy); retried with
    /// exponential backoff.
    pub const CREATION_REFUSED: &str = "CreationRefused";
    /// Blocked False: every pod of the job could start.
    pub const NOT_BLOCKED: &str = "NotBlocked";
    /// Prepared False: the prepare pod is turning spec.rawData into the grid.
    pub const PREPARING: &str = "Preparing";
    /// Prepared True: the prepare pod wrote the grid (rows and blocks in the message).
    pub const GRID_PREPARED: &str = "GridPrepared";
    /// Prepared True: the grid at datasetUri was prepared from the same input (URI, size,
    /// ETag) with the same options before, and was kept.
    pub const GRID_REUSED: &str = "GridReused";
    /// Failed: the prepare pod failed (unreadable or missing input, a bad line, storage
    /// refused); the message is its termination message.
    pub const PREPARE_FAILED: &str = "PrepareFailed";

    /// Every reason.
    pub const ALL: [&str; 28] = [
        RESOURCES_CREATED,
        MASTER_STARTING,
        TRAINING,
        MASTER_RESTARTING,
        ELASTIC_SCALE_IN,
        REPLICAS_CHANGED,
        STABLE,
        NODE_TERMINATING,
        CONVERGED,
        MAX_EPOCHS_REACHED,
        BACKOFF_LIMIT_EXCEEDED,
        DEADLINE_EXCEEDED,
        INVALID_SPEC,
        DATASET_ERROR,
        WORKER_FAILURE_LIMIT_EXCEEDED,
        WORKER_FAILED,
        WORKERS_DRAINING,
        RESOURCE_CONFLICT,
        POD_UNSCHEDULABLE,
        CONTAINER_WAITING,
        BACKOFF,
        POD_CREATION_REFUSED,
        CREATION_REFUSED,
        NOT_BLOCKED,
        PREPARING,
        GRID_PREPARED,
        GRID_REUSED,
        PREPARE_FAILED,
    ];
}

/// Condition status values.
pub mod condition_status {
    /// The condition holds.
    pub const TRUE: &str = "True";
    /// The condition does not hold.
    pub const FALSE: &str = "False";
    /// The operator cannot tell.
    pub const UNKNOWN: &str = "Unknown";
}

/// Coarse lifecycle phase of a TrainingJob; details are in the conditions.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Accepted; pods are being created or are not ready yet.
    #[default]
    Pending,
    /// The prepare pod is turning spec.rawData into the grid at datasetUri.
    Preparing,
    /// The master is training.
    Running,
    /// The master failed and is restarting from its last checkpoint.
    Restarting,
    /// Training finished and the model was written.
    Succeeded,
    /// The job stopped without a model.
    Failed,
}

impl Phase {
    /// The phase as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Preparing => "Preparing",
            Phase::Running => "Running",
            Phase::Restarting => "Restarting",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Whether the job is over (Succeeded or Failed): nothing will run again.
    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// Observed state of a TrainingJob.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainingJobStatus {
    /// Lifecycle phase: Pending, Preparing, Running, Restarting, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Latest observations of the job's state, one per type (Prepared, Created, Running,
    /// Scaling, Draining, Blocked, Succeeded, Failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The algorithm being run (copied from the spec so `kubectl get tj` can show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Worker counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerStatus>,
    /// Training progress reported by the master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Elastic scale-in (spec.elastic.enabled): the slots the job started with and the
    /// workers the master released. Kept here because a restarted master's own list of
    /// released workers starts empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticStatus>,
    /// URI of the final model, set only once the job has succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_uri: Option<String>,
    /// Name of the auth Secret the operator created for this job (`<name>-auth-<suffix>`,
    /// a name the API server generated, so no other object can already have it). The job's
    /// pods mount it; they are created only once it is recorded here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_name: Option<String>,
    /// UID of that Secret, as the API server returned it on creation. Only the object with
    /// this name and UID is ever treated as the job's (and deleted with it). A Secret the
    /// operator created but could not record (it stopped before writing this status) is
    /// never used; it is owned by the job and goes with it (garbage collector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_secret_uid: Option<String>,
    /// When the operator first created the job's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job finished (Succeeded or Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// How many times the master failed and was restarted; the job fails when this exceeds
    /// spec.runPolicy.backoffLimit.
    #[serde(default)]
    pub restarts: i32,
}

/// Worker counts, also the scale subresource's view of the job.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// Workers the operator is running towards (spec.workers.replicas, or fewer after an
    /// elastic scale-in).
    #[serde(default)]
    pub desired: i32,
    /// Workers connected to the master and taking work.
    #[serde(default)]
    pub ready: i32,
    /// Workers finishing their current work item before they exit (termination notice or
    /// scale-in); the Draining condition is True exactly when this is above 0.
    #[serde(default)]
    pub draining: i32,
    /// Worker failures over the whole job (non-zero exits, OOMKilled; preemptions and
    /// drains do not count), for the record.
    #[serde(default)]
    pub failed: i32,
    /// Worker failures since training last advanced (the master reported a new epoch),
    /// compared with spec.runPolicy.workerFailureLimit; the replacement backoff doubles
    /// with it.
    #[serde(default)]
    pub recent_failures: i32,
    /// The last worker failure: pod, reason, exit code and termination message. Kept here
    /// because the failed pod is replaced under the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Label selector of the worker pods, in string form (for `kubectl scale` and HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

/// What the operator remembers of an elastic job's scale-ins.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticStatus {
    /// CoCoA slots the job started with (workers.replicas then): every master of the job,
    /// a restarted one too, gets this `--slots`, whatever `kubectl scale` did since, so its
    /// checkpoint's scale-in decisions replay.
    #[serde(default)]
    pub slots: i32,
    /// Workers the master's policy wants now (its slots after the last scale-in), as last
    /// reported by the master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<i32>,
    /// Worker pods the master released in a scale-in, in the order it released them. Their
    /// pods are deleted once they exited and are never created again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "released_schema")]
    pub released: Vec<String>,
    /// The master's scale-in decisions the operator has reported, one event each, oldest
    /// first. The master lists every decision it made (numbered; a restarted master replays
    /// them from its checkpoint), so the operator reports exactly those whose number is not
    /// here yet: two decisions between two polls give two events, and neither an operator
    /// restart nor a new leader repeats one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "decisions_schema")]
    pub decisions: Vec<ScalingDecision>,
}

impl ElasticStatus {
    /// The latest decision reported, if any.
    pub fn last_decision(&self) -> Option<&ScalingDecision> {
        self.decisions.last()
    }
}

/// One scale-in decision of an elastic job's master, as reported.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingDecision {
    /// 1 for the job's first decision, then 2, 3, ... (the master's numbering).
    pub number: i32,
    /// The epoch after which the worker count changed.
    #[serde(default)]
    pub epoch: i64,
    /// Workers (slots) before.
    #[serde(default)]
    pub from: i32,
    /// Workers (slots) after.
    #[serde(default)]
    pub to: i32,
    /// Why, in the master's words ("duality gap rate ... over the last 2 epochs vs ...: 16 -> 4").
    #[serde(default)]
    pub reason: String,
    /// The worker pods the master had released under it when the operator first saw it
    /// (status.elastic.released has every released pod, also those released later).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "released_schema")]
    pub released: Vec<String>,
}

/// Schema of `status.elastic.decisions`: at most one decision per slot the job may start with.
fn decisions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <Vec<ScalingDecision>>::json_schema(generator);
    schema.insert("maxItems".into(), crate::MAX_WORKERS.into());
    schema
}

/// Schema of `status.elastic.released`: pod names, at most one per worker a job may have.
fn released_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Worker pods the master released in a scale-in, in the order it released them. Their pods are deleted once they exited and are never created again.",
        "type": "array",
        "maxItems": crate::MAX_WORKERS,
        "items": {
            "description": "The name of a released worker pod (`<job>-worker-<index>`).",
            "type": "string",
        },
    })
}

/// Training progress as reported by the master.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Epochs (outer rounds) completed; when the job has finished, the master's final count.
    #[serde(default)]
    pub epoch: i64,
    /// Iterations (work-item rounds, e.g. feature-block updates for SCD) completed.
    #[serde(default)]
    pub iteration: i64,
    /// Regularized training objective after the last completed epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<f64>,
    /// Duality gap after the last completed epoch, relative to the primal objective:
    /// (primal - dual) / |primal|, a certificate that the objective is within this fraction
    /// of the optimum (cocoa only: scd, hybrid and ipm have no dual, and the field is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duality_gap: Option<f64>,
    /// Training throughput over the last epoch, in examples per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples_per_second: Option<f64>,
}

impl TrainingJobStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of the given type is present with status `True`.
    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == condition_status::TRUE)
    }

    /// Whether the job is over (phase Succeeded or Failed).
    pub fn is_finished(&self) -> bool {
        self.phase.is_some_and(Phase::is_finished)
    }

    /// Insert or update the condition with `new.type_`. When the status value does not change,
    /// the existing `lastTransitionTime` is kept, as the Kubernetes API conventions require;
    /// reason, message and observedGeneration are always updated. Returns whether anything
    /// changed.
    pub fn set_condition(&mut self, new: Condition) -> bool {
        match self.conditions.iter_mut().find(|c| c.type_ == new.type_) {
            Some(old) => {
                let mut new = new;
                if old.status == new.status {
                    new.last_transition_time = old.last_transition_time.clone();
                }
                let changed = *old != new;
                *old = new;
                changed
            }
            None => {
                self.conditions.push(new);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn condition(type_: &str, status: &str, reason: &str, at: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: time(at),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn set_condition_keeps_the_transition_time_while_status_holds() {
        let mut s = TrainingJobStatus::default();
        assert!(s.set_condition(condition(condition_type::RUNNING, "False", reason::MASTER_STARTING, 10)));
        assert!(s.set_condition(condition(condition_type::RUNNING, "True", reason::TRAINING, 20)));
        assert_eq!(s.condition(condition_type::RUNNING).unwrap().last_transition_time, time(20));
        // Same status, new time: the transition time stays, nothing changed.
        assert!(!s.set_condition(condition(condition_type::RUNNING, "True", reason::TRAINING, 30)));
        assert_eq!(s.condition(condition_type::RUNNING).unwrap().last_transition_time, time(20));
        // Same status, new reason: updated, transition time kept.
        assert!(s.set_condition(condition(condition_type::RUNNING, "True", reason::ELASTIC_SCALE_IN, 40)));
        let c = s.condition(condition_type::RUNNING).unwrap();
        assert_eq!((c.reason.as_str(), c.last_transition_time.clone()), (reason::ELASTIC_SCALE_IN, time(20)));
        assert!(s.is_condition_true(condition_type::RUNNING));
        assert!(!s.is_condition_true(condition_type::SUCCEEDED));
        assert_eq!(s.conditions.len(), 1);
    }

    #[test]
    fn phases_and_finish() {
        for (phase, finished) in [
            (Phase::Pending, false),
            (Phase::Running, false),
            (Phase::Restarting, false),
            (Phase::Succeeded, true),
            (Phase::Failed, true),
        ] {
            assert_eq!(phase.is_finished(), finished);
            assert_eq!(serde_json::to_value(phase).unwrap(), phase.as_str());
        }
        assert!(!TrainingJobStatus::default().is_finished());
    }

    #[test]
    fn status_serializes_in_camel_case_without_empty_fields() {
        let s = TrainingJobStatus {
            phase: Some(Phase::Running),
            start_time: Some(time(0)),
            workers: Some(WorkerStatus {
                desired: 4,
                ready: 3,
                draining: 1,
                failed: 0,
                recent_failures: 0,
                last_failure: None,
                selector: Some("linea.io/job=a,linea.io/role=worker".into()),
            }),
            progress: Some(Progress {
                epoch: 2,
                iteration: 40,
                objective: Some(0.25),
                duality_gap: None,
                examples_per_second: Some(1e6),
            }),
            ..TrainingJobStatus::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["startTime"], "1970-01-01T00:00:00Z");
        assert_eq!(v["workers"]["ready"], 3);
        assert_eq!(v["progress"]["examplesPerSecond"], 1e6);
        assert!(v["progress"].get("dualityGap").is_none());
        assert!(v.get("conditions").is_none() && v.get("modelUri").is_none());
        let back: TrainingJobStatus = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
