//! The rules a TrainingJob spec must satisfy, once as messages shared with the CRD's CEL rules
//! and once as a pure check the operator can run on objects that never met those rules (an
//! older CRD, a test fixture, a spec built in code).
//!
//! The API server is the first line: the schema bounds and `x-kubernetes-validations` in the
//! CRD refuse a bad manifest at `kubectl apply`. [`TrainingJobSpec::validate`] says the same
//! with the same messages, so a test can check that both agree on every fixture.

use crate::algorithm::{Algorithm, Loss};
use crate::spec::{TrainingJob, TrainingJobSpec};
use crate::workers::MAX_WORKERS;

/// CEL message: `workers.minReplicas` above `workers.maxReplicas`.
pub const MSG_MIN_GT_MAX: &str = "workers.minReplicas must be less than or equal to workers.maxReplicas";
/// CEL message: `workers.replicas` below `workers.minReplicas`.
pub const MSG_REPLICAS_LT_MIN: &str = "workers.replicas must be greater than or equal to workers.minReplicas";
/// CEL message: `workers.replicas` above `workers.maxReplicas`.
pub const MSG_REPLICAS_GT_MAX: &str = "workers.replicas must be less than or equal to workers.maxReplicas";
/// CEL message: zero or several algorithm blocks.
pub const MSG_EXACTLY_ONE_ALGORITHM: &str =
    "exactly one of algorithm.scd, algorithm.cocoa, algorithm.hybrid, algorithm.ipm must be set";
/// CEL message: an algorithm this version cannot run.
pub const MSG_HYBRID_HINGE: &str =
    "hybrid.loss hinge is not supported: L-BFGS needs a differentiable loss (use cocoa, or ipm's averaged perceptron)";
/// CEL message: the algorithm changed after creation.
pub const MSG_ALGORITHM_IMMUTABLE: &str =
    "algorithm is immutable: create a new TrainingJob to change the algorithm or its parameters";
/// CEL message: datasetUri is not an s3:// URI with a bucket.
pub const MSG_DATASET_URI_SCHEME: &str =
    "datasetUri must be s3://bucket/prefix: pods have no shared local files (file:// works with linea train only)";
/// CEL message: datasetUri changed after creation.
pub const MSG_DATASET_URI_IMMUTABLE: &str = "datasetUri is immutable: create a new TrainingJob to train on other data";
/// CEL message: modelUri is not an s3:// URI with a bucket.
pub const MSG_MODEL_URI_SCHEME: &str =
    "modelUri must be s3://bucket/key: pods have no shared local files (file:// works with linea train only)";
/// CEL message: modelUri changed after creation.
pub const MSG_MODEL_URI_IMMUTABLE: &str = "modelUri is immutable: create a new TrainingJob to write elsewhere";
/// CEL message: the model would overwrite the data.
pub const MSG_SAME_URI: &str = "modelUri must differ from datasetUri: the model would overwrite the data";
/// CEL message: elastic scale-in asked for with an algorithm other than CoCoA.
pub const MSG_ELASTIC_NEEDS_COCOA: &str = "elastic.enabled needs algorithm.cocoa: elastic scale-in merges CoCoA's slots; \
     SCD gives the same model for any worker count and has nothing to scale in";
/// CEL message: elastic scale-in asked for with accelerated CoCoA.
pub const MSG_ELASTIC_NOT_ACCELERATED: &str = "elastic.enabled cannot be combined with algorithm.cocoa.accelerate: \
     the scale-in policy would read the accelerated duality-gap curve's flat stretches as knees";
/// CEL message: the elastic floor above the workers the job starts with.
pub const MSG_ELASTIC_MIN_ABOVE_REPLICAS: &str = "elastic.minReplicas must be less than or equal to workers.replicas: \
     an elastic job starts with workers.replicas slots and scales in towards elastic.minReplicas";
/// CEL message: the elastic threshold d out of (1, 1000].
pub const MSG_ELASTIC_THRESHOLD: &str = "elastic.threshold must be greater than 1 and at most 1000: scale in when the short-term rate times it is below the long-term rate";
/// CEL message: the elastic policy changed after creation.
pub const MSG_ELASTIC_IMMUTABLE: &str = "elastic is immutable: a restarted master replays its scale-in decisions under \
     the settings it started with; create a new TrainingJob to change them";
