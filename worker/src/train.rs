//! `linea train`: SCD on a prepared grid, in this process on `--threads` threads, or with
//! `--workers N` on the distributed runtime (a master and N worker processes here).

use crate::error::{LineaError, Result};
use crate::gridload::{self, Layout, LoadedGrid};
use crate::model::{MODEL_FORMAT, Model, ModelHeader, TrainingRecord};
use crate::plot;
use crate::progress::Progress;
use crate::storage;
use linea_engine::scd::local::LocalExecutor;
use linea_engine::scd::{Executor, IterationReport, Scd, ScdConfig};
use linea_engine::{EngineError, Loss};
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub data: String,
    pub model: String,
    pub loss: Loss,
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
}

impl TrainOptions {
    pub fn config(&self) -> Result<ScdConfig> {
        Ok(ScdConfig::new(self.loss, self.l2, self.l1, self.epochs, self.tolerance, self.seed)?)
    }
}

/// One point of the convergence trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochPoint {
    pub epoch: u32,
    pub seconds: f64,
    pub objective: f64,
}

pub struct TrainSummary {
    pub objective: f64,
    pub epochs: u32,
    pub seconds: f64,
    pub nnz: u64,
    pub trace: Vec<EpochPoint>,
    pub model_bytes: Vec<u8>,
}

impl TrainSummary {
    /// Non-zeros swept per second per thread: every epoch visits each non-zero once for
    /// statistics and once for the prediction update.
    pub fn nnz_per_second_per_thread(&self, threads: usize) -> f64 {
        self.nnz as f64 * self.epochs as f64 / self.seconds.max(1e-9) / threads.max(1) as f64
    }
}

