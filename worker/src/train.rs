//! `linea train`: an algorithm on a prepared grid, in this process on `--threads` threads,
//! or with `--workers N` on the distributed runtime (a master and N worker processes here).

use crate::choose;
use crate::driver::{self, AlgorithmName, TrainSummary, WithAlgorithm};
use crate::error::Result;
use crate::gridload::{self, Layout, LoadedGrid};
use crate::interrupt::Interrupt;
use crate::manifest::Manifest;
use crate::progress::Progress;
use crate::storage;
use crate::trace::TraceFile;
use linea_engine::Loss;
use linea_engine::algorithm::{Algorithm, Kernel};
use linea_engine::cocoa::{AccelerateConfig, ElasticConfig};
use linea_engine::grid::InMemoryGrid;
use linea_engine::hybrid::{BatchSolver, Mixing, Precondition};
use linea_engine::runner::LocalRunner;
use std::time::Instant;

pub use crate::driver::EpochPoint;

/// The epoch limit of a named algorithm when `--epochs` is not given.
pub const DEFAULT_EPOCHS: u32 = 100;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub data: String,
    pub model: String,
    /// [`AlgorithmName::Auto`] until [`train`] resolves it from the grid.
    pub algorithm: AlgorithmName,
    /// Why `--algorithm auto` chose `algorithm` ("auto: ..."), recorded in the model header
    /// and the trace; `None` when the algorithm was named.
    pub chosen_by: Option<String>,
    /// Whether `epochs` was asked for; if not, `--algorithm auto` sets the chosen algorithm's
    /// limit ([`linea_engine::choice::Choice::max_epochs`]).
    pub epochs_given: bool,
    pub loss: Loss,
    /// CoCoA's K: the local problems the rows are split into (the model depends on it).
    pub slots: usize,
    /// CoCoA's H: SDCA passes over a slot's rows per epoch.
    pub local_passes: u32,
    /// CoCoA stops once the duality gap relative to the primal is at most this.
    pub gap_tolerance: f64,
    /// CoCoA computes the gap after every epoch, not only when its schedule expects the
    /// tolerance met (`linea_engine::cocoa::schedule`).
    pub gap_every_epoch: bool,
    /// CoCoA scales in from `slots` as this policy decides; `None`: K stays.
    pub elastic: Option<ElasticConfig>,
    /// CoCoA runs inside Catalyst's accelerated outer loop; `None`: plain CoCoA.
    pub accelerate: Option<AccelerateConfig>,
    /// L-BFGS (lbfgs, hybrid): the curvature pairs kept (m).
    pub memory: u32,
    /// L-BFGS (lbfgs, hybrid): its initial inverse Hessian (the Jacobi preconditioner or the
    /// scalar scaling).
    pub precondition: Precondition,
    /// lbfgs and hybrid: the batch solver (L-BFGS or truncated Newton).
    pub solver: BatchSolver,
    /// Hybrid and IPM: the online passes' learning rate.
    pub rate: f64,
    /// L-BFGS (lbfgs, hybrid): stop once the gradient's norm is at most this fraction of
    /// its norm at 0.
    pub gradient_tolerance: f64,
    /// IPM: how the slots' models are mixed.
    pub mixing: Mixing,
    pub l2: f64,
    pub l1: f64,
    pub epochs: u32,
    pub tolerance: f64,
    pub threads: usize,
    pub seed: u64,
    pub plot: Option<String>,
    pub trace: Option<String>,
    /// 0: train in this process; N: a master here and N worker processes.
    pub workers: usize,
    /// `--workers N`: each worker's bound on its cached cells, MiB (`None`: the worker's
    /// default). What lets one machine train a grid larger than its memory: cells beyond the
    /// bound are read from the grid again when next wanted.
    pub worker_cache_mb: Option<usize>,
    /// Where the master (`linea master`, or `--workers N`'s in-process one) serves its
    /// `/metrics`; `None`: nowhere.
    pub metrics_listen: Option<String>,
    /// The first SIGTERM or SIGINT stops the run at the end of its epoch and writes the model
    /// of the epochs done ([`Interrupt`]), in one process or as `--workers N`'s embedded
    /// master; `linea train` sets it (`linea master` stops through its hub instead).
    pub stop_on_signals: bool,
}

impl TrainOptions {
    /// SCD with the defaults of `linea train` (tests and benchmarks start from it).
    pub fn scd(data: &str, model: &str, loss: Loss) -> TrainOptions {
        TrainOptions {
            data: data.to_string(),
            model: model.to_string(),
            algorithm: AlgorithmName::Scd,
            chosen_by: None,
            epochs_given: false,
            loss,
            slots: 1,
            local_passes: 1,
            gap_tolerance: 1e-6,
            gap_every_epoch: false,
            elastic: None,
            accelerate: None,
            memory: 15,
            precondition: Precondition::DEFAULT,
            solver: BatchSolver::Lbfgs,
            rate: 0.5,
            gradient_tolerance: 1e-10,
            mixing: Mixing::Uniform,
            l2: 1.0,
            l1: 0.0,
            epochs: DEFAULT_EPOCHS,
            tolerance: 1e-9,
            threads: 1,
            seed: 0,
            plot: None,
            trace: None,
            workers: 0,
            worker_cache_mb: None,
            metrics_listen: None,
            stop_on_signals: false,
        }
    }
}