/// CEL message: CoCoA with a non-positive L2.
pub const MSG_COCOA_L2_POSITIVE: &str = "cocoa.l2 must be greater than 0: SDCA needs a strongly convex regularizer";
/// CEL message: SCD with the hinge loss.
pub const MSG_SCD_HINGE: &str =
    "scd.loss hinge is not supported: SCD needs a differentiable loss (use cocoa for hinge)";
/// CEL message: a name whose objects (`<name>-master` Service, labels) would be invalid.
pub const MSG_NAME: &str = "metadata.name must be at most 56 characters of lowercase letters, digits and '-', \
     starting with a letter and ending with a letter or digit: the job's Service <name>-master must be a DNS-1035 label";
/// CEL message: a pod-wide field changed after creation.
pub const MSG_POD_FIELDS_IMMUTABLE: &str = "image, imagePullPolicy, jobSecretName, storage, serviceAccountName, \
     priorityClassName and schedulerName are immutable (a job's pods must all run alike): create a new TrainingJob";

/// CEL message: rawData.uri is not an s3:// object.
pub const MSG_RAW_DATA_URI_SCHEME: &str =
    "rawData.uri must be s3://bucket/key: the prepare pod reads the raw input from S3";
/// CEL message: rawData.uri names the grid or the model.
pub const MSG_RAW_DATA_SAME_URI: &str =
    "rawData.uri must differ from datasetUri and modelUri: the grid and the model would overwrite the raw input";
/// CEL message: rawData added, removed or changed after creation.
pub const MSG_RAW_DATA_IMMUTABLE: &str = "rawData is immutable: create a new TrainingJob to train on other raw input";

/// A spec that breaks one or more rules; each problem is one readable sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSpec {
    /// What is wrong, one entry per broken rule.
    pub problems: Vec<String>,
}

impl std::fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid TrainingJob spec: {}", self.problems.join("; "))
    }
}

impl std::error::Error for InvalidSpec {}

/// Collects broken rules.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn check(&mut self, ok: bool, message: impl Into<String>) {
        if !ok {
            self.0.push(message.into());
        }
    }

    /// `value >= min`, false for NaN.
    fn at_least_f64(&mut self, field: &str, value: f64, min: f64) {
        self.check(value >= min && value.is_finite(), format!("{field} must be a finite number >= {min}, got {value}"));
    }

    fn at_least(&mut self, field: &str, value: i64, min: i64) {
        self.check(value >= min, format!("{field} must be >= {min}, got {value}"));
    }

    fn at_most(&mut self, field: &str, value: i64, max: i64) {
        self.check(value <= max, format!("{field} must be <= {max}, got {value}"));
    }

    fn into_result(self) -> Result<(), InvalidSpec> {
        if self.0.is_empty() { Ok(()) } else { Err(InvalidSpec { problems: self.0 }) }
    }
}

/// Whether `uri` is `s3://bucket[/key]` with a valid bucket name, as the CEL rule
/// `^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$` says.
pub fn is_supported_uri(uri: &str) -> bool {
    let Some(rest) = uri.strip_prefix("s3://") else { return false };
    let bucket = rest.split('/').next().unwrap_or_default();
    let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| edge(c) || c == '.' || c == '-')
        && bucket.starts_with(edge)
        && bucket.ends_with(edge)
}

/// Whether `uri` is `s3://bucket/key` with a valid bucket name and a key, as the CEL rule
/// of `rawData.uri` says.
pub fn is_supported_object(uri: &str) -> bool {
    let key = uri.strip_prefix("s3://").and_then(|rest| rest.split_once('/')).map(|(_, key)| key);
    is_supported_uri(uri) && key.is_some_and(|k| !k.is_empty())
}

/// Whether `name` makes valid child names, as the CEL rule on `metadata.name` says: at most
/// 56 characters (`<name>-master` is a Service, a DNS-1035 label of at most 63) of
/// `[a-z0-9-]`, starting with a letter and ending with a letter or digit.
pub fn is_valid_job_name(name: &str) -> bool {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    (1..=56).contains(&name.len())
        && name.chars().all(ok)
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
}

