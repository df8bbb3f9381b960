//! `spec.algorithm`: which solver trains the model, with its hyperparameters.
//!
//! On the wire the algorithm is an object with exactly one key (`scd`, `cocoa`, `hybrid` or
//! `ipm`), which is
//! serde's externally tagged enum. In Rust that is a plain enum, so the operator matches on
//! it and can never see two algorithms at once.
//!
//! Every algorithm minimizes the same objective, as `linea train` does:
//! `sum over examples of loss(y, f) + l2 * |w|^2` (+ `l1 * |w|_1` for SCD), with `f = w.x + b`
//! and the bias `b` regularized like every other weight. One `l2`, one meaning, one default.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The loss function of the generalized linear model, with `f = w.x + b` the model's score.
/// The same definitions as the engine's (`linea train --loss`).
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Logistic loss log(1 + exp(-y f)): logistic regression, labels in {-1, +1}.
    #[default]
    Logistic,
    /// Squared loss (y - f)^2 (no factor 1/2): least squares regression.
    Squared,
    /// Hinge loss max(0, 1 - y f): linear support vector machine, labels in {-1, +1}. CoCoA
    /// only (SCD needs a differentiable loss).
    Hinge,
}

impl Loss {
    /// The name used in manifests and on the `linea` command line (`logistic`, `squared`,
    /// `hinge`).
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
    /// CoCoA with an SDCA local solver: each of `workers.replicas` slots optimizes the dual on
    /// its rows for `localPasses` passes, the master adds the updates; stops on the relative
    /// duality gap. The same objective (and `l2`) as SCD.
    Cocoa(CocoaParams),
    /// Agarwal et al.'s hybrid: one AdaGrad pass per slot (one slot per worker replica), the
    /// passes averaged per feature, then L-BFGS on exact batch gradients. The same objective
    /// (and `l2`) as SCD, without L1; logistic or squared loss.
    Hybrid(HybridParams),
    /// Iterative parameter mixtures (Hall et al.): every round each slot (one per worker
    /// replica) runs an online pass from the mixed model — SGD, or the averaged perceptron
    /// for hinge — and the master mixes them. Fast early accuracy; does not converge to the
    /// regularized optimum in general.
    Ipm(IpmParams),
}

/// Schema of `spec.algorithm`: an object whose optional properties are the blocks.
///
/// The derived schema of an externally tagged enum also carries
/// `oneOf: [{required: [scd]}, {required: [cocoa]}]`. The API server reports a failed
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
    /// The algorithms this version runs, in the order of the manifest keys.
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

    /// The loss the algorithm minimizes.
    pub fn loss(&self) -> Loss {
        match self {
            Algorithm::Scd(p) => p.loss,
            Algorithm::Cocoa(p) => p.loss,
            Algorithm::Hybrid(p) => p.loss,
            Algorithm::Ipm(p) => p.loss,
        }
    }

    /// The L2 regularization strength (the same meaning for every algorithm).
    pub fn l2(&self) -> f64 {
        match self {
            Algorithm::Scd(p) => p.l2,
            Algorithm::Cocoa(p) => p.l2,
            Algorithm::Hybrid(p) => p.l2,
            Algorithm::Ipm(p) => p.l2,
        }
    }

    /// The most epochs the job may run: `scd.epochs`, or `maxEpochs` of the others. A job that ran
    /// this many ended on the limit (MaxEpochsReached), not on its stopping criterion.
    pub fn max_epochs(&self) -> i64 {
        match self {
            Algorithm::Scd(p) => p.epochs.into(),
            Algorithm::Cocoa(p) => p.max_epochs.into(),
            Algorithm::Hybrid(p) => p.max_epochs.into(),
            Algorithm::Ipm(p) => p.max_epochs.into(),
        }
    }
}

// The same defaults as `linea train`.
fn default_l2() -> f64 {
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
    /// Loss function: logistic (default) or squared. hinge is refused: SCD needs a
    /// differentiable loss (use cocoa).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self != 'hinge'").message(crate::validation::MSG_SCD_HINGE))]
    pub loss: Loss,
    /// L2 regularization strength (default 1): the objective is the sum of the examples'
    /// losses + l2 * |w|^2 + l1 * |w|_1, bias included, as for `linea train` (LIBLINEAR's
    /// C = 1 / (2 l2)). Must be >= 0.
    #[serde(default = "default_l2")]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// L1 regularization strength (default 0): drives weights of useless features to exactly
    /// zero. Must be >= 0; 0 disables it.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub l1: f64,
    /// Maximum number of epochs (default 100; one epoch updates every feature block once).
    #[serde(default = "default_scd_epochs")]
    #[schemars(range(min = 1))]
    pub epochs: i32,
    /// Stop early when three epochs together lower the objective by less than this fraction
    /// of its value (default 1e-9). 0 stops only when the objective no longer falls at all.
    #[serde(default = "default_scd_tolerance")]
    #[schemars(range(min = 0.0))]
    pub tolerance: f64,
}

