//! Which build of a hot loop the running CPU takes: the loops written for vector lanes
//! are compiled twice, once for the x86-64 baseline (SSE2, 4 float lanes) and once with
//! AVX2 enabled (8 lanes), and the second runs where the CPU has AVX2.
//!
//! Both builds are the same Rust code, so they give the same bytes: Rust never fuses a
//! multiply and an add (no floating-point contraction) and never reorders float
//! arithmetic, whatever the target features, so enabling AVX2 changes only how many
//! samples each instruction handles. FMA is deliberately not enabled, so that not even
//! an explicit `mul_add` could change its rounding between the two builds.

/// Whether the AVX2 builds may run here (checked once, then cached by std).
#[inline]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
