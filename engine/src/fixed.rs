//! Exact, order-free accumulation.
//!
//! Floating-point addition is not associative, so a sum over row shards would change with
//! the order workers finish in. Every quantity that crosses a shard boundary is therefore
//! rounded once to a fixed-point integer and summed as integers, which is associative and
//! commutative: any split of the work gives the same bits.
//!
//! * Statistics and objective terms: `i128` with 64 fractional bits (range ±4.6e18,
//!   resolution 5.4e-20). A shard's partial sum is taken in `f64` in row order (fixed by
//!   the grid), then rounded once with [`to_fixed128`].
//! * Predictions: `i64` with 32 fractional bits (range ±2.1e9, resolution 2.3e-10). The
//!   prediction of a row is `sum_j q(x_j * theta_j)` with `q` = [`quantize`]; an update adds
//!   `q(x theta_new) - q(x theta_old)`, so recomputing a lost shard from the model gives the
//!   same integers as the incremental path (the differences telescope).
//!
//! # The representable range, and what happens outside it
//!
//! A result is exact-and-right or a [`EngineError::OutOfRange`] that names the quantity:
//!
//! * **Sums.** Every partial sum is converted with [`SumRange::fixed`], which refuses a
//!   non-finite partial and any partial of magnitude `2^62 / P` or more, where `P` is the
//!   number of partials that may be added (the row shards). The exact total of `P` such
//!   partials is below `2^62` in magnitude, so the wrapping `i128` additions, in any order
//!   and on any split, end at the right integer: a proven bound, not a hope.
//! * **Predictions.** A row has at most `R` non-zeros (the grid records `R`); with every
//!   term `|x theta| < 2^31 / R` ([`PredictionRange`]) no prediction can leave `i64`.
//! * **Scale.** Squared loss works on targets multiplied by a power of two
//!   ([`TargetScale`]) chosen from the grid's label range, so labels of 1e-12 or 1e12 use
//!   the same relative resolution as labels of 1; powers of two scale floats exactly, and
//!   labels already within `[1/2, 1024]` are used as they are.

use crate::error::EngineError;

/// Scale of a fixed-point prediction: 2^32.
pub const PREDICTION_SCALE: f64 = 4_294_967_296.0;
const PREDICTION_LIMIT: f64 = 2_147_483_648.0; // 2^31: room for sums of many terms

/// Quantizes one term `x * theta` of a prediction: round half away from zero, written as
/// add-and-truncate so it is two instructions on any x86-64 and the same on every machine.
/// Rounding (not truncation) keeps the quantization errors of many rows unbiased.
#[inline(always)]
pub fn quantize(value: f64) -> i64 {
    let scaled = value * PREDICTION_SCALE;
    (scaled + 0.5f64.copysign(scaled)) as i64
}

/// Whether one term fits an `i64` prediction on its own. A row's sum of terms is proven to
/// fit only by [`PredictionRange`], which knows how many terms a row has.
#[inline]
pub fn quantizable(value: f64) -> bool {
    value.abs() < PREDICTION_LIMIT
}

/// The real value of a fixed-point prediction.
#[inline(always)]
pub fn prediction_value(fixed: i64) -> f64 {
    fixed as f64 * (1.0 / PREDICTION_SCALE)
}

const FRACTION_BITS: i32 = 64;

/// Rounds `value` to the nearest multiple of 2^-64 (ties away from zero), as an `i128`.
/// Exact, so it is identical on every machine.
///
/// Values below 1/2 in magnitude (every change of CoCoA's shared vector and every partial
/// sum of a typical row) take the hardware's conversion: `s = value * 2^64` is exact (a
/// power-of-two scaling) and below 2^63, so `s as i64` truncates it exactly, `s - trunc`
/// is the exact fraction, and one comparison rounds half away from zero — the same integer
/// as the bit manipulation below ([`to_fixed128_bits`]), in a third of its instructions
/// (criteo-sample converts ~35,000 entries an epoch).
///
/// # Panics
/// Never; values of ±2^62 and beyond saturate, and NaN maps to 0. Callers validate inputs so
/// neither happens in training.
#[inline]
pub fn to_fixed128(value: f64) -> i128 {
    const SCALE: f64 = 18_446_744_073_709_551_616.0; // 2^64
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    let s = value * SCALE;
    // False for NaN and for |value| >= 1/2.
    if s.abs() < LIMIT {
        let t = s as i64;
        let fraction = s - t as f64;
        let rounded = if fraction >= 0.5 {
            t + 1
        } else if fraction <= -0.5 {
            t - 1
        } else {
            t
        };
        return rounded as i128;
    }
    to_fixed128_bits(value)
}

