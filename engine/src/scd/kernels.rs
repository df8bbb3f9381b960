//! Work on one cell: the part of an SCD iteration that runs on workers, over one row shard.
//!
//! Each kernel sums in `f64` in row order (fixed by the grid), and its caller rounds the
//! partial sums once to fixed point, so the result never depends on which thread or worker
//! ran the kernel or when.

use crate::error::EngineError;
use crate::fixed::{Quantity, SumRange, prediction_value, quantize, to_fixed128, to_fixed128_rounding};
use crate::fma;
use crate::grid::{Cell, CellValues, Ids};
use crate::loss::{Derivatives, Loss, logistic_derivatives};
use crate::scd::fast_exp::{Exp, exp_inline, exp_inline4, lanes};
use crate::scd::fast_log1p::softplus_inline;
use crate::scd::step::LOGISTIC_STEP_CANDIDATES;

/// Per-feature partial sums of `l'_i x_ij` and `l''_i x_ij^2` over the cell's rows, as
/// `[gradient, curvature]` pairs indexed by the cell's local feature numbers (SCD
/// Algorithm 2, lines 8-13).
///
/// The hot loop of SCD. Logistic loss on a machine where [`Exp::detect`] allows it runs a
/// copy compiled for FMA and AVX2 with `exp` inlined ([`fast_exp`]), four rows' `exp`s at a
/// time where a cell's rows all differ; every copy performs the same floating-point
/// operations in the same order, so all give the same bits.
///
/// The sums are written into `sums` (its old contents dropped), so that a caller can reuse
/// one vector for every cell ([`crate::scratch`]).
pub fn cell_statistics(cell: &Cell, targets: &[f64], predictions: &[i64], loss: Loss, sums: &mut Vec<[f64; 2]>) {
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(cell: &Cell, targets: &[f64], predictions: &[i64], sums: &mut Vec<[f64; 2]>) {
            statistics_loop(cell, targets, predictions, LogisticInline, sums)
        }
        else { statistics_loop(cell, targets, predictions, loss, sums) }
    }
}

/// The derivatives a statistics loop takes, as a type so each loop is its own copy with
/// them inlined.
pub(crate) trait RowDerivatives: Copy {
    fn at(self, target: f64, prediction: f64) -> Derivatives;

    /// First and second derivatives at four rows; the same bits as four [`Self::at`].
    #[inline(always)]
    fn at4(self, targets: [f64; 4], predictions: [f64; 4]) -> ([f64; 4], [f64; 4]) {
        let d: [Derivatives; 4] = std::array::from_fn(|i| self.at(targets[i], predictions[i]));
        (d.map(|d| d.first), d.map(|d| d.second))
    }
}

impl RowDerivatives for Loss {
    #[inline(always)]
    fn at(self, target: f64, prediction: f64) -> Derivatives {
        self.derivatives(target, prediction)
    }
}

/// Logistic derivatives with [`exp_inline`] ([`exp_inline4`] for four rows): only inside
/// code compiled for FMA.
#[derive(Clone, Copy)]
pub(crate) struct LogisticInline;

impl RowDerivatives for LogisticInline {
    #[inline(always)]
    fn at(self, target: f64, prediction: f64) -> Derivatives {
        logistic_derivatives(target, prediction, exp_inline)
    }

    #[inline(always)]
    fn at4(self, targets: [f64; 4], predictions: [f64; 4]) -> ([f64; 4], [f64; 4]) {
        // `logistic_derivatives` step by step over whole arrays, so that each step is one
        // vector instruction (the comparison a blend, not a branch per lane).
        let margin = lanes(|i| targets[i] * predictions[i]);
        let e = exp_inline4(margin.map(|m| -m.abs()));
        let inv = lanes(|i| 1.0 / (1.0 + e[i]));
        let e_inv = lanes(|i| e[i] * inv[i]);
        let sigma_neg = lanes(|i| if margin[i] >= 0.0 { e_inv[i] } else { inv[i] });
        (lanes(|i| -targets[i] * sigma_neg[i]), lanes(|i| e_inv[i] * inv[i]))
    }
}

