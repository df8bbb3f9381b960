//! SCD's data-parallel half on the [`Kernel`] interface: a unit is one row shard, its state
//! the shard's fixed-point predictions (and the coarse correction's snapshots of them).

use super::{coarse, kernels};
use crate::algorithm::{Contribution, GridSource, Kernel, PhaseOutput, UnitOutput, decode, encode};
use crate::fixed::{Quantity, SumRange};
use crate::grid::{Cell, CellValues};
use crate::loss::Loss;
use crate::scratch::Scratch;
use serde::{Deserialize, Serialize};
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

/// One block's parameters, shared rather than copied: the state, its history of epochs, the
/// runner's mirror and the phase that moved the predictions to them hold the same vector (a copy
/// per holder cost 8 bytes per feature each: docs/benchmarks/past-the-memory-wall.md, "Bytes per
/// feature"). Serialized as the plain vector, so the wire and checkpoint layouts are those of
/// `Vec<f64>`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockWeights(Arc<Vec<f64>>);

impl From<Vec<f64>> for BlockWeights {
    fn from(weights: Vec<f64>) -> Self {
        BlockWeights(Arc::new(weights))
    }
}

impl Deref for BlockWeights {
    type Target = Vec<f64>;
    fn deref(&self) -> &Vec<f64> {
        &self.0
    }
}

impl Serialize for BlockWeights {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for BlockWeights {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<f64>::deserialize(deserializer).map(BlockWeights::from)
    }
}

/// An update's [`kernels::block_shifts`], computed by the first binary cell of the phase that
/// needs them and read by the others (a phase is one object for every unit it runs on, in
/// process and on a worker). Not sent, and not part of a phase's equality: it only caches
/// what `old` and `new` say.
#[derive(Debug, Default)]
pub struct BlockShifts(OnceLock<Vec<i64>>);

impl Clone for BlockShifts {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for BlockShifts {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What every worker needs to run SCD's phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScdKernel {
    pub loss: Loss,
    /// Row shards of the grid: SCD's units.
    pub shards: usize,
    /// Vectors the statistics phase reuses from cell to cell; not configuration, so not
    /// sent (the wire layout is that of the two fields above).
    #[serde(skip)]
    scratch: StatisticsScratch,
}

/// The statistics phase's per-cell vectors: the cell's `[gradient, curvature]` sums, and
/// the sparse exact sums it returns, which the runner hands back ([`Kernel::recycle`])
/// once it has added them up.
#[derive(Debug, Clone, PartialEq, Default)]
struct StatisticsScratch {
    sums: Scratch<[f64; 2]>,
    pairs: Scratch<(u32, i128)>,
}

impl ScdKernel {
    pub fn new(loss: Loss, shards: usize) -> Self {
        ScdKernel { loss, shards, scratch: StatisticsScratch::default() }
    }
}

/// SCD's phases (Algorithm 2 of the paper, plus the coarse correction's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScdPhase {
    /// Sums of `l' x` and `l'' x^2` of every feature of `block`: gradient at `j`,
    /// curvature at `features + j`. `next_block`'s cells may be prefetched.
    Statistics { block: usize, next_block: Option<usize>, features: usize },
    /// [`kernels::cell_direction_sums`] along `delta`.
    Direction { block: usize, delta: Vec<f64> },
    /// Moves the predictions from `old` to `new` parameters of `block`.
    Update {
        block: usize,
        old: BlockWeights,
        new: BlockWeights,
        #[serde(skip)]
        shifts: BlockShifts,
    },
    /// The sum of the losses.
    Loss,
    /// Keeps the predictions as the newest snapshot, and at most `keep` in all.
    Snapshot { keep: usize },
    /// [`coarse::shard_coarse_statistics`].
    CoarseStatistics { blocks: bool, hessian_stride: usize },
    /// [`coarse::shard_coarse_direction_sums`], then the loss sum (as [`ScdPhase::Loss`]).
    CoarseDirection { blocks: bool, t: Vec<f64> },
}

