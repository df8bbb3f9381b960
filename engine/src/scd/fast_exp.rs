//! `exp` for SCD's hot loops, inlined, with exactly the bits glibc's `exp` returns.
//!
//! A model's bytes depend on every `exp` the logistic derivatives take, and those come from
//! the C library (`f64::exp`). On x86-64 with FMA and AVX2, glibc (2.28 and later) answers
//! with the table-driven algorithm of ARM's optimized-routines (`__exp_fma`: N = 128 table
//! entries, a degree-5 polynomial, every product-sum an FMA). Called through the PLT, its
//! errno wrapper and the ifunc, it cost 52 of the 138 instructions per non-zero of a
//! statistics pass (callgrind, docs/benchmarks/scd-sweep.md). [`Exp::neg`] evaluates the same
//! operations in the same order — the FMAs where glibc's machine code has them (read from
//! `__ieee754_exp_fma`'s disassembly), the same table and constants (read from the library's
//! `__exp_data`) — inline, so the result is the same double, and leaves to the library every
//! input outside its fast path (|x| < 2^-54 or >= 512) and every machine where the library
//! might compute differently: it is used only when the CPU has FMA and AVX2 (glibc's own
//! condition for `__exp_fma`) and when it agrees bit for bit with `f64::exp` on a fixed set
//! of probe inputs the first time it is asked ([`Exp::detect`]). Anything else gets
//! `f64::exp` itself, so a model never depends on which of the two ran.

use crate::fma;

/// `__exp_data` of glibc 2.36 (x86-64): 128 / ln 2, -ln 2 / 128 split in two, the
/// polynomial's C2..C5, and the rounding shift 1.5 * 2^52.
const INV_LN2_N: u64 = 0x4067_1547_652b_82fe;
const NEG_LN2_HI_N: u64 = 0xbf76_2e42_fefa_0000;
const NEG_LN2_LO_N: u64 = 0xbd0c_f79a_bc9e_3b3a;
const C2: u64 = 0x3fdf_ffff_ffff_fdbd;
const C3: u64 = 0x3fc5_5555_5555_543c;
const C4: u64 = 0x3fa5_5555_cf17_2b91;
const C5: u64 = 0x3f81_1111_67a4_d017;
const SHIFT: u64 = 0x4338_0000_0000_0000;

