//! The master and worker Pods: the one linea image as non-root with a read-only root
//! filesystem, the job Secret mounted per role, storage settings from the environment.

use super::*;

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

/// The flags that give a master or worker the job's secret and certificates, both from the
/// job Secret mounted at [`SECRET_DIR`] (the worker's are `linea worker`'s `MasterAddress`
/// group, the master's its own).
fn job_credentials() -> [String; 4] {
    ["--secret-file".into(), format!("{SECRET_DIR}/{TOKEN_KEY}"), "--tls-dir".into(), SECRET_DIR.into()]
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
    ];
    args.extend(job_credentials());
    args.extend(["--metrics-listen".into(), format!("0.0.0.0:{MASTER_METRICS_PORT}")]);
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
        // model depends on the replica count (not on which pods serve the slots). The
        // allreduce is the master's alone (`linea train` has no such flag): the same bits
        // either way.
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
                Some(("--gap-tolerance", p.gap_tolerance.to_string())),
                lbfgs.then(|| ("--lbfgs-precondition", p.lbfgs_precondition.as_str().to_string())),
                (!lbfgs).then(|| ("--batch-solver", p.batch_solver.as_str().to_string())),
                Some(("--sgd-rate", p.sgd_rate.to_string())),
                Some(("--seed", p.seed.to_string())),
                Some(("--slots", slots(job).to_string())),
                Some(("--allreduce", p.allreduce.as_str().to_string())),
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
            ("--gap-tolerance", p.gap_tolerance.to_string()),
            ("--sgd-rate", p.sgd_rate.to_string()),
            ("--seed", p.seed.to_string()),
            ("--slots", slots(job).to_string()),
            ("--allreduce", p.allreduce.as_str().to_string()),
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
        "--drain-timeout".into(),
        WORKER_DRAIN_TIMEOUT_SECONDS.to_string(),
    ];
    args.extend(job_credentials());
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
