//! The grid manifest: the one file that says what a grid holds. It is written last, so a
//! grid without one is incomplete and is never read.

use crate::error::{LineaError, Result};
use crate::input::FeatureSpec;
use crate::input::source::InputFingerprint;
use crate::storage::Storage;
use linea_engine::codec;
use linea_engine::fixed::TargetScale;
use linea_engine::{Loss, scd::ScdConfig};
use serde::{Deserialize, Serialize};

pub const MANIFEST: &str = "manifest.json";
pub const GRID_FORMAT: &str = "linea-grid/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub spec: FeatureSpec,
    /// Input file name (without its folder, so equal inputs give equal manifests).
    pub source: String,
    /// The object the grid was prepared from (an `s3://` input), so `linea prepare --reuse`
    /// can tell the same input again; absent for a local file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputFingerprint>,
    pub rows: u64,
    pub nnz: u64,
    pub rows_per_shard: usize,
    pub shards: Vec<ShardEntry>,
    pub blocks: Vec<BlockEntry>,
    /// Ranges of the labels and values; absent in grids written before they were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<DataRanges>,
}

/// What training needs to know about the data's magnitudes before it starts: the label
/// range picks the fixed-point scale of squared-loss targets ([`TargetScale`]) and the
/// longest row bounds every prediction ([`linea_engine::fixed::PredictionRange`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DataRanges {
    pub label_min: f64,
    pub label_max: f64,
    /// Largest |value| of any feature (1 for the bias).
    pub value_max_abs: f64,
    /// Most non-zeros in one row, the bias included.
    pub row_nnz_max: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub rows: usize,
    pub labels: FileRef,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockEntry {
    pub name: String,
    /// The input variable the block's features come from (several blocks when split).
    pub variable: String,
    /// The variable is one numeric value (feature key "").
    pub dense: bool,
    pub pure: bool,
    pub features: usize,
    pub nnz: u64,
    pub dictionary: FileRef,
    /// One cell per row shard.
    pub cells: Vec<FileRef>,
}

/// An object of the grid with its size and CRC-32C.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRef {
    pub key: String,
    pub bytes: u64,
    pub crc32c: u32,
}

impl FileRef {
    /// Writes `bytes` under `key` and returns the reference to put in the manifest.
    pub fn write(storage: &dyn Storage, key: String, bytes: &[u8]) -> Result<FileRef> {
        storage.write(&key, bytes)?;
        Ok(FileRef { crc32c: codec::checksum(bytes), bytes: bytes.len() as u64, key })
    }

    /// Reads the object and verifies its checksum before anything decodes it.
    pub fn read(&self, storage: &dyn Storage) -> Result<Vec<u8>> {
        let bytes = storage.read(&self.key)?;
        codec::verify_checksum(&bytes, self.crc32c)
            .map_err(|source| LineaError::Engine { object: storage.describe(&self.key), source })?;
        Ok(bytes)
    }
}

impl Manifest {
    /// The power of two squared-loss targets are trained in ([`TargetScale`]); 1 for
    /// logistic loss and for grids without recorded ranges.
    pub fn target_scale(&self, loss: Loss) -> TargetScale {
        match (loss, &self.ranges) {
            (Loss::Squared, Some(r)) => TargetScale::for_labels(r.label_min.abs().max(r.label_max.abs())),
            _ => TargetScale::default(),
        }
    }

    /// `config` fitted to this grid's ranges: L1 in the targets' scale (L2 is scale-free),
    /// and the longest row for the prediction bound. Refuses squared-loss labels too far
    /// from 1 for any scale (beyond 2^+-500).
    pub fn fit_ranges(&self, mut config: ScdConfig) -> Result<ScdConfig> {
        if let (Loss::Squared, Some(r)) = (config.loss, &self.ranges) {
            let max = r.label_min.abs().max(r.label_max.abs());
            if !TargetScale::covers(max) {
                return Err(LineaError::data(
                    &self.source,
                    format!("the largest |label| is {max:e}; squared loss trains labels between 2^-500 and 2^500"),
                ));
            }
        }
        let scale = self.target_scale(config.loss);
        config.reg.l1 = scale.scale(config.reg.l1);
        config.row_terms = self.ranges.map_or(1, |r| r.row_nnz_max);
        Ok(config)
    }

    pub fn read(storage: &dyn Storage) -> Result<Manifest> {
        let bytes = storage.read(MANIFEST).map_err(|e| match e {
            LineaError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => LineaError::data(
                path.display().to_string(),
                "no grid here (manifest missing): run `linea prepare` first, or it did not finish",
            ),
            LineaError::NotFound { object } => LineaError::data(
                object,
                "no grid here (manifest missing): run `linea prepare` first, or it did not finish",
            ),
            other => other,
        })?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| LineaError::data(storage.describe(MANIFEST), format!("not a linea grid manifest: {e}")))?;
        if manifest.format != GRID_FORMAT {
            return Err(LineaError::data(
                storage.describe(MANIFEST),
                format!("grid format {} is not {GRID_FORMAT}", manifest.format),
            ));
        }
        Ok(manifest)
    }

    pub fn write(&self, storage: &dyn Storage) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("manifest serializes");
        storage.write(MANIFEST, &json)
    }
}
