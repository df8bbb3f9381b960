//! What a slot computes: SDCA on its local subproblem, and its terms of the primal and
//! dual objectives. Pure functions of the slot's rows, dual variables and the phase.

use super::rows::SlotRows;
use crate::fma;
use crate::loss::Loss;
use crate::scd::fast_exp::{Exp, exp_inline};
use crate::scd::fast_log1p::softplus_inline;

/// How many steps ahead a sweep asks for a row's start, target, norm and dual variable
/// ([`SlotRows::prefetch_head`]), and for its features ([`SlotRows::prefetch_row`], which
/// reads the start asked for earlier). A step on criteo-1m's rows (34 non-zeros) takes
/// ~100-300 ns, a miss to memory ~100 ns: a few steps cover it.
const HEAD_AHEAD: usize = 8;
const ROW_AHEAD: usize = 4;

/// The CPU's prefetch into every cache level, as a closure for a sweep (`|_| {}` where
/// there is none). A macro so the closure is written inside [`fma::dispatch!`]'s copy, where
/// SSE is enabled and `_mm_prefetch` is safe to call; a prefetch never faults.
#[cfg(target_arch = "x86_64")]
macro_rules! prefetch {
    () => {
        |p: *const i8| std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p)
    };
}
#[cfg(not(target_arch = "x86_64"))]
macro_rules! prefetch {
    () => {
        |_: *const i8| {}
    };
}

/// The constants of CoCoA+'s local subproblem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Subproblem {
    pub loss: Loss,
    /// `lambda = 2 l2`.
    pub lambda: f64,
    /// CoCoA+'s `sigma'`: K for adding the slots' updates (Ma, Smith et al. 2015, sec. 3).
    pub sigma: f64,
    /// The logistic step's inner tolerance ([`crate::Loss::sdca_step_with`]; 0: exact), set
    /// by the master for the epoch ([`super::step_tolerance`]).
    pub tolerance: f64,
}

/// Runs SDCA on slot rows `rows` with dual variables `alpha` (updated in place), starting
/// from the shared vector `v = X'alpha` (global features), visiting rows in each of
/// `orders` in turn. Returns `u = X_k' (alpha_new - alpha_old)` over the slot's local
/// features, summed in visiting order, and the sweep's progress statistic
/// ([`LocalSolve::progress`]).
///
/// Each step maximizes CoCoA+'s local subproblem in one coordinate (Ma, Smith et al.,
/// *Adding vs. Averaging in Distributed Primal-Dual Optimization*, ICML 2015, eq. 9):
/// `m = x_i.(v + sigma' u) / lambda`, `q = sigma' |x_i|^2 / lambda`. The local model
/// `(v + sigma' u) / lambda` is kept up to date instead of `u`, so a step costs one dot
/// product and one sparse addition; `u` is read off the model at the end ([`change_of_v`]).
///
/// Logistic loss on a machine where [`Exp::detect`] allows it runs a copy compiled for FMA
/// with `exp` inlined (`crate::scd::fast_exp`, the library's bits); every copy performs the
/// same floating-point operations in the same order, so all give the same bits.
pub fn local_solve<'o>(
    problem: Subproblem,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: impl IntoIterator<Item = &'o [u32]>,
) -> LocalSolve {
    solve(problem, Coupling::Scalar, rows, alpha, v, orders)
}

/// Each local feature's `sigma'_j` and each row's `sum_j sigma'_j x_ij^2`, for
/// [`local_solve_per_feature`]: computed once per slot and weighting.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureWeights {
    /// `sigma'_j` of each local feature (the slot's features, in [`SlotRows::globals`] order).
    pub sigma: Vec<f64>,
    /// `sum_j sigma'_j x_ij^2` of each row.
    pub norms: Vec<f64>,
}

impl FeatureWeights {
    /// The weights `sigma` (one per local feature) and the rows' weighted norms.
    pub fn new(rows: &SlotRows, sigma: Vec<f64>) -> Self {
        let norms = (0..rows.len()).map(|i| rows.weighted_norm(i, &sigma)).collect();
        Self { sigma, norms }
    }
}

/// [`local_solve`] with `sigma'` per feature (`problem.sigma` is not used): CoCoA+'s local
/// subproblem with `sigma' |X_k' d|^2` replaced by `sum_j sigma'_j (X_k' d)_j^2`, so a step
/// has `m = x_i.(v + diag(sigma') u) / lambda` and `q = sum_j sigma'_j x_ij^2 / lambda`.
pub fn local_solve_per_feature<'o>(
    problem: Subproblem,
    weights: &FeatureWeights,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: impl IntoIterator<Item = &'o [u32]>,
) -> LocalSolve {
    solve(problem, Coupling::PerFeature(weights), rows, alpha, v, orders)
}

/// How a local solve weighs its own update.
#[derive(Clone, Copy)]
enum Coupling<'w> {
    /// `problem.sigma` for every feature.
    Scalar,
    PerFeature(&'w FeatureWeights),
}

