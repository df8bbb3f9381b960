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
//! `gap_last * progress_now / progress_last` reaches the tolerance. What it calibrates on is
//! the dual's part of the last gap, bounded through the best primal seen: `P* <= min_k P(w_k)`,
//! so `min_k P(w_k) - D(alpha_last)` bounds the dual's distance `D* - D(alpha_last)`, which
//! is what shrinks at the sweep's rate. The primal's own part does not shrink smoothly: SDCA's
//! `w = v / lambda` wanders by the last steps of each sweep (higgs-sample, K = 1: `P - P*`
//! 3.6e-8 after epoch 69, 8.5e-7 after 70, 6.3e-8 after 71, relative), and calibrating on a
//! gap inflated by it delayed the next gap by as many epochs as the sweep's rate needs to
//! shrink that inflation (the next gap came at 76, the gap met 1e-6 at 71). A wrong
//! prediction costs time, never correctness:
//! - too early: the gap is computed, found above the tolerance, and the ratio recalibrated;
//! - too late (the ratio fell): at most [`MAX_SKIP_FRACTION`] of the epochs run so far pass
//!   without a gap (and at least [`MIN_SKIP`] are allowed), so the run overshoots by a
//!   bounded fraction, and the run's last epoch (`max_epochs`) always computes one.
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
/// computed at (rounded up, at least [`MIN_SKIP`]): gaps are computed at least at epochs
/// `e`, `1.5e`, `2.25e`, ..., so a prediction that never reaches the tolerance costs a
/// logarithmic number of evaluations and a run overshoots the epoch its gap met the
/// tolerance by at most half (or by one epoch, early in the run).
pub const MAX_SKIP_FRACTION: f64 = 0.5;

/// The guard lets at least this many epochs follow a computed gap before it forces the next (the
/// prediction may ask sooner). With 1 the guard alone computed gaps after epochs 1, 2 and 3 of
/// every run; on the six shared sets (K = 1, gap 1e-6, gaps after every epoch recorded and the
/// schedule replayed over them) the one after epoch 2 never certified and, dropped, changes no
/// run's stopping epoch: one gap pass fewer a run (rcv1-small: 4 of 5 epochs computed a gap, now
/// 3). Larger minima, a guard of a whole fraction, or none at all each moved some set's stop later
/// (docs/benchmarks/cocoa-k1-against-liblinear.md, "Recoverable only when it must be").
pub const MIN_SKIP: u32 = 2;

/// Whether to compute the gap after epoch `epoch` (1-based, just completed), whose sweep
/// had progress statistic `progress`, given the records of the epochs whose gap was computed
/// (in epoch order).
pub fn evaluate_now(
    schedule: GapSchedule,
    tolerance: f64,
    epoch: u32,
    max_epochs: u32,
    history: &[EpochRecord],
    progress: f64,
) -> bool {
    let Some(last) = history.last() else { return true };
    if schedule == GapSchedule::EveryEpoch || epoch >= max_epochs {
        return true;
    }
    let max_skip = ((last.epoch as f64 * MAX_SKIP_FRACTION).ceil() as u32).max(MIN_SKIP);
    if epoch.saturating_sub(last.epoch) >= max_skip {
        return true;
    }
    let gap = dual_part(history, last);
    let calibrated = gap.is_finite() && last.progress.is_finite() && last.progress > 0.0;
    if !calibrated || !progress.is_finite() {
        return true;
    }
    gap * (progress / last.progress) <= tolerance
}

