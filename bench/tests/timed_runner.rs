//! The benchmark's timed runner changes nothing but the clock: on the real higgs sample a
//! static and an elastic CoCoA run (the epoch-count policy, so the decisions cannot depend on
//! timing) give the engine's `LocalRunner` bits, and the simulated clock advances.

use linea_bench::slot_clock::{SlotSeconds, TimedRunner};
use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, PhaseRequest, Recovery, Reduction, Runner};
use linea_engine::cocoa::{Clock, Cocoa, CocoaConfig, CocoaKernel, CocoaPhase, ElasticConfig};
use linea_engine::grid::InMemoryGrid;
use linea_engine::runner::LocalRunner;
use linea_worker::gridload;
use linea_worker::input::{FeatureSpec, Format, NumericMode};
use linea_worker::prepare::{PrepareOptions, prepare};
use linea_worker::progress::Progress;

fn higgs() -> InMemoryGrid {
    let input = format!("{}/../../shared/data/higgs-sample/higgs.train.tsv", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let storage = linea_worker::storage::open(&dir.path().join("grid").to_string_lossy()).unwrap();
    let spec = FeatureSpec {
        format: Format::Csv,
        label: None,
        positive: None,
        numeric: NumericMode::Dense,
        ignore: Vec::new(),
    };
    let options = PrepareOptions {
        input,
        spec,
        rows_per_shard: 2048,
        reuse: false,
        threads: 1,
        range_bytes: linea_worker::input::ranges::RANGE_BYTES,
    };
    prepare(&options, storage.as_ref(), &Progress::silent()).unwrap();
    gridload::load(storage.as_ref(), Loss::Hinge).unwrap().grid
}

/// Runs `epochs` epochs; the weights' bits and the slot counts after each epoch.
fn train<R: Runner<CocoaKernel>>(cocoa: &mut Cocoa, runner: &mut R, epochs: u32) -> (Vec<u64>, Vec<u32>)
where
    R::Error: std::fmt::Debug,
{
    let mut slots = Vec::new();
    for _ in 0..epochs {
        cocoa.next_iter(runner, Recovery::Needed).unwrap();
        slots.push(cocoa.state().slots);
    }
    (cocoa.flat_weights().iter().map(|w| w.to_bits()).collect(), slots)
}

#[test]
fn the_timed_runner_gives_the_local_runners_bits_and_advances_its_clock() {
    let grid = higgs();
    let static_four = CocoaConfig::new(Loss::Hinge, 35.0, 4, 1, 100, 0.0, 7).unwrap();
    let elastic = CocoaConfig::new(Loss::Hinge, 35.0, 16, 1, 100, 0.0, 7)
        .unwrap()
        .with_elastic(ElasticConfig::chicle(1, Clock::Epochs).unwrap())
        .unwrap();
    for config in [static_four, elastic] {
        let mut local = Cocoa::for_grid(config, &grid).unwrap();
        let mut local_runner = LocalRunner::new(local.kernel().clone(), &grid, 2);
        let expected = train(&mut local, &mut local_runner, 40);

        let seconds = SlotSeconds::default();
        let mut timed = Cocoa::for_grid(config, &grid).unwrap();
        let mut timed_runner = TimedRunner::new(timed.kernel().clone(), &grid, 2, seconds.clone()).unwrap();
        assert_eq!(train(&mut timed, &mut timed_runner, 40), expected);
        assert!(seconds.get() > 0.0, "no slot CPU time measured");
    }
}

#[test]
fn the_elastic_run_scales_in_on_this_data() {
    // Guards the test above: its elastic half must exercise a reconfigure.
    let grid = higgs();
    let config = CocoaConfig::new(Loss::Hinge, 35.0, 16, 1, 100, 0.0, 7)
        .unwrap()
        .with_elastic(ElasticConfig::chicle(1, Clock::Epochs).unwrap())
        .unwrap();
    let mut cocoa = Cocoa::for_grid(config, &grid).unwrap();
    let mut runner = TimedRunner::new(cocoa.kernel().clone(), &grid, 2, SlotSeconds::default()).unwrap();
    let (_, slots) = train(&mut cocoa, &mut runner, 40);
    assert_eq!(slots.first(), Some(&16));
    assert_eq!(slots.last(), Some(&1), "slot counts: {slots:?}");
}

#[test]
fn loading_rows_untimed_leaves_the_clock_and_the_bits_alone() {
    // The benchmark gathers every slot's rows through `untimed` before its clocks start
    // (data loading, which Chicle's times leave out): the clock must not move, and the run
    // after it must give the same bits as one that gathered its rows in its first epoch.
    let grid = higgs();
    let config = CocoaConfig::new(Loss::Hinge, 35.0, 4, 1, 100, 0.0, 7).unwrap();
    let mut plain = Cocoa::for_grid(config, &grid).unwrap();
    let mut plain_runner = TimedRunner::new(plain.kernel().clone(), &grid, 2, SlotSeconds::default()).unwrap();
    let expected = train(&mut plain, &mut plain_runner, 20);

    let seconds = SlotSeconds::default();
    let mut warm = Cocoa::for_grid(config, &grid).unwrap();
    let mut runner = TimedRunner::new(warm.kernel().clone(), &grid, 2, seconds.clone()).unwrap();
    let features = warm.kernel().features();
    let request = PhaseRequest {
        phase: CocoaPhase::Evaluate { w: vec![0.0; features] },
        reduction: Reduction::Sum { len: 2 },
        mutates: false,
    };
    runner.untimed(request).unwrap();
    assert_eq!(seconds.get(), 0.0, "untimed work reached the clock");
    assert_eq!(train(&mut warm, &mut runner, 20), expected);
    assert!(seconds.get() > 0.0);
}
