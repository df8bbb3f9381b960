//! `spec.runPolicy`: retries, deadlines and clean-up, as in a batch Job.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which pods the operator deletes when the job finishes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CleanPodPolicy {
    /// Delete every pod of the job, finished or not.
    All,
    /// Delete the pods still running (idle workers); keep finished pods for their logs.
    #[default]
    Running,
    /// Delete no pod.
    None,
}

fn default_backoff_limit() -> i32 {
    3
}
fn default_worker_failure_limit() -> i32 {
    10
}

/// Retries, deadlines and clean-up of the job.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// How many times the master may fail (default 3) before the job is marked Failed
    /// (BackoffLimitExceeded). A failed master is replaced after an exponential backoff
    /// (none, 10 s, 20 s, 40 s, ... at most 5 min; none when it had run for 10 minutes) and
    /// resumes from its last checkpoint.
    /// Preemptions and evictions never count; a master that exits with code 2 (the data or
    /// its arguments are wrong) fails the job at once (DatasetError).
    #[serde(default = "default_backoff_limit")]
    #[schemars(range(min = 0))]
    pub backoff_limit: i32,
    /// How many worker failures (a non-zero exit, OOMKilled) without training advancing the
    /// job tolerates (default 10) before it is marked Failed (WorkerFailureLimitExceeded):
    /// workers that keep failing while no epoch completes mean the job is broken. The count
    /// (status.workers.recentFailures) returns to 0 whenever the master reports a new epoch,
    /// so a long job is not failed by failures spread over its lifetime; without progress from
    /// the master (operator run with --no-master-polling) it counts every failure. Failed
    /// workers are replaced after an exponential backoff in that count (none, 10 s, 20 s, ...
    /// at most 5 min), at once when the failed worker had run for 10 minutes (the kubelet's
    /// crash-loop reset); preempted, evicted or drained workers never count.
    #[serde(default = "default_worker_failure_limit")]
    #[schemars(range(min = 0))]
    pub worker_failure_limit: i32,
    /// Wall-clock limit in seconds from the job's start; past it the job is stopped and
    /// marked Failed (reason DeadlineExceeded). Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Delete the TrainingJob (and with it every object it owns) this many seconds after it
    /// finished. Unset keeps it until deleted by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Which pods to delete when the job finishes: All, Running (default) or None.
    #[serde(default)]
    pub clean_pod_policy: CleanPodPolicy,
}

impl Default for RunPolicy {
    fn default() -> Self {
        Self {
            backoff_limit: default_backoff_limit(),
            worker_failure_limit: default_worker_failure_limit(),
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
            clean_pod_policy: CleanPodPolicy::default(),
        }
    }
}