impl Default for ScdParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_l2(),
            l1: 0.0,
            epochs: default_scd_epochs(),
            tolerance: default_scd_tolerance(),
        }
    }
}

fn default_local_passes() -> i32 {
    1
}
fn default_gap_tolerance() -> f64 {
    1e-6
}
fn default_cocoa_epochs() -> i32 {
    100
}

/// Hyperparameters of CoCoA with the SDCA local solver, as `linea train --algorithm cocoa`
/// takes them.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CocoaParams {
    /// Loss function: logistic (default), squared or hinge.
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength (default 1), the same meaning as scd.l2: the objective is
    /// the sum of the examples' losses + l2 * |w|^2, bias included. Must be > 0: SDCA solves
    /// the dual problem, which exists only for a strongly convex regularizer.
    #[serde(default = "default_l2")]
    #[x_kube(validation = Rule::new("self > 0.0").message(crate::validation::MSG_COCOA_L2_POSITIVE))]
    pub l2: f64,
    /// H: passes of SDCA each slot makes over its own examples per round (default 1).
    #[serde(default = "default_local_passes")]
    #[schemars(range(min = 1))]
    pub local_passes: i32,
    /// Stop when the duality gap relative to the objective, (primal - dual) / primal, falls
    /// below this value (default 1e-6). The gap bounds the distance to the optimum.
    #[serde(default = "default_gap_tolerance")]
    #[schemars(range(min = 0.0))]
    pub gap_tolerance: f64,
    /// Maximum number of rounds (default 100; each: local SDCA in every slot, then the master
    /// adds the updates).
    #[serde(default = "default_cocoa_epochs")]
    #[schemars(range(min = 1))]
    pub max_epochs: i32,
    /// Seed of the order in which SDCA visits examples (default 0). The same seed gives the
    /// same model bit for bit.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub seed: i64,
    /// Run CoCoA inside Catalyst's accelerated outer loop (default false): a sequence of
    /// better-conditioned proximal subproblems with an extrapolated centre, which needs far
    /// fewer rounds when several workers' slots are slow to close the gap; the gap reported
    /// stays that of the objective above. Not together with elastic scale-in.
    #[serde(default)]
    pub accelerate: bool,
}

impl Default for CocoaParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_l2(),
            local_passes: default_local_passes(),
            gap_tolerance: default_gap_tolerance(),
            max_epochs: default_cocoa_epochs(),
            seed: 0,
            accelerate: false,
        }
    }
}

fn default_memory() -> i32 {
    15
}
fn default_gradient_tolerance() -> f64 {
    1e-10
}
fn default_sgd_rate() -> f64 {
    0.5
}
fn default_precondition_refresh() -> i32 {
    15
}

/// L-BFGS's initial inverse Hessian, as `linea train --lbfgs-precondition` takes it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LbfgsPrecondition {
    /// The Jacobi preconditioner: the inverse of the objective's Hessian diagonal.
    #[default]
    Diagonal,
    /// The scalar s.y / y.y of the newest curvature pair.
    None,
    /// The diagonal scaled by s.y / y'Dy of the newest curvature pair.
    Scaled,
}

impl LbfgsPrecondition {
    pub fn as_str(self) -> &'static str {
        match self {
            LbfgsPrecondition::Diagonal => "diagonal",
            LbfgsPrecondition::None => "none",
            LbfgsPrecondition::Scaled => "scaled",
        }
    }
}

/// The hybrid's batch solver after its AdaGrad pass, as `linea train --batch-solver` takes
/// it.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BatchSolver {
    /// L-BFGS with a strong-Wolfe line search.
    #[default]
    Lbfgs,
    /// Truncated Newton: conjugate gradients on the exact Hessian, one batch pass per step
    /// (LIBLINEAR's newton.cpp); fewer passes to tight tolerances on ill-conditioned data.
    Newton,
}

impl BatchSolver {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchSolver::Lbfgs => "lbfgs",
            BatchSolver::Newton => "newton",
        }
    }
}

/// How the phases that ask for an allreduce (the hybrid's and IPM's gradients, losses and
/// models) sum the workers' vectors, as `linea master --allreduce` takes it. The sums are
/// exact (fixed point), so the model is the same bits either way: this chooses the traffic.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AllReduce {
    /// The master-centred range aggregation: each range's partials are pulled from every
    /// worker by one aggregator item, the totals go to the master. linea's default, measured
    /// faster on loopback.
    #[default]
    Ranges,
    /// Agarwal et al.'s spanning tree: the master puts the workers in a binary tree, sums go
    /// up and the total comes down in pipelined chunks between the workers' peers.
    Tree,
}

