//! Coarse correction: a Newton step in the subspace of whole-block shifts.
//!
//! Coordinate descent is slow along directions that move many coordinates together at
//! almost no cost in loss. Real data has such directions by construction: a one-hot
//! variable's features sum to the bias column, so "add c to every feature of block A,
//! subtract c from the bias" leaves nearly every prediction unchanged and is priced only by
//! the regularizer — a curvature of about `2 l2` against the data's `n`. Block by block, CD
//! creeps along it (about 2,000 epochs to 1e-6 on a9a).
//!
//! Correlated features across blocks slow CD down the same way. So, as in a two-level
//! (multigrid) method and in sequential subspace optimization (SESOP, Narkiss & Zibulevsky
//! 2005), each epoch ends with one Newton step in a small subspace spanned by
//!
//! * the K block indicators `e_k` (1 on block k's features), whose value on row i is
//!   `z_ik = sum_{j in B_k} x_ij`, and
//! * the last [`HISTORY`] epochs' moves `theta_now - theta_then`, whose value on row i is
//!   the exact change of its prediction `f_i(now) - f_i(then)` (kept by the executor).
//!
//! With `V` the directions and `Z = X V` their row values, the step solves
//! `(Z' L'' Z + 2 l2 V'V) t = -(Z' l' + 2 l2 V' theta)`, dropping directions that are
//! numerically dependent, and is line-searched like an impure block's step, so the
//! objective never rises. CD smooths the rest. It costs two passes over the grid
//! and O(n (K + HISTORY)^2) arithmetic, so an epoch runs it only where it pays: when the
//! epoch's sweep gained no more than the last correction did, or [`HISTORY`] epochs after
//! the last one (`Scd::coarse_pays`). With L1 the block shifts are left out (they
//! would make zero weights non-zero); the history moves are zero wherever a weight stayed
//! zero. Beyond [`MAX_COARSE_BLOCKS`] blocks there is no correction.

use crate::fixed::prediction_value;
use crate::fma;
use crate::grid::{Cell, CellValues};
use crate::loss::Loss;
use crate::scd::fast_exp::Exp;
use crate::scd::kernels::{DirectionSums, LogisticInline, RowDerivatives, logistic_value_inline};

/// Above this many blocks the K x K system costs more than it saves.
pub const MAX_COARSE_BLOCKS: usize = 256;

/// How many past epochs' moves join the subspace.
pub const HISTORY: usize = 4;

/// Lanes of the Hessian's vector loop (AVX2: four `f64`); its rows are padded to a multiple.
const LANES: usize = 4;

/// Row values of every direction, `z[i * stride + d]`, for one shard: the block indicators
/// (`cells[k]` is block k's cell of the shard), then the moves since each snapshot; the
/// `stride - D` columns after them stay 0.
fn subspace_rows(cells: &[&Cell], snapshots: &[&[i64]], predictions: &[i64], stride: usize) -> Vec<f64> {
    let (k, rows) = (cells.len(), predictions.len());
    let mut z = vec![0.0; rows * stride];
    for (b, cell) in cells.iter().enumerate() {
        for (n, &row) in cell.rows.iter().enumerate() {
            z[row as usize * stride + b] += cell.value(n);
        }
    }
    for (h, snapshot) in snapshots.iter().enumerate() {
        for (i, (&now, &then)) in predictions.iter().zip(snapshot.iter()).enumerate() {
            z[i * stride + k + h] = prediction_value(now.wrapping_sub(then));
        }
    }
    z
}

/// The coarse step's sums over one shard: the loss gradient along each direction (D
/// values); then, if `hessian`, the upper triangle of the loss Hessian (D (D + 1) / 2,
/// row-major; zeros otherwise); then the shard's rows and the rows the Hessian covers.
///
/// The gradient costs O(nnz + n H); the Hessian O(n D^2), so it is taken on a fixed subset
/// of shards (see [`hessian_stride`]) and scaled up: an estimated Hessian still gives a
/// descent direction, and the line search measures the step on every row.
///
/// Like the statistics pass, logistic loss runs in a copy compiled for FMA and AVX2 with
/// `exp` inlined where [`Exp::detect`] allows (the Hessian's slice loop then takes four
/// lanes at a time); the operations and their order are the same, so are the bits.
pub fn shard_coarse_statistics(
    cells: &[&Cell],
    snapshots: &[&[i64]],
    targets: &[f64],
    predictions: &[i64],
    loss: Loss,
    hessian: bool,
) -> Vec<f64> {
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(cells: &[&Cell], snapshots: &[&[i64]], targets: &[f64], predictions: &[i64], hessian: bool) -> Vec<f64> {
            coarse_statistics(cells, snapshots, targets, predictions, LogisticInline, hessian)
        }
        else { coarse_statistics(cells, snapshots, targets, predictions, loss, hessian) }
    }
}

