//! L-BFGS (Nocedal 1980; Liu and Nocedal 1989) and a line search for the strong Wolfe
//! conditions (Nocedal and Wright, *Numerical Optimization*, 2nd ed., Algorithms 3.5 and
//! 3.6). Pure: the objective is a closure, which the algorithm backs with a batch pass.

use serde::{Deserialize, Serialize};

/// Sufficient decrease (Armijo) constant.
pub const C1: f64 = 1e-4;
/// Curvature constant of the strong Wolfe condition (0.9: the usual choice for quasi-Newton).
pub const C2: f64 = 0.9;
/// Most objective evaluations one line search may make.
pub const MAX_EVALUATIONS: usize = 25;

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// One curvature pair `s = w_{k+1} - w_k`, `y = g_{k+1} - g_k` (with `s.y > 0`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub s: Vec<f64>,
    pub y: Vec<f64>,
}

/// L-BFGS's initial inverse Hessian `H0`, which the two-loop recursion corrects by the pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Initial<'a> {
    /// `gamma I` with `gamma = s.y / y.y` of the newest pair (Nocedal and Wright's eq.
    /// 7.20); `I` without pairs.
    Scalar,
    /// The given diagonal as it is (a Jacobi preconditioner: the inverse of the objective's
    /// Hessian diagonal, [`super::Precondition::Diagonal`]), also without pairs.
    Diagonal(&'a [f64]),
    /// `gamma D` for the given diagonal `D`, with `gamma = s.y / y'Dy` of the newest pair:
    /// the diagonal's shape and the scalar method's scale (Oren and Luenberger's scaling,
    /// as Liu and Nocedal 1989 apply it to a diagonal). Where the Hessian
    /// couples features (one-hot fields: every row holds one feature of each), its
    /// diagonal underestimates the curvature along a direction, so `D` alone asks the line
    /// search for steps far from 1; `gamma` is the pair's measured ratio of the true
    /// curvature to `D`'s. `D` alone without pairs.
    ScaledDiagonal(&'a [f64]),
}

/// `gamma` of [`Initial::ScaledDiagonal`]: `s.y / y'Dy` of `pair`, or 1 where that is not a
/// positive number (a pair whose `y` is zero wherever `D` is).
pub fn diagonal_scale(pair: &Pair, diagonal: &[f64]) -> f64 {
    let ydy: f64 = pair.y.iter().zip(diagonal).map(|(y, h)| y * h * y).sum();
    let gamma = dot(&pair.s, &pair.y) / ydy;
    if gamma > 0.0 && gamma.is_finite() { gamma } else { 1.0 }
}

/// The search direction `-H g` by the two-loop recursion over `pairs` (oldest first), from
/// the initial inverse Hessian `initial` (without pairs: `-H0 g`).
pub fn direction(g: &[f64], pairs: &[Pair], initial: Initial<'_>) -> Vec<f64> {
    let mut q = g.to_vec();
    let mut alphas = Vec::with_capacity(pairs.len());
    for pair in pairs.iter().rev() {
        let rho = 1.0 / dot(&pair.y, &pair.s);
        let alpha = rho * dot(&pair.s, &q);
        q.iter_mut().zip(&pair.y).for_each(|(q, y)| *q -= alpha * y);
        alphas.push((rho, alpha));
    }
    match (initial, pairs.last()) {
        (Initial::Diagonal(diagonal), _) | (Initial::ScaledDiagonal(diagonal), None) => {
            q.iter_mut().zip(diagonal).for_each(|(q, h)| *q *= h);
        }
        (Initial::ScaledDiagonal(diagonal), Some(last)) => {
            let gamma = diagonal_scale(last, diagonal);
            q.iter_mut().zip(diagonal).for_each(|(q, h)| *q *= gamma * h);
        }
        (Initial::Scalar, Some(last)) => {
            let gamma = dot(&last.s, &last.y) / dot(&last.y, &last.y);
            q.iter_mut().for_each(|q| *q *= gamma);
        }
        (Initial::Scalar, None) => {}
    }
    for (pair, (rho, alpha)) in pairs.iter().zip(alphas.into_iter().rev()) {
        let beta = rho * dot(&pair.y, &q);
        q.iter_mut().zip(&pair.s).for_each(|(q, s)| *q += (alpha - beta) * s);
    }
    q.iter_mut().for_each(|q| *q = -*q);
    q
}

/// The objective and gradient at one point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub f: f64,
    pub g: Vec<f64>,
}

/// A step the line search accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub t: f64,
    pub point: Point,
    /// Objective evaluations the search made.
    pub evaluations: usize,
}

/// Whether step `t` with value `ft` and slope `dt` satisfies the strong Wolfe conditions
/// from value `f0` and slope `d0 < 0`.
pub fn strong_wolfe(f0: f64, d0: f64, t: f64, ft: f64, dt: f64) -> bool {
    ft <= f0 + C1 * t * d0 && dt.abs() <= -C2 * d0
}

