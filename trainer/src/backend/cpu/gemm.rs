//! GEMM on the CPU: `gemm-f32`'s kernels (AVX-512 where the CPU has it, threads on
//! rayon) for most products, and a split-`k` path for a long sum into a small output (a
//! convolution's weight gradient), whose fixed number of slabs keeps the result
//! independent of the thread count.

use std::sync::TryLockError;

use gemm_common::Parallelism;
use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, GemmArgs, GemmOps};

/// A split-`k` GEMM computes this many partial products. Fixed, not the thread count:
/// the sum's order, and so the result, must not depend on the machine.
const K_SLABS: usize = 4;

/// Split `k` when each slab still has at least this many terms and the output is at most
/// `SPLIT_MAX_OUT` elements (so the partial products stay in cache and cheap to add).
const SPLIT_MIN_SLAB_K: usize = 2048;
const SPLIT_MAX_OUT: usize = 1 << 17;

/// A strided operand: element `(i, j)` is at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(super) struct Strided {
    pub rs: isize,
    pub cs: isize,
}

impl Strided {
    /// A row-major matrix whose rows are `ld` apart.
    pub(super) fn rows(ld: usize) -> Self {
        Self {
            rs: ld as isize,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix whose rows are `ld` apart.
    pub(super) fn cols(ld: usize) -> Self {
        Self {
            rs: 1,
            cs: ld as isize,
        }
    }
}

/// One `gemm-f32` call, `C = alpha A B + beta C` with `C` row-major (row stride `ldc`).
///
/// gemm's micro-kernel writes columns of its destination; a row-major `C` is handed to
/// it as `C^T = B^T A^T`, whose columns are `C`'s rows (what the `gemm` facade does
/// too). Its threads split only the output: every element is one sum over `k`, in
/// blocks whose size depends on the cache, not on the number of threads.
pub(super) struct RawGemm {
    /// `(m, n, k)`: `A` is `m x k`, `B` is `k x n`.
    pub dims: (usize, usize, usize),
    pub alpha: f32,
    /// `A`'s first element and strides.
    pub a: *const f32,
    pub sa: Strided,
    /// `B`'s first element and strides.
    pub b: *const f32,
    pub sb: Strided,
    /// 0: `C` is overwritten, never read.
    pub beta: f32,
    pub c: *mut f32,
    pub ldc: usize,
    /// The threads gemm-f32 may use (`None` inside a task that is already parallel).
    pub par: Parallelism,
}

impl RawGemm {
    /// Runs the product.
    ///
    /// # Safety
    /// The operands must hold every element the shapes and strides address.
    pub(super) unsafe fn run(self) {
        let Self {
            dims: (m, n, k),
            alpha,
            a,
            sa,
            b,
            sb,
            beta,
            c,
            ldc,
            par,
        } = self;
        // gemm's convention: dst = alpha_g dst + beta_g lhs rhs, dst read only if asked.
        gemm_f32::gemm::f32::get_gemm_fn()(
            n,
            m,
            k,
            c,
            ldc as isize,
            1,
            beta != 0.0,
            b,
            sb.rs,
            sb.cs,
            a,
            sa.rs,
            sa.cs,
            beta,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
}

/// The split-`k` partial products live in the backend's `slabs`, kept between calls.
impl GemmOps for CpuBackend {
    fn gemm(&self, op: GemmArgs<'_, Self>) -> BResult<()> {
        let spec = op.spec;
        // Extent of each operand as stored, so that nothing below reads or writes
        // outside the buffers.
        let Some([a_len, b_len, c_len]) = spec.extents()? else {
            return Ok(());
        };
        let (a, b) = if spec.k == 0 {
            (&[][..], &[][..])
        } else {
            (
                read_slice(op.a, a_len, "gemm")?,
                read_slice(op.b, b_len, "gemm")?,
            )
        };
        let c = write_slice(op.c, c_len, "gemm")?;
        if spec.k == 0 {
            for r in 0..spec.m {
                for v in &mut c[r * spec.ldc..r * spec.ldc + spec.n] {
                    *v = if spec.beta == 0.0 {
                        0.0
                    } else {
                        *v * spec.beta
                    };
                }
            }
            return Ok(());
        }
        let (rsa, csa) = if spec.ta {
            (1, spec.lda)
        } else {
            (spec.lda, 1)
        };
        let (rsb, csb) = if spec.tb {
            (1, spec.ldb)
        } else {
            (spec.ldb, 1)
        };
        let sa = Strided {
            rs: rsa as isize,
            cs: csa as isize,
        };
        let sb = Strided {
            rs: rsb as isize,
            cs: csb as isize,
        };
        let out = spec.m * spec.n;
        if spec.k >= K_SLABS * SPLIT_MIN_SLAB_K && out <= SPLIT_MAX_OUT {
            // A long sum into a small output (the weight gradient of a convolution: k is
            // images x pixels): split over the output it would keep one core busy. The
            // slabs run in parallel, each on one thread, then are added in order into C.
            // The kept buffer, unless another GEMM holds it (one issued from inside a
            // rayon task): then a buffer of its own rather than waiting on the lock.
            let (mut held, mut own);
            let slabs: &mut Vec<f32> = match self.slabs.try_lock() {
                Ok(guard) => {
                    held = guard;
                    &mut held
                }
                Err(TryLockError::Poisoned(p)) => {
                    held = p.into_inner();
                    &mut held
                }
                Err(TryLockError::WouldBlock) => {
                    own = Vec::new();
                    &mut own
                }
            };
            if slabs.len() < K_SLABS * out {
                slabs.resize(K_SLABS * out, 0.0);
            }
            let per = spec.k.div_ceil(K_SLABS);
            slabs[..K_SLABS * out]
                .par_chunks_mut(out)
                .enumerate()
                .for_each(|(i, part)| {
                    let k0 = (i * per).min(spec.k);
                    let kc = per.min(spec.k - k0);
                    if kc == 0 {
                        part.fill(0.0);
                        return;
                    }
                    // Slab i: columns k0..k0+kc of A, rows k0..k0+kc of B. Both lie inside
                    // the slices checked above: their last elements are the operands' own
                    // (k - 1) * stride + ... at most, and the slices are borrowed, not raw.
                    let (a_at, b_at) = (k0 * csa, k0 * rsb);
                    let (a, b) = (&a[a_at..], &b[b_at..]);
                    // SAFETY: the extents checked above cover rows/columns k0..k0+kc at these
                    // offsets; each task writes only its own `part` (m x n, dense).
                    unsafe {
                        RawGemm {
                            dims: (spec.m, spec.n, kc),
                            alpha: 1.0,
                            a: a.as_ptr(),
                            sa,
                            b: b.as_ptr(),
                            sb,
                            beta: 0.0,
                            c: part.as_mut_ptr(),
                            ldc: spec.n,
                            par: Parallelism::None,
                        }
                        .run();
                    }
                });
            let parts = &slabs[..K_SLABS * out];
            for r in 0..spec.m {
                let row = &mut c[r * spec.ldc..r * spec.ldc + spec.n];
                for (j, v) in row.iter_mut().enumerate() {
                    let mut sum = 0.0f32;
                    for p in 0..K_SLABS {
                        sum += parts[p * out + r * spec.n + j];
                    }
                    let prev = if spec.beta == 0.0 {
                        0.0
                    } else {
                        spec.beta * *v
                    };
                    *v = prev + spec.alpha * sum;
                }
            }
            return Ok(());
        }
        // SAFETY: the extents of a, b and c were checked above for these strides.
        unsafe {
            RawGemm {
                dims: (spec.m, spec.n, spec.k),
                alpha: spec.alpha,
                a: a.as_ptr(),
                sa,
                b: b.as_ptr(),
                sb,
                beta: spec.beta,
                c: c.as_mut_ptr(),
                ldc: spec.ldc,
                par: Parallelism::Rayon(0),
            }
            .run();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBuf;
    use crate::backend::{Gemm, In, Out};

    /// Deterministic values in [-1, 1).
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// `gm` on the backend, and the same product in f64, for padded strides.
    fn both(gm: Gemm, seed: u64) -> (Vec<f32>, Vec<f64>) {
        let b = CpuBackend::new();
        let (ar, br) = (
            if gm.ta { gm.k } else { gm.m },
            if gm.tb { gm.n } else { gm.k },
        );
        let a = CpuBuf::from(values(seed, ar * gm.lda));
        let bb = CpuBuf::from(values(seed + 1, br * gm.ldb));
        let c0 = values(seed + 2, gm.m * gm.ldc);
        let mut c = CpuBuf::from(c0.clone());
        b.gemm(GemmArgs {
            spec: gm,
            a: In::new(&a),
            b: In::new(&bb),
            c: Out::new(&mut c),
        })
        .unwrap();
        let at = |r: usize, k: usize| {
            if gm.ta {
                a.0[k * gm.lda + r]
            } else {
                a.0[r * gm.lda + k]
            }
        };
        let bt = |k: usize, j: usize| {
            if gm.tb {
                bb.0[j * gm.ldb + k]
            } else {
                bb.0[k * gm.ldb + j]
            }
        };
        let mut want = vec![0.0f64; gm.m * gm.n];
        for r in 0..gm.m {
            for j in 0..gm.n {
                let dot: f64 = (0..gm.k).map(|k| at(r, k) as f64 * bt(k, j) as f64).sum();
                want[r * gm.n + j] =
                    gm.alpha as f64 * dot + gm.beta as f64 * c0[r * gm.ldc + j] as f64;
            }
        }
        let got = (0..gm.m)
            .flat_map(|r| c.0[r * gm.ldc..r * gm.ldc + gm.n].to_vec())
            .collect();
        (got, want)
    }

    /// The split-`k` path (long k, small output) against an f64 reference, in every
    /// transpose, with padded strides, alpha and beta; and one plain product.
    #[test]
    fn split_k_gemm_matches_a_reference() {
        let k = K_SLABS * SPLIT_MIN_SLAB_K + 5;
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (m, n, k) in [(5, 7, k), (32, 27, k), (9, 4, 100)] {
                let mut gm = Gemm::dense(ta, tb, m, n, k).beta(0.5);
                gm.alpha = 0.75;
                gm.lda += 3;
                gm.ldb += 2;
                gm.ldc += 1;
                let (got, want) = both(gm, (m * 31 + n) as u64);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // Sums of k products of values below 1: rounding grows like sqrt(k).
                    let tol = 1e-6 * (k as f64).sqrt() * (1.0 + w.abs());
                    assert!(
                        (*g as f64 - w).abs() <= tol,
                        "ta={ta} tb={tb} {m}x{n}x{k}: element {i} is {g}, want {w}"
                    );
                }
            }
        }
    }

    /// The slabs run on however many threads there are; the sum's order is fixed.
    #[test]
    fn split_k_gemm_does_not_depend_on_the_thread_count() {
        let gm = Gemm::dense(false, true, 16, 9, K_SLABS * SPLIT_MIN_SLAB_K * 2 + 3);
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| both(gm, 7).0)
        };
        let (one, three) = (run(1), run(3));
        assert!(one
            .iter()
            .zip(&three)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
