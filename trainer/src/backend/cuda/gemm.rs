//! GEMM on CUDA: one cuBLAS call, with the row-major convention of the `Backend` trait
//! mapped onto cuBLAS's column-major one.

use cudarc::cublas::sys as blas_sys;

use super::buffer::{device_addr, op_err};
use super::{CudaBackend, CudaError};
use crate::backend::{BResult, BackendError, Gemm, In, Out};

pub(super) fn gemm(
    backend: &CudaBackend,
    spec: Gemm,
    a: In<'_, CudaBackend>,
    b: In<'_, CudaBackend>,
    c: Out<'_, CudaBackend>,
) -> BResult<()> {
    if spec.m == 0 || spec.n == 0 {
        return Ok(());
    }
    let extent = |rows: usize, cols: usize, ld: usize| (rows - 1) * ld + cols;
    let (ar, ac) = if spec.ta {
        (spec.k, spec.m)
    } else {
        (spec.m, spec.k)
    };
    let (br, bc) = if spec.tb {
        (spec.n, spec.k)
    } else {
        (spec.k, spec.n)
    };
    if ac > spec.lda || bc > spec.ldb || spec.n > spec.ldc {
        return Err(op_err(
            "gemm",
            format!("leading dimension too small: {spec:?}"),
        ));
    }
    let big = [spec.m, spec.n, spec.k, spec.lda, spec.ldb, spec.ldc]
        .iter()
        .any(|&v| v > i32::MAX as usize);
    if big {
        return Err(op_err(
            "gemm",
            format!("dimension past i32 (cuBLAS): {spec:?}"),
        ));
    }
    let s = backend.stream();
    let cp = device_addr(
        s,
        c.buf,
        c.off,
        extent(spec.m, spec.n, spec.ldc),
        "gemm",
        "C",
    )?;
    // With k == 0 cuBLAS reads neither A nor B; any valid address will do.
    let (ap, bp) = if spec.k == 0 {
        (cp, cp)
    } else {
        (
            device_addr(s, a.buf, a.off, extent(ar, ac, spec.lda), "gemm", "A")?,
            device_addr(s, b.buf, b.off, extent(br, bc, spec.ldb), "gemm", "B")?,
        )
    };
    // cuBLAS is column-major: the row-major C = op(A) op(B) is, read column-major,
    // C^T = op(B)^T op(A)^T, i.e. the same call with the operands swapped and
    // every matrix's row stride as its leading dimension.
    let op = |t: bool| {
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
            *backend.blas().handle(),
            op(spec.tb),
            op(spec.ta),
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
        op: "gemm",
        source: CudaError::Blas {
            call: "cublasSgemm",
            source,
        },
    })
}
