//! One slot without the exchange ([`super::solo`]): the lone slot's model against the
//! optimum and against `X'alpha / lambda` recomputed from the rows, and its bytes through
//! repeats, rebuilt slots, handovers, a replayed checkpoint and a scale-in to one slot; and
//! epochs that leave the duals and the model on the slot until they are collected.

use super::tests::{config, elastic, problem, relative, train, train_keeping_steps, weights_bits};
use super::*;
use crate::algorithm::{Algorithm, Kernel, PhaseOutput, PhaseRequest, Recovery, Runner, decode, encode};
use crate::error::EngineError;
use crate::loss::Loss;
use crate::reference;
use crate::runner::LocalRunner;

/// `X'alpha / lambda`, summed densely from the rows: the model the dual variables define.
fn model_of_duals(problem: &crate::synthetic::Problem, alpha: &[f64], lambda: f64) -> Vec<f64> {
    let mut xa = vec![0.0; problem.features];
    for (row, &a) in problem.rows.iter().zip(alpha) {
        row.iter().for_each(|&(j, x)| xa[j] += a * x);
    }
    xa.iter().map(|x| x / lambda).collect()
}

/// The lone slot's model is the state's `w` (no `v` kept, none in any step), it is `X'alpha
/// / lambda` to rounding, the dual never falls, and the run reaches the Newton optimum.
#[test]
fn a_lone_slot_holds_the_model_and_reaches_the_optimum() {
    let problem = problem(Loss::Logistic, 21);
    let l2 = 0.05;
    let config = config(Loss::Logistic, l2, 1, 1, 5000, 1e-10).with_gap_every_epoch();
    let (cocoa, steps) = train_keeping_steps(&problem, config, |_, _| {});
    let state = cocoa.state();
    assert_eq!(cocoa.stop_reason(), Some(StopReason::GapReached));
    assert!(state.v.is_empty() && state.w.len() == problem.features);
    assert!(steps.iter().all(|s| s.v.is_empty()), "a lone slot's epoch crossed as sums of v");
    assert!(steps.iter().any(|s| !s.w.is_empty()));
    assert_eq!(cocoa.flat_weights(), state.w);
    let from_duals = model_of_duals(&problem, &state.alpha, 2.0 * l2);
    let scale = from_duals.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (w, d) in state.w.iter().zip(&from_duals) {
        assert!((w - d).abs() <= 1e-12 * scale, "w {w} against X'alpha / lambda {d}");
    }
    assert!(state.history.windows(2).all(|h| h[1].dual >= h[0].dual - 1e-12 * h[0].primal.abs()));
    let newton = reference::logistic(&problem.rows, &problem.targets, problem.features, l2);
    let best = reference::objective(Loss::Logistic, &problem.rows, &problem.targets, &newton, l2);
    assert!(relative(cocoa.progress().objective.unwrap(), best) <= 1e-9);
    assert!(
        relative(reference::objective(Loss::Logistic, &problem.rows, &problem.targets, &state.w, l2), best) <= 1e-9
    );
}

/// A K = 1 run's bytes: the same on 1 and 2 threads; with the slot rebuilt from the mirror
/// every few epochs (a replaced worker); with its state handed over as bytes; and for a
/// master restarted from the replayed steps, with a runner rebuilt from its mirror.
#[test]
fn a_lone_slot_gives_the_same_bytes_however_it_is_served() {
    for loss in [Loss::Logistic, Loss::Hinge, Loss::Squared] {
        let problem = problem(loss, 22);
        let config = config(loss, 0.1, 1, 2, 14, 0.0);
        let one = train(&problem, config, 1);
        assert_eq!(encode(one.state()), encode(train(&problem, config, 2).state()), "{loss:?}");

        let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
        let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 1);
        let mut steps = Vec::new();
        while cocoa.stop_reason().is_none() {
            let step = cocoa.next_iter(&mut runner, Recovery::Needed).unwrap().step;
            steps.push(decode::<CocoaStep>(&encode(&step), "step").unwrap());
            if cocoa.state().epoch % 4 == 2 {
                runner.restore_all(&cocoa.mirror()).unwrap();
            }
            // Handover: the slot's state as bytes is its committed base, model included.
            let kernel = cocoa.kernel();
            let state = runner.states().next().unwrap().unwrap();
            let handed = kernel.decode_state(0, &kernel.encode_state(state), &problem.grid).unwrap();
            assert_eq!(kernel.encode_state(&handed), encode(&kernel.unit_base(&cocoa.mirror(), 0)), "{loss:?}");
        }
        assert_eq!(encode(one.state()), encode(cocoa.state()), "{loss:?}: rebuilt slots");
        assert_eq!(weights_bits(&one), weights_bits(&cocoa), "{loss:?}");

        // A master restarted after epoch 6: the steps replayed, a new runner from its mirror.
        let mut resumed = Cocoa::for_grid(config, &problem.grid).unwrap();
        for step in steps.into_iter().take(6) {
            resumed.replay(step).unwrap();
        }
        let mut runner = LocalRunner::new(resumed.kernel().clone(), &problem.grid, 2);
        runner.restore_all(&resumed.mirror()).unwrap();
        while resumed.stop_reason().is_none() {
            resumed.next_iter(&mut runner, Recovery::Needed).unwrap();
        }
        assert_eq!(encode(one.state()), encode(resumed.state()), "{loss:?}: restarted master");
    }
}

