//! `spec.algorithm`: which solver trains the model, with its hyperparameters.
//!
//! On the wire the algorithm is an object with exactly one key (`scd`, `cocoa`, `hybrid` or
//! `ipm`), which is serde's externally tagged enum. In Rust that is a plain enum, so the
//! operator matches on it and can never see two algorithms at once.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The loss function of the generalized linear model.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Logistic loss log(1 + exp(-y w.x)): logistic regression, labels in {-1, +1}.
    #[default]
    Logistic,
    /// Squared loss (y - w.x)^2 / 2: least squares regression.
    Squared,
    /// Hinge loss max(0, 1 - y w.x): linear support vector machine, labels in {-1, +1}.
    Hinge,
}

impl Loss {
    /// The name used in manifests (`logistic`, `squared`, `hinge`).
    pub fn as_str(self) -> &'static str {
        match self {
            Loss::Logistic => "logistic",
            Loss::Squared => "squared",
            Loss::Hinge => "hinge",
        }
    }
}

/// The training algorithm and its hyperparameters. Exactly one block may be set; when
/// `spec.algorithm` is omitted, SCD with its defaults is used.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum Algorithm {
    /// Scalable Coordinate Descent (the default): feature blocks are updated one at a time
    /// from statistics aggregated over all row shards. Same model for any worker count.
    Scd(ScdParams),
    /// CoCoA with an SDCA local solver: each worker optimizes the dual on its row shards and
    /// the master averages the updates; stops on the duality gap. Supports elastic scale-in.
    Cocoa(CocoaParams),
    /// AllReduce hybrid: AdaGrad SGD passes whose weighted average warm-starts L-BFGS, with
    /// gradients summed over a spanning tree of workers.
    Hybrid(HybridParams),
    /// Iterative parameter mixtures: each worker runs SGD over its row shards for one epoch and
    /// the master averages the resulting models.
    Ipm(IpmParams),
}

/// Schema of `spec.algorithm`: an object whose optional properties are the four blocks.
///
/// The derived schema of an externally tagged enum also carries
/// `oneOf: [{required: [scd]}, {required: [cocoa]}, ...]`. The API server reports a failed
/// `oneOf` as a pathless "must validate one and only one schema (oneOf)" plus a misleading
/// "spec.algorithm.scd: Required value"; the CEL rule on `spec.algorithm` says the same thing
/// clearly, so the schema leaves the `oneOf` out and the CEL rule alone enforces it.
pub(crate) fn algorithm_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let derived = Algorithm::json_schema(generator);
    let mut properties = serde_json::Map::new();
    let branches = derived.get("oneOf").and_then(serde_json::Value::as_array).into_iter().flatten();
    for branch in branches {
        let Some(props) = branch.get("properties").and_then(serde_json::Value::as_object) else {
            continue;
        };
        for (name, property) in props {
            let mut property = property.clone();
            // The variant's doc comment sits on its branch; move it onto the property.
            if let (Some(description), Some(obj)) = (branch.get("description"), property.as_object_mut()) {
                obj.insert("description".into(), description.clone());
            }
            properties.insert(name.clone(), property);
        }
    }
    schemars::json_schema!({
        "type": "object",
        "properties": properties,
    })
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::Scd(ScdParams::default())
    }
}