/// [`cell_statistics`]' loop, one copy per derivative function and value kind.
#[inline(always)]
fn statistics_loop(
    cell: &Cell,
    targets: &[f64],
    predictions: &[i64],
    derivatives: impl RowDerivatives,
    sums: &mut Vec<[f64; 2]>,
) {
    sums.clear();
    sums.resize(cell.feature_ids.len(), [0.0; 2]);
    let sums = &mut sums[..];
    match &cell.values {
        CellValues::Ones => for_each_nonzero(cell, targets, predictions, derivatives, |_, j, first, second| {
            let s = &mut sums[j as usize];
            s[0] += first;
            s[1] += second;
        }),
        CellValues::Real(values) => real_statistics(cell, values, targets, predictions, derivatives, sums),
        CellValues::Real32(values) => real_statistics(cell, values, targets, predictions, derivatives, sums),
    }
}

/// [`statistics_loop`] over real values, `f64` or `f32` (read as the same `f64`).
#[inline(always)]
fn real_statistics<V: Copy + Into<f64>>(
    cell: &Cell,
    values: &[V],
    targets: &[f64],
    predictions: &[i64],
    derivatives: impl RowDerivatives,
    sums: &mut [[f64; 2]],
) {
    for_each_nonzero(cell, targets, predictions, derivatives, |k, j, first, second| {
        let x: f64 = values[k].into();
        let s = &mut sums[j as usize];
        s[0] += first * x;
        s[1] += second * x * x;
    })
}

/// Groups of four rows whose derivatives [`for_each_nonzero`] takes before adding them:
/// 4 KiB on the stack, small enough to stay in the L1 cache between its two passes.
const TAKEN_GROUPS: usize = 64;

/// Calls `add(k, local feature, l', l'')` for every non-zero `k` of the cell in order, with
/// its row's derivatives. Rows repeat only in impure blocks, where the derivatives are
/// taken once per row; a cell whose rows all differ (every cell of a pure block: one row,
/// one derivative, one non-zero) takes them four rows at a time ([`RowDerivatives::at4`]).
#[inline(always)]
fn for_each_nonzero(
    cell: &Cell,
    targets: &[f64],
    predictions: &[i64],
    derivatives: impl RowDerivatives,
    mut add: impl FnMut(usize, u32, f64, f64),
) {
    let (rows, local) = (&cell.rows[..], &cell.local[..cell.rows.len()]);
    let row = |r: u32| (targets[r as usize], prediction_value(predictions[r as usize]));
    // Without an early exit, so that the check is a vector loop.
    let ascending = matches!(cell.rows, Ids::Ascending(_));
    let distinct = ascending || rows.iter().zip(&rows[rows.len().min(1)..]).fold(true, |all, (a, b)| all & (a < b));
    if distinct {
        // Two passes over each run of TAKEN_GROUPS groups of four rows: the groups' derivatives
        // into a buffer, then the scatter-add. Fused, the compiler turned the vector derivatives
        // back into scalar lanes to feed each lane's add (a division and a blend per row). The
        // buffer is on the stack: one the size of the cell (64 bytes per four rows, 256 KiB for a
        // 16,384-row shard) was a fresh mapping per cell where glibc maps buffers of 128 KiB and
        // more (docs/benchmarks/past-the-memory-wall.md, "What the allocator's threshold costs").
        // The adds happen in the same order either way.
        let done = rows.len() - rows.len() % 4;
        let mut taken = [[[0.0; 4]; 2]; TAKEN_GROUPS];
        let runs = rows[..done].chunks(4 * TAKEN_GROUPS).zip(local[..done].chunks(4 * TAKEN_GROUPS));
        for (run, (rows, local)) in runs.enumerate() {
            let start = run * 4 * TAKEN_GROUPS;
            // `for` loops, not `map(..).collect()`: the closure would be compiled inside the
            // iterator's `fold`, outside the FMA copy, with a library call per `mul_add`.
            if ascending {
                // Rows `start, start + 1, ...`: read in place, with one bounds check a run
                // instead of two a row.
                let end = start + rows.len();
                let groups = targets[start..end].chunks_exact(4).zip(predictions[start..end].chunks_exact(4));
                for (t, (y, f)) in taken.iter_mut().zip(groups) {
                    let (y, f): ([f64; 4], [i64; 4]) = (std::array::from_fn(|i| y[i]), std::array::from_fn(|i| f[i]));
                    let (first, second) = derivatives.at4(y, f.map(prediction_value));
                    *t = [first, second];
                }
            } else {
                for (t, r) in taken.iter_mut().zip(rows.chunks_exact(4)) {
                    let at: [(f64, f64); 4] = std::array::from_fn(|i| row(r[i]));
                    let (first, second) = derivatives.at4(at.map(|a| a.0), at.map(|a| a.1));
                    *t = [first, second];
                }
            }
            for (c, (j, [first, second])) in local.chunks_exact(4).zip(&taken).enumerate() {
                for i in 0..4 {
                    add(start + 4 * c + i, j[i], first[i], second[i]);
                }
            }
        }
        for (k, (&r, &j)) in rows.iter().zip(local).enumerate().skip(done) {
            let (y, f) = row(r);
            let d = derivatives.at(y, f);
            add(k, j, d.first, d.second);
        }
    } else {
        let mut last_row = u32::MAX;
        let mut d = Derivatives { first: 0.0, second: 0.0 };
        for (k, (&r, &j)) in rows.iter().zip(local).enumerate() {
            if r != last_row {
                let (y, f) = row(r);
                d = derivatives.at(y, f);
                last_row = r;
            }
            add(k, j, d.first, d.second);
        }
    }
}

