//! `log1p` for the logistic loss in SCD's line searches, inlined, with exactly the bits
//! glibc's `log1p` returns.
//!
//! Every logistic loss is `log1p(exp(-|z|))` (plus `z` when z > 0), and the line searches
//! take nine per row: after `exp` was inlined ([`super::fast_exp`]), the C library's
//! `log1p` was a third of a whole `linea train` run on rcv1-small and ~35 instructions per
//! non-zero on a9a and w8a (docs/benchmarks/scd-sweep.md). On x86-64 with FMA and AVX2, glibc 2.36
//! answers with `__log1p_fma`: fdlibm's `s_log1p.c` compiled with `-mfma -mavx2`, where
//! the compiler contracted some product-sums into FMAs. [`log1p_inline`] evaluates the same
//! operations in the same order — the FMAs exactly where that machine code has them (read
//! from its disassembly), the same constants (read from the library's data) — so the result
//! is the same double. Inputs outside the paths transcribed here (x <= -1, x >= 2^53, NaN,
//! infinities) go to the library. The loss only ever passes `exp(-|z|)`, in [0, 1].
//!
//! It is used exactly where the inline `exp` is: [`super::fast_exp::Exp::detect`] chooses
//! the inline functions only when the CPU has FMA and AVX2 (glibc's own condition for both
//! `_fma` variants) and both agree bit for bit with the library on fixed probe inputs.

use super::fast_exp::exp_inline;

/// fdlibm's constants, as `__log1p_fma` loads them: ln 2 split in two, the polynomial's
/// Lp1..Lp7 (in s^2), 2/3 of the short series for |f| < 2^-20.
const LN2_HI: u64 = 0x3fe6_2e42_fee0_0000;
const LN2_LO: u64 = 0x3dea_39ef_3579_3c76;
const LP1: u64 = 0x3fe5_5555_5555_5593;
const LP2: u64 = 0x3fd9_9999_9997_fa04;
const LP3: u64 = 0x3fd2_4924_9422_9359;
const LP4: u64 = 0x3fcc_71c5_1d8e_78af;
const LP5: u64 = 0x3fc7_4664_96cb_03de;
const LP6: u64 = 0x3fc3_9a09_d078_c69f;
const LP7: u64 = 0x3fc2_f112_df3e_5244;
const TWO_THIRDS: u64 = 0x3fe5_5555_5555_5555;

/// The logistic loss's `log(1 + e^z)` as `crate::loss::softplus` computes it, with the
/// inline `exp` and `log1p`: the same operations, so the same bits. Only inside code
/// compiled for FMA. Both are called directly, and the loops get it (and
/// `kernels::logistic_value_inline`) in a closure, never as a function item: an item passed
/// as `impl Fn` went through a `Fn::call` shim compiled without FMA, was not inlined, and
/// its `mul_add`s became calls to a software `fma` (a9a: 19-37% more instructions).
#[inline(always)]
pub(crate) fn softplus_inline(z: f64) -> f64 {
    if z > 0.0 { z + log1p_inline(exp_inline(-z)) } else { log1p_inline(exp_inline(z)) }
}

/// glibc's `__log1p_fma`, operation for operation; inputs outside the transcribed paths go
/// to the library. Inline it only into functions compiled with
/// `target_feature(enable = "fma")`: elsewhere `mul_add` is a call to the C library's
/// `fma` (still exact, just slow).
#[inline(always)]
pub fn log1p_inline(x: f64) -> f64 {
    let c = f64::from_bits;
    let bits = x.to_bits();
    let hx = (bits >> 32) as u32 as i32;
    let (k, f, correction, hu);
    if hx < 0x3fda_827a {
        // x < 0.41422: log1p(x) from x itself (k = 0), except near -1.
        let ax = hx & 0x7fff_ffff;
        if ax >= 0x3ff0_0000 {
            return x.ln_1p(); // x <= -1 or a negative NaN: the library's errors
        }
        if ax < 0x3e20_0000 {
            // |x| < 2^-29: x, or x - x^2 / 2 with the subtraction fused.
            if ax < 0x3c90_0000 {
                return x;
            }
            return (-(x * x)).mul_add(0.5, x);
        }
        if (hx as u32).wrapping_add(0x402d_413c) > 0x402d_413c {
            // -0.2929 < x < 0.41422
            let hfsq = (x * 0.5) * x;
            return polynomial(x, hfsq, 0, 0.0);
        }
        (k, f, correction, hu) = reduce(x);
    } else {
        if hx >= 0x4340_0000 {
            return x.ln_1p(); // x >= 2^53, infinity or NaN
        }
        (k, f, correction, hu) = reduce(x);
    }
    let hfsq = (f * 0.5) * f;
    if hu != 0 {
        return polynomial(f, hfsq, k, correction);
    }
    // |f| < 2^-20: a short series.
    let kd = k as f64;
    if f == 0.0 {
        if k == 0 {
            return 0.0;
        }
        return kd.mul_add(c(LN2_HI), kd.mul_add(c(LN2_LO), correction));
    }
    let r = (-f).mul_add(c(TWO_THIRDS), 1.0) * hfsq;
    if k == 0 {
        return f - r;
    }
    let w = (r - kd.mul_add(c(LN2_LO), correction)) - f;
    kd.mul_add(c(LN2_HI), -w)
}

