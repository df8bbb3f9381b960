//! Shared helpers: the shared datasets, preparing them into temporary grids, and the
//! grid's rows in the plain sparse form the reference solvers take.
#![allow(dead_code)] // each test binary uses a different subset

pub mod job;
pub mod processes;
pub mod reference;

use linea_engine::Loss;
use linea_engine::scd::{Scd, ScdConfig};
use linea_worker::gridload::{self, LoadedGrid};
use linea_worker::input::{FeatureSpec, Format};
use linea_worker::prepare::{self, PrepareOptions};
use linea_worker::progress::Progress;
use linea_worker::storage::LocalStorage;
use std::path::PathBuf;

pub fn data(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
    root.join(path).to_string_lossy().into_owned()
}

pub fn spec(format: Format) -> FeatureSpec {
    FeatureSpec {
        format,
        label: None,
        positive: None,
        numeric: FeatureSpec::default_numeric(format),
        ignore: Vec::new(),
    }
}

/// Prepares `input` into a fresh temporary folder and loads it.
pub fn prepare(input: &str, spec: FeatureSpec, rows_per_shard: usize, loss: Loss) -> (tempfile::TempDir, LoadedGrid) {
    let dir = tempfile::tempdir().unwrap();
    let storage = LocalStorage::new(dir.path());
    let options = PrepareOptions {
        input: input.to_string(),
        spec,
        rows_per_shard,
        reuse: false,
        threads: 2,
        range_bytes: linea_worker::input::ranges::RANGE_BYTES,
    };
    prepare::prepare(&options, &storage, &Progress::silent()).unwrap();
    let loaded = gridload::load(&storage, loss).unwrap();
    (dir, loaded)
}

pub fn config(loaded: &LoadedGrid, loss: Loss, l2: f64, tolerance: f64) -> ScdConfig {
    let mut config = ScdConfig::new(loss, l2, 0.0, 1000, tolerance, 0).unwrap();
    config = config.fitted_to(loaded.grid.shapes.len(), loaded.grid.rows() as u64);
    config
}

/// Trains to convergence on 2 threads.
pub fn train(loaded: &LoadedGrid, config: ScdConfig) -> Scd {
    let mut scd = Scd::new(config, loaded.grid.shapes.clone(), loaded.grid.targets.len());
    linea_worker::train::run(&mut scd, loaded, 2, &Progress::silent()).unwrap();
    scd
}

/// Rows as (global feature, value) lists, features numbered block after block.
pub fn rows(loaded: &LoadedGrid) -> Vec<Vec<(usize, f64)>> {
    let mut rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); loaded.grid.rows()];
    let mut offset = 0;
    for (shape, cells) in loaded.grid.shapes.iter().zip(&loaded.grid.cells) {
        let mut first_row = 0;
        for (cell, targets) in cells.iter().zip(&loaded.grid.targets) {
            for k in 0..cell.nnz() {
                let feature = offset + cell.feature_ids[cell.local[k] as usize] as usize;
                rows[first_row + cell.rows[k] as usize].push((feature, cell.value(k)));
            }
            first_row += targets.len();
        }
        offset += shape.features;
    }
    rows
}

pub fn targets(loaded: &LoadedGrid) -> Vec<f64> {
    loaded.grid.targets.concat()
}

pub fn parameters(loaded: &LoadedGrid) -> usize {
    loaded.grid.shapes.iter().map(|s| s.features).sum()
}

/// Largest |partial derivative| of the objective at `w`, from the rows directly.
pub fn gradient_norm(loss: Loss, rows: &[Vec<(usize, f64)>], targets: &[f64], w: &[f64], l2: f64) -> f64 {
    let mut gradient: Vec<f64> = w.iter().map(|&x| 2.0 * l2 * x).collect();
    for (row, &y) in rows.iter().zip(targets) {
        let f: f64 = row.iter().map(|&(j, x)| w[j] * x).sum();
        let d = loss.derivatives(y, f);
        row.iter().for_each(|&(j, x)| gradient[j] += d.first * x);
    }
    gradient.iter().fold(0.0, |m, g| m.max(g.abs()))
}
