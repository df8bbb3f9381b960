//! The one driver below `linea train` and `linea master`: runs any [`Algorithm`] on any
//! [`Runner`] until it stops, and owns what every algorithm needs around its steps — the
//! progress bar, the trace, checkpoints and status (through hooks), the plot and the model
//! file. Neither the CLI nor the runtime knows an algorithm's math; they pick one here.

use crate::error::{LineaError, Result};
use crate::gridload::Layout;
use crate::interrupt::Interrupt;
use crate::model::{MODEL_FORMAT, Model, ModelHeader, TrainingRecord};
use crate::plot;
use crate::progress::Progress;
use crate::storage;
use crate::trace;
use crate::train::TrainOptions;
use linea_engine::algorithm::{Algorithm, Gap, Iteration, Kernel, Recovery, Runner};
use linea_engine::cocoa::{Cocoa, CocoaConfig};
use linea_engine::hybrid::{Linear, LinearConfig, Mode};
use linea_engine::scd::{Scd, ScdConfig};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One point of the convergence trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochPoint {
    pub epoch: u32,
    pub seconds: f64,
    /// NaN for an epoch whose objective was not computed (CoCoA's gap schedule); JSON (a
    /// checkpoint's header) writes that as `null`, read back as NaN.
    #[serde(deserialize_with = "null_as_nan")]
    pub objective: f64,
    /// The duality gap, for algorithms that have one.
    #[serde(default)]
    pub gap: Option<Gap>,
    /// The worker count the algorithm wanted after this epoch (elastic CoCoA: its slots).
    #[serde(default)]
    pub workers: Option<u32>,
}

/// `null` (how serde_json writes a NaN) as NaN, any number as itself.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// What ran, as the flags that name it: `lbfgs`, `lbfgs --batch-solver newton` (the summary
/// line and the trace's last column).
fn flags(algorithm: &str, batch_solver: Option<&str>) -> String {
    match batch_solver {
        Some(solver) => format!("{algorithm} --batch-solver {solver}"),
        None => algorithm.to_string(),
    }
}

/// [`flags`] of a running algorithm.
pub fn ran(algorithm: &impl Algorithm) -> String {
    flags(algorithm.name(), algorithm.batch_solver())
}

pub struct TrainSummary {
    /// The algorithm that ran (`--algorithm auto`: the one it chose).
    pub algorithm: &'static str,
    /// Its batch solver where not its own ([`Algorithm::batch_solver`]).
    pub batch_solver: Option<&'static str>,
    pub objective: f64,
    pub gap: Option<Gap>,
    /// What `gap` is ([`Algorithm::gap_name`]).
    pub gap_name: &'static str,
    pub epochs: u32,
    pub seconds: f64,
    pub nnz: u64,
    /// The units of work an epoch was split into at the end ([`Kernel::units`]): no more
    /// threads than that had work (CoCoA with one slot solves on one).
    pub units: usize,
    pub trace: Vec<EpochPoint>,
    pub model_bytes: Vec<u8>,
    /// The signal that stopped the run before its own rule did (`linea train`, in one
    /// process or with `--workers N`): the model is that of the epochs done, not converged.
    pub interrupted: Option<&'static str>,
}

impl TrainSummary {
    /// What ran, as the flags that name it ([`flags`]).
    pub fn ran(&self) -> String {
        flags(self.algorithm, self.batch_solver)
    }

    /// Of `threads`, those that had work: one per unit at most.
    pub fn busy_threads(&self, threads: usize) -> usize {
        threads.min(self.units).max(1)
    }

    /// Non-zeros visited per second per busy thread ([`Self::busy_threads`]), one visit per
    /// non-zero and epoch.
    pub fn nnz_per_second_per_thread(&self, threads: usize) -> f64 {
        self.nnz as f64 * self.epochs as f64 / self.seconds.max(1e-9) / self.busy_threads(threads) as f64
    }
}

/// Something to do with an algorithm, whichever it is (Rust has no generic closures).
pub trait WithAlgorithm {
    type Output;
    fn run<A: Algorithm>(self, algorithm: A) -> Result<Self::Output>;
}

