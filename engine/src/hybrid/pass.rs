//! The batch pass of L-BFGS, the hybrid and IPM over one grain's rows: each row's margin
//! `m_i = x_i . w`, its loss, and `l'(y_i, m_i) x_i` added into the gradient. Every
//! objective evaluation is one such pass over all rows, so it is most of these algorithms'
//! time (docs/benchmarks.md, "Features per second").
//!
//! Every copy of the loop performs the floating-point operations of `Loss::value` followed
//! by `Loss::derivatives` (`.first`), in the same order, so every copy gives the same bits
//! (Rust never fuses a multiply and an add unless told to with `mul_add`):
//!
//! - Logistic loss on a machine where [`Exp::detect`] allows it runs a copy compiled for
//!   FMA and AVX2 with glibc's `exp` and `log1p` inlined ([`exp_inline`],
//!   [`log1p_inline`]: the library's bits).
//! - The logistic loss and its derivative share one `exp`: `softplus(-m)` takes
//!   `exp(-|m|)` (it takes `exp(m)` when `m < 0` and `exp(-m)` otherwise) and so does the
//!   derivative, so computing it once changes no bit and saves one `exp` per row.
//! - Binary rows (all values 1) add `l'` itself: `l' * 1.0` is `l'` exactly.

use crate::cocoa::rows::SlotRows;
use crate::fma;
use crate::loss::Loss;
use crate::scd::fast_exp::{Exp, exp_inline};
use crate::scd::fast_log1p::log1p_inline;
use std::ops::Range;

/// Adds `l'(y_i, x_i . w) x_ij` of rows `rows` (slot-local numbering) into `gradient`
/// (indexed by local feature) and returns the sum of their losses, in row order. With
/// `curvature` it also adds `l''(y_i, x_i . w) x_ij^2` there (indexed like `gradient`): the
/// Hessian diagonal of the data loss, for the Jacobi preconditioner, from the same margins
/// (`Loss::derivatives(..).second`'s bits).
pub fn grain_pass(
    loss: Loss,
    slot: &SlotRows,
    rows: Range<usize>,
    w: &[f64],
    gradient: &mut [f64],
    curvature: Option<&mut [f64]>,
) -> f64 {
    let with_curvature = curvature.is_some();
    let curvature = curvature.unwrap_or_default();
    let pass = Pass { slot, rows, with_curvature };
    fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(pass: Pass, w: &[f64], gradient: &mut [f64], curvature: &mut [f64]) -> f64 {
            pass.run(w, gradient, curvature, |y, m| logistic_row(y, m, Inline))
        }
        else {
            match loss {
                Loss::Logistic => pass.run(w, gradient, curvature, |y, m| logistic_row(y, m, Library)),
                Loss::Squared => pass.run(w, gradient, curvature, |y, m| row_of(Loss::Squared, y, m)),
                Loss::Hinge => pass.run(w, gradient, curvature, |y, m| row_of(Loss::Hinge, y, m)),
            }
        }
    }
}

/// The rows of one pass, and whether it sums the Hessian diagonal too.
struct Pass<'s> {
    slot: &'s SlotRows,
    rows: Range<usize>,
    with_curvature: bool,
}

impl Pass<'_> {
    /// One copy of the loop with the diagonal and one without (`pass_loop::<CURVATURE>`),
    /// so the pass without it does no extra work.
    #[inline(always)]
    fn run(
        self,
        w: &[f64],
        gradient: &mut [f64],
        curvature: &mut [f64],
        row: impl Fn(f64, f64) -> (f64, f64, f64),
    ) -> f64 {
        if self.with_curvature {
            pass_loop::<true>(self.slot, self.rows, w, gradient, curvature, row)
        } else {
            pass_loop::<false>(self.slot, self.rows, w, gradient, curvature, row)
        }
    }
}

