//! When CoCoA computes its duality gap.
//!
//! The exact gap costs a full pass over the data (every loss at `w` and every conjugate:
//! [`super::CocoaPhase::Evaluate`]); with one slot and one local pass that was ~28% of a
//! run's instructions on a9a. LIBLINEAR's dual solver stops on a projected-gradient test it
//! gets for free during its sweep; that test is a heuristic, while the gap is a
//! certificate (`P(w) - P* <= P(w) - D(alpha)`), so here the gap stays the only stopping
//! test and a free statistic of the sweep only decides *when* it is worth computing.
//!
//! The statistic is the local solve's progress ([`super::solver::LocalSolve::progress`]):
//! `sum q_i delta_i^2 / 2` over the epoch's steps, a lower bound on the dual's rise. Under
//! the linear convergence SDCA has on these problems the dual's rise per epoch is a fixed
//! fraction of the dual's distance to the optimum, and the gap falls at the same rate, so
//! `gap / progress` drifts slowly. [`GapSchedule::Adaptive`] calibrates that ratio at the
//! last epoch whose gap was computed and evaluates again when the calibrated prediction
//! `gap_last * progress_now / progress_last` reaches the tolerance. A wrong prediction costs
//! time, never correctness:
//! - too early: the gap is computed, found above the tolerance, and the ratio recalibrated;
//! - too late (the ratio fell): at most [`MAX_SKIP_FRACTION`] of the epochs run so far pass
//!   without a gap, so the run overshoots by a bounded fraction, and the run's last epoch
//!   (`max_epochs`) always computes one.
//!
//! A run stops on the gap only at an epoch whose gap was computed and met the tolerance
//! ([`super::Cocoa`]'s `stop_reason`); the epochs between have no objective or gap in the
//! history, the trace or the plot (they are not interpolated). The model after a given
//! epoch does not depend on the schedule: the gap pass reads the state and changes nothing.

use super::state::EpochRecord;
use serde::{Deserialize, Serialize};

/// When the gap is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GapSchedule {
    /// After every epoch.
    EveryEpoch,
    /// When the sweep's progress statistic predicts the tolerance is met (module docs).
    Adaptive,
}

/// The longest run of epochs without a gap, as a fraction of the epoch the last gap was
/// computed at (rounded up, at least 1): gaps are computed at least at epochs `e`, `1.5e`,
/// `2.25e`, ..., so a prediction that never reaches the tolerance costs a logarithmic number
/// of evaluations and a run overshoots the epoch its gap met the tolerance by at most half.
pub const MAX_SKIP_FRACTION: f64 = 0.5;

/// Whether to compute the gap after epoch `epoch` (1-based, just completed), whose sweep
/// had progress statistic `progress`, given the last record whose gap was computed.
pub fn evaluate_now(
    schedule: GapSchedule,
    tolerance: f64,
    epoch: u32,
    max_epochs: u32,
    last: Option<&EpochRecord>,
    progress: f64,
) -> bool {
    let Some(last) = last else { return true };
    if schedule == GapSchedule::EveryEpoch || epoch >= max_epochs {
        return true;
    }
    let max_skip = ((last.epoch as f64 * MAX_SKIP_FRACTION).ceil() as u32).max(1);
    if epoch.saturating_sub(last.epoch) >= max_skip {
        return true;
    }
    let calibrated = last.gap.relative.is_finite() && last.progress.is_finite() && last.progress > 0.0;
    if !calibrated || !progress.is_finite() {
        return true;
    }
    last.gap.relative * (progress / last.progress) <= tolerance
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(epoch: u32, relative_gap: f64, progress: f64) -> EpochRecord {
        let mut r = EpochRecord::new(1.0, 1.0 - relative_gap);
        r.epoch = epoch;
        r.progress = progress;
        r
    }

    #[test]
    fn the_first_and_the_last_epoch_always_compute_the_gap() {
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 1, 100, None, 5.0));
        let far = record(10, 1e-1, 1.0);
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 11, 100, Some(&far), 0.9));
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 11, 11, Some(&far), 0.9), "max_epochs");
        assert!(evaluate_now(GapSchedule::EveryEpoch, 1e-6, 11, 100, Some(&far), 0.9));
    }

    #[test]
    fn far_from_the_tolerance_it_skips_and_near_it_evaluates() {
        let last = record(20, 1e-2, 1.0);
        // Progress halved: predicted gap 5e-3, far above 1e-6.
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, Some(&last), 0.5));
        // Progress fell by 2e4 since the last gap of 1e-2: predicted 5e-7, below 1e-6.
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 25, 1000, Some(&last), 0.5e-4));
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 25, 1000, Some(&last), 2e-4));
    }

    #[test]
    fn a_prediction_that_never_comes_true_is_checked_within_half_the_epochs_run() {
        let last = record(20, 1e-2, 1.0);
        let skipped: Vec<u32> =
            (21..=40).filter(|&e| !evaluate_now(GapSchedule::Adaptive, 1e-6, e, 1000, Some(&last), 1.0)).collect();
        assert_eq!(skipped, (21..30).collect::<Vec<_>>(), "epoch 30 = 20 + 20/2 computes the gap");
        let first = record(1, 0.5, 1.0);
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 2, 1000, Some(&first), 1.0), "never skips from epoch 1");
    }

    #[test]
    fn an_uncalibrated_ratio_computes_the_gap() {
        for (gap, progress, now) in [(f64::INFINITY, 1.0, 0.5), (1e-2, 0.0, 0.0), (1e-2, 1.0, f64::NAN)] {
            let last = record(20, gap, progress);
            assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, Some(&last), now), "{gap} {progress} {now}");
        }
        // A sweep that changed nothing predicts a zero gap: it is computed (and certifies it).
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, Some(&record(20, 1e-2, 1.0)), 0.0));
    }
}
