//! Catalyst acceleration of CoCoA: an outer loop of inexact proximal-point steps with
//! Nesterov extrapolation (Lin, Mairal, Harchaoui, *A Universal Catalyst for First-Order
//! Optimization*, NIPS 2015; *Catalyst Acceleration for First-order Convex Optimization:
//! from Theory to Practice*, JMLR 18(212), 2018 — "the paper" below).
//!
//! Why: with K > 1 slots an epoch of CoCoA is a block-Jacobi step, and its rate is set by
//! how strongly the slots' blocks couple relative to the regularizer (docs/algorithms.md,
//! "Convergence"); on a9a K = 4 needs ~16,000 epochs to a relative gap of 1e-6. The rate
//! grows with the regularizer, so CoCoA solves a better-conditioned problem fast; Catalyst
//! turns a sequence of those into the original problem's solution with a square root of the
//! condition number instead of the condition number itself.
//!
//! **The subproblem.** Outer iteration k minimizes `G_k(w) = P(w) + kappa/2 |w - y_k|^2`. In
//! linea's scaling (`P = sum loss + (lambda/2)|w|^2`, `lambda = 2 l2`) that is
//! `sum loss + (lambda'/2)|w - c_k|^2 + const` with `lambda' = lambda + kappa` and the centre
//! `c_k = kappa y_k / lambda'`. Its dual and primal-dual map are
//! `D_k(alpha) = -sum loss*(-alpha) - c_k.X'alpha - |X'alpha|^2 / (2 lambda')` and
//! `w_k(alpha) = c_k + X'alpha / lambda'`. CoCoA solves it unchanged: the kernel's `lambda`
//! is `lambda'`, and the slots start from the shared vector `v + kappa y_k` instead of `v`, so
//! their local model `(v + kappa y_k) / lambda'` is `w_k(alpha)` and each SDCA step maximizes
//! `D_k` in its coordinate. The duals carry over from one subproblem to the next: the first
//! point of subproblem k+1 is then `x_k + kappa/lambda' (y_{k+1} - y_k)`, the warm start the
//! paper recommends (section 3.3, `mu > 0`).
//!
//! **Inner stop** (the paper's criterion (C2)): subproblem k ends after the first epoch whose
//! point x has `G_k(x) - G_k* <= delta kappa/2 |x - y_k|^2`, `delta = sqrt(q) / (2 - sqrt(q))`,
//! `q = mu / (mu + kappa)` with `mu = lambda`, P's strong convexity. The subproblem's own
//! duality gap `G_k(x) - D_k(alpha)` bounds the left side, and the master has it every epoch
//! from the same two sums as the original objectives, so the test costs nothing. Two guards: a
//! gap within rounding of its terms counts as met, and [`MAX_INNER_EPOCHS`] ends a subproblem
//! that cannot meet it.
//!
//! **Outer update** (`mu > 0`, so `alpha_k = sqrt(q)` throughout): `x_k` = the subproblem's
//! last point, `y_{k+1} = x_k + beta (x_k - x_{k-1})`, `beta = (1 - sqrt q) / (1 + sqrt q)`,
//! `y_0 = x_0 = 0`.
//!
//! **The certificate stays the original problem's.** `P(x)` at every evaluated point and the
//! original dual `D(alpha) = -sum loss*(-alpha) - |X'alpha|^2 / (2 lambda)` at every epoch's
//! duals (defined for any alpha in the conjugates' domain; the subproblems' duals converge to
//! the original optimum's as `y_k` does) are both bounds on `P*`. The run reports the smallest
//! primal and the largest dual seen, and returns the model of that primal: the reported gap
//! never increases and always certifies the returned model.

use super::kernel::{CocoaKernel, CocoaPhase};
use crate::algorithm::{PhaseRequest, Reduction, Runner};
use crate::error::EngineError;
use crate::fixed::from_fixed128;
use crate::loss::Loss;
use serde::{Deserialize, Serialize};

/// A subproblem that has not met the inner stop after this many epochs ends anyway.
pub const MAX_INNER_EPOCHS: u32 = 50;

/// The acceleration's setting: `kappa`, or `None` for [`auto_kappa`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AccelerateConfig {
    kappa: Option<f64>,
}

impl AccelerateConfig {
    /// `kappa` weighs the proximal term `kappa/2 |w - y|^2` (in the objective's own scaling,
    /// where `l2` weighs `|w|^2`); `None` chooses it from the data ([`auto_kappa`]).
    pub fn new(kappa: Option<f64>) -> Result<Self, EngineError> {
        if let Some(k) = kappa
            && !(k.is_finite() && k > 0.0)
        {
            return Err(EngineError::InvalidParameter {
                name: "kappa",
                value: k,
                why: "must be finite and > 0 (the proximal term of Catalyst's subproblem)",
            });
        }
        Ok(Self { kappa })
    }

    pub fn kappa(&self) -> Option<f64> {
        self.kappa
    }
}

