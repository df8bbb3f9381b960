//! Accelerated CoCoA (Catalyst's outer loop) on small synthetic grids: against the direct
//! solvers, its certificate recomputed from the rows every epoch (the original problem's and
//! the subproblem's), how many epochs it saves at K > 1, and its determinism through
//! threads, rebuilt slots and replayed checkpoints.

use super::tests::{problem, relative, train, train_keeping_steps, weights_bits};
use super::*;
use crate::algorithm::{Algorithm, Recovery, encode};
use crate::loss::Loss;
use crate::reference;
use crate::runner::LocalRunner;
use crate::synthetic::Problem;

fn accelerated(loss: Loss, l2: f64, slots: u32, epochs: u32, gap: f64, kappa: Option<f64>) -> CocoaConfig {
    CocoaConfig::new(loss, l2, slots, 1, epochs, gap, 11)
        .unwrap()
        .with_accelerate(AccelerateConfig::new(kappa).unwrap())
        .unwrap()
}

fn optimum(loss: Loss, problem: &Problem, l2: f64) -> f64 {
    let w = match loss {
        Loss::Squared => reference::ridge(&problem.rows, &problem.targets, problem.features, l2),
        _ => reference::logistic(&problem.rows, &problem.targets, problem.features, l2),
    };
    reference::objective(loss, &problem.rows, &problem.targets, &w, l2)
}

/// `X' alpha`, summed densely from the rows.
fn x_alpha(problem: &Problem, alpha: &[f64]) -> Vec<f64> {
    let mut v = vec![0.0; problem.features];
    for (row, &a) in problem.rows.iter().zip(alpha) {
        row.iter().for_each(|&(j, x)| v[j] += a * x);
    }
    v
}

#[test]
fn accelerated_runs_reach_the_direct_solvers_optimum() {
    for (loss, l2, tolerance) in [(Loss::Squared, 0.5, 1e-12), (Loss::Logistic, 0.1, 1e-11)] {
        let problem = problem(loss, 1);
        let best = optimum(loss, &problem, l2);
        for slots in [1, 4] {
            let cocoa = train(&problem, accelerated(loss, l2, slots, 20000, tolerance, None), 2);
            assert_eq!(cocoa.stop_reason(), Some(StopReason::GapReached), "{loss:?} K={slots}");
            let w = cocoa.flat_weights();
            let reached = reference::objective(loss, &problem.rows, &problem.targets, &w, l2);
            assert!(relative(reached, best) <= 2.0 * tolerance, "{loss:?} K={slots}: {reached} vs {best}");
            let reported = cocoa.progress().objective.unwrap();
            assert!(relative(reported, reached) <= 1e-12, "{loss:?} K={slots}: reported {reported}, model's {reached}");
            assert!(cocoa.state().catalyst.as_ref().unwrap().outer >= 2, "the outer loop ran");
        }
        if loss == Loss::Squared {
            let cocoa = train(&problem, accelerated(loss, l2, 3, 20000, tolerance, None), 2);
            let ridge = reference::ridge(&problem.rows, &problem.targets, problem.features, l2);
            let off = cocoa.flat_weights().iter().zip(&ridge).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(off <= 1e-5, "weights differ from ridge by {off}");
        }
    }
}