/// Adds a cell's local statistics into block-indexed exact sums; touches only the cell's
/// features, so a worker can add many cells into one block-sized partial. Each cell's sums
/// are checked against `range` (one partial per row shard).
pub fn accumulate_statistics(
    range: &SumRange,
    cell: &Cell,
    local: &[[f64; 2]],
    gradient: &mut [i128],
    curvature: &mut [i128],
) -> Result<(), EngineError> {
    for (&[g, h], &feature) in local.iter().zip(&cell.feature_ids) {
        let f = feature as usize;
        gradient[f] = gradient[f].wrapping_add(range.fixed(Quantity::Gradient, g)?);
        curvature[f] = curvature[f].wrapping_add(range.fixed(Quantity::Curvature, h)?);
    }
    Ok(())
}

/// A cell's statistics (checked against their range) as the sparse exact sums the runner adds:
/// `(feature, gradient)` and `(features + feature, curvature)` pairs, appended to `pairs`. In a
/// copy compiled for AVX2 where the CPU has it, where the rounding to fixed point is one
/// instruction sequence rather than a comparison and branch each way: the same integers.
pub fn exact_pairs(sums: &[[f64; 2]], feature_ids: &[u32], features: u32, pairs: &mut Vec<(u32, i128)>) {
    fma::dispatch! {
        if true;
        fn(sums: &[[f64; 2]], feature_ids: &[u32], features: u32, pairs: &mut Vec<(u32, i128)>) {
            pairs_loop(sums, feature_ids, features, pairs, |v| to_fixed128_rounding(v))
        }
        else { pairs_loop(sums, feature_ids, features, pairs, to_fixed128) }
    }
}

/// [`exact_pairs`]' loop with the conversion given.
#[inline(always)]
fn pairs_loop(
    sums: &[[f64; 2]],
    feature_ids: &[u32],
    features: u32,
    pairs: &mut Vec<(u32, i128)>,
    fixed: impl Fn(f64) -> i128,
) {
    pairs.reserve(2 * sums.len());
    for (&[g, h], &feature) in sums.iter().zip(feature_ids) {
        pairs.push((feature, fixed(g)));
        pairs.push((features + feature, fixed(h)));
    }
}

/// Sums along a block direction `delta` (block-indexed), with `d_i = sum_j x_ij delta_j`:
/// for squared loss `[sum r_i d_i, sum d_i^2]` (r = y - f); for logistic loss the exact
/// change of the loss sum at each of [`LOGISTIC_STEP_CANDIDATES`].
///
/// Logistic loss takes nine losses (an `exp` and a `log1p` each) per row the direction
/// moves: the line search of an impure block was most of an epoch on rcv1-small
/// (docs/benchmarks/scd-sweep.md). Where [`Exp::detect`] allows, the loop runs a copy compiled for
/// FMA with `exp` inlined ([`exp_inline`], the library's bits), so the sums are the same.
pub fn cell_direction_sums(cell: &Cell, delta: &[f64], targets: &[f64], predictions: &[i64], loss: Loss) -> Vec<f64> {
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(cell: &Cell, delta: &[f64], targets: &[f64], predictions: &[i64]) -> Vec<f64> {
            // A closure, not the function item: it is compiled for FMA with the loop (see
            // `softplus_inline`).
            direction_loop(cell, delta, targets, predictions, Loss::Logistic, |y, f| logistic_value_inline(y, f))
        }
        else { direction_loop(cell, delta, targets, predictions, loss, |y, f| loss.value(y, f)) }
    }
}