/// A row shard's predictions and snapshots.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ShardPredictions {
    pub predictions: Vec<i64>,
    pub snapshots: Vec<Vec<i64>>,
}

/// The parameters the shards' predictions (and snapshots) were made from: enough to
/// rebuild any shard.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ScdParameters {
    pub theta: Vec<BlockWeights>,
    pub snapshots: Vec<Vec<BlockWeights>>,
}

impl Kernel for ScdKernel {
    type Phase = ScdPhase;
    type UnitState = ShardPredictions;
    type Mirror = ScdParameters;
    type UnitBase = ScdParameters;

    fn units(&self) -> usize {
        self.shards
    }

    fn fresh<G: GridSource>(&self, unit: usize, grid: &G) -> Result<ShardPredictions, G::Error> {
        Ok(ShardPredictions { predictions: vec![0; grid.rows(unit)], snapshots: Vec::new() })
    }

    fn run<G: GridSource>(
        &self,
        phase: &ScdPhase,
        shard: usize,
        state: &mut ShardPredictions,
        grid: &G,
    ) -> Result<UnitOutput, G::Error> {
        let loss = self.loss;
        let targets = grid.targets(shard)?;
        // Every shard's partial sum is checked against the range that proves the total over
        // all shards exact (crate::fixed): a result is exact and right, or an error.
        let range = SumRange::for_partials(self.shards);
        let exact = |quantity: Quantity, partial: Vec<f64>| -> Result<UnitOutput, crate::EngineError> {
            let sums = range.exact(quantity, &partial)?.sums;
            Ok(UnitOutput { sums: Contribution::Dense(sums), payload: Vec::new() })
        };
        Ok(match phase {
            ScdPhase::Statistics { block, next_block, features } => {
                if let Some(next) = next_block {
                    grid.prefetch(*next, shard);
                }
                let cell = grid.cell(*block, shard)?;
                let mut sums = self.scratch.sums.take();
                kernels::cell_statistics(&cell, &targets, &state.predictions, loss, &mut sums);
                let checked = range.check_pairs([Quantity::Gradient, Quantity::Curvature], &sums);
                let mut pairs = self.scratch.pairs.take();
                if checked.is_ok() {
                    kernels::exact_pairs(&sums, &cell.feature_ids, *features as u32, &mut pairs);
                }
                self.scratch.sums.give(sums);
                checked?;
                UnitOutput { sums: Contribution::Sparse(pairs), payload: Vec::new() }
            }
            ScdPhase::Direction { block, delta } => {
                let cell = grid.cell(*block, shard)?;
                exact(
                    Quantity::LineSearch,
                    kernels::cell_direction_sums(&cell, delta, &targets, &state.predictions, loss),
                )?
            }
            ScdPhase::Update { block, old, new, shifts } => {
                let cell = grid.cell(*block, shard)?;
                if matches!(cell.values, CellValues::Ones) {
                    let shifts = shifts.0.get_or_init(|| kernels::block_shifts(old, new));
                    kernels::binary_cell_update(&cell, shifts, &mut state.predictions);
                } else {
                    kernels::cell_update_predictions(&cell, old, new, &mut state.predictions);
                }
                UnitOutput::default()
            }
            ScdPhase::Loss => UnitOutput {
                sums: Contribution::Dense(vec![kernels::shard_loss_sum(&range, &targets, &state.predictions, loss)?]),
                payload: Vec::new(),
            },
            ScdPhase::Snapshot { keep } => {
                // The new snapshot takes the memory of the oldest where that is dropped.
                let full = *keep > 0 && state.snapshots.len() >= *keep;
                let mut newest = if full { state.snapshots.remove(0) } else { Vec::new() };
                newest.clone_from(&state.predictions);
                state.snapshots.push(newest);
                if state.snapshots.len() > *keep {
                    state.snapshots.remove(0);
                }
                UnitOutput::default()
            }
            ScdPhase::CoarseStatistics { blocks, hessian_stride } => {
                let held = all_cells(grid, *blocks, shard)?;
                let cells: Vec<&Cell> = held.iter().map(Deref::deref).collect();
                let snapshots: Vec<&[i64]> = state.snapshots.iter().map(Vec::as_slice).collect();
                let hessian = coarse::takes_hessian(shard, *hessian_stride);
                let sums =
                    coarse::shard_coarse_statistics(&cells, &snapshots, &targets, &state.predictions, loss, hessian);
                exact(Quantity::Coarse, sums)?
            }
            ScdPhase::CoarseDirection { blocks, t } => {
                let held = all_cells(grid, *blocks, shard)?;
                let cells: Vec<&Cell> = held.iter().map(Deref::deref).collect();
                let snapshots: Vec<&[i64]> = state.snapshots.iter().map(Vec::as_slice).collect();
                let (sums, loss_sum) =
                    coarse::shard_coarse_direction_sums(&cells, &snapshots, t, &targets, &state.predictions, loss);
                let mut sums = range.exact(Quantity::LineSearch, &sums)?.sums;
                sums.push(range.fixed(Quantity::Loss, loss_sum)?);
                UnitOutput { sums: Contribution::Dense(sums), payload: Vec::new() }
            }
        })
    }

