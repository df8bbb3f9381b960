//! The dual side of a loss: its convex conjugate and the SDCA coordinate step.
//!
//! With the primal `P(w) = sum_i loss(y_i, x_i.w) + (lambda/2) |w|^2` (linea's `l2` is
//! `lambda / 2`), the dual is `D(a) = -sum_i loss*(y_i, -a_i) - |X'a|^2 / (2 lambda)`
//! (Shalev-Shwartz & Zhang, *Stochastic Dual Coordinate Ascent Methods*, JMLR 2013, with
//! the losses summed instead of averaged). Changing one dual variable `a_i` by `delta`
//! changes `D` by `-loss*(-(a_i + delta)) + loss*(-a_i) - m delta - q delta^2 / 2` with
//! `m = x_i.w` and `q = |x_i|^2 / lambda` (CoCoA's local subproblem scales both, see
//! `crate::cocoa`); [`Loss::sdca_step`] maximizes that exactly.
//!
//! Conjugates, with `b = a y` the dual variable in the target's direction:
//! * hinge: `loss*(-a) = -b` on `b in [0, 1]`;
//! * squared `(y - f)^2`: `loss*(-a) = -a y + a^2 / 4` everywhere;
//! * logistic: `loss*(-a) = b ln b + (1 - b) ln(1 - b)` on `b in [0, 1]`.
//!
//! Outside its domain a conjugate is `+inf`.

use super::Loss;

/// The result of one SDCA coordinate step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdcaStep {
    /// The new dual variable. For hinge and logistic it is `y b` with `b` in `[0, 1]`
    /// exactly, so it never leaves the conjugate's domain through rounding.
    pub alpha: f64,
    /// `alpha - old alpha`, the change to add to `X'a`.
    pub delta: f64,
}

/// Safeguarded Newton iterations of the logistic step; the bracket halves at least every
/// other iteration, so this bounds the work even when Newton stalls (it converges in 3-6).
const LOGISTIC_MAX_ITERATIONS: usize = 100;

impl Loss {
    /// The convex conjugate `loss*(u) = sup_f (u f - loss(y, f))` for the target `y`;
    /// `+inf` outside its domain. The dual objective takes it at `u = -alpha`.
    pub fn conjugate(self, target: f64, u: f64) -> f64 {
        match self {
            Loss::Squared => u * target + u * u / 4.0,
            Loss::Logistic | Loss::Hinge => {
                let b = -u * target;
                if !(0.0..=1.0).contains(&b) {
                    return f64::INFINITY;
                }
                match self {
                    Loss::Hinge => -b,
                    _ => x_ln_x(b) + x_ln_x(1.0 - b),
                }
            }
        }
    }

    /// Maximizes `-loss*(-(alpha + delta)) - m delta - q delta^2 / 2` over `delta` for a dual
    /// variable `alpha` in the conjugate's domain, `q >= 0`:
    /// * hinge: `b = clip(alpha y + (1 - y m) / q, 0, 1)` (Hsieh et al. 2008, LIBLINEAR);
    /// * squared: `delta = (y - m - alpha / 2) / (q + 1/2)`;
    /// * logistic: the root of `ln((1 - b) / b) - m y - q (b - y alpha) = 0`, solved for
    ///   the logit `t = ln(b / (1 - b))` by bracketed Newton ([`logistic_logit`]).
    pub fn sdca_step(self, target: f64, alpha: f64, m: f64, q: f64) -> SdcaStep {
        let new = match self {
            Loss::Squared => alpha + (target - m - alpha / 2.0) / (q + 0.5),
            Loss::Hinge => {
                let slope = 1.0 - target * m; // d/db of the objective at the current b
                let b = if q > 0.0 {
                    (alpha * target + slope / q).clamp(0.0, 1.0)
                } else if slope > 0.0 {
                    1.0
                } else if slope < 0.0 {
                    0.0
                } else {
                    alpha * target
                };
                target * b
            }
            Loss::Logistic => target * sigmoid(logistic_logit(alpha * target, m * target, q)),
        };
        SdcaStep { alpha: new, delta: new - alpha }
    }
}

/// The logit `t` of the logistic step's `b = sigmoid(t)`: the root of
/// `h(t) = t + my + q (sigmoid(t) - b0)` with `b0 = y alpha`, `my = m y`.
///
/// Solving for the logit rather than for `b` (LIBLINEAR's dual solver, `solve_l2r_lr_dual`,
/// solves for `b` and guards the ends of (0, 1) by hand) keeps the problem free of
/// singularities: `h` is increasing with `1 <= h' <= 1 + q/4`, and since sigmoid lies in
/// (0, 1) the root is bracketed by `[-my - q (1 - b0), -my + q b0]`, an interval of width
/// `q`. Newton steps that leave the bracket are replaced by bisection, so the iteration
/// never leaves it and converges to machine precision; `b = sigmoid(t)` is in (0, 1) and
/// can only round onto 0 or 1, where the conjugate is continuous.
fn logistic_logit(b0: f64, my: f64, q: f64) -> f64 {
    logistic_logit_counted(b0, my, q).0
}

