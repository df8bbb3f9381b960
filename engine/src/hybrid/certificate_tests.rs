//! The gradient certificate of the batch family (`LinearState::certificate`) against direct
//! solvers: a true bound on the distance to the optimum at every epoch, and a stop on it
//! that ends within its tolerance without changing the iterates.

use super::tests::{optimum, problem, run};
use super::*;
use crate::algorithm::{Algorithm, Recovery, StopReason};
use crate::loss::Loss;
use crate::runner::LocalRunner;

fn config(mode: Mode, loss: Loss, l2: f64, epochs: u32) -> LinearConfig {
    LinearConfig::new(mode, loss, l2, 2, 15, epochs, 1e-13, 1e-12, 0.5, 3).unwrap()
}

#[test]
fn the_certificate_bounds_the_distance_to_the_direct_optimum_at_every_epoch() {
    for (mode, loss, l2) in
        [(Mode::Lbfgs, Loss::Logistic, 1.0), (Mode::Lbfgs, Loss::Squared, 2.0), (Mode::Hybrid, Loss::Logistic, 0.5)]
    {
        let p = problem(loss, 11);
        let best = optimum(&p, loss, l2);
        let mut linear = Linear::for_grid(config(mode, loss, l2, 60), &p.grid).unwrap();
        let mut runner = LocalRunner::new(linear.kernel().clone(), &p.grid, 2);
        let start = linear.progress();
        assert!(start.initial_gap.is_none(), "nothing is evaluated before the first epoch");
        let mut tightest = f64::INFINITY;
        while linear.stop_reason().is_none() {
            linear.next_iter(&mut runner, Recovery::Needed).unwrap();
            let progress = linear.progress();
            let (f, gap) = (progress.objective.unwrap(), progress.gap.expect("a certificate after every epoch"));
            // The bound holds up to the rounding of f and of the direct optimum.
            assert!(gap.absolute >= (f - best) - 1e-9 * best, "{mode:?} {loss:?}: {gap:?} below {} at {f}", f - best);
            assert_eq!(gap.relative, gap.absolute / f);
            let initial = progress.initial_gap.expect("the start's certificate");
            assert!(initial.absolute >= progress.initial_objective.unwrap() - best);
            tightest = tightest.min(gap.relative);
        }
        // Not vacuous: it certifies the run's end to far below the tolerances used.
        assert!(tightest < 1e-9, "{mode:?} {loss:?}: the certificate never fell below {tightest}");
    }
}

#[test]
fn a_certified_stop_ends_within_its_tolerance_on_the_same_iterates() {
    for (loss, l2) in [(Loss::Logistic, 1.0), (Loss::Squared, 2.0)] {
        let p = problem(loss, 13);
        let best = optimum(&p, loss, l2);
        let full = run(&p, config(Mode::Lbfgs, loss, l2, 200), 1);
        let certified = run(&p, config(Mode::Lbfgs, loss, l2, 200).with_gap_tolerance(1e-6).unwrap(), 1);
        let stopped = certified.state();
        assert_eq!(certified.stop_reason(), Some(StopReason::GapReached), "{loss:?}");
        let f = *stopped.objectives.last().unwrap();
        assert!((f - best) / best <= 1e-6, "{loss:?}: {f} vs {best}");
        assert!(stopped.epoch < full.state().epoch, "{loss:?}: the certificate stopped no sooner");
        // The stop decides when to stop, never the steps: the same objectives up to it.
        assert_eq!(stopped.objectives[..], full.state().objectives[..stopped.objectives.len()], "{loss:?}");
    }
}

#[test]
fn no_certificate_without_an_l2_term_and_out_of_range_tolerances_are_refused() {
    let p = problem(Loss::Squared, 17);
    let linear = run(&p, config(Mode::Lbfgs, Loss::Squared, 0.0, 5), 1);
    assert_eq!(linear.progress().gap, None, "squared loss at l2 = 0 is not strongly convex");
    for bad in [-1e-6, 1.0, f64::NAN] {
        assert!(config(Mode::Lbfgs, Loss::Squared, 1.0, 5).with_gap_tolerance(bad).is_err(), "{bad}");
    }
}
