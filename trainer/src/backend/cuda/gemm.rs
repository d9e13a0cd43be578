//! GEMM on CUDA: one cuBLAS call, with the row-major convention of the `Backend` trait
//! mapped onto cuBLAS's column-major one.

use cudarc::cublas::sys as blas_sys;

use super::{CudaBackend, CudaError};
use crate::backend::{BResult, BackendError, GemmArgs, GemmOps};

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
        let trans = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
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
        .map_err(|source| BackendError::Cuda {
            op: cx.name,
            source: CudaError::Blas {
                call: "cublasSgemm",
                source,
            },
        })
    }
}