/// `2^(i/128)` as (tail, bits - (i << 45)) pairs: `__exp_data.tab`.
#[rustfmt::skip]
static TABLE: [u64; 256] = [
    0x0000_0000_0000_0000, 0x3ff0_0000_0000_0000, 0x3c9b_3b4f_1a88_bf6e, 0x3fef_f63d_a9fb_3335,
    0xbc71_6013_9cd8_dc5d, 0x3fef_ec9a_3e77_8061, 0xbc90_5e7a_1087_66d1, 0x3fef_e315_e86e_7f85,
    0x3c8c_d252_3567_f613, 0x3fef_d9b0_d315_8574, 0xbc8b_ce80_23f9_8efa, 0x3fef_d06b_29dd_f6de,
    0x3c60_f74e_61e6_c861, 0x3fef_c745_1875_9bc8, 0x3c90_a3e4_5b33_d399, 0x3fef_be3e_cac6_f383,
    0x3c97_9aa6_5d83_7b6d, 0x3fef_b558_6cf9_890f, 0x3c8e_b51a_92fd_effc, 0x3fef_ac92_2b72_47f7,
    0x3c3e_be3d_702f_9cd1, 0x3fef_a3ec_32d3_d1a2, 0xbc6a_0334_8990_6e0b, 0x3fef_9b66_affe_d31b,
    0xbc95_5652_2a2f_bd0e, 0x3fef_9301_d012_5b51, 0xbc50_80ef_8c4e_ea55, 0x3fef_8abd_c06c_31cc,
    0xbc91_c923_b9d5_f416, 0x3fef_829a_aea9_2de0, 0x3c80_d3e3_e95c_55af, 0x3fef_7a98_c8a5_8e51,
    0xbc80_1b15_eaa5_9348, 0x3fef_72b8_3c7d_517b, 0xbc8f_1ff0_55de_323d, 0x3fef_6af9_388c_8dea,
    0x3c8b_898c_3f13_53bf, 0x3fef_635b_eb6f_cb75, 0xbc96_d99c_7611_eb26, 0x3fef_5be0_8404_5cd4,
    0x3c9a_ecf7_3e3a_2f60, 0x3fef_5487_3168_b9aa, 0xbc8f_e782_cb86_389d, 0x3fef_4d50_22fc_d91d,
    0x3c8a_6f41_44a6_c38d, 0x3fef_463b_8862_8cd6, 0x3c80_7a05_b0e4_047d, 0x3fef_3f49_917d_dc96,
    0x3c96_8efd_e3a8_a894, 0x3fef_387a_6e75_6238, 0x3c87_5e18_f274_487d, 0x3fef_31ce_4fb2_a63f,
    0x3c80_472b_981f_e7f2, 0x3fef_2b45_65e2_7cdd, 0xbc96_b87b_3f71_085e, 0x3fef_24df_e1f5_6381,
    0x3c82_f7e1_6d09_ab31, 0x3fef_1e9d_f51f_dee1, 0xbc3d_219b_1a6f_bffa, 0x3fef_187f_d0da_d990,
    0x3c8b_3782_720c_0ab4, 0x3fef_1285_a6e4_030b, 0x3c6e_1492_89ce_cb8f, 0x3fef_0caf_a93e_2f56,
    0x3c83_4d75_4db0_abb6, 0x3fef_06fe_0a31_b715, 0x3c86_4201_e2ac_744c, 0x3fef_0170_fc4c_d831,
    0x3c8f_dd39_5dd3_f84a, 0x3fee_fc08_b264_16ff, 0xbc86_a380_3b8e_5b04, 0x3fee_f6c5_5f92_9ff1,
    0xbc92_4aed_cc4b_5068, 0x3fee_f1a7_373a_a9cb, 0xbc99_07f8_1b51_2d8e, 0x3fee_ecae_6d05_d866,
    0xbc71_d1e8_3e94_36d2, 0x3fee_e7db_34e5_9ff7, 0xbc99_1919_b3ce_1b15, 0x3fee_e32d_c313_a8e5,
    0x3c85_9f48_a72a_4c6d, 0x3fee_dea6_4c12_3422, 0xbc93_1260_7a28_698a, 0x3fee_da45_04ac_801c,
    0xbc58_a78f_4817_895b, 0x3fee_d60a_21f7_2e2a, 0xbc7c_2c9b_6749_9a1b, 0x3fee_d1f5_d950_a897,
    0x3c43_63ed_60c2_ac11, 0x3fee_ce08_6061_892d, 0x3c96_6609_3b06_64ef, 0x3fee_ca41_ed1d_0057,
    0x3c6e_cce1_daa1_0379, 0x3fee_c6a2_b5c1_3cd0, 0x3c93_ff8e_3f0f_1230, 0x3fee_c32a_f0d7_d3de,
    0x3c76_90ce_bb7a_afb0, 0x3fee_bfda_d536_2a27, 0x3c93_1dbd_eb54_e077, 0x3fee_bcb2_99fd_dd0d,
    0xbc8f_9434_0071_a38e, 0x3fee_b9b2_769d_2ca7, 0xbc87_decc_dc93_a349, 0x3fee_b6da_a2cf_6642,
    0xbc78_dec6_bd0f_385f, 0x3fee_b42b_569d_4f82, 0xbc86_1246_ec7b_5cf6, 0x3fee_b1a4_ca5d_920f,
    0x3c93_3505_18fd_d78e, 0x3fee_af47_36b5_27da, 0x3c7b_98b7_2f8a_9b05, 0x3fee_ad12_d497_c7fd,
    0x3c90_63e1_e21c_5409, 0x3fee_ab07_dd48_5429, 0x3c34_c785_5019_c6ea, 0x3fee_a926_8a59_46b7,
    0x3c94_32e6_2b64_c035, 0x3fee_a76f_15ad_2148, 0xbc8c_e44a_6199_769f, 0x3fee_a5e1_b976_dc09,
    0xbc8c_33c5_3bef_4da8, 0x3fee_a47e_b03a_5585, 0xbc84_5378_892b_e9ae, 0x3fee_a346_34cc_c320,
    0xbc93_cedd_7856_5858, 0x3fee_a238_8255_2225, 0x3c57_10aa_807e_1964, 0x3fee_a155_d44c_a973,
    0xbc93_b3ef_bf5e_2228, 0x3fee_a09e_667f_3bcd, 0xbc6a_12ad_8734_b982, 0x3fee_a012_750b_dabf,
    0xbc63_67ef_b86d_a9ee, 0x3fee_9fb2_3c65_1a2f, 0xbc80_dc3d_54e0_8851, 0x3fee_9f7d_f951_9484,
    0xbc78_1f64_7e5a_3ecf, 0x3fee_9f75_e8ec_5f74, 0xbc86_ee4a_c08b_7db0, 0x3fee_9f9a_48a5_8174,
    0xbc86_1932_1e55_e68a, 0x3fee_9feb_5642_67c9, 0x3c90_9ccb_5e09_d4d3, 0x3fee_a069_4fde_5d3f,
    0xbc7b_32dc_b94d_a51d, 0x3fee_a114_73eb_0187, 0x3c94_ecfd_5467_c06b, 0x3fee_a1ed_0130_c132,
    0x3c65_ebe1_abd6_6c55, 0x3fee_a2f3_36cf_4e62, 0xbc88_a1c5_2fb3_cf42, 0x3fee_a427_543e_1a12,
    0xbc93_69b6_f13b_3734, 0x3fee_a589_994c_ce13, 0xbc80_5e84_3a19_ff1e, 0x3fee_a71a_4623_c7ad,
    0xbc94_d450_d872_576e, 0x3fee_a8d9_9b44_92ed, 0x3c90_ad67_5b0e_8a00, 0x3fee_aac7_d98a_6699,
    0x3c8d_b72f_c1f0_eab4, 0x3fee_ace5_422a_a0db, 0xbc65_b660_9cc5_e7ff, 0x3fee_af32_16b5_448c,
    0x3c7b_f683_59f3_5f44, 0x3fee_b1ae_9915_7736, 0xbc93_091f_a71e_3d83, 0x3fee_b45b_0b91_ffc6,
    0xbc5d_a9b8_8b6c_1e29, 0x3fee_b737_b0cd_c5e5, 0xbc6c_23f9_7c90_b959, 0x3fee_ba44_cbc8_520f,
    0xbc92_4343_22f4_f9aa, 0x3fee_bd82_9fde_4e50, 0xbc85_ca6c_d766_8e4b, 0x3fee_c0f1_70ca_07ba,
    0x3c71_affc_2b91_ce27, 0x3fee_c491_82a3_f090, 0x3c6d_d235_e10a_73bb, 0x3fee_c863_19e3_2323,
    0xbc87_c504_2262_2263, 0x3fee_cc66_7b5d_e565, 0x3c8b_1c86_e3e2_31d5, 0x3fee_d09b_ec4a_2d33,
    0xbc91_bbd1_d3bc_bb15, 0x3fee_d503_b23e_255d, 0x3c90_cc31_9cee_31d2, 0x3fee_d99e_1330_b358,
    0x3c84_6984_6e73_5ab3, 0x3fee_de6b_5579_fdbf, 0xbc82_dfcd_978e_9db4, 0x3fee_e36b_bfd3_f37a,
    0x3c8c_1a77_92cb_3387, 0x3fee_e89f_995a_d3ad, 0xbc90_7b8f_4ad1_d9fa, 0x3fee_ee07_298d_b666,
    0xbc55_c3d9_56dc_aeba, 0x3fee_f3a2_b84f_15fb, 0xbc90_a40e_3da6_f640, 0x3fee_f972_8de5_593a,
    0xbc68_d6f4_38ad_9334, 0x3fee_ff76_f2fb_5e47, 0xbc91_eee2_6b58_8a35, 0x3fef_05b0_30a1_064a,
    0x3c74_ffd7_0a5f_ddcd, 0x3fef_0c1e_904b_c1d2, 0xbc91_bdfb_fa92_98ac, 0x3fef_12c2_5bd7_1e09,
    0x3c73_6eae_30af_0cb3, 0x3fef_199b_dd85_529c, 0x3c8e_e332_5c9f_fd94, 0x3fef_20ab_5fff_d07a,
    0x3c84_e08f_d109_59ac, 0x3fef_27f1_2e57_d14b, 0x3c63_cdaf_384e_1a67, 0x3fef_2f6d_9406_e7b5,
    0x3c67_6b2c_6c92_1968, 0x3fef_3720_dcef_9069, 0xbc80_8a18_83cc_b5d2, 0x3fef_3f0b_555d_c3fa,
    0xbc8f_ad5d_3fff_fa6f, 0x3fef_472d_4a07_897c, 0xbc90_0dae_3875_a949, 0x3fef_4f87_080d_89f2,
    0x3c74_a385_a63d_07a7, 0x3fef_5818_dcfb_a487, 0xbc82_919e_2040_220f, 0x3fef_60e3_16c9_8398,
    0x3c8e_5a50_d5c1_92ac, 0x3fef_69e6_03db_3285, 0x3c84_3a59_ac01_6b4b, 0x3fef_7321_f301_b460,
    0xbc82_d521_07b4_3e1f, 0x3fef_7c97_337b_9b5f, 0xbc89_2ab9_3b47_0dc9, 0x3fef_8646_14f5_a129,
    0x3c74_b604_603a_88d3, 0x3fef_902e_e78b_3ff6, 0x3c83_c5ec_519d_7271, 0x3fef_9a51_fbc7_4c83,
    0xbc8f_f712_8fd3_91f0, 0x3fef_a4af_a2a4_90da, 0xbc8d_ae98_e223_747d, 0x3fef_af48_2d8e_67f1,
    0x3c8e_c3bc_41aa_2008, 0x3fef_ba1b_ee61_5a27, 0x3c84_2b94_c3a9_eb32, 0x3fef_c52b_376b_ba97,
    0x3c8a_64a9_31d1_85ee, 0x3fef_d076_5b6e_4540, 0xbc8e_37ba_e43b_e3ed, 0x3fef_dbfd_ad9c_be14,
    0x3c77_893b_4d91_cd9d, 0x3fef_e7c1_819e_90d8, 0x3c53_05c1_4160_cc89, 0x3fef_f3c2_2b8f_71f1,
];