impl AllReduce {
    pub fn as_str(self) -> &'static str {
        match self {
            AllReduce::Ranges => "ranges",
            AllReduce::Tree => "tree",
        }
    }
}

/// Hyperparameters of the hybrid, as `linea train --algorithm hybrid` takes them.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HybridParams {
    /// Loss function: logistic (default) or squared. hinge is refused: L-BFGS needs a
    /// differentiable loss (use cocoa, or ipm's averaged perceptron).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self != 'hinge'").message(crate::validation::MSG_HYBRID_HINGE))]
    pub loss: Loss,
    /// L2 regularization strength (default 1), the same meaning as scd.l2. Must be >= 0
    /// (> 0 for logistic loss, checked when the job starts).
    #[serde(default = "default_l2")]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// m: curvature pairs L-BFGS keeps (default 15).
    #[serde(default = "default_memory")]
    #[schemars(range(min = 1, max = 1000))]
    pub memory: i32,
    /// Maximum number of epochs (default 100): the AdaGrad pass, then one per L-BFGS
    /// iteration.
    #[serde(default = "default_cocoa_epochs")]
    #[schemars(range(min = 1))]
    pub max_epochs: i32,
    /// Stop when three epochs together lower the objective by less than this fraction of it
    /// (default 1e-9).
    #[serde(default = "default_scd_tolerance")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub tolerance: f64,
    /// Stop when the gradient's norm is at most this fraction of its norm at w = 0 (default
    /// 1e-10).
    #[serde(default = "default_gradient_tolerance")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub gradient_tolerance: f64,
    /// Stop when the certified distance to the optimum, |gradient|^2 / (4 l2) relative to
    /// the objective (strong convexity), falls below this value, as cocoa stops on its
    /// duality gap (default 1e-6; 0: never on it).
    #[serde(default = "default_gap_tolerance")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub gap_tolerance: f64,
    /// The batch solver after the AdaGrad pass: lbfgs (default) or newton (truncated Newton,
    /// which ignores memory and the lbfgs fields).
    #[serde(default)]
    pub batch_solver: BatchSolver,
    /// L-BFGS's initial inverse Hessian: diagonal (default; the Jacobi preconditioner of
    /// Agarwal et al., the inverse Hessian diagonal), scaled (that diagonal scaled by
    /// s.y / y'Dy of the newest pair) or none (the scalar s.y / y.y).
    #[serde(default)]
    pub lbfgs_precondition: LbfgsPrecondition,
    /// With the diagonal or scaled preconditioner: recompute it every this many L-BFGS
    /// iterations; 0: once, at the warm start (default 15).
    #[serde(default = "default_precondition_refresh")]
    #[schemars(range(min = 0, max = 1000000))]
    pub lbfgs_precondition_refresh: i32,
    /// Learning rate of the AdaGrad pass (default 0.5).
    #[serde(default = "default_sgd_rate")]
    #[schemars(range(min = 0.000000001, max = 100.0))]
    pub sgd_rate: f64,
    /// Seed of the order each slot visits its examples in (default 0).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub seed: i64,
    /// How the workers' vectors are summed: ranges (default) or tree (the paper's spanning
    /// tree). The same model bits either way.
    #[serde(default)]
    pub allreduce: AllReduce,
}

impl Default for HybridParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_l2(),
            memory: default_memory(),
            max_epochs: default_cocoa_epochs(),
            tolerance: default_scd_tolerance(),
            gradient_tolerance: default_gradient_tolerance(),
            gap_tolerance: default_gap_tolerance(),
            batch_solver: BatchSolver::default(),
            lbfgs_precondition: LbfgsPrecondition::default(),
            lbfgs_precondition_refresh: default_precondition_refresh(),
            sgd_rate: default_sgd_rate(),
            seed: 0,
            allreduce: AllReduce::default(),
        }
    }
}

/// How parameter mixtures weigh the slots' models.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mixing {
    /// Every slot's model counts the same.
    #[default]
    Uniform,
    /// A slot's model counts by its share of the examples.
    Examples,
}

impl Mixing {
    pub fn as_str(self) -> &'static str {
        match self {
            Mixing::Uniform => "uniform",
            Mixing::Examples => "examples",
        }
    }
}

