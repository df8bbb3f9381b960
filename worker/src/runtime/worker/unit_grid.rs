//! The grid as a kernel sees it on a worker: cells through the worker's cache (or the
//! unit's previous owner, hedged by storage), targets per shard, prefetch in the background.

use super::WorkerCore;
use super::grid::Grid;
use crate::error::LineaError;
use linea_engine::algorithm::GridSource;
use linea_engine::grid::Cell;
use std::ops::Deref;
use std::sync::Arc;

pub struct UnitGrid<'a> {
    pub(super) core: &'a Arc<WorkerCore>,
    pub(super) grid: Arc<Grid>,
    /// The worker that held the unit before, whose cache likely has its cells.
    pub(super) peer: Option<String>,
}

/// A shard's targets, shared with the worker's cache.
pub struct Targets(Arc<Vec<f64>>);

impl Deref for Targets {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        &self.0
    }
}

impl GridSource for UnitGrid<'_> {
    type Error = LineaError;
    type CellRef<'b>
        = Arc<Cell>
    where
        Self: 'b;
    type TargetsRef<'b>
        = Targets
    where
        Self: 'b;

    fn blocks(&self) -> usize {
        self.grid.manifest.blocks.len()
    }

    fn shards(&self) -> usize {
        self.grid.manifest.shards.len()
    }

    fn rows(&self, shard: usize) -> usize {
        self.grid.rows(shard)
    }

    fn cell(&self, block: usize, shard: usize) -> Result<Arc<Cell>, LineaError> {
        self.core.cell(&self.grid, block, shard, self.peer.as_deref())
    }

    fn targets(&self, shard: usize) -> Result<Targets, LineaError> {
        Ok(Targets(self.grid.targets(shard)?))
    }

    fn prefetch(&self, block: usize, shard: usize) {
        self.core.prefetch(block, shard);
    }
}