pub fn train(options: &TrainOptions, progress: &Progress) -> Result<TrainSummary> {
    if options.workers > 0 {
        return crate::runtime::embedded::train(options, progress);
    }
    let config = options.config()?;
    let started = Instant::now();
    let storage = storage::open(&options.data)?;
    let loaded = gridload::load(storage.as_ref(), options.loss)?;
    describe_grid(&loaded.layout, &options.data, started, progress);
    let config = config.fitted_to(loaded.layout.shapes.len(), loaded.layout.manifest.rows);
    let config = loaded.layout.manifest.fit_ranges(config)?;
    let (scd, trace, seconds) = run(&loaded, config, options.threads, progress, |_, _| {})?;
    finish(options, &loaded.layout, &scd, trace, seconds)
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

/// Writes the model (and the trace and plot if asked) of a finished run.
pub fn finish(
    options: &TrainOptions,
    layout: &Layout,
    scd: &Scd,
    trace: Vec<EpochPoint>,
    seconds: f64,
) -> Result<TrainSummary> {
    // Training ran on targets in the grid's scale; the model and objectives are reported in
    // the labels' own units (exactly: the scale is a power of two).
    let scale = layout.manifest.target_scale(options.loss);
    let objective = scale.unscale_objective(*scd.state.objectives.last().expect("at least one epoch"));
    let trace: Vec<EpochPoint> =
        trace.into_iter().map(|p| EpochPoint { objective: scale.unscale_objective(p.objective), ..p }).collect();
    let theta: Vec<Vec<f64>> =
        scd.state.theta.iter().map(|b| b.iter().map(|&w| scale.unscale_weight(w)).collect()).collect();
    let header = ModelHeader {
        format: MODEL_FORMAT.to_string(),
        algorithm: "scd".to_string(),
        loss: options.loss,
        l2: options.l2,
        l1: options.l1,
        spec: layout.manifest.spec.clone(),
        training: TrainingRecord {
            rows: layout.manifest.rows,
            nnz: layout.manifest.nnz,
            epochs: scd.state.epoch,
            objective,
            tolerance: options.tolerance,
            seed: options.seed,
            target_scale: scale,
        },
    };
    let model_bytes = render_model(&header, layout, &theta);
    storage::write_file(&options.model, &model_bytes)?;
    let summary =
        TrainSummary { objective, epochs: scd.state.epoch, seconds, nnz: layout.manifest.nnz, trace, model_bytes };
    if let Some(path) = &options.trace {
        let mut csv = String::from("epoch,seconds,objective\n");
        for p in &summary.trace {
            csv.push_str(&format!("{},{:.6},{}\n", p.epoch, p.seconds, p.objective));
        }
        storage::write_file(path, csv.as_bytes())?;
    }
    if let Some(path) = &options.plot {
        let title = format!("linea SCD, {} loss, l2={}, l1={}", options.loss.name(), options.l2, options.l1);
        storage::write_file(path, plot::convergence_svg(&summary.trace, &title).as_bytes())?;
    }
    Ok(summary)
}

/// Trains in this process to convergence, calling `on_iteration` after every SCD iteration
/// (tests use it to watch the objective). Returns the solver, the per-epoch trace and the
/// seconds spent.
pub fn run(
    loaded: &LoadedGrid,
    config: ScdConfig,
    threads: usize,
    progress: &Progress,
    mut on_iteration: impl FnMut(&Scd, &IterationReport),
) -> Result<(Scd, Vec<EpochPoint>, f64)> {
    let mut scd = Scd::new(config, loaded.grid.shapes.clone());
    let mut executor = LocalExecutor::new(&loaded.grid, config.loss, threads);
    let mut trace = Vec::new();
    let (rows, nnz) = (loaded.grid.rows() as f64, loaded.grid.nnz() as f64);
    let seconds = drive(
        &mut scd,
        &mut executor,
        (rows, nnz),
        progress,
        &mut trace,
        |scd, report| {
            on_iteration(scd, report);
            Ok::<(), EngineError>(())
        },
        |_, _| Ok(()),
    )?;
    Ok((scd, trace, seconds))
}

/// Runs epochs until [`Scd::finished`], on any executor, appending to `trace` (which a
/// resumed run brings from its checkpoint). `on_iteration` follows every iteration and
/// `on_epoch` every epoch (checkpoints hook in there). Returns the total seconds.
pub fn drive<E: Executor>(
    scd: &mut Scd,
    executor: &mut E,
    (rows, nnz): (f64, f64),
    progress: &Progress,
    trace: &mut Vec<EpochPoint>,
    mut on_iteration: impl FnMut(&Scd, &IterationReport) -> std::result::Result<(), E::Error>,
    mut on_epoch: impl FnMut(&Scd, &[EpochPoint]) -> Result<()>,
) -> Result<f64>
where
    LineaError: From<E::Error>,
{
    let bar = progress.steps(scd.config.max_epochs as u64, "training");
    let earlier = trace.last().map_or(0.0, |p| p.seconds);
    let started = Instant::now();
    while !scd.finished() {
        let epoch_started = Instant::now();
        let objective = scd.run_epoch(executor, |scd, report, _| on_iteration(scd, report))?;
        if trace.is_empty() {
            trace.push(EpochPoint { epoch: 0, seconds: 0.0, objective: scd.state.objectives[0] });
        }
        let seconds = earlier + started.elapsed().as_secs_f64();
        trace.push(EpochPoint { epoch: scd.state.epoch, seconds, objective });
        on_epoch(scd, trace)?;
        let epoch_seconds = epoch_started.elapsed().as_secs_f64().max(1e-9);
        bar.step(
            scd.state.epoch as u64,
            format!(
                "epoch {:>3}  objective {objective:.10e}  {:.2}M examples/s  {:.1}M nnz/s",
                scd.state.epoch,
                rows / epoch_seconds / 1e6,
                nnz / epoch_seconds / 1e6
            ),
        );
    }
    bar.finish();
    Ok(earlier + started.elapsed().as_secs_f64())
}

/// Model lines in grid order: blocks as the manifest lists them, features by dictionary.
fn render_model(header: &ModelHeader, layout: &Layout, theta: &[Vec<f64>]) -> Vec<u8> {
    let entries = layout.manifest.blocks.iter().zip(&layout.dictionaries).zip(theta).flat_map(
        |((block, dictionary), weights)| {
            dictionary.iter().zip(weights).map(move |(entry, &w)| (block.variable.as_str(), entry.key.as_str(), w))
        },
    );
    Model::render(header, entries)
}
