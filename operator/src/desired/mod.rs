//! What should exist for a TrainingJob: pure functions from the job to Kubernetes objects.
//!
//! One master Pod (`<job>-master`) behind a Service of the same name, a PodDisruptionBudget
//! (also `<job>-master`) that keeps a node drain from evicting the master, worker Pods
//! `<job>-worker-<i>`, and the job's auth Secret (`<job>-auth-<suffix>`, a name the API
//! server generates, unless the spec names its own). Every object is labelled with the job
//! and owned by it. Pods run the one linea image as non-root with a read-only root
//! filesystem; the master checkpoints next to the model.

mod pods;
#[cfg(test)]
pub mod tests;

pub(crate) use pods::{JOB_SECRET_VOLUME, PodParts, pod};
pub use pods::{master_pod, worker_pod};

use crate::resources::{self, JobResources};
use hmac::{Hmac, Mac};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, Pod, PodSecurityContext, PodSpec,
    PreferredSchedulingTerm, ResourceRequirements, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use linea_crds::algorithm::{BatchSolver, LbfgsPrecondition};
use linea_crds::{Algorithm, TrainingJob};
use linea_proto::tls::{self as job_tls, JobCertificates};
use std::collections::BTreeMap;

pub const MASTER_PORT: i32 = 7070;
pub const WORKER_PORT: i32 = 7071;
/// The master's own Prometheus `/metrics` (plain HTTP, progress only: `linea master
/// --metrics-listen`). charts/linea's NetworkPolicy opens it (`linea.masterMetricsPort`).
pub const MASTER_METRICS_PORT: i32 = 9090;
pub const LABEL_JOB: &str = "linea.io/job-name";
pub const LABEL_ROLE: &str = "linea.io/role";
pub const LABEL_INDEX: &str = "linea.io/worker-index";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const SECRET_DIR: &str = "/var/run/linea/secret";

/// How long a worker may take to stop after SIGTERM: time to hand its shards over. The
/// handover starts earlier, at the node's termination notice (the operator watches Nodes and
/// drains the node's workers within a second of it), and ends when the new owners have
/// fetched the shards' state; SIGTERM itself comes when the node is drained or shuts down.
/// Measured against the clouds' notices:
/// - AWS spot: 120 s from the interruption notice to the instance's stop. The node
///   termination handler (or Karpenter) drains the node at the notice and evictions honour
///   this period, so 110 s uses the notice and ends 10 s before the instance does.
/// - GKE spot and Azure spot: 30 s of notice. The kubelet's graceful node shutdown caps every
///   pod's period (GKE: 15 s for ordinary pods), so a longer period costs nothing there; the
///   handover then has the notice's time from the operator's drain on.
/// - Scale-in, `kubectl delete pod`, a voluntary drain: the worker exits as soon as the master
///   has released it; the period is only an upper bound.
pub const WORKER_GRACE_SECONDS: i64 = 110;
/// How long the master (and the prepare pod) may take to stop after SIGTERM. The master
/// stops at once: it hands out no more phases, abandons the iteration in flight (the one
/// before it is already in the checkpoint, written at its end) and exits 143, leaving its
/// workers waiting for the next master. What it may have to finish is a checkpoint write in
/// flight (one object: a step, or a base about the model's size; at most ~15 s of storage
/// retries) and closing its server (at most 5 s), so Kubernetes' default 30 s is enough.
/// Killed before (SIGKILL at the end of the period), it is no worse than after kill -9:
/// checkpoint objects appear whole or not at all, and it resumes from the iteration before.
pub const MASTER_GRACE_SECONDS: i64 = 30;
/// The worker's own `--drain-timeout`: it leaves by itself this long after a drain began,
/// inside [`WORKER_GRACE_SECONDS`], so the kubelet never has to kill it mid-handover.
pub const WORKER_DRAIN_TIMEOUT_SECONDS: i64 = 100;
const _: () = assert!(WORKER_DRAIN_TIMEOUT_SECONDS + 5 <= WORKER_GRACE_SECONDS && WORKER_GRACE_SECONDS < 120);
const TOKEN_KEY: &str = linea_crds::JOB_SECRET_TOKEN_KEY;
/// Taints of spot/preemptible nodes on the major clouds, tolerated by preemptible workers.
const SPOT_TAINTS: [(&str, Option<&str>); 4] = [
    ("cloud.google.com/gke-spot", Some("true")),
    ("kubernetes.azure.com/scalesetpriority", Some("spot")),
    ("eks.amazonaws.com/capacityType", Some("SPOT")),
    ("linea.io/spot", None),
];

