//! What a CoCoA checkpoint holds, and what one epoch changes in it.

use super::catalyst::{CatalystState, CatalystStep};
use super::elastic::ScaleIn;
use crate::algorithm::Gap;
use serde::{Deserialize, Serialize};

/// Everything a run resumes from bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CocoaState {
    /// Epochs completed.
    pub epoch: u32,
    /// The shared vector `v = X'alpha`, as exact fixed-point sums (2^-64), per feature;
    /// empty while the run has one slot (then `w` holds the model).
    pub v: Vec<i128>,
    /// With one slot, not accelerated ([`super::solo`]): the model `w`, per feature, bit for
    /// bit as the lone slot holds it; empty with more slots (then `w = v / lambda`).
    pub w: Vec<f64>,
    /// Every row's dual variable, in global row order.
    pub alpha: Vec<f64>,
    /// Primal, dual and gap after each epoch whose gap was computed ([`super::schedule`]),
    /// in epoch order; the epochs between have none.
    pub history: Vec<EpochRecord>,
    /// The current slot count K (it only changes by an elastic scale-in).
    pub slots: u32,
    /// Every scale-in so far, in order: a restarted master replays them from here.
    pub scale_ins: Vec<ScaleIn>,
    /// Catalyst's outer loop, when accelerated; the history then holds the best primal and
    /// dual seen, not each epoch's own (those are in here).
    pub catalyst: Option<CatalystState>,
    /// The progress statistics of the last two epochs (the last first), each summed over
    /// the slots in slot order — every epoch's, whether or not its gap was computed: the
    /// next epoch's logistic step tolerance follows them ([`super::step_tolerance`]). 0
    /// before an epoch.
    pub progress: [f64; 2],
}

/// The objectives after one epoch whose gap was computed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// The epoch (1-based) after which they were computed.
    pub epoch: u32,
    /// `P(w) = sum loss + l2 |w|^2` at `w = v / lambda`.
    pub primal: f64,
    /// `D(alpha) = -sum loss*(-alpha) - |v|^2 / (2 lambda)`.
    pub dual: f64,
    pub gap: Gap,
    /// The epoch's wall time in seconds as the run's clock measured it (the elastic
    /// policy's wall clock); `None` without a clock.
    pub seconds: Option<f64>,
    /// The epoch's progress statistic summed over the slots in slot order
    /// ([`super::solver::LocalSolve::progress`]): what the gap schedule calibrates against.
    pub progress: f64,
}

impl EpochRecord {
    /// The record of `primal` and `dual` (epoch and progress 0 until the caller sets them).
    pub fn new(primal: f64, dual: f64) -> Self {
        let absolute = primal - dual;
        let relative = if primal != 0.0 {
            absolute / primal.abs()
        } else if absolute == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        Self { epoch: 0, primal, dual, gap: Gap { absolute, relative }, seconds: None, progress: 0.0 }
    }
}

/// What one epoch changed: replayed onto the state it followed, it gives the next state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CocoaStep {
    /// The epoch count after the step.
    pub epoch: u32,
    /// `(row, new dual variable)` for every dual variable that changed.
    pub alpha: Vec<(u32, f64)>,
    /// `(feature, new exact value)` for every entry of `v` that changed.
    pub v: Vec<(u32, i128)>,
    /// `(feature, new value)` for every entry of a lone slot's model `w` that changed
    /// ([`CocoaState::w`]).
    pub w: Vec<(u32, f64)>,
    /// The epoch's objectives, when its gap was computed.
    pub record: Option<EpochRecord>,
    /// The scale-in decided after this epoch, if any.
    pub scale_in: Option<ScaleIn>,
    /// What the epoch changed in Catalyst's outer loop, when accelerated.
    pub catalyst: Option<CatalystStep>,
    /// The epoch's progress statistic ([`CocoaState::progress`]).
    pub progress: f64,
}
