//! Batch norm + ReLU + 2x2 max pooling (stride 2), fused into one op.

use super::{BResult, BnGeom, BnGrads, BnState, Buffers, In, Out, PoolGeom};

/// The fused batch norm, ReLU and max pool.
pub trait BnPoolOps: Buffers {
    /// f32 elements of scratch that `bn_relu_pool_*` need for `g` (0 if none). The
    /// caller keeps the scratch from a forward to the backward that follows it.
    fn bn_relu_pool_scratch(&self, g: BnPoolGeom) -> usize;
    /// Batch norm, ReLU and 2x2 max pooling in one op; the same outputs as
    /// `batchnorm_forward` (ReLU on) followed by `maxpool_forward`, without the full-size
    /// activation in between. Statistics and `running` as in `batchnorm_forward`.
    fn bn_relu_pool_forward(&self, op: BnReluPoolForwardArgs<'_, Self>) -> BResult<()>;
    /// Backward of a training-mode `bn_relu_pool_forward` of the same batch: from the
    /// pooled output's gradient `dy`, overwrites `dgamma_beta` and `dx`.
    fn bn_relu_pool_backward(&self, op: BnReluPoolBackwardArgs<'_, Self>) -> BResult<()>;
}

/// Arguments of [`BnPoolOps::bn_relu_pool_forward`].
pub struct BnReluPoolForwardArgs<'a, B: Buffers + ?Sized> {
    /// The input `[c, n, h, w]`, parameters and statistics, as in `batchnorm_forward`.
    pub state: BnState<'a, B>,
    /// The pooled output, `[c, n, h / 2, w / 2]` (overwritten).
    pub y: Out<'a, B>,
    /// Each window's winner in a format of the backend's own, for the backward: as
    /// many u32 as `y` has elements.
    pub winners: Out<'a, B, u32>,
    /// `bn_relu_pool_scratch` elements, kept for the backward.
    pub scratch: Out<'a, B>,
    /// The shape and settings.
    pub g: BnPoolGeom,
}

/// Arguments of [`BnPoolOps::bn_relu_pool_backward`].
pub struct BnReluPoolBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The input, parameters, statistics and the gradients written, as in
    /// `batchnorm_backward`.
    pub grads: BnGrads<'a, B>,
    /// The gradient of the pooled output.
    pub dy: In<'a, B>,
    /// The forward's winners.
    pub winners: In<'a, B, u32>,
    /// The scratch the forward used.
    pub scratch: Out<'a, B>,
    /// The shape and settings.
    pub g: BnPoolGeom,
}

/// A batch norm, ReLU and 2x2 max pooling (stride 2) fused into one op, over `[c, n, h,
/// w]`; the pooled output is `[c, n, h / 2, w / 2]` (an odd last row or column is
/// dropped, as the plain max pool drops it). Batch-norm settings as in [`BnGeom`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BnPoolGeom {
    /// Channels.
    pub c: usize,
    /// Images in the call.
    pub n: usize,
    /// Input height, in pixels.
    pub h: usize,
    /// Input width, in pixels.
    pub w: usize,
    /// Added to the variance before its square root.
    pub eps: f32,
    /// Weight of the new batch statistic in the running average (PyTorch's `momentum`).
    pub momentum: f32,
}

impl BnPoolGeom {
    /// Pooled height, `h / 2`.
    pub fn out_h(&self) -> usize {
        self.h / 2
    }
    /// Pooled width, `w / 2`.
    pub fn out_w(&self) -> usize {
        self.w / 2
    }
    /// The batch norm (with its ReLU) on its own.
    pub fn bn(&self) -> BnGeom {
        BnGeom {
            c: self.c,
            n: self.n,
            hw: self.h * self.w,
            eps: self.eps,
            momentum: self.momentum,
            relu: true,
        }
    }
    /// The max pooling on its own.
    pub fn pool(&self) -> PoolGeom {
        PoolGeom {
            planes: self.c * self.n,
            h: self.h,
            w: self.w,
            k: 2,
            stride: 2,
        }
    }
}