/// Builds the algorithm `options` ask for, fitted to the grid, and hands it to `then`.
/// The one place that lists the algorithms.
pub fn with_algorithm<W: WithAlgorithm>(options: &TrainOptions, layout: &Layout, then: W) -> Result<W::Output> {
    let shards = layout.manifest.shards.len();
    if options.accelerate.is_some() && options.algorithm != AlgorithmName::Cocoa {
        let name = options.algorithm.name();
        return Err(LineaError::Usage(format!("--accelerate is Catalyst's outer loop around CoCoA; {name} has none")));
    }
    match options.algorithm {
        AlgorithmName::Auto => Err(LineaError::Usage(
            "--algorithm auto is chosen by `linea train` before a run starts; this run names no algorithm".into(),
        )),
        AlgorithmName::Scd => {
            if options.elastic.is_some() {
                return Err(LineaError::Usage(
                    "--elastic scales CoCoA's slots; SCD gives the same model for any worker count and has none".into(),
                ));
            }
            let config =
                ScdConfig::new(options.loss, options.l2, options.l1, options.epochs, options.tolerance, options.seed)?
                    .fitted_to(layout.shapes.len(), layout.manifest.rows);
            let config = layout.manifest.fit_ranges(config)?;
            then.run(Scd::new(config, layout.shapes.clone(), shards))
        }
        AlgorithmName::Cocoa => {
            let slots = options.slots.max(1) as u32;
            let config = CocoaConfig::new(
                options.loss,
                options.l2,
                slots,
                options.local_passes,
                options.epochs,
                options.gap_tolerance,
                options.seed,
            )?;
            let config = if options.gap_every_epoch { config.with_gap_every_epoch() } else { config };
            let config = match options.elastic {
                Some(elastic) => config.with_elastic(elastic)?,
                None => config,
            };
            let config = match options.accelerate {
                Some(accelerate) => config.with_accelerate(accelerate)?,
                None => config,
            };
            let rows = layout.manifest.shards.iter().map(|s| s.rows).collect();
            let started = Instant::now();
            let cocoa =
                Cocoa::new(config, &layout.shapes, rows)?.with_clock(Box::new(move || started.elapsed().as_secs_f64()));
            then.run(cocoa)
        }
        AlgorithmName::Lbfgs | AlgorithmName::Hybrid | AlgorithmName::Ipm => {
            let mode = match options.algorithm {
                AlgorithmName::Lbfgs => Mode::Lbfgs,
                AlgorithmName::Hybrid => Mode::Hybrid,
                _ => Mode::Ipm(options.mixing),
            };
            let name = options.algorithm.name();
            if options.elastic.is_some() {
                return Err(LineaError::Usage(format!("--elastic scales CoCoA's slots; {name} has no elastic policy")));
            }
            if options.l1 > 0.0 {
                return Err(LineaError::Usage(format!(
                    "--l1 needs a solver for non-smooth penalties (scd); {name} minimizes sum loss + l2 |w|^2"
                )));
            }
            let config = LinearConfig::new(
                mode,
                options.loss,
                options.l2,
                options.slots.max(1) as u32,
                options.memory,
                options.epochs,
                options.tolerance,
                options.gradient_tolerance,
                options.rate,
                options.seed,
            )?
            .with_precondition(options.precondition)
            .with_solver(options.solver)
            .with_gap_tolerance(options.gap_tolerance)?;
            let rows = layout.manifest.shards.iter().map(|s| s.rows).collect();
            then.run(Linear::new(config, &layout.shapes, rows)?)
        }
    }
}

/// The algorithms `linea train --algorithm` knows. The variants' doc comments are
/// `--algorithm`'s help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AlgorithmName {
    /// `linea train`'s default: the algorithm that reached the optimum first on problems like
    /// this one, chosen from the data and the parameters only (never the machine), so the
    /// same grid and flags give the same model on every machine (docs/algorithms.md, "When to
    /// pick which"). Not for `linea master`, whose default is scd.
    Auto,
    /// Scalable Coordinate Descent: the same model bytes for any worker count.
    Scd,
    /// CoCoA+ with an SDCA local solver: a duality-gap certificate; the model depends on
    /// the slot count K (--slots), not on how many processes serve the slots.
    Cocoa,
    /// L-BFGS on exact batch gradients ("distributed gradient"): the same model bytes for
    /// any worker count, like SCD.
    Lbfgs,
    /// One AdaGrad pass per slot, averaged per feature, then L-BFGS (Agarwal et al.): the
    /// model depends on --slots, not on the processes serving them.
    Hybrid,
    /// Iterative parameter mixtures (Hall et al.): every epoch each slot runs an online
    /// pass from the mixed model (SGD; the averaged perceptron for hinge), then they are
    /// averaged. Fast early accuracy; does not converge to the regularized optimum in
    /// general. Depends on --slots.
    Ipm,
}

