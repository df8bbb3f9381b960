//! The rules a TrainingJob spec must satisfy, once as messages shared with the CRD's CEL rules
//! and once as a pure check the operator can run on objects that never met those rules (an
//! older CRD, a test fixture, a spec built in code).
//!
//! The API server is the first line: the schema bounds and `x-kubernetes-validations` in the
//! CRD refuse a bad manifest at `kubectl apply`. [`TrainingJobSpec::validate`] says the same
//! with the same messages, so a test can check that both agree on every fixture.

use crate::algorithm::Algorithm;
use crate::spec::TrainingJobSpec;

/// CEL message: `workers.minReplicas` above `workers.maxReplicas`.
pub const MSG_MIN_GT_MAX: &str = "workers.minReplicas must be less than or equal to workers.maxReplicas";
/// CEL message: `workers.replicas` below `workers.minReplicas`.
pub const MSG_REPLICAS_LT_MIN: &str = "workers.replicas must be greater than or equal to workers.minReplicas";
/// CEL message: `workers.replicas` above `workers.maxReplicas`.
pub const MSG_REPLICAS_GT_MAX: &str = "workers.replicas must be less than or equal to workers.maxReplicas";
/// CEL message: zero or several algorithm blocks.
pub const MSG_EXACTLY_ONE_ALGORITHM: &str =
    "exactly one of algorithm.scd, algorithm.cocoa, algorithm.hybrid, algorithm.ipm must be set";
/// CEL message: the algorithm changed after creation.
pub const MSG_ALGORITHM_IMMUTABLE: &str =
    "algorithm is immutable: create a new TrainingJob to change the algorithm or its parameters";
/// CEL message: datasetUri is not file:// or s3://.
pub const MSG_DATASET_URI_SCHEME: &str = "datasetUri must be a file:// or s3:// URI";
/// CEL message: datasetUri changed after creation.
pub const MSG_DATASET_URI_IMMUTABLE: &str = "datasetUri is immutable: create a new TrainingJob to train on other data";
/// CEL message: modelUri is not file:// or s3://.
pub const MSG_MODEL_URI_SCHEME: &str = "modelUri must be a file:// or s3:// URI";
/// CEL message: modelUri changed after creation.
pub const MSG_MODEL_URI_IMMUTABLE: &str = "modelUri is immutable: create a new TrainingJob to write elsewhere";
/// CEL message: elastic scale-in asked for an algorithm other than CoCoA.
pub const MSG_ELASTIC_NEEDS_COCOA: &str =
    "elastic.enabled requires algorithm.cocoa: the scale-in policy follows CoCoA's duality gap";
/// CEL message: CoCoA with a non-positive L2.
pub const MSG_COCOA_L2_POSITIVE: &str = "cocoa.l2 must be greater than 0: SDCA needs a strongly convex regularizer";
/// CEL message: IPM with a non-positive learning rate.
pub const MSG_IPM_LEARNING_RATE_POSITIVE: &str = "ipm.learningRate must be greater than 0";

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

/// Whether `uri` is a `file://` or `s3://` URI with something after the scheme, as the CEL
/// rule `self.matches('^(file|s3)://.+$')` says.
pub fn is_supported_uri(uri: &str) -> bool {
    ["file://", "s3://"].iter().any(|scheme| uri.strip_prefix(scheme).is_some_and(|rest| !rest.is_empty()))
}

impl TrainingJobSpec {
    /// Checks every rule the CRD enforces on creation (schema bounds and CEL rules), with the
    /// same messages for the CEL rules. Pure: the operator calls it before building anything
    /// and treats an error as permanent (wait for the spec to change).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut p = Problems::default();
        p.check(is_supported_uri(&self.dataset_uri), MSG_DATASET_URI_SCHEME);
        p.check(is_supported_uri(&self.model_uri), MSG_MODEL_URI_SCHEME);