/// Which `exp` (and `log1p`, [`super::fast_log1p`]) the hot loops use; both give the same
/// bits wherever [`Exp::Inline`] is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exp {
    /// `f64::exp`, the C library's.
    Library,
    /// [`exp_inline`] and [`super::fast_log1p::log1p_inline`], inside code compiled for FMA
    /// and AVX2 (see the module docs).
    Inline,
}

impl Exp {
    /// [`Exp::Inline`] when this CPU has FMA and AVX2 and the inline `exp` and `log1p` agree
    /// with `f64::exp` and `f64::ln_1p` on every probe; decided once per process.
    pub fn detect() -> Exp {
        static CHOICE: std::sync::OnceLock<Exp> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| if fma::available() && agrees_with_library() { Exp::Inline } else { Exp::Library })
    }
}

/// Probes the inline `exp` against the library's: every table index and both ends of the
/// fast path, on a fixed pseudo-random sample of the range the derivatives use (x <= 0,
/// down to below the underflow threshold) and a few points above 0.
fn agrees_with_library() -> bool {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let fixed =
        [0.0, -0.0, 1e-300, -1e-17, -5.55e-17, -5.56e-17, -1e-3, -0.5, -1.0, -2.0, -511.9, -512.0, -700.0, -745.2, 3.0];
    let steps = (0..4096).map(|i| -(i as f64) / 128.0 - 1.0 / 256.0);
    let random = (0..4096).map(|_| -((next() >> 11) as f64) * (750.0 / (1u64 << 53) as f64));
    let same = |x: f64| probe(x).to_bits() == x.exp().to_bits();
    fixed.into_iter().chain(steps).chain(random).all(same) && super::fast_log1p::agrees_with_library(probe_log1p)
}

