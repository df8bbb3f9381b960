//! `--algorithm auto`: the engine's rule ([`linea_engine::choice`]) applied to a grid's
//! manifest and the run's parameters, before anything runs.

use crate::driver::AlgorithmName;
use crate::manifest::Manifest;
use crate::train::TrainOptions;
use linea_engine::choice::{self, Algorithm, Problem};
use linea_engine::hybrid::BatchSolver;

/// The problem's properties as the manifest records them. A grid written before the manifest
/// kept its value range (`ranges` absent) counts as unscaled: the rule then never picks
/// CoCoA for it.
pub fn problem(options: &TrainOptions, manifest: &Manifest) -> Problem {
    Problem {
        rows: manifest.rows,
        nnz: manifest.nnz,
        features: manifest.blocks.iter().map(|b| b.features as u64).sum(),
        max_abs: manifest.ranges.map_or(f64::INFINITY, |r| r.value_max_abs),
        loss: options.loss,
        l2: options.l2,
        l1: options.l1,
        distributed: options.workers > 0,
    }
}

/// `options` with `--algorithm auto` replaced by the rule's choice for this grid, and the
/// choice recorded (model header and trace); any other algorithm is returned as it is. The
/// chosen algorithm runs with its own defaults (CoCoA: `--slots` 1 in one process), exactly
/// as if it had been named, and without `--epochs` the choice's epoch limit.
pub fn resolve(options: &TrainOptions, manifest: &Manifest) -> TrainOptions {
    if options.algorithm != AlgorithmName::Auto {
        return options.clone();
    }
    let choice = choice::choose(&problem(options, manifest));
    let (algorithm, solver) = match choice.algorithm {
        Algorithm::Scd => (AlgorithmName::Scd, options.solver),
        Algorithm::Cocoa => (AlgorithmName::Cocoa, options.solver),
        Algorithm::Newton => (AlgorithmName::Lbfgs, BatchSolver::Newton),
    };
    let epochs = if options.epochs_given { options.epochs } else { choice.max_epochs };
    TrainOptions { algorithm, solver, epochs, chosen_by: Some(format!("auto: {}", choice.reason)), ..options.clone() }
}
