//! The manifests in tests/fixtures/ against the Rust types, `TrainingJobSpec::validate` and an
//! in-process stand-in for the API server (schema + CEL rules of the generated CRD).
//!
//! Fixture headers (leading `#` lines) say what must happen:
//! `# expect: <substring of the API server's refusal>` (absent for valid fixtures),
//! `# expect-pruned: <...>` (the refusal when unknown fields are pruned, not refused),
//! `# serde: accepts|rejects` (default accepts), `# validate: <substring of validate's error>`.
//! Two YAML documents make an update: the first is the stored object, the second the write.

mod support;

use linea_crds::{TrainingJob, validation};
use serde_json::Value;
use support::{Fixture, apiserver_errors, crd_schema, fixtures};

/// (old, new) of a fixture: the last document is the write, the one before it (if any) the
/// stored object.
fn old_new(f: &Fixture) -> (Option<&Value>, &Value) {
    match f.documents.as_slice() {
        [new] => (None, new),
        [old, new] => (Some(old), new),
        _ => panic!("{}: expected one or two YAML documents", f.name),
    }
}

fn is_invalid(f: &Fixture) -> bool {
    f.name.starts_with("invalid-") || f.name.starts_with("update-invalid-")
}

fn parse(doc: &Value) -> Result<TrainingJob, serde_json::Error> {
    serde_json::from_value(doc.clone())
}

#[test]
fn fixtures_are_well_formed() {
    let all = fixtures();
    assert!(all.len() >= 10, "expected the fixture set, found {}", all.len());
    for f in &all {
        let (old, _) = old_new(f);
        assert_eq!(
            old.is_some(),
            f.name.starts_with("update-"),
            "{}: update-* fixtures have two documents, the others one",
            f.name
        );
        for doc in &f.documents {
            assert_eq!(doc["apiVersion"], "linea.io/v1alpha1", "{}", f.name);
            assert_eq!(doc["kind"], "TrainingJob", "{}", f.name);
            assert!(doc["metadata"]["name"].is_string(), "{}: metadata.name", f.name);
        }
        if is_invalid(f) {
            assert!(
                f.text.starts_with("# expect: "),
                "{}: an invalid fixture starts with `# expect: <message substring>`",
                f.name
            );
            assert!(
                !f.serde_accepts || f.validate.is_some(),
                "{}: serde accepts it, so say what `validate` reports with `# validate:`",
                f.name
            );
        } else {
            assert!(f.expect.is_none(), "{}: a valid fixture has no `# expect:`", f.name);
            assert!(f.serde_accepts, "{}: a valid fixture must deserialize", f.name);
        }
    }
}

#[test]
fn serde_accepts_or_rejects_as_the_header_says() {
    for f in fixtures() {
        let (old, new) = old_new(&f);
        if let Some(old) = old {
            parse(old).unwrap_or_else(|e| panic!("{}: the stored object must parse: {e}", f.name));
        }
        match (parse(new), f.serde_accepts) {
            (Ok(_), true) | (Err(_), false) => {}
            (Ok(job), false) => panic!("{}: serde should reject it, got {job:?}", f.name),
            (Err(e), true) => panic!("{}: serde should accept it: {e}", f.name),
        }
    }
}

#[test]
fn valid_fixtures_are_accepted_by_validate_and_the_api_server() {
    for f in fixtures().iter().filter(|f| !is_invalid(f)) {
        let (old, new) = old_new(f);
        let errors = apiserver_errors(new, old, true);
        assert!(errors.is_empty(), "{}: refused: {errors:#?}", f.name);

        let job = parse(new).unwrap();
        match old {
            Some(old) => job.spec.validate_update(&parse(old).unwrap().spec),
            None => job.validate(),
        }
        .unwrap_or_else(|e| panic!("{}: {e}", f.name));

        // What the operator writes back (serialized Rust types) is valid too.
        let written = serde_json::to_value(&job).unwrap();
        let errors = apiserver_errors(&written, None, true);
        assert!(errors.is_empty(), "{}: round trip refused: {errors:#?}", f.name);
    }
}