/// The default `kappa` for `rows` rows in `slots` slots (all measured: docs/algorithms.md,
/// "Acceleration"):
///
/// * K > 1, logistic and squared loss: `lambda' = lambda + kappa = rows / (8 gamma)`, where
///   `gamma` is the strong convexity of the loss's conjugate (4 for logistic loss, 1/2 for
///   linea's squared loss `(y - f)^2`). Why: with K > 1 the slow directions of CoCoA's dual
///   move mass between slots while leaving `w` unchanged; their true curvature is the
///   conjugates' `gamma` per unit, while a slot's local problem charges them about
///   `sigma' n_k / lambda = n / lambda`, so an epoch contracts them by about
///   `gamma lambda / n` (a9a, K = 4: 2.5e-4 predicted, 2.2e-4 measured over epochs
///   2,000-16,000). Catalyst's cost, outer iterations `~ sqrt(lambda'/lambda)` times inner
///   epochs `~ n / (gamma lambda')`, falls as `lambda'` grows until that contraction is of
///   order one: `lambda'` of order `n / gamma`, whatever K. On a9a K = 4, kappa = 100, 300,
///   1,015 (this rule), 3,000 and 10,000 took >533, >284, 189, 204 and 385 epochs to 1e-6.
/// * K > 1, hinge loss: its conjugate has no curvature, so the rule above does not apply;
///   `lambda' = rows / 300` is what a9a (kappa 100 best of 10, 30, 100, 1,015) and
///   rcv1-small (kappa 2-10 best of 2, 4, 10, 30, 100) measured; on w8a no kappa tried helped.
/// * K = 1 (SDCA) has no slow mode and needs no acceleration at linea's usual conditioning:
///   `kappa = lambda` (q = 1/2) keeps what it costs small.
///
/// Never below `lambda`.
pub fn auto_kappa(loss: Loss, rows: usize, slots: u32, lambda: f64) -> f64 {
    if slots <= 1 {
        return lambda;
    }
    let inner_lambda = match loss {
        Loss::Logistic => rows as f64 / (8.0 * 4.0),
        Loss::Squared => rows as f64 / (8.0 * 0.5),
        Loss::Hinge => rows as f64 / 300.0,
    };
    (inner_lambda - lambda).max(lambda)
}

/// The outer loop's constants, resolved once from the configuration and the data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Catalyst {
    kappa: f64,
    /// The original problem's `lambda = 2 l2`, P's strong convexity `mu`.
    lambda: f64,
    /// Extrapolation `beta = (1 - sqrt q) / (1 + sqrt q)`.
    beta: f64,
    /// Criterion (C2)'s `delta = sqrt q / (2 - sqrt q)`.
    delta: f64,
}

impl Catalyst {
    pub fn new(config: AccelerateConfig, loss: Loss, rows: usize, slots: u32, lambda: f64) -> Self {
        let kappa = config.kappa.unwrap_or_else(|| auto_kappa(loss, rows, slots, lambda));
        let sqrt_q = (lambda / (lambda + kappa)).sqrt();
        Self { kappa, lambda, beta: (1.0 - sqrt_q) / (1.0 + sqrt_q), delta: sqrt_q / (2.0 - sqrt_q) }
    }

    pub fn kappa(&self) -> f64 {
        self.kappa
    }

    /// `lambda' = lambda + kappa`, the subproblems' regularizer (the kernel's `lambda`).
    pub fn inner_lambda(&self) -> f64 {
        self.lambda + self.kappa
    }

    /// The vector the slots start from: `v + kappa y_k`, so that their model
    /// `(v + kappa y_k) / lambda'` is the subproblem's `w_k(alpha)`.
    pub fn shared(&self, state: &CatalystState, v: &[f64]) -> Vec<f64> {
        v.iter().zip(&state.y).map(|(v, y)| v + self.kappa * y).collect()
    }

    /// One epoch's evaluation: the point `w_k(alpha)`, its losses and the conjugates at the
    /// epoch's duals (one `Evaluate` phase), and from them the original and the subproblem's
    /// objectives, the inner stop and, if it is met, the outer update.
    pub fn evaluate<R: Runner<CocoaKernel>>(
        &self,
        state: &CatalystState,
        v: &[i128],
        runner: &mut R,
    ) -> Result<CatalystStep, R::Error> {
        let v: Vec<f64> = v.iter().map(|&x| from_fixed128(x)).collect();
        let lambda_inner = self.inner_lambda();
        let x: Vec<f64> = self.shared(state, &v).iter().map(|s| s / lambda_inner).collect();
        let request = PhaseRequest {
            phase: CocoaPhase::Evaluate { w: x.clone() },
            reduction: Reduction::Sum { len: 2 },
            mutates: false,
        };
        let sums = runner.run(request)?.sums;
        let (loss, conjugate) = (from_fixed128(sums.sums[0]), from_fixed128(sums.sums[1]));
        Ok(self.step(state, &v, x, loss, conjugate))
    }

