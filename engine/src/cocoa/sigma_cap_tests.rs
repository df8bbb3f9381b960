//! `sigma' = min(K, cap)` ([`CocoaConfig::with_sigma_cap`]): a cap of at least K changes no
//! bit; a cap below the safe K may slow, stall or diverge, but never breaks the certificate
//! (every dual stays below every primal), and a divergence ends in an error, not a model.

use super::*;
use crate::algorithm::{Algorithm, Recovery};
use crate::loss::Loss;
use crate::runner::LocalRunner;

/// Runs to the stopping rule on 2 threads.
fn run(problem: &crate::synthetic::Problem, config: CocoaConfig) -> Cocoa {
    super::tests::train(problem, config, 2)
}

#[test]
fn a_cap_of_at_least_k_changes_no_bit() {
    let problem = crate::synthetic::problem(Loss::Hinge, 5, 600, 90);
    let config = CocoaConfig::new(Loss::Hinge, 2.0, 4, 1, 30, 0.0, 3).unwrap();
    let bits = |c: &Cocoa| c.flat_weights().iter().map(|w| w.to_bits()).collect::<Vec<_>>();
    let safe = run(&problem, config);
    for cap in [4.0, 1e6] {
        let capped = run(&problem, config.with_sigma_cap(cap).unwrap());
        assert_eq!(bits(&capped), bits(&safe), "cap {cap}");
        assert_eq!(capped.kernel().sigma, 4.0);
    }
    assert!(config.with_sigma_cap(0.5).is_err());
    assert!(config.with_sigma_cap(f64::NAN).is_err());
}

#[test]
fn below_k_the_gap_still_brackets_the_optimum() {
    // Hinge duals are boxed, so a cap below the bound cannot blow up: every dual the run
    // reaches must stay below every primal (D(alpha) <= P* <= P(w)).
    let problem = crate::synthetic::problem(Loss::Hinge, 6, 600, 90);
    for cap in [1.0, 2.0] {
        let config = CocoaConfig::new(Loss::Hinge, 0.5, 8, 1, 40, 0.0, 3)
            .unwrap()
            .with_sigma_cap(cap)
            .unwrap()
            .with_gap_every_epoch();
        let cocoa = run(&problem, config);
        assert_eq!(cocoa.kernel().sigma, cap);
        let history = &cocoa.state().history;
        assert_eq!(history.len(), 40);
        let best_dual = history.iter().map(|r| r.dual).fold(f64::NEG_INFINITY, f64::max);
        let best_primal = history.iter().map(|r| r.primal).fold(f64::INFINITY, f64::min);
        assert!(best_dual <= best_primal, "cap {cap}: dual {best_dual} above primal {best_primal}");
    }
}

#[test]
fn a_diverging_cap_stops_with_a_range_error_not_a_model() {
    // Squared loss has unbounded duals: sigma' = 1 with 8 slots on this data overshoots every
    // epoch until a sum leaves the exact range, and the run must stop there with an error.
    let problem = crate::synthetic::problem(Loss::Squared, 6, 600, 90);
    let config = CocoaConfig::new(Loss::Squared, 0.5, 8, 1, 2000, 0.0, 3).unwrap().with_sigma_cap(1.0).unwrap();
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
    let error = loop {
        assert!(cocoa.stop_reason().is_none(), "the run converged or ran out of epochs instead of diverging");
        if let Err(e) = cocoa.next_iter(&mut runner, Recovery::Needed) {
            break e;
        }
    };
    assert!(matches!(error, crate::EngineError::OutOfRange { .. }), "{error}");
}