/// Hyperparameters of iterative parameter mixtures, as `linea train --algorithm ipm` takes them.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IpmParams {
    /// Loss function: logistic (default), squared, or hinge (the averaged perceptron).
    #[serde(default)]
    pub loss: Loss,
    /// L2 regularization strength (default 1), the same meaning as scd.l2. Must be >= 0.
    #[serde(default = "default_l2")]
    #[schemars(range(min = 0.0))]
    pub l2: f64,
    /// How the slots' models are mixed: uniform (default) or examples.
    #[serde(default)]
    pub mixing: Mixing,
    /// Maximum number of mixing rounds (default 100).
    #[serde(default = "default_cocoa_epochs")]
    #[schemars(range(min = 1))]
    pub max_epochs: i32,
    /// Stop when three rounds together change the objective by less than this fraction of
    /// it (default 1e-9).
    #[serde(default = "default_scd_tolerance")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub tolerance: f64,
    /// Stop when the certified distance to the optimum, |gradient|^2 / (4 l2) relative to
    /// the objective, falls below this value (default 1e-6; 0: never on it). Mixtures
    /// seldom get there: they do not converge to the regularized optimum in general.
    #[serde(default = "default_gap_tolerance")]
    #[schemars(range(min = 0.0, max = 0.999999))]
    pub gap_tolerance: f64,
    /// Learning rate of the SGD passes, shrinking as 1/round (default 0.5).
    #[serde(default = "default_sgd_rate")]
    #[schemars(range(min = 0.000000001, max = 100.0))]
    pub sgd_rate: f64,
    /// Seed of the order each slot visits its examples in (default 0).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub seed: i64,
    /// How the workers' vectors are summed: ranges (default) or tree (the paper's spanning
    /// tree). The same model bits either way.
    #[serde(default)]
    pub allreduce: AllReduce,
}

impl Default for IpmParams {
    fn default() -> Self {
        Self {
            loss: Loss::default(),
            l2: default_l2(),
            mixing: Mixing::default(),
            max_epochs: default_cocoa_epochs(),
            tolerance: default_scd_tolerance(),
            gap_tolerance: default_gap_tolerance(),
            sgd_rate: default_sgd_rate(),
            seed: 0,
            allreduce: AllReduce::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_algorithm_is_an_object_with_one_key() {
        let a: Algorithm = serde_json::from_value(json!({"cocoa": {"l2": 0.01, "loss": "hinge"}})).unwrap();
        assert_eq!(a.name(), "cocoa");
        assert_eq!(a.l2(), 0.01);
        assert_eq!(a.loss(), Loss::Hinge);
        assert_eq!(a.max_epochs(), 100);
        let back = serde_json::to_value(&a).unwrap();
        assert_eq!(back["cocoa"]["gapTolerance"], json!(1e-6));
        assert_eq!(back["cocoa"]["localPasses"], json!(1));
        assert_eq!(back.as_object().unwrap().len(), 1);
    }

    #[test]
    fn scd_and_cocoa_share_the_l2_default() {
        assert_eq!(ScdParams::default().l2, CocoaParams::default().l2);
        assert_eq!(ScdParams::default().l2, 1.0);
    }

    #[test]
    fn hybrid_and_ipm_parse_with_the_defaults_of_linea_train() {
        let a: Algorithm = serde_json::from_value(json!({"hybrid": {}})).unwrap();
        assert_eq!(a, Algorithm::Hybrid(HybridParams::default()));
        assert_eq!((a.name(), a.max_epochs(), a.l2()), ("hybrid", 100, 1.0));
        let back = serde_json::to_value(&a).unwrap();
        assert_eq!(back["hybrid"]["memory"], json!(15));
        assert_eq!(back["hybrid"]["sgdRate"], json!(0.5));
        assert_eq!(back["hybrid"]["allreduce"], json!("ranges"), "linea master's default");
        let i: Algorithm = serde_json::from_value(json!({"ipm": {"loss": "hinge", "mixing": "examples"}})).unwrap();
        assert_eq!(i.loss(), Loss::Hinge);
        assert!(matches!(i, Algorithm::Ipm(IpmParams { mixing: Mixing::Examples, .. })));
        assert!(serde_json::from_value::<Algorithm>(json!({"ipm": {"mixing": "median"}})).is_err());
        let tree: Algorithm = serde_json::from_value(json!({"ipm": {"allreduce": "tree"}})).unwrap();
        assert!(matches!(tree, Algorithm::Ipm(IpmParams { allreduce: AllReduce::Tree, .. })));
        assert!(serde_json::from_value::<Algorithm>(json!({"hybrid": {"allreduce": "ring"}})).is_err());
        for mode in [AllReduce::Ranges, AllReduce::Tree] {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str(), "the name linea master takes");
        }
    }

    #[test]
    fn zero_two_or_unknown_blocks_do_not_parse() {
        for bad in [
            json!({}),
            json!({"scd": {}, "cocoa": {}}),
            json!({"sgd": {}}),
            json!({"hybrid": {}, "ipm": {}}),
            json!({"scd": {"loss": "poisson"}}),
        ] {
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