/// Every epoch, recomputed from the rows: the epoch's own original primal (at its point
/// `c + v/lambda'`) and original dual (at its duals); the subproblem's gap, from the centre
/// the epoch started with; the reported primal is the returned model's; the reported gap
/// never increases and covers the distance to the optimum; each outer update extrapolates.
#[test]
fn the_reported_gap_certifies_the_original_problem_every_epoch() {
    for (loss, l2, tolerance) in [(Loss::Squared, 0.5, 1e-9), (Loss::Logistic, 0.1, 1e-9), (Loss::Hinge, 0.1, 1e-6)] {
        let problem = problem(loss, 3);
        let optimum = (loss != Loss::Hinge).then(|| optimum(loss, &problem, l2));
        for slots in [1, 2, 4] {
            let config = accelerated(loss, l2, slots, 10000, tolerance, None);
            let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
            let kappa = cocoa.kappa().unwrap();
            let lambda_inner = 2.0 * l2 + kappa;
            let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
            let mut previous_gap = f64::INFINITY;
            while cocoa.stop_reason().is_none() {
                let before = cocoa.state().catalyst.clone().unwrap();
                cocoa.next_iter(&mut runner, Recovery::Needed).unwrap();
                let at = format!("{loss:?} K={slots} epoch {}", cocoa.state().epoch);
                let after = cocoa.state().catalyst.as_ref().unwrap();
                let own = *after.records.last().unwrap();
                let v = x_alpha(&problem, &cocoa.state().alpha);
                let x: Vec<f64> = v.iter().zip(&before.y).map(|(v, y)| (v + kappa * y) / lambda_inner).collect();
                let primal = reference::objective(loss, &problem.rows, &problem.targets, &x, l2);
                let conjugates: f64 =
                    problem.targets.iter().zip(&cocoa.state().alpha).map(|(&y, &a)| loss.conjugate(y, -a)).sum();
                let vv: f64 = v.iter().map(|x| x * x).sum();
                let dual = -conjugates - vv / (4.0 * l2);
                let scale = primal.abs();
                assert!((own.primal - primal).abs() <= 1e-11 * scale, "{at}: primal {} vs {primal}", own.primal);
                assert!((own.dual - dual).abs() <= 1e-11 * scale, "{at}: dual {} vs {dual}", own.dual);
                // The subproblem: sum loss + (lambda'/2)|x - c|^2 against its dual, c = kappa y / lambda'.
                let c: Vec<f64> = before.y.iter().map(|y| kappa * y / lambda_inner).collect();
                let losses = primal - l2 * x.iter().map(|x| x * x).sum::<f64>();
                let inner_primal =
                    losses + lambda_inner / 2.0 * x.iter().zip(&c).map(|(x, c)| (x - c) * (x - c)).sum::<f64>();
                let inner_dual =
                    -conjugates - c.iter().zip(&v).map(|(c, v)| c * v).sum::<f64>() - vv / (2.0 * lambda_inner);
                let inner_gap = inner_primal - inner_dual;
                assert!((own.inner_gap - inner_gap).abs() <= 1e-10 * scale, "{at}: {} vs {inner_gap}", own.inner_gap);
                assert!(own.inner_gap >= -1e-10 * scale, "{at}: a negative subproblem gap {}", own.inner_gap);
                if own.outer_done {
                    // The extrapolation itself: `outer_loop_extrapolates` below.
                    let off = after.x_prev.iter().zip(&x).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                    assert!(off <= 1e-9, "{at}: x_k is the subproblem's last point (off by {off})");
                    assert_eq!((after.outer, after.inner_epochs), (before.outer + 1, 0), "{at}");
                } else {
                    assert_eq!((&after.y, after.inner_epochs), (&before.y, before.inner_epochs + 1), "{at}");
                }
                // What is reported: the best primal (the returned model's) and the best dual.
                let record = *cocoa.state().history.last().unwrap();
                let model = reference::objective(loss, &problem.rows, &problem.targets, &cocoa.flat_weights(), l2);
                assert!((record.primal - model).abs() <= 1e-11 * scale, "{at}: {} vs model {model}", record.primal);
                assert!(record.primal <= own.primal && record.dual >= own.dual, "{at}");
                assert!(record.gap.absolute <= previous_gap, "{at}: gap rose {previous_gap} -> {:?}", record.gap);
                previous_gap = record.gap.absolute;
                if let Some(optimum) = optimum {
                    let distance = record.primal - optimum;
                    assert!(record.gap.absolute >= distance - 1e-11 * scale, "{at}: gap {:?} < {distance}", record.gap);
                    assert!(record.dual <= optimum * (1.0 + 1e-12), "{at}: dual {} above P* {optimum}", record.dual);
                }
            }
            assert_eq!(cocoa.stop_reason(), Some(StopReason::GapReached), "{loss:?} K={slots}");
        }
    }
}

/// The outer update is Catalyst's for `mu > 0`: `y_{k+1} = x_k + beta (x_k - x_{k-1})`,
/// `beta = (1 - sqrt q) / (1 + sqrt q)`, `q = lambda / (lambda + kappa)`.
#[test]
fn outer_loop_extrapolates() {
    let problem = problem(Loss::Logistic, 4);
    let (l2, kappa) = (0.1, 3.0);
    let mut cocoa = Cocoa::for_grid(accelerated(Loss::Logistic, l2, 2, 400, 0.0, Some(kappa)), &problem.grid).unwrap();
    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 2);
    let sqrt_q = (2.0 * l2 / (2.0 * l2 + kappa)).sqrt();
    let beta = (1.0 - sqrt_q) / (1.0 + sqrt_q);
    let mut updates = 0;
    while cocoa.stop_reason().is_none() {
        let before = cocoa.state().catalyst.clone().unwrap();
        cocoa.next_iter(&mut runner, Recovery::Needed).unwrap();
        let after = cocoa.state().catalyst.as_ref().unwrap();
        if after.outer > before.outer {
            updates += 1;
            for ((y, x), p) in after.y.iter().zip(&after.x_prev).zip(&before.x_prev) {
                assert_eq!(y.to_bits(), (x + beta * (x - p)).to_bits());
            }
        }
    }
    assert!(updates >= 10, "{updates} outer updates in 400 epochs");
}

