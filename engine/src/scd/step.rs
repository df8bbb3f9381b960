//! Coordinate steps: the master's part of an SCD iteration, pure functions of aggregated
//! statistics.
//!
//! For feature j with `G = sum_i l'_i x_ij` and `H = sum_i l''_i x_ij^2`, the second-order
//! model of the objective along the coordinate is
//! `q(d) = G d + H d^2 / 2 + l2 ((t + d)^2 - t^2) + l1 (|t + d| - |t|)`.
//! Its minimizer is a soft-thresholded Newton step ([`newton_step`]); for squared loss the
//! model is exact, so this is the closed-form coordinate optimum of the SCD paper, eq. 3.

use crate::objective::Regularization;

/// Minimizer of the second-order model: `w = S(H t - G, l1) / (H + 2 l2)`, returned as the
/// change `w - t`. Zero when the model has no curvature (a feature no example touches).
pub fn newton_step(gradient: f64, curvature: f64, theta: f64, reg: &Regularization) -> f64 {
    let denominator = curvature + 2.0 * reg.l2;
    if !(denominator > 0.0) {
        return 0.0;
    }
    let b = curvature * theta - gradient;
    let w = (b.abs() - reg.l1).max(0.0).copysign(b) / denominator;
    w - theta
}

/// A Newton step for logistic loss that provably never increases the objective.
///
/// Logistic loss is self-concordant-like: |l'''| <= l'' (Bach 2010), hence
/// `l(f + s) - l(f) <= l'(f) s + l''(f) (e^|s| - 1 - |s|)`. Summing over the rows of a
/// feature whose values satisfy |x| <= `max_abs` gives an upper bound on the change of the
/// objective, `U(d) = G d + H d^2 psi(max_abs |d|) + reg(d)` with
/// `psi(s) = (e^s - 1 - s) / s^2`. `U` is convex, equals the Newton model near 0, and
/// `U(0) = 0`; its minimizer is a step that decreases the objective by at least `-U(d)`.
/// Near the optimum steps are small, `psi -> 1/2`, and the step is Newton's.
///
/// The minimizer lies between 0 and the Newton step (U' >= q' on that side), so a
/// bracketed Newton iteration on U' finds it in a handful of exp() calls.
pub fn bounded_logistic_step(gradient: f64, curvature: f64, max_abs: f64, theta: f64, reg: &Regularization) -> f64 {
    let newton = newton_step(gradient, curvature, theta, reg);
    if newton == 0.0 || !(curvature > 0.0) || !(max_abs > 0.0) {
        return newton; // U is exactly the model (no curvature term) or nothing moves
    }
    let bound = Bound { g: gradient, h: curvature, m: max_abs, theta, reg: *reg };
    // Fast path, the common case near the optimum: when the bound proves the Newton step
    // achieves at least 99% of the decrease the quadratic model predicts, take it; the
    // bound's minimizer could only improve on it by that margin.
    let model =
        gradient * newton + 0.5 * curvature * newton * newton + reg.penalty(theta + newton) - reg.penalty(theta);
    if model < 0.0 && bound.value(newton) <= 0.99 * model {
        return newton;
    }
    let (mut lo, mut hi) = if newton > 0.0 { (0.0, newton) } else { (newton, 0.0) };
    let mut x = newton;
    for _ in 0..100 {
        let (left, right) = bound.derivative(x);
        if left <= 0.0 && right >= 0.0 {
            lo = x;
            hi = x;
            break; // at the L1 kink, or an exact root
        }
        if right < 0.0 {
            lo = x
        } else {
            hi = x
        }
        let mut next = x - right / bound.second_derivative(x);
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        if (next - x).abs() <= 1e-15 * x.abs().max(1e-300) || hi - lo <= 1e-15 * hi.abs().max(lo.abs()) {
            break;
        }
        x = next;
    }
    // The iteration approaches the root from either side; keep whichever end of the final
    // bracket the bound proves best, and never a step the bound cannot prove is descent.
    let (u_lo, u_hi) = (bound.value(lo), bound.value(hi));
    let (best, u_best) = if u_lo <= u_hi { (lo, u_lo) } else { (hi, u_hi) };
    if u_best < 0.0 { best } else { 0.0 }
}

struct Bound {
    g: f64,
    h: f64,
    m: f64,
    theta: f64,
    reg: Regularization,
}

impl Bound {
    fn value(&self, d: f64) -> f64 {
        let w = self.theta + d;
        self.g * d + self.h * d * d * psi(self.m * d.abs()) + self.reg.penalty(w) - self.reg.penalty(self.theta)
    }

