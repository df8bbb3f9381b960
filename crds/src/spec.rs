//! `TrainingJob` and its spec: what to train on, where to write the model, with which pods.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use crate::raw_data::RawData;
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
    doc = "TrainingJob trains a sparse generalized linear model (logistic regression, least squares, linear SVM) with one master pod and preemptible worker pods.",
    validation = Rule::new("self.metadata.name.size() <= 56 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message(crate::validation::MSG_NAME),
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
        description = "Duality gap relative to the primal objective (cocoa; empty for scd, hybrid and ipm, which have no dual)"
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
#[x_kube(
    validation = Rule::new("self.datasetUri != self.modelUri").message(crate::validation::MSG_SAME_URI),
    validation = Rule::new(IMMUTABLE_POD_FIELDS_RULE).message(crate::validation::MSG_POD_FIELDS_IMMUTABLE),
    validation = Rule::new(RAW_DATA_URI_RULE).message(crate::validation::MSG_RAW_DATA_SAME_URI),
    validation = Rule::new(IMMUTABLE_RAW_DATA_RULE).message(crate::validation::MSG_RAW_DATA_IMMUTABLE),
    validation = Rule::new(ELASTIC_COCOA_RULE).message(crate::validation::MSG_ELASTIC_NEEDS_COCOA),
    validation = Rule::new(ELASTIC_MIN_RULE).message(crate::validation::MSG_ELASTIC_MIN_ABOVE_REPLICAS),
    validation = Rule::new(ELASTIC_ACCELERATE_RULE).message(crate::validation::MSG_ELASTIC_NOT_ACCELERATED),
)]
pub struct TrainingJobSpec {
    /// URI of the data grid written by `linea prepare`: `s3://bucket/prefix` (pods see no
    /// local files, so `file://` works with `linea train` only). With `rawData` set, the
    /// operator prepares the grid here first (or keeps the one already here if it was
    /// prepared from the same input). Immutable: a running job's state refers to this grid.
    #[x_kube(
        validation = Rule::new(S3_URI_RULE).message(crate::validation::MSG_DATASET_URI_SCHEME),
        validation = Rule::new("self == oldSelf").message(crate::validation::MSG_DATASET_URI_IMMUTABLE),
    )]
    #[schemars(length(min = 1, max = 2048))]
    pub dataset_uri: String,
    /// Raw input to prepare into the grid at datasetUri before training (format and the
    /// options of `linea prepare`). Unset: datasetUri is a grid prepared already. The job
    /// shows phase Preparing and the condition Prepared meanwhile. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_data: Option<RawData>,
    /// URI of the final model, `s3://bucket/key`; checkpoints go to `<modelUri>.checkpoint`.
    /// Must differ from datasetUri. Immutable: a restarted master resumes from the checkpoints
    /// here.
    #[x_kube(
        validation = Rule::new(S3_URI_RULE).message(crate::validation::MSG_MODEL_URI_SCHEME),
        validation = Rule::new("self == oldSelf").message(crate::validation::MSG_MODEL_URI_IMMUTABLE),
    )]
    #[schemars(length(min = 1, max = 2048))]
    pub model_uri: String,
    /// How to reach the object store for s3:// URIs. Unset uses AWS defaults (the pods'
    /// environment, instance role or IRSA through serviceAccountName). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// The training algorithm: exactly one of `scd` (default), `cocoa`, `hybrid` or `ipm`,
    /// with its hyperparameters.
    /// Immutable: the checkpoints belong to one algorithm.
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
    /// Elastic scale-in of the workers as the duality gap's convergence slows (cocoa only):
    /// the job starts with workers.replicas slots and workers, the master scales in, the
    /// operator deletes exactly the released workers' pods. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message(crate::validation::MSG_ELASTIC_IMMUTABLE))]
    pub elastic: ElasticPolicy,
    /// Retries, deadline, clean-up and time-to-live after the job finishes.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// Container image with the `linea` binary, for master and workers. Unset uses the image
    /// the operator was deployed with. Immutable: every pod of a job runs the same binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: Option<String>,
    /// When the kubelet pulls the image: Always, IfNotPresent or Never. Unset follows the
    /// Kubernetes default (Always for `:latest`, IfNotPresent otherwise). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Name of a Secret in the job's namespace whose key `token` authenticates workers to the
    /// master. Every job connection is mutual TLS, so it must also hold the job's TLS files
    /// `ca.crt`, `master.crt`, `master.key`, `client.crt` and `client.key`, made with `linea
    /// certs --output DIR --master-name <name>-master.<namespace>.svc` (the master's
    /// certificate must name its Service); without them the pods wait with a FailedMount
    /// event. Unset: the operator creates one named `<name>-auth-<random suffix>` with all
    /// six keys (owned by the job; its name is in status.authSecretName). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub job_secret_name: Option<String>,
    /// ServiceAccount of the master and worker pods, e.g. one bound to an IAM role (IRSA,
    /// GKE Workload Identity) for s3:// access. Unset: the namespace's `default`. Its token is
    /// mounted only when this is set. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// PriorityClass of the master and worker pods. Unset: the cluster's default. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Scheduler of the master and worker pods (e.g. `volcano`); Kueue needs none, it admits
    /// jobs through labels (podMetadata). Unset: the default scheduler. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub scheduler_name: Option<String>,
    /// Labels and annotations added to every pod of the job (cost allocation, Kueue queue
    /// names, sidecar injection switches). The operator's own labels win on a clash.
    #[serde(default, skip_serializing_if = "PodMetadata::is_empty")]
    pub pod_metadata: PodMetadata,
}

