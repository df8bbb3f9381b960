//! One CoCoA run (hinge loss) for the elastic benchmark: a static K or an elastic K -> min,
//! on the [`TimedRunner`], recording after every epoch the relative duality gap, the
//! simulated cluster clock and the real wall time.
//!
//! The elastic policy runs on its wall-clock mode (rates per second, as Chicle) fed with the
//! *simulated* clock, so its decisions are the ones a cluster of K machines would have made;
//! the real wall time of K = 16 on 2 cores would make the knee look 8 times later than it is.

use crate::slot_clock::{SlotSeconds, TimedRunner, process_cpu_seconds, thread_cpu_seconds};
use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, PhaseRequest, Recovery, Reduction};
use linea_engine::cocoa::{Aggregation, Clock, Cocoa, CocoaConfig, CocoaPhase, ElasticConfig, ScaleIn};
use linea_engine::grid::InMemoryGrid;
use linea_worker::gridload;
use linea_worker::storage::LocalStorage;
use std::time::Instant;

/// The relative duality gaps `elastic-bench` and `elastic-oracle` time (Chicle's Table 2).
pub const TARGETS: [f64; 3] = [1e-4, 1e-5, 1e-6];

/// A prepared grid for hinge loss, without its bias block when `no_bias` ([`without_bias`]).
pub fn load(dir: &str, no_bias: bool) -> Result<InMemoryGrid, String> {
    let loaded = gridload::load(&LocalStorage::new(dir), Loss::Hinge).map_err(|e| e.to_string())?;
    Ok(if no_bias { without_bias(loaded) } else { loaded.grid })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Setting {
    /// Slots the run starts with.
    pub slots: u32,
    /// Elastic: scale in down to this many slots, by `factor` (m) when the short-term rate
    /// times `threshold` (d) falls below the long-term one (window N = 2; Chicle: m = 4, d = 1.25).
    pub elastic_min: Option<u32>,
    pub factor: u32,
    pub threshold: f64,
    /// Threads of the in-process pool (the wall clock is real only for threads >= slots).
    pub threads: usize,
    /// CoCoA+'s `sigma' = min(K, cap)`; `None`: K, the safe value
    /// ([`CocoaConfig::with_sigma_cap`]).
    pub sigma_cap: Option<f64>,
    /// Without a cap: per-feature `sigma'_j` (the default) or the scalar K.
    pub aggregation: Aggregation,
    /// Scale-ins forced after these epochs, `(epoch, to)` in epoch order, instead of a
    /// policy's ([`Cocoa::scale_in`], the policy's own merge): the hindsight search of
    /// `elastic-oracle` tries every switch point.
    pub schedule: Vec<(u32, u32)>,
}

impl Setting {
    pub fn label(&self) -> String {
        let mut label = match self.elastic_min {
            Some(min) => format!("elastic {}->{min}", self.slots),
            None if self.schedule.is_empty() => format!("static K={}", self.slots),
            None => format!("K={}", self.slots),
        };
        for (epoch, to) in &self.schedule {
            label += &format!(" ->{to} after {epoch}");
        }
        label
    }
}

/// The state after one epoch.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Slots the epoch ran with.
    pub slots: u32,
    /// Simulated cluster seconds since the start.
    pub sim: f64,
    /// Real seconds since the start.
    pub wall: f64,
    /// CPU seconds of every thread of the process since the start.
    pub cpu: f64,
    /// Duality gap relative to the primal.
    pub gap: f64,
}

pub struct Trace {
    pub points: Vec<Point>,
    pub scale_ins: Vec<ScaleIn>,
}

impl Trace {
    /// The first epoch whose gap is at most `target`.
    pub fn reached(&self, target: f64) -> Option<&Point> {
        self.points.iter().find(|p| p.gap <= target)
    }

    pub fn last(&self) -> Option<&Point> {
        self.points.last()
    }
}

/// Limits of one run: it stops at `gap` or when either clock passes its budget.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub gap: f64,
    pub sim_seconds: f64,
    pub wall_seconds: f64,
    pub epochs: u32,
}