    fn recycle(&self, sums: Contribution) {
        if let Contribution::Sparse(pairs) = sums {
            self.scratch.pairs.give(pairs);
        }
    }

    fn commit(&self, mirror: &mut ScdParameters, phase: &ScdPhase, _: &PhaseOutput) {
        match phase {
            ScdPhase::Update { block, new, .. } => mirror.theta[*block] = new.clone(),
            ScdPhase::Snapshot { keep } => {
                mirror.snapshots.push(mirror.theta.clone());
                if mirror.snapshots.len() > *keep {
                    mirror.snapshots.remove(0);
                }
            }
            _ => {}
        }
    }

    fn unit_base(&self, mirror: &ScdParameters, _: usize) -> ScdParameters {
        mirror.clone()
    }

    fn base_key(&self, _: usize) -> usize {
        0
    }

    /// The same integers the incremental updates produce (see [`crate::fixed`]).
    fn restore<G: GridSource>(
        &self,
        shard: usize,
        base: &ScdParameters,
        grid: &G,
    ) -> Result<ShardPredictions, G::Error> {
        let rows = grid.rows(shard);
        let mut state =
            ShardPredictions { predictions: vec![0; rows], snapshots: vec![vec![0; rows]; base.snapshots.len()] };
        for (block, theta) in base.theta.iter().enumerate() {
            let cell = grid.cell(block, shard)?;
            let zeros = vec![0.0; theta.len()];
            kernels::cell_update_predictions(&cell, &zeros, theta, &mut state.predictions);
            for (snapshot, then) in state.snapshots.iter_mut().zip(&base.snapshots) {
                kernels::cell_update_predictions(&cell, &zeros, &then[block], snapshot);
            }
        }
        Ok(state)
    }

    fn encode_state(&self, state: &ShardPredictions) -> Vec<u8> {
        encode(state)
    }

    fn decode_state<G: GridSource>(&self, shard: usize, bytes: &[u8], grid: &G) -> Result<ShardPredictions, G::Error> {
        let state: ShardPredictions = decode(bytes, "shard predictions")?;
        if state.predictions.len() != grid.rows(shard) {
            return Err(
                crate::EngineError::Corrupt(format!("predictions of shard {shard} have the wrong length")).into()
            );
        }
        Ok(state)
    }
}

/// Every block's cell of `shard`, or none.
fn all_cells<G: GridSource>(grid: &G, blocks: bool, shard: usize) -> Result<Vec<G::CellRef<'_>>, G::Error> {
    if !blocks {
        return Ok(Vec::new());
    }
    (0..grid.blocks()).map(|b| grid.cell(b, shard)).collect()
}
