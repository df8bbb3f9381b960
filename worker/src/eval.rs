//! `linea eval` and `linea predict`: a model applied to a prepared grid or to raw input.

use crate::error::{LineaError, Result};
use crate::gridload;
use crate::input::source::RawInput;
use crate::input::{self, Format, RawExample};
use crate::model::Model;
use crate::prepare::BIAS;
use crate::storage;
use linea_engine::algorithm::{PhaseRequest, Reduction, Runner};
use linea_engine::fixed::{
    PredictionRange, Quantity, SumRange, TargetScale, from_fixed128, prediction_value, quantize,
};
use linea_engine::metrics::{self, Metrics};
use linea_engine::runner::LocalRunner;
use linea_engine::scd::kernel::{ScdKernel, ScdParameters, ScdPhase};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// Sum of losses on this data plus the model's regularization penalty.
    pub objective: f64,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// Reads a model from a local path or an `s3://` location.
pub fn read_model(location: &str) -> Result<Model> {
    let bytes = storage::read_file(location)?;
    Model::parse(&bytes, location)
}

/// The model's regularization penalty, summed exactly so the order of a hash map can't
/// change its last bits.
fn penalty(model: &Model) -> Result<f64> {
    let reg = linea_engine::objective::Regularization { l2: model.header.l2, l1: model.header.l1 };
    let weights = model.weights.values().flat_map(|k| k.values());
    let range = SumRange::for_partials(model.weights.values().map(|k| k.len()).sum());
    Ok(from_fixed128(range.sum(Quantity::Penalty, weights.map(|&w| reg.penalty(w)))?))
}

/// Whether `data` is a prepared grid (a folder or `s3://` prefix with a manifest) rather
/// than a raw file. Raw files are read locally; on S3 only grids can be evaluated.
pub fn is_grid(data: &str) -> Result<bool> {
    if data.starts_with("s3://") {
        return Ok(true);
    }
    storage::open(data)?.exists(crate::manifest::MANIFEST)
}

pub fn evaluate(model: &Model, data: &str, format: Option<Format>) -> Result<Evaluation> {
    let loss = model.header.loss;
    // Losses are summed in the units training used (targets times a power of two), then
    // converted back exactly; targets and predictions for the metrics are in label units.
    let (targets, predictions, loss_sum) = if is_grid(data)? {
        let storage = storage::open(data)?;
        let loaded = gridload::load(storage.as_ref(), loss)?;
        let manifest = &loaded.layout.manifest;
        let scale = manifest.target_scale(loss);
        let theta: Vec<Vec<f64>> = manifest
            .blocks
            .iter()
            .enumerate()
            .map(|(index, block)| {
                let dictionary = loaded.layout.dictionary(storage.as_ref(), index)?;
                Ok(dictionary.iter().map(|e| scale.scale(model.weight(&block.variable, &e.key))).collect())
            })
            .collect::<Result<_>>()?;
        let bound = PredictionRange::for_terms(manifest.ranges.map_or(1, |r| r.row_nnz_max));
        for (weights, shape) in theta.iter().zip(&loaded.layout.shapes) {
            bound.check(weights, &shape.max_abs)?;
        }
        // The trainer's own kernel: predictions rebuilt from the weights, the loss summed
        // exactly, so the objective on the training grid is the training objective.
        let kernel = ScdKernel::new(loss, loaded.grid.targets.len());
        let mut runner = LocalRunner::new(kernel, &loaded.grid, rayon::current_num_threads());
        runner.restore_all(&ScdParameters {
            theta: theta.into_iter().map(Into::into).collect(),
            snapshots: Vec::new(),
        })?;
        let request = PhaseRequest { phase: ScdPhase::Loss, reduction: Reduction::Sum { len: 1 }, mutates: false };
        let loss_sum = scale.unscale_objective(from_fixed128(runner.run(request)?.sums.sums[0]));
        let unscale = |v: f64| scale.unscale_weight(v);
        let predictions = runner
            .states()
            .flatten()
            .flat_map(|s| s.predictions.iter().map(|&p| unscale(prediction_value(p))))
            .collect();
        (loaded.grid.targets.concat().into_iter().map(unscale).collect(), predictions, loss_sum)
    } else {
        let scale = model.header.training.target_scale;
        let mut targets = Vec::new();
        let mut predictions = Vec::new();
        let file = data.to_string();
        score_raw(model, data, format, |label, line, margin| {
            if label.is_nan() {
                return Err(LineaError::input(
                    &file,
                    line,
                    "missing label (eval needs labelled examples; use predict)",
                ));
            }
            targets.push(loss.target(label).map_err(|e| LineaError::input(&file, line, e.to_string()))?);
            predictions.push(margin);
            Ok(())
        })?;
        let range = SumRange::for_partials(targets.len());
        let losses = targets.iter().zip(&predictions).map(|(&y, &f)| loss.value(scale.scale(y), scale.scale(f)));
        let loss_sum = scale.unscale_objective(from_fixed128(range.sum(Quantity::Loss, losses)?));
        (targets, predictions, loss_sum)
    };
    let metrics = metrics::evaluate(loss, &targets, &predictions);
    Ok(Evaluation { objective: loss_sum + penalty(model)?, metrics })
}

