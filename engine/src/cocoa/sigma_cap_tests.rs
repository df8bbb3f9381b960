//! `sigma' = min(K, cap)` ([`CocoaConfig::with_sigma_cap`]): a cap of at least K changes no
//! bit, and a cap below the safe K may slow or stall the run but never breaks the
//! certificate: every epoch's primal and dual bracket the optimum.

use super::*;
use crate::algorithm::Algorithm;
use crate::loss::Loss;
use crate::reference;
use crate::runner::LocalRunner;

fn run(problem: &crate::synthetic::Problem, config: CocoaConfig) -> Cocoa {
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
    while cocoa.stop_reason().is_none() {
        cocoa.next_iter(&mut runner).unwrap();
    }
    cocoa
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
    let problem = crate::synthetic::problem(Loss::Squared, 6, 600, 90);
    let l2 = 0.5;
    let ridge = reference::ridge(&problem.rows, &problem.targets, problem.features, l2);
    let best = reference::objective(Loss::Squared, &problem.rows, &problem.targets, &ridge, l2);
    for cap in [1.0, 2.0] {
        let config = CocoaConfig::new(Loss::Squared, l2, 8, 1, 40, 0.0, 3).unwrap().with_sigma_cap(cap).unwrap();
        let cocoa = run(&problem, config);
        assert_eq!(cocoa.kernel().sigma, cap);
        for (epoch, record) in cocoa.state().history.iter().enumerate() {
            let slack = 1e-9 * best.abs();
            assert!(record.primal >= best - slack, "cap {cap}, epoch {epoch}: primal {} < P* {best}", record.primal);
            assert!(record.dual <= best + slack, "cap {cap}, epoch {epoch}: dual {} > P* {best}", record.dual);
        }
    }
}