#[inline(always)]
fn coarse_statistics(
    cells: &[&Cell],
    snapshots: &[&[i64]],
    targets: &[f64],
    predictions: &[i64],
    loss: impl RowDerivatives,
    hessian: bool,
) -> Vec<f64> {
    let (k, dims, rows) = (cells.len(), cells.len() + snapshots.len(), targets.len());
    // The derivatives as two arrays: the gradient reads only l', the Hessian only l''.
    let (first, second): (Vec<f64>, Vec<f64>) = targets
        .iter()
        .zip(predictions)
        .map(|(&y, &p)| {
            let d = loss.at(y, prediction_value(p));
            (d.first, d.second)
        })
        .unzip();
    let triangle = dims * (dims + 1) / 2;
    let mut out = vec![0.0; statistics_len(dims)];
    for (b, cell) in cells.iter().enumerate() {
        // l' x summed in the cell's order; `l' * 1.0` is `l'` exactly, so Ones skips the product.
        out[b] = match &cell.values {
            CellValues::Ones => cell.rows.iter().map(|&row| first[row as usize]).sum(),
            CellValues::Real(values) => cell.rows.iter().zip(values).map(|(&row, &x)| first[row as usize] * x).sum(),
            CellValues::Real32(values) => {
                cell.rows.iter().zip(values).map(|(&row, &x)| first[row as usize] * x as f64).sum()
            }
        };
    }
    for (h, snapshot) in snapshots.iter().enumerate() {
        out[k + h] = first
            .iter()
            .zip(predictions.iter().zip(snapshot.iter()))
            .map(|(l1, (&now, &then))| l1 * prediction_value(now.wrapping_sub(then)))
            .sum();
    }
    if hessian {
        // Each Hessian entry (a, b), b >= a, is the row-order sum of `(l''_i z_ia) z_ib`,
        // as it always was; what changed is the layout (docs/benchmarks/scd-sweep.md). The sums are
        // kept in a square whose rows are padded to whole vectors: row a adds its terms from
        // column a rounded down to a multiple of [`LANES`] to the end, so the loop runs on
        // whole vectors with no scalar remainder. The few entries left of the diagonal and
        // in the padding are computed and thrown away. Rows with z_ia = 0 are skipped: their
        // terms are all +-0, and adding +-0 leaves every sum's bits as they are (a sum that
        // starts at +0 and adds finite terms is never -0).
        let stride = dims.next_multiple_of(LANES);
        let vectors = stride / LANES;
        let z = subspace_rows(cells, snapshots, predictions, stride);
        let (z, _) = z.as_chunks::<LANES>();
        let mut square = vec![[0.0; LANES]; dims * vectors];
        for (zi, &l2) in z.chunks_exact(vectors).zip(&second) {
            let values = zi.as_flattened();
            for (a, sums) in square.chunks_exact_mut(vectors).enumerate() {
                if values[a] != 0.0 {
                    let scaled = l2 * values[a];
                    let from = a / LANES;
                    for (u, zb) in sums[from..].iter_mut().zip(&zi[from..]) {
                        for lane in 0..LANES {
                            u[lane] += scaled * zb[lane];
                        }
                    }
                }
            }
        }
        let mut at = dims;
        for (a, sums) in square.chunks_exact(vectors).enumerate() {
            out[at..at + dims - a].copy_from_slice(&sums.as_flattened()[a..dims]);
            at += dims - a;
        }
        out[dims + triangle + 1] = rows as f64;
    }
    out[dims + triangle] = rows as f64;
    out
}

/// Length of [`shard_coarse_statistics`]' output for `dims` directions.
pub fn statistics_len(dims: usize) -> usize {
    dims + dims * (dims + 1) / 2 + 2
}