/// Runs `setting` on `grid` with `l2` until the budget ends.
pub fn run(grid: &InMemoryGrid, l2: f64, setting: &Setting, budget: Budget) -> Result<Trace, String> {
    let err = |e: linea_engine::EngineError| e.to_string();
    let mut config = CocoaConfig::new(Loss::Hinge, l2, setting.slots, 1, budget.epochs, budget.gap, 0).map_err(err)?;
    // The gap after every epoch, static runs too: under the adaptive schedule a static run
    // computes it when the last target is predicted, so its times to the earlier targets
    // would be late by the epochs it skipped, while an elastic run (whose policy reads the
    // gap) computes it every epoch. Chicle's times include a gap every epoch as well.
    config = config.with_gap_every_epoch().with_aggregation(setting.aggregation).map_err(err)?;
    if let Some(cap) = setting.sigma_cap {
        config = config.with_sigma_cap(cap).map_err(err)?;
    }
    if let Some(min) = setting.elastic_min {
        config = config
            .with_elastic(ElasticConfig::new(min, setting.factor, 2, setting.threshold, Clock::Wall).map_err(err)?)
            .map_err(err)?;
    }
    let slot_seconds = SlotSeconds::default();
    let master_started = thread_cpu_seconds();
    let sim_now = {
        let slot_seconds = slot_seconds.clone();
        // Read on this thread only: next_iter calls the clock from the thread that drives it.
        move || slot_seconds.get() + (thread_cpu_seconds() - master_started)
    };
    let mut cocoa = Cocoa::for_grid(config, grid).map_err(err)?.with_clock(Box::new(sim_now.clone()));
    let mut runner = TimedRunner::new(cocoa.kernel().clone(), grid, setting.threads, slot_seconds).map_err(err)?;
    // Data loading, left out of both clocks as Chicle's times leave it out: every slot
    // gathers its rows on its first phase, here a non-mutating evaluation at w = 0. (A
    // scale-in's merged slots are built from the old slots' rows, charged to the scale-in.)
    let features = cocoa.kernel().features();
    let evaluate = CocoaPhase::Evaluate { w: vec![0.0; features] };
    runner
        .untimed(PhaseRequest { phase: evaluate, reduction: Reduction::Sum { len: 2 }, mutates: false })
        .map_err(err)?;
    let (wall_started, sim_started, cpu_started) = (Instant::now(), sim_now(), process_cpu_seconds());
    let mut points = Vec::new();
    let mut forced = setting.schedule.iter().peekable();
    loop {
        let slots = cocoa.state().slots;
        cocoa.next_iter(&mut runner, Recovery::Needed).map_err(err)?;
        if let Some(&(_, to)) = forced.next_if(|(epoch, _)| *epoch == cocoa.state().epoch) {
            cocoa.scale_in(&mut runner, to).map_err(err)?;
        }
        let gap = cocoa.state().history.last().map_or(f64::INFINITY, |r| r.gap.relative);
        let point = Point {
            slots,
            sim: sim_now() - sim_started,
            wall: wall_started.elapsed().as_secs_f64(),
            cpu: process_cpu_seconds() - cpu_started,
            gap,
        };
        points.push(point);
        let over = point.sim > budget.sim_seconds || point.wall > budget.wall_seconds;
        if over || cocoa.stop_reason().is_some() {
            break;
        }
    }
    Ok(Trace { points, scale_ins: cocoa.state().scale_ins.clone() })
}

/// The grid without the bias block `linea prepare` adds (the feature that is 1 in every
/// row): CoCoA's and Chicle's SVM, `(1/n) sum loss + (lambda/2) |w|^2` with no intercept.
/// The bias is the one column every slot shares in full, and it couples the slots' local
/// problems (docs/benchmarks/elastic-cocoa.md, "Why K > 1 did not pay").
pub fn without_bias(loaded: linea_worker::gridload::LoadedGrid) -> InMemoryGrid {
    let bias = loaded.layout.manifest.blocks.iter().position(|b| b.name == linea_worker::prepare::BIAS);
    let grid = loaded.grid;
    let Some(bias) = bias else { return grid };
    let keep = |i: &usize| *i != bias;
    InMemoryGrid {
        shapes: (0..grid.shapes.len()).filter(keep).map(|i| grid.shapes[i].clone()).collect(),
        cells: grid.cells.into_iter().enumerate().filter(|(i, _)| keep(i)).map(|(_, c)| c).collect(),
        targets: grid.targets,
    }
}