impl Algorithm {
    /// All algorithm names, in the order of the manifest keys.
    pub const NAMES: [&'static str; 4] = ["scd", "cocoa", "hybrid", "ipm"];

    /// The manifest key of this algorithm (`scd`, `cocoa`, `hybrid`, `ipm`).
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Scd(_) => "scd",
            Algorithm::Cocoa(_) => "cocoa",
            Algorithm::Hybrid(_) => "hybrid",
            Algorithm::Ipm(_) => "ipm",
        }
    }

    /// The loss every algorithm minimizes.
    pub fn loss(&self) -> Loss {
        match self {
            Algorithm::Scd(p) => p.loss,
            Algorithm::Cocoa(p) => p.loss,
            Algorithm::Hybrid(p) => p.loss,
            Algorithm::Ipm(p) => p.loss,
        }
    }

    /// The L2 regularization strength every algorithm takes.
    pub fn l2(&self) -> f64 {
        match self {
            Algorithm::Scd(p) => p.l2,
            Algorithm::Cocoa(p) => p.l2,
            Algorithm::Hybrid(p) => p.l2,
            Algorithm::Ipm(p) => p.l2,
        }
    }

    /// Whether the master's elastic scale-in policy can drive this algorithm (CoCoA only: the
    /// policy follows the slope of its duality gap).
    pub fn supports_elastic(&self) -> bool {
        matches!(self, Algorithm::Cocoa(_))
    }
}

// The same defaults as `linea train`.
fn default_scd_l2() -> f64 {
    1.0
}
fn default_scd_epochs() -> i32 {
    100
}
fn default_scd_tolerance() -> f64 {
    1e-9
}

/// Hyperparameters of Scalable Coordinate Descent.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScdParams {
    /// Loss function: logistic, squared or hinge.
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength: the objective is the sum of the examples' losses +
    /// l2 * |w|^2 + l1 * |w|_1, as for `linea train` (LIBLINEAR's C = 1 / (2 l2)). Must be >= 0.
    #[serde(default = "default_scd_l2")]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// L1 regularization strength (lambda1 * |w|_1): drives weights of useless features to
    /// exactly zero. Must be >= 0; 0 disables it.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub l1: f64,
    /// Maximum number of epochs (one epoch updates every feature block once).
    #[serde(default = "default_scd_epochs")]
    #[schemars(range(min = 1))]
    pub epochs: i32,
    /// Stop early when three epochs together lower the objective by less than this fraction
    /// of its value. 0 stops only when the objective no longer falls at all.
    #[serde(default = "default_scd_tolerance")]
    #[schemars(range(min = 0.0))]
    pub tolerance: f64,
}

impl Default for ScdParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_scd_l2(),
            l1: 0.0,
            epochs: default_scd_epochs(),
            tolerance: default_scd_tolerance(),
        }
    }
}

fn default_cocoa_l2() -> f64 {
    1e-4
}
fn default_cocoa_epochs() -> i32 {
    100
}
fn default_cocoa_gap() -> f64 {
    1e-4
}

/// Hyperparameters of CoCoA with the SDCA local solver.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CocoaParams {
    /// Loss function: logistic, squared or hinge.
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength. Must be > 0: SDCA solves the dual problem, which exists
    /// only for a strongly convex regularizer.
    #[serde(default = "default_cocoa_l2")]
    #[x_kube(validation = Rule::new("self > 0.0").message(crate::validation::MSG_COCOA_L2_POSITIVE))]
    pub l2: f64,
    /// Maximum number of outer rounds (each: local SDCA on every worker, then averaging).
    #[serde(default = "default_cocoa_epochs")]
    #[schemars(range(min = 1))]
    pub epochs: i32,
    /// Stop when the duality gap (an upper bound on the distance to the optimal objective)
    /// falls below this value.
    #[serde(default = "default_cocoa_gap")]
    #[schemars(range(min = 0.0))]
    pub duality_gap_tolerance: f64,
    /// SDCA coordinate steps each worker takes per round on its own examples. Unset means one
    /// pass over the worker's examples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub local_iterations: Option<i64>,
}

impl Default for CocoaParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_cocoa_l2(),
            epochs: default_cocoa_epochs(),
            duality_gap_tolerance: default_cocoa_gap(),
            local_iterations: None,
        }
    }
}

fn default_hybrid_l2() -> f64 {
    1e-6
}
fn default_sgd_passes() -> i32 {
    1
}
fn default_lbfgs_memory() -> i32 {
    15
}
fn default_lbfgs_iterations() -> i32 {
    20
}