/// An elastic run that scales in to one slot switches to the lone slot's model (`w = v /
/// lambda` at the switch) and repeats bit for bit: on 1 and 3 threads, with slots rebuilt
/// from the mirror, and replayed from its steps.
#[test]
fn a_scale_in_to_one_slot_switches_to_its_model_and_repeats() {
    let problem = problem(Loss::Logistic, 8);
    let config = elastic(Loss::Logistic, 0.05, 8, 1, 5000, 1e-10);
    let (one, steps) = train_keeping_steps(&problem, config, |_, _| {});
    let state = one.state();
    assert_eq!(state.slots, 1, "scale-ins {:?}", state.scale_ins);
    assert!(state.v.is_empty() && state.w.len() == problem.features);
    let to_one = state.scale_ins.last().unwrap().epoch as usize;
    assert!(steps[..to_one].iter().all(|s| s.w.is_empty()) && steps[to_one..].iter().all(|s| s.v.is_empty()));
    assert_eq!(encode(state), encode(train(&problem, config, 3).state()));

    let mut disturbed = Cocoa::for_grid(config, &problem.grid).unwrap();
    let mut runner = LocalRunner::new(disturbed.kernel().clone(), &problem.grid, 2);
    while disturbed.stop_reason().is_none() {
        disturbed.next_iter(&mut runner, Recovery::Needed).unwrap();
        if disturbed.state().epoch.is_multiple_of(2) {
            runner.restore_all(&disturbed.mirror()).unwrap();
        }
    }
    assert_eq!(encode(state), encode(disturbed.state()));

    // Replayed across the switch: the state converts as the live run's did.
    let mut replayed = Cocoa::for_grid(config, &problem.grid).unwrap();
    for step in steps.iter().take(to_one + 1).cloned() {
        replayed.replay(step).unwrap();
    }
    let mut runner = LocalRunner::new(replayed.kernel().clone(), &problem.grid, 1);
    runner.restore_all(&replayed.mirror()).unwrap();
    while replayed.stop_reason().is_none() {
        replayed.next_iter(&mut runner, Recovery::Needed).unwrap();
    }
    assert_eq!(encode(state), encode(replayed.state()));
}

/// A report whose changes are out of range, out of order or not finite is refused, and a
/// model on a slot of several, or of the wrong length, is not taken as a base.
#[test]
fn a_damaged_lone_slot_report_or_base_is_refused() {
    let report = |alpha: Vec<f64>, w: Vec<(u32, f64)>, progress: f64| solo::encode_report(&alpha, &w, progress);
    let good = solo::SoloReport { alpha: vec![0.5, 0.0, 1.0, -2.0], w: vec![(0, 0.5), (1, -1.5)], progress: 1.0 };
    let bytes = report(good.alpha.clone(), good.w.clone(), good.progress);
    assert_eq!(solo::decode_report(&bytes, 4, 2).unwrap(), good);
    for cut in 0..bytes.len() {
        assert!(solo::decode_report(&bytes[..cut], 4, 2).is_err(), "cut at {cut}");
    }
    assert!(solo::decode_report(&[&bytes[..], &[0]].concat(), 4, 2).is_err(), "a byte too many");
    let mut huge = bytes.clone();
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(solo::decode_report(&huge, 4, 2).is_err(), "a count beyond the bytes");
    assert!(solo::decode_report(&bytes, 5, 2).is_err(), "duals for another row count");
    assert!(solo::decode_report(&report(vec![0.0; 4], vec![(2, 1.0)], 1.0), 4, 2).is_err());
    assert!(solo::decode_report(&report(vec![0.0; 4], vec![(1, 1.0), (0, 1.0)], 1.0), 4, 2).is_err());
    assert!(solo::decode_report(&report(vec![0.0; 4], vec![(0, f64::NAN)], 1.0), 4, 2).is_err());
    assert!(solo::decode_report(&report(vec![0.0; 4], vec![], -1.0), 4, 2).is_err());
    assert!(solo::decode_report(&[0xff], 4, 2).is_err());

    let problem = problem(Loss::Logistic, 23);
    let lone = Cocoa::for_grid(config(Loss::Logistic, 0.1, 1, 1, 5, 0.0), &problem.grid).unwrap();
    let kernel = lone.kernel();
    let rows = kernel.layout().rows();
    let base = |w: Vec<f64>| SlotBase { alpha: vec![0.0; rows], w };
    assert!(kernel.restore(0, &base(vec![0.0; problem.features]), &problem.grid).is_ok());
    assert!(kernel.restore(0, &base(vec![0.0; problem.features + 1]), &problem.grid).is_err());
    let three = Cocoa::for_grid(config(Loss::Logistic, 0.1, 3, 1, 5, 0.0), &problem.grid).unwrap();
    let slot_rows = three.kernel().layout().slot_rows(0).len();
    let several = SlotBase { alpha: vec![0.0; slot_rows], w: vec![0.0; problem.features] };
    assert!(three.kernel().restore(0, &several, &problem.grid).is_err());
}