/// A row's loss, first and second derivative, as `Loss::value` and `Loss::derivatives`
/// give them.
#[inline(always)]
fn row_of(loss: Loss, y: f64, m: f64) -> (f64, f64, f64) {
    let d = loss.derivatives(y, m);
    (loss.value(y, m), d.first, d.second)
}

/// `Loss::Logistic.value(y, f)` and `Loss::Logistic.derivatives(y, f)` (`.first`, `.second`)
/// from one `exp` (see the module doc; `crate::loss::softplus_with` and
/// `logistic_derivatives` are the operations repeated here), with the `exp` and `log1p` of
/// `math` (the library's, or the inline ones with the same bits). `-(y f)` is `(-y) f` bit
/// for bit: negation is exact. The second derivative is unused, and so not computed, in the
/// pass without curvature.
#[inline(always)]
pub(crate) fn logistic_row(y: f64, f: f64, math: impl ExpLog1p) -> (f64, f64, f64) {
    let margin = y * f;
    let e = math.exp(-margin.abs());
    let z = -margin;
    let value = if z > 0.0 { z + math.log1p(e) } else { math.log1p(e) };
    let inv = 1.0 / (1.0 + e);
    let sigma_neg = if margin >= 0.0 { e * inv } else { inv };
    (value, -y * sigma_neg, e * inv * inv)
}

/// The `exp` and `log1p` a logistic row takes, as a type so each loop is its own copy with
/// both inlined (a function passed as `impl Fn` is not always inlined, and then its
/// `mul_add`s run outside the FMA copy: see `softplus_inline`).
pub(crate) trait ExpLog1p: Copy {
    fn exp(self, x: f64) -> f64;
    fn log1p(self, x: f64) -> f64;
}

/// The C library's `exp` and `log1p`.
#[derive(Clone, Copy)]
pub(crate) struct Library;

impl ExpLog1p for Library {
    #[inline(always)]
    fn exp(self, x: f64) -> f64 {
        x.exp()
    }

    #[inline(always)]
    fn log1p(self, x: f64) -> f64 {
        x.ln_1p()
    }
}

/// [`exp_inline`] and [`log1p_inline`]: only inside code compiled for FMA.
#[derive(Clone, Copy)]
pub(crate) struct Inline;

impl ExpLog1p for Inline {
    #[inline(always)]
    fn exp(self, x: f64) -> f64 {
        exp_inline(x)
    }

    #[inline(always)]
    fn log1p(self, x: f64) -> f64 {
        log1p_inline(x)
    }
}

/// [`grain_pass`]' loop with the row's loss and derivative given; the value kind is matched
/// once, outside the rows.
#[inline(always)]
fn pass_loop<const CURVATURE: bool>(
    slot: &SlotRows,
    rows: Range<usize>,
    w: &[f64],
    gradient: &mut [f64],
    curvature: &mut [f64],
    row: impl Fn(f64, f64) -> (f64, f64, f64),
) -> f64 {
    let (starts, features, values) = slot.csr();
    let mut loss = 0.0;
    match values {
        None => {
            for i in rows {
                let entries = &features[starts[i]..starts[i + 1]];
                let (value, d, h) = row(slot.targets[i], margin_of_ones(entries, w));
                loss += value;
                add_ones(entries, d, gradient);
                if CURVATURE {
                    add_ones(entries, h, curvature);
                }
            }
        }
        Some(values) => {
            for i in rows {
                let range = starts[i]..starts[i + 1];
                let entries = &features[range.clone()];
                let xs = &values[range];
                let m: f64 = entries.iter().zip(xs).map(|(&j, &x)| w[j as usize] * x).sum();
                let (value, d, h) = row(slot.targets[i], m);
                loss += value;
                for (&j, &x) in entries.iter().zip(xs) {
                    gradient[j as usize] += d * x;
                }
                if CURVATURE {
                    for (&j, &x) in entries.iter().zip(xs) {
                        curvature[j as usize] += h * (x * x);
                    }
                }
            }
        }
    }
    loss
}

