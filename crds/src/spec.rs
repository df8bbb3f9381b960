//! `TrainingJob` and its spec: what to train on, where to write the model, with which pods.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use crate::run_policy::RunPolicy;
use crate::status::TrainingJobStatus;
use crate::workers::{ElasticPolicy, MasterSpec, WorkerSpec};

/// Desired state of a TrainingJob: the data grid, where the model goes, the algorithm and the
/// pods that run it. The same spec gives the same model bit for bit, whatever the worker count
/// and whatever happens to the workers.
#[allow(
    clippy::duplicated_attributes,
    reason = "several printcolumn(...) share a `type_`, which clippy reads as a repeated attribute"
)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "linea.io",
    version = "v1alpha1",
    kind = "TrainingJob",
    plural = "trainingjobs",
    shortname = "tj",
    category = "linea",
    namespaced,
    status = "TrainingJobStatus",
    derive = "PartialEq",
    doc = "TrainingJob trains a sparse generalized linear model (logistic regression, least squares, linear SVM) with one master pod and elastic, preemptible worker pods.",
    scale(
        spec_replicas_path = ".spec.workers.replicas",
        status_replicas_path = ".status.workers.ready",
        label_selector_path = ".status.workers.selector"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase of the job"
    ),
    printcolumn(
        name = "Algorithm",
        type_ = "string",
        json_path = ".status.algorithm",
        description = "Training algorithm (scd, cocoa, hybrid, ipm)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.workers.ready",
        description = "Workers connected to the master"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.workers.desired",
        description = "Workers the operator is running towards"
    ),
    printcolumn(
        name = "Epoch",
        type_ = "integer",
        json_path = ".status.progress.epoch",
        description = "Epochs completed"
    ),
    printcolumn(
        name = "Objective",
        type_ = "number",
        json_path = ".status.progress.objective",
        description = "Regularized training objective after the last epoch"
    ),
    printcolumn(
        name = "Gap",
        type_ = "number",
        json_path = ".status.progress.dualityGap",
        description = "Duality gap (cocoa)",
        priority = 1
    ),
    printcolumn(
        name = "Examples/s",
        type_ = "number",
        json_path = ".status.progress.examplesPerSecond",
        description = "Training throughput",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.elastic) || !self.elastic.enabled || (has(self.algorithm) && has(self.algorithm.cocoa))").message(crate::validation::MSG_ELASTIC_NEEDS_COCOA))]
pub struct TrainingJobSpec {
    /// URI of the data grid written by `linea prepare`: `file:///path` (a volume every pod
    /// sees) or `s3://bucket/prefix`. Immutable: a running job's state refers to this grid.
    #[x_kube(
        validation = Rule::new("self.matches('^(file|s3)://.+$')").message(crate::validation::MSG_DATASET_URI_SCHEME),
        validation = Rule::new("self == oldSelf").message(crate::validation::MSG_DATASET_URI_IMMUTABLE),
    )]
    #[schemars(length(min = 1, max = 2048))]
    pub dataset_uri: String,
    /// URI under which the master writes checkpoints and the final model: `file:///path` or
    /// `s3://bucket/prefix`. Immutable: a restarted master resumes from the checkpoints here.
    #[x_kube(
        validation = Rule::new("self.matches('^(file|s3)://.+$')").message(crate::validation::MSG_MODEL_URI_SCHEME),
        validation = Rule::new("self == oldSelf").message(crate::validation::MSG_MODEL_URI_IMMUTABLE),
    )]
    #[schemars(length(min = 1, max = 2048))]
    pub model_uri: String,
    /// How to reach the object store for s3:// URIs. Unset uses AWS defaults (the pods'
    /// environment, instance role or IRSA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// The training algorithm: exactly one of `scd` (default), `cocoa`, `hybrid`, `ipm`, with
    /// its hyperparameters. Immutable: the checkpoints belong to one algorithm.
    #[serde(default)]
    #[schemars(schema_with = "crate::algorithm::algorithm_schema")]
    #[x_kube(
        validation = Rule::new("(has(self.scd) ? 1 : 0) + (has(self.cocoa) ? 1 : 0) + (has(self.hybrid) ? 1 : 0) + (has(self.ipm) ? 1 : 0) == 1").message(crate::validation::MSG_EXACTLY_ONE_ALGORITHM),
        validation = Rule::new("self == oldSelf").message(crate::validation::MSG_ALGORITHM_IMMUTABLE),
    )]
    pub algorithm: Algorithm,
    /// The worker pods: count, bounds, placement, resources.
    #[serde(default)]
    pub workers: WorkerSpec,
    /// The master pod's resources and placement.
    #[serde(default)]
    pub master: MasterSpec,
    /// Elastic scale-in of the workers as convergence slows (cocoa only).
    #[serde(default)]
    pub elastic: ElasticPolicy,
    /// Retries, deadline, clean-up and time-to-live after the job finishes.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// Container image with the `linea` binary, for master and workers. Unset uses the image
    /// the operator was deployed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
    /// When the kubelet pulls the image: Always, IfNotPresent or Never. Unset follows the
    /// Kubernetes default (Always for `:latest`, IfNotPresent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Name of a Secret in the job's namespace whose key `token` authenticates workers to the
    /// master. Unset: the operator generates one per job (owned by the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub job_secret_name: Option<String>,
}

/// Connection settings for an S3-compatible object store.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Endpoint URL of an S3-compatible server (MinIO, Ceph, ...), e.g.
    /// `http://minio.storage:9000`. Unset uses AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: Option<String>,
    /// Region of the bucket, e.g. `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,
    /// Address buckets as `endpoint/bucket` instead of `bucket.endpoint`; most self-hosted
    /// S3 servers need this.
    #[serde(default)]
    pub force_path_style: bool,
    /// Name of a Secret in the job's namespace with keys `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (optionally `AWS_SESSION_TOKEN`), passed to master and workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret_name: Option<String>,
}

/// Image pull policy of the job's containers.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PullPolicy {
    /// Pull the image every time a pod starts.
    Always,
    /// Pull only when the node does not have the image.
    IfNotPresent,
    /// Never pull; the image must be on the node.
    Never,
}

impl PullPolicy {
    /// The value as written in a Pod spec.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

impl TrainingJobSpec {
    /// The manifest key of the chosen algorithm: `scd`, `cocoa`, `hybrid` or `ipm`.
    pub fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }

    /// Whether the master should run the elastic scale-in policy for this job.
    pub fn elastic_enabled(&self) -> bool {
        self.elastic.enabled && self.algorithm.supports_elastic()
    }
}
