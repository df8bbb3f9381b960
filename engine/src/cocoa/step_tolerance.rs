//! How exactly the slots solve their logistic steps in an epoch: the inner tolerance the
//! master sends with each [`super::CocoaPhase::LocalSolve`].
//!
//! LIBLINEAR's dual solver (`solve_l2r_lr_dual`) solves each coordinate's Newton problem only to an
//! inner tolerance that starts at 1e-2, and leaves a row whose gradient is already within it after
//! the row's dot product; it tightens the tolerance tenfold after a pass that needed few Newton
//! steps. Late in a run most rows are left after their dot product, and the rest take one or two
//! Newton steps instead of three or four (docs/benchmarks/cocoa-k1-against-liblinear.md). CoCoA
//! does the same with a tolerance that is a function of the checkpointed state, so a restarted
//! master and a redone slot solve the same steps and a run's bytes stay a function of the data, the
//! parameters and K: the tolerance follows the previous epoch's progress statistic
//! ([`super::solver::LocalSolve::progress`], a lower bound on what that epoch raised the dual),
//! which every epoch has whether or not its gap was computed — so the gap schedule still changes
//! only when a run stops, never what an epoch computes.
//!
//! What it costs: a row left within tolerance `tau` gives up at most `tau^2 / 8` of its 1-D
//! objective, a Newton step stopped within it at most `tau^2 / 4`
//! ([`crate::Loss::sdca_step_with`]), so an epoch over `n` rows gives up at most `n tau^2 / 4` of
//! what exact steps would have gained. Under SDCA's linear convergence an epoch gains about `rate`
//! times what the last one did, `rate` = the last progress over the one before; the tolerance keeps
//! the loss within half of that: `n tau^2 / 4 <= progress * rate / 2`, `tau <= 1e-2` (with no rate
//! yet, after the first epoch, `rate` = 0.1). A fixed fraction does not fit both ends: allowing the
//! whole last progress cost rcv1-small an epoch (its gap falls twenty-fold per epoch, so the next
//! gain is a twentieth of the last), while a tenth of it left higgs-sample (a rate of ~0.9) doing
//! 1.7 Newton iterations a row late in the run where the whole progress needs 1.1 (simulations,
//! docs/benchmarks/cocoa-k1-against-liblinear.md). No step ever lowers the dual, so the gap
//! certificate and the stopping rule are unchanged; only the path to the optimum differs from exact
//! steps. The tolerance falls with the progress, so an inexact sweep cannot stall: one that changed
//! nothing (progress 0) is followed by an exact one.
//!
//! Only logistic runs without Catalyst: hinge and squared steps are closed forms, and
//! Catalyst's outer loop assumes its subproblems solved exactly.

use crate::loss::Loss;

/// LIBLINEAR's starting inner tolerance (`innereps = 1e-2`), the loosest used.
pub const START: f64 = 1e-2;

/// The share of the next epoch's expected gain that `n tau^2 / 4` may reach.
const GAIN_SHARE: f64 = 0.5;

/// The convergence rate assumed before two epochs have run.
const FIRST_RATE: f64 = 0.1;

/// The inner tolerance for epoch `epoch + 1` of a run of `rows` rows, given `(epoch,
/// [last, previous])`: the epochs done and the progress statistics of the last two.
pub fn for_next_epoch(loss: Loss, accelerated: bool, (epoch, progress): (u32, [f64; 2]), rows: usize) -> f64 {
    if loss != Loss::Logistic || accelerated {
        return 0.0;
    }
    if epoch == 0 {
        return START;
    }
    let [last, previous] = progress;
    // A sweep that changed nothing (or an undefined statistic): exact steps next.
    if !(last > 0.0) {
        return 0.0;
    }
    let rate = if previous > 0.0 { (last / previous).min(1.0) } else { FIRST_RATE };
    (2.0 * (GAIN_SHARE * rate * last / rows.max(1) as f64).sqrt()).min(START)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tolerance(epoch: u32, progress: [f64; 2]) -> f64 {
        for_next_epoch(Loss::Logistic, false, (epoch, progress), 1000)
    }

    #[test]
    fn it_starts_at_liblinears_and_tightens_with_the_progress_and_its_rate() {
        assert_eq!(tolerance(0, [0.0; 2]), START);
        assert_eq!(tolerance(3, [100.0, 110.0]), START);
        // n tau^2 / 4 is half the last progress times the rate.
        let check = |progress: [f64; 2], share: f64| {
            let tau = tolerance(30, progress);
            assert!((1000.0 * tau * tau / 4.0 - share).abs() < 1e-15, "{progress:?}: {tau}");
        };
        check([1e-3, 2e-3], 0.5 * 0.5 * 1e-3);
        check([1e-3, 0.0], 0.5 * FIRST_RATE * 1e-3);
        check([1e-3, 1e-4], 0.5 * 1e-3); // a rise: the rate is capped at 1
        // Faster convergence, tighter steps.
        assert!(tolerance(9, [1e-3, 1e-2]) < tolerance(9, [1e-3, 1.2e-3]));
    }

    #[test]
    fn closed_form_steps_catalyst_stalls_and_odd_statistics_are_exact() {
        assert_eq!(for_next_epoch(Loss::Hinge, false, (3, [1.0; 2]), 1000), 0.0);
        assert_eq!(for_next_epoch(Loss::Squared, false, (0, [0.0; 2]), 1000), 0.0);
        assert_eq!(for_next_epoch(Loss::Logistic, true, (0, [0.0; 2]), 1000), 0.0);
        assert_eq!(tolerance(7, [0.0, 1.0]), 0.0, "a stall");
        assert_eq!(tolerance(7, [-1e-9, 1.0]), 0.0);
        assert_eq!(tolerance(7, [f64::NAN, 1.0]), 0.0);
        assert_eq!(tolerance(7, [f64::INFINITY, 1.0]), START);
    }
}
