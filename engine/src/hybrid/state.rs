//! What a checkpoint of L-BFGS, the hybrid or IPM holds, and what one epoch changes.

use super::config::LinearConfig;
use super::lbfgs::Pair;
use crate::algorithm::{Gap, StopReason};
use serde::{Deserialize, Serialize};

/// Everything a run resumes from bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LinearState {
    /// Epochs completed (L-BFGS iterations; the hybrid's first is its online pass; IPM's
    /// are mixing rounds).
    pub epoch: u32,
    pub w: Vec<f64>,
    /// The objective at `w`; `None` before the first evaluation.
    pub f: Option<f64>,
    /// The objective's gradient at `w` (empty before the first evaluation).
    pub g: Vec<f64>,
    /// The objective and gradient norm at the start (`w = 0`).
    pub initial: Option<f64>,
    pub initial_gradient_norm: f64,
    /// L-BFGS curvature pairs, oldest first (at most the memory m).
    pub pairs: Vec<Pair>,
    /// The objective after each epoch.
    pub objectives: Vec<f64>,
    /// Batch passes (objective and gradient evaluations) so far, line searches included.
    pub evaluations: u64,
    /// Set when the run stopped for a reason the history alone does not show (the line
    /// search could not lower the objective any further).
    pub stalled: bool,
    /// L-BFGS's initial inverse Hessian `H0` when the Jacobi preconditioner is on (the
    /// inverse Hessian diagonal at the point it was last computed at); empty otherwise.
    pub diagonal: Vec<f64>,
}

/// What one epoch changed: replayed onto the state it followed, it gives the next state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearStep {
    /// The epoch count after the step.
    pub epoch: u32,
    pub w: Vec<f64>,
    pub f: f64,
    pub g: Vec<f64>,
    pub initial: Option<f64>,
    pub initial_gradient_norm: f64,
    /// The pair this epoch added, and how many of the oldest it dropped (a full memory
    /// drops one; a failed line search drops all).
    pub pair: Option<Pair>,
    pub dropped: u32,
    pub evaluations: u64,
    pub stalled: bool,
    /// The preconditioner's diagonal when this epoch computed a new one.
    pub diagonal: Option<Vec<f64>>,
}

impl LinearState {
    /// Why the run should stop, from the history alone (and the stall flag);
    /// `gradient_norm` is `|g|` (the caller keeps it: a pass over every feature).
    pub fn stop_reason(&self, config: &LinearConfig, gradient_norm: f64) -> Option<StopReason> {
        let n = self.objectives.len();
        let converged = n >= 4
            && (self.objectives[n - 4] - self.objectives[n - 1]).abs()
                <= config.tolerance() * self.objectives[n - 1].abs();
        let gradient = self.f.is_some()
            && !self.g.is_empty()
            && gradient_norm <= config.gradient_tolerance() * self.initial_gradient_norm;
        let certified =
            self.certificate(config.l2(), gradient_norm).is_some_and(|gap| gap.relative <= config.gap_tolerance());
        if self.epoch > 0 && certified {
            Some(StopReason::GapReached)
        } else if self.stalled || converged || (self.epoch > 0 && gradient) {
            Some(StopReason::Converged)
        } else if self.epoch >= config.max_epochs() {
            Some(StopReason::MaxEpochs)
        } else {
            None
        }
    }

    /// A bound on how far the objective at `w` is above its minimum, from the gradient
    /// alone: `sum loss + l2 |w|^2` with convex losses is `2 l2`-strongly convex (the bias is
    /// regularized too), so `F(w) - F* <= |g|^2 / (2 * 2 l2)` (Boyd and Vandenberghe, eq.
    /// 9.9). It plays the part CoCoA's duality gap plays: a certified stop, and the gap of the
    /// trace, the plot and the status. `None` before the first evaluation or without an L2
    /// term (squared loss at `l2 = 0` has no such bound). `gradient_norm` is `|g|`.
    pub fn certificate(&self, l2: f64, gradient_norm: f64) -> Option<Gap> {
        let f = self.f?;
        if self.g.is_empty() {
            return None;
        }
        gradient_certificate(f, gradient_norm, l2)
    }

    /// [`Self::certificate`] at the start (`w = 0`, or the point a run was given).
    pub fn initial_certificate(&self, l2: f64) -> Option<Gap> {
        gradient_certificate(self.initial?, self.initial_gradient_norm, l2)
    }
}

/// `|g|^2 / (4 l2)`, absolute and relative to the objective `f`.
fn gradient_certificate(f: f64, gradient_norm: f64, l2: f64) -> Option<Gap> {
    if !(l2 > 0.0 && f > 0.0) {
        return None;
    }
    let absolute = gradient_norm * gradient_norm / (4.0 * l2);
    Some(Gap { absolute, relative: absolute / f })
}
