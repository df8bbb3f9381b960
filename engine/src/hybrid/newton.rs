//! Truncated Newton: LIBLINEAR's line-search Newton method with preconditioned conjugate
//! gradients (Hsia, Chiang and Lin 2018, "Preconditioned conjugate gradient methods in
//! truncated Newton frameworks for large-scale linear classification"; LIBLINEAR >= 2.40,
//! `newton.cpp`). Each iteration solves `H s = -g` approximately by CG, one Hessian-vector
//! product per step, then backtracks along `s` until the objective falls enough.
//!
//! Why it is here beside L-BFGS: on criteo-1m the one-hot fields couple features that a diagonal
//! cannot see, and L-BFGS's m pairs forget the coupling faster than they learn it
//! (docs/benchmarks/algorithms-side-by-side.md, "criteo-1m, budgeted"); CG rebuilds a Krylov basis
//! of the exact Hessian at every iteration, so its tail is superlinear. Pure: the Hessian-vector
//! product and the objective are closures, which the algorithm backs with batch passes.

use super::lbfgs::dot;

/// The CG stopping constant `eps_cg` of `newton.cpp` (its default 0.5).
pub const EPS_CG: f64 = 0.5;
/// The sufficient-decrease constant of the backtracking search (`newton.cpp`'s `eta`).
pub const ETA: f64 = 0.01;
/// Most halvings of the step before the search gives up (`newton.cpp`'s
/// `max_num_linesearch`).
pub const MAX_BACKTRACKS: u32 = 20;

/// An approximate Newton direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Solve {
    pub s: Vec<f64>,
    /// Hessian-vector products taken (each one batch pass).
    pub steps: u32,
    /// Why CG stopped early, when it was not the quadratic-decrease rule.
    pub note: Option<&'static str>,
}

/// The forcing term of CG at a point with objective `f` and `decrement = g' M^-1 g` (the
/// squared gradient norm in the preconditioner's inverse metric): `min(eps_cg,
/// (decrement / f)^(1/4))`.
///
/// Why relative to `f`: `newton.cpp`'s term `min(eps_cg, sqrt(|g|_M^-1))` is `decrement^(1/4)`, a
/// quantity in the loss's units. Multiplying the objective by `c` multiplies `g`, `H` and `M` by
/// `c` and `decrement` by `c`, so the term depends on the objective's scale (the number of rows,
/// the size of the targets): it is 0.5 while `decrement > 1/16`, which with squared loss on
/// criteo-1m (`f ~ 7,542`) is down to a relative error of about 1e-5, and on a9a with the targets
/// times 32 it doubled Newton's iterations (docs/benchmarks/algorithms-side-by-side.md, "The
/// forcing term"). `decrement` is the Jacobi estimate of the Newton decrement `lambda^2 = g' H^-1
/// g`, and `lambda^2 / 2` estimates `f - f*` (Boyd and Vandenberghe, "Convex Optimization", section
/// 9.5.1), so `decrement / f` is about twice the relative suboptimality: dimensionless (the same
/// for any `c`), and the same measure as the runs' relative-error targets. The power stays
/// `newton.cpp`'s: the term is `O(|g|^(1/2))` as `f -> f* > 0`, which keeps Newton's local order at
/// 1.5 (Dembo, Eisenstat and Steihaug 1982, "Inexact Newton methods": a forcing term `O(|g|^p)`
/// gives order `1 + p`). A non-positive or non-finite ratio (`f = 0`: `g = 0` there, as the
/// objective is non-negative) gives `eps_cg`.
pub fn forcing(decrement: f64, f: f64) -> f64 {
    let ratio = decrement / f;
    if ratio.is_finite() && ratio >= 0.0 { EPS_CG.min(ratio.sqrt().sqrt()) } else { EPS_CG }
}