/// [`to_fixed128`] with the fast path's rounding as one `round` (half away from zero, as
/// that path rounds): a few instructions where the caller is compiled for SSE 4.1 or AVX
/// (a copy of [`crate::fma::dispatch!`]), a C library call elsewhere, so only for those.
#[inline(always)]
pub(crate) fn to_fixed128_rounding(value: f64) -> i128 {
    const SCALE: f64 = 18_446_744_073_709_551_616.0; // 2^64
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    let s = value * SCALE;
    if s.abs() < LIMIT {
        return s.round() as i64 as i128;
    }
    to_fixed128_bits(value)
}

/// [`to_fixed128`] by taking the `f64` apart: any finite value, NaN as 0.
fn to_fixed128_bits(value: f64) -> i128 {
    if value == 0.0 || value.is_nan() {
        return 0;
    }
    let bits = value.to_bits();
    let negative = bits >> 63 == 1;
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mantissa, exponent) = if exponent == 0 {
        (fraction, -1074) // subnormal
    } else {
        (fraction | (1u64 << 52), exponent - 1075)
    };
    // value = mantissa * 2^exponent; fixed = value * 2^64 = mantissa * 2^(exponent + 64)
    let shift = exponent + FRACTION_BITS;
    let magnitude: i128 = if shift >= 0 {
        if shift > 126 - 53 { i128::MAX } else { (mantissa as i128) << shift }
    } else if -shift > 60 {
        0 // below 2^-65: rounds to zero
    } else {
        let right = (-shift) as u32;
        ((mantissa as i128) + (1i128 << (right - 1))) >> right
    };
    if negative { -magnitude } else { magnitude }
}

/// Converts a fixed-point sum back to `f64`, correctly rounded ([`i128_to_f64`]).
#[inline]
pub fn from_fixed128(fixed: i128) -> f64 {
    i128_to_f64(fixed) / 18_446_744_073_709_551_616.0 // 2^64
}

/// `x as f64` (round to nearest, ties to even), bit for bit, without the compiler's generic
/// `i128` routine (`__floattidf`, ~46 instructions a call: 9% of a CoCoA run's instructions
/// on criteo-sample, which converts its 34,691-entry shared vector every epoch).
///
/// Values that fit an `i64` take the hardware's conversion. Larger ones keep their top 64
/// bits with every bit shifted out folded into the lowest one (a sticky bit): a 64-bit
/// integer rounds to the 53 bits of an `f64` exactly as the whole number does, because the
/// rounding looks only at the first bit below the 53 and whether any bit below that is set,
/// and both lie within the 64 (64 >= 53 + 2). The power-of-two scaling after is exact.
#[inline]
pub fn i128_to_f64(x: i128) -> f64 {
    if let Ok(small) = i64::try_from(x) {
        return small as f64;
    }
    let magnitude = x.unsigned_abs();
    // At least 1: the magnitude is 2^63 or more, so it has more than 63 bits.
    let shift = 64 - magnitude.leading_zeros();
    let sticky = (magnitude & ((1u128 << shift) - 1) != 0) as u64;
    let top = (magnitude >> shift) as u64 | sticky;
    let scale = f64::from_bits(((1023 + shift) as u64) << 52); // 2^shift, shift <= 64
    let value = top as f64 * scale;
    if x < 0 { -value } else { value }
}

