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

/// Retries, deadlines and clean-up of the job.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// How many times the master may fail (crash, eviction, node loss) before the job is
    /// marked Failed. A restarted master resumes from its last checkpoint. Worker failures
    /// never count: workers are replaced and their work is recomputed.
    #[serde(default = "default_backoff_limit")]
    #[schemars(range(min = 0))]
    pub backoff_limit: i32,
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
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
            clean_pod_policy: CleanPodPolicy::default(),
        }
    }
}