/// Line-search sums along `d_i = sum_k z_ik t_k`, as [`super::kernels::cell_direction_sums`],
/// in O(nnz + n H), and the shard's loss sum at the current predictions (in row order, the
/// same `f64` sum as [`super::kernels::shard_loss_sum`]): the correction's "objective
/// before its step" comes from this pass instead of one more pass over the rows. Logistic
/// loss runs a copy compiled for FMA with `exp` inlined where [`Exp::detect`] allows: nine
/// losses per row made this pass a quarter to a third of an epoch on a9a and w8a
/// (docs/benchmarks/scd-sweep.md); the bits are the same.
pub fn shard_coarse_direction_sums(
    cells: &[&Cell],
    snapshots: &[&[i64]],
    t: &[f64],
    targets: &[f64],
    predictions: &[i64],
    loss: Loss,
) -> (Vec<f64>, f64) {
    let mut d = vec![0.0; targets.len()];
    for (cell, &shift) in cells.iter().zip(t) {
        for (n, &row) in cell.rows.iter().enumerate() {
            d[row as usize] += shift * cell.value(n);
        }
    }
    for (snapshot, &weight) in snapshots.iter().zip(&t[cells.len()..]) {
        for (di, (&now, &then)) in d.iter_mut().zip(predictions.iter().zip(snapshot.iter())) {
            *di += weight * prediction_value(now.wrapping_sub(then));
        }
    }
    let d = d.as_slice();
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(targets: &[f64], predictions: &[i64], d: &[f64]) -> (Vec<f64>, f64) {
            // A closure, not the function item: it is compiled for FMA with the loop (see
            // `softplus_inline`).
            direction_loop(targets, predictions, d, Loss::Logistic, |y, f| logistic_value_inline(y, f))
        }
        else { direction_loop(targets, predictions, d, loss, |y, f| loss.value(y, f)) }
    }
}

/// [`shard_coarse_direction_sums`]' loss loop over the rows' moves `d`: the line-search
/// sums and the loss sum, whose row terms the logistic sums share.
#[inline(always)]
fn direction_loop(
    targets: &[f64],
    predictions: &[i64],
    d: &[f64],
    loss: Loss,
    value: impl Fn(f64, f64) -> f64 + Copy,
) -> (Vec<f64>, f64) {
    let mut sums = DirectionSums::new(loss);
    let mut total = 0.0;
    for ((&y, &p), &di) in targets.iter().zip(predictions).zip(d) {
        let f = prediction_value(p);
        let base = value(y, f);
        total += base;
        if loss == Loss::Logistic {
            if di != 0.0 {
                sums.add_logistic(y, f, di, base, value);
            }
        } else {
            sums.add_with(y, f, di, value);
        }
    }
    (sums.0, total)
}

/// Every how many shards the Hessian is taken: enough rows to estimate a D x D matrix
/// well (64 D^2, at least 65,536), all of them for small data.
pub fn hessian_stride(rows: u64, dims: usize) -> usize {
    let wanted = (64 * dims * dims).max(65_536) as u64;
    (rows / wanted).max(1) as usize
}

/// Whether shard `shard` contributes to the coarse Hessian: every `stride`-th one. Every
/// executor must pick the same shards, or models would differ between executors.
pub fn takes_hessian(shard: usize, stride: usize) -> bool {
    shard.is_multiple_of(stride.max(1))
}