/// Largest magnitude of an exact sum's value: `2^62`, below which [`to_fixed128`] is exact
/// (an `i128` at 64 fractional bits, with a bit of headroom).
pub const SUM_LIMIT: f64 = 4_611_686_018_427_387_904.0;

/// What an exact sum holds, for the error that says which quantity left the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// `sum l' x` of a feature (SCD statistics).
    Gradient,
    /// `sum l'' x^2` of a feature (SCD statistics).
    Curvature,
    /// The loss of a row shard (objective, eval).
    Loss,
    /// Line-search sums along a block or coarse direction.
    LineSearch,
    /// The coarse correction's gradient and Hessian.
    Coarse,
    /// The regularization penalty of the weights (eval).
    Penalty,
    /// A vector every worker adds to (the shared vector of CoCoA and the like).
    SharedVector,
    /// `sum l'' (x.v) x` of a feature (the Newton solver's Hessian-vector product).
    HessianVector,
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Quantity::Gradient => "gradient (sum of l' x)",
            Quantity::Curvature => "curvature (sum of l'' x^2)",
            Quantity::Loss => "loss sum",
            Quantity::LineSearch => "line-search sum",
            Quantity::Coarse => "coarse-correction sum",
            Quantity::Penalty => "regularization penalty",
            Quantity::SharedVector => "shared-vector sum",
            Quantity::HessianVector => "Hessian-vector product sum",
        })
    }
}

/// The proven range of exact sums of at most `partials` partial sums: each partial must be
/// finite and below `2^62 / partials` (rounded down to a power of two) in magnitude, so
/// each converts exactly and their total is below `2^62` whatever the order of the
/// wrapping `i128` additions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SumRange {
    /// Largest magnitude a partial may have (exclusive); a power of two.
    pub partial_limit: f64,
}

impl SumRange {
    /// The range for sums of at most `partials` partials (row shards, rows, weights).
    pub fn for_partials(partials: usize) -> SumRange {
        let bits = partials.max(1).next_power_of_two().trailing_zeros() as i32;
        SumRange { partial_limit: SUM_LIMIT * 2f64.powi(-bits) }
    }

    /// `value` as an exact fixed-point partial, or the error naming `quantity` and the range.
    #[inline]
    pub fn fixed(&self, quantity: Quantity, value: f64) -> Result<i128, EngineError> {
        if value.abs() < self.partial_limit { Ok(to_fixed128(value)) } else { Err(self.error(quantity, value)) }
    }

    /// Checks every pair of `partial` as [`SumRange::fixed`] would (element 0 as
    /// `quantities[0]`, element 1 as `quantities[1]`), in one pass without an early exit
    /// (a vector loop), so that the caller's conversions with [`to_fixed128`] need no
    /// branch to an error each: a cell's statistics are thousands of pairs.
    pub fn check_pairs(&self, quantities: [Quantity; 2], partial: &[[f64; 2]]) -> Result<(), EngineError> {
        let fits = partial.iter().flatten().fold(true, |all, v| all & (v.abs() < self.partial_limit));
        if fits {
            return Ok(());
        }
        for pair in partial {
            for (&quantity, &value) in quantities.iter().zip(pair) {
                self.fixed(quantity, value)?;
            }
        }
        unreachable!("a pair failed the range check, so one of its values fails `fixed`")
    }

    /// Every element of `partial` as exact sums (see [`SumRange::fixed`]).
    pub fn exact(&self, quantity: Quantity, partial: &[f64]) -> Result<ExactSums, EngineError> {
        let sums = partial.iter().map(|&v| self.fixed(quantity, v)).collect::<Result<_, _>>()?;
        Ok(ExactSums { sums })
    }

    /// Sums `values` exactly (each one a partial).
    pub fn sum(&self, quantity: Quantity, values: impl IntoIterator<Item = f64>) -> Result<i128, EngineError> {
        values.into_iter().try_fold(0i128, |total, v| Ok(total.wrapping_add(self.fixed(quantity, v)?)))
    }