/// [`logistic_logit`] and the iterations it took (its cost: one `exp` each).
fn logistic_logit_counted(b0: f64, my: f64, q: f64) -> (f64, usize) {
    let (mut lo, mut hi) = (-my - q * (1.0 - b0), -my + q * b0);
    if !(hi > lo) {
        return (lo, 0); // q == 0: the root is -my exactly
    }
    // Warm start: near convergence the new b is close to the old one.
    let start = if b0 > 0.0 && b0 < 1.0 { (b0 / (1.0 - b0)).ln() } else { f64::NAN };
    let mut t = if start > lo && start < hi { start } else { 0.5 * (lo + hi) };
    for iteration in 1..=LOGISTIC_MAX_ITERATIONS {
        let e = (-t.abs()).exp();
        // sigmoid(t), from the same exp as the curvature below.
        let s = if t >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) };
        let h = t + my + q * (s - b0);
        if h == 0.0 {
            return (t, iteration);
        }
        if h < 0.0 {
            lo = t;
        } else {
            hi = t;
        }
        let curvature = e / ((1.0 + e) * (1.0 + e)); // sigmoid(t) (1 - sigmoid(t))
        let newton = t - h / (1.0 + q * curvature);
        // Converged: tested before the bracket, because at the root `t` itself has just
        // become an end of the bracket (h rounds to one side of 0), and a Newton step onto
        // that end is not "inside" it — bisecting from there cost ~35 wasted halvings on
        // most calls (24 iterations on average on a9a, 3.7 with this order).
        if (newton - t).abs() <= f64::EPSILON * t.abs().max(1.0) {
            return (newton, iteration);
        }
        let next = if newton > lo && newton < hi { newton } else { 0.5 * (lo + hi) };
        if next == lo || next == hi {
            return (next, iteration);
        }
        t = next;
    }
    (t, LOGISTIC_MAX_ITERATIONS)
}

/// The logistic function, stable for any `t` (one `exp` of `-|t|`).
#[inline]
fn sigmoid(t: f64) -> f64 {
    let e = (-t.abs()).exp();
    if t >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) }
}