fn solve<'o>(
    problem: Subproblem,
    coupling: Coupling,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: impl IntoIterator<Item = &'o [u32]>,
) -> LocalSolve {
    let orders: Vec<&[u32]> = orders.into_iter().collect();
    let orders = orders.as_slice();
    fma::dispatch! {
        if problem.loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(problem: Subproblem, coupling: Coupling, rows: &SlotRows, alpha: &mut [f64], v: &[f64], orders: &[&[u32]]) -> LocalSolve {
            match coupling {
                Coupling::Scalar => solve_loop(problem, rows, alpha, v, orders, exp_inline, prefetch!()),
                Coupling::PerFeature(w) => solve_loop_per_feature(problem, w, rows, alpha, v, orders, exp_inline),
            }
        }
        else {
            match coupling {
                Coupling::Scalar => solve_loop(problem, rows, alpha, v, orders, f64::exp, |_| {}),
                Coupling::PerFeature(w) => solve_loop_per_feature(problem, w, rows, alpha, v, orders, f64::exp),
            }
        }
    }
}

/// [`local_solve`]'s loop, one copy per `exp`.
#[inline(always)]
fn solve_loop(
    problem: Subproblem,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: &[&[u32]],
    exp: impl Fn(f64) -> f64 + Copy,
    prefetch: impl Fn(*const i8) + Copy,
) -> LocalSolve {
    let Subproblem { lambda, sigma, .. } = problem;
    let scale = sigma / lambda;
    let mut model: Vec<f64> = rows.globals.iter().map(|&j| v[j as usize] / lambda).collect();
    let progress = sweep(problem, rows, alpha, &mut model, orders, exp, prefetch);
    let u = change_of_v(rows, v, lambda, &model, |_| scale);
    LocalSolve { u, progress }
}

/// The SDCA steps of a scalar-`sigma'` solve on the local model `model` (`(v + sigma' u) /
/// lambda` over the slot's local features), both updated in place; returns the progress
/// statistic ([`LocalSolve::progress`]). `prefetch` is [`prefetch!`]'s hint or nothing.
#[inline(always)]
fn sweep(
    problem: Subproblem,
    rows: &SlotRows,
    alpha: &mut [f64],
    model: &mut [f64],
    orders: &[&[u32]],
    exp: impl Fn(f64) -> f64 + Copy,
    prefetch: impl Fn(*const i8) + Copy,
) -> f64 {
    let Subproblem { loss, lambda, sigma, tolerance } = problem;
    let scale = sigma / lambda;
    let mut progress = 0.0;
    for order in orders {
        for (k, &i) in order.iter().enumerate() {
            // The rows come in a random order, so each step's row, target, norm and dual
            // would be a miss to memory; asked for ahead, they arrive while earlier steps
            // run. Values are untouched: the same bits with or without.
            if let Some(&ahead) = order.get(k + HEAD_AHEAD) {
                rows.prefetch_head(ahead as usize, prefetch);
                prefetch((&alpha[ahead as usize] as *const f64).cast());
            }
            if let Some(&ahead) = order.get(k + ROW_AHEAD) {
                rows.prefetch_row(ahead as usize, prefetch);
            }
            let i = i as usize;
            let m = rows.dot(i, model);
            let q = scale * rows.norms[i];
            let step = loss.sdca_step_with(rows.targets[i], alpha[i], m, q, tolerance, exp);
            if step.delta != 0.0 {
                alpha[i] = step.alpha;
                progress += q * step.delta * step.delta;
                rows.add_to(i, scale * step.delta, model);
            }
        }
    }
    progress / 2.0
}

/// SDCA on a lone slot's own model (one slot: `model` is `w` over the slot's local features,
/// kept by the slot from epoch to epoch; [`super::solo`]): the steps of [`local_solve`]
/// applied to `model` and `alpha` in place, with nothing read from or returned for a
/// shared vector. Returns the progress statistic ([`LocalSolve::progress`]).
pub fn solo_solve<'o>(
    problem: Subproblem,
    rows: &SlotRows,
    alpha: &mut [f64],
    model: &mut [f64],
    orders: impl IntoIterator<Item = &'o [u32]>,
) -> f64 {
    let orders: Vec<&[u32]> = orders.into_iter().collect();
    let orders = orders.as_slice();
    fma::dispatch! {
        if problem.loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(problem: Subproblem, rows: &SlotRows, alpha: &mut [f64], model: &mut [f64], orders: &[&[u32]]) -> f64 {
            sweep(problem, rows, alpha, model, orders, exp_inline, prefetch!())
        }
        else { sweep(problem, rows, alpha, model, orders, f64::exp, |_| {}) }
    }
}