/// Solves `H t = -g` for the packed upper-triangular `H` by Cholesky, dropping (t = 0)
/// each direction whose pivot shows it is numerically a combination of earlier ones.
/// `None` when nothing is left.
pub fn newton_direction(gradient: &[f64], packed: &[f64]) -> Option<Vec<f64>> {
    let k = gradient.len();
    let mut a = vec![0.0; k * k];
    let mut at = 0;
    for i in 0..k {
        for j in i..k {
            a[i * k + j] = packed[at];
            a[j * k + i] = packed[at];
            at += 1;
        }
    }
    let mut dropped = vec![false; k];
    for j in 0..k {
        let mut d = a[j * k + j];
        for m in 0..j {
            d -= a[j * k + m] * a[j * k + m];
        }
        if !(d > 1e-8 * a[j * k + j].abs()) {
            // Dependent direction: make its row and column the identity, its step zero.
            for i in 0..k {
                a[i * k + j] = 0.0;
                a[j * k + i] = 0.0;
            }
            a[j * k + j] = 1.0;
            dropped[j] = true;
            continue;
        }
        let d = d.sqrt();
        a[j * k + j] = d;
        for i in j + 1..k {
            let mut s = a[i * k + j];
            for m in 0..j {
                s -= a[i * k + m] * a[j * k + m];
            }
            a[i * k + j] = s / d;
        }
    }
    if dropped.iter().all(|&d| d) {
        return None;
    }
    let mut y: Vec<f64> = gradient.iter().zip(&dropped).map(|(g, &d)| if d { 0.0 } else { -g }).collect();
    for i in 0..k {
        for m in 0..i {
            y[i] -= a[i * k + m] * y[m];
        }
        y[i] /= a[i * k + i];
    }
    for i in (0..k).rev() {
        for m in i + 1..k {
            y[i] -= a[m * k + i] * y[m];
        }
        y[i] /= a[i * k + i];
    }
    y.iter().all(|v| v.is_finite()).then_some(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Hessian as it was computed before the padded square: the packed triangle, row a
    /// of it one slice operation over z_i[a..], rows with z_ia = 0 skipped.
    fn triangle_reference(z: &[f64], second: &[f64], dims: usize) -> Vec<f64> {
        let mut upper = vec![0.0; dims * (dims + 1) / 2];
        for (i, &l2) in second.iter().enumerate() {
            let zi = &z[i * dims..(i + 1) * dims];
            let mut at = 0;
            for a in 0..dims {
                let len = dims - a;
                if zi[a] != 0.0 {
                    let scaled = l2 * zi[a];
                    for (u, &zb) in upper[at..at + len].iter_mut().zip(&zi[a..]) {
                        *u += scaled * zb;
                    }
                }
                at += len;
            }
        }
        upper
    }

    /// The vectorised statistics give the old loop's bits: every gradient and Hessian sum,
    /// for D = 5..=12 (padding of 3, 2, 1 and 0 columns) on an impure real-valued block, a
    /// one-hot block with rows missing and history moves of both signs.
    #[test]
    fn coarse_statistics_keep_the_triangle_loops_bits() {
        let mut state = 11u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let rows = 3000u32;
        let targets: Vec<f64> = (0..rows).map(|i| if i % 3 == 0 { 1.0 } else { -1.0 }).collect();
        let predictions: Vec<i64> = (0..rows).map(|_| crate::fixed::quantize((next() - 0.5) * 12.0)).collect();
        for blocks in 1..=8u32 {
            let cells: Vec<Cell> = (0..blocks)
                .map(|b| {
                    let triples: Vec<(u32, u32, f64)> = (0..rows)
                        .filter(|i| (i + b) % (b + 2) != 0)
                        .flat_map(|i| (0..1 + (i + b) % 2).map(move |j| (i, (i + j) % 5, 0.5 + (j * b) as f64 / 3.0)))
                        .collect();
                    Cell::from_triples(triples)
                })
                .collect();
            let cell_refs: Vec<&Cell> = cells.iter().collect();
            let snapshots: Vec<Vec<i64>> = (0..HISTORY)
                .map(|_| predictions.iter().map(|&p| p.wrapping_sub(crate::fixed::quantize(next() - 0.5))).collect())
                .collect();
            let snapshot_refs: Vec<&[i64]> = snapshots.iter().map(|s| s.as_slice()).collect();
            let dims = cells.len() + HISTORY;
            let out = shard_coarse_statistics(&cell_refs, &snapshot_refs, &targets, &predictions, Loss::Logistic, true);

            let derivatives: Vec<_> = targets
                .iter()
                .zip(&predictions)
                .map(|(&y, &p)| Loss::Logistic.derivatives(y, prediction_value(p)))
                .collect();
            let second: Vec<f64> = derivatives.iter().map(|d| d.second).collect();
            let z = subspace_rows(&cell_refs, &snapshot_refs, &predictions, dims);
            let mut expected: Vec<f64> = cells
                .iter()
                .map(|cell| {
                    cell.rows.iter().enumerate().map(|(n, &row)| derivatives[row as usize].first * cell.value(n)).sum()
                })
                .collect();
            for snapshot in &snapshots {
                expected.push(
                    derivatives
                        .iter()
                        .zip(predictions.iter().zip(snapshot))
                        .map(|(d, (&now, &then))| d.first * prediction_value(now.wrapping_sub(then)))
                        .sum(),
                );
            }
            expected.extend(triangle_reference(&z, &second, dims));
            expected.extend([rows as f64, rows as f64]);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&expected), "D = {dims}");
            assert!(out[dims] > 0.0 && out[dims + 1] != 0.0, "the Hessian has entries: {:?}", &out[dims..dims + 2]);
        }
    }
}
