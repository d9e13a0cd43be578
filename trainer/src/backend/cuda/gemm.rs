//! GEMM on CUDA: one cuBLAS call, with the row-major convention of the `Backend` trait
//! mapped onto cuBLAS's column-major one. Under bf16 autocast (`Precision::Bf16`) the
//! operands are first rounded to bf16 into a scratch of the backend's own, and the call
//! is `cublasGemmEx` with f32 accumulation and an f32 `C`.

use cudarc::cublas::sys as blas_sys;

use super::buffer::{op_err, CudaBuf};
use super::launch::OpCx;
use super::{CudaBackend, CudaError};
use crate::backend::{BResult, BackendError, Gemm, GemmArgs, GemmOps, In, Out};
use crate::precision::Precision;

/// Where `B`'s bf16 copy starts in the scratch: `A`'s length rounded up to this many
/// elements (256 bytes, the alignment of an allocation), so that both operands are
/// aligned as cuBLAS's tensor-core kernels prefer.
const ALIGN_ELEMS: usize = 128;

fn trans(t: bool) -> blas_sys::cublasOperation_t {
    if t {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}

fn blas_err(
    cx: &OpCx<'_>,
    call: &'static str,
) -> impl Fn(cudarc::cublas::result::CublasError) -> BackendError {
    let op = cx.name;
    move |source| BackendError::Cuda {
        op,
        source: CudaError::Blas { call, source },
    }
}

impl GemmOps for CudaBackend {
    fn gemm(&self, op: GemmArgs<'_, Self>) -> BResult<()> {
        let spec = op.spec;
        // Extent of each operand as stored, so that nothing below reads or writes
        // outside the buffers.
        let Some([a_len, b_len, c_len]) = spec.extents()? else {
            return Ok(());
        };
        let big = [spec.m, spec.n, spec.k, spec.lda, spec.ldb, spec.ldc]
            .iter()
            .any(|&v| v > i32::MAX as usize);
        let cx = self.op("gemm");
        if big {
            return Err(cx.err(format!("dimension past i32 (cuBLAS): {spec:?}")));
        }
        // With k == 0 there is no product to round: C = beta * C either way.
        if self.precision() == Precision::Bf16 && spec.k > 0 {
            return self.gemm_bf16(&cx, spec, (op.a, a_len), (op.b, b_len), (op.c, c_len));
        }
        let cp = cx.write(&op.c, c_len, "C")?;
        // With k == 0 cuBLAS reads neither A nor B; any valid address will do.
        let (ap, bp) = if spec.k == 0 {
            (cp, cp)
        } else {
            (cx.read(op.a, a_len, "A")?, cx.read(op.b, b_len, "B")?)
        };
        // cuBLAS is column-major: the row-major C = op(A) op(B) is, read column-major,
        // C^T = op(B)^T op(A)^T, i.e. the same call with the operands swapped and
        // every matrix's row stride as its leading dimension.
        let (alpha, beta) = (spec.alpha, spec.beta);
        // SAFETY: the handle is bound to this backend's stream; A, B and C were checked
        // above to hold the full extents their strides imply; alpha and beta are host
        // scalars (the handle's default pointer mode) that outlive the call.
        unsafe {
            cudarc::cublas::result::sgemm(
                *self.blas().handle(),
                trans(spec.tb),
                trans(spec.ta),
                spec.n as i32,
                spec.m as i32,
                spec.k as i32,
                &alpha,
                bp.raw() as *const f32,
                spec.ldb as i32,
                ap.raw() as *const f32,
                spec.lda as i32,
                &beta,
                cp.raw() as *mut f32,
                spec.ldc as i32,
            )
        }
        .map_err(blas_err(&cx, "cublasSgemm"))
    }
}

impl CudaBackend {
    /// The GEMM of bf16 autocast: `A` and `B` rounded to bf16 (as stored, same strides)
    /// into the bf16 scratch, then one `cublasGemmEx` with bf16 operands, f32
    /// accumulation (`CUBLAS_COMPUTE_32F`) and an f32 `C` (autocast would round `C` to
    /// bf16 too; keeping it f32 only adds precision). `k > 0`.
    fn gemm_bf16(
        &self,
        cx: &OpCx<'_>,
        spec: Gemm,
        (a, a_len): (In<'_, Self>, usize),
        (b, b_len): (In<'_, Self>, usize),
        (c, c_len): (Out<'_, Self>, usize),
    ) -> BResult<()> {
        let cp = cx.write(&c, c_len, "C")?;
        // Checked here too, so that an operand too short is named as the GEMM's.
        cx.read(a, a_len, "A")?;
        cx.read(b, b_len, "B")?;
        let b_at = a_len.div_ceil(ALIGN_ELEMS) * ALIGN_ELEMS;
        let need = b_at
            .checked_add(b_len)
            .ok_or_else(|| cx.err(format!("bf16 operands past usize: {spec:?}")))?;
        self.with_bf16_scratch(need, |s| {
            self.cast_bf16(cx.name, a, Out::at(&mut *s, 0), a_len)?;
            self.cast_bf16(cx.name, b, Out::at(&mut *s, b_at), b_len)?;
            let ap = cx.read(In::at(&*s, 0), a_len, "A as bf16")?;
            let bp = cx.read(In::at(&*s, b_at), b_len, "B as bf16")?;
            let (alpha, beta) = (spec.alpha, spec.beta);
            let bf16 = blas_sys::cudaDataType::CUDA_R_16BF;
            // SAFETY: as in the f32 call: the handle is bound to this backend's stream,
            // on which the casts above are enqueued first; the bf16 copies hold exactly
            // the extents of A and B with the same leading dimensions (checked just
            // above), C its extent in f32; alpha and beta are f32 host scalars, the type
            // CUBLAS_COMPUTE_32F asks for, and outlive the call.
            unsafe {
                cudarc::cublas::result::gemm_ex(
                    *self.blas().handle(),
                    trans(spec.tb),
                    trans(spec.ta),
                    spec.n as i32,
                    spec.m as i32,
                    spec.k as i32,
                    (&alpha as *const f32).cast(),
                    bp.raw() as *const _,
                    bf16,
                    spec.ldb as i32,
                    ap.raw() as *const _,
                    bf16,
                    spec.lda as i32,
                    (&beta as *const f32).cast(),
                    cp.raw() as *mut _,
                    blas_sys::cudaDataType::CUDA_R_32F,
                    spec.ldc as i32,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(blas_err(cx, "cublasGemmEx"))
        })
    }

    /// Runs `f` with the bf16 scratch grown to at least `len` elements. Its own lock,
    /// apart from `with_scratch`'s, since a GEMM may run while that one is held; stream
    /// order keeps one GEMM's operands from being overwritten by the next's casts.
    fn with_bf16_scratch<R>(
        &self,
        len: usize,
        f: impl FnOnce(&mut CudaBuf<u16>) -> BResult<R>,
    ) -> BResult<R> {
        let mut scratch = self
            .inner
            .bf16_scratch
            .lock()
            .map_err(|_| op_err("gemm", "bf16 scratch lock poisoned by an earlier panic"))?;
        if scratch.as_ref().is_none_or(|s| s.len() < len) {
            // Round up so that a slowly growing batch does not reallocate every step.
            let size = len.next_power_of_two().max(4096);
            let bytes = size * 2;
            let raw = self
                .inner
                .stream
                .alloc_zeros::<u8>(bytes)
                .map_err(|source| BackendError::Cuda {
                    op: "gemm",
                    source: CudaError::Alloc { bytes, source },
                })?;
            // The old scratch is freed in stream order, after the GEMMs that read it.
            *scratch = Some(CudaBuf {
                raw,
                _t: std::marker::PhantomData,
            });
        }
        let s = scratch
            .as_mut()
            .ok_or_else(|| op_err("gemm", "bf16 scratch missing"))?;
        f(s)
    }
}
