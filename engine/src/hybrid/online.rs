//! The online passes a slot makes over its rows: pure functions of the rows, the starting
//! model (over the slot's local features) and a row order.

use crate::cocoa::rows::SlotRows;
use crate::fma;
use crate::loss::{Loss, logistic_derivatives};
use crate::scd::fast_exp::{Exp, exp_inline};

/// Calls `f(local feature, value)` for each non-zero of row `i`.
#[inline]
fn for_each_entry(rows: &SlotRows, i: usize, mut f: impl FnMut(usize, f64)) {
    let (features, values) = rows.row(i);
    match values {
        None => features.iter().for_each(|&j| f(j as usize, 1.0)),
        Some(values) => features.iter().zip(values).for_each(|(&j, &x)| f(j as usize, x)),
    }
}

/// One AdaGrad pass (Agarwal et al., Algorithm 1; Duchi, Hazan and Singer 2011) whose step
/// is capped per row so that no row's update can overshoot. With the accumulators `G`
/// starting at 1, row i's gradient `g_j = l'(y, x.w) x_j + r w_j` moves
/// `w_j -= eta_i g_j / sqrt(G_j)`, then `G_j += g_j^2`. `r = 2 l2 / n` spreads the
/// regularizer over the n rows of the whole problem, applied to a feature when a row
/// touches it (a warm start only needs the right neighbourhood; the batch solver finishes on
/// the exact objective). Returns the accumulators; `w` is updated in place.
///
/// The cap: `eta_i = min(rate, 1 / (c q_i + r))`, with `q_i = sum_j x_ij^2 / sqrt(G_j)` the
/// row's squared norm in AdaGrad's metric and `c` the loss's largest curvature
/// ([`curvature_bound`]). Why this bound: along the step `u = D grad` (`D = diag(1 /
/// sqrt(G))`) the row's own objective `l(x.w) + (r/2) |w_row|^2` has second derivative at
/// most `c (x.u)^2 + r |u|^2 <= (c q_i + r) u'D^-1 u` (Cauchy-Schwarz, and `sqrt(G_j) >=
/// 1`), while its slope starts at `-u'D^-1 u`; so for any step up to `1 / (c q_i + r)` the
/// slope stays <= 0: the update never passes the minimum of the row's objective along its
/// own direction, on any loss and for any `rate` (for squared loss without regularizer a
/// capped step lands on the row's minimizer, `x.w = y`). Plain AdaGrad moves a row's margin by about
/// `rate c q_i` times the residual: on a row's first visit (`G = 1`, `q_i = |x_i|^2`) that
/// passes the minimizer once it exceeds 1 and grows without bound once it exceeds 2 —
/// squared loss at `rate = 0.5` on a9a (14 non-zeros a row) ended its warm start at 5.8e8
/// against 7,841 at `w = 0`, and on criteo-1m left the exact sums' range. This is the
/// concern of Karampatziakis and Langford's importance-aware updates (VW's default
/// `--invariant`), met by the simplest safe rule — a capped step rather than their
/// closed-form integral of the loss, which logistic loss only has through Lambert's W.
/// Once `G` has grown the cap stops binding and the step is AdaGrad's.
///
/// Logistic loss runs a copy compiled for FMA with `exp` inlined where [`Exp::detect`]
/// allows ([`logistic_first`]); the bits are the same.
pub fn adagrad_pass(loss: Loss, rows: &SlotRows, w: &mut [f64], rate: f64, r: f64, order: &[u32]) -> Vec<f64> {
    let c = curvature_bound(loss);
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(rows: &SlotRows, w: &mut [f64], rate: f64, r: f64, order: &[u32], c: f64) -> Vec<f64> {
            adagrad_loop(rows, w, (rate, r, c), order, |y, f| logistic_first(y, f))
        }
        else { adagrad_loop(rows, w, (rate, r, c), order, |y, f| loss.derivatives(y, f).first) }
    }
}

/// `Loss::Logistic.derivatives(y, f).first` with the inline `exp`: the same operations, so
/// the same bits. Only inside code compiled for FMA.
#[inline(always)]
fn logistic_first(y: f64, f: f64) -> f64 {
    logistic_derivatives(y, f, exp_inline).first
}

