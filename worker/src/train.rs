//! `linea train`: SCD on a prepared grid, in this process, on `--threads` threads.

use crate::error::{LineaError, Result};
use crate::gridload::{self, LoadedGrid};
use crate::model::{MODEL_FORMAT, Model, ModelHeader, TrainingRecord};
use crate::plot;
use crate::progress::Progress;
use crate::storage;
use linea_engine::scd::local::LocalExecutor;
use linea_engine::scd::{IterationReport, Scd, ScdConfig};
use linea_engine::{EngineError, Loss};
use std::time::Instant;

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
}

/// One point of the convergence trace.
#[derive(Debug, Clone, PartialEq)]
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
    let config = ScdConfig::new(options.loss, options.l2, options.l1, options.epochs, options.tolerance, options.seed)?;
    let started = Instant::now();
    let storage = storage::open(&options.data)?;
    let loaded = gridload::load(storage.as_ref(), options.loss)?;
    progress.always(&format!(
        "loaded {}: {} rows, {} blocks ({} impure), {} non-zeros in {:.2}s",
        options.data,
        loaded.manifest.rows,
        loaded.manifest.blocks.len(),
        loaded.manifest.blocks.iter().filter(|b| !b.pure).count(),
        loaded.manifest.nnz,
        started.elapsed().as_secs_f64()
    ));
    let config = config.fitted_to(loaded.manifest.blocks.len(), loaded.manifest.rows);
    let (scd, trace, seconds) = run(&loaded, config, options.threads, progress, |_, _| {})?;
    let objective = *scd.state.objectives.last().expect("at least one epoch");
    let header = ModelHeader {
        format: MODEL_FORMAT.to_string(),
        algorithm: "scd".to_string(),
        loss: options.loss,
        l2: options.l2,
        l1: options.l1,
        spec: loaded.manifest.spec.clone(),
        training: TrainingRecord {
            rows: loaded.manifest.rows,
            nnz: loaded.manifest.nnz,
            epochs: scd.state.epoch,
            objective,
            tolerance: options.tolerance,
            seed: options.seed,
        },
    };
    let model_bytes = render_model(&header, &loaded, &scd.state.theta);
    storage::write_file(&options.model, &model_bytes)?;
    let summary =
        TrainSummary { objective, epochs: scd.state.epoch, seconds, nnz: loaded.manifest.nnz, trace, model_bytes };
    if let Some(path) = &options.trace {
        let mut csv = String::from("epoch,seconds,objective\n");
        for p in &summary.trace {
            csv.push_str(&format!("{},{:.6},{}\n", p.epoch, p.seconds, p.objective));
        }
        storage::write_file(path, csv.as_bytes())?;
    }
    if let Some(path) = &options.plot {
        storage::write_file(
            path,
            plot::convergence_svg(
                &summary.trace,
                &format!("linea SCD, {} loss, l2={}, l1={}", options.loss.name(), options.l2, options.l1),
            )
            .as_bytes(),
        )?;
    }
    Ok(summary)
}

/// Trains to convergence, calling `on_iteration` after every SCD iteration (tests use it
/// to watch the objective). Returns the solver, the per-epoch trace and the seconds spent.
pub fn run(
    loaded: &LoadedGrid,
    config: ScdConfig,
    threads: usize,
    progress: &Progress,
    mut on_iteration: impl FnMut(&Scd, &IterationReport),
) -> Result<(Scd, Vec<EpochPoint>, f64)> {
    let mut scd = Scd::new(config, loaded.grid.shapes.clone());
    let mut executor = LocalExecutor::new(&loaded.grid, config.loss, threads);
    let bar = progress.steps(config.max_epochs as u64, "training");
    let started = Instant::now();
    let mut trace = Vec::new();
    let nnz = loaded.grid.nnz() as f64;
    let rows = loaded.grid.rows() as f64;
    while !scd.finished() {
        let epoch_started = Instant::now();
        let objective = scd
            .run_epoch(&mut executor, |scd, report, _| {
                on_iteration(scd, report);
                Ok::<(), EngineError>(())
            })
            .map_err(LineaError::Training)?;
        if trace.is_empty() {
            trace.push(EpochPoint { epoch: 0, seconds: 0.0, objective: scd.state.objectives[0] });
        }
        let seconds = started.elapsed().as_secs_f64();
        trace.push(EpochPoint { epoch: scd.state.epoch, seconds, objective });
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
    Ok((scd, trace, started.elapsed().as_secs_f64()))
}

/// Model lines in grid order: blocks as the manifest lists them, features by dictionary.
fn render_model(header: &ModelHeader, loaded: &LoadedGrid, theta: &[Vec<f64>]) -> Vec<u8> {
    let entries = loaded.manifest.blocks.iter().zip(&loaded.dictionaries).zip(theta).flat_map(
        |((block, dictionary), weights)| {
            dictionary.iter().zip(weights).map(move |(entry, &w)| (block.variable.as_str(), entry.key.as_str(), w))
        },
    );
    Model::render(header, entries)
}
