//! The synthetic problem the engine's algorithm tests share: a grid of one-hot, set-valued,
//! real-valued and bias blocks with targets from a known model, plus the same rows in the
//! plain sparse form the direct solvers (`crate::reference`) take.

use crate::grid::{BlockShape, Cell, InMemoryGrid};
use crate::loss::Loss;
use crate::rng::SplitMix64;

/// Features per block: two one-hot blocks, a set-valued block, a real-valued one, the bias.
pub const BLOCKS: [usize; 5] = [8, 5, 6, 1, 1];

pub struct Problem {
    pub grid: InMemoryGrid,
    pub rows: Vec<Vec<(usize, f64)>>,
    pub targets: Vec<f64>,
    pub features: usize,
}

/// `rows` rows in shards of `shard` rows, drawn from `seed`: squared loss gets the model's
/// prediction plus uniform noise, logistic and hinge a label drawn with the model's odds.
pub fn problem(loss: Loss, seed: u64, rows_count: usize, shard: usize) -> Problem {
    let mut rng = SplitMix64::new(seed);
    let offsets: Vec<usize> = BLOCKS.iter().scan(0, |s, &b| Some(std::mem::replace(s, *s + b))).collect();
    let features: usize = BLOCKS.iter().sum();
    let truth: Vec<f64> = (0..features).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let mut per_block: Vec<Vec<(u32, u32, f64)>> = vec![Vec::new(); BLOCKS.len()];
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    for i in 0..rows_count {
        let mut row = Vec::new();
        let mut push = |block: usize, feature: usize, value: f64| {
            row.push((offsets[block] + feature, value));
            per_block[block].push((i as u32, feature as u32, value));
        };
        push(0, rng.below(8), 1.0);
        if rng.unit() < 0.8 {
            push(1, rng.below(5), 1.0);
        }
        let mut set: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(6)).collect();
        set.sort_unstable();
        set.dedup();
        set.into_iter().for_each(|f| push(2, f, 1.0));
        push(3, 0, rng.unit() * 3.0 - 1.5);
        push(4, 0, 1.0);
        let margin: f64 = row.iter().map(|&(j, x)| truth[j] * x).sum();
        targets.push(match loss {
            Loss::Squared => margin + rng.unit() - 0.5,
            _ if rng.unit() < 1.0 / (1.0 + (-2.0 * margin).exp()) => 1.0,
            _ => -1.0,
        });
        rows.push(row);
    }
    let grid = grid_of(&BLOCKS, &per_block, &targets, shard);
    Problem { grid, rows, targets, features }
}

/// The grid of `blocks` (features per block) whose block `b` holds the entries
/// `per_block[b]` (row, feature within the block, value), cut into shards of `shard` rows.
pub fn grid_of(blocks: &[usize], per_block: &[Vec<(u32, u32, f64)>], targets: &[f64], shard: usize) -> InMemoryGrid {
    let shards = targets.len().div_ceil(shard);
    let cells = per_block
        .iter()
        .map(|entries| {
            (0..shards)
                .map(|s| {
                    let (lo, hi) = ((s * shard) as u32, ((s + 1) * shard) as u32);
                    Cell::from_triples(
                        entries.iter().filter(|e| e.0 >= lo && e.0 < hi).map(|&(r, f, v)| (r - lo, f, v)).collect(),
                    )
                })
                .collect()
        })
        .collect();
    let shapes =
        blocks.iter().map(|&features| BlockShape { features, pure: false, max_abs: vec![1.5; features] }).collect();
    InMemoryGrid { shapes, cells, targets: targets.chunks(shard).map(<[f64]>::to_vec).collect() }
}