/// [`cell_direction_sums`]' loop with the loss function given.
#[inline(always)]
fn direction_loop(
    cell: &Cell,
    delta: &[f64],
    targets: &[f64],
    predictions: &[i64],
    loss: Loss,
    value: impl Fn(f64, f64) -> f64 + Copy,
) -> Vec<f64> {
    let mut sums = DirectionSums::new(loss);
    let local_delta: Vec<f64> = cell.feature_ids.iter().map(|&f| delta[f as usize]).collect();
    let mut k = 0;
    while k < cell.nnz() {
        let row = cell.rows[k] as usize;
        let mut d = 0.0;
        while k < cell.nnz() && cell.rows[k] as usize == row {
            d += cell.value(k) * local_delta[cell.local[k] as usize];
            k += 1;
        }
        sums.add_with(targets[row], prediction_value(predictions[row]), d, value);
    }
    sums.0
}

/// The logistic loss `Loss::Logistic.value(y, f)` with the inline `exp` and `log1p`:
/// the same operations, so the same bits. Only inside code compiled for FMA.
#[inline(always)]
pub(crate) fn logistic_value_inline(y: f64, f: f64) -> f64 {
    softplus_inline(-y * f)
}

/// Line-search sums of rows whose predictions move by `d` along a direction: for squared
/// loss `[sum r d, sum d^2]` (r = y - f); for logistic loss the exact change of the loss
/// at each of [`LOGISTIC_STEP_CANDIDATES`].
pub struct DirectionSums(pub Vec<f64>);

impl DirectionSums {
    pub fn new(loss: Loss) -> Self {
        DirectionSums(vec![0.0; if loss == Loss::Squared { 2 } else { LOGISTIC_STEP_CANDIDATES.len() }])
    }

    /// Adds a row with target `y`, prediction `f` and move `d`.
    #[inline]
    pub fn add(&mut self, y: f64, f: f64, d: f64) {
        self.add_with(y, f, d, |y, f| Loss::Logistic.value(y, f));
    }

    /// [`DirectionSums::add`] with the logistic loss given (one with an inlined `exp` and
    /// the same bits, [`logistic_value_inline`]).
    #[inline(always)]
    pub(crate) fn add_with(&mut self, y: f64, f: f64, d: f64, logistic: impl Fn(f64, f64) -> f64) {
        if d == 0.0 {
            return;
        }
        if self.0.len() == 2 {
            self.0[0] += (y - f) * d;
            self.0[1] += d * d;
        } else {
            self.add_logistic(y, f, d, logistic(y, f), logistic);
        }
    }

    /// [`DirectionSums::add_with`] when the row's logistic loss `base` at `f` is known.
    #[inline(always)]
    pub(crate) fn add_logistic(&mut self, y: f64, f: f64, d: f64, base: f64, logistic: impl Fn(f64, f64) -> f64) {
        for (s, a) in self.0.iter_mut().zip(LOGISTIC_STEP_CANDIDATES) {
            *s += logistic(y, f + a * d) - base;
        }
    }
}

/// Moves the cell's share of each prediction from `old` to `new` parameters (block-indexed):
/// `f_i += q(x_ij new_j) - q(x_ij old_j)` (Algorithm 2, lines 18-22), in exact integers.
/// With `old` all zeros this recomputes a shard's predictions from the model.
pub fn cell_update_predictions(cell: &Cell, old: &[f64], new: &[f64], predictions: &mut [i64]) {
    match &cell.values {
        CellValues::Ones => {
            let shifts: Vec<i64> = cell.feature_ids.iter().map(|&f| feature_shift(old, new, f as usize)).collect();
            add_shifts(cell, &shifts, predictions);
        }
        CellValues::Real(values) => real_update(cell, values, old, new, predictions),
        CellValues::Real32(values) => real_update(cell, values, old, new, predictions),
    }
}

/// `q(new_j) - q(old_j)`: how far a binary non-zero of feature `j` moves its row's prediction.
#[inline(always)]
fn feature_shift(old: &[f64], new: &[f64], j: usize) -> i64 {
    quantize(new[j]).wrapping_sub(quantize(old[j]))
}

/// Every feature's shift of a block's update ([`feature_shift`]), for [`binary_cell_update`]:
/// computed once for all of an update's binary cells, not once per cell and feature (two
/// roundings and a vector a feature of each cell: 6 instructions a non-zero on criteo-1m).
pub fn block_shifts(old: &[f64], new: &[f64]) -> Vec<i64> {
    (0..new.len()).map(|j| feature_shift(old, new, j)).collect()
}