/// [`super::fast_log1p::log1p_inline`] as the hot loops run it: compiled for FMA (without
/// FMA, on a machine [`Exp::detect`] never picks, the same bits by the C library's `fma`).
fn probe_log1p(x: f64) -> f64 {
    fma::dispatch! {
        if true;
        fn(x: f64) -> f64 { super::fast_log1p::log1p_inline(x) }
        else { super::fast_log1p::log1p_inline(x) }
    }
}

/// [`exp_inline`] as the hot loops run it (see [`probe_log1p`]).
fn probe(x: f64) -> f64 {
    fma::dispatch! {
        if true;
        fn(x: f64) -> f64 { exp_inline(x) }
        else { exp_inline(x) }
    }
}

/// glibc's `__exp_fma`, operation for operation; inputs outside its fast path go to the
/// library. Inline it only into functions compiled with `target_feature(enable = "fma")`:
/// elsewhere `mul_add` is a call to the C library's `fma` (still exact, just slow).
#[inline(always)]
pub fn exp_inline(x: f64) -> f64 {
    let abstop = ((x.to_bits() >> 52) & 0x7ff) as u32;
    if abstop.wrapping_sub(0x3c9) > 0x3e {
        return x.exp(); // |x| < 2^-54, |x| >= 512, inf or NaN: the library's special cases
    }
    let c = f64::from_bits;
    let kd = x.mul_add(c(INV_LN2_N), c(SHIFT));
    let ki = kd.to_bits();
    let kd = kd - c(SHIFT);
    let r = kd.mul_add(c(NEG_LN2_LO_N), kd.mul_add(c(NEG_LN2_HI_N), x));
    let index = 2 * (ki & 127) as usize;
    let tail = c(TABLE[index]);
    let scale = c(TABLE[index + 1].wrapping_add(ki << 45));
    let r2 = r * r;
    let tmp = r.mul_add(c(C3), c(C2)).mul_add(r2, r + tail);
    let tmp = (r2 * r2).mul_add(r.mul_add(c(C5), c(C4)), tmp);
    scale.mul_add(tmp, scale)
}