    fn error(&self, quantity: Quantity, value: f64) -> EngineError {
        EngineError::OutOfRange {
            quantity: quantity.to_string(),
            value,
            range: format!(
                "|partial| < {:.3e} per partial, |total| < {SUM_LIMIT:.3e} (i128 with 64 fractional bits)",
                self.partial_limit
            ),
        }
    }
}

/// The proven range of fixed-point predictions: a row's prediction is a sum of at most
/// `terms` quantized terms `x theta`, so terms below `2^31 / terms` keep every prediction
/// below `2^31`, inside `i64` with 32 fractional bits, whatever the update order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictionRange {
    pub term_limit: f64,
}

impl PredictionRange {
    /// For rows of at most `terms` non-zeros (the bias included).
    pub fn for_terms(terms: u64) -> PredictionRange {
        let bits = terms.max(1).next_power_of_two().trailing_zeros() as i32;
        PredictionRange { term_limit: PREDICTION_LIMIT * 2f64.powi(-bits) }
    }

    /// Whether a term `x theta` of this size keeps every prediction in range.
    #[inline]
    pub fn holds(&self, term: f64) -> bool {
        term.abs() < self.term_limit
    }

    /// Checks the largest term a block's weights make (`|theta_j| max|x_j|`).
    pub fn check(&self, weights: &[f64], max_abs: &[f64]) -> Result<(), EngineError> {
        match weights.iter().zip(max_abs).map(|(&t, &m)| t * m).find(|&term| !self.holds(term)) {
            None => Ok(()),
            Some(term) => Err(EngineError::OutOfRange {
                quantity: "prediction term |x * theta|".into(),
                value: term,
                range: format!(
                    "|term| < {:.3e} so that a row's prediction stays below 2^31 (i64 with 32 fractional bits)",
                    self.term_limit
                ),
            }),
        }
    }
}

/// A power of two the targets of squared loss are multiplied by before training, chosen
/// from the labels' range so that predictions (resolution 2^-32, range 2^31) and exact sums
/// (range 2^62) suit the data whatever its units. The problem scales exactly: with targets
/// `s y`, weights `s theta`, L1 strength `s l1` (L2 unchanged), the objective is `s^2` times
/// the original and its minimizer is `s` times the original's; a power of two makes every
/// one of these multiplications exact in floating point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TargetScale {
    /// `s = 2^exponent`.
    pub exponent: i32,
}

impl TargetScale {
    /// Labels whose largest magnitude lies in `[2^-1, 2^10]` are used as they are.
    pub const UNSCALED: std::ops::RangeInclusive<f64> = 0.5..=1024.0;

    /// Largest |exponent|: beyond it the scaled objective (`s^2` times the original) would
    /// leave the `f64` range.
    pub const MAX_EXPONENT: i32 = 500;

    /// The scale for squared-loss targets whose largest magnitude is `max_abs`: 1 inside
    /// [`Self::UNSCALED`] (and for zero or unknown labels), otherwise the power of two that
    /// brings the largest target into `[1, 2)` (clamped to [`Self::MAX_EXPONENT`]; see
    /// [`Self::covers`]).
    pub fn for_labels(max_abs: f64) -> TargetScale {
        if !(max_abs > 0.0 && max_abs.is_finite()) || Self::UNSCALED.contains(&max_abs) {
            return TargetScale::default();
        }
        let (_, exponent) = frexp(max_abs);
        TargetScale { exponent: (1 - exponent).clamp(-Self::MAX_EXPONENT, Self::MAX_EXPONENT) }
    }

    /// Whether labels of largest magnitude `max_abs` can be scaled into `[1, 2)` (zero can).
    pub fn covers(max_abs: f64) -> bool {
        max_abs == 0.0 || (2f64.powi(-Self::MAX_EXPONENT)..2f64.powi(Self::MAX_EXPONENT)).contains(&max_abs)
    }

    pub fn factor(self) -> f64 {
        2f64.powi(self.exponent)
    }