/// Settings of this operator that go into every job's objects.
#[derive(Clone)]
pub struct BuildOptions {
    /// Image for jobs that name none: the operator's own.
    pub default_image: String,
    /// Key of the job tokens ([`job_token`]).
    pub operator_key: Vec<u8>,
    /// Requests and limits of pods whose job names none ([`crate::resources`]).
    pub resources: JobResources,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Master,
    Worker,
    /// The pod that turns `spec.rawData` into the grid ([`crate::prepare`]).
    Prepare,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Worker => "worker",
            Role::Prepare => "prepare",
        }
    }
}

pub fn master_name(job: &TrainingJob) -> String {
    format!("{}-master", job.name_any())
}

pub fn worker_name(job: &TrainingJob, index: i32) -> String {
    format!("{}-worker-{index}", job.name_any())
}

/// The prefix of the auth Secret's generated name: `<job>-auth-`.
pub fn secret_prefix(job: &TrainingJob) -> String {
    format!("{}-auth-", job.name_any())
}

/// The Secret the job's pods mount: the spec's, or the one the operator created and recorded
/// in the status; `None` while the operator has not recorded one (no pod is created then).
/// Jobs from before generated names recorded only the UID of `<job>-auth`.
pub fn secret_name(job: &TrainingJob) -> Option<String> {
    if let Some(name) = &job.spec.job_secret_name {
        return Some(name.clone());
    }
    let status = job.status.as_ref()?;
    match (&status.auth_secret_name, &status.auth_secret_uid) {
        (Some(name), _) => Some(name.clone()),
        (None, Some(_)) => Some(format!("{}-auth", job.name_any())),
        (None, None) => None,
    }
}

/// Whether the operator made the job's Secret (and so knows its token).
pub fn operator_owns_secret(job: &TrainingJob) -> bool {
    job.spec.job_secret_name.is_none()
}

/// The job's token: HMAC-SHA256 of its UID under the operator's key. The operator can
/// recompute it to call the master, so it never needs to read a Secret.
pub fn job_token(key: &[u8], uid: &str) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(uid.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The names the master's certificate carries: its Service, as workers reach it
/// (`<job>-master.<ns>.svc`) and in every shorter and longer form.
pub fn master_names(job: &TrainingJob) -> Vec<String> {
    let (service, namespace) = (master_name(job), job.namespace().unwrap_or_default());
    vec![
        service.clone(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// The job's certificates (CA, master, member), derived from the operator's key and the
/// job's UID like its token: the operator can compute them again to call the master with the
/// member certificate, and never stores or reads the CA's key. Valid from an hour before the
/// job was created (a fixed start for a job the API server has not stamped yet, so the same
/// job always gives the same bytes).
pub fn job_certificates(key: &[u8], job: &TrainingJob) -> Result<JobCertificates, linea_proto::ProtoError> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(b"linea-tls-v1:");
    mac.update(job.uid().unwrap_or_default().as_bytes());
    let seed = mac.finalize().into_bytes();
    // 2025-01-01 for a job without a creation time (never a stored one).
    let created = job.metadata.creation_timestamp.as_ref().map_or(1_735_689_600, |t| t.0.as_second());
    let not_before =
        time::OffsetDateTime::from_unix_timestamp(created - 3600).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let name = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    JobCertificates::derive(&seed, &name, &master_names(job), not_before)
}

/// Size limit of the pods' scratch directory (`/tmp`, the only writable path): linea keeps
/// its caches in memory, so this only stops a runaway writer from filling the node's disk.
pub const SCRATCH_SIZE_LIMIT: &str = "1Gi";

/// Whether `object` is controlled by `job` (a controller owner reference with its UID). The
/// operator never adopts, changes or deletes an object that is not.
pub fn owned_by(meta: &ObjectMeta, job: &TrainingJob) -> bool {
    let uid = job.uid();
    meta.owner_references.iter().flatten().any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// Everything a job should have, as typed objects: [`crate::plan`] picks what to create,
/// `reconcile` destructures the picks and applies them.
#[derive(Debug, Clone)]
pub struct Children {
    /// The auth Secret, when the spec names none (created with a generated name).
    pub secret: Option<Secret>,
    pub service: Service,
    pub budget: PodDisruptionBudget,
    pub master: Pod,
    /// Worker `i` at index `i`, for `workers.replicas` (clamped) workers; for an elastic
    /// job, one per slot it started with ([`worker_slots`]).
    pub workers: Vec<Pod>,
    /// The prepare pod, when the spec names raw data.
    pub prepare: Option<Pod>,
}

/// Builds every object of `job`.
pub fn build(job: &TrainingJob, options: &BuildOptions) -> Children {
    Children {
        secret: job_secret(job, options),
        service: master_service(job),
        budget: master_budget(job),
        master: master_pod(job, options),
        workers: (0..worker_slots(job)).map(|i| worker_pod(job, i, options)).collect(),
        prepare: crate::prepare::prepare_pod(job, options),
    }
}

/// The CoCoA slot count of the job's master (`--slots`). An elastic job keeps the count it
/// started with (recorded in status.elastic.slots): its checkpoint's scale-in schedule
/// depends on it, so a master restarted after a `kubectl scale` must get the same. Other jobs
/// follow workers.replicas.
pub fn slots(job: &TrainingJob) -> i32 {
    let recorded = job.status.as_ref().and_then(|s| s.elastic.as_ref()).map(|e| e.slots).filter(|&s| s >= 1);
    match recorded {
        Some(slots) if job.spec.elastic.enabled => slots.min(linea_crds::MAX_WORKERS),
        _ => job.spec.workers.clamped_replicas(),
    }
}

/// How many worker pods (indices `0..n`) the job may ever have: its slots for an elastic job
/// (one worker per slot at the start; `kubectl scale` only lowers the count), else
/// workers.replicas.
pub fn worker_slots(job: &TrainingJob) -> i32 {
    if job.spec.elastic.enabled { slots(job) } else { job.spec.workers.clamped_replicas() }
}

pub fn selector(job: &TrainingJob, role: Option<Role>) -> String {
    let mut selector = format!("{LABEL_JOB}={}", job.name_any());
    if let Some(role) = role {
        selector.push_str(&format!(",{LABEL_ROLE}={}", role.as_str()));
    }
    selector
}

fn labels(job: &TrainingJob, role: Option<Role>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "linea".to_string()),
        (LABEL_MANAGED_BY.to_string(), "linea-operator".to_string()),
        (LABEL_JOB.to_string(), job.name_any()),
    ]);
    if let Some(role) = role {
        labels.insert(LABEL_ROLE.to_string(), role.as_str().to_string());
    }
    labels
}

fn owner(job: &TrainingJob) -> OwnerReference {
    job.controller_owner_ref(&()).expect("a stored TrainingJob has a name and uid")
}

fn meta(job: &TrainingJob, name: String, role: Option<Role>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.namespace(),
        labels: Some(labels(job, role)),
        owner_references: Some(vec![owner(job)]),
        ..ObjectMeta::default()
    }
}