/// A [`LocalRunner`] that records each phase and its payloads' sizes, and says it can lose
/// its units when `loses` (as the distributed runner does).
struct Watched<'g> {
    inner: LocalRunner<'g, CocoaKernel, crate::grid::InMemoryGrid>,
    loses: bool,
    seen: Vec<(CocoaPhase, Vec<usize>)>,
}

impl Runner<CocoaKernel> for Watched<'_> {
    type Error = EngineError;

    fn run(&mut self, request: PhaseRequest<CocoaPhase>) -> Result<PhaseOutput, EngineError> {
        let phase = request.phase.clone();
        let output = self.inner.run(request)?;
        self.seen.push((phase, output.payloads.iter().map(Vec::len).collect()));
        Ok(output)
    }

    fn loses_units(&self) -> bool {
        self.loses
    }

    fn reconfigure(&mut self, kernel: CocoaKernel, mirror: CocoaMirror) -> Result<(), EngineError> {
        self.inner.reconfigure(kernel, mirror)
    }
}

/// Runs `config` to its stop, asking for `recovery(epoch)` before each epoch (0-based), then
/// settles; returns the run and the phases its runner saw.
fn run_with(
    problem: &crate::synthetic::Problem,
    config: CocoaConfig,
    loses: bool,
    recovery: impl Fn(u32) -> Recovery,
) -> (Cocoa, Vec<(CocoaPhase, Vec<usize>)>) {
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    let inner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 1);
    let mut runner = Watched { inner, loses, seen: Vec::new() };
    while cocoa.stop_reason().is_none() {
        let epoch = cocoa.state().epoch;
        cocoa.next_iter(&mut runner, recovery(epoch)).unwrap();
    }
    cocoa.settle(&mut runner).unwrap();
    (cocoa, runner.seen)
}

/// Epochs that need not be recoverable leave the duals and the model on the slot: only the
/// progress statistic crosses (8 bytes), and one collection at the end brings the state the
/// reporting run has, bit for bit — the model, the duals and every computed gap. A run that
/// switches between the two (a `Needed` epoch collects first) ends in the same state too.
#[test]
fn a_lone_slot_reports_only_when_its_state_must_be_recoverable() {
    for loss in [Loss::Logistic, Loss::Hinge, Loss::Squared] {
        let problem = problem(loss, 24);
        let config = config(loss, 0.1, 1, 1, 5000, 1e-9);
        let (whole, seen) = run_with(&problem, config, false, |_| Recovery::Needed);
        let reports = |seen: &[(CocoaPhase, Vec<usize>)]| {
            seen.iter().filter(|(p, _)| matches!(p, CocoaPhase::SoloSolve { report: true, .. })).count()
        };
        assert_eq!(reports(&seen) as u32, whole.state().epoch, "{loss:?}");
        assert!(!seen.iter().any(|(p, _)| *p == CocoaPhase::SoloCollect), "{loss:?}: nothing to collect");

        let (deferred, seen) = run_with(&problem, config, false, |_| Recovery::Deferred);
        assert_eq!(encode(deferred.state()), encode(whole.state()), "{loss:?}");
        assert_eq!(weights_bits(&deferred), weights_bits(&whole), "{loss:?}");
        assert_eq!(reports(&seen), 0, "{loss:?}");
        for (phase, sizes) in &seen {
            if let CocoaPhase::SoloSolve { .. } | CocoaPhase::EvaluateOwn = phase {
                assert_eq!(sizes, &[8], "{loss:?}: {phase:?}");
            }
        }
        let collects = seen.iter().filter(|(p, _)| *p == CocoaPhase::SoloCollect).count();
        assert_eq!(collects, 1, "{loss:?}: collected once, at the end");

        let (mixed, seen) =
            run_with(&problem, config, false, |e| if e % 3 == 1 { Recovery::Needed } else { Recovery::Deferred });
        assert_eq!(encode(mixed.state()), encode(whole.state()), "{loss:?}: mixed");
        assert!(seen.iter().filter(|(p, _)| *p == CocoaPhase::SoloCollect).count() > 1, "{loss:?}");
    }
}

