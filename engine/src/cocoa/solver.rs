//! What a slot computes: SDCA on its local subproblem, and its terms of the primal and
//! dual objectives. Pure functions of the slot's rows, dual variables and the phase.

use super::rows::SlotRows;
use crate::loss::Loss;

/// The constants of CoCoA+'s local subproblem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Subproblem {
    pub loss: Loss,
    /// `lambda = 2 l2`.
    pub lambda: f64,
    /// CoCoA+'s `sigma'`: K for adding the slots' updates (Ma, Smith et al. 2015, sec. 3).
    pub sigma: f64,
}

/// Runs SDCA on slot rows `rows` with dual variables `alpha` (updated in place), starting
/// from the shared vector `v = X'alpha` (global features), visiting rows in each of
/// `orders` in turn. Returns `u = X_k' (alpha_new - alpha_old)` over the slot's local
/// features, summed in visiting order.
///
/// Each step maximizes CoCoA+'s local subproblem in one coordinate (Ma, Smith et al.,
/// *Adding vs. Averaging in Distributed Primal-Dual Optimization*, ICML 2015, eq. 9):
/// `m = x_i.(v + sigma' u) / lambda`, `q = sigma' |x_i|^2 / lambda`. The local model
/// `(v + sigma' u) / lambda` is kept up to date instead of `u` alone, so a step costs one
/// dot product and two sparse additions.
pub fn local_solve<'o>(
    problem: Subproblem,
    rows: &SlotRows,
    alpha: &mut [f64],
    v: &[f64],
    orders: impl IntoIterator<Item = &'o [u32]>,
) -> Vec<f64> {
    let Subproblem { loss, lambda, sigma } = problem;
    let scale = sigma / lambda;
    let mut model: Vec<f64> = rows.globals.iter().map(|&j| v[j as usize] / lambda).collect();
    let mut u = vec![0.0; rows.globals.len()];
    for order in orders {
        for &i in order {
            let i = i as usize;
            let m = rows.dot(i, &model);
            let step = loss.sdca_step(rows.targets[i], alpha[i], m, scale * rows.norms[i]);
            if step.delta != 0.0 {
                alpha[i] = step.alpha;
                rows.add_to_both(i, (step.delta, &mut u), (scale * step.delta, &mut model));
            }
        }
    }
    u
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
pub fn objective_terms(loss: Loss, rows: &SlotRows, alpha: &[f64], w: &[f64]) -> ObjectiveTerms {
    let local: Vec<f64> = rows.globals.iter().map(|&j| w[j as usize]).collect();
    let mut terms = ObjectiveTerms { loss: 0.0, conjugate: 0.0 };
    for (i, (&y, &a)) in rows.targets.iter().zip(alpha).enumerate() {
        terms.loss += loss.value(y, rows.dot(i, &local));
        terms.conjugate += loss.conjugate(y, -a);
    }
    terms
}