/// One end of a bracket: step, value, slope.
#[derive(Debug, Clone, Copy)]
struct End {
    t: f64,
    f: f64,
    d: f64,
}

/// The minimizer of the cubic through two ends (values and slopes), kept within the
/// middle 80% of the bracket; bisection where the cubic has none.
fn interpolate(a: End, b: End) -> f64 {
    let (lo, hi) = (a.t.min(b.t), a.t.max(b.t));
    let d1 = a.d + b.d - 3.0 * (a.f - b.f) / (a.t - b.t);
    let disc = d1 * d1 - a.d * b.d;
    let middle = 0.5 * (a.t + b.t);
    if !(disc >= 0.0) {
        return middle;
    }
    let d2 = (b.t - a.t).signum() * disc.sqrt();
    let t = b.t - (b.t - a.t) * (b.d + d2 - d1) / (b.d - a.d + 2.0 * d2);
    let margin = 0.1 * (hi - lo);
    if t.is_finite() && t >= lo + margin && t <= hi - margin { t } else { middle }
}

/// Why a line search gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchFailure {
    /// `d` does not descend: `g.d >= 0`.
    NotDescent,
    /// No step satisfied the conditions within [`MAX_EVALUATIONS`] (near the optimum the
    /// objective's rounding hides the decrease).
    Exhausted,
}