/// Featurizes raw input as the model's spec says and calls `f(label, line, margin)` per
/// example. Margins are summed in the same fixed point as training's predictions.
pub fn score_raw(
    model: &Model,
    path: &str,
    format: Option<Format>,
    f: impl FnMut(f64, u64, f64) -> Result<()>,
) -> Result<()> {
    // A local file, or an s3:// object fetched first.
    let input = RawInput::open(path)?;
    score_file(model, &input.path, path, format, f).map_err(|e| input.rename(e))
}

fn score_file(
    model: &Model,
    local: &str,
    path: &str,
    format: Option<Format>,
    mut f: impl FnMut(f64, u64, f64) -> Result<()>,
) -> Result<()> {
    let mut spec = model.header.spec.clone();
    if let Some(format) = format {
        spec.format = format;
    }
    let mut reader = input::open(local, &spec)?;
    let mut example = RawExample::default();
    // Margins are summed in training's units (see `TargetScale`) with checked additions:
    // a model applied to data far outside its training range fails instead of wrapping.
    let scale: TargetScale = model.header.training.target_scale;
    let weight = |variable: &str, key: &str| scale.scale(model.weight(variable, key));
    let term = |value: f64| -> Result<i64> {
        PredictionRange::for_terms(1).check(&[value], &[1.0])?;
        Ok(quantize(value))
    };
    let bias = term(weight(BIAS, ""))?;
    let mut examples = 0u64;
    while reader.read(&mut example)? {
        let mut margin = bias;
        for (v, key, x) in example.features() {
            let w = weight(reader.variable_name(v), key);
            margin = margin.checked_add(term(x * w)?).ok_or_else(|| {
                LineaError::input(path, example.line, "the prediction left the fixed-point range (|f| < 2^31)")
            })?;
        }
        f(example.label, example.line, scale.unscale_weight(prediction_value(margin)))?;
        examples += 1;
    }
    if examples == 0 {
        return Err(LineaError::data(path, "no examples: the input has no data lines"));
    }
    Ok(())
}

/// Writes one score per input example: P(positive) for logistic loss, the prediction for
/// squared loss.
pub fn predict(model: &Model, input: &str, format: Option<Format>, output: &str) -> Result<u64> {
    let mut text = String::new();
    let mut count = 0;
    score_raw(model, input, format, |_, _, margin| {
        text.push_str(&model.header.loss.score(margin).to_string());
        text.push('\n');
        count += 1;
        Ok(())
    })?;
    storage::write_file(output, text.as_bytes())?;
    Ok(count)
}
