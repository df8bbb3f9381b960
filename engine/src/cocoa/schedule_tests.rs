//! The gap schedule on whole runs: a run stops only after an epoch whose computed gap met
//! the tolerance, skips the gap pass far from it, and the model after any epoch is the one
//! a run computing the gap every epoch has.

use super::tests::{problem, train, train_keeping_steps};
use super::*;
use crate::algorithm::{Algorithm, encode};
use crate::loss::Loss;

fn config(loss: Loss, slots: u32, epochs: u32, gap: f64) -> CocoaConfig {
    CocoaConfig::new(loss, 0.05, slots, 1, epochs, gap, 5).unwrap()
}

fn bits(w: &[f64]) -> Vec<u64> {
    w.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn adaptive_runs_stop_only_on_a_computed_gap_and_skip_it_far_from_the_tolerance() {
    for (loss, slots) in [(Loss::Logistic, 1), (Loss::Logistic, 3), (Loss::Hinge, 1), (Loss::Squared, 1)] {
        let problem = problem(loss, 21);
        let tolerance = 1e-9;
        let adaptive = train(&problem, config(loss, slots, 20_000, tolerance), 2);
        let every = train(&problem, config(loss, slots, 20_000, tolerance).with_gap_every_epoch(), 2);
        let what = format!("{loss:?} K={slots}");
        let (a, e) = (adaptive.state(), every.state());
        assert_eq!(adaptive.stop_reason(), Some(StopReason::GapReached), "{what}");
        let last = a.history.last().unwrap();
        assert_eq!(last.epoch, a.epoch, "{what}: stopped after an epoch whose gap was computed");
        assert!(last.gap.relative <= tolerance, "{what}: {last:?}");
        assert!(!adaptive.progress().stale, "{what}");
        // Far from the tolerance the gap was skipped: fewer than half the epochs computed it.
        assert_eq!(e.history.len() as u32, e.epoch, "{what}: every epoch has its gap");
        assert!(2 * a.history.len() < a.epoch as usize, "{what}: {} gaps in {} epochs", a.history.len(), a.epoch);
        // The adaptive run can stop later than the first epoch whose gap met the tolerance,
        // never earlier, and by a bounded overshoot.
        assert!(a.epoch >= e.epoch, "{what}: {} < {}", a.epoch, e.epoch);
        assert!(a.epoch as f64 <= e.epoch as f64 * (1.0 + schedule::MAX_SKIP_FRACTION) + 1.0, "{what}");
        println!("{what}: every epoch stops at {}, adaptive at {} with {} gaps", e.epoch, a.epoch, a.history.len());
        // Every gap it computed is the one the every-epoch run computed at that epoch.
        for r in &a.history {
            if let Some(same) = e.history.get(r.epoch as usize - 1) {
                assert_eq!((r.primal.to_bits(), r.dual.to_bits()), (same.primal.to_bits(), same.dual.to_bits()));
            }
        }
        // The same model after the same epoch count: the schedule changes when a run stops,
        // not what an epoch computes.
        let capped = train(&problem, config(loss, slots, a.epoch, 0.0).with_gap_every_epoch(), 1);
        assert_eq!(bits(&capped.flat_weights()), bits(&adaptive.flat_weights()), "{what}");
        assert_eq!(bits(&capped.state().alpha), bits(&a.alpha), "{what}");
    }
}

#[test]
fn a_run_ending_at_max_epochs_computes_its_last_gap() {
    let problem = problem(Loss::Logistic, 22);
    let cocoa = train(&problem, config(Loss::Logistic, 1, 37, 1e-14), 2);
    assert_eq!(cocoa.stop_reason(), Some(StopReason::MaxEpochs));
    let state = cocoa.state();
    assert_eq!(state.history.last().unwrap().epoch, 37);
    assert!((state.history.len() as u32) < 37, "it skipped some before");
    let progress = cocoa.progress();
    assert!(!progress.stale && progress.gap.is_some());
}

#[test]
fn skipped_epochs_report_the_last_computed_gap_as_stale() {
    let problem = problem(Loss::Logistic, 23);
    let mut stale = 0;
    let (cocoa, steps) = train_keeping_steps(&problem, config(Loss::Logistic, 2, 20_000, 1e-10), |cocoa, _| {
        let progress = cocoa.progress();
        let last = *cocoa.state().history.last().unwrap();
        assert_eq!(progress.gap, Some(last.gap));
        assert_eq!(progress.stale, last.epoch != cocoa.state().epoch);
        stale += progress.stale as u32;
    });
    assert!(stale > 0);
    assert_eq!(steps.iter().filter(|s| s.record.is_some()).count(), cocoa.state().history.len());
    // A restarted master replays the steps, the skipped ones included, to the same state.
    let mut resumed = Cocoa::for_grid(*cocoa.config(), &problem.grid).unwrap();
    for step in steps.iter().cloned() {
        resumed.replay(step).unwrap();
    }
    assert_eq!(encode(resumed.state()), encode(cocoa.state()));
    // A step whose record is another epoch's is refused.
    let mut bad = steps[0].clone();
    bad.record.as_mut().unwrap().epoch = 2;
    assert!(Cocoa::for_grid(*cocoa.config(), &problem.grid).unwrap().replay(bad).is_err());
}

#[test]
fn elastic_and_accelerated_runs_compute_the_gap_every_epoch() {
    let plain = config(Loss::Hinge, 4, 10, 0.0);
    assert_eq!(plain.gap_schedule(), GapSchedule::Adaptive);
    let elastic = plain.with_elastic(ElasticConfig::chicle(1, Clock::Epochs).unwrap()).unwrap();
    assert_eq!(elastic.gap_schedule(), GapSchedule::EveryEpoch, "the policy reads the gap curve");
    let accelerated = plain.with_accelerate(AccelerateConfig::new(None).unwrap()).unwrap();
    assert_eq!(accelerated.gap_schedule(), GapSchedule::EveryEpoch);
}
