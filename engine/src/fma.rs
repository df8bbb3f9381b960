//! The engine's one piece of unsafe code: calling a copy of a loop compiled for FMA and AVX2.
//!
//! The inline `exp` and `log1p` ([`crate::scd::fast_exp`], [`crate::scd::fast_log1p`]) are
//! fast only where their `mul_add`s are single FMA instructions, so the loops that call them
//! run in a function compiled with `#[target_feature(enable = "fma,avx2")]`. Calling such a
//! function is `unsafe`: on a CPU without those features it is undefined behaviour. Every
//! such copy in the engine is written by [`dispatch!`], which checks the CPU right before the
//! call; so the check, the `unsafe` block and its safety argument exist once, here.
//!
//! Why a macro and not a function taking the loop as a closure: a closure is compiled for FMA only
//! if it is *written inside* the `target_feature` function; one built outside and passed in keeps
//! its own codegen, and when it is not inlined every `mul_add` in it becomes a call to the C
//! library's software `fma` (docs/benchmarks/scd-sweep.md, "inline `log1p`": a9a went to 12.2 G
//! instructions that way). The macro pastes the caller's body into the function.

/// Whether this CPU has FMA and AVX2 (the standard library caches the answer).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
}

/// No other architecture runs the FMA copies.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub(crate) fn available() -> bool {
    false
}

/// Runs a body in a copy compiled for FMA and AVX2 when a condition holds and the CPU has
/// them, and a fallback otherwise:
///
/// ```ignore
/// fma::dispatch! {
///     if loss == Loss::Logistic && Exp::detect() == Exp::Inline;
///     fn(cell: &Cell, targets: &[f64]) -> Vec<f64> { fast_loop(cell, targets, |x| exp_inline(x)) }
///     else { fast_loop(cell, targets, f64::exp) }
/// }
/// ```
///
/// The body sees only the arguments listed, which are the caller's variables of the same
/// names (an item cannot capture: shadow a variable to give it the listed type). The macro
/// makes the CPU check itself, so the condition is only about results: a caller that uses
/// the inline `exp` or `log1p` includes `Exp::detect() == Exp::Inline`, the start-up check
/// that they give the C library's bits. The condition is evaluated first, the CPU check
/// only when it holds.
macro_rules! dispatch {
    (
        if $when:expr;
        fn($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $fast:block
        else $fallback:block
    ) => {{
        #[cfg_attr(target_arch = "x86_64", target_feature(enable = "fma,avx2"))]
        #[allow(clippy::redundant_closure, reason = "a closure written here is compiled for FMA; a function item is not")]
        fn compiled_for_fma($($arg: $ty),*) $(-> $ret)? $fast
        if $when && $crate::fma::available() {
            // SAFETY: `compiled_for_fma` differs from a safe function only in being compiled
            // for FMA and AVX2, and `available()` has just found both on this CPU. (Elsewhere
            // than x86-64 it is an ordinary function and `available()` is false.)
            #[allow(unsafe_code, unused_unsafe)]
            unsafe {
                compiled_for_fma($($arg),*)
            }
        } else $fallback
    }};
}

pub(crate) use dispatch;
