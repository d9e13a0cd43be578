//! Pooling: max pooling (recording each window's winner for the backward) and global
//! average pooling, forward and backward.

use super::{BResult, Buffers, In, Out};

/// Max and global average pooling.
pub trait PoolOps: Buffers {
    /// Max pooling; `argmax` records the winning index within each plane. The first
    /// maximum of a window wins, and NaN never does (a window of NaN gives -inf and
    /// its first element).
    fn maxpool_forward(&self, op: MaxPoolForwardArgs<'_, Self>) -> BResult<()>;
    /// Overwrites `dx` with `dy` routed to the recorded maxima.
    fn maxpool_backward(&self, op: MaxPoolBackwardArgs<'_, Self>) -> BResult<()>;
    /// `y[p] = mean(x[p, ..hw])` for each of `planes` planes.
    fn avgpool_forward(&self, op: AvgPoolForwardArgs<'_, Self>) -> BResult<()>;
    /// `dx[p, i] = dy[p] / hw`.
    fn avgpool_backward(&self, op: AvgPoolBackwardArgs<'_, Self>) -> BResult<()>;
}

/// Arguments of [`PoolOps::maxpool_forward`].
pub struct MaxPoolForwardArgs<'a, B: Buffers + ?Sized> {
    /// The planes, `[planes, h, w]`.
    pub x: In<'a, B>,
    /// The pooling.
    pub geom: PoolGeom,
    /// The pooled planes, `[planes, oh, ow]` (overwritten).
    pub y: Out<'a, B>,
    /// Each output's winner, an index within its plane (overwritten).
    pub argmax: Out<'a, B, u32>,
}

/// Arguments of [`PoolOps::maxpool_backward`].
pub struct MaxPoolBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The gradient of the pooled planes.
    pub dy: In<'a, B>,
    /// The forward's winners.
    pub argmax: In<'a, B, u32>,
    /// The pooling.
    pub geom: PoolGeom,
    /// The gradient of the input planes (overwritten).
    pub dx: Out<'a, B>,
}

/// Arguments of [`PoolOps::avgpool_forward`].
pub struct AvgPoolForwardArgs<'a, B: Buffers + ?Sized> {
    /// The planes, `[planes, hw]`.
    pub x: In<'a, B>,
    /// Planes averaged.
    pub planes: usize,
    /// Elements per plane.
    pub hw: usize,
    /// One mean per plane (overwritten).
    pub y: Out<'a, B>,
}

/// Arguments of [`PoolOps::avgpool_backward`].
pub struct AvgPoolBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The gradient of the means, one per plane.
    pub dy: In<'a, B>,
    /// Planes.
    pub planes: usize,
    /// Elements per plane.
    pub hw: usize,
    /// The gradient of the planes (overwritten).
    pub dx: Out<'a, B>,
}

/// Geometry of a max pooling over `planes` independent `h x w` planes (no padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeom {
    /// Planes pooled, each on its own (channels x images of a `[c, n, h, w]` batch).
    pub planes: usize,
    /// Plane height, in pixels.
    pub h: usize,
    /// Plane width, in pixels.
    pub w: usize,
    /// Side of the square window (`k x k`).
    pub k: usize,
    /// Step between neighbouring windows, in pixels (both axes).
    pub stride: usize,
}

impl PoolGeom {
    /// Output height, `(h - k) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.h - self.k) / self.stride + 1
    }
    /// Output width, `(w - k) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.w - self.k) / self.stride + 1
    }
    /// Elements of the input planes, `planes * h * w`.
    pub(crate) fn in_len(&self) -> usize {
        self.planes * self.h * self.w
    }
    /// Elements of the pooled planes, `planes * oh * ow`.
    pub(crate) fn out_len(&self) -> usize {
        self.planes * self.out_h() * self.out_w()
    }
}