/// Whether `value` is a Kubernetes resource quantity (`500m`, `2`, `1.5Gi`, `1e3`), which the
/// API server checks only when a pod is created.
pub fn is_quantity(value: &str) -> bool {
    let unsigned = value.strip_prefix(['+', '-']).unwrap_or(value);
    let digits_end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let suffix_ok = match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exponent => exponent
            .strip_prefix(['e', 'E'])
            .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
            .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())),
    };
    number_ok && suffix_ok
}

impl TrainingJob {
    /// [`TrainingJobSpec::validate`] and the rule on `metadata.name` (the name makes the
    /// child objects' names, which must be valid).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut p = Problems::default();
        p.check(is_valid_job_name(self.metadata.name.as_deref().unwrap_or_default()), MSG_NAME);
        if let Err(e) = self.spec.validate() {
            p.0.extend(e.problems);
        }
        p.into_result()
    }
}

impl TrainingJobSpec {
    /// Checks every rule the CRD enforces on creation (schema bounds and CEL rules), with the
    /// same messages for the CEL rules. Pure: the operator calls it before building anything
    /// and treats an error as permanent (wait for the spec to change).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut p = Problems::default();
        p.check(is_supported_uri(&self.dataset_uri), MSG_DATASET_URI_SCHEME);
        p.check(is_supported_uri(&self.model_uri), MSG_MODEL_URI_SCHEME);

        p.check(self.dataset_uri != self.model_uri, MSG_SAME_URI);
        if let Some(raw) = &self.raw_data {
            p.check(is_supported_object(&raw.uri), MSG_RAW_DATA_URI_SCHEME);
            p.check(raw.uri != self.dataset_uri && raw.uri != self.model_uri, MSG_RAW_DATA_SAME_URI);
            if let Some(rows) = raw.rows_per_shard {
                p.at_least("rawData.rowsPerShard", rows, 1);
                p.at_most("rawData.rowsPerShard", rows, u32::MAX.into());
            }
        }

        match &self.algorithm {
            Algorithm::Scd(a) => {
                p.check(a.loss != Loss::Hinge, MSG_SCD_HINGE);
                p.at_least_f64("algorithm.scd.l2", a.l2, 0.0);
                p.at_least_f64("algorithm.scd.l1", a.l1, 0.0);
                p.at_least("algorithm.scd.epochs", a.epochs.into(), 1);
                p.at_least_f64("algorithm.scd.tolerance", a.tolerance, 0.0);
            }
            Algorithm::Cocoa(a) => {
                p.check(a.l2 > 0.0 && a.l2.is_finite(), MSG_COCOA_L2_POSITIVE);
                p.at_least("algorithm.cocoa.localPasses", a.local_passes.into(), 1);
                p.at_least_f64("algorithm.cocoa.gapTolerance", a.gap_tolerance, 0.0);
                p.at_least("algorithm.cocoa.maxEpochs", a.max_epochs.into(), 1);
                p.at_least("algorithm.cocoa.seed", a.seed, 0);
            }
            Algorithm::Hybrid(a) => {
                p.check(a.loss != Loss::Hinge, MSG_HYBRID_HINGE);
                p.at_least_f64("algorithm.hybrid.l2", a.l2, 0.0);
                p.at_least("algorithm.hybrid.memory", a.memory.into(), 1);
                p.at_most("algorithm.hybrid.memory", a.memory.into(), 1000);
                p.at_least("algorithm.hybrid.maxEpochs", a.max_epochs.into(), 1);
                p.at_least_f64("algorithm.hybrid.tolerance", a.tolerance, 0.0);
                p.at_least_f64("algorithm.hybrid.gradientTolerance", a.gradient_tolerance, 0.0);
                p.at_least_f64("algorithm.hybrid.gapTolerance", a.gap_tolerance, 0.0);
                p.at_least("algorithm.hybrid.lbfgsPreconditionRefresh", a.lbfgs_precondition_refresh.into(), 0);
                p.at_most("algorithm.hybrid.lbfgsPreconditionRefresh", a.lbfgs_precondition_refresh.into(), 1_000_000);
                p.at_least("algorithm.hybrid.seed", a.seed, 0);
            }
            Algorithm::Ipm(a) => {
                p.at_least_f64("algorithm.ipm.l2", a.l2, 0.0);
                p.at_least("algorithm.ipm.maxEpochs", a.max_epochs.into(), 1);
                p.at_least_f64("algorithm.ipm.tolerance", a.tolerance, 0.0);
                p.at_least_f64("algorithm.ipm.gapTolerance", a.gap_tolerance, 0.0);
                p.at_least("algorithm.ipm.seed", a.seed, 0);
            }
        }

