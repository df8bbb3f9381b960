//! The model file: a JSON header line, then one `[variable, key, weight]` line per non-zero
//! weight, in grid order. Text so users can read and diff it; weights printed in the
//! shortest form that reads back to the same bits; nothing that varies between runs (no
//! times, no host names), so identical models are identical bytes.

use crate::error::{LineaError, Result};
use crate::input::FeatureSpec;
use linea_engine::Loss;
use linea_engine::fixed::TargetScale;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const MODEL_FORMAT: &str = "linea-model/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelHeader {
    pub format: String,
    pub algorithm: String,
    /// The batch solver where it is not the algorithm's own L-BFGS (`newton`: `--algorithm
    /// lbfgs|hybrid --batch-solver newton`, and `auto`'s Newton). Absent otherwise, so those
    /// models are unchanged; a model written before this field existed reads as absent
    /// whichever solver trained it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_solver: Option<String>,
    pub loss: Loss,
    pub l2: f64,
    pub l1: f64,
    /// How raw input is featurized, so eval and predict read it as training did.
    pub spec: FeatureSpec,
    pub training: TrainingRecord,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingRecord {
    pub rows: u64,
    pub nnz: u64,
    pub epochs: u32,
    pub objective: f64,
    pub tolerance: f64,
    pub seed: u64,
    /// The power of two training multiplied squared-loss targets by (absent when 1);
    /// eval and predict use it to sum in the same fixed-point units.
    #[serde(default, skip_serializing_if = "TargetScale::is_one")]
    pub target_scale: TargetScale,
    /// The duality gap relative to the primal objective after the last epoch, for algorithms
    /// that have one (absent for SCD, so its models are unchanged): the certificate a master
    /// reports to the operator when it exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duality_gap: Option<f64>,
    /// Why `--algorithm auto` chose the header's algorithm ("auto: ..."; absent when the
    /// algorithm was named, so those models are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_by: Option<String>,
}

pub struct Model {
    pub header: ModelHeader,
    /// variable -> key -> weight.
    pub weights: HashMap<String, HashMap<String, f64>>,
}

impl Model {
    pub fn weight(&self, variable: &str, key: &str) -> f64 {
        self.weights.get(variable).and_then(|k| k.get(key)).copied().unwrap_or(0.0)
    }

    /// Renders the file. `entries` are (variable, key, weight) in grid order.
    pub fn render<'a>(header: &ModelHeader, entries: impl Iterator<Item = (&'a str, &'a str, f64)>) -> Vec<u8> {
        let mut out = Self::render_header(header);
        Self::render_entries(&mut out, entries);
        out
    }

    /// The header line: a file is this, then [`Model::render_entries`] of each block in grid
    /// order (so a writer needs one block's dictionary at a time).
    pub fn render_header(header: &ModelHeader) -> Vec<u8> {
        let mut out = serde_json::to_vec(header).expect("header serializes");
        out.push(b'\n');
        out
    }

    /// Appends a line per non-zero weight.
    pub fn render_entries<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a str, &'a str, f64)>) {
        for (variable, key, weight) in entries.filter(|e| e.2 != 0.0) {
            serde_json::to_writer(&mut *out, &(variable, key, weight)).expect("entry serializes");
            out.push(b'\n');
        }
    }

    pub fn parse(bytes: &[u8], file: &str) -> Result<Model> {
        let text =
            std::str::from_utf8(bytes).map_err(|_| LineaError::data(file, "not a linea model (not UTF-8 text)"))?;
        let mut lines = text.lines();
        let header: ModelHeader = lines
            .next()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| LineaError::data(file, "not a linea model (no header line)"))?;
        if header.format != MODEL_FORMAT {
            return Err(LineaError::data(file, format!("model format {} is not {MODEL_FORMAT}", header.format)));
        }
        let mut weights: HashMap<String, HashMap<String, f64>> = HashMap::new();
        for (i, line) in lines.enumerate() {
            let (variable, key, weight): (String, String, f64) = serde_json::from_str(line)
                .map_err(|e| LineaError::input(file, i as u64 + 2, format!("bad weight line: {e}")))?;
            weights.entry(variable).or_default().insert(key, weight);
        }
        Ok(Model { header, weights })
    }
}