    /// The step after an epoch whose duals have the shared vector `v` (as `f64`), whose point
    /// is `x`, with loss sum `loss` at `x` and conjugate sum `conjugate` at the duals.
    fn step(&self, state: &CatalystState, v: &[f64], x: Vec<f64>, loss: f64, conjugate: f64) -> CatalystStep {
        let lambda_inner = self.inner_lambda();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
        let vv = dot(v, v);
        let primal = loss + self.lambda / 2.0 * dot(&x, &x);
        let dual = -conjugate - vv / (2.0 * self.lambda);
        // The subproblem: G_k(x) = sum loss + (lambda'/2)|x - c|^2 (+ a constant both sides
        // share), D_k(alpha) = -sum loss* - c.v - |v|^2 / (2 lambda').
        let centre: Vec<f64> = state.y.iter().map(|y| self.kappa * y / lambda_inner).collect();
        let off_centre: f64 = x.iter().zip(&centre).map(|(x, c)| (x - c) * (x - c)).sum();
        let cv = dot(&centre, v);
        let terms = [loss, conjugate, cv, lambda_inner / 2.0 * off_centre, vv / (2.0 * lambda_inner)];
        let inner_gap = terms.iter().sum::<f64>();
        let rounding = 1e-13 * terms.iter().map(|t| t.abs()).sum::<f64>();
        let from_centre: f64 = x.iter().zip(&state.y).map(|(x, y)| (x - y) * (x - y)).sum();
        let threshold = self.delta * self.kappa / 2.0 * from_centre;
        let outer_done = inner_gap <= threshold.max(rounding)
            || state.inner_epochs + 1 >= MAX_INNER_EPOCHS
            || !inner_gap.is_finite();
        let best_w = (primal < state.best_primal).then(|| x.clone());
        let next = outer_done.then(|| {
            let y = x.iter().zip(&state.x_prev).map(|(x, p)| x + self.beta * (x - p)).collect();
            Outer { y, x_prev: x }
        });
        CatalystStep { record: InnerRecord { primal, dual, inner_gap, threshold, outer_done }, best_w, next }
    }
}

/// The outer loop's part of a CoCoA checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalystState {
    /// Outer iterations completed.
    pub outer: u32,
    /// Epochs spent on the current subproblem.
    pub inner_epochs: u32,
    /// The current subproblem's extrapolated point `y_k`.
    pub y: Vec<f64>,
    /// The last outer iterate `x_{k-1}`.
    pub x_prev: Vec<f64>,
    /// The smallest original primal seen, and its model.
    pub best_primal: f64,
    pub best_w: Vec<f64>,
    /// The largest original dual seen.
    pub best_dual: f64,
    /// Every epoch's own values, for the trace and the measurements.
    pub records: Vec<InnerRecord>,
}

impl CatalystState {
    /// Before the first epoch: `y_0 = x_0 = 0`, nothing certified.
    pub fn start(features: usize) -> Self {
        Self {
            outer: 0,
            inner_epochs: 0,
            y: vec![0.0; features],
            x_prev: vec![0.0; features],
            best_primal: f64::INFINITY,
            best_w: vec![0.0; features],
            best_dual: f64::NEG_INFINITY,
            records: Vec::new(),
        }
    }

    /// Applies an epoch's step: the same code for a live epoch and a replayed one.
    pub fn apply(&mut self, step: CatalystStep) -> Result<(), EngineError> {
        let features = self.y.len();
        let bad = step.best_w.as_ref().is_some_and(|w| w.len() != features)
            || step.next.as_ref().is_some_and(|o| o.y.len() != features || o.x_prev.len() != features)
            || step.record.outer_done != step.next.is_some();
        if bad {
            return Err(EngineError::Corrupt("a Catalyst step that does not fit the state".into()));
        }
        let record = step.record;
        if let Some(w) = step.best_w {
            self.best_primal = record.primal;
            self.best_w = w;
        }
        self.best_dual = self.best_dual.max(record.dual);
        match step.next {
            Some(Outer { y, x_prev }) => {
                self.y = y;
                self.x_prev = x_prev;
                self.outer += 1;
                self.inner_epochs = 0;
            }
            None => self.inner_epochs += 1,
        }
        self.records.push(record);
        Ok(())
    }
}

/// One epoch's own values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InnerRecord {
    /// The original primal `P(x)` at the epoch's point.
    pub primal: f64,
    /// The original dual `D(alpha)` at the epoch's duals.
    pub dual: f64,
    /// The subproblem's duality gap `G_k(x) - D_k(alpha)`.
    pub inner_gap: f64,
    /// Criterion (C2)'s bound `delta kappa/2 |x - y_k|^2`.
    pub threshold: f64,
    /// The subproblem ended with this epoch.
    pub outer_done: bool,
}

/// What an epoch changed in [`CatalystState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalystStep {
    pub record: InnerRecord,
    /// The epoch's point, when its primal is the smallest so far.
    pub best_w: Option<Vec<f64>>,
    /// The next subproblem, when this one ended.
    pub next: Option<Outer>,
}

/// The start of a new subproblem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outer {
    /// `y_{k+1}`.
    pub y: Vec<f64>,
    /// `x_k`, the last subproblem's final point.
    pub x_prev: Vec<f64>,
}
