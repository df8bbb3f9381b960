//! The in-process executor: every shard's kernels on a thread pool.

use super::{Executor, coarse, kernels};
use crate::error::EngineError;
use crate::fixed::{ExactSums, Quantity, SumRange};
use crate::grid::{BlockShape, Cell};
use crate::loss::Loss;
use rayon::prelude::*;

/// A whole grid in memory: cells `[block][shard]` and each shard's targets.
#[derive(Debug, Clone, Default)]
pub struct InMemoryGrid {
    pub shapes: Vec<BlockShape>,
    pub cells: Vec<Vec<Cell>>,
    pub targets: Vec<Vec<f64>>,
}

impl InMemoryGrid {
    pub fn nnz(&self) -> u64 {
        self.cells.iter().flatten().map(|c| c.nnz() as u64).sum()
    }

    pub fn rows(&self) -> usize {
        self.targets.iter().map(Vec::len).sum()
    }
}

pub struct LocalExecutor<'g> {
    grid: &'g InMemoryGrid,
    loss: Loss,
    /// Fixed-point predictions per shard.
    pub predictions: Vec<Vec<i64>>,
    /// Earlier predictions for the coarse correction's history directions, oldest first.
    snapshots: Vec<Vec<Vec<i64>>>,
    pool: rayon::ThreadPool,
}

impl<'g> LocalExecutor<'g> {
    pub fn new(grid: &'g InMemoryGrid, loss: Loss, threads: usize) -> Self {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build().expect("thread pool");
        let predictions = grid.targets.iter().map(|t| vec![0; t.len()]).collect();
        Self { grid, loss, predictions, snapshots: Vec::new(), pool }
    }

    /// Recomputes every prediction from the parameters, as a restarted worker would.
    pub fn recompute_predictions(&mut self, theta: &[Vec<f64>]) {
        let grid = self.grid;
        self.pool.install(|| {
            self.predictions.par_iter_mut().enumerate().for_each(|(shard, predictions)| {
                predictions.iter_mut().for_each(|p| *p = 0);
                for (block, cells) in grid.cells.iter().enumerate() {
                    let zeros = vec![0.0; theta[block].len()];
                    kernels::cell_update_predictions(&cells[shard], &zeros, &theta[block], predictions);
                }
            })
        });
    }
}

impl LocalExecutor<'_> {
    /// The proven range of sums over this grid's row shards.
    fn range(&self) -> SumRange {
        SumRange::for_partials(self.grid.targets.len())
    }

    /// Runs `kernel` on every shard (with all its cells) and sums the results exactly.
    fn per_shard(
        &self,
        blocks: bool,
        quantity: Quantity,
        kernel: impl Fn(usize, &[&Cell], &[&[i64]], &[f64], &[i64], Loss) -> Vec<f64> + Sync,
    ) -> Result<ExactSums, EngineError> {
        let (grid, loss, predictions, range) = (self.grid, self.loss, &self.predictions, self.range());
        self.pool.install(|| {
            (0..grid.targets.len())
                .into_par_iter()
                .map(|shard| {
                    let cells: Vec<&Cell> =
                        if blocks { grid.cells.iter().map(|b| &b[shard]).collect() } else { Vec::new() };
                    let snapshots: Vec<&[i64]> = self.snapshots.iter().map(|s| s[shard].as_slice()).collect();
                    let partial = kernel(shard, &cells, &snapshots, &grid.targets[shard], &predictions[shard], loss);
                    range.exact(quantity, &partial)
                })
                .try_reduce_with(|mut a, b| {
                    a.add(&b);
                    Ok(a)
                })
                .unwrap_or(Ok(ExactSums::default()))
        })
    }
}

impl Executor for LocalExecutor<'_> {
    type Error = EngineError;

    fn statistics(&mut self, block: usize) -> Result<(ExactSums, ExactSums), EngineError> {
        let (grid, loss, predictions) = (self.grid, self.loss, &self.predictions);
        let (features, range) = (grid.shapes[block].features, self.range());
        self.pool.install(|| {
            grid.cells[block]
                .par_iter()
                .enumerate()
                .try_fold(
                    || (ExactSums::zeros(features), ExactSums::zeros(features)),
                    |(mut g, mut h), (shard, cell)| {
                        let local = kernels::cell_statistics(cell, &grid.targets[shard], &predictions[shard], loss);
                        kernels::accumulate_statistics(&range, cell, local, &mut g.sums, &mut h.sums)?;
                        Ok((g, h))
                    },
                )
                .try_reduce(
                    || (ExactSums::zeros(features), ExactSums::zeros(features)),
                    |(mut g, mut h), (g2, h2)| {
                        g.add(&g2);
                        h.add(&h2);
                        Ok((g, h))
                    },
                )
        })
    }

    fn direction_sums(&mut self, block: usize, delta: &[f64]) -> Result<ExactSums, EngineError> {
        let (grid, loss, predictions, range) = (self.grid, self.loss, &self.predictions, self.range());
        self.pool.install(|| {
            grid.cells[block]
                .par_iter()
                .enumerate()
                .map(|(shard, cell)| {
                    let partial =
                        kernels::cell_direction_sums(cell, delta, &grid.targets[shard], &predictions[shard], loss);
                    range.exact(Quantity::LineSearch, &partial)
                })
                .try_reduce_with(|mut a, b| {
                    a.add(&b);
                    Ok(a)
                })
                .unwrap_or(Ok(ExactSums::default()))
        })
    }

    fn update_predictions(&mut self, block: usize, old: &[f64], new: &[f64]) -> Result<(), EngineError> {
        let grid = self.grid;
        self.pool.install(|| {
            self.predictions
                .par_iter_mut()
                .zip(&grid.cells[block])
                .for_each(|(predictions, cell)| kernels::cell_update_predictions(cell, old, new, predictions))
        });
        Ok(())
    }

    fn coarse_statistics(&mut self, blocks: bool, hessian_stride: usize) -> Result<ExactSums, EngineError> {
        self.per_shard(blocks, Quantity::Coarse, |shard, cells, snapshots, targets, predictions, loss| {
            let hessian = coarse::takes_hessian(shard, hessian_stride);
            coarse::shard_coarse_statistics(cells, snapshots, targets, predictions, loss, hessian)
        })
    }

    fn coarse_direction_sums(&mut self, blocks: bool, t: &[f64]) -> Result<ExactSums, EngineError> {
        self.per_shard(blocks, Quantity::LineSearch, |_, cells, snapshots, targets, predictions, loss| {
            coarse::shard_coarse_direction_sums(cells, snapshots, t, targets, predictions, loss)
        })
    }

    fn snapshot(&mut self, keep: usize) -> Result<(), EngineError> {
        self.snapshots.push(self.predictions.clone());
        if self.snapshots.len() > keep {
            self.snapshots.remove(0);
        }
        Ok(())
    }

    fn loss_sum(&mut self) -> Result<i128, EngineError> {
        let (grid, loss, predictions, range) = (self.grid, self.loss, &self.predictions, self.range());
        self.pool.install(|| {
            predictions
                .par_iter()
                .zip(&grid.targets)
                .map(|(p, t)| kernels::shard_loss_sum(&range, t, p, loss))
                .try_reduce(|| 0, |a, b| Ok(a.wrapping_add(b)))
        })
    }
}