/// Preconditioned CG on `H s = -g` from `s = 0`, with `inverse` the inverse of the
/// preconditioner's diagonal `M` (the Jacobi preconditioner: `1 / H_jj`) and `f` the
/// objective at the point. Stops, as `newton.cpp` does, once the quadratic model `Q(s) =
/// g.s + s'Hs/2` falls by little: `k (Q_k - Q_{k-1}) >= eta Q_k` at step `k` (Nash and
/// Sofer's rule), with the scale-free forcing term `eta` of [`forcing`], which asks more of
/// CG as the relative suboptimality falls (the step is then superlinear); also at a direction
/// of no curvature, a model that rises (rounding), or `max_steps`. Multiplying `g`, `H`, `f`
/// by `c` (and `inverse` by `1/c`) gives the same steps.
pub fn pcg<E>(
    g: &[f64],
    inverse: &[f64],
    f: f64,
    max_steps: u32,
    mut hv: impl FnMut(&[f64]) -> Result<Vec<f64>, E>,
) -> Result<Solve, E> {
    let mut s = vec![0.0; g.len()];
    let mut r: Vec<f64> = g.iter().map(|g| -g).collect();
    let mut z: Vec<f64> = r.iter().zip(inverse).map(|(r, m)| r * m).collect();
    let mut d = z.clone();
    let mut z_r = dot(&z, &r);
    let tolerance = forcing(z_r, f);
    let mut q = 0.0;
    let mut steps = 0;
    while steps < max_steps {
        steps += 1;
        let hd = hv(&d)?;
        let curvature = dot(&d, &hd);
        if curvature <= 1e-16 {
            return Ok(Solve { s, steps, note: Some("a CG direction of no curvature") });
        }
        let alpha = z_r / curvature;
        s.iter_mut().zip(&d).for_each(|(s, d)| *s += alpha * d);
        r.iter_mut().zip(&hd).for_each(|(r, hd)| *r -= alpha * hd);
        // Q(s) = g.s + s'Hs/2 = (g.s - s.r)/2, since r = -g - Hs.
        let next_q = -0.5 * (dot(&s, &r) - dot(&s, g));
        let decrease = next_q - q;
        if !(next_q <= 0.0 && decrease <= 0.0) {
            return Ok(Solve { s, steps, note: Some("the quadratic model rose in CG (rounding)") });
        }
        if steps as f64 * decrease >= tolerance * next_q {
            return Ok(Solve { s, steps, note: None });
        }
        q = next_q;
        z.iter_mut().zip(r.iter().zip(inverse)).for_each(|(z, (r, m))| *z = r * m);
        let next_z_r = dot(&z, &r);
        let beta = next_z_r / z_r;
        d.iter_mut().zip(&z).for_each(|(d, z)| *d = beta * *d + z);
        z_r = next_z_r;
    }
    Ok(Solve { s, steps, note: Some("CG reached its step limit") })
}

/// The accepted step of [`backtrack`] and what the objective gave there.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted<P> {
    pub t: f64,
    pub at: P,
    /// Objective evaluations made (the accepted one included).
    pub evaluations: u32,
}