/// The slot's change of `v`, `u = X_k' delta_alpha`, read off the local model at the end of
/// the solve: `u_j = (model_j - v_j / lambda) / scale_j`, exactly 0 for a feature no step
/// touched. Keeping `u` beside the model instead cost a third sparse pass per step (two
/// additions per non-zero where one does; 11% of a K = 1 run on higgs-sample). Both are sums
/// of the same steps with their own rounding; either way the master adds what the slots
/// report into `v` exactly, and the next epoch starts from that `v`, so the rounding never
/// accumulates in a slot: it is ~1e-16 of `|w_j|` per step that touched the feature.
#[inline(always)]
fn change_of_v(rows: &SlotRows, v: &[f64], lambda: f64, model: &[f64], scale: impl Fn(usize) -> f64) -> Vec<f64> {
    rows.globals
        .iter()
        .zip(model)
        .enumerate()
        .map(|(k, (&j, &m))| {
            let start = v[j as usize] / lambda;
            if m == start { 0.0 } else { (m - start) / scale(k) }
        })
        .collect()
}

/// What a slot's local solve returns.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSolve {
    /// `X_k' (alpha_new - alpha_old)` over the slot's local features.
    pub u: Vec<f64>,
    /// `sum q_i delta_i^2 / 2` over every step of the solve: each step maximizes a function
    /// of its coordinate that is at least `q_i`-strongly concave, so this is a lower bound
    /// on how much the steps raised the local subproblem's objective (with one slot: the
    /// dual). It costs two multiplications per step, and it falls as the dual converges:
    /// the gap schedule ([`super::schedule`]) reads it to decide when the exact duality gap
    /// (a full data pass) is worth computing. It never decides anything on its own.
    pub progress: f64,
}

/// [`local_solve_per_feature`]'s loop, one copy per `exp`: [`solve_loop`] with the local
/// model's update scaled per feature.
#[inline(always)]
fn solve_loop_per_feature(
    problem: Subproblem,
    weights: &FeatureWeights,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: &[&[u32]],
    exp: impl Fn(f64) -> f64 + Copy,
) -> LocalSolve {
    let Subproblem { loss, lambda, tolerance, .. } = problem;
    let scale: Vec<f64> = weights.sigma.iter().map(|&s| s / lambda).collect();
    let mut model: Vec<f64> = rows.globals.iter().map(|&j| v[j as usize] / lambda).collect();
    let mut progress = 0.0;
    for order in orders {
        for &i in *order {
            let i = i as usize;
            let m = rows.dot(i, &model);
            let q = weights.norms[i] / lambda;
            let step = loss.sdca_step_with(rows.targets[i], alpha[i], m, q, tolerance, exp);
            if step.delta != 0.0 {
                alpha[i] = step.alpha;
                progress += q * step.delta * step.delta;
                rows.add_scaled(i, step.delta, &scale, &mut model);
            }
        }
    }
    let u = change_of_v(rows, v, lambda, &model, |k| scale[k]);
    LocalSolve { u, progress: progress / 2.0 }
}

/// A slot's objective terms, each summed in row order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjectiveTerms {
    /// `sum_i loss(y_i, x_i.w)`.
    pub loss: f64,
    /// `sum_i loss*(y_i, -alpha_i)`.
    pub conjugate: f64,
}

/// The slot's terms of `P(w)` and `D(alpha)` at the model `w` (global features).
/// Logistic loss runs a copy with `exp` inlined where allowed, as [`local_solve`] does.
pub fn objective_terms(loss: Loss, rows: &SlotRows, alpha: &[f64], w: &[f64]) -> ObjectiveTerms {
    let local: Vec<f64> = rows.globals.iter().map(|&j| w[j as usize]).collect();
    local_objective_terms(loss, rows, alpha, &local)
}

/// [`objective_terms`] at a model over the slot's local features (a lone slot's own model).
pub fn local_objective_terms(loss: Loss, rows: &SlotRows, alpha: &[f64], local: &[f64]) -> ObjectiveTerms {
    let terms = fma::dispatch! {
        if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
        fn(rows: &SlotRows, alpha: &[f64], local: &[f64]) -> ObjectiveTerms {
            terms_loop(rows, alpha, local, |y, f| softplus_inline(-y * f))
        }
        else { terms_loop(rows, alpha, local, |y, f| loss.value(y, f)) }
    };
    terms.with_conjugate(loss, rows, alpha)
}

/// The losses' sum, in row order (the conjugates come after, [`ObjectiveTerms::with_conjugate`]).
#[inline(always)]
fn terms_loop(rows: &SlotRows, alpha: &[f64], local: &[f64], value: impl Fn(f64, f64) -> f64) -> ObjectiveTerms {
    let mut terms = ObjectiveTerms { loss: 0.0, conjugate: 0.0 };
    for (i, &y) in rows.targets.iter().enumerate().take(alpha.len()) {
        terms.loss += value(y, rows.dot(i, local));
    }
    terms
}

impl ObjectiveTerms {
    /// Adds the conjugates' sum, in row order.
    fn with_conjugate(mut self, loss: Loss, rows: &SlotRows, alpha: &[f64]) -> Self {
        for (&y, &a) in rows.targets.iter().zip(alpha) {
            self.conjugate += loss.conjugate(y, -a);
        }
        self
    }
}