/// `1 + x = 2^k (1 + f)` with `sqrt(2)/2 <= 1 + f < sqrt(2)`, the rounding error of `1 + x`
/// as a correction term divided by `1 + x`, and `hu` (0 when |f| < 2^-20).
#[inline(always)]
fn reduce(x: f64) -> (i32, f64, f64, i32) {
    let u = x + 1.0;
    let high = (u.to_bits() >> 32) as u32 as i32;
    let mut k = (high >> 20) - 1023;
    let correction = if k > 0 { 1.0 - (u - x) } else { x - (u - 1.0) } / u;
    let mut hu = high & 0x000f_ffff;
    let low = u.to_bits() & 0xffff_ffff;
    let normalized = if hu < 0x6a09e {
        ((hu | 0x3ff0_0000) as u64) << 32 | low
    } else {
        k += 1;
        let n = ((hu | 0x3fe0_0000) as u64) << 32 | low;
        hu = (0x0010_0000 - hu) >> 2;
        n
    };
    (k, f64::from_bits(normalized) - 1.0, correction, hu)
}

/// `log(1 + f) + k ln 2` from `s = f / (2 + f)` and fdlibm's polynomial in `s^2`, with the
/// FMAs of `__log1p_fma`.
#[inline(always)]
fn polynomial(f: f64, hfsq: f64, k: i32, correction: f64) -> f64 {
    let c = f64::from_bits;
    let s = f / (f + 2.0);
    let z = s * s;
    let r2 = z.mul_add(c(LP3), c(LP2));
    let r3 = z.mul_add(c(LP5), c(LP4));
    let r4 = z.mul_add(c(LP7), c(LP6));
    let z2 = z * z;
    let z4 = z2 * z2;
    let z6 = z2 * z4;
    let r = z6.mul_add(r4, z4.mul_add(r3, z.mul_add(c(LP1), z2 * r2)));
    let t = (r + hfsq) * s;
    if k == 0 {
        return f - (hfsq - t);
    }
    let kd = k as f64;
    let w = (hfsq - (kd.mul_add(c(LN2_LO), correction) + t)) - f;
    kd.mul_add(c(LN2_HI), -w)
}

/// Probes the inline `log1p` against the library's on the loss's range [0, 1] (every
/// path: 0, subnormals, below 2^-54 and 2^-29, both sides of 0.41422, near 1 where the
/// short series runs) and a few points outside it.
pub(super) fn agrees_with_library(inline: impl Fn(f64) -> f64) -> bool {
    let fixed = [
        0.0,
        -0.0,
        5e-324,
        1e-300,
        1e-17,
        3e-9,
        1e-3,
        0.25,
        0.414_213_5,
        0.414_3,
        0.5,
        0.999_999_9,
        1.0 - f64::EPSILON / 2.0,
        1.0,
        -0.25,
        -0.3,
        -0.999,
        3.0,
        1e10,
    ];
    let steps = (0..4096).map(|i| (i as f64 + 0.5) / 4096.0);
    let exponents = (0..1100).map(|e| f64::from_bits(0x3ff0_0000_0000_0000 - ((e as u64) << 52) + 0x1234_5678_9abc));
    let same = |x: f64| inline(x).to_bits() == x.ln_1p().to_bits();
    fixed.into_iter().chain(steps).chain(exponents).all(same)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scd::fast_exp::Exp;

    fn inline(x: f64) -> f64 {
        crate::fma::dispatch! {
            if true;
            fn(x: f64) -> f64 { log1p_inline(x) }
            else { log1p_inline(x) }
        }
    }

    /// Far more inputs than the start-up probe: the 2^23 doubles below 1 and the 2^24
    /// doubles from 0.41421 (the two ends where the reduction changes), every 2^-26 step of
    /// [0, 1], every power-of-two decade with random mantissas down to the subnormals, the
    /// exact `exp` of every 2^-16 step of [-40, 0] (the values the loss passes), and any
    /// double at all. Passing where `detect` picks the inline functions is the evidence.
    #[test]
    fn inline_log1p_has_the_library_bits() {
        if Exp::detect() != Exp::Inline {
            eprintln!("inline log1p not used on this machine (no FMA/AVX2 or another C library)");
            return;
        }
        let mut mismatches = 0u64;
        let mut check = |x: f64| {
            let same = inline(x).to_bits() == x.ln_1p().to_bits() || x.is_nan();
            mismatches += !same as u64;
        };
        let one = 1.0f64.to_bits();
        for b in one - (1 << 23)..=one {
            check(f64::from_bits(b));
        }
        let edge = 0.414_21f64.to_bits();
        for b in edge..edge + (1 << 24) {
            check(f64::from_bits(b));
        }
        for i in 0..=(1u64 << 26) {
            check(i as f64 / (1u64 << 26) as f64);
        }
        let mut state = 1u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state
        };
        for e in 0..=0x3ffu64 {
            for _ in 0..20_000 {
                check(f64::from_bits(e << 52 | next() >> 12));
            }
        }
        for i in 0..(40u64 << 16) {
            check((-(i as f64) / (1u64 << 16) as f64).exp());
        }
        for _ in 0..20_000_000 {
            let r = next();
            check(f64::from_bits(r ^ (r >> 29)));
        }
        assert_eq!(mismatches, 0);
    }
}