/// Backtracking from `t = 1`, halving, until `f(t) <= f0 + eta t slope` (Armijo;
/// `slope = g.s < 0`). `at(t)` evaluates the objective at `w + t s` and returns it with
/// whatever else that pass gave (the gradient, the diagonal). `Ok(None)`: no step of
/// [`MAX_BACKTRACKS`] halvings lowers the objective enough, or `s` is no descent direction.
pub fn backtrack<P, E>(
    f0: f64,
    slope: f64,
    mut at: impl FnMut(f64) -> Result<(f64, P), E>,
) -> Result<Option<Accepted<P>>, E> {
    if !(slope < 0.0) {
        return Ok(None);
    }
    let mut t = 1.0;
    for evaluations in 1..=MAX_BACKTRACKS + 1 {
        let (f, point) = at(t)?;
        if f <= f0 + ETA * t * slope {
            return Ok(Some(Accepted { t, at: point, evaluations }));
        }
        t *= 0.5;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small symmetric positive definite system: the model value CG reaches is close to
    /// the closed-form optimum's (the rule stops on a small decrease, not at the exact
    /// solve), and at most n steps are taken.
    #[test]
    fn pcg_nearly_minimizes_the_quadratic_model() {
        let h = [[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]];
        let g = [1.0, -2.0, 3.0];
        let hv = |v: &[f64]| -> Vec<f64> { h.iter().map(|row| dot(row, v)).collect() };
        let solve = pcg(&g, &[0.25, 1.0 / 3.0, 0.5], 1.0, 3, |v| Ok::<_, ()>(hv(v))).unwrap();
        // det H = 18; -H^-1 g by the adjugate.
        let adj = [[5.0, -2.0, 1.0], [-2.0, 8.0, -4.0], [1.0, -4.0, 11.0]];
        let optimum: Vec<f64> = adj.iter().map(|row| -dot(row, &g) / 18.0).collect();
        let model = |s: &[f64]| dot(&g, s) + 0.5 * dot(s, &hv(s));
        assert!(solve.steps <= 3);
        assert!(model(&solve.s) <= 0.9 * model(&optimum), "{:?} vs {optimum:?}", solve.s);
    }

    /// With the exact inverse as preconditioner on a diagonal system, the first step is the
    /// Newton step.
    #[test]
    fn pcg_with_the_exact_diagonal_takes_one_step() {
        let diagonal = [2.0, 5.0, 0.5];
        let g = [1.0, 1.0, -1.0];
        let inverse: Vec<f64> = diagonal.iter().map(|h| 1.0 / h).collect();
        let solve = pcg(&g, &inverse, 1.0, 10, |v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(v.iter().zip(&diagonal).map(|(v, h)| v * h).collect())
        })
        .unwrap();
        // Step 1 solves it; step 2 finds the residual's direction empty (no curvature).
        assert_eq!((solve.steps, solve.note), (2, Some("a CG direction of no curvature")));
        for ((s, g), h) in solve.s.iter().zip(&g).zip(&diagonal) {
            assert!((s + g / h).abs() < 1e-15);
        }
    }

    /// The forcing term is a function of `decrement / f` alone: the same value when both
    /// are scaled by `c` (exactly, for powers of two), `eps_cg` far from the optimum and at
    /// a degenerate `f`, and it falls with the relative suboptimality (as its fourth root).
    #[test]
    fn the_forcing_term_is_scale_free_and_tightens() {
        for (decrement, f) in [(1e-9, 7542.2), (0.015, 7542.2), (3.0, 11.0), (1e5, 2e4)] {
            let eta = forcing(decrement, f);
            for c in [0.5f64.powi(20), 0.25, 2.0, 1024.0, 2.0f64.powi(40)] {
                assert_eq!(forcing(c * decrement, c * f).to_bits(), eta.to_bits(), "{decrement} {f} x{c}");
            }
            for c in [3.0, 1e-7, 1e9] {
                assert!((forcing(c * decrement, c * f) - eta).abs() <= 1e-15, "{decrement} {f} x{c}");
            }
        }
        assert_eq!(forcing(1e5, 2e4), EPS_CG);
        assert_eq!((forcing(0.0, 0.0), forcing(1.0, 0.0), forcing(f64::NAN, 1.0)), (EPS_CG, EPS_CG, EPS_CG));
        assert_eq!(forcing(0.0, 5.0), 0.0);
        // The relative suboptimality 1e-6 of criteo-1m's squared loss (f - f* ~ 0.0075, so
        // decrement ~ 0.015): newton.cpp's absolute term is 0.35 there, this one ~0.038.
        assert!((forcing(0.015, 7542.2) - (0.015f64 / 7542.2).powf(0.25)).abs() < 1e-15);
        assert!(forcing(0.015, 7542.2) < 0.04 && 0.015f64.powf(0.25) > 0.34);
        let mut last = EPS_CG;
        for k in 1..12 {
            let eta = forcing(10f64.powi(-k), 1.0);
            assert!(eta < last || eta == EPS_CG, "not tightening at 1e-{k}");
            last = eta;
        }
    }

    /// `c` times the shifted 1-D Laplacian `tridiag(-1, 2.02, -1)` times `v`: a spectrum
    /// from 0.02 to 4.02 on which CG takes many steps, and a constant diagonal the Jacobi
    /// preconditioner cannot improve.
    fn laplacian(c: f64, v: &[f64]) -> Vec<f64> {
        let n = v.len();
        (0..n)
            .map(|i| {
                let below = if i > 0 { v[i - 1] } else { 0.0 };
                let above = if i + 1 < n { v[i + 1] } else { 0.0 };
                c * (2.02 * v[i] - below - above)
            })
            .collect()
    }

    /// Multiplying the objective by `c` (`g`, `H` and `f` by `c`, the inverse diagonal by
    /// `1/c`) leaves CG's steps and direction as they were: the same step count at every
    /// scale, the same bits for powers of two. newton.cpp's absolute term (what `f = 1`
    /// at every scale gives) does not: a large objective keeps it at 0.5 and CG stops sooner.
    #[test]
    fn cg_steps_do_not_depend_on_the_objectives_scale() {
        let n = 60;
        let g: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
        let solve = |c: f64, f: f64| {
            let g: Vec<f64> = g.iter().map(|g| c * g).collect();
            let inverse = vec![1.0 / (2.02 * c); n];
            pcg(&g, &inverse, f, 60, |v| Ok::<_, ()>(laplacian(c, v))).unwrap()
        };
        // With f = 1e8 the term is ~0.045 (computed in Python with the same recurrence: 6 steps).
        let f = 1e8;
        let base = solve(1.0, f);
        assert!(base.steps > 3, "the system is too easy to tell the rules apart: {} steps", base.steps);
        for c in [2.0f64.powi(-12), 8.0, 2.0f64.powi(20)] {
            let scaled = solve(c, c * f);
            assert_eq!((scaled.steps, scaled.note), (base.steps, base.note), "x{c}");
            for (a, b) in scaled.s.iter().zip(&base.s) {
                assert_eq!(a.to_bits(), b.to_bits(), "x{c}: the step -H^-1 g is the same for any c");
            }
        }
        for c in [1e-5, 3.0, 1e7] {
            assert_eq!(solve(c, c * f).steps, base.steps, "x{c}");
        }
        let absolute: Vec<u32> =
            [2.0f64.powi(-40), 1.0, 2.0f64.powi(20)].iter().map(|&c| solve(c, 1.0).steps).collect();
        assert!(absolute[2] < absolute[0], "the absolute term did not depend on the scale: {absolute:?}");
    }

    #[test]
    fn backtracking_halves_until_armijo_holds() {
        // f(t) = (t - 0.2)^2 along s; f0 = 0.04, slope -0.4: t = 1, 0.5 fail, 0.25 holds.
        let accepted = backtrack(0.04, -0.4, |t| Ok::<_, ()>(((t - 0.2) * (t - 0.2), t))).unwrap().unwrap();
        assert_eq!((accepted.t, accepted.evaluations), (0.25, 3));
        assert!(backtrack(1.0, 0.5, |t| Ok::<_, ()>((t, ()))).unwrap().is_none(), "an ascent direction");
        let never = backtrack(0.0, -1.0, |_| Ok::<_, ()>((1.0, ()))).unwrap();
        assert!(never.is_none());
    }
}