/// `x ln x` with its limit 0 at 0.
#[inline]
fn x_ln_x(x: f64) -> f64 {
    if x > 0.0 { x * x.ln() } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LOSSES: [Loss; 3] = [Loss::Squared, Loss::Logistic, Loss::Hinge];

    fn target(loss: Loss, positive: bool) -> f64 {
        match (loss, positive) {
            (Loss::Squared, true) => 1.75,
            (Loss::Squared, false) => -0.5,
            (_, true) => 1.0,
            (_, false) => -1.0,
        }
    }

    /// The 1-D objective the step maximizes.
    fn objective(loss: Loss, y: f64, alpha: f64, m: f64, q: f64, delta: f64) -> f64 {
        -loss.conjugate(y, -(alpha + delta)) - m * delta - q * delta * delta / 2.0
    }

    /// The maximizer by golden-section search on a bracket that holds it: the conjugate's
    /// domain for hinge and logistic (b in [0, 1]), a wide interval for squared loss.
    fn golden_section(loss: Loss, y: f64, alpha: f64, m: f64, q: f64) -> f64 {
        // For hinge and logistic the ends of the domain are delta = -alpha (b = 0) and
        // delta = y - alpha (b = 1).
        let (mut a, mut b) = match loss {
            Loss::Squared => (-1e4, 1e4),
            _ => ((-alpha).min(y - alpha), (-alpha).max(y - alpha)),
        };
        let f = |d: f64| objective(loss, y, alpha, m, q, d);
        let ratio = (5f64.sqrt() - 1.0) / 2.0;
        for _ in 0..300 {
            let c = b - ratio * (b - a);
            let d = a + ratio * (b - a);
            if f(c) >= f(d) {
                b = d;
            } else {
                a = c;
            }
        }
        let mid = 0.5 * (a + b);
        // The maximum may sit on an end of the domain (hinge); keep the best of the three.
        [a, mid, b].into_iter().fold(mid, |best, d| if f(d) > f(best) { d } else { best })
    }

    proptest! {
        #[test]
        fn fenchel_young_holds_with_equality_at_the_derivative(
            f in -20f64..20.0, u_raw in -3f64..3.0, positive in any::<bool>(), which in 0usize..3,
        ) {
            let loss = LOSSES[which];
            let y = target(loss, positive);
            // Inequality at an arbitrary u (inside the domain for hinge/logistic).
            let u = if loss == Loss::Squared { u_raw } else { -y * (u_raw.abs() / 3.0) };
            let lhs = loss.value(y, f) + loss.conjugate(y, u);
            prop_assert!(lhs >= u * f - 1e-12 * (1.0 + (u * f).abs()), "{loss:?}: {lhs} < {}", u * f);
            // Equality at u = loss'(f), where the loss is differentiable.
            if loss == Loss::Hinge && (y * f - 1.0).abs() < 1e-9 {
                return Ok(());
            }
            let g = loss.derivatives(y, f).first;
            let gap = loss.value(y, f) + loss.conjugate(y, g) - g * f;
            prop_assert!(gap.abs() <= 1e-9 * (1.0 + loss.value(y, f).abs() + (g * f).abs()), "{loss:?}: gap {gap}");
        }

        #[test]
        fn sdca_step_maximizes_its_one_dimensional_problem(
            b0 in 0f64..=1.0, m in -30f64..30.0, q in prop_oneof![Just(0.0), 1e-6f64..1e3],
            positive in any::<bool>(), which in 0usize..3, squared_alpha in -5f64..5.0,
        ) {
            let loss = LOSSES[which];
            let y = target(loss, positive);
            let alpha = if loss == Loss::Squared { squared_alpha } else { y * b0 };
            let step = loss.sdca_step(y, alpha, m, q);
            prop_assert!(loss.conjugate(y, -step.alpha).is_finite(), "{loss:?}: left the domain: {step:?}");
            prop_assert_eq!(step.delta, step.alpha - alpha);
            let best = golden_section(loss, y, alpha, m, q);
            let (ours, theirs) = (objective(loss, y, alpha, m, q, step.delta), objective(loss, y, alpha, m, q, best));
            prop_assert!(ours >= theirs - 1e-9 * (1.0 + theirs.abs()), "{loss:?}: step {step:?} gives {ours}, search {best} gives {theirs}");
        }
    }

    #[test]
    fn logistic_step_reaches_machine_precision_at_extreme_margins() {
        for (b0, my, q) in
            [(0.0, 40.0, 1.0), (1.0, -40.0, 1.0), (0.5, 800.0, 1e-3), (0.0, -700.0, 1e6), (1e-300, 0.0, 5.0)]
        {
            let t = logistic_logit(b0, my, q);
            let h = t + my + q * (sigmoid(t) - b0);
            assert!(h.abs() <= 8.0 * f64::EPSILON * (t.abs() + my.abs() + q), "b0={b0} my={my} q={q}: t={t} h={h}");
        }
    }

    /// Warm starts near the root (late epochs) converge in a few Newton steps, and no
    /// start takes a long run of bisections: the converged step onto an end of the bracket
    /// once sent every call into ~35 halvings (24 iterations on average over this grid).
    #[test]
    fn logistic_step_converges_in_a_few_newton_iterations() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let (mut total, mut worst, calls) = (0, 0, 20_000);
        for _ in 0..calls {
            let q = [0.1, 1.0, 7.0, 50.0, 500.0][(uniform(0.0, 5.0) as usize).min(4)];
            let root = uniform(-20.0, 20.0);
            let start = root + uniform(-1.0, 1.0) * [1e-6, 1e-3, 0.1, 1.0, 5.0][(uniform(0.0, 5.0) as usize).min(4)];
            let b0 = sigmoid(start);
            let my = -root - q * (sigmoid(root) - b0);
            let (t, iterations) = logistic_logit_counted(b0, my, q);
            let h = t + my + q * (sigmoid(t) - b0);
            assert!(h.abs() <= 8.0 * f64::EPSILON * (t.abs() + my.abs() + q), "q={q} root={root}: t={t} h={h}");
            total += iterations;
            worst = worst.max(iterations);
        }
        let mean = total as f64 / calls as f64;
        assert!(mean <= 6.0 && worst <= 40, "mean {mean} iterations, worst {worst}");
    }

    #[test]
    fn conjugates_are_infinite_outside_their_domain() {
        assert_eq!(Loss::Hinge.conjugate(1.0, 0.5), f64::INFINITY);
        assert_eq!(Loss::Logistic.conjugate(-1.0, 2.0), f64::INFINITY);
        assert_eq!(Loss::Logistic.conjugate(1.0, -1.0), 0.0);
        assert_eq!(Loss::Logistic.conjugate(1.0, 0.0), 0.0);
        assert!((Loss::Logistic.conjugate(1.0, -0.5) + std::f64::consts::LN_2).abs() < 1e-15);
        assert_eq!(Loss::Squared.conjugate(2.0, -1.0), -2.0 + 0.25);
    }
}