    /// A target (or any value in target units, such as a weight) in training units.
    pub fn scale(self, value: f64) -> f64 {
        value * self.factor()
    }

    /// A weight trained in scaled units, in the original units.
    pub fn unscale_weight(self, weight: f64) -> f64 {
        weight * 2f64.powi(-self.exponent)
    }

    /// An objective (or loss) in scaled units, in the original units.
    pub fn unscale_objective(self, objective: f64) -> f64 {
        objective * 2f64.powi(-2 * self.exponent)
    }

    pub fn is_one(&self) -> bool {
        self.exponent == 0
    }
}

/// `x = m 2^e` with `m` in `[0.5, 1)`, for finite positive normal `x`.
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // subnormal: scale up first
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let e = biased - 1022;
    (x * 2f64.powi(-e), e)
}

/// A vector of exact sums, one per feature (or per candidate step), added to in any order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExactSums {
    pub sums: Vec<i128>,
}

impl ExactSums {
    pub fn zeros(len: usize) -> Self {
        Self { sums: vec![0; len] }
    }

    /// Adds another partial sum of the same length. Wrapping addition keeps the result
    /// exact and order-free even if an intermediate sum were to exceed the range.
    pub fn add(&mut self, other: &ExactSums) {
        debug_assert_eq!(self.sums.len(), other.sums.len());
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a = a.wrapping_add(*b);
        }
    }

    pub fn values(&self) -> Vec<f64> {
        self.sums.iter().map(|&s| from_fixed128(s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The fast conversion is the `as` cast, bit for bit: at the edges of the `i64` fast path,
    /// at halfway cases (ties to even) and sticky bits at every shift, and on random values
    /// of every bit length.
    #[test]
    fn i128_to_f64_is_the_cast_bit_for_bit() {
        let mut cases = vec![0i128, 1, -1, i128::MAX, i128::MIN, i128::MIN + 1, i64::MAX as i128, i64::MIN as i128];
        for bits in 54..127 {
            let one = 1i128 << bits;
            for x in
                [one, one - 1, one + 1, one + (1 << (bits - 52)), one + (1 << (bits - 53)), one + (3 << (bits - 53))]
            {
                cases.extend([x, -x, x + 1, x - 1]);
            }
            // A tie (the half bit alone) and a tie broken by a far-below sticky bit.
            let tie = one + (1i128 << (bits - 53));
            cases.extend([tie, tie + 1, -tie, -(tie + 1), tie + (1i128 << (bits - 52)), one | 1]);
        }
        let mut rng = crate::rng::SplitMix64::new(5);
        for _ in 0..200_000 {
            let wide = ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) as i128;
            cases.push(wide >> (rng.next_u64() % 127));
        }
        for x in cases {
            assert_eq!(i128_to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
    }

    /// The hardware fast path of `to_fixed128` gives the bit manipulation's integer: at
    /// every power of two, on both sides of every rounding tie, at the path's edge (1/2) and
    /// on random values of every magnitude.
    #[test]
    fn the_fast_fixed_point_conversion_is_the_exact_one() {
        let mut cases = vec![0.0, -0.0, f64::NAN, 0.5, -0.5, 0.5 - 1e-17, f64::MIN_POSITIVE, 5e-324, 1.0, -3.0];
        for e in -80..=63 {
            let p = 2f64.powi(e);
            for x in [p, p * 1.5, p * 0.75, p * (1.0 + f64::EPSILON), p * (1.0 - f64::EPSILON / 2.0)] {
                cases.extend([x, -x]);
                // Halfway between two multiples of 2^-64, and one ulp either side.
                let tie = (x * 2f64.powi(64)).trunc() + 0.5;
                let tie = tie * 2f64.powi(-64);
                cases.extend([tie, -tie, f64::from_bits(tie.to_bits() + 1), f64::from_bits(tie.to_bits() - 1)]);
            }
        }
        let mut rng = crate::rng::SplitMix64::new(11);
        for _ in 0..200_000 {
            let mantissa = rng.unit();
            let x = mantissa * 2f64.powi((rng.next_u64() % 90) as i32 - 80);
            cases.extend([x, -x]);
        }
        for x in cases {
            assert_eq!(to_fixed128(x), to_fixed128_bits(x), "{x:e}");
            assert_eq!(to_fixed128_rounding(x), to_fixed128_bits(x), "{x:e}");
        }
    }

    #[test]
    fn fixed_point_matches_exact_scaling_for_representable_values() {
        assert_eq!(to_fixed128(1.0), 1i128 << 64);
        assert_eq!(to_fixed128(-0.5), -(1i128 << 63));
        assert_eq!(to_fixed128(3.25), 13i128 << 62);
        assert_eq!(to_fixed128(2f64.powi(-64)), 1);
        assert_eq!(to_fixed128(2f64.powi(-65)), 1); // tie rounds away from zero
        assert_eq!(to_fixed128(2f64.powi(-66)), 0);
        assert_eq!(to_fixed128(f64::NAN), 0);
    }

    #[test]
    fn a_partial_outside_the_range_is_an_error_naming_the_quantity() {
        let range = SumRange::for_partials(3); // rounded up to 4 partials: 2^60 each
        assert_eq!(range.partial_limit, 2f64.powi(60));
        assert!(range.fixed(Quantity::Loss, 2f64.powi(60) * 0.999).is_ok());
        let err = range.fixed(Quantity::Curvature, 2f64.powi(60)).unwrap_err().to_string();
        assert!(err.contains("curvature") && err.contains("1.153e18"), "{err}");
        assert!(range.fixed(Quantity::Gradient, f64::NAN).is_err());
        assert!(range.fixed(Quantity::Gradient, f64::INFINITY).is_err());
        assert!(SumRange::for_partials(0).fixed(Quantity::Loss, 4.6e18).is_ok());
        assert!(SumRange::for_partials(1).fixed(Quantity::Loss, 4.7e18).is_err());
    }

    /// The one-pass check of pairs refuses exactly what `fixed` refuses, with the error of
    /// the first value `fixed` refuses (its quantity by position in the pair).
    #[test]
    fn checking_pairs_at_once_is_fixed_on_each_value() {
        let range = SumRange::for_partials(4); // 2^60 each
        let quantities = [Quantity::Gradient, Quantity::Curvature];
        let edge = 2f64.powi(60);
        let inside = [[0.25, 3.0], [-edge * 0.999, edge * 0.999], [0.0, -0.0]];
        assert!(range.check_pairs(quantities, &inside).is_ok());
        assert!(range.check_pairs(quantities, &[]).is_ok());
        for (bad, quantity) in
            [(edge, "curvature"), (-edge, "curvature"), (f64::NAN, "curvature"), (f64::INFINITY, "curvature")]
        {
            let mut pairs = inside.to_vec();
            pairs.push([1.0, bad]);
            pairs.push([bad, 1.0]);
            let err = range.check_pairs(quantities, &pairs).unwrap_err().to_string();
            let first = range.fixed(Quantity::Curvature, bad).unwrap_err().to_string();
            assert!(err.contains(quantity) && err == first, "{err} / {first}");
            pairs.remove(pairs.len() - 2);
            let err = range.check_pairs(quantities, &pairs).unwrap_err().to_string();
            assert!(err.contains("gradient"), "{err}");
        }
    }

    #[test]
    fn target_scale_leaves_ordinary_labels_alone_and_brings_others_to_one() {
        for max in [0.5, 1.0, 5.0, 1024.0, 0.0, f64::NAN] {
            assert!(TargetScale::for_labels(max).is_one(), "{max}");
        }
        for max in [1e-150, 1e-12, 1e-6, 0.3, 1025.0, 1e7, 1e12, 1e150] {
            let s = TargetScale::for_labels(max);
            let scaled = s.scale(max);
            assert!((1.0..2.0).contains(&scaled), "{max} -> {scaled}");
            assert_eq!(s.unscale_weight(scaled), max, "exact round trip");
            assert_eq!(s.unscale_objective(s.scale(s.scale(max))), max, "objectives scale by s^2");
        }
        // Beyond 2^+-500 no power of two makes the objective representable: refused.
        for max in [1e-300, 1e300, f64::MIN_POSITIVE / 8.0] {
            assert!(!TargetScale::covers(max), "{max}");
        }
        assert!(TargetScale::covers(1e-12) && TargetScale::covers(0.0));
    }

    #[test]
    fn prediction_range_bounds_the_sum_of_a_rows_terms() {
        let range = PredictionRange::for_terms(15); // 16 terms: each below 2^27
        assert!(range.holds(2f64.powi(27) * 0.999) && !range.holds(2f64.powi(27)));
        // 16 terms at the limit sum to below 2^31: the quantized sum fits an i64.
        let worst = (0..16).map(|_| quantize(2f64.powi(27) - 1.0)).try_fold(0i64, i64::checked_add);
        assert!(worst.is_some());
        let err = range.check(&[1.0, 3e8], &[1.0, 1.0]).unwrap_err().to_string();
        assert!(err.contains("prediction term") && err.contains("3.000e8"), "{err}");
    }

    proptest! {
        #[test]
        fn sums_of_partials_within_the_range_are_exact_in_any_order(
            fractions in proptest::collection::vec(-1f64..1.0, 1..64), seed in 0u64..1000,
        ) {
            // Partials up to the limit, as adversarial as the range allows: checked additions
            // never overflow in any order, so the wrapping total is the exact one.
            let range = SumRange::for_partials(fractions.len());
            let values: Vec<f64> = fractions.iter().map(|f| f * range.partial_limit * 0.999_999).collect();
            let fixed: Vec<i128> = values.iter().map(|&v| range.fixed(Quantity::Loss, v).unwrap()).collect();
            let exact = fixed.iter().try_fold(0i128, |a, &b| a.checked_add(b)).expect("no overflow");
            let mut shuffled = fixed.clone();
            crate::rng::shuffle(&mut shuffled, seed);
            let wrapped = shuffled.iter().fold(0i128, |a, &b| a.wrapping_add(b));
            prop_assert_eq!(wrapped, exact);
            let expected: f64 = values.iter().sum();
            prop_assert!((from_fixed128(wrapped) - expected).abs() <= 1e-9 * expected.abs().max(1.0));
        }

        #[test]
        fn fixed_point_round_trip_error_is_at_most_half_an_ulp_of_the_scale(v in -1e12f64..1e12) {
            let back = from_fixed128(to_fixed128(v));
            // |v| < 2^40 so v * 2^64 < 2^104: the i128 is exact to 2^-65 and the
            // conversion back rounds once to f64.
            prop_assert!((back - v).abs() <= 2f64.powi(-65) + v.abs() * f64::EPSILON);
        }

        #[test]
        fn exact_sums_do_not_depend_on_order(values in proptest::collection::vec(-1e6f64..1e6, 1..200), seed in 0u64..1000) {
            let forward: i128 = values.iter().map(|&v| to_fixed128(v)).fold(0, i128::wrapping_add);
            let mut shuffled = values.clone();
            crate::rng::shuffle(&mut shuffled, seed);
            let backward: i128 = shuffled.iter().map(|&v| to_fixed128(v)).fold(0, i128::wrapping_add);
            prop_assert_eq!(forward, backward);
        }

        #[test]
        fn incremental_predictions_equal_recomputed_ones(thetas in proptest::collection::vec(-50f64..50.0, 1..30), x in -10f64..10.0) {
            // y_hat updated through a sequence of theta values equals q(x * theta_last).
            let mut fixed = 0i64;
            let mut old = 0.0;
            for &theta in &thetas {
                fixed = fixed.wrapping_add(quantize(x * theta).wrapping_sub(quantize(x * old)));
                old = theta;
            }
            prop_assert_eq!(fixed, quantize(x * old));
        }
    }
}