impl AlgorithmName {
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmName::Auto => "auto",
            AlgorithmName::Scd => "scd",
            AlgorithmName::Cocoa => "cocoa",
            AlgorithmName::Lbfgs => "lbfgs",
            AlgorithmName::Hybrid => "hybrid",
            AlgorithmName::Ipm => "ipm",
        }
    }

    /// Whether the model depends on the slot count K (not on the worker count).
    pub fn uses_slots(self) -> bool {
        matches!(self, AlgorithmName::Cocoa | AlgorithmName::Hybrid | AlgorithmName::Ipm)
    }
}

pub fn describe_grid(layout: &Layout, data: &str, started: Instant, progress: &Progress) {
    let m = &layout.manifest;
    progress.always(&format!(
        "loaded {data}: {} rows, {} blocks ({} impure), {} row shards, {} non-zeros in {:.2}s",
        m.rows,
        m.blocks.len(),
        m.blocks.iter().filter(|b| !b.pure).count(),
        m.shards.len(),
        m.nnz,
        started.elapsed().as_secs_f64()
    ));
}

/// Runs iterations until the algorithm stops, appending to `trace` (which a resumed run
/// brings from its checkpoint). `after` follows every iteration, with the trace updated
/// when the iteration ended an epoch (status, and checkpoints when `checkpoints`: then every
/// iteration must be recoverable, as must every one on a runner that can lose a unit:
/// [`Recovery::for_iteration`]). The run stops at the algorithm's own rule, or at the end of
/// the epoch in which `interrupt` received a signal. When it stops, the algorithm collects
/// what its units kept ([`Algorithm::settle`]), so its weights are whole. Returns the total
/// seconds, the collection included.
// Eight: the run, its sizes, and one hook per concern around it (progress, trace,
// checkpoints, signals, the caller's); a struct for its two callers would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn drive<A: Algorithm, R: Runner<A::Kernel>>(
    algorithm: &mut A,
    runner: &mut R,
    (rows, nnz): (f64, f64),
    progress: &Progress,
    trace: &mut Vec<EpochPoint>,
    checkpoints: bool,
    interrupt: &Interrupt,
    mut after: impl FnMut(&A, &Iteration<A::Step>, &[EpochPoint]) -> Result<()>,
) -> Result<f64>
where
    LineaError: From<R::Error>,
{
    let bar = progress.steps(algorithm.max_epochs() as u64, "training");
    let earlier = trace.last().map_or(0.0, |p| p.seconds);
    let started = Instant::now();
    let mut epoch_started = Instant::now();
    while algorithm.stop_reason().is_none() {
        let iteration = algorithm.next_iter(runner, Recovery::for_iteration(runner, checkpoints))?;
        if !iteration.epoch_done {
            after(algorithm, &iteration, trace)?;
            continue;
        }
        let report = algorithm.progress();
        let objective = report.objective.unwrap_or(f64::NAN);
        let seconds = earlier + started.elapsed().as_secs_f64();
        if let (true, Some(objective)) = (trace.is_empty(), report.initial_objective) {
            trace.push(EpochPoint {
                epoch: 0,
                seconds: 0.0,
                objective,
                gap: report.initial_gap,
                workers: report.desired_workers,
            });
        }
        let workers = report.desired_workers;
        // An epoch whose objective was not computed (CoCoA's gap schedule) is a blank point:
        // the last computed one is not repeated under its number.
        let (computed, gap) = if report.stale { (f64::NAN, None) } else { (objective, report.gap) };
        trace.push(EpochPoint { epoch: report.epoch, seconds, objective: computed, gap, workers });
        after(algorithm, &iteration, trace)?;
        if let Some(note) = &iteration.note {
            bar.note(note);
        }
        let epoch_seconds = epoch_started.elapsed().as_secs_f64().max(1e-9);
        epoch_started = Instant::now();
        let objective = match (report.stale, report.gap) {
            (true, _) => "not computed".to_string(),
            (false, Some(g)) => format!("{objective:.10e}  gap {:.2e}", g.relative),
            (false, None) => format!("{objective:.10e}"),
        };
        bar.step(
            report.epoch as u64,
            format!(
                "epoch {:>3}  objective {objective}  {:.2}M examples/s  {:.1}M nnz/s",
                report.epoch,
                rows / epoch_seconds / 1e6,
                nnz / epoch_seconds / 1e6
            ),
        );
        if let Some(signal) = interrupt.received() {
            bar.note(&format!("{signal}: stopping after epoch {}", report.epoch));
            break;
        }
    }
    algorithm.settle(runner)?;
    bar.finish();
    Ok(earlier + started.elapsed().as_secs_f64())
}

