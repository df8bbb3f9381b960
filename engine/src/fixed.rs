//! Exact, order-free accumulation.
//!
//! Floating-point addition is not associative, so a sum over row shards would change with
//! the order workers finish in. Every quantity that crosses a shard boundary is therefore
//! rounded once to a fixed-point integer and summed as integers, which is associative and
//! commutative: any split of the work gives the same bits.
//!
//! * Statistics and objective terms: `i128` with 64 fractional bits (range ±9.2e18,
//!   resolution 5.4e-20). A shard's partial sum is taken in `f64` in row order (fixed by
//!   the grid), then rounded once with [`to_fixed128`].
//! * Predictions: `i64` with 32 fractional bits (range ±2.1e9, resolution 2.3e-10). The
//!   prediction of a row is `sum_j q(x_j * theta_j)` with `q` = [`quantize`]; an update adds
//!   `q(x theta_new) - q(x theta_old)`, so recomputing a lost shard from the model gives the
//!   same integers as the incremental path (the differences telescope).

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

/// Whether a term is small enough that sums of terms cannot overflow an `i64` prediction.
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
/// Exact bit manipulation, so it is fast and identical on every machine.
///
/// # Panics
/// Never; values beyond ±2^63 saturate, and NaN maps to 0. Callers validate inputs so
/// neither happens in training.
pub fn to_fixed128(value: f64) -> i128 {
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

/// Converts a fixed-point sum back to `f64` (correctly rounded by the `as` cast).
pub fn from_fixed128(fixed: i128) -> f64 {
    fixed as f64 / 18_446_744_073_709_551_616.0 // 2^64
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

    proptest! {
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
