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
//!
//! The logistic step is a root of a transcendental equation, found by Newton's method. It
//! can be solved to machine precision (`tolerance` 0, [`Loss::sdca_step`]) or inexactly
//! ([`Loss::sdca_step_with`], as LIBLINEAR's dual solver does): a row whose 1-D gradient is
//! already within the tolerance is left as it is, and Newton stops at the first iterate within
//! it that provably raises the 1-D objective ([`logistic_b_with`]). Either way the dual
//! never falls.

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

/// A bound on the logistic step's Newton iterations that is never reached: from any start
/// the iterates are monotone after the first, and they take about `ln q` steps to leave the
/// exponential end of `h` plus a few quadratic ones ([`logistic_b_with`]); `ln q < 710` for
/// any finite `q`.
const LOGISTIC_MAX_ITERATIONS: usize = 1000;

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
    ///   the logit `t = ln(b / (1 - b))` by Newton from the root's side of 0 ([`logistic_b_with`]).
    pub fn sdca_step(self, target: f64, alpha: f64, m: f64, q: f64) -> SdcaStep {
        self.sdca_step_with(target, alpha, m, q, 0.0, f64::exp)
    }

    /// [`Self::sdca_step`] with `exp` given, so CoCoA's local solver can pass the inlined
    /// `exp` that has the library's bits (`crate::scd::fast_exp`), and, for logistic loss, an
    /// inner `tolerance` on the step's optimality in logit units (0: machine precision; the
    /// closed-form steps ignore it): see [`logistic_b_with`].
    #[inline(always)]
    pub fn sdca_step_with(
        self,
        target: f64,
        alpha: f64,
        m: f64,
        q: f64,
        tolerance: f64,
        exp: impl Fn(f64) -> f64 + Copy,
    ) -> SdcaStep {
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
            Loss::Logistic => target * logistic_b_with(alpha * target, m * target, q, tolerance, exp).0,
        };
        SdcaStep { alpha: new, delta: new - alpha }
    }
}