/// [`adagrad_pass`]' loop with the loss's first derivative `first(y, f)` given; `(rate, r,
/// c)` as there. `root` keeps `sqrt(G_j)`, so a non-zero costs one square root as before.
#[inline(always)]
fn adagrad_loop(
    rows: &SlotRows,
    w: &mut [f64],
    (rate, r, c): (f64, f64, f64),
    order: &[u32],
    first: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let mut g2 = vec![1.0f64; w.len()];
    let mut root = vec![1.0f64; w.len()];
    for &i in order {
        let i = i as usize;
        let d = first(rows.targets[i], rows.dot(i, w));
        let mut q = 0.0;
        for_each_entry(rows, i, |j, x| q += x * x / root[j]);
        let eta = rate.min(1.0 / (c * q + r));
        for_each_entry(rows, i, |j, x| {
            let g = d * x + r * w[j];
            w[j] -= eta * g / root[j];
            g2[j] += g * g;
            root[j] = g2[j].sqrt();
        });
    }
    g2
}

/// The largest second derivative of the loss: the step normalization of [`sgd_pass`] and
/// the cap of [`adagrad_pass`].
fn curvature_bound(loss: Loss) -> f64 {
    match loss {
        Loss::Squared => 2.0,
        Loss::Logistic => 0.25,
        Loss::Hinge => 1.0,
    }
}

/// One pass of normalized SGD on `sum loss + l2 |w|^2` (the slot's rows, the regularizer
/// spread over the problem's `n` rows): row i steps by `rate / (c |x_i|^2)` along its
/// gradient, with `c` the loss's largest curvature, so `rate = 1` never overshoots the row's
/// own minimum (for squared loss it lands on it). The regularizer shrinks the model by a
/// scale factor kept apart (Bottou's trick), so a step costs the row's non-zeros only.
/// Logistic loss runs a copy with `exp` inlined where allowed, as [`adagrad_pass`] does.
pub fn sgd_pass(loss: Loss, rows: &SlotRows, w: &mut [f64], rate: f64, l2: f64, n: f64, order: &[u32]) {
    let c = curvature_bound(loss);
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(rows: &SlotRows, w: &mut [f64], rate: f64, l2: f64, n: f64, order: &[u32], c: f64) {
            sgd_loop(rows, w, (rate, l2, n, c), order, |y, f| logistic_first(y, f))
        }
        else { sgd_loop(rows, w, (rate, l2, n, c), order, |y, f| loss.derivatives(y, f).first) }
    }
}

/// [`sgd_pass`]' loop with the loss's first derivative `first(y, f)` given; `(rate, l2, n,
/// c)` as there, `c` the loss's [`curvature_bound`].
#[inline(always)]
fn sgd_loop(
    rows: &SlotRows,
    w: &mut [f64],
    (rate, l2, n, c): (f64, f64, f64, f64),
    order: &[u32],
    first: impl Fn(f64, f64) -> f64,
) {
    let mut scale = 1.0;
    for &i in order {
        let i = i as usize;
        let norm = rows.norms[i];
        if norm == 0.0 {
            continue;
        }
        let eta = rate / (c * norm);
        let d = first(rows.targets[i], scale * rows.dot(i, w));
        scale *= 1.0 - (eta * 2.0 * l2 / n).min(0.5);
        rows.add_to(i, -eta * d / scale, w);
        if scale < 1e-9 {
            w.iter_mut().for_each(|x| *x *= scale);
            scale = 1.0;
        }
    }
    w.iter_mut().for_each(|x| *x *= scale);
}

/// One pass of the averaged perceptron (Collins 2002; Hall et al. mix it for hinge): a row
/// the model gets wrong (`y x.w <= 0`) adds `y x`; returns in `w` the average of the model
/// over the pass's steps (by Daumé's accumulator, so a step costs the row's non-zeros).
pub fn perceptron_pass(rows: &SlotRows, w: &mut [f64], order: &[u32]) {
    let mut u = vec![0.0; w.len()];
    let mut c = 1.0;
    for &i in order {
        let i = i as usize;
        let y = rows.targets[i];
        if y * rows.dot(i, w) <= 0.0 {
            rows.add_to(i, y, w);
            rows.add_to(i, c * y, &mut u);
        }
        c += 1.0;
    }
    w.iter_mut().zip(&u).for_each(|(x, u)| *x -= u / c);
}