/// Trains as `options` ask; `--algorithm auto` is resolved from the grid's manifest first
/// ([`choose::resolve`]) and the choice printed.
pub fn train(options: &TrainOptions, progress: &Progress) -> Result<TrainSummary> {
    let started = Instant::now();
    let storage = storage::open(&options.data)?;
    if options.workers > 0 {
        let options = resolved(options, &Manifest::read(storage.as_ref())?, progress);
        return crate::runtime::embedded::train(&options, progress);
    }
    let LoadedGrid { layout, grid } = gridload::load(storage.as_ref(), options.loss)?;
    driver::describe_grid(&layout, &options.data, started, progress);
    let options = &resolved(options, &layout.manifest, progress);
    driver::with_algorithm(options, &layout, InProcess { options, layout: &layout, grid, progress })
}

fn resolved(options: &TrainOptions, manifest: &Manifest, progress: &Progress) -> TrainOptions {
    let options = choose::resolve(options, manifest);
    if let Some(why) = &options.chosen_by {
        progress.always(&format!("algorithm {} ({why})", options.algorithm.name()));
    }
    options
}

/// Trains in this process on the grid in memory.
struct InProcess<'a> {
    options: &'a TrainOptions,
    layout: &'a Layout,
    /// Owned, so that the run can release the cells once its units hold their rows.
    grid: InMemoryGrid,
    progress: &'a Progress,
}

impl WithAlgorithm for InProcess<'_> {
    type Output = TrainSummary;

    fn run<A: Algorithm>(self, mut algorithm: A) -> Result<TrainSummary> {
        let options = self.options;
        let scale = self.layout.manifest.target_scale(options.loss);
        let trace_file = TraceFile::for_run(options.trace.as_deref(), driver::ran(&algorithm), scale)?;
        let interrupt = if options.stop_on_signals { Interrupt::on_signals()? } else { Interrupt::none() };
        let (trace, seconds) = run_watched(
            &mut algorithm,
            RunGrid::Owned(self.grid),
            options.threads,
            self.progress,
            trace_file,
            &interrupt,
        )?;
        driver::finish(options, self.layout, &algorithm, trace, seconds, &interrupt)
    }
}

/// Trains `algorithm` in this process to its stop; returns the per-epoch trace and the
/// seconds spent (tests call it to inspect the algorithm afterwards).
pub fn run<A: Algorithm>(
    algorithm: &mut A,
    loaded: &LoadedGrid,
    threads: usize,
    progress: &Progress,
) -> Result<(Vec<EpochPoint>, f64)> {
    run_watched(algorithm, RunGrid::Borrowed(&loaded.grid), threads, progress, None, &Interrupt::none())
}

/// The grid a run reads: the caller's, or its own, whose cells it releases once every unit
/// is built when the units hold their own rows ([`Kernel::units_hold_their_data`]: CoCoA's
/// slots gather theirs into CSR, 131 MiB beside the cells' 281 MiB on criteo-1m).
enum RunGrid<'a> {
    Borrowed(&'a InMemoryGrid),
    Owned(InMemoryGrid),
}

impl RunGrid<'_> {
    fn get(&self) -> &InMemoryGrid {
        match self {
            RunGrid::Borrowed(grid) => grid,
            RunGrid::Owned(grid) => grid,
        }
    }
}

/// [`run`], writing each epoch's trace line to `trace_file` as it ends, and stopping at the
/// end of the epoch in which `interrupt` received a signal.
fn run_watched<A: Algorithm>(
    algorithm: &mut A,
    mut grid: RunGrid,
    threads: usize,
    progress: &Progress,
    mut trace_file: Option<TraceFile>,
    interrupt: &Interrupt,
) -> Result<(Vec<EpochPoint>, f64)> {
    let sizes = (grid.get().rows() as f64, grid.get().nnz() as f64);
    let mut runner = LocalRunner::new(algorithm.kernel().clone(), grid.get(), threads);
    // The units' set-up belongs with loading the grid, before the trace's clock starts.
    runner.prepare()?;
    let release = matches!(grid, RunGrid::Owned(_)) && algorithm.kernel().units_hold_their_data();
    let mut runner = if release {
        let detached = runner.detach();
        if let RunGrid::Owned(owned) = &mut grid {
            owned.release_cells();
            crate::allocator::give_back_freed_memory();
        }
        detached.attach(grid.get())
    } else {
        runner
    };
    let mut trace = Vec::new();
    // No checkpoints, and the runner keeps its units: nothing needs an epoch's state but the
    // next epoch (a lone CoCoA slot keeps its duals and model until the run stops).
    let seconds =
        driver::drive(algorithm, &mut runner, sizes, progress, &mut trace, false, interrupt, |_, _, trace| {
            trace_file.as_mut().map_or(Ok(()), |f| f.append(trace))
        })?;
    Ok((trace, seconds))
}