/// The logistic step's new `b = sigmoid(t)`, with `t` the root of
/// `h(t) = t + my + q (sigmoid(t) - b0)` (`b0 = y alpha`, `my = m y`), the logit it is the
/// sigmoid of, and the Newton iterations it took.
///
/// Solving for the logit rather than for `b` (LIBLINEAR's dual solver, `solve_l2r_lr_dual`,
/// solves for `b` and guards the ends of (0, 1) by hand) keeps the problem free of
/// singularities: `h` is increasing with `1 <= h' <= 1 + q/4`.
///
/// Newton's method is safe here for any `q` because of the shape of `h`: `h'' = q s (1 - s)
/// (1 - 2s)` with `s = sigmoid(t)`, so `h` is convex for `t <= 0` and concave for `t >= 0`.
/// The sign of `h(0)` says on which side of 0 the root lies. On that side a Newton step from
/// any point lands between the root and 0, so after the first step (kept on the root's side
/// of 0) the iterates approach the root monotonically from between it and 0, and never
/// oscillate. A bracket with Newton steps inside it and bisection outside, as used before,
/// is not enough: with `q` of 1e10 and more (rows of norm 1e5, e.g. UCI Adult's raw
/// `fnlwgt`), Newton steps stay inside a bracket of width `q` while jumping across the root,
/// the bracket barely shrinks, and after 100 iterations the step returned a `b` far from the
/// root, lowering the dual by up to 1e10 in one step.
///
/// **Inexact steps** (`tolerance > 0`, LIBLINEAR's inner tolerance): the step maximizes
/// `phi(b) = -b ln b - (1 - b) ln(1 - b) - my (b - b0) - q (b - b0)^2 / 2`, whose slope is
/// `phi'(b) = -h(logit b)`.
/// - If `|h|` at `b0` (`logit(b0) + my`, free: the warm start needs the logit anyway) is
///   within the tolerance, the row is left as it is: no change cannot lower the dual.
/// - Newton stops at an evaluated iterate `b` with `|h(t)| <= tolerance` when that provably
///   raises `phi`: `phi` is concave with `-phi'' = 1 / (b (1 - b)) + q >= 4 + q`, so
///   `phi(b*) - phi(b0) >= (4 + q) (b* - b0)^2 / 2`; and `phi(b*) - phi(b) <= |h| |b - b*|
///   <= |h|^2 / 4` (`|t - t*| <= |h|` as `h' >= 1`, and `sigmoid' <= 1/4`). With
///   `d = |b - b0| - |h| / 4 <= |b* - b0|`, `phi(b) >= phi(b0)` whenever `d > 0` and
///   `|h|^2 / 2 <= (4 + q) d^2`. Otherwise Newton goes on to machine precision.
///
/// With `tolerance` 0 the result is the root to machine precision, bit for bit what the
/// exact step always gave. `exp` is given so the local solver can pass an inlined one with
/// the library's bits.
#[inline(always)]
fn logistic_b_with(b0: f64, my: f64, q: f64, tolerance: f64, exp: impl Fn(f64) -> f64) -> (f64, f64, usize) {
    if !(q > 0.0) {
        return (sigmoid_with(-my, &exp), -my, 0); // q == 0: the root is -my exactly
    }
    let at_zero = my + q * (0.5 - b0);
    if at_zero == 0.0 {
        return (sigmoid_with(0.0, &exp), 0.0, 0);
    }
    // +1: the root is below 0, where h is convex and the iterates come down to it; -1: above.
    let side = if at_zero > 0.0 { 1.0 } else { -1.0 };
    // The root lies in [-my - q (1 - b0), -my + q b0] (sigmoid is in (0, 1)); starting inside
    // that and on the root's side of 0, from the old b's logit (near the root in late
    // epochs). At b0 = 0 or 1 the logit is infinite and clamps onto the bracket's end.
    let (lo, hi) = (-my - q * (1.0 - b0), -my + q * b0);
    let warm = (b0 / (1.0 - b0)).ln();
    // h at b0 (infinite at b0 = 0 or 1, so such a row is never left as it is).
    if tolerance > 0.0 && (warm + my).abs() <= tolerance {
        return (b0, warm, 0);
    }
    let warm = if warm.is_nan() { 0.0 } else { warm.max(lo).min(hi) };
    let mut t = if side > 0.0 { warm.min(0.0) } else { warm.max(0.0) };
    for iteration in 1..=LOGISTIC_MAX_ITERATIONS {
        let e = exp(-t.abs());
        // sigmoid(-|t|), from the same exp as the curvature below.
        let r = e / (1.0 + e);
        // sigmoid(t) - b0 without cancellation: for t >= 0 as (1 - b0) - sigmoid(-t), since
        // 1 - sigmoid(t) rounds to a multiple of 1.1e-16 and q of 1e12 would turn that into
        // an error of 1e-4 in h, which made the iterates crawl (hundreds of steps at b0 = 1).
        let h = t + my + q * if t >= 0.0 { (1.0 - b0) - r } else { r - b0 };
        // sigmoid(t) from the same exp: the bits of `sigmoid_with(t)`.
        let b = if t >= 0.0 { 1.0 / (1.0 + e) } else { r };
        if h == 0.0 {
            return (b, t, iteration);
        }
        if h.abs() <= tolerance {
            let d = (b - b0).abs() - 0.25 * h.abs();
            if d > 0.0 && 0.5 * h * h <= (4.0 + q) * d * d {
                return (b, t, iteration);
            }
        }
        let curvature = r / (1.0 + e); // sigmoid(t) (1 - sigmoid(t))
        let newton = t - h / (1.0 + q * curvature);
        // Kept on the root's side of 0, where h's curvature has one sign.
        let next = if side > 0.0 { newton.min(0.0) } else { newton.max(0.0) };
        // After the first step every iterate is between the root and 0, so steps go away
        // from 0; a step back towards 0 means `h` has rounded to the other sign: `t` is the
        // root to rounding.
        if iteration > 1 && (next - t) * side > 0.0 {
            return (b, t, iteration);
        }
        // Newton converges quadratically here: with `d = next - t`, the root is within
        // `d^2 / 2` of `next` (`|h''| < h'`, from the shape of `h` above). Once `d^2` is below
        // the rounding of `t`, `next` is the root to rounding, without the iteration that
        // would only confirm it (one `exp` of three or four per step).
        let d = next - t;
        if d * d <= f64::EPSILON * t.abs().max(1.0) {
            return (sigmoid_with(next, &exp), next, iteration);
        }
        t = next;
    }
    (sigmoid_with(t, &exp), t, LOGISTIC_MAX_ITERATIONS)
}

/// The exact step's root (the logit) with the library's `exp`.
#[cfg(test)]
fn logistic_logit(b0: f64, my: f64, q: f64) -> f64 {
    logistic_logit_counted(b0, my, q).0
}

/// The exact step's root (the logit) and its iterations with the library's `exp`.
#[cfg(test)]
fn logistic_logit_counted(b0: f64, my: f64, q: f64) -> (f64, usize) {
    let (_, t, iterations) = logistic_b_with(b0, my, q, 0.0, f64::exp);
    (t, iterations)
}

/// [`sigmoid_with`] with the library's `exp`.
#[cfg(test)]
fn sigmoid(t: f64) -> f64 {
    sigmoid_with(t, f64::exp)
}