#[test]
fn api_server_defaults_agree_with_serde_defaults() {
    // The server fills schema defaults before the operator reads the object; serde fills its
    // own when a field is missing. Both must give the same TrainingJob.
    let schema = crd_schema();
    for f in fixtures().iter().filter(|f| f.serde_accepts) {
        for doc in &f.documents {
            let raw: TrainingJob = parse(doc).unwrap();
            let defaulted = kube::core::cel::apply_defaults(&schema, doc);
            let served: TrainingJob =
                parse(&defaulted).unwrap_or_else(|e| panic!("{}: defaulted object does not parse: {e}", f.name));
            assert_eq!(raw, served, "{}: schema defaults differ from serde defaults", f.name);
        }
    }
}

#[test]
fn invalid_fixtures_are_refused_with_their_message() {
    for f in fixtures().iter().filter(|f| is_invalid(f)) {
        let (old, new) = old_new(f);
        let expect = f.expect.as_deref().unwrap();
        let errors = apiserver_errors(new, old, true);
        assert!(
            errors.iter().any(|e| e.contains(expect)),
            "{}: expected a refusal containing {expect:?}, got {errors:#?}",
            f.name
        );
        if let Some(pruned) = &f.expect_pruned {
            let errors = apiserver_errors(new, old, false);
            assert!(
                errors.iter().any(|e| e.contains(pruned.as_str())),
                "{}: with pruning, expected {pruned:?}, got {errors:#?}",
                f.name
            );
        }
    }
}

#[test]
fn validate_reports_what_the_api_server_refuses() {
    for f in fixtures().iter().filter(|f| is_invalid(f) && f.serde_accepts) {
        let (old, new) = old_new(f);
        let job = parse(new).unwrap();
        let result = match old {
            Some(old) => job.spec.validate_update(&parse(old).unwrap().spec),
            None => job.validate(),
        };
        let err = result.expect_err(&format!("{}: validate should refuse it", f.name));
        let want = f.validate.as_deref().unwrap();
        assert!(err.to_string().contains(want), "{}: expected validate to say {want:?}, got: {err}", f.name);
    }
}

#[test]
fn every_cel_message_is_exercised_by_a_fixture() {
    let expects: Vec<String> = fixtures().into_iter().flat_map(|f| [f.expect, f.expect_pruned]).flatten().collect();
    for message in [
        validation::MSG_MIN_GT_MAX,
        validation::MSG_REPLICAS_LT_MIN,
        validation::MSG_REPLICAS_GT_MAX,
        validation::MSG_EXACTLY_ONE_ALGORITHM,
        validation::MSG_ALGORITHM_IMMUTABLE,
        validation::MSG_DATASET_URI_SCHEME,
        validation::MSG_DATASET_URI_IMMUTABLE,
        validation::MSG_MODEL_URI_IMMUTABLE,
        validation::MSG_HYBRID_HINGE,
        validation::MSG_ELASTIC_NEEDS_COCOA,
        validation::MSG_ELASTIC_NOT_ACCELERATED,
        validation::MSG_ELASTIC_MIN_ABOVE_REPLICAS,
        validation::MSG_ELASTIC_THRESHOLD,
        validation::MSG_ELASTIC_IMMUTABLE,
        validation::MSG_COCOA_L2_POSITIVE,
        validation::MSG_SCD_HINGE,
        validation::MSG_SAME_URI,
        validation::MSG_MODEL_URI_SCHEME,
        validation::MSG_NAME,
        validation::MSG_POD_FIELDS_IMMUTABLE,
    ] {
        assert!(expects.iter().any(|e| message.contains(e.as_str())), "no fixture expects {message:?}");
    }
}