/// [`cell_update_predictions`] of a binary cell ([`CellValues::Ones`]), from its block's
/// [`block_shifts`]: the same integers.
pub fn binary_cell_update(cell: &Cell, block_shifts: &[i64], predictions: &mut [i64]) {
    debug_assert!(matches!(cell.values, CellValues::Ones), "a cell of real values moves by x_ij too");
    let shifts: Vec<i64> = cell.feature_ids.iter().map(|&f| block_shifts[f as usize]).collect();
    add_shifts(cell, &shifts, predictions);
}

/// Adds each binary non-zero's shift (by local feature) to its row's prediction.
fn add_shifts(cell: &Cell, shifts: &[i64], predictions: &mut [i64]) {
    if let Ids::Ascending(n) = cell.rows {
        // Rows 0, 1, 2, ...: in place, without a bounds check a row.
        for (p, &l) in predictions[..n].iter_mut().zip(&cell.local) {
            *p = p.wrapping_add(shifts[l as usize]);
        }
    } else {
        for (&row, &l) in cell.rows.iter().zip(&cell.local) {
            let p = &mut predictions[row as usize];
            *p = p.wrapping_add(shifts[l as usize]);
        }
    }
}

/// [`cell_update_predictions`] over real values, `f64` or `f32` (read as the same `f64`).
fn real_update<V: Copy + Into<f64>>(cell: &Cell, values: &[V], old: &[f64], new: &[f64], predictions: &mut [i64]) {
    let local: Vec<(f64, f64)> = cell.feature_ids.iter().map(|&f| (old[f as usize], new[f as usize])).collect();
    for ((&row, &l), &x) in cell.rows.iter().zip(&cell.local).zip(values) {
        let (o, n) = local[l as usize];
        if o != n {
            let x: f64 = x.into();
            let p = &mut predictions[row as usize];
            *p = p.wrapping_add(quantize(x * n).wrapping_sub(quantize(x * o)));
        }
    }
}

/// Sum of losses over one shard, rounded once to fixed point (checked against `range`).
/// Logistic loss runs a copy with `exp` inlined where allowed, with the same bits.
pub fn shard_loss_sum(range: &SumRange, targets: &[f64], predictions: &[i64], loss: Loss) -> Result<i128, EngineError> {
    let sum = fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(targets: &[f64], predictions: &[i64]) -> f64 {
            // A closure, not the function item (see `cell_direction_sums`).
            loss_loop(targets, predictions, |y, f| logistic_value_inline(y, f))
        }
        else { loss_loop(targets, predictions, |y, f| loss.value(y, f)) }
    };
    range.fixed(Quantity::Loss, sum)
}

