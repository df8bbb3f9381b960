//! `spec.workers`, `spec.master` and `spec.elastic`: the pods that train and how many of them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_replicas() -> i32 {
    1
}

/// The most workers one job may run. A bound, so a typo (`replicas: 100000`) is refused at
/// admission instead of filling a cluster with pods: one master serves every worker's
/// session and hands out row shards, so far beyond the grid's shard count extra workers only
/// idle, and 1000 is well past where one master's aggregation saturates.
pub const MAX_WORKERS: i32 = 1000;

/// The worker pods: how many, where they run and what they may use.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message(crate::validation::MSG_MIN_GT_MAX),
    validation = Rule::new("self.minReplicas <= self.replicas").message(crate::validation::MSG_REPLICAS_LT_MIN),
    validation = Rule::new("!has(self.maxReplicas) || self.replicas <= self.maxReplicas").message(crate::validation::MSG_REPLICAS_GT_MAX),
)]
pub struct WorkerSpec {
    /// Number of worker pods to run (default 1, at most 1000). The model does not depend on
    /// it: any count gives the same model bit for bit. Changed by `kubectl scale tj`; must lie
    /// in [minReplicas, maxReplicas].
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: i32,
    /// Fewest workers a `kubectl scale` may ask for (default 1).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_replicas: i32,
    /// Most workers the job may run: a `kubectl scale` above it is refused. Unset means the
    /// global bound, 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_replicas: Option<i32>,
    /// Run workers on preemptible (spot) nodes (default false): the operator adds the usual spot tolerations
    /// and a preferred node affinity for spot capacity, and drains workers on termination
    /// notices. Training survives preemptions with no loss of work.
    #[serde(default)]
    pub preemptible: bool,
    /// Compute threads per worker. Unset means one per CPU of the container's CPU limit (or
    /// request), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub threads: Option<i32>,
    /// CPU and memory requests and limits of each worker container. What it leaves out takes
    /// the operator's defaults (the chart's jobDefaults.resources.worker), resource by
    /// resource: a default limit below this request is raised to it; no default request
    /// where this names a limit. The worker's cell cache is half its memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node labels a worker pod's node must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Extra tolerations of the worker pods (added to the spot tolerations when preemptible).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

impl Default for WorkerSpec {
    fn default() -> Self {
        Self {
            replicas: default_replicas(),
            min_replicas: default_replicas(),
            max_replicas: None,
            preemptible: false,
            threads: None,
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }
}

impl WorkerSpec {
    /// `replicas` clamped into [minReplicas, maxReplicas] (and into [1, 1000]): what the
    /// operator runs. The API server
    /// already enforces the bounds; this keeps callers safe on objects that skipped validation.
    pub fn clamped_replicas(&self) -> i32 {
        let max = self.max_replicas.unwrap_or(MAX_WORKERS).clamp(1, MAX_WORKERS);
        let min = self.min_replicas.clamp(1, max);
        self.replicas.clamp(min, max)
    }
}

/// The master pod: it owns the algorithm's state, hands out work items and checkpoints.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MasterSpec {
    /// CPU and memory requests and limits of the master container (and of the prepare pod).
    /// Memory holds the model and the aggregated statistics of one feature block. What it
    /// leaves out takes the operator's defaults (jobDefaults.resources.master), as for workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node labels the master pod's node must have. The master is never placed on spot nodes
    /// by the operator; pin it to on-demand capacity here if your cluster mixes both.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the master pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// Elastic scale-in of the workers as convergence slows (Chicle's policy, run by the
/// master): CoCoA only. The job starts with `workers.replicas` slots and one worker each; when
/// the duality gap's rate of decrease over the last `window` epochs, times `threshold`, falls
/// below its rate since the last scale-in, the master merges K slots into K/`factor` (never
/// fewer than `minReplicas`) and releases the surplus workers, whose pods the operator then
/// deletes and does not replace. Immutable: a restarted master replays the decisions of its
/// checkpoint under these settings.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Scale in as the gap's convergence slows (default false). Needs algorithm.cocoa.
    #[serde(default)]
    pub enabled: bool,
    /// Fewest workers (slots) a scale-in may leave (default 1); at most workers.replicas.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_replicas: i32,
    /// m: a scale-in divides the slot count by this (default 4, at least 2).
    #[serde(default = "default_factor")]
    #[schemars(range(min = 2, max = 1000))]
    pub factor: i32,
    /// N: the short-term rate is taken over this many epochs (default 2, at least 1).
    #[serde(default = "default_window")]
    #[schemars(range(min = 1, max = 1000))]
    pub window: i32,
    /// d: scale in when the short-term rate times this is below the rate since the last
    /// scale-in (default 1.25; greater than 1, at most 1000).
    #[serde(default = "default_threshold")]
    #[x_kube(validation = Rule::new("self > 1.0 && self <= 1000.0").message(crate::validation::MSG_ELASTIC_THRESHOLD))]
    pub threshold: f64,
    /// What the rates are measured over: `wall` (seconds, as Chicle; default) or `epochs`
    /// (decisions depend only on the gap curve, so a run is reproducible bit for bit).
    #[serde(default)]
    pub clock: ElasticClock,
    /// Seconds a fresh master waits for the workers it starts with (default 300). Its first
    /// scale-in releases pods that are running, so it waits for them; when some have not
    /// joined by then (no node for them, an image that does not pull) it starts with those
    /// that did, and the others take work when they come. Raise it where a cluster
    /// autoscaler takes longer to add nodes.
    #[serde(default = "default_start_timeout_seconds")]
    #[schemars(range(min = 0, max = 604800))]
    pub start_timeout_seconds: i32,
}

fn default_factor() -> i32 {
    4
}

fn default_window() -> i32 {
    2
}

fn default_threshold() -> f64 {
    1.25
}

fn default_start_timeout_seconds() -> i32 {
    300
}

impl Default for ElasticPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            min_replicas: default_replicas(),
            factor: default_factor(),
            window: default_window(),
            threshold: default_threshold(),
            clock: ElasticClock::default(),
            start_timeout_seconds: default_start_timeout_seconds(),
        }
    }
}

/// The clock of the elastic policy's rates (`linea master --elastic-clock`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ElasticClock {
    /// Seconds: the rates Chicle measures; decisions depend on timing.
    #[default]
    Wall,
    /// Epochs: decisions depend only on the gap curve (reproducible runs).
    Epochs,
}

impl ElasticClock {
    /// The value as written in manifests and on the `linea` command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ElasticClock::Wall => "wall",
            ElasticClock::Epochs => "epochs",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(replicas: i32, min: i32, max: Option<i32>) -> WorkerSpec {
        WorkerSpec { replicas, min_replicas: min, max_replicas: max, ..WorkerSpec::default() }
    }

    #[test]
    fn clamped_replicas_respects_bounds() {
        assert_eq!(workers(4, 1, None).clamped_replicas(), 4);
        assert_eq!(workers(4, 1, Some(2)).clamped_replicas(), 2);
        assert_eq!(workers(1, 3, Some(8)).clamped_replicas(), 3);
        // Inconsistent bounds (refused by the API server) still give a usable count.
        assert_eq!(workers(3, 5, Some(2)).clamped_replicas(), 2);
        assert_eq!(workers(0, 0, Some(0)).clamped_replicas(), 1);
        // Objects that skipped admission still never ask for more than the global bound.
        assert_eq!(workers(100_000, 1, None).clamped_replicas(), MAX_WORKERS);
    }
}