        let w = &self.workers;
        p.at_least("workers.replicas", w.replicas.into(), 1);
        p.at_most("workers.replicas", w.replicas.into(), MAX_WORKERS.into());
        p.at_least("workers.minReplicas", w.min_replicas.into(), 1);
        p.at_most("workers.minReplicas", w.min_replicas.into(), MAX_WORKERS.into());
        if let Some(max) = w.max_replicas {
            p.at_least("workers.maxReplicas", max.into(), 1);
            p.at_most("workers.maxReplicas", max.into(), MAX_WORKERS.into());
            p.check(w.min_replicas <= max, MSG_MIN_GT_MAX);
            p.check(w.replicas <= max, MSG_REPLICAS_GT_MAX);
        }
        p.check(w.min_replicas <= w.replicas, MSG_REPLICAS_LT_MIN);
        if let Some(threads) = w.threads {
            p.at_least("workers.threads", threads.into(), 1);
            p.at_most("workers.threads", threads.into(), 1024);
        }

        for (field, resources) in [("workers", &w.resources), ("master", &self.master.resources)] {
            let lists = resources.iter().flat_map(|r| [("requests", &r.requests), ("limits", &r.limits)]);
            for (list, quantities) in lists {
                for (name, quantity) in quantities.iter().flatten() {
                    p.check(
                        is_quantity(&quantity.0),
                        format!(
                            "{field}.resources.{list}.{name}: {:?} is not a quantity (e.g. 500m, 2, 4Gi)",
                            quantity.0
                        ),
                    );
                }
            }
        }

        let e = &self.elastic;
        if e.enabled {
            p.check(matches!(self.algorithm, Algorithm::Cocoa(_)), MSG_ELASTIC_NEEDS_COCOA);
            p.check(e.min_replicas <= w.replicas, MSG_ELASTIC_MIN_ABOVE_REPLICAS);
            p.check(!matches!(&self.algorithm, Algorithm::Cocoa(c) if c.accelerate), MSG_ELASTIC_NOT_ACCELERATED);
        }
        p.at_least("elastic.minReplicas", e.min_replicas.into(), 1);
        p.at_most("elastic.minReplicas", e.min_replicas.into(), MAX_WORKERS.into());
        p.at_least("elastic.factor", e.factor.into(), 2);
        p.at_most("elastic.factor", e.factor.into(), MAX_WORKERS.into());
        p.at_least("elastic.window", e.window.into(), 1);
        p.at_most("elastic.window", e.window.into(), 1000);
        p.check(e.threshold > 1.0 && e.threshold <= 1000.0, MSG_ELASTIC_THRESHOLD);
        p.at_least("elastic.startTimeoutSeconds", e.start_timeout_seconds.into(), 0);
        p.at_most("elastic.startTimeoutSeconds", e.start_timeout_seconds.into(), 604_800);

