//! Hot CPU loops compiled for the widest vector unit the machine has. The crate is built for
//! the baseline x86-64 (SSE2, four lanes); on a CPU with AVX-512 or AVX2 the same loops run
//! with sixteen or eight. Results are bitwise the same at every width: Rust neither reorders
//! float sums nor fuses multiply-adds, so only independent elements share a vector.

/// `vectorised_fn! { fn name(arg: Type, ..) [-> Type] { body } }` defines `name`, which runs
/// `body` compiled for AVX-512 or AVX2 when the CPU has them (checked at run time, cached by
/// std) and for the baseline otherwise. Helpers the body calls must be `#[inline(always)]` to be
/// compiled at the body's width.
macro_rules! vectorised_fn {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$meta])*
        $vis fn $name ($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512 ($($arg: $ty),*) $(-> $ret)? $body
                #[target_feature(enable = "avx2")]
                unsafe fn avx2 ($($arg: $ty),*) $(-> $ret)? $body
                if $crate::vector::avx512() {
                    // SAFETY: the CPU has AVX-512F, the only feature `avx512` is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::vector::wide_allowed() && std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, the only feature `avx2` is compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body
        }
    };
}

pub(crate) use vectorised_fn;

/// Whether the AVX-512 paths run: an x86-64 CPU with AVX-512F and a build with the `avx512`
/// feature (without it an AVX-512 CPU runs what an AVX2-only one does, to measure that path).
#[inline(always)]
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        cfg!(feature = "avx512") && wide_allowed() && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the loops may run wider than the baseline: not with `POSFLOW_BASELINE_VECTORS=1` in the
/// environment (read once), which keeps every one at SSE2's four lanes, so that a test (or anyone)
/// can see that the bits do not depend on the width.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn wide_allowed() -> bool {
    static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WIDE.get_or_init(|| std::env::var("POSFLOW_BASELINE_VECTORS").as_deref() != Ok("1"))
}