pub fn master_service(job: &TrainingJob) -> Service {
    Service {
        metadata: meta(job, master_name(job), Some(Role::Master)),
        spec: Some(ServiceSpec {
            selector: Some(labels(job, Some(Role::Master))),
            ports: Some(vec![ServicePort {
                name: Some("grpc".into()),
                port: MASTER_PORT,
                target_port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(MASTER_PORT)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Keeps voluntary disruptions (a node drain, a cluster-autoscaler scale-down, a node
/// upgrade: anything that goes through the Eviction API) from taking the master while it
/// trains: it is the job's one copy of the model state between checkpoints. Workers are not
/// covered: they hand their shards over and are replaced. `minAvailable: 1` over the one
/// master pod (not `maxUnavailable: 0`, which would make the disruption controller look up
/// the scale of the pod's controller, the TrainingJob, whose scale is the worker count).
/// A master that is not Ready (starting, or not running) may still be evicted
/// (`AlwaysAllow`), so a budget never blocks a drain for a master that is not training.
pub fn master_budget(job: &TrainingJob) -> PodDisruptionBudget {
    let selector = BTreeMap::from([
        (LABEL_JOB.to_string(), job.name_any()),
        (LABEL_ROLE.to_string(), Role::Master.as_str().to_string()),
    ]);
    PodDisruptionBudget {
        metadata: meta(job, master_name(job), Some(Role::Master)),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(selector), ..LabelSelector::default() }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

/// The job's auth Secret, made by the operator when the spec names none. Its name is
/// generated by the API server (`<job>-auth-<suffix>`), so creating it never meets an object
/// someone else made, and the operator knows it by the name and UID the create returned.
pub fn job_secret(job: &TrainingJob, options: &BuildOptions) -> Option<Secret> {
    let mut metadata = meta(job, String::new(), None);
    metadata.name = None;
    metadata.generate_name = Some(secret_prefix(job));
    if !operator_owns_secret(job) {
        return None;
    }
    let mut data = BTreeMap::from([(
        TOKEN_KEY.to_string(),
        job_token(&options.operator_key, job.uid().as_deref().unwrap_or_default()),
    )]);
    // Names from the job's own name, checked by the CRD: derivation cannot fail for a stored job.
    match job_certificates(&options.operator_key, job) {
        Ok(certs) => data.extend(certs.files().into_iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        Err(e) => tracing::error!(job = %job.name_any(), %e, "cannot make the job's certificates"),
    }
    Some(Secret { metadata, string_data: Some(data), ..Secret::default() })
}