/// The relative gap between the best primal of `history` and the dual of `last`: at most
/// `last`'s own gap, at least the dual's relative distance to the optimum (module docs).
/// A gap that is not finite stays as it is (an uncalibrated ratio computes the gap).
fn dual_part(history: &[EpochRecord], last: &EpochRecord) -> f64 {
    let own = last.gap.relative;
    if !own.is_finite() {
        return own;
    }
    let best = history.iter().map(|r| r.primal).fold(last.primal, f64::min);
    let bounded = EpochRecord::new(best, last.dual).gap.relative;
    if bounded < own { bounded } else { own }
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
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 1, 100, &[], 5.0));
        let far = record(10, 1e-1, 1.0);
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 11, 100, std::slice::from_ref(&far), 0.9));
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 11, 11, std::slice::from_ref(&far), 0.9), "max_epochs");
        assert!(evaluate_now(GapSchedule::EveryEpoch, 1e-6, 11, 100, std::slice::from_ref(&far), 0.9));
    }

    #[test]
    fn far_from_the_tolerance_it_skips_and_near_it_evaluates() {
        let last = record(20, 1e-2, 1.0);
        // Progress halved: predicted gap 5e-3, far above 1e-6.
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, std::slice::from_ref(&last), 0.5));
        // Progress fell by 2e4 since the last gap of 1e-2: predicted 5e-7, below 1e-6.
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 25, 1000, std::slice::from_ref(&last), 0.5e-4));
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 25, 1000, std::slice::from_ref(&last), 2e-4));
    }

    #[test]
    fn a_prediction_that_never_comes_true_is_checked_within_half_the_epochs_run() {
        let last = record(20, 1e-2, 1.0);
        let skipped: Vec<u32> = (21..=40)
            .filter(|&e| !evaluate_now(GapSchedule::Adaptive, 1e-6, e, 1000, std::slice::from_ref(&last), 1.0))
            .collect();
        assert_eq!(skipped, (21..30).collect::<Vec<_>>(), "epoch 30 = 20 + 20/2 computes the gap");
        // Early in a run the guard still waits MIN_SKIP epochs: after epoch 1 (whose half
        // rounds up to 1) the next forced gap is after epoch 3, not 2.
        let first = record(1, 0.5, 1.0);
        let forced = |e| evaluate_now(GapSchedule::Adaptive, 1e-6, e, 1000, std::slice::from_ref(&first), 1.0);
        assert!(!forced(2) && forced(3), "MIN_SKIP = {MIN_SKIP}");
    }

    /// higgs-sample's records (K = 1, relative to `P*` = 1): the gap after epoch 70 is
    /// inflated by its primal's wander, the one after 69 had a better primal.
    fn higgs(epoch: u32, primal: f64, dual: f64) -> EpochRecord {
        let mut r = EpochRecord::new(1.0 + primal, 1.0 - dual);
        r.epoch = epoch;
        r.progress = 1.0;
        r
    }

    #[test]
    fn a_wandering_primal_does_not_delay_the_next_gap() {
        let (r69, r70) = (higgs(69, 3.6e-8, 1.0e-6), higgs(70, 8.5e-7, 9.1e-7));
        // On its own gap (1.76e-6) epoch 71's sweep (progress 0.9) predicts 1.58e-6: skipped,
        // and the next gap waited for the sweep to shrink the primal's wander too.
        assert!(!evaluate_now(GapSchedule::Adaptive, 1e-6, 71, 1000, std::slice::from_ref(&r70), 0.9));
        // With epoch 69's primal as the bound on P*: (3.6e-8 + 9.1e-7) * 0.9 = 8.5e-7.
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 71, 1000, &[r69, r70], 0.9));
        // A better primal later than the best never raises the prediction above its own gap.
        assert_eq!(dual_part(&[r70, r69], &r69), r69.gap.relative);
        // A non-finite gap stays uncalibrated whatever the history holds.
        let broken = EpochRecord::new(f64::NAN, 0.0);
        assert!(dual_part(&[r69, broken], &broken).is_nan());
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 71, 1000, &[r69, broken], 0.9));
    }

    #[test]
    fn an_uncalibrated_ratio_computes_the_gap() {
        for (gap, progress, now) in [(f64::INFINITY, 1.0, 0.5), (1e-2, 0.0, 0.0), (1e-2, 1.0, f64::NAN)] {
            let last = record(20, gap, progress);
            assert!(
                evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, std::slice::from_ref(&last), now),
                "{gap} {progress} {now}"
            );
        }
        // A sweep that changed nothing predicts a zero gap: it is computed (and certifies it).
        assert!(evaluate_now(GapSchedule::Adaptive, 1e-6, 21, 1000, &[record(20, 1e-2, 1.0)], 0.0));
    }
}