/// Writes the model (and the trace and plot if asked) of a finished run; `interrupt` is the
/// one [`drive`] watched (a signal that came after the run's own rule stopped it changed
/// nothing and is not reported).
pub fn finish<A: Algorithm>(
    options: &TrainOptions,
    layout: &Layout,
    algorithm: &A,
    trace: Vec<EpochPoint>,
    seconds: f64,
    interrupt: &Interrupt,
) -> Result<TrainSummary> {
    // Training ran on targets in the grid's scale (squared loss, see `TargetScale`); the
    // model, objective, gap and trace are reported in the labels' own units, exactly (the
    // scale is a power of two).
    let scale = layout.manifest.target_scale(options.loss);
    let unscale_gap = |g: Gap| Gap { absolute: scale.unscale_objective(g.absolute), ..g };
    let report = algorithm.progress();
    let objective = report.objective.or(trace.last().map(|p| p.objective)).unwrap_or(f64::NAN);
    let objective = scale.unscale_objective(objective);
    let trace: Vec<EpochPoint> = trace.into_iter().map(|p| trace::unscaled(p, scale)).collect();
    let weights = algorithm.weights();
    let header = ModelHeader {
        format: MODEL_FORMAT.to_string(),
        algorithm: algorithm.name().to_string(),
        batch_solver: algorithm.batch_solver().map(str::to_string),
        loss: options.loss,
        l2: options.l2,
        l1: options.l1,
        spec: layout.manifest.spec.clone(),
        training: TrainingRecord {
            rows: layout.manifest.rows,
            nnz: layout.manifest.nnz,
            epochs: report.epoch,
            objective,
            tolerance: options.tolerance,
            seed: options.seed,
            target_scale: scale,
            duality_gap: report.gap.map(|g| g.relative),
            chosen_by: options.chosen_by.clone(),
        },
    };
    let storage = storage::open(&options.data)?;
    let model_bytes = render_model(&header, layout, storage.as_ref(), &weights, |w| scale.unscale_weight(w))?;
    storage::write_file(&options.model, &model_bytes)?;
    if let Some(path) = &options.trace {
        // The whole trace again (a local one was written as the run went): an s3:// one
        // appears only now.
        storage::write_file(path, trace::csv(&trace, &ran(algorithm)).as_bytes())?;
    }
    if let Some(path) = &options.plot {
        let title = format!(
            "linea {}, {} loss, l2={}, l1={}",
            algorithm.name().to_uppercase(),
            options.loss.name(),
            options.l2,
            options.l1
        );
        storage::write_file(path, plot::convergence_svg(&trace, &title, algorithm.gap_name()).as_bytes())?;
    }
    Ok(TrainSummary {
        algorithm: algorithm.name(),
        batch_solver: algorithm.batch_solver(),
        gap_name: algorithm.gap_name(),
        objective,
        gap: report.gap.map(unscale_gap),
        epochs: report.epoch,
        seconds,
        nnz: layout.manifest.nnz,
        units: algorithm.kernel().units(),
        trace,
        model_bytes,
        interrupted: interrupt.received().filter(|_| algorithm.stop_reason().is_none()),
    })
}

/// Model lines in grid order: blocks as the manifest lists them, features by dictionary, each
/// block's dictionary read from the grid only for its lines (training never holds them:
/// docs/benchmarks/past-the-memory-wall.md, "Bytes per feature"). `unscale` maps a training weight
/// to the model's.
fn render_model(
    header: &ModelHeader,
    layout: &Layout,
    storage: &dyn storage::Storage,
    theta: &[Vec<f64>],
    unscale: impl Fn(f64) -> f64,
) -> Result<Vec<u8>> {
    let mut out = Model::render_header(header);
    for (index, (block, weights)) in layout.manifest.blocks.iter().zip(theta).enumerate() {
        let dictionary = layout.dictionary(storage, index)?;
        let entries =
            dictionary.iter().zip(weights).map(|(e, &w)| (block.variable.as_str(), e.key.as_str(), unscale(w)));
        Model::render_entries(&mut out, entries);
    }
    Ok(out)
}
