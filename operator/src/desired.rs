//! What should exist for a TrainingJob: pure functions from the job to Kubernetes objects.
//!
//! One master Pod (`<job>-master`) behind a Service of the same name, a PodDisruptionBudget
//! (also `<job>-master`) that keeps a node drain from evicting the master, worker Pods
//! `<job>-worker-<i>`, and the job's auth Secret (`<job>-auth-<suffix>`, a name the API
//! server generates, unless the spec names its own). Every object is labelled with the job
//! and owned by it. Pods run the one linea image as non-root with a read-only root
//! filesystem; the master checkpoints next to the model.

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

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..EnvVar::default() }
}

/// Storage settings as the standard AWS variables; keys from the credentials Secret.
fn storage_env(job: &TrainingJob) -> Vec<EnvVar> {
    let Some(storage) = &job.spec.storage else { return Vec::new() };
    let mut vars = Vec::new();
    if let Some(endpoint) = &storage.endpoint {
        vars.push(env("AWS_ENDPOINT_URL", endpoint));
    }
    if let Some(region) = &storage.region {
        vars.push(env("AWS_REGION", region));
    }
    if storage.force_path_style {
        vars.push(env("LINEA_S3_PATH_STYLE", "true"));
    }
    if let Some(secret) = &storage.credentials_secret_name {
        let keys = [
            (linea_crds::STORAGE_ACCESS_KEY_ID_KEY, false),
            (linea_crds::STORAGE_SECRET_ACCESS_KEY_KEY, false),
            (linea_crds::STORAGE_SESSION_TOKEN_KEY, true),
        ];
        for (key, optional) in keys {
            vars.push(EnvVar {
                name: key.into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.clone(),
                        key: key.into(),
                        optional: Some(optional),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            });
        }
    }
    vars
}

/// The Secret's keys a pod of `role` mounts: the token, the job CA, and its own certificate
/// and key — a worker never sees the master's key, the master never the members'.
fn secret_items(role: Role) -> Vec<KeyToPath> {
    let own = match role {
        Role::Master => [job_tls::MASTER_CERT, job_tls::MASTER_KEY],
        Role::Worker | Role::Prepare => [job_tls::CLIENT_CERT, job_tls::CLIENT_KEY],
    };
    [TOKEN_KEY, job_tls::CA_CERT]
        .into_iter()
        .chain(own)
        .map(|key| KeyToPath { key: key.into(), path: key.into(), ..Default::default() })
        .collect()
}

pub(crate) struct PodParts {
    pub name: String,
    pub role: Role,
    pub index: Option<i32>,
    pub args: Vec<String>,
    pub port: i32,
    pub resources: Option<ResourceRequirements>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub affinity: Option<Affinity>,
}

/// The volume holding the job token (master and workers).
pub(crate) const JOB_SECRET_VOLUME: &str = "job-secret";