    /// Left and right derivatives (they differ only at the L1 kink w = 0).
    fn derivative(&self, d: f64) -> (f64, f64) {
        let w = self.theta + d;
        let smooth = self.g + self.h * d * chi(self.m * d.abs()) + 2.0 * self.reg.l2 * w;
        if w > 0.0 {
            (smooth + self.reg.l1, smooth + self.reg.l1)
        } else if w < 0.0 {
            (smooth - self.reg.l1, smooth - self.reg.l1)
        } else {
            (smooth - self.reg.l1, smooth + self.reg.l1)
        }
    }

    fn second_derivative(&self, d: f64) -> f64 {
        self.h * (self.m * d.abs()).exp() + 2.0 * self.reg.l2
    }
}

/// `(e^s - 1 - s) / s^2`, with its series near 0 where the subtraction cancels.
fn psi(s: f64) -> f64 {
    if s < 1e-3 { 0.5 + s / 6.0 + s * s / 24.0 } else { (s.exp_m1() - s) / (s * s) }
}

/// `(e^s - 1) / s`: the derivative of `d^2 psi(m|d|)` with respect to d is `d chi(m|d|)`.
fn chi(s: f64) -> f64 {
    if s < 1e-8 { 1.0 + s / 2.0 } else { s.exp_m1() / s }
}

/// Exact line search for squared loss along a block direction `delta`.
///
/// With `p = sum_i r_i d_i` (r the residuals y - f) and `dd = sum_i d_i^2` (d = X delta),
/// the loss changes by `-2 a p + a^2 dd` at step `a`, so the objective along the line is a
/// convex piecewise quadratic in `a`, minimized over [0, 1] exactly (closed form without
/// L1; bisection on the subgradient with it). `pairs` yields every `(theta_j, delta_j)`
/// afresh, in one order ([`pairs`] for slices): the coarse correction computes its
/// direction on the fly rather than hold a vector of the feature count.
pub fn squared_line_search<I: Iterator<Item = (f64, f64)>>(
    p: f64,
    dd: f64,
    pairs: impl Fn() -> I,
    reg: &Regularization,
) -> f64 {
    let td: f64 = pairs().map(|(t, d)| t * d).sum();
    let d2: f64 = pairs().map(|(_, d)| d * d).sum();
    let slope = |a: f64| {
        let l1: f64 = if reg.l1 == 0.0 {
            0.0
        } else {
            pairs().map(|(t, d)| reg.l1 * d * (t + a * d).signum() * ((t + a * d) != 0.0) as u8 as f64).sum()
        };
        -2.0 * p + 2.0 * a * dd + 2.0 * reg.l2 * (td + a * d2) + l1
    };
    let curvature = dd + reg.l2 * d2;
    if !(curvature > 0.0) {
        return 0.0;
    }
    if reg.l1 == 0.0 {
        return ((p - reg.l2 * td) / curvature).clamp(0.0, 1.0);
    }
    if slope(0.0) >= 0.0 {
        return 0.0;
    }
    if slope(1.0) <= 0.0 {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if slope(mid) < 0.0 { lo = mid } else { hi = mid }
    }
    lo
}

/// `(theta_j, delta_j)` of two slices, for the line searches.
pub fn pairs<'a>(theta: &'a [f64], delta: &'a [f64]) -> impl Fn() -> std::iter::Zip<Copied<'a>, Copied<'a>> {
    move || theta.iter().copied().zip(delta.iter().copied())
}

type Copied<'a> = std::iter::Copied<std::slice::Iter<'a, f64>>;

/// Candidate steps for the logistic line search, evaluated exactly in one data pass.
pub const LOGISTIC_STEP_CANDIDATES: [f64; 8] = [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125];