/// [`exp_inline`] on four inputs: the same operations lane by lane, so each lane's result is
/// the same double. Written as whole-array steps so that, compiled for AVX2 and FMA, one
/// vector instruction does each step for all four lanes (the table is read with scalar
/// loads). If any lane is outside the fast path, all four take [`exp_inline`].
#[inline(always)]
pub fn exp_inline4(x: [f64; 4]) -> [f64; 4] {
    let outside = x.map(|v| (((v.to_bits() >> 52) & 0x7ff) as u32).wrapping_sub(0x3c9) > 0x3e);
    if outside.iter().any(|&o| o) {
        return x.map(exp_inline);
    }
    let c = f64::from_bits;
    let shifted = lanes(|i| x[i].mul_add(c(INV_LN2_N), c(SHIFT)));
    let ki = shifted.map(f64::to_bits);
    let kd = lanes(|i| shifted[i] - c(SHIFT));
    let r = lanes(|i| kd[i].mul_add(c(NEG_LN2_LO_N), kd[i].mul_add(c(NEG_LN2_HI_N), x[i])));
    let index = ki.map(|k| 2 * (k & 127) as usize);
    let tail = lanes(|i| c(TABLE[index[i]]));
    let scale = lanes(|i| c(TABLE[index[i] + 1].wrapping_add(ki[i] << 45)));
    let r2 = lanes(|i| r[i] * r[i]);
    let tmp = lanes(|i| r[i].mul_add(c(C3), c(C2)).mul_add(r2[i], r[i] + tail[i]));
    let tmp = lanes(|i| (r2[i] * r2[i]).mul_add(r[i].mul_add(c(C5), c(C4)), tmp[i]));
    lanes(|i| scale[i].mul_add(tmp[i], scale[i]))
}

/// Four lanes, lane `i` computed by `f(i)`.
#[inline(always)]
pub(crate) fn lanes<T>(f: impl FnMut(usize) -> T) -> [T; 4] {
    std::array::from_fn(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Far more inputs than the start-up probe: every 2^-20 step of [-40, 0] (where the
    /// derivatives' margins live) and a pseudo-random sample down to -750. Passing on a
    /// machine where `detect` picks the inline version is the evidence that it is exact.
    #[test]
    fn inline_exp_has_the_library_bits() {
        if Exp::detect() != Exp::Inline {
            eprintln!("inline exp not used on this machine (no FMA/AVX2 or another C library)");
            return;
        }
        let mut mismatches = 0u64;
        for i in 0..(40u64 << 20) {
            let x = -(i as f64) / (1u64 << 20) as f64;
            mismatches += (probe(x).to_bits() != x.exp().to_bits()) as u64;
        }
        let mut state = 1u64;
        for _ in 0..20_000_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = -((state >> 11) as f64) * (750.0 / (1u64 << 53) as f64);
            let y = f64::from_bits(state ^ (state >> 29)); // any double at all, NaN and inf included
            mismatches += (probe(x).to_bits() != x.exp().to_bits()) as u64;
            mismatches += (probe(y).to_bits() != y.exp().to_bits() && !y.is_nan()) as u64;
        }
        assert_eq!(mismatches, 0);
    }

    /// Four lanes at a time give each lane [`exp_inline`]'s bits, including groups where one
    /// lane leaves the fast path (0, tiny, below -512, NaN) and sends all four to the scalar one.
    #[test]
    fn four_lane_exp_has_the_library_bits() {
        if Exp::detect() != Exp::Inline {
            eprintln!("inline exp not used on this machine (no FMA/AVX2 or another C library)");
            return;
        }
        fn probe4(x: [f64; 4]) -> [f64; 4] {
            fma::dispatch! {
                if true;
                fn(x: [f64; 4]) -> [f64; 4] { exp_inline4(x) }
                else { exp_inline4(x) }
            }
        }
        let mut state = 3u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            -((state >> 11) as f64) * (750.0 / (1u64 << 53) as f64)
        };
        let odd = [0.0, 1e-300, -600.0, f64::NAN, -745.5, 2.0];
        let mut mismatches = 0;
        for i in 0..2_000_000usize {
            let mut x = [next(), next(), next(), next()];
            if i % 64 == 0 {
                x[i / 64 % 4] = odd[i / 256 % odd.len()];
            }
            let bits = |v: [f64; 4]| v.map(|e| if e.is_nan() { u64::MAX } else { e.to_bits() });
            mismatches += (bits(probe4(x)) != bits(x.map(f64::exp))) as u32;
        }
        assert_eq!(mismatches, 0);
    }
}
