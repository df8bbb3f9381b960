//! Truncated Newton: LIBLINEAR's line-search Newton method with preconditioned conjugate
//! gradients (Hsia, Chiang and Lin 2018, "Preconditioned conjugate gradient methods in
//! truncated Newton frameworks for large-scale linear classification"; LIBLINEAR >= 2.40,
//! `newton.cpp`). Each iteration solves `H s = -g` approximately by CG, one Hessian-vector
//! product per step, then backtracks along `s` until the objective falls enough.
//!
//! Why it is here beside L-BFGS: on criteo-1m the one-hot fields couple features that a
//! diagonal cannot see, and L-BFGS's m pairs forget the coupling faster than they learn it
//! (docs/benchmarks.md, "criteo-1m, budgeted"); CG rebuilds a Krylov basis of the exact
//! Hessian at every iteration, so its tail is superlinear. Pure: the Hessian-vector product
//! and the objective are closures, which the algorithm backs with batch passes.

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

/// Preconditioned CG on `H s = -g` from `s = 0`, with `inverse` the inverse of the
/// preconditioner's diagonal `M` (the Jacobi preconditioner: `1 / H_jj`). Stops, as
/// `newton.cpp` does, once the quadratic model `Q(s) = g.s + s'Hs/2` falls by little:
/// `k (Q_k - Q_{k-1}) >= min(eps_cg, sqrt(|g|_M^-1)) Q_k` at step `k` (Nash and Sofer's
/// rule, which asks more of CG as the gradient vanishes: the step is then superlinear);
/// also at a direction of no curvature, a model that rises (rounding), or `max_steps`.
pub fn pcg<E>(
    g: &[f64],
    inverse: &[f64],
    max_steps: u32,
    mut hv: impl FnMut(&[f64]) -> Result<Vec<f64>, E>,
) -> Result<Solve, E> {
    let mut s = vec![0.0; g.len()];
    let mut r: Vec<f64> = g.iter().map(|g| -g).collect();
    let mut z: Vec<f64> = r.iter().zip(inverse).map(|(r, m)| r * m).collect();
    let mut d = z.clone();
    let mut z_r = dot(&z, &r);
    let tolerance = EPS_CG.min(z_r.sqrt().sqrt());
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
        let solve = pcg(&g, &[0.25, 1.0 / 3.0, 0.5], 3, |v| Ok::<_, ()>(hv(v))).unwrap();
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
        let solve = pcg(&g, &inverse, 10, |v: &[f64]| -> Result<Vec<f64>, ()> {
            Ok(v.iter().zip(&diagonal).map(|(v, h)| v * h).collect())
        })
        .unwrap();
        // Step 1 solves it; step 2 finds the residual's direction empty (no curvature).
        assert_eq!((solve.steps, solve.note), (2, Some("a CG direction of no curvature")));
        for ((s, g), h) in solve.s.iter().zip(&g).zip(&diagonal) {
            assert!((s + g / h).abs() < 1e-15);
        }
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