        match &self.algorithm {
            Algorithm::Scd(a) => {
                p.at_least_f64("algorithm.scd.l2", a.l2, 0.0);
                p.at_least_f64("algorithm.scd.l1", a.l1, 0.0);
                p.at_least("algorithm.scd.epochs", a.epochs.into(), 1);
                p.at_least_f64("algorithm.scd.tolerance", a.tolerance, 0.0);
            }
            Algorithm::Cocoa(a) => {
                p.check(a.l2 > 0.0 && a.l2.is_finite(), MSG_COCOA_L2_POSITIVE);
                p.at_least("algorithm.cocoa.epochs", a.epochs.into(), 1);
                p.at_least_f64("algorithm.cocoa.dualityGapTolerance", a.duality_gap_tolerance, 0.0);
                if let Some(h) = a.local_iterations {
                    p.at_least("algorithm.cocoa.localIterations", h, 1);
                }
            }
            Algorithm::Hybrid(a) => {
                p.at_least_f64("algorithm.hybrid.l2", a.l2, 0.0);
                p.at_least("algorithm.hybrid.sgdPasses", a.sgd_passes.into(), 0);
                p.at_least("algorithm.hybrid.lbfgsMemory", a.lbfgs_memory.into(), 1);
                p.at_most("algorithm.hybrid.lbfgsMemory", a.lbfgs_memory.into(), 100);
                p.at_least("algorithm.hybrid.lbfgsIterations", a.lbfgs_iterations.into(), 1);
            }
            Algorithm::Ipm(a) => {
                p.at_least_f64("algorithm.ipm.l2", a.l2, 0.0);
                p.at_least("algorithm.ipm.epochs", a.epochs.into(), 1);
                p.check(a.learning_rate > 0.0 && a.learning_rate.is_finite(), MSG_IPM_LEARNING_RATE_POSITIVE);
            }
        }

        let w = &self.workers;
        p.at_least("workers.replicas", w.replicas.into(), 1);
        p.at_least("workers.minReplicas", w.min_replicas.into(), 1);
        if let Some(max) = w.max_replicas {
            p.at_least("workers.maxReplicas", max.into(), 1);
            p.check(w.min_replicas <= max, MSG_MIN_GT_MAX);
            p.check(w.replicas <= max, MSG_REPLICAS_GT_MAX);
        }
        p.check(w.min_replicas <= w.replicas, MSG_REPLICAS_LT_MIN);
        if let Some(threads) = w.threads {
            p.at_least("workers.threads", threads.into(), 1);
            p.at_most("workers.threads", threads.into(), 1024);
        }

        let e = &self.elastic;
        p.at_least("elastic.scaleInFactor", e.scale_in_factor.into(), 2);
        p.at_most("elastic.scaleInFactor", e.scale_in_factor.into(), 64);
        p.at_least_f64("elastic.slopeRatio", e.slope_ratio, 1.0);
        p.at_least("elastic.windowEpochs", e.window_epochs.into(), 1);
        p.check(!e.enabled || self.algorithm.supports_elastic(), MSG_ELASTIC_NEEDS_COCOA);

        let r = &self.run_policy;
        p.at_least("runPolicy.backoffLimit", r.backoff_limit.into(), 0);
        if let Some(d) = r.active_deadline_seconds {
            p.at_least("runPolicy.activeDeadlineSeconds", d, 1);
        }
        if let Some(ttl) = r.ttl_seconds_after_finished {
            p.at_least("runPolicy.ttlSecondsAfterFinished", ttl.into(), 0);
        }
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
            "modelUri": "file:///models/a",
        }))
        .unwrap()
    }

    #[test]
    fn uris() {
        assert!(is_supported_uri("file:///data"));
        assert!(is_supported_uri("s3://bucket"));
        for bad in ["", "file://", "s3://", "http://x", "S3://bucket", "/data"] {
            assert!(!is_supported_uri(bad), "{bad}");
        }
    }

    #[test]
    fn defaults_are_valid() {
        spec().validate().unwrap();
        let mut s = spec();
        s.algorithm = Algorithm::Cocoa(CocoaParams::default());
        s.elastic.enabled = true;
        s.validate().unwrap();
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
        s.elastic.enabled = true;
        s.run_policy.backoff_limit = -1;
        let err = s.validate().unwrap_err();
        assert_eq!(err.problems.len(), 5, "{err}");
        assert!(err.to_string().starts_with("invalid TrainingJob spec: "));
    }

    #[test]
    fn updates_may_change_workers_but_not_data_model_or_algorithm() {
        let old = spec();
        let mut new = spec();
        new.workers.replicas = 8;
        new.run_policy.backoff_limit = 10;
        new.validate_update(&old).unwrap();
        new.model_uri = "file:///models/b".into();
        let err = new.validate_update(&old).unwrap_err();
        assert_eq!(err.problems, vec![MSG_MODEL_URI_IMMUTABLE.to_string()]);
    }
}