/// Finds a step along `d` from `w` (value `f0`, gradient `g0`) that satisfies the strong
/// Wolfe conditions, starting from `t0`. `eval(t)` returns the point at `w + t d`.
pub fn line_search<E>(
    f0: f64,
    g0: &[f64],
    d: &[f64],
    t0: f64,
    mut eval: impl FnMut(f64) -> Result<Point, E>,
) -> Result<Result<Accepted, SearchFailure>, E> {
    let d0 = dot(g0, d);
    if !(d0 < 0.0) {
        return Ok(Err(SearchFailure::NotDescent));
    }
    let mut evaluations = 0;
    let mut previous = End { t: 0.0, f: f0, d: d0 };
    let mut t = t0;
    // Bracketing (Algorithm 3.5).
    let (mut lo, mut hi) = loop {
        if evaluations == MAX_EVALUATIONS {
            return Ok(Err(SearchFailure::Exhausted));
        }
        let point = eval(t)?;
        evaluations += 1;
        let end = End { t, f: point.f, d: dot(&point.g, d) };
        if !point.f.is_finite() {
            // Overflowed far out: come back halfway.
            t = 0.5 * (previous.t + t);
            continue;
        }
        if end.f > f0 + C1 * t * d0 || (evaluations > 1 && end.f >= previous.f) {
            break (previous, end);
        }
        if end.d.abs() <= -C2 * d0 {
            return Ok(Ok(Accepted { t, point, evaluations }));
        }
        if end.d >= 0.0 {
            break (end, previous);
        }
        previous = end;
        t *= 4.0;
    };
    // Zoom (Algorithm 3.6): lo always satisfies sufficient decrease with the lower value.
    loop {
        if evaluations == MAX_EVALUATIONS {
            return Ok(Err(SearchFailure::Exhausted));
        }
        let t = interpolate(lo, hi);
        if t == lo.t || t == hi.t {
            return Ok(Err(SearchFailure::Exhausted));
        }
        let point = eval(t)?;
        evaluations += 1;
        let end = End { t, f: point.f, d: dot(&point.g, d) };
        if !(end.f <= f0 + C1 * t * d0) || end.f >= lo.f {
            hi = end;
        } else {
            if end.d.abs() <= -C2 * d0 {
                return Ok(Ok(Accepted { t, point, evaluations }));
            }
            if end.d * (hi.t - lo.t) >= 0.0 {
                hi = lo;
            }
            lo = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rosenbrock's function: non-convex, badly scaled, its minimum at (1, 1).
    fn rosenbrock(w: &[f64]) -> Point {
        let (x, y) = (w[0], w[1]);
        let f = (1.0 - x).powi(2) + 100.0 * (y - x * x).powi(2);
        let g = vec![-2.0 * (1.0 - x) - 400.0 * x * (y - x * x), 200.0 * (y - x * x)];
        Point { f, g }
    }

    #[test]
    fn every_accepted_step_satisfies_strong_wolfe_and_lbfgs_finds_rosenbrocks_minimum() {
        let mut w = vec![-1.2, 1.0];
        let mut here = rosenbrock(&w);
        let mut pairs: Vec<Pair> = Vec::new();
        let mut iterations = 0;
        while norm(&here.g) > 1e-10 && iterations < 200 {
            let d = direction(&here.g, &pairs, Initial::Scalar);
            let t0 = if pairs.is_empty() { 1.0 / norm(&here.g) } else { 1.0 };
            let d0 = dot(&here.g, &d);
            let accepted = line_search::<()>(here.f, &here.g, &d, t0, |t| {
                Ok(rosenbrock(&w.iter().zip(&d).map(|(w, d)| w + t * d).collect::<Vec<_>>()))
            })
            .unwrap()
            .unwrap();
            let dt = dot(&accepted.point.g, &d);
            assert!(strong_wolfe(here.f, d0, accepted.t, accepted.point.f, dt), "iteration {iterations}");
            let s: Vec<f64> = d.iter().map(|d| accepted.t * d).collect();
            let y: Vec<f64> = accepted.point.g.iter().zip(&here.g).map(|(a, b)| a - b).collect();
            assert!(dot(&s, &y) > 0.0, "strong Wolfe implies positive curvature");
            pairs.push(Pair { s: s.clone(), y });
            if pairs.len() > 5 {
                pairs.remove(0);
            }
            w.iter_mut().zip(&s).for_each(|(w, s)| *w += s);
            here = accepted.point;
            iterations += 1;
        }
        assert!((w[0] - 1.0).abs() < 1e-8 && (w[1] - 1.0).abs() < 1e-8, "{w:?} after {iterations}");
        assert!(iterations < 100, "{iterations} iterations");
    }

    #[test]
    fn the_two_loop_recursion_is_exact_on_a_quadratic_after_n_pairs() {
        // f = 1/2 w'Aw with A = diag(1, 10, 100): after pairs along each axis, -H g = -A^-1 g.
        let a = [1.0, 10.0, 100.0];
        let pairs: Vec<Pair> = (0..3)
            .map(|j| {
                let mut s = vec![0.0; 3];
                s[j] = 1.0;
                let y = s.iter().zip(&a).map(|(s, a)| s * a).collect();
                Pair { s, y }
            })
            .collect();
        let g = [3.0, -20.0, 50.0];
        let d = direction(&g, &pairs, Initial::Scalar);
        for j in 0..3 {
            assert!((d[j] + g[j] / a[j]).abs() < 1e-12, "{d:?}");
        }
    }

    /// With `H0` the exact inverse Hessian of a diagonal quadratic, the preconditioned
    /// direction is the Newton step: one step of length 1 lands on the optimum, with or
    /// without pairs (every pair of a quadratic satisfies `H0 y = s` already, so the
    /// recursion leaves `H0 g` as it is). Without `H0` the scalar scaling misses it.
    #[test]
    fn the_preconditioned_two_loop_recursion_takes_one_step_to_a_diagonal_quadratics_optimum() {
        // f = 1/2 sum_j a_j (w_j - c_j)^2: gradient a_j (w_j - c_j), Hessian diag(a).
        let a = [0.01, 3.0, 250.0, 7e4];
        let c = [5.0, -2.0, 0.5, 1e-3];
        let gradient = |w: &[f64]| -> Vec<f64> { (0..4).map(|j| a[j] * (w[j] - c[j])).collect() };
        let h0: Vec<f64> = a.iter().map(|a| 1.0 / a).collect();
        let w = [1.0, 1.0, -1.0, 2.0];
        let g = gradient(&w);
        let pair = |s: Vec<f64>| {
            let y = s.iter().zip(&a).map(|(s, a)| s * a).collect();
            Pair { s, y }
        };
        let histories =
            [vec![], vec![pair(vec![1.0, -2.0, 0.3, 1e-2])], vec![pair(vec![0.5; 4]), pair(vec![-1.0, 0.0, 2.0, 0.1])]];
        for pairs in &histories {
            let d = direction(&g, pairs, Initial::Diagonal(&h0));
            for j in 0..4 {
                let next = w[j] + d[j];
                assert!((next - c[j]).abs() <= 1e-12 * (1.0 + c[j].abs()), "{} pairs: {next} vs {}", pairs.len(), c[j]);
            }
            let g1 = gradient(&w.iter().zip(&d).map(|(w, d)| w + d).collect::<Vec<_>>());
            assert!(norm(&g1) <= 1e-9 * norm(&g), "{} pairs: |g| {} after the step", pairs.len(), norm(&g1));
        }
        // The scalar scaling of the same one pair does not: the curvatures differ by 10^7.
        let d = direction(&g, &histories[1], Initial::Scalar);
        assert!((w[0] + d[0] - c[0]).abs() > 1e-3, "{d:?}");
    }

    /// A diagonal quadratic whose Jacobi diagonal is off by one constant factor (as one-hot
    /// fields make it: every row holds one feature of each field, so the curvature along a
    /// direction is a multiple of the diagonal's): the scale `s.y / y'Dy` of any pair is
    /// exactly that factor's inverse, so `gamma D` is the inverse Hessian and one step of
    /// length 1 lands on the optimum; `D` alone overshoots by the factor.
    #[test]
    fn the_scaled_diagonal_recovers_a_diagonal_off_by_a_constant_factor() {
        let a = [0.01, 3.0, 250.0, 7e4];
        let c = [5.0, -2.0, 0.5, 1e-3];
        let factor = 39.0;
        let gradient = |w: &[f64]| -> Vec<f64> { (0..4).map(|j| a[j] * (w[j] - c[j])).collect() };
        let d_wrong: Vec<f64> = a.iter().map(|a| factor / a).collect();
        let w = [1.0, 1.0, -1.0, 2.0];
        let g = gradient(&w);
        let s = vec![1.0, -2.0, 0.3, 1e-2];
        let pair = Pair { y: s.iter().zip(&a).map(|(s, a)| s * a).collect(), s };
        let gamma = diagonal_scale(&pair, &d_wrong);
        assert!((gamma * factor - 1.0).abs() <= 1e-14, "gamma {gamma}");
        let d = direction(&g, std::slice::from_ref(&pair), Initial::ScaledDiagonal(&d_wrong));
        for j in 0..4 {
            let next = w[j] + d[j];
            assert!((next - c[j]).abs() <= 1e-12 * (1.0 + c[j].abs()), "{next} vs {}", c[j]);
        }
        // Unscaled, the same pair corrects only its own direction: the rest overshoots.
        let d = direction(&g, std::slice::from_ref(&pair), Initial::Diagonal(&d_wrong));
        assert!((w[0] + d[0] - c[0]).abs() > 1.0, "{d:?}");
        // Without pairs there is no scale to take: `-D g`, as the unscaled diagonal.
        assert_eq!(
            direction(&g, &[], Initial::ScaledDiagonal(&d_wrong)),
            direction(&g, &[], Initial::Diagonal(&d_wrong))
        );
    }

    /// With off-diagonal coupling the two-loop recursion over one pair from `H0 = gamma D`
    /// is the BFGS update of that `H0`, `H1 = (I - r s y') H0 (I - r y s') + r s s'` with
    /// `r = 1 / s.y`, written out here with matrices; and the scaled `H0` meets the secant
    /// scale `y' H0 y = s.y` (Oren and Luenberger's condition).
    #[test]
    fn the_scaled_diagonal_is_the_bfgs_update_of_gamma_d_on_a_coupled_quadratic() {
        let h = [[4.0, 1.5, 0.0], [1.5, 3.0, -1.0], [0.0, -1.0, 2.0]];
        let times = |m: &[[f64; 3]; 3], v: &[f64]| -> Vec<f64> { (0..3).map(|i| dot(&m[i], v)).collect() };
        let diag: Vec<f64> = (0..3).map(|i| 1.0 / h[i][i]).collect();
        let s = vec![0.7, -0.2, 1.1];
        let y = times(&h, &s);
        let pair = Pair { s: s.clone(), y: y.clone() };
        let gamma = diagonal_scale(&pair, &diag);
        let closed = dot(&s, &y) / (0..3).map(|j| y[j] * diag[j] * y[j]).sum::<f64>();
        assert!((gamma - closed).abs() <= 1e-15 * closed, "{gamma} vs {closed}");
        let ydy: f64 = (0..3).map(|j| y[j] * gamma * diag[j] * y[j]).sum();
        assert!((ydy - dot(&s, &y)).abs() <= 1e-12 * dot(&s, &y), "y' H0 y {ydy} vs s.y {}", dot(&s, &y));
        let r = 1.0 / dot(&s, &y);
        let mut h1 = [[0.0; 3]; 3];
        for (i, row) in h1.iter_mut().enumerate() {
            for (j, cell) in row.iter_mut().enumerate() {
                // (I - r s y')_ik H0_kk (I - r y s')_kj + r s_i s_j
                *cell = (0..3)
                    .map(|k| {
                        let left = f64::from(u8::from(i == k)) - r * s[i] * y[k];
                        let right = f64::from(u8::from(k == j)) - r * y[k] * s[j];
                        left * gamma * diag[k] * right
                    })
                    .sum::<f64>()
                    + r * s[i] * s[j];
            }
        }
        let g = [1.0, -3.0, 0.5];
        let expected: Vec<f64> = times(&h1, &g).iter().map(|v| -v).collect();
        let d = direction(&g, &[pair], Initial::ScaledDiagonal(&diag));
        for j in 0..3 {
            assert!((d[j] - expected[j]).abs() <= 1e-12, "{d:?} vs {expected:?}");
        }
    }

    #[test]
    fn an_ascent_direction_is_refused() {
        let r = line_search::<()>(1.0, &[1.0], &[1.0], 1.0, |_| unreachable!()).unwrap();
        assert_eq!(r, Err(SearchFailure::NotDescent));
    }
}