/// The CEL rule of datasetUri and modelUri: `s3://` followed by a bucket name (3 to 63
/// characters of lowercase letters, digits, dots and dashes), then optionally `/key`.
const S3_URI_RULE: &str = "self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$')";

/// Fields that every pod of a job takes at creation: changed mid-run they would leave a job
/// of mixed pods (old master, new workers), so they are immutable. Set or unset stays so.
const IMMUTABLE_POD_FIELDS_RULE: &str = "[\
    [has(self.image), has(oldSelf.image), !has(self.image) || !has(oldSelf.image) || self.image == oldSelf.image], \
    [has(self.imagePullPolicy), has(oldSelf.imagePullPolicy), !has(self.imagePullPolicy) || !has(oldSelf.imagePullPolicy) || self.imagePullPolicy == oldSelf.imagePullPolicy], \
    [has(self.jobSecretName), has(oldSelf.jobSecretName), !has(self.jobSecretName) || !has(oldSelf.jobSecretName) || self.jobSecretName == oldSelf.jobSecretName], \
    [has(self.storage), has(oldSelf.storage), !has(self.storage) || !has(oldSelf.storage) || self.storage == oldSelf.storage], \
    [has(self.serviceAccountName), has(oldSelf.serviceAccountName), !has(self.serviceAccountName) || !has(oldSelf.serviceAccountName) || self.serviceAccountName == oldSelf.serviceAccountName], \
    [has(self.priorityClassName), has(oldSelf.priorityClassName), !has(self.priorityClassName) || !has(oldSelf.priorityClassName) || self.priorityClassName == oldSelf.priorityClassName], \
    [has(self.schedulerName), has(oldSelf.schedulerName), !has(self.schedulerName) || !has(oldSelf.schedulerName) || self.schedulerName == oldSelf.schedulerName]\
    ].all(f, f[0] == f[1] && f[2])";

/// Raw input is neither the grid it is prepared into nor the model.
const RAW_DATA_URI_RULE: &str =
    "!has(self.rawData) || (self.rawData.uri != self.datasetUri && self.rawData.uri != self.modelUri)";

/// rawData is fixed at creation: set or unset stays so, and so does its content (the grid
/// the job trains on was prepared from it).
const IMMUTABLE_RAW_DATA_RULE: &str =
    "has(self.rawData) == has(oldSelf.rawData) && (!has(self.rawData) || self.rawData == oldSelf.rawData)";

/// Elastic scale-in is CoCoA's: SCD gives the same model for any worker count and has no
/// slots to merge.
/// Catalyst's accelerated gap curve would mislead the scale-in policy (engine
/// `CocoaConfig::with_accelerate`).
const ELASTIC_ACCELERATE_RULE: &str = "!has(self.elastic) || !self.elastic.enabled || !has(self.algorithm) || \
     !has(self.algorithm.cocoa) || !has(self.algorithm.cocoa.accelerate) || !self.algorithm.cocoa.accelerate";

const ELASTIC_COCOA_RULE: &str =
    "!has(self.elastic) || !self.elastic.enabled || (has(self.algorithm) && has(self.algorithm.cocoa))";

/// An elastic job starts with workers.replicas slots, so its floor cannot be above them (this
/// also bounds `kubectl scale` of an elastic job from below).
const ELASTIC_MIN_RULE: &str = "!has(self.elastic) || !self.elastic.enabled || \
    (has(self.elastic.minReplicas) ? self.elastic.minReplicas : 1) <= (has(self.workers) ? self.workers.replicas : 1)";

/// Labels and annotations for the job's pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadata {
    /// Labels added to every pod of the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every pod of the job.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl PodMetadata {
    /// Whether neither labels nor annotations are set.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
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
    /// Address buckets as `endpoint/bucket` instead of `bucket.endpoint` (default false);
    /// most self-hosted S3 servers need this.
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
    /// The manifest key of the chosen algorithm: `scd` or `cocoa`.
    pub fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }
}