/// Picks the candidate step with the lowest objective, given each candidate's exact change
/// of the loss sum; 0 when none decreases the objective.
/// `pairs` as in [`squared_line_search`].
pub fn pick_logistic_step<I: Iterator<Item = (f64, f64)>>(
    loss_changes: &[f64],
    pairs: impl Fn() -> I,
    reg: &Regularization,
) -> f64 {
    let mut best = (0.0, 0.0);
    for (&a, &dl) in LOGISTIC_STEP_CANDIDATES.iter().zip(loss_changes) {
        let dreg: f64 = pairs().map(|(t, d)| reg.penalty(t + a * d) - reg.penalty(t)).sum();
        let change = dl + dreg;
        if change < best.1 {
            best = (a, change);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::Loss;
    use proptest::prelude::*;

    fn reg(l2: f64, l1: f64) -> Regularization {
        Regularization::new(l2, l1).unwrap()
    }

    /// The exact objective of one coordinate of a pure block, for the rows it touches.
    fn coordinate_objective(rows: &[(f64, f64, f64)], theta: f64, d: f64, r: &Regularization) -> f64 {
        rows.iter().map(|&(y, f, x)| Loss::Logistic.value(y, f + x * d)).sum::<f64>() + r.penalty(theta + d)
    }

    proptest! {
        #[test]
        fn bounded_logistic_step_never_increases_the_objective(
            rows in proptest::collection::vec((any::<bool>(), -8f64..8.0, -5f64..5.0), 1..40),
            theta in -3f64..3.0, l2 in 0f64..2.0, l1 in 0f64..2.0,
        ) {
            let rows: Vec<_> = rows.into_iter().map(|(p, f, x)| (if p { 1.0 } else { -1.0 }, f, x)).collect();
            let r = reg(l2, l1);
            let (mut g, mut h, mut m) = (0.0, 0.0, 0.0f64);
            for &(y, f, x) in &rows {
                let d = Loss::Logistic.derivatives(y, f);
                g += d.first * x;
                h += d.second * x * x;
                m = m.max(x.abs());
            }
            let d = bounded_logistic_step(g, h, m, theta, &r);
            let before = coordinate_objective(&rows, theta, 0.0, &r);
            let after = coordinate_objective(&rows, theta, d, &r);
            prop_assert!(after <= before + 1e-12 * before.abs().max(1.0), "{after} > {before} with step {d}");
        }

        #[test]
        fn newton_step_is_the_exact_coordinate_optimum_for_squared_loss(
            rows in proptest::collection::vec((-5f64..5.0, -5f64..5.0, 0.1f64..3.0), 1..30),
            theta in -3f64..3.0, l2 in 0.01f64..2.0, l1 in 0f64..2.0,
        ) {
            let r = reg(l2, l1);
            let (mut g, mut h) = (0.0, 0.0);
            for &(y, f, x) in &rows {
                let d = Loss::Squared.derivatives(y, f);
                g += d.first * x;
                h += d.second * x * x;
            }
            let objective = |d: f64| rows.iter().map(|&(y, f, x)| Loss::Squared.value(y, f + x * d)).sum::<f64>() + r.penalty(theta + d);
            let d = newton_step(g, h, theta, &r);
            for probe in [-1e-4, 1e-4, -1e-2, 1e-2] {
                prop_assert!(objective(d) <= objective(d + probe) + 1e-9);
            }
        }
    }

    #[test]
    fn bounded_step_equals_newton_near_the_optimum() {
        let r = reg(0.5, 0.0);
        // Total slope G + 2 l2 theta = 1e-6: the optimum is a step of about -2.5e-7 away.
        let g = -0.2 + 1e-6;
        let newton = newton_step(g, 3.0, 0.2, &r);
        let bounded = bounded_logistic_step(g, 3.0, 1.0, 0.2, &r);
        assert!(newton < 0.0 && newton > -1e-6);
        assert!((bounded - newton).abs() <= 1e-6 * newton.abs(), "{bounded} vs {newton}");
    }

    #[test]
    fn l1_can_set_a_coordinate_exactly_to_zero() {
        let r = reg(0.0, 10.0);
        assert_eq!(newton_step(0.5, 2.0, 0.0, &r), 0.0);
        assert_eq!(bounded_logistic_step(-3.0, 2.0, 1.0, 1.0, &r), -1.0);
    }

    #[test]
    fn squared_line_search_minimizes_the_quadratic_along_the_line() {
        // objective(a) = -2 a p + a^2 dd + l2 |theta + a delta|^2 (+ l1 term), brute-forced.
        for l1 in [0.0, 0.7] {
            let r = reg(0.3, l1);
            let (theta, delta) = (vec![0.5, -1.0, 0.0], vec![-1.0, 2.0, 0.3]);
            let (p, dd) = (2.0, 5.0);
            let f = |a: f64| {
                -2.0 * a * p + a * a * dd + theta.iter().zip(&delta).map(|(&t, &d)| r.penalty(t + a * d)).sum::<f64>()
            };
            let a = squared_line_search(p, dd, pairs(&theta, &delta), &r);
            let brute = (0..=100_000).map(|i| i as f64 / 100_000.0).min_by(|x, y| f(*x).total_cmp(&f(*y))).unwrap();
            assert!((a - brute).abs() < 1e-4, "l1={l1}: {a} vs {brute}");
        }
    }
}