/// Hyperparameters of the AllReduce hybrid (AdaGrad SGD warm start, then L-BFGS).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HybridParams {
    /// Loss function: logistic, squared or hinge.
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength. Must be >= 0.
    #[serde(default = "default_hybrid_l2")]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// AdaGrad SGD passes over each worker's examples before the models are averaged
    /// (weighted by the AdaGrad accumulators) to warm-start L-BFGS. 0 starts L-BFGS from zero.
    #[serde(default = "default_sgd_passes")]
    #[schemars(range(min = 0))]
    pub sgd_passes: i32,
    /// Number of correction pairs L-BFGS keeps to approximate the inverse Hessian.
    #[serde(default = "default_lbfgs_memory")]
    #[schemars(range(min = 1, max = 100))]
    pub lbfgs_memory: i32,
    /// Maximum L-BFGS iterations (each one AllReduce of the full gradient).
    #[serde(default = "default_lbfgs_iterations")]
    #[schemars(range(min = 1))]
    pub lbfgs_iterations: i32,
}

impl Default for HybridParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_hybrid_l2(),
            sgd_passes: default_sgd_passes(),
            lbfgs_memory: default_lbfgs_memory(),
            lbfgs_iterations: default_lbfgs_iterations(),
        }
    }
}

fn default_ipm_epochs() -> i32 {
    10
}
fn default_learning_rate() -> f64 {
    0.1
}

/// Hyperparameters of iterative parameter mixtures.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IpmParams {
    /// Loss function: logistic, squared or hinge (hinge gives the averaged perceptron-like SVM).
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength. Must be >= 0.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// Number of mixing rounds: one SGD epoch on every worker, then the master averages.
    #[serde(default = "default_ipm_epochs")]
    #[schemars(range(min = 1))]
    pub epochs: i32,
    /// SGD step size. Must be > 0.
    #[serde(default = "default_learning_rate")]
    #[x_kube(validation = Rule::new("self > 0.0").message(crate::validation::MSG_IPM_LEARNING_RATE_POSITIVE))]
    pub learning_rate: f64,
}

impl Default for IpmParams {
    fn default() -> Self {
        Self { loss: Loss::default(), l2: 0.0, epochs: default_ipm_epochs(), learning_rate: default_learning_rate() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_algorithm_is_an_object_with_one_key() {
        let a: Algorithm = serde_json::from_value(json!({"cocoa": {"l2": 0.01}})).unwrap();
        assert_eq!(a.name(), "cocoa");
        assert_eq!(a.l2(), 0.01);
        assert_eq!(a.loss(), Loss::Logistic);
        assert!(a.supports_elastic());
        let back = serde_json::to_value(&a).unwrap();
        assert_eq!(back["cocoa"]["dualityGapTolerance"], json!(1e-4));
        assert_eq!(back.as_object().unwrap().len(), 1);
    }

    #[test]
    fn zero_two_or_unknown_blocks_do_not_parse() {
        for bad in [json!({}), json!({"scd": {}, "ipm": {}}), json!({"sgd": {}}), json!({"scd": {"loss": "poisson"}})] {
            assert!(serde_json::from_value::<Algorithm>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_cover_every_variant_in_manifest_order() {
        let all = [
            Algorithm::Scd(ScdParams::default()),
            Algorithm::Cocoa(CocoaParams::default()),
            Algorithm::Hybrid(HybridParams::default()),
            Algorithm::Ipm(IpmParams::default()),
        ];
        let names: Vec<&str> = all.iter().map(Algorithm::name).collect();
        assert_eq!(names, Algorithm::NAMES);
        for a in &all {
            let key = serde_json::to_value(a).unwrap();
            assert!(key.get(a.name()).is_some(), "{} serializes under its name", a.name());
        }
        assert_eq!(Algorithm::default().name(), "scd");
    }

    #[test]
    fn loss_names_match_serde() {
        for loss in [Loss::Logistic, Loss::Squared, Loss::Hinge] {
            assert_eq!(serde_json::to_value(loss).unwrap(), loss.as_str());
        }
    }
}