/// The logistic function, stable for any `t` (one `exp` of `-|t|`).
#[inline(always)]
fn sigmoid_with(t: f64, exp: impl Fn(f64) -> f64) -> f64 {
    let e = exp(-t.abs());
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
            b0 in 0f64..=1.0, m in -30f64..30.0, q in prop_oneof![Just(0.0), 1e-6f64..1e3, 1e3f64..1e15],
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

    proptest! {
        /// An inexact logistic step never lowers its 1-D objective, leaves a row whose
        /// gradient is within the tolerance as it is, and is within `tolerance^2 / 4` of the
        /// exact step's value (the bound of `logistic_b_with`'s docs).
        #[test]
        fn an_inexact_logistic_step_never_falls_and_is_within_its_bound(
            b0 in prop_oneof![Just(0.0), Just(1.0), 0f64..=1.0], m in -30f64..30.0,
            q in prop_oneof![Just(0.0), 1e-6f64..1e3, 1e3f64..1e15], positive in any::<bool>(),
            tolerance in prop_oneof![Just(1e-8), Just(1e-4), Just(1e-2), Just(0.1), Just(1.0)],
        ) {
            let loss = Loss::Logistic;
            let y = if positive { 1.0 } else { -1.0 };
            let alpha = y * b0;
            let step = loss.sdca_step_with(y, alpha, m, q, tolerance, f64::exp);
            let exact = loss.sdca_step(y, alpha, m, q);
            prop_assert!(loss.conjugate(y, -step.alpha).is_finite(), "left the domain: {step:?}");
            let value = |delta: f64| objective(loss, y, alpha, m, q, delta);
            let (ours, stay, best) = (value(step.delta), value(0.0), value(exact.delta));
            let rounding = 1e-12 * (1.0 + best.abs());
            prop_assert!(ours >= stay - rounding, "fell: {ours} < {stay} ({step:?})");
            prop_assert!(ours >= best - tolerance * tolerance / 4.0 - rounding, "{ours} vs exact {best}");
            let gradient = (b0 / (1.0 - b0)).ln() + m * y;
            if q > 0.0 && gradient.abs() <= tolerance && b0 > 0.0 && b0 < 1.0 {
                prop_assert_eq!(step.delta, 0.0);
            }
        }
    }

    /// A tolerance of 0 is the exact step, bit for bit, and a loose one needs fewer Newton
    /// iterations on warm starts near the root (late epochs).
    #[test]
    fn a_loose_tolerance_takes_fewer_iterations_and_zero_is_exact() {
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * rng.unit();
        let (mut exact_iterations, mut loose_iterations, calls) = (0, 0, 20_000);
        for _ in 0..calls {
            let q = [0.1, 1.0, 7.0, 50.0, 500.0][(uniform(0.0, 5.0) as usize).min(4)];
            let root = uniform(-8.0, 8.0);
            let b0 = sigmoid(root + uniform(-0.5, 0.5));
            let my = -root - q * (sigmoid(root) - b0);
            let (b, _, iterations) = logistic_b_with(b0, my, q, 0.0, f64::exp);
            let (t, _) = logistic_logit_counted(b0, my, q);
            assert_eq!(b.to_bits(), sigmoid(t).to_bits(), "tolerance 0 is the exact step");
            exact_iterations += iterations;
            loose_iterations += logistic_b_with(b0, my, q, 1e-2, f64::exp).2;
        }
        assert!(
            (loose_iterations as f64) < 0.8 * exact_iterations as f64,
            "loose {loose_iterations} against exact {exact_iterations} iterations over {calls} steps"
        );
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
        let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * rng.unit();
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

    /// Rows of norm 1e5 and more give `q` of 1e10 and more (UCI Adult's raw columns). The
    /// first input is a step of linea's CoCoA on Adult: the old bracketed Newton returned
    /// `b` = 0.97 for a root at 4.7e-11 and lowered the dual by 1e10. At `b0` = 1 rounding
    /// in `sigmoid(t) - b0` once made the iterates crawl for hundreds of steps.
    #[test]
    fn logistic_step_is_exact_for_rows_of_huge_norm() {
        let mut cases = vec![(0.0, -3.6384626972997105, 583601702751.0817)];
        for b0 in [0.0, 1e-300, 1e-12, 0.3, 0.5, 1.0 - 1e-12, 1.0] {
            for my in [-1e9, -1e6, -30.0, -3.6, 0.0, 0.01, 3.6, 30.0, 1e6, 1e9] {
                for q in [1e8, 1e10, 5.8e11, 1e14, 1e20] {
                    cases.push((b0, my, q));
                }
            }
        }
        for (b0, my, q) in cases {
            let (t, iterations) = logistic_logit_counted(b0, my, q);
            let at = format!("b0={b0} my={my} q={q}: t={t} after {iterations}");
            assert!(iterations <= 60, "{at}");
            // The step is the maximizer: no better b nearby, and no worse than staying.
            let objective = |b: f64| -Loss::Logistic.conjugate(1.0, -b) - my * (b - b0) - q * (b - b0) * (b - b0) / 2.0;
            let b = sigmoid(t);
            let value = objective(b);
            let tolerance = 1e-12 * (1.0 + value.abs());
            assert!(value >= objective(b0) - tolerance, "{at}: {value} < {} at b0", objective(b0));
            for nearby in [sigmoid(t - 1e-3), sigmoid(t + 1e-3), b * 0.999, b + (1.0 - b) * 1e-3] {
                assert!(value >= objective(nearby) - tolerance, "{at}: {value} < {} at b={nearby}", objective(nearby));
            }
        }
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
