//! GEMM: one row-major matrix product per call.

use super::{BResult, BackendError, Buffers, In, Out};

/// The matrix product.
pub trait GemmOps: Buffers {
    /// `C = alpha * op(A) * op(B) + beta * C`: see [`Gemm`].
    fn gemm(&self, op: GemmArgs<'_, Self>) -> BResult<()>;
}

/// Arguments of [`GemmOps::gemm`].
pub struct GemmArgs<'a, B: Buffers + ?Sized> {
    /// Shapes, transposes, strides and scales.
    pub spec: Gemm,
    /// `A`, stored `[m, k]` (`[k, m]` if `spec.ta`) with row stride `spec.lda`.
    pub a: In<'a, B>,
    /// `B`, stored `[k, n]` (`[n, k]` if `spec.tb`) with row stride `spec.ldb`.
    pub b: In<'a, B>,
    /// `C`, `[m, n]` with row stride `spec.ldc`.
    pub c: Out<'a, B>,
}

/// A row-major GEMM: `C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C`.
///
/// `op(X)` is `X` or its transpose; `lda`, `ldb`, `ldc` are the row strides of the
/// matrices as stored (so a transposed `A` is stored `[k, m]` with stride `lda`).
/// `beta == 0` means `C` is overwritten and may hold anything (even NaN) before.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// `op(A)` is `A` transposed: `A` is stored `[k, m]`.
    pub ta: bool,
    /// `op(B)` is `B` transposed: `B` is stored `[n, k]`.
    pub tb: bool,
    /// Rows of `C` and of `op(A)`.
    pub m: usize,
    /// Columns of `C` and of `op(B)`.
    pub n: usize,
    /// Length of the summed dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product `op(A) * op(B)`.
    pub alpha: f32,
    /// Scale of the old `C` added to the product; 0 overwrites `C`.
    pub beta: f32,
    /// Row stride of `A` as stored, in elements.
    pub lda: usize,
    /// Row stride of `B` as stored, in elements.
    pub ldb: usize,
    /// Row stride of `C`, in elements.
    pub ldc: usize,
}

impl Gemm {
    /// Densely packed operands: strides follow from the shapes and transposes.
    pub fn dense(ta: bool, tb: bool, m: usize, n: usize, k: usize) -> Self {
        Self {
            ta,
            tb,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            lda: if ta { m } else { k },
            ldb: if tb { k } else { n },
            ldc: n,
        }
    }
    /// The same GEMM with `beta` instead (1 accumulates into `C`).
    pub fn beta(mut self, beta: f32) -> Self {
        self.beta = beta;
        self
    }

    /// Elements that `A`, `B` and `C` span as stored, from their offsets (0 for `A` and
    /// `B` when `k` is 0); `None` when `C` is empty (nothing to do), an error when a
    /// leading dimension is shorter than its row.
    pub(crate) fn extents(&self) -> BResult<Option<[usize; 3]>> {
        if self.m == 0 || self.n == 0 {
            return Ok(None);
        }
        let extent = |rows: usize, cols: usize, ld: usize| (rows - 1) * ld + cols;
        let (ar, ac) = if self.ta {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        };
        let (br, bc) = if self.tb {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        };
        if ac > self.lda || bc > self.ldb || self.n > self.ldc {
            return Err(BackendError::Op {
                op: "gemm",
                reason: format!("leading dimension too small: {self:?}"),
            });
        }
        let (a, b) = if self.k == 0 {
            (0, 0)
        } else {
            (extent(ar, ac, self.lda), extent(br, bc, self.ldb))
        };
        Ok(Some([a, b, extent(self.m, self.n, self.ldc)]))
    }
}
