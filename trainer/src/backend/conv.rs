//! Convolution: im2col and its adjoint col2im (the building blocks), and a whole
//! convolution's forward and backward, which a backend cuts into im2col + GEMM steps
//! as suits it.

use super::{BResult, BackendError, Buffers, In, Out};

/// The im2col matrix of a convolution, and its adjoint.
pub trait Im2colOps: Buffers {
    /// How many f32 elements an im2col scratch buffer should hold at most: small on a
    /// CPU (cache), large on a GPU (fewer, bigger GEMMs).
    fn im2col_budget(&self) -> usize;
    /// The im2col layout this backend's GEMMs run fastest on; `im2col` and `col2im`
    /// support at least this one.
    fn col_layout(&self) -> ColLayout;
    /// From the batch `src`, writes the im2col matrix of images `n0..n0+nc` to `dst`:
    /// `[c*kh*kw, nc*oh*ow]`, or its transpose, as `geom.col` says.
    fn im2col(&self, op: Im2colArgs<'_, Self>) -> BResult<()>;
    /// The adjoint of `im2col`: from the columns `src`, overwrites images `n0..n0+nc` of
    /// the batch `dst` with the sums of their entries.
    fn col2im(&self, op: Im2colArgs<'_, Self>) -> BResult<()>;
}

/// Whole convolutions.
pub trait ConvOps: Buffers {
    /// f32 elements of scratch that `conv_forward` and `conv_backward` need for a
    /// convolution of `geom` into `cout` channels, in calls of at most `geom.n` images.
    fn conv_scratch(&self, geom: ConvGeom, cout: usize) -> usize;
    /// A whole convolution, `y[cout, n, oh, ow] = w[cout, c, kh, kw] * x`, overwritten;
    /// `geom.col` must be this backend's `col_layout()`. How it is cut into im2col +
    /// GEMM steps is the backend's business.
    fn conv_forward(&self, op: ConvForwardArgs<'_, Self>) -> BResult<()>;
    /// The convolution's backward from `dy`: overwrites `dw` and, if given, `dx`.
    fn conv_backward(&self, op: ConvBackwardArgs<'_, Self>) -> BResult<()>;
}

/// Arguments of [`Im2colOps::im2col`] and [`Im2colOps::col2im`], for a chunk of images
/// of a batch `[c, n, h, w]`: the batch to the chunk's columns, or back.
pub struct Im2colArgs<'a, B: Buffers + ?Sized> {
    /// The convolution.
    pub geom: ConvGeom,
    /// First image of the chunk.
    pub n0: usize,
    /// Images in the chunk.
    pub nc: usize,
    /// `im2col`: the whole batch; `col2im`: the chunk's columns.
    pub src: In<'a, B>,
    /// `im2col`: the chunk's columns (overwritten); `col2im`: the whole batch, of which
    /// only the chunk's images are written.
    pub dst: Out<'a, B>,
}

/// Arguments of [`ConvOps::conv_forward`].
pub struct ConvForwardArgs<'a, B: Buffers + ?Sized> {
    /// The input, `[c, n, h, w]`.
    pub x: In<'a, B>,
    /// The weights, `[cout, c, kh, kw]`.
    pub w: In<'a, B>,
    /// The convolution.
    pub geom: ConvGeom,
    /// Output channels.
    pub cout: usize,
    /// The output, `[cout, n, oh, ow]` (overwritten).
    pub y: Out<'a, B>,
    /// `conv_scratch` elements, the backend's to use.
    pub scratch: Out<'a, B>,
}

/// Arguments of [`ConvOps::conv_backward`].
pub struct ConvBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The forward's input.
    pub x: In<'a, B>,
    /// The weights.
    pub w: In<'a, B>,
    /// The gradient of the output, `[cout, n, oh, ow]`.
    pub dy: In<'a, B>,
    /// The convolution.
    pub geom: ConvGeom,
    /// Output channels.
    pub cout: usize,
    /// The weight gradient (overwritten).
    pub dw: Out<'a, B>,
    /// The input gradient (overwritten), if wanted.
    pub dx: Option<Out<'a, B>>,
    /// The scratch given to the forward.
    pub scratch: Out<'a, B>,
    /// The scratch still holds what the training `conv_forward` of this batch left in
    /// it, which a backend may use to skip work.
    pub reuse: bool,
}

/// How an im2col matrix is laid out. With `K = c * kh * kw` kernel taps and `P` output
/// pixels (images x rows x columns), it is `[K, P]` or its transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColLayout {
    /// `[K, P]`: one row per kernel tap, so a row of the forward GEMM's output is a
    /// channel of the activation (what the CUDA backend uses).
    TapMajor,
    /// `[P, K]`: one row per output pixel. The CPU's choice: its weight-gradient GEMM
    /// `dy[cout, P] x col[P, K]` then reads both operands along their rows, which is
    /// about three times faster there than `[K, P]` read transposed.
    PixelMajor,
}

/// Geometry of a 2-D convolution over a channel-major batch `[c, n, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// Input channels.
    pub c: usize,
    /// Images in the whole batch (the row stride of the activation is `n * h * w`).
    pub n: usize,
    /// Input height, in pixels.
    pub h: usize,
    /// Input width, in pixels.
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Step between neighbouring output pixels, in input pixels (both axes).
    pub stride: usize,
    /// Zeros added on every side of the input, in pixels (both axes).
    pub pad: usize,
    /// Layout of the im2col matrix that `im2col` writes and `col2im` reads.
    pub col: ColLayout,
}

impl ConvGeom {
    /// Output height, `(h + 2 * pad - kh) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.h + 2 * self.pad - self.kh) / self.stride + 1
    }
    /// Output width, `(w + 2 * pad - kw) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.w + 2 * self.pad - self.kw) / self.stride + 1
    }
    /// Rows of the im2col matrix: one per (input channel, kernel row, kernel column).
    pub fn col_rows(&self) -> usize {
        self.c * self.kh * self.kw
    }
    /// Elements of the whole batch, `c * n * h * w`.
    pub(crate) fn input_len(&self) -> usize {
        self.c * self.n * self.h * self.w
    }
    /// An error naming `op` unless images `n0..n0+nc` are in the batch.
    pub(crate) fn check_chunk(&self, op: &'static str, n0: usize, nc: usize) -> BResult<()> {
        if n0 + nc > self.n {
            return Err(BackendError::Op {
                op,
                reason: format!("images {n0}..{} of {}", n0 + nc, self.n),
            });
        }
        Ok(())
    }
}
