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
        serde_yaml::from_str(include_str!("../../../charts/linea/values.yaml")).expect("the chart's values");
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
    assert!(spec.tolerations.as_ref().unwrap().iter().any(|t| t.key.as_deref() == Some("cloud.google.com/gke-spot")));
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
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider).build().unwrap();
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
    let ipm =
        job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {ipm: {loss: hinge, mixing: examples}}\n");
    let args = self::args(&master_pod(&ipm, &options()));
    let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
    assert_eq!(after("--algorithm"), Some("ipm"));
    assert_eq!(after("--loss"), Some("hinge"));
    assert_eq!(after("--mixing"), Some("examples"));
    assert_eq!(after("--memory"), None, "memory is L-BFGS's alone (linea refuses it for ipm)");
    assert_eq!(after("--slots"), Some("1"));
}

/// The `linea master` flag of each field of the hybrid and ipm blocks (camelCase, as the API
/// server stores them).
const ALGORITHM_FLAGS: [(&str, &str); 14] = [
    ("loss", "--loss"),
    ("l2", "--l2"),
    ("memory", "--memory"),
    ("maxEpochs", "--epochs"),
    ("tolerance", "--tolerance"),
    ("gradientTolerance", "--gradient-tolerance"),
    ("gapTolerance", "--gap-tolerance"),
    ("batchSolver", "--batch-solver"),
    ("lbfgsPrecondition", "--lbfgs-precondition"),
    ("lbfgsPreconditionRefresh", "--lbfgs-precondition-refresh"),
    ("sgdRate", "--sgd-rate"),
    ("seed", "--seed"),
    ("allreduce", "--allreduce"),
    ("mixing", "--mixing"),
];

/// Every field of the hybrid and ipm blocks reaches the master as its flag with the job's
/// value, or is left out where `linea master` refuses it (said per case). A field added to
/// a block without its flag fails here: the block is read back through serde, so the test
/// sees every field the CRD has, defaults included.
#[test]
fn every_field_of_the_hybrid_and_ipm_blocks_reaches_the_master() {
    let cases: [(&str, &[&str]); 3] = [
        (
            "hybrid: {loss: squared, l2: 0.5, memory: 7, maxEpochs: 40, tolerance: 1e-7, gradientTolerance: 1e-8, \
             gapTolerance: 1e-5, lbfgsPrecondition: scaled, lbfgsPreconditionRefresh: 3, sgdRate: 0.25, seed: 9, allreduce: tree}",
            // L-BFGS is linea's default batch solver; `--batch-solver` is passed for newton.
            &["batchSolver"],
        ),
        (
            "hybrid: {batchSolver: newton, l2: 2, maxEpochs: 12, tolerance: 1e-5, gradientTolerance: 1e-6, \
             sgdRate: 0.1, seed: 4}",
            &["memory", "lbfgsPrecondition", "lbfgsPreconditionRefresh"],
        ),
        (
            "ipm: {loss: hinge, l2: 0.125, mixing: examples, maxEpochs: 5, tolerance: 1e-3, gapTolerance: 0, \
             sgdRate: 0.75, seed: 2, allreduce: tree}",
            &[],
        ),
    ];
    for (block, left_out) in cases {
        let job = job(&format!("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {{{block}}}\n"));
        let args = self::args(&master_pod(&job, &options()));
        let after = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].as_str());
        let name = job.spec.algorithm.name();
        assert_eq!(after("--algorithm"), Some(name));
        let stored = serde_json::to_value(&job.spec.algorithm).unwrap();
        for (field, value) in stored[name].as_object().unwrap() {
            let flag = ALGORITHM_FLAGS.iter().find(|(f, _)| f == field).map(|(_, flag)| *flag);
            let flag = flag.unwrap_or_else(|| panic!("{name}.{field} has no flag of linea master"));
            if left_out.contains(&field.as_str()) {
                assert_eq!(after(flag), None, "{name}.{field}: {flag} is refused in this case ({block})");
                continue;
            }
            let passed = after(flag).unwrap_or_else(|| panic!("{name}.{field} is not passed as {flag}: {args:?}"));
            match value {
                serde_json::Value::Number(n) => {
                    assert_eq!(passed.parse::<f64>().ok(), n.as_f64(), "{name}.{field} as {flag}")
                }
                other => assert_eq!(Some(passed), other.as_str(), "{name}.{field} as {flag}"),
            }
        }
    }
    let ranges = job("datasetUri: s3://data/g\nmodelUri: s3://models/x\nalgorithm: {ipm: {}}\n");
    let args = self::args(&master_pod(&ranges, &options()));
    assert!(args.windows(2).any(|w| w == ["--allreduce", "ranges"]), "linea's default, said: {args:?}");
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
    let job = job(&format!("{SPEC}master: {{resources: {{requests: {{cpu: '6'}}}}}}\n").replace(
        "workers: {replicas: 3, preemptible: true, threads: 4}",
        "workers: {replicas: 3, threads: 4, resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}}",
    ));
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
    let helpers = include_str!("../../../charts/linea/templates/_helpers.tpl");
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
                        allowed || ["AWS_ENDPOINT_URL", "AWS_REGION", "LINEA_S3_PATH_STYLE"].contains(&e.name.as_str()),
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