/// `sum_j w_j` over a binary row's features: the sum `Iterator::sum` takes (from `-0.0`,
/// one term at a time, in order), unrolled by four so the loop's own bookkeeping is paid
/// once per four non-zeros.
#[inline(always)]
fn margin_of_ones(entries: &[u32], w: &[f64]) -> f64 {
    let mut m = -0.0;
    let mut chunks = entries.chunks_exact(4);
    for c in &mut chunks {
        m += w[c[0] as usize];
        m += w[c[1] as usize];
        m += w[c[2] as usize];
        m += w[c[3] as usize];
    }
    chunks.remainder().iter().fold(m, |m, &j| m + w[j as usize])
}

/// `gradient_j += d` for a binary row's features, unrolled by four (each entry gets the
/// same one addition).
#[inline(always)]
fn add_ones(entries: &[u32], d: f64, gradient: &mut [f64]) {
    let mut chunks = entries.chunks_exact(4);
    for c in &mut chunks {
        gradient[c[0] as usize] += d;
        gradient[c[1] as usize] += d;
        gradient[c[2] as usize] += d;
        gradient[c[3] as usize] += d;
    }
    chunks.remainder().iter().for_each(|&j| gradient[j as usize] += d);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared-`exp` logistic row has the bits of `Loss::value` and `Loss::derivatives` (both),
    /// with the library's `exp` and `log1p` and (where the machine allows) the inlined ones, over margins
    /// from the saturated tails through both zeros.
    #[test]
    fn the_shared_exp_row_has_the_bits_of_value_and_derivatives() {
        let mut state = 11u64;
        let mut margins: Vec<f64> = vec![0.0, -0.0, 1e-300, -1e-300, 1e-17, -1e-17, 36.0, -36.0, 745.5, -745.5, 800.0];
        for _ in 0..200_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            margins.push(((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 100.0);
        }
        let inline = Exp::detect() == Exp::Inline;
        for &f in &margins {
            for y in [1.0, -1.0] {
                let derivatives = Loss::Logistic.derivatives(y, f);
                let expected =
                    (Loss::Logistic.value(y, f).to_bits(), derivatives.first.to_bits(), derivatives.second.to_bits());
                let bits = |(v, d, h): (f64, f64, f64)| (v.to_bits(), d.to_bits(), h.to_bits());
                assert_eq!(bits(logistic_row(y, f, Library)), expected, "y {y} f {f}");
                if inline {
                    assert_eq!(bits(probe_inline(y, f)), expected, "inline exp, y {y} f {f}");
                }
            }
        }
    }

    /// The unrolled margin is `Iterator::sum`'s, bit for bit, on rows of every length
    /// modulo four (an empty row included: both give `-0.0`).
    #[test]
    fn the_unrolled_margin_is_the_iterator_sum() {
        let w: Vec<f64> = (0..64).map(|k| ((k * 37 % 64) as f64 - 31.5) * 1e-3 * (1.0 + k as f64).sqrt()).collect();
        for len in 0..40usize {
            let entries: Vec<u32> = (0..len as u32).map(|k| (k * 13 + 5) % 64).collect();
            let expected: f64 = entries.iter().map(|&j| w[j as usize]).sum();
            assert_eq!(margin_of_ones(&entries, &w).to_bits(), expected.to_bits(), "row of {len}");
            let (mut a, mut b) = (vec![0.5; 64], vec![0.5; 64]);
            add_ones(&entries, 0.3, &mut a);
            entries.iter().for_each(|&j| b[j as usize] += 0.3);
            assert_eq!(a, b);
        }
    }

    fn probe_inline(y: f64, f: f64) -> (f64, f64, f64) {
        crate::fma::dispatch! {
            if true;
            fn(y: f64, f: f64) -> (f64, f64, f64) { logistic_row(y, f, Inline) }
            else { logistic_row(y, f, Inline) }
        }
    }
}
