//! `spec.workers`, `spec.master` and `spec.elastic`: the pods that train and how many of them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_replicas() -> i32 {
    1
}

/// The worker pods: how many, where they run and what they may use.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message(crate::validation::MSG_MIN_GT_MAX),
    validation = Rule::new("self.minReplicas <= self.replicas").message(crate::validation::MSG_REPLICAS_LT_MIN),
    validation = Rule::new("!has(self.maxReplicas) || self.replicas <= self.maxReplicas").message(crate::validation::MSG_REPLICAS_GT_MAX),
)]
pub struct WorkerSpec {
    /// Number of worker pods to run. The model does not depend on it: any count gives the
    /// same model bit for bit. Changed by `kubectl scale tj`; must lie in
    /// [minReplicas, maxReplicas].
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Fewest workers the elastic policy may scale in to. Defaults to 1.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub min_replicas: i32,
    /// Most workers the job may run: a `kubectl scale` above it is refused. Unset means no
    /// upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_replicas: Option<i32>,
    /// Run workers on preemptible (spot) nodes: the operator adds the usual spot tolerations
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
    /// `replicas` clamped into [minReplicas, maxReplicas] (and at least 1): what the operator
    /// should run when nothing else (elastic policy, drains) says otherwise. The API server
    /// already enforces the bounds; this keeps callers safe on objects that skipped validation.
    pub fn clamped_replicas(&self) -> i32 {
        let max = self.max_replicas.unwrap_or(i32::MAX).max(1);
        let min = self.min_replicas.clamp(1, max);
        self.replicas.clamp(min, max)
    }

    /// The fewest workers an elastic scale-in may leave, never above `replicas`.
    pub fn scale_in_floor(&self) -> i32 {
        self.min_replicas.clamp(1, self.clamped_replicas())
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

fn default_scale_in_factor() -> i32 {
    4
}
fn default_slope_ratio() -> f64 {
    1.25
}
fn default_window_epochs() -> i32 {
    2
}

/// The elastic scale-in policy (Chicle): the master compares the long-term convergence slope
/// since the last scale-in with the slope of the last `windowEpochs` epochs, and divides the
/// worker count by `scaleInFactor` when short * slopeRatio < long. Only for `cocoa`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Let the master scale the worker count in as convergence slows (down to
    /// workers.minReplicas). Requires algorithm `cocoa`.
    #[serde(default)]
    pub enabled: bool,
    /// m: divide the worker count by this factor at each scale-in.
    #[serde(default = "default_scale_in_factor")]
    #[schemars(range(min = 2, max = 64))]
    pub scale_in_factor: i32,
    /// d: scale in when the recent slope times d is below the long-term slope. Larger values
    /// scale in later.
    #[serde(default = "default_slope_ratio")]
    #[schemars(range(min = 1.0))]
    pub slope_ratio: f64,
    /// N: number of recent epochs that make up the short-term slope.
    #[serde(default = "default_window_epochs")]
    #[schemars(range(min = 1))]
    pub window_epochs: i32,
}

impl Default for ElasticPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            scale_in_factor: default_scale_in_factor(),
            slope_ratio: default_slope_ratio(),
            window_epochs: default_window_epochs(),
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
    }

    #[test]
    fn scale_in_floor_is_min_replicas_but_never_above_the_count() {
        assert_eq!(workers(16, 1, Some(32)).scale_in_floor(), 1);
        assert_eq!(workers(16, 4, None).scale_in_floor(), 4);
        assert_eq!(workers(2, 4, None).scale_in_floor(), 4);
        assert_eq!(workers(3, 5, Some(2)).scale_in_floor(), 2);
    }

    #[test]
    fn elastic_defaults_are_the_papers() {
        let e = ElasticPolicy::default();
        assert_eq!((e.scale_in_factor, e.slope_ratio, e.window_epochs), (4, 1.25, 2));
        assert!(!e.enabled);
    }
}