/// [`shard_loss_sum`]'s sum, in row order.
#[inline(always)]
fn loss_loop(targets: &[f64], predictions: &[i64], value: impl Fn(f64, f64) -> f64) -> f64 {
    targets.iter().zip(predictions).map(|(&y, &p)| value(y, prediction_value(p))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statistics the hot loop returns (four rows' derivatives at a time in pure cells,
    /// the inline `exp`) are the per-row library path's bits: pure and impure cells, binary
    /// and real values, a cell of every row of its shard, margins from 0 to past the `exp`
    /// fast path (|m| >= 512), and a non-zero count that leaves a remainder after the groups
    /// of four.
    #[test]
    fn statistics_have_the_library_bits() {
        let mut state = 11u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let rows = 4003u32;
        let targets: Vec<f64> = (0..rows).map(|i| if i % 3 == 0 { 1.0 } else { -1.0 }).collect();
        let predictions: Vec<i64> =
            (0..rows).map(|i| quantize(if i % 97 == 5 { 600.0 } else { (next() - 0.5) * 80.0 })).collect();
        let pure: Vec<(u32, u32, f64)> = (0..rows).filter(|i| i % 7 != 3).map(|i| (i, (i * 13) % 50, 0.5)).collect();
        let impure: Vec<(u32, u32, f64)> =
            (0..rows).flat_map(|i| (0..i % 3).map(move |j| (i, (i * 5 + j * 11) % 40, 0.25 + j as f64))).collect();
        // Every row once: read in place, and (held as a list) gathered.
        let every_row: Vec<(u32, u32, f64)> = (0..rows).map(|i| (i, (i * 13) % 50, 0.5)).collect();
        let in_place = Cell::from_triples(every_row.clone());
        assert!(matches!(in_place.rows, Ids::Ascending(_)));
        let gathered = Cell { rows: Ids::Owned(in_place.rows.to_vec()), ..in_place.clone() };
        let (mut read, mut listed) = (Vec::new(), Vec::new());
        cell_statistics(&in_place, &targets, &predictions, Loss::Logistic, &mut read);
        cell_statistics(&gathered, &targets, &predictions, Loss::Logistic, &mut listed);
        assert_eq!(read, listed);
        for triples in [pure, impure, every_row] {
            let real = Cell::from_triples(triples.clone());
            let ones = Cell { values: CellValues::Ones, ..real.clone() };
            for cell in [ones, real] {
                let (mut library, mut used) = (Vec::new(), vec![[f64::NAN; 2]; 7]);
                statistics_loop(&cell, &targets, &predictions, Loss::Logistic, &mut library);
                // A reused vector's old contents (here of another length) leave no trace.
                cell_statistics(&cell, &targets, &predictions, Loss::Logistic, &mut used);
                let bits = |v: &[[f64; 2]]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&used), bits(&library));
                assert!(library.iter().flatten().all(|s| s.is_finite() && *s != 0.0));
            }
        }
    }

    /// A binary cell moved by its block's shifts gets the integers the per-cell path gives,
    /// for a cell of every row of its shard (read in place) and one of some rows.
    #[test]
    fn block_shifts_move_binary_cells_as_the_per_cell_update_does() {
        let mut rng = crate::rng::SplitMix64::new(5);
        let mut next = move || rng.unit();
        let (rows, features) = (1000u32, 60usize);
        let old: Vec<f64> = (0..features).map(|_| (next() - 0.5) * 8.0).collect();
        let new: Vec<f64> = old.iter().map(|o| o + (next() - 0.5) * 1e-3).collect();
        let every_row: Vec<(u32, u32, f64)> = (0..rows).map(|i| (i, (i * 7) % 50, 1.0)).collect();
        let some_rows: Vec<(u32, u32, f64)> =
            (0..rows).filter(|i| i % 3 != 0).flat_map(|i| [(i, i % 20, 1.0), (i, 20 + i % 40, 1.0)]).collect();
        for (triples, in_place) in [(every_row, true), (some_rows, false)] {
            let cell = Cell { values: CellValues::Ones, ..Cell::from_triples(triples) };
            assert_eq!(matches!(cell.rows, Ids::Ascending(_)), in_place);
            let start: Vec<i64> = (0..rows).map(|_| quantize((next() - 0.5) * 10.0)).collect();
            let (mut per_cell, mut by_block) = (start.clone(), start.clone());
            cell_update_predictions(&cell, &old, &new, &mut per_cell);
            binary_cell_update(&cell, &block_shifts(&old, &new), &mut by_block);
            assert_eq!(by_block, per_cell);
            assert_ne!(per_cell, start, "the update moved predictions");
        }
    }

    /// The copies with `exp` inlined must give the library path's bits: same line-search
    /// sums, same loss sum, over margins from the saturated tails to 0.
    #[test]
    fn inlined_line_search_and_loss_have_the_library_bits() {
        let mut state = 7u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let rows = 4000u32;
        let targets: Vec<f64> = (0..rows).map(|i| if i % 3 == 0 { 1.0 } else { -1.0 }).collect();
        let predictions: Vec<i64> = (0..rows).map(|_| quantize((next() - 0.5) * 80.0)).collect();
        // An impure cell with real values: several non-zeros per row, some rows absent.
        let triples: Vec<(u32, u32, f64)> = (0..rows)
            .filter(|i| i % 7 != 3)
            .flat_map(|i| (0..1 + i % 3).map(move |j| (i, (i * 5 + j * 11) % 40, 0.25 + (j as f64))))
            .collect();
        let cell = Cell::from_triples(triples);
        let delta: Vec<f64> = (0..40).map(|_| (next() - 0.5) * 6.0).collect();
        let library =
            direction_loop(&cell, &delta, &targets, &predictions, Loss::Logistic, |y, f| Loss::Logistic.value(y, f));
        let used = cell_direction_sums(&cell, &delta, &targets, &predictions, Loss::Logistic);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&used), bits(&library));
        assert!(library.iter().all(|s| s.is_finite() && *s != 0.0), "every candidate moved the loss: {library:?}");
        let range = SumRange::for_partials(1);
        let expected =
            range.fixed(Quantity::Loss, loss_loop(&targets, &predictions, |y, f| Loss::Logistic.value(y, f))).unwrap();
        assert_eq!(shard_loss_sum(&range, &targets, &predictions, Loss::Logistic).unwrap(), expected);
    }
}
