//! What the scale-in benchmarks (`scale-in-cost`, `handover-cost`) share: their options and
//! the hinge-loss CoCoA kernels whose slots they merge.

use linea_engine::Loss;
use linea_engine::algorithm::Algorithm;
use linea_engine::cocoa::{Cocoa, CocoaConfig, CocoaKernel};
use linea_engine::grid::InMemoryGrid;

/// `--repeats N`: at least one.
pub fn repeats(value: &str) -> Result<usize, String> {
    match value.parse() {
        Ok(0) => Err("--repeats must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("--repeats: {e}")),
    }
}

/// `--path 16,4,1`: slot counts, each dividing the one before.
pub fn path(value: &str) -> Result<Vec<u32>, String> {
    let path: Vec<u32> =
        value.split(',').map(|k| k.parse().map_err(|e| format!("--path {k}: {e}"))).collect::<Result<_, _>>()?;
    if path.len() < 2 || path.windows(2).any(|w| w[1] == 0 || w[0] % w[1] != 0) {
        return Err("--path must be slot counts each dividing the one before, e.g. 16,4,1".into());
    }
    Ok(path)
}

/// The kernel of hinge-loss CoCoA over `grid` with `slots` slots of `partitions` partitions.
pub fn hinge_kernel(grid: &InMemoryGrid, slots: u32, partitions: u32) -> Result<CocoaKernel, String> {
    let err = |e: linea_engine::EngineError| e.to_string();
    let config = CocoaConfig::new(Loss::Hinge, 1.0, slots, 1, 1, 1e-6, 0)
        .and_then(|c| c.with_partitions(partitions))
        .map_err(err)?;
    Ok(Cocoa::for_grid(config, grid).map_err(err)?.kernel().clone())
}