#[test]
fn full_fixture_fields_land_where_expected() {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use linea_crds::{Algorithm, CleanPodPolicy, Loss, PullPolicy};

    let f = fixtures().into_iter().find(|f| f.name == "valid-full.yaml").unwrap();
    let job = parse(&f.documents[0]).unwrap();
    let spec = &job.spec;
    assert_eq!(spec.algorithm_name(), "cocoa");
    let Algorithm::Cocoa(cocoa) = &spec.algorithm else { panic!("cocoa expected") };
    assert_eq!(cocoa.loss, Loss::Hinge);
    assert_eq!(cocoa.l2, 1e-4);
    assert_eq!((cocoa.local_passes, cocoa.max_epochs, cocoa.seed), (2, 50, 7));
    assert!(cocoa.accelerate);
    assert_eq!(cocoa.gap_tolerance, 1e-5);
    assert!(!spec.elastic.enabled);
    assert_eq!(spec.service_account_name.as_deref(), Some("linea-training"));
    assert_eq!(spec.priority_class_name.as_deref(), Some("batch-low"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
    assert_eq!(spec.pod_metadata.labels["kueue.x-k8s.io/queue-name"], "training");
    assert_eq!(spec.pod_metadata.annotations["cost-center"], "ads");
    assert_eq!(spec.run_policy.worker_failure_limit, 20);
    let storage = spec.storage.as_ref().unwrap();
    assert_eq!(storage.endpoint.as_deref(), Some("http://minio.storage.svc:9000"));
    assert!(storage.force_path_style);
    assert_eq!(storage.credentials_secret_name.as_deref(), Some("minio-credentials"));
    let w = &spec.workers;
    assert_eq!((w.replicas, w.min_replicas, w.max_replicas), (16, 1, Some(32)));
    assert!(w.preemptible);
    assert_eq!(w.threads, Some(4));
    assert_eq!(w.tolerations.len(), 1);
    assert_eq!(w.node_selector["node.kubernetes.io/instance-type"], "c6i.xlarge");
    let requests = w.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["memory"], Quantity("8Gi".into()));
    // An integer quantity (`cpu: 2`) is legal YAML for an int-or-string field.
    let master = spec.master.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(master["cpu"], Quantity("2".into()));
    assert_eq!(spec.run_policy.backoff_limit, 5);
    assert_eq!(spec.run_policy.active_deadline_seconds, Some(86_400));
    assert_eq!(spec.run_policy.ttl_seconds_after_finished, Some(3_600));
    assert_eq!(spec.run_policy.clean_pod_policy, CleanPodPolicy::All);
    assert_eq!(spec.image.as_deref(), Some("ghcr.io/linea/linea:0.1.0"));
    assert_eq!(spec.image_pull_policy, Some(PullPolicy::IfNotPresent));
    assert_eq!(spec.job_secret_name.as_deref(), Some("criteo-cocoa-token"));
}

#[test]
fn minimal_fixture_gets_the_documented_defaults() {
    use linea_crds::{Algorithm, CleanPodPolicy, ScdParams};

    let f = fixtures().into_iter().find(|f| f.name == "valid-elastic.yaml").unwrap();
    let elastic = parse(&f.documents[0]).unwrap().spec.elastic;
    assert!(elastic.enabled);
    assert_eq!((elastic.min_replicas, elastic.factor, elastic.window), (2, 4, 2));
    assert_eq!((elastic.threshold, elastic.clock), (1.25, linea_crds::ElasticClock::Epochs));

    let f = fixtures().into_iter().find(|f| f.name == "valid-minimal.yaml").unwrap();
    let spec = parse(&f.documents[0]).unwrap().spec;
    assert_eq!(spec.algorithm, Algorithm::Scd(ScdParams::default()));
    assert_eq!(spec.algorithm_name(), "scd");
    assert_eq!((spec.workers.replicas, spec.workers.min_replicas, spec.workers.max_replicas), (1, 1, None));
    assert!(!spec.workers.preemptible);
    assert_eq!(spec.elastic, linea_crds::ElasticPolicy::default(), "off, with Chicle's N=2, d=1.25, m=4");
    assert_eq!(spec.run_policy.backoff_limit, 3);
    assert_eq!(spec.run_policy.worker_failure_limit, 10);
    assert_eq!(spec.run_policy.clean_pod_policy, CleanPodPolicy::Running);
    assert!(spec.storage.is_none() && spec.image.is_none() && spec.job_secret_name.is_none());
}

#[test]
fn the_documented_example_is_accepted() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/trainingjob.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let doc = serde_json::to_value(yaml).unwrap();
    let errors = apiserver_errors(&doc, None, true);
    assert!(errors.is_empty(), "docs/examples/trainingjob.yaml refused: {errors:#?}");
    parse(&doc).unwrap().validate().unwrap();
}