/// Where K > 1 is slow (the slow mode of docs/algorithms.md), the outer loop needs fewer
/// epochs to the same certified gap; K = 1 is fast either way.
#[test]
fn acceleration_saves_epochs_where_slots_are_slow() {
    let problem = problem(Loss::Logistic, 7);
    // Epochs to the gap, or the limit (a lower bound) for a plain run that does not get there.
    let epochs = |config: CocoaConfig| train(&problem, config, 2).state().epoch;
    for slots in [2, 4] {
        let plain = epochs(CocoaConfig::new(Loss::Logistic, 0.05, slots, 1, 20000, 1e-8, 11).unwrap());
        let run = train(&problem, accelerated(Loss::Logistic, 0.05, slots, 20000, 1e-8, None), 2);
        assert_eq!(run.stop_reason(), Some(StopReason::GapReached), "K={slots}");
        let fast = run.state().epoch;
        println!("K={slots}: {plain} epochs plain, {fast} accelerated");
        assert!(2 * fast < plain, "K={slots}: {fast} accelerated vs {plain} plain");
    }
}

/// The bytes depend on the data, the parameters and K only: 1 or 3 threads, every slot
/// rebuilt from the committed duals every few epochs, or a master restarted from replayed
/// checkpoint steps give the same state and model.
#[test]
fn accelerated_bytes_survive_threads_rebuilt_slots_and_replayed_steps() {
    for loss in [Loss::Logistic, Loss::Hinge] {
        let problem = problem(loss, 5);
        let config = accelerated(loss, 0.2, 3, 120, 0.0, None);
        let one = train(&problem, config, 1);
        let three = train(&problem, config, 3);
        assert_eq!(encode(one.state()), encode(three.state()), "{loss:?}");
        assert_eq!(weights_bits(&one), weights_bits(&three), "{loss:?}");
        // Hinge's subproblems take longer (its conjugate has no curvature).
        let outer = one.state().catalyst.as_ref().unwrap().outer;
        assert!(outer >= if loss == Loss::Hinge { 1 } else { 3 }, "{loss:?}: the outer loop ran {outer} times");

        let (cocoa, steps) = train_keeping_steps(&problem, config, |cocoa, runner| {
            if cocoa.state().epoch % 7 == 3 {
                runner.restore_all(&cocoa.mirror()).unwrap();
            }
        });
        assert_eq!(encode(one.state()), encode(cocoa.state()), "{loss:?}: rebuilt slots");

        // A master restarted halfway: the steps replayed, a new runner from the mirror.
        let mut resumed = Cocoa::for_grid(config, &problem.grid).unwrap();
        for step in steps.iter().take(steps.len() / 2).cloned() {
            resumed.replay(step).unwrap();
        }
        let mut runner = LocalRunner::new(resumed.kernel().clone(), &problem.grid, 2);
        runner.restore_all(&resumed.mirror()).unwrap();
        while resumed.stop_reason().is_none() {
            resumed.next_iter(&mut runner, Recovery::Needed).unwrap();
        }
        assert_eq!(encode(one.state()), encode(resumed.state()), "{loss:?}: replayed");
        assert_eq!(weights_bits(&one), weights_bits(&resumed), "{loss:?}: replayed");

        // A plain run's step does not replay onto an accelerated run, nor the reverse.
        let plain_config = CocoaConfig::new(loss, 0.2, 3, 1, 60, 0.0, 11).unwrap();
        let mut plain = Cocoa::for_grid(plain_config, &problem.grid).unwrap();
        assert!(plain.replay(steps[0].clone()).is_err());
        let mut runner = LocalRunner::new(plain.kernel().clone(), &problem.grid, 1);
        let plain_step = plain.next_iter(&mut runner, Recovery::Needed).unwrap().step;
        assert!(Cocoa::for_grid(config, &problem.grid).unwrap().replay(plain_step).is_err());
    }
}