        let r = &self.run_policy;
        p.at_least("runPolicy.backoffLimit", r.backoff_limit.into(), 0);
        if let Some(d) = r.active_deadline_seconds {
            p.at_least("runPolicy.activeDeadlineSeconds", d, 1);
        }
        if let Some(ttl) = r.ttl_seconds_after_finished {
            p.at_least("runPolicy.ttlSecondsAfterFinished", ttl.into(), 0);
        }
        p.at_least("runPolicy.workerFailureLimit", r.worker_failure_limit.into(), 0);
        p.into_result()
    }

    /// Checks the transition rules of an update from `old` (immutable datasetUri, modelUri and
    /// algorithm) as well as [`validate`](Self::validate) on the new spec.
    pub fn validate_update(&self, old: &TrainingJobSpec) -> Result<(), InvalidSpec> {
        let mut p = Problems::default();
        if let Err(e) = self.validate() {
            p.0.extend(e.problems);
        }
        p.check(self.dataset_uri == old.dataset_uri, MSG_DATASET_URI_IMMUTABLE);
        p.check(self.model_uri == old.model_uri, MSG_MODEL_URI_IMMUTABLE);
        p.check(self.algorithm == old.algorithm, MSG_ALGORITHM_IMMUTABLE);
        p.check(self.raw_data == old.raw_data, MSG_RAW_DATA_IMMUTABLE);
        p.check(self.elastic == old.elastic, MSG_ELASTIC_IMMUTABLE);
        let pod_fields_kept = self.image == old.image
            && self.image_pull_policy == old.image_pull_policy
            && self.job_secret_name == old.job_secret_name
            && self.storage == old.storage
            && self.service_account_name == old.service_account_name
            && self.priority_class_name == old.priority_class_name
            && self.scheduler_name == old.scheduler_name;
        p.check(pod_fields_kept, MSG_POD_FIELDS_IMMUTABLE);
        p.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{CocoaParams, ScdParams};

    fn spec() -> TrainingJobSpec {
        serde_json::from_value(serde_json::json!({
            "datasetUri": "s3://bucket/grid",
            "modelUri": "s3://models/a",
        }))
        .unwrap()
    }

    #[test]
    fn uris() {
        assert!(is_supported_uri("s3://bucket"));
        assert!(is_supported_uri("s3://my.bucket-1/a/b"));
        for bad in
            ["", "file:///data", "file://", "s3://", "s3:///key", "s3://ab/x", "s3://Bucket/x", "http://x", "/data"]
        {
            assert!(!is_supported_uri(bad), "{bad}");
        }
    }

    #[test]
    fn names_that_make_valid_child_objects() {
        for good in ["a", "ads", "criteo-cocoa-2", &"a".repeat(56)] {
            assert!(is_valid_job_name(good), "{good}");
        }
        for bad in ["", "1ads", "-ads", "ads-", "Ads", "ads.v2", "ads_v2", &"a".repeat(57)] {
            assert!(!is_valid_job_name(bad), "{bad}");
        }
    }

    #[test]
    fn quantities_as_the_api_server_parses_them() {
        for good in ["1", "500m", "2.5", "4Gi", "1e3", "+1", ".5", "100M", "1E-2"] {
            assert!(is_quantity(good), "{good}");
        }
        for bad in ["", "lots", "4GB", "1..2", "Gi", ".", "1e", "1 Gi", "2gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn defaults_are_valid_and_what_cannot_run_is_not() {
        spec().validate().unwrap();
        let mut s = spec();
        s.algorithm = Algorithm::Cocoa(CocoaParams { loss: Loss::Hinge, ..CocoaParams::default() });
        s.validate().unwrap();
        s.elastic.enabled = true;
        s.validate().unwrap();
        let mut scd = s.clone();
        scd.algorithm = Algorithm::Scd(ScdParams::default());
        assert_eq!(scd.validate().unwrap_err().problems, [MSG_ELASTIC_NEEDS_COCOA]);
        let mut accelerated = s.clone();
        accelerated.algorithm = Algorithm::Cocoa(CocoaParams { accelerate: true, ..CocoaParams::default() });
        assert_eq!(accelerated.validate().unwrap_err().problems, [MSG_ELASTIC_NOT_ACCELERATED]);
        accelerated.elastic.enabled = false;
        accelerated.validate().unwrap();
        let mut s = spec();
        s.algorithm = Algorithm::Scd(ScdParams { loss: Loss::Hinge, ..ScdParams::default() });
        assert_eq!(s.validate().unwrap_err().problems, [MSG_SCD_HINGE]);
        let mut s = spec();
        s.model_uri = s.dataset_uri.clone();
        assert_eq!(s.validate().unwrap_err().problems, [MSG_SAME_URI]);
        let mut s = spec();
        s.workers.replicas = MAX_WORKERS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("workers.replicas must be <= 1000"));
    }

    #[test]
    fn raw_data_is_an_s3_object_apart_from_grid_and_model_and_is_fixed() {
        let raw = |uri: &str| {
            serde_json::from_value::<crate::RawData>(serde_json::json!({"uri": uri, "format": "libsvm"})).unwrap()
        };
        let mut s = spec();
        s.raw_data = Some(raw("s3://raw/a9a.libsvm"));
        s.validate().unwrap();
        for (uri, problem) in [
            ("s3://raw", MSG_RAW_DATA_URI_SCHEME),
            ("s3://raw/", MSG_RAW_DATA_URI_SCHEME),
            ("file:///a9a.libsvm", MSG_RAW_DATA_URI_SCHEME),
            ("s3://bucket/grid", MSG_RAW_DATA_SAME_URI),
            ("s3://models/a", MSG_RAW_DATA_SAME_URI),
        ] {
            let mut bad = spec();
            bad.raw_data = Some(raw(uri));
            assert_eq!(bad.validate().unwrap_err().problems, [problem], "{uri}");
        }
        let old = s.clone();
        let mut changed = s.clone();
        changed.raw_data = Some(raw("s3://raw/other.libsvm"));
        assert_eq!(changed.validate_update(&old).unwrap_err().problems, [MSG_RAW_DATA_IMMUTABLE]);
        assert_eq!(spec().validate_update(&old).unwrap_err().problems, [MSG_RAW_DATA_IMMUTABLE], "removed");
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        let mut s = spec();
        s.algorithm = Algorithm::Scd(ScdParams { l2: f64::NAN, tolerance: f64::INFINITY, ..ScdParams::default() });
        let err = s.validate().unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut s = spec();
        s.dataset_uri = "http://x".into();
        s.workers.replicas = 0;
        s.elastic.enabled = true; // with SCD, and its floor 1 above 0 replicas
        s.run_policy.backoff_limit = -1;
        let err = s.validate().unwrap_err();
        assert_eq!(err.problems.len(), 6, "{err}");
        assert!(err.to_string().starts_with("invalid TrainingJob spec: "));
    }

    #[test]
    fn elastic_settings_are_bounded_and_fixed() {
        let mut s = spec();
        s.algorithm = Algorithm::Cocoa(CocoaParams::default());
        s.elastic.enabled = true;
        s.workers.replicas = 8;
        s.elastic.min_replicas = 2;
        s.validate().unwrap();
        s.elastic.min_replicas = 9;
        assert_eq!(s.validate().unwrap_err().problems, [MSG_ELASTIC_MIN_ABOVE_REPLICAS]);
        s.elastic.min_replicas = 8;
        s.validate().unwrap();
        for (factor, window, threshold, problem) in [
            (1, 2, 1.25, "elastic.factor must be >= 2, got 1"),
            (4, 0, 1.25, "elastic.window must be >= 1, got 0"),
            (4, 2, 1.0, MSG_ELASTIC_THRESHOLD),
            (4, 2, f64::NAN, MSG_ELASTIC_THRESHOLD),
            (4, 2, 1e6, MSG_ELASTIC_THRESHOLD),
        ] {
            let mut bad = s.clone();
            (bad.elastic.factor, bad.elastic.window, bad.elastic.threshold) = (factor, window, threshold);
            assert_eq!(bad.validate().unwrap_err().problems, [problem], "{factor} {window} {threshold}");
        }
        let mut bad = s.clone();
        bad.elastic.start_timeout_seconds = -1;
        assert_eq!(bad.validate().unwrap_err().problems, ["elastic.startTimeoutSeconds must be >= 0, got -1"]);
        let old = s.clone();
        let mut scaled = s.clone();
        scaled.workers.replicas = 16;
        scaled.validate_update(&old).unwrap();
        let mut changed = s.clone();
        changed.elastic.factor = 2;
        assert_eq!(changed.validate_update(&old).unwrap_err().problems, [MSG_ELASTIC_IMMUTABLE]);
    }

    #[test]
    fn updates_may_change_workers_but_not_data_model_or_algorithm() {
        let old = spec();
        let mut new = spec();
        new.workers.replicas = 8;
        new.run_policy.backoff_limit = 10;
        new.validate_update(&old).unwrap();
        new.model_uri = "s3://models/b".into();
        let err = new.validate_update(&old).unwrap_err();
        assert_eq!(err.problems, vec![MSG_MODEL_URI_IMMUTABLE.to_string()]);
        let mut new = spec();
        new.image = Some("linea:other".into());
        assert_eq!(new.validate_update(&old).unwrap_err().problems, [MSG_POD_FIELDS_IMMUTABLE]);
    }
}