/// A `Needed` epoch after deferred ones leaves the state and the step the reporting run
/// has after that epoch: the collection comes first, so the step holds that epoch's changes.
/// A runner that can lose its slot gets whole epochs whatever it is asked, so its mirror
/// never falls behind.
#[test]
fn a_recoverable_epoch_after_deferred_ones_is_whole() {
    let problem = problem(Loss::Logistic, 25);
    let config = config(Loss::Logistic, 0.1, 1, 1, 12, 0.0);
    let (_, steps) = train_keeping_steps(&problem, config, |_, _| {});
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    let mut runner = LocalRunner::new(cocoa.kernel().clone(), &problem.grid, 1);
    for _ in 0..4 {
        cocoa.next_iter(&mut runner, Recovery::Deferred).unwrap();
    }
    let step = cocoa.next_iter(&mut runner, Recovery::Needed).unwrap().step;
    assert_eq!(encode(&step), encode(&steps[4]));
    let mut replayed = Cocoa::for_grid(config, &problem.grid).unwrap();
    for step in steps.iter().take(5).cloned() {
        replayed.replay(step).unwrap();
    }
    assert_eq!(encode(cocoa.state()), encode(replayed.state()));

    let (lossy, seen) = run_with(&problem, config, true, |_| Recovery::Deferred);
    assert!(seen.iter().all(|(p, _)| !matches!(p, CocoaPhase::SoloSolve { report: false, .. })));
    assert_eq!(encode(lossy.state()), encode(replayed_to_end(&problem, config, &steps).state()));
}

fn replayed_to_end(problem: &crate::synthetic::Problem, config: CocoaConfig, steps: &[CocoaStep]) -> Cocoa {
    let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
    steps.iter().cloned().for_each(|s| cocoa.replay(s).unwrap());
    cocoa
}

/// `linea train`'s in-process run releases the grid's cells once every slot is built
/// ([`Kernel::units_hold_their_data`], [`LocalRunner::detach`]): the run gives the bytes of
/// one that keeps the grid, for one slot and for two, with a checkpoint's report every epoch
/// and without; and a cell read after the release is an error, not a value.
#[test]
fn built_slots_need_no_cells() {
    use crate::algorithm::GridSource;
    for (loss, slots, recovery) in [
        (Loss::Logistic, 1, Recovery::Needed),
        (Loss::Logistic, 1, Recovery::Deferred),
        (Loss::Logistic, 2, Recovery::Needed),
        (Loss::Squared, 2, Recovery::Needed),
    ] {
        let problem = problem(loss, 23);
        let config = config(loss, 0.1, slots, 2, 12, 0.0);
        let kept = train(&problem, config, 2);
        let mut cocoa = Cocoa::for_grid(config, &problem.grid).unwrap();
        assert!(cocoa.kernel().units_hold_their_data());
        let mut grid = problem.grid.clone();
        let mut runner = LocalRunner::new(cocoa.kernel().clone(), &grid, 2);
        runner.prepare().unwrap();
        let detached = runner.detach();
        grid.release_cells();
        assert!(grid.cell(0, 0).is_err() && grid.blocks() == problem.grid.blocks());
        let mut runner = detached.attach(&grid);
        while cocoa.stop_reason().is_none() {
            cocoa.next_iter(&mut runner, recovery).unwrap();
        }
        // The end-of-run collect of a run that deferred its reports (`linea train`'s).
        cocoa.settle(&mut runner).unwrap();
        assert_eq!(cocoa.state().epoch, kept.state().epoch);
        assert_eq!(cocoa.flat_weights(), kept.flat_weights(), "{loss:?} K={slots} {recovery:?}");
        assert_eq!(encode(cocoa.state()), encode(kept.state()), "{loss:?} K={slots} {recovery:?}");
    }
}
