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
    /// CPU and memory requests and limits of each worker container. Memory bounds the size of
    /// the worker's cell cache.
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
    /// CPU and memory requests and limits of the master container. Memory holds the model and
    /// the aggregated statistics of one feature block.
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

/// Elastic scale-in of the workers as convergence slows (Chicle). Not implemented in this
/// linea version: `enabled: true` is refused at admission.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Must be false (the default): elastic scale-in is not implemented in this version.
    #[serde(default)]
    #[x_kube(validation = Rule::new("!self").message(crate::validation::MSG_ELASTIC_NOT_IMPLEMENTED))]
    pub enabled: bool,
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