pub(crate) fn pod(job: &TrainingJob, options: &BuildOptions, parts: PodParts) -> Pod {
    let mut metadata = meta(job, parts.name, Some(parts.role));
    if let Some(index) = parts.index {
        metadata.labels.get_or_insert_default().insert(LABEL_INDEX.into(), index.to_string());
    }
    // The job's own labels and annotations, under the operator's (which select the pods).
    let extra = &job.spec.pod_metadata;
    let labels = metadata.labels.get_or_insert_default();
    for (key, value) in &extra.labels {
        labels.entry(key.clone()).or_insert_with(|| value.clone());
    }
    if !extra.annotations.is_empty() {
        metadata.annotations = Some(extra.annotations.clone());
    }
    let mut env_vars = vec![EnvVar {
        name: "POD_IP".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: "status.podIP".into(), ..Default::default() }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }];
    env_vars.extend(storage_env(job));
    let container = Container {
        name: parts.role.as_str().into(),
        image: Some(job.spec.image.clone().unwrap_or_else(|| options.default_image.clone())),
        image_pull_policy: job.spec.image_pull_policy.map(|p| p.as_str().to_string()),
        command: Some(vec!["linea".into()]),
        args: Some(parts.args),
        env: Some(env_vars),
        ports: Some(vec![ContainerPort {
            name: Some("grpc".into()),
            container_port: parts.port,
            ..Default::default()
        }]),
        resources: parts.resources,
        // linea writes its error to /dev/termination-log; an older image that does not still
        // tells why it failed through the end of its log.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(vec![
            VolumeMount { name: "tmp".into(), mount_path: "/tmp".into(), ..Default::default() },
            VolumeMount {
                name: JOB_SECRET_VOLUME.into(),
                mount_path: SECRET_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    Pod {
        metadata,
        spec: Some(PodSpec {
            containers: vec![container],
            // The operator decides about restarts: it counts master failures against the
            // backoff limit and replaces preempted workers, possibly elsewhere.
            restart_policy: Some("Never".into()),
            // IRSA / Workload Identity need the account's token; without an account the pods
            // need no API access at all.
            service_account_name: job.spec.service_account_name.clone(),
            automount_service_account_token: Some(job.spec.service_account_name.is_some()),
            priority_class_name: job.spec.priority_class_name.clone(),
            scheduler_name: job.spec.scheduler_name.clone(),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(MASTER_GRACE_SECONDS),
            node_selector: (!parts.node_selector.is_empty()).then_some(parts.node_selector),
            tolerations: (!parts.tolerations.is_empty()).then_some(parts.tolerations),
            affinity: parts.affinity,
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                fs_group: Some(65532),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                ..PodSecurityContext::default()
            }),
            volumes: Some(vec![
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource {
                        size_limit: Some(Quantity(SCRATCH_SIZE_LIMIT.into())),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: JOB_SECRET_VOLUME.into(),
                    secret: Some(SecretVolumeSource {
                        // Unknown only while the Secret is not recorded: no pod is created then.
                        secret_name: secret_name(job),
                        // Readable by the pod's user only.
                        default_mode: Some(0o400),
                        items: Some(secret_items(parts.role)),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn secret_file() -> String {
    format!("{SECRET_DIR}/{TOKEN_KEY}")
}

pub fn master_pod(job: &TrainingJob, options: &BuildOptions) -> Pod {
    let spec = &job.spec;
    let mut args: Vec<String> = vec![
        "master".into(),
        "--data".into(),
        spec.dataset_uri.clone(),
        "--model".into(),
        spec.model_uri.clone(),
        "--checkpoint".into(),
        format!("{}.checkpoint", spec.model_uri),
        "--listen".into(),
        format!("0.0.0.0:{MASTER_PORT}"),
        "--secret-file".into(),
        secret_file(),
        "--tls-dir".into(),
        SECRET_DIR.into(),
        "--metrics-listen".into(),
        format!("0.0.0.0:{MASTER_METRICS_PORT}"),
    ];
    let params: Vec<(&str, String)> = match &spec.algorithm {
        Algorithm::Scd(p) => vec![
            ("--loss", p.loss.as_str().to_string()),
            ("--l2", p.l2.to_string()),
            ("--l1", p.l1.to_string()),
            ("--epochs", p.epochs.to_string()),
            ("--tolerance", p.tolerance.to_string()),
        ],
        // As `linea train --algorithm cocoa`; one CoCoA slot per worker the job runs.
        Algorithm::Cocoa(p) => vec![
            ("--algorithm", "cocoa".to_string()),
            ("--loss", p.loss.as_str().to_string()),
            ("--l2", p.l2.to_string()),
            ("--local-passes", p.local_passes.to_string()),
            ("--gap-tolerance", p.gap_tolerance.to_string()),
            ("--epochs", p.max_epochs.to_string()),
            ("--seed", p.seed.to_string()),
            ("--slots", slots(job).to_string()),
        ],
        // As `linea train --algorithm hybrid|ipm`; one slot per worker the job runs, so the
        // model depends on the replica count (not on which pods serve the slots).
        Algorithm::Hybrid(p) => {
            // L-BFGS's settings only for L-BFGS (linea refuses them with newton), the refresh
            // only for a diagonal (it refuses it with none), and `--batch-solver` only for
            // newton: an L-BFGS job's arguments are what they were before there was a choice.
            let lbfgs = p.batch_solver == BatchSolver::Lbfgs;
            let refresh = lbfgs && p.lbfgs_precondition != LbfgsPrecondition::None;
            [
                Some(("--algorithm", "hybrid".to_string())),
                Some(("--loss", p.loss.as_str().to_string())),
                Some(("--l2", p.l2.to_string())),
                lbfgs.then(|| ("--memory", p.memory.to_string())),
                Some(("--epochs", p.max_epochs.to_string())),
                Some(("--tolerance", p.tolerance.to_string())),
                Some(("--gradient-tolerance", p.gradient_tolerance.to_string())),
                lbfgs.then(|| ("--lbfgs-precondition", p.lbfgs_precondition.as_str().to_string())),
                (!lbfgs).then(|| ("--batch-solver", p.batch_solver.as_str().to_string())),
                Some(("--sgd-rate", p.sgd_rate.to_string())),
                Some(("--seed", p.seed.to_string())),
                Some(("--slots", slots(job).to_string())),
                refresh.then(|| ("--lbfgs-precondition-refresh", p.lbfgs_precondition_refresh.to_string())),
            ]
            .into_iter()
            .flatten()
            .collect()
        }
        Algorithm::Ipm(p) => vec![
            ("--algorithm", "ipm".to_string()),
            ("--loss", p.loss.as_str().to_string()),
            ("--l2", p.l2.to_string()),
            ("--mixing", p.mixing.as_str().to_string()),
            ("--epochs", p.max_epochs.to_string()),
            ("--tolerance", p.tolerance.to_string()),
            ("--sgd-rate", p.sgd_rate.to_string()),
            ("--seed", p.seed.to_string()),
            ("--slots", slots(job).to_string()),
        ],
    };
    for (flag, value) in params {
        args.extend([flag.to_string(), value]);
    }
    if let Algorithm::Cocoa(p) = &spec.algorithm
        && p.accelerate
    {
        args.push("--accelerate".into());
    }
    // Elastic CoCoA: the master scales in from the slots above; admission allows it with
    // cocoa only, and `linea master` refuses `--elastic` with SCD too.
    let elastic = &spec.elastic;
    if elastic.enabled {
        args.push("--elastic".into());
        for (flag, value) in [
            ("--elastic-min-slots", elastic.min_replicas.to_string()),
            ("--elastic-factor", elastic.factor.to_string()),
            ("--elastic-window", elastic.window.to_string()),
            ("--elastic-threshold", elastic.threshold.to_string()),
            ("--elastic-clock", elastic.clock.as_str().to_string()),
            // A fresh master starts once the workers it starts with joined, so its first
            // scale-in releases (and names) pods that are there, not ones still starting:
            // the pods the job runs, one per slot up to `workers.replicas`.
            ("--wait-for-workers", slots(job).min(spec.workers.clamped_replicas()).to_string()),
            ("--wait-for-workers-timeout", elastic.start_timeout_seconds.to_string()),
        ] {
            args.extend([flag.to_string(), value]);
        }
    }
    let parts = PodParts {
        name: master_name(job),
        role: Role::Master,
        index: None,
        args,
        port: MASTER_PORT,
        resources: options.resources.effective(Role::Master, spec.master.resources.as_ref()),
        node_selector: spec.master.node_selector.clone(),
        tolerations: spec.master.tolerations.clone(),
        affinity: None,
    };
    let mut pod = pod(job, options, parts);
    expose_metrics(&mut pod);
    pod
}

/// The master's metrics port, named `metrics`, and the `prometheus.io/*` annotations a
/// Prometheus with the usual pod scrape config follows. The job's own `podMetadata`
/// annotations win (`prometheus.io/scrape: "false"` turns the scrape off).
fn expose_metrics(pod: &mut Pod) {
    let annotations = pod.metadata.annotations.get_or_insert_default();
    for (key, value) in [
        ("prometheus.io/scrape", "true".to_string()),
        ("prometheus.io/port", MASTER_METRICS_PORT.to_string()),
        ("prometheus.io/path", "/metrics".to_string()),
    ] {
        annotations.entry(key.into()).or_insert(value);
    }
    let containers = pod.spec.as_mut().map(|s| s.containers.as_mut_slice()).unwrap_or_default();
    for container in containers {
        container.ports.get_or_insert_default().push(ContainerPort {
            name: Some("metrics".into()),
            container_port: MASTER_METRICS_PORT,
            ..Default::default()
        });
    }
}

pub fn worker_pod(job: &TrainingJob, index: i32, options: &BuildOptions) -> Pod {
    let workers = &job.spec.workers;
    let master = format!("{}.{}.svc:{MASTER_PORT}", master_name(job), job.namespace().unwrap_or_default());
    let mut args: Vec<String> = vec![
        "worker".into(),
        "--master".into(),
        master,
        "--listen".into(),
        format!("0.0.0.0:{WORKER_PORT}"),
        "--secret-file".into(),
        secret_file(),
        "--drain-timeout".into(),
        WORKER_DRAIN_TIMEOUT_SECONDS.to_string(),
        "--tls-dir".into(),
        SECRET_DIR.into(),
    ];
    if let Some(threads) = workers.threads {
        args.extend(["--threads".into(), threads.to_string()]);
    }
    let resources = options.resources.effective(Role::Worker, workers.resources.as_ref());
    if let Some(cache) = cache_mib(resources.as_ref()) {
        args.extend(["--cache-mb".into(), cache.to_string()]);
    }
    let mut tolerations = workers.tolerations.clone();
    let mut affinity = None;
    if workers.preemptible {
        for (key, value) in SPOT_TAINTS {
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some(if value.is_some() { "Equal" } else { "Exists" }.into()),
                value: value.map(Into::into),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            });
        }
        // Prefer spot capacity (Karpenter's and the clouds' labels) without requiring it.
        let spot = |key: &str, value: &str| NodeSelectorRequirement {
            key: key.into(),
            operator: "In".into(),
            values: Some(vec![value.into()]),
        };
        let terms = [
            spot("karpenter.sh/capacity-type", "spot"),
            spot("cloud.google.com/gke-spot", "true"),
            spot("eks.amazonaws.com/capacityType", "SPOT"),
        ];
        affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(
                    terms
                        .into_iter()
                        .map(|term| PreferredSchedulingTerm {
                            weight: 50,
                            preference: NodeSelectorTerm { match_expressions: Some(vec![term]), ..Default::default() },
                        })
                        .collect(),
                ),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    let parts = PodParts {
        name: worker_name(job, index),
        role: Role::Worker,
        index: Some(index),
        args,
        port: WORKER_PORT,
        resources,
        node_selector: workers.node_selector.clone(),
        tolerations,
        affinity,
    };
    let mut pod = pod(job, options, parts);
    if let Some(spec) = pod.spec.as_mut() {
        spec.termination_grace_period_seconds = Some(WORKER_GRACE_SECONDS);
    }
    pod
}

/// The worker's cell cache (`--cache-mb`): half its memory limit, so that the cache and the
/// rest of the worker (its shards' predictions, decoded blocks, buffers) fit under it and a
/// worker is not OOM-killed for caching; `None` without a memory limit (linea's own default,
/// 4 GiB).
fn cache_mib(resources: Option<&ResourceRequirements>) -> Option<u64> {
    let limit = resources?.limits.as_ref()?.get("memory")?;
    Some((resources::bytes(limit)? / 2) >> 20)
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

#[cfg(test)]
pub mod tests {
    use super::*;
    use linea_crds::TrainingJobSpec;

    /// A job as first seen: no status yet.
    pub fn fresh(yaml: &str) -> TrainingJob {
        // Through JSON: serde_yaml reads enums as YAML tags, the API server as JSON objects.
        let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let spec: TrainingJobSpec = serde_json::from_value(value).unwrap();
        let mut job = TrainingJob::new("ads", spec);
        job.metadata.namespace = Some("ml".into());
        job.metadata.uid = Some("0f5e-uid".into());
        job
    }

    /// A job whose auth Secret the operator has created and recorded (the first pass).
    pub fn job(yaml: &str) -> TrainingJob {
        let mut job = fresh(yaml);
        job.status = Some(linea_crds::TrainingJobStatus {
            auth_secret_name: Some("ads-auth-x7k2p".into()),
            auth_secret_uid: Some("secret-uid".into()),
            ..Default::default()
        });
        job
    }

    pub fn options() -> BuildOptions {
        BuildOptions {
            default_image: "linea:0.1.0".into(),
            operator_key: b"operator-key".to_vec(),
            resources: JobResources::default(),
        }
    }

    /// The chart's default values of `jobDefaults.resources`, as its template renders them.
    pub fn chart_resources() -> JobResources {
        let values: serde_json::Value =
            serde_yaml::from_str(include_str!("../../charts/linea/values.yaml")).expect("the chart's values");
        JobResources::parse(&values["jobDefaults"]["resources"].to_string()).expect("the chart's defaults are valid")
    }

    const SPEC: &str = "datasetUri: s3://data/ads/grid\nmodelUri: s3://models/ads.model\nalgorithm: {scd: {l2: 2.5}}\nworkers: {replicas: 3, preemptible: true, threads: 4}\nstorage: {endpoint: 'http://minio:9000', credentialsSecretName: s3-creds}\n";

    #[test]
    fn the_master_trains_the_spec_with_checkpoints_next_to_the_model() {
        let job = job(SPEC);
        let pod = master_pod(&job, &options());
        assert_eq!(pod.metadata.name.as_deref(), Some("ads-master"));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("TrainingJob", "ads", Some(true)));
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(args.starts_with("master --data s3://data/ads/grid --model s3://models/ads.model"), "{args}");
        assert!(args.contains("--checkpoint s3://models/ads.model.checkpoint") && args.contains("--l2 2.5"), "{args}");
        assert_eq!(c.image.as_deref(), Some("linea:0.1.0"));
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!((sc.read_only_root_filesystem, sc.run_as_non_root), (Some(true), Some(true)));
        let env: Vec<&str> = c.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
        assert!(env.contains(&"AWS_ENDPOINT_URL") && env.contains(&"AWS_SECRET_ACCESS_KEY"), "{env:?}");
        let secret_ref = c.env.as_ref().unwrap().iter().find(|e| e.name == "AWS_SECRET_ACCESS_KEY").unwrap();
        assert!(secret_ref.value.is_none(), "credentials come from the Secret, never inline");
    }

    #[test]
    fn preemptible_workers_tolerate_spot_nodes_and_find_the_master_service() {
        let job = job(SPEC);
        let pod = worker_pod(&job, 2, &options());
        assert_eq!(pod.metadata.name.as_deref(), Some("ads-worker-2"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_INDEX], "2");
        let spec = pod.spec.as_ref().unwrap();
        assert!(
            spec.tolerations.as_ref().unwrap().iter().any(|t| t.key.as_deref() == Some("cloud.google.com/gke-spot"))
        );
        assert!(spec.affinity.is_some());
        let args = spec.containers[0].args.as_ref().unwrap().join(" ");
        assert!(args.contains("--master ads-master.ml.svc:7070") && args.contains("--threads 4"), "{args}");
        // Time to hand the shards over, and the worker leaves by itself before it is killed.
        assert_eq!(spec.termination_grace_period_seconds, Some(110));
        assert!(args.contains("--drain-timeout 100"), "{args}");
        let master = master_pod(&job, &options());
        assert_eq!(master.spec.unwrap().termination_grace_period_seconds, Some(30));
        let service = master_service(&job);
        assert_eq!(service.spec.unwrap().selector.unwrap()[LABEL_ROLE], "master");
    }

    #[test]
    fn the_job_token_is_a_keyed_hash_of_the_uid() {
        let a = job_token(b"k1", "uid-1");
        assert_eq!(a.len(), 64);
        assert_ne!(a, job_token(b"k2", "uid-1"));
        assert_ne!(a, job_token(b"k1", "uid-2"));
        let secret = job_secret(&job(SPEC), &options()).unwrap();
        assert_eq!(secret.string_data.unwrap()[TOKEN_KEY], job_token(b"operator-key", "0f5e-uid"));
        assert!(job_secret(&job(&format!("{SPEC}jobSecretName: mine\n")), &options()).is_none());
    }

    #[test]
    fn the_secret_holds_the_jobs_certificates_and_each_pod_mounts_only_its_own_key() {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut job = job(SPEC);
        let created = k8s_openapi::jiff::Timestamp::now();
        job.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created));
        let data = job_secret(&job, &options()).unwrap().string_data.unwrap();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(keys, ["ca.crt", "client.crt", "client.key", "master.crt", "master.key", "token"]);
        assert!(!data.values().any(|v| v.contains("CA PRIVATE") || v.matches("PRIVATE KEY-----").count() > 2));
        assert_eq!(job_secret(&job, &options()).unwrap().string_data.unwrap(), data, "the same job, the same bytes");
        // The master's certificate verifies, under the job CA, for the Service's names only.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(data["ca.crt"].as_bytes()).unwrap()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider).build().unwrap();
        let verify = |cert: &str, name: &str| {
            let cert = CertificateDer::from_pem_slice(data[cert].as_bytes()).unwrap();
            let name = ServerName::try_from(name.to_string()).unwrap();
            verifier.verify_server_cert(&cert, &[], &name, &[], UnixTime::now()).is_ok()
        };
        for name in ["ads-master", "ads-master.ml", "ads-master.ml.svc", "ads-master.ml.svc.cluster.local"] {
            assert!(verify("master.crt", name), "{name}");
        }
        assert!(!verify("master.crt", "ads-master.other.svc") && !verify("master.crt", "linea-worker"));
        assert!(verify("client.crt", "linea-worker") && !verify("client.crt", "ads-master.ml.svc"));
        // Another job (another UID): another CA.
        let mut other = job.clone();
        other.metadata.uid = Some("another-uid".into());
        assert_ne!(job_secret(&other, &options()).unwrap().string_data.unwrap()["ca.crt"], data["ca.crt"]);
        // Pods: the CA and their own pair, never the other role's key; linea reads the folder.
        let items = |pod: &Pod| -> Vec<String> {
            let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
            let secret = volumes.iter().find(|v| v.name == "job-secret").unwrap().secret.clone().unwrap();
            secret.items.unwrap().into_iter().map(|i| i.key).collect()
        };
        assert_eq!(items(&master_pod(&job, &options())), ["token", "ca.crt", "master.crt", "master.key"]);
        assert_eq!(items(&worker_pod(&job, 0, &options())), ["token", "ca.crt", "client.crt", "client.key"]);
        for pod in [master_pod(&job, &options()), worker_pod(&job, 0, &options())] {
            let args = args(&pod).join(" ");
            assert!(args.contains("--tls-dir /var/run/linea/secret") && !args.contains("--insecure"), "{args}");
        }
    }

    fn mounted_secret(pod: &Pod) -> Option<String> {
        let volumes = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        volumes.iter().find(|v| v.name == "job-secret").unwrap().secret.as_ref().unwrap().secret_name.clone()
    }

    #[test]
    fn the_auth_secret_gets_a_generated_name_and_pods_mount_the_recorded_one() {
        let fresh = fresh(SPEC);
        let secret = job_secret(&fresh, &options()).unwrap();
        assert_eq!(secret.metadata.name, None, "the API server names it, so it never meets anyone else's");
        assert_eq!(secret.metadata.generate_name.as_deref(), Some("ads-auth-"));
        assert!(owned_by(&secret.metadata, &fresh));
        assert_eq!(secret_name(&fresh), None, "nothing recorded: no Secret is the job's yet");
        assert_eq!(mounted_secret(&master_pod(&job(SPEC), &options())).as_deref(), Some("ads-auth-x7k2p"));
        let own = self::job(&format!("{SPEC}jobSecretName: mine\n"));
        assert_eq!(mounted_secret(&worker_pod(&own, 0, &options())).as_deref(), Some("mine"));
        // A job from before generated names recorded only the UID of `<job>-auth`.
        let mut legacy = fresh.clone();
        legacy.status = Some(linea_crds::TrainingJobStatus { auth_secret_uid: Some("u".into()), ..Default::default() });
        assert_eq!(secret_name(&legacy).as_deref(), Some("ads-auth"));
    }

    #[test]
    fn the_masters_disruption_budget_selects_the_master_alone() {
        let job = job(SPEC);
        let budget = master_budget(&job);
        assert_eq!(budget.metadata.name.as_deref(), Some("ads-master"));
        assert!(owned_by(&budget.metadata, &job));
        let spec = budget.spec.unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(1)));
        assert_eq!(spec.max_unavailable, None, "maxUnavailable would make it look up the job's scale");
        assert_eq!(spec.unhealthy_pod_eviction_policy.as_deref(), Some("AlwaysAllow"));
        let selector = spec.selector.unwrap().match_labels.unwrap();
        let matches = |pod: &Pod| selector.iter().all(|(k, v)| pod.metadata.labels.as_ref().unwrap().get(k) == Some(v));
        assert!(matches(&master_pod(&job, &options())));
        assert!(!matches(&worker_pod(&job, 0, &options())), "workers may be drained");
        let mut other = job.clone();
        other.metadata.name = Some("ads2".into());
        assert!(!matches(&master_pod(&other, &options())), "another job's master");
    }

    fn args(pod: &Pod) -> Vec<String> {
        pod.spec.as_ref().unwrap().containers[0].args.clone().unwrap()
    }

    #[test]
    fn scd_keeps_exactly_its_arguments() {
        let job = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\n");
        let args = args(&master_pod(&job, &options())).join(" ");
        assert_eq!(
            args,
            "master --data s3://data/g --model s3://models/x --checkpoint s3://models/x.checkpoint \
             --listen 0.0.0.0:7070 --secret-file /var/run/linea/secret/token --tls-dir /var/run/linea/secret \
             --metrics-listen 0.0.0.0:9090 --loss logistic --l2 1 --l1 0 --epochs 100 --tolerance 0.000000001"
        );
    }

    #[test]
    fn cocoa_maps_to_the_masters_cocoa_arguments_with_one_slot_per_worker() {
        let job = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nworkers: {replicas: 6}\n\
             algorithm: {cocoa: {loss: hinge, l2: 0.5, localPasses: 3, gapTolerance: 1e-4, maxEpochs: 40, seed: 9}}\n");
        let args = args(&master_pod(&job, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--algorithm"), Some("cocoa"));
        assert_eq!(after("--loss"), Some("hinge"));
        assert_eq!(after("--l2"), Some("0.5"));
        assert_eq!(after("--local-passes"), Some("3"));
        assert_eq!(after("--gap-tolerance"), Some("0.0001"));
        assert_eq!(after("--epochs"), Some("40"));
        assert_eq!(after("--seed"), Some("9"));
        assert_eq!(after("--slots"), Some("6"));
        assert_eq!(after("--tolerance"), None, "SCD's stopping rule is not CoCoA's");
        assert!(!args.iter().any(|a| a == "--accelerate"), "plain CoCoA unless asked");
        let accelerated = self::job(
            "datasetUri: s3://data/g\nmodelUri: s3://models/x\nworkers: {replicas: 4}\n\
             algorithm: {cocoa: {accelerate: true}}\n",
        );
        assert!(self::args(&master_pod(&accelerated, &options())).iter().any(|a| a == "--accelerate"));
        let defaults = job_with_defaults_of_cocoa();
        let args = self::args(&master_pod(&defaults, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
        assert_eq!(
            [after("--l2"), after("--local-passes"), after("--gap-tolerance"), after("--epochs"), after("--seed")],
            [Some("1".into()), Some("1".into()), Some("0.000001".into()), Some("100".into()), Some("0".into())]
        );
        let worker = self::args(&worker_pod(&job, 0, &options())).join(" ");
        assert!(worker.starts_with("worker --master ads-master.ml.svc:7070"), "workers start as for SCD: {worker}");
    }

    #[test]
    fn hybrid_and_ipm_map_to_the_masters_arguments_with_one_slot_per_worker() {
        let hybrid = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nworkers: {replicas: 3}\n\
             algorithm: {hybrid: {l2: 0.5, memory: 7, maxEpochs: 40, gradientTolerance: 1e-8, sgdRate: 0.25}}\n");
        let args = self::args(&master_pod(&hybrid, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--algorithm"), Some("hybrid"));
        assert_eq!(after("--memory"), Some("7"));
        assert_eq!(after("--epochs"), Some("40"));
        assert_eq!(after("--gradient-tolerance"), Some("0.00000001"));
        assert_eq!(after("--sgd-rate"), Some("0.25"));
        assert_eq!(after("--slots"), Some("3"));
        assert_eq!(after("--lbfgs-precondition"), Some("diagonal"));
        assert_eq!(after("--lbfgs-precondition-refresh"), Some("15"));
        let plain = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\n\
             algorithm: {hybrid: {lbfgsPrecondition: none, lbfgsPreconditionRefresh: 3}}\n");
        let args = self::args(&master_pod(&plain, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--lbfgs-precondition"), Some("none"));
        assert_eq!(after("--lbfgs-precondition-refresh"), None, "the refresh is the diagonal's alone");
        assert_eq!(after("--batch-solver"), None, "an L-BFGS job's arguments are as before the choice");
        let newton = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\n\
             algorithm: {hybrid: {batchSolver: newton, memory: 7, lbfgsPrecondition: scaled}}\n");
        let args = self::args(&master_pod(&newton, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--batch-solver"), Some("newton"));
        for lbfgs_only in ["--memory", "--lbfgs-precondition", "--lbfgs-precondition-refresh"] {
            assert_eq!(after(lbfgs_only), None, "{lbfgs_only} is L-BFGS's: linea refuses it with newton");
        }
        let scaled = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\n\
             algorithm: {hybrid: {lbfgsPrecondition: scaled, lbfgsPreconditionRefresh: 3}}\n");
        let args = self::args(&master_pod(&scaled, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!((after("--lbfgs-precondition"), after("--lbfgs-precondition-refresh")), (Some("scaled"), Some("3")));
        assert_eq!(after("--mixing"), None, "mixing is IPM's alone (linea refuses it for hybrid)");
        let ipm = job(
            "datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {ipm: {loss: hinge, mixing: examples}}\n",
        );
        let args = self::args(&master_pod(&ipm, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        assert_eq!(after("--algorithm"), Some("ipm"));
        assert_eq!(after("--loss"), Some("hinge"));
        assert_eq!(after("--mixing"), Some("examples"));
        assert_eq!(after("--memory"), None, "memory is L-BFGS's alone (linea refuses it for ipm)");
        assert_eq!(after("--slots"), Some("1"));
    }

    #[test]
    fn elastic_maps_to_the_masters_elastic_flags_and_keeps_its_starting_slots() {
        let spec = "datasetUri: s3://data/g\nmodelUri: s3://models/x\nworkers: {replicas: 16}\n\
             algorithm: {cocoa: {loss: hinge}}\n\
             elastic: {enabled: true, minReplicas: 2, factor: 2, window: 3, threshold: 1.5, clock: epochs, \
             startTimeoutSeconds: 900}\n";
        let mut elastic = job(spec);
        let args = args(&master_pod(&elastic, &options())).join(" ");
        assert!(
            args.ends_with(
                "--slots 16 --elastic --elastic-min-slots 2 --elastic-factor 2 --elastic-window 3 \
                 --elastic-threshold 1.5 --elastic-clock epochs --wait-for-workers 16 --wait-for-workers-timeout 900"
            ),
            "{args}"
        );
        assert_eq!(build(&elastic, &options()).workers.len(), 16);
        // Scaled to 4 after it started with 16: a restarted master still gets 16 slots (its
        // checkpoint's schedule), and worker pods keep their indices 0..16.
        elastic.spec.workers.replicas = 4;
        elastic.status.as_mut().unwrap().elastic = Some(linea_crds::ElasticStatus { slots: 16, ..Default::default() });
        assert!(args_of(&elastic).contains("--slots 16 --elastic"));
        assert!(args_of(&elastic).contains("--wait-for-workers 4 "), "it waits for the pods it runs");
        assert_eq!(build(&elastic, &options()).workers.len(), 16);
        // Defaults: Chicle's N=2, d=1.25, m=4 on the wall clock; without elastic no flag.
        let defaults =
            job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {cocoa: {}}\nelastic: {enabled: true}\n");
        assert!(args_of(&defaults).ends_with(
            "--elastic --elastic-min-slots 1 --elastic-factor 4 --elastic-window 2 --elastic-threshold 1.25 --elastic-clock wall \
             --wait-for-workers 1 --wait-for-workers-timeout 300"
        ));
        assert!(!args_of(&job_with_defaults_of_cocoa()).contains("--elastic"));
        // Not elastic: the slots follow replicas, whatever a status says.
        let mut plain =
            job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {cocoa: {}}\nworkers: {replicas: 3}\n");
        plain.status.as_mut().unwrap().elastic = Some(linea_crds::ElasticStatus { slots: 16, ..Default::default() });
        assert!(args_of(&plain).ends_with("--slots 3"));
    }

    #[test]
    fn the_master_exposes_its_metrics_port_with_scrape_annotations() {
        let master = master_pod(&job(SPEC), &options());
        let args = args(&master).join(" ");
        assert!(args.contains(&format!("--metrics-listen 0.0.0.0:{MASTER_METRICS_PORT}")), "{args}");
        let ports = master.spec.as_ref().unwrap().containers[0].ports.clone().unwrap();
        let named: Vec<(Option<&str>, i32)> = ports.iter().map(|p| (p.name.as_deref(), p.container_port)).collect();
        assert_eq!(named, [(Some("grpc"), MASTER_PORT), (Some("metrics"), MASTER_METRICS_PORT)]);
        let annotations = master.metadata.annotations.unwrap();
        assert_eq!(annotations["prometheus.io/scrape"], "true");
        assert_eq!(annotations["prometheus.io/port"], MASTER_METRICS_PORT.to_string());
        assert_eq!(annotations["prometheus.io/path"], "/metrics");
        // Workers serve no metrics: no port, no annotations.
        let worker = worker_pod(&job(SPEC), 0, &options());
        assert!(worker.metadata.annotations.is_none());
        let ports = worker.spec.unwrap().containers[0].ports.clone().unwrap();
        assert!(ports.iter().all(|p| p.name.as_deref() != Some("metrics")), "{ports:?}");
        // The job's own annotations win: a job can turn the scrape off.
        let off = job(&format!("{SPEC}podMetadata: {{annotations: {{prometheus.io/scrape: 'false', cost: x}}}}\n"));
        let annotations = master_pod(&off, &options()).metadata.annotations.unwrap();
        assert_eq!((annotations["prometheus.io/scrape"].as_str(), annotations["cost"].as_str()), ("false", "x"));
    }

    /// What the restricted Pod Security Standard asks, and no API credentials: every job pod
    /// (master, workers) runs non-root with seccomp RuntimeDefault, no capabilities, no
    /// privilege escalation, a read-only root, no service-account token and no service links.
    #[test]
    fn every_job_pod_is_hardened_and_holds_no_api_token() {
        let job = job(SPEC);
        for pod in [master_pod(&job, &options()), worker_pod(&job, 1, &options())] {
            let spec = pod.spec.unwrap();
            let ps = spec.security_context.unwrap();
            assert_eq!(ps.seccomp_profile.unwrap().type_, "RuntimeDefault");
            assert_eq!((ps.run_as_non_root, ps.run_as_user), (Some(true), Some(65532)));
            assert_eq!((spec.automount_service_account_token, spec.enable_service_links), (Some(false), Some(false)));
            for c in spec.containers {
                let sc = c.security_context.unwrap();
                assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
                assert_eq!(sc.allow_privilege_escalation, Some(false));
                assert_eq!(sc.read_only_root_filesystem, Some(true));
                assert_eq!(sc.privileged, None);
            }
        }
    }

    fn resources_of(pod: &Pod) -> ResourceRequirements {
        pod.spec.as_ref().unwrap().containers[0].resources.clone().unwrap_or_default()
    }

    fn quantities(list: &Option<BTreeMap<String, Quantity>>) -> Vec<(String, String)> {
        list.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// With the chart's defaults, every pod of a job that names no resources (master,
    /// workers, the prepare pod) has CPU and memory requests and limits, as a ResourceQuota
    /// on limits.cpu / limits.memory asks; the worker's cache is half its memory limit.
    #[test]
    fn every_job_pod_gets_the_default_requests_and_limits_when_its_job_names_none() {
        let options = BuildOptions { resources: chart_resources(), ..options() };
        let raw = "rawData: {uri: 's3://raw/a.csv', format: csv}\n";
        let job = job(&format!("{SPEC}{raw}"));
        assert!(job.spec.workers.resources.is_none() && job.spec.master.resources.is_none());
        let children = build(&job, &options);
        let prepare = children.prepare.clone().expect("a prepare pod");
        for pod in children.workers.iter().chain([&children.master, &prepare]) {
            let r = resources_of(pod);
            let names =
                |l: &Option<BTreeMap<String, Quantity>>| l.iter().flatten().map(|(k, _)| k.clone()).collect::<Vec<_>>();
            assert_eq!(
                (names(&r.requests), names(&r.limits)),
                (vec!["cpu".to_string(), "memory".into()], vec!["cpu".to_string(), "memory".into()]),
                "{}",
                pod.name_any()
            );
        }
        let worker = resources_of(&children.workers[0]);
        assert_eq!(quantities(&worker.requests), pairs(&[("cpu", "500m"), ("memory", "1Gi")]));
        assert_eq!(quantities(&worker.limits), pairs(&[("cpu", "4"), ("memory", "8Gi")]));
        assert_eq!(resources_of(&children.master), resources_of(&prepare), "prepare: the master's");
        assert_eq!(quantities(&resources_of(&children.master).limits), pairs(&[("cpu", "2"), ("memory", "4Gi")]));
        let args = args(&children.workers[0]).join(" ");
        assert!(args.contains("--cache-mb 4096"), "half of 8Gi: {args}");
        // Without defaults (a bare operator binary), nothing is added: as before.
        let bare = worker_pod(&job, 0, &self::options());
        assert_eq!(bare.spec.as_ref().unwrap().containers[0].resources, None);
        assert!(!args_of_worker(&bare).contains("--cache-mb"));
    }

    /// What the job names wins, resource by resource: its own memory limit and requests stay,
    /// the CPU limit it leaves out is the default, and a request above the default limit
    /// raises that limit.
    #[test]
    fn the_jobs_own_resources_win_over_the_defaults_field_by_field() {
        let options = BuildOptions { resources: chart_resources(), ..options() };
        let job = job(&format!(
            "{SPEC}master: {{resources: {{requests: {{cpu: '6'}}}}}}\n"
        )
        .replace("workers: {replicas: 3, preemptible: true, threads: 4}", "workers: {replicas: 3, threads: 4, resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}}"));
        let worker = worker_pod(&job, 0, &options);
        let r = resources_of(&worker);
        assert_eq!(quantities(&r.requests), pairs(&[("cpu", "100m"), ("memory", "128Mi")]));
        assert_eq!(quantities(&r.limits), pairs(&[("cpu", "4"), ("memory", "1Gi")]));
        assert!(args_of_worker(&worker).contains("--cache-mb 512"), "half of the job's own 1Gi");
        let r = resources_of(&master_pod(&job, &options));
        assert_eq!(quantities(&r.requests), pairs(&[("cpu", "6"), ("memory", "512Mi")]));
        assert_eq!(quantities(&r.limits), pairs(&[("cpu", "6"), ("memory", "4Gi")]), "never a limit below the request");
    }

    fn args_of_worker(pod: &Pod) -> String {
        args(pod).join(" ")
    }

    /// The chart's NetworkPolicy opens the port the master serves its metrics on.
    #[test]
    fn the_charts_master_metrics_port_is_the_operators() {
        let helpers = include_str!("../../charts/linea/templates/_helpers.tpl");
        let define = helpers.split("{{- define \"linea.masterMetricsPort\" -}}").nth(1).expect("the chart defines it");
        let port = define.lines().map(str::trim).find(|l| !l.is_empty()).unwrap();
        assert_eq!(port, MASTER_METRICS_PORT.to_string());
    }

    /// No secret in a pod's arguments (every user of the node sees them in the process
    /// list) or as a literal environment value (in the pod object, readable with `get pods`):
    /// the token and keys are mounted files, the S3 keys `secretKeyRef`s.
    #[test]
    fn no_pod_carries_a_secret_in_its_arguments_or_a_literal_environment_value() {
        let options = options();
        let job = job(SPEC);
        let secret = job_secret(&fresh(SPEC), &options).unwrap();
        let values: Vec<String> = secret.string_data.unwrap().into_values().collect();
        let token = job_token(&options.operator_key, "0f5e-uid");
        assert!(values.contains(&token) && values.iter().any(|v| v.contains("PRIVATE KEY")));
        let operator_key = String::from_utf8(options.operator_key.clone()).unwrap();
        let pods = [master_pod(&job, &options), worker_pod(&job, 0, &options), worker_pod(&job, 2, &options)];
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap();
            for c in pod.spec.unwrap().containers {
                let args = c.args.unwrap_or_default().join(" ");
                let literal_env: Vec<String> = c
                    .env
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|e| {
                        let from = e.value_from.as_ref();
                        let allowed = from.is_some_and(|f| f.secret_key_ref.is_some() || f.field_ref.is_some());
                        // Literal values: only the non-secret storage settings.
                        assert!(
                            allowed
                                || ["AWS_ENDPOINT_URL", "AWS_REGION", "LINEA_S3_PATH_STYLE"].contains(&e.name.as_str()),
                            "{name}: {} is a literal value",
                            e.name
                        );
                        e.value
                    })
                    .collect();
                for text in [args, literal_env.join(" ")] {
                    assert!(!text.contains(&operator_key), "{name}: the operator key in {text}");
                    for value in &values {
                        // Every line of the Secret's values (a PEM's lines one by one).
                        for line in value.lines().filter(|l| l.len() >= 16 && !l.starts_with("-----")) {
                            assert!(!text.contains(line), "{name}: a Secret value in {text}");
                        }
                    }
                }
            }
        }
    }

    fn args_of(job: &TrainingJob) -> String {
        args(&master_pod(job, &options())).join(" ")
    }

    fn job_with_defaults_of_cocoa() -> TrainingJob {
        job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {cocoa: {}}\n")
    }

    #[test]
    fn platform_settings_reach_every_pod() {
        let job = job(&format!(
            "{SPEC}serviceAccountName: trainer\npriorityClassName: batch\nschedulerName: volcano\n\
             podMetadata: {{labels: {{team: ads, linea.io/role: spoofed}}, annotations: {{cost: x}}}}\n"
        ));
        for pod in [master_pod(&job, &options()), worker_pod(&job, 0, &options())] {
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.service_account_name.as_deref(), Some("trainer"));
            assert_eq!(spec.automount_service_account_token, Some(true), "IRSA needs the token");
            assert_eq!(spec.priority_class_name.as_deref(), Some("batch"));
            assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
            let labels = pod.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["team"], "ads");
            assert_ne!(labels[LABEL_ROLE], "spoofed", "the operator's labels win");
            assert_eq!(pod.metadata.annotations.as_ref().unwrap()["cost"], "x");
            let c = &spec.containers[0];
            assert_eq!(c.termination_message_policy.as_deref(), Some("FallbackToLogsOnError"));
            let volumes = spec.volumes.as_ref().unwrap();
            let tmp = volumes.iter().find(|v| v.name == "tmp").unwrap();
            assert_eq!(tmp.empty_dir.as_ref().unwrap().size_limit, Some(Quantity("1Gi".into())));
            let token = volumes.iter().find(|v| v.name == "job-secret").unwrap();
            assert_eq!(token.secret.as_ref().unwrap().default_mode, Some(0o400));
        }
        let plain = master_pod(&self::job(SPEC), &options());
        let spec = plain.spec.unwrap();
        assert_eq!((spec.service_account_name, spec.automount_service_account_token), (None, Some(false)));
    }

    #[test]
    fn build_makes_every_object_once_and_ownership_is_by_uid() {
        let job = job(SPEC);
        let children = build(&job, &options());
        assert!(children.secret.is_some());
        let names: Vec<String> = children.workers.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["ads-worker-0", "ads-worker-1", "ads-worker-2"]);
        assert!(owned_by(&children.master.metadata, &job));
        let mut other = job.clone();
        other.metadata.uid = Some("another-uid".into());
        assert!(!owned_by(&children.master.metadata, &other), "same name, another job: not ours");
        assert!(!owned_by(&ObjectMeta::default(), &job));
    }
}
