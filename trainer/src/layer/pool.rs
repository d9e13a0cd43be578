//! Pooling: max pooling (argmax recorded for backward) and global average pooling,
//! which turns `[c, n, h, w]` into the `[c, n]` vector a linear head takes.

use crate::backend::{
    AvgPoolBackwardArgs, AvgPoolForwardArgs, BResult, Backend, In, MaxPoolBackwardArgs,
    MaxPoolForwardArgs, Out, PoolGeom,
};
use crate::error::{config, Result};
use crate::layer::{Builder, Layer, ModelBuffers, Shape};
use crate::tensor::Tensor;

/// Max pooling with a `k x k` window over `[c, n, h, w]` (no padding), giving
/// `[c, n, (h - k) / stride + 1, (w - k) / stride + 1]`; no parameters.
pub struct MaxPool2d<B: Backend> {
    name: String,
    input: Shape,
    k: usize,
    stride: usize,
    argmax: B::Buf<u32>,
}

impl<B: Backend> MaxPool2d<B> {
    /// A `k x k` pool with step `stride` over `input`, its argmax planned for
    /// `bld.max_batch` images. Fails on a zero `k` or `stride`, or planes smaller than `k`.
    pub fn new(
        bld: &mut Builder<'_, B>,
        name: &str,
        input: Shape,
        k: usize,
        stride: usize,
    ) -> Result<Self> {
        if k == 0 || stride == 0 || input.h < k || input.w < k {
            return Err(config(name, format!("pool {k}/{stride} on {input:?}")));
        }
        let mut p = Self {
            name: name.to_string(),
            input,
            k,
            stride,
            argmax: bld.backend.alloc(0)?,
        };
        p.argmax = bld.backend.alloc(bld.max_batch * p.out_shape_().numel())?;
        Ok(p)
    }

    fn geom(&self, n: usize) -> PoolGeom {
        PoolGeom {
            planes: self.input.c * n,
            h: self.input.h,
            w: self.input.w,
            k: self.k,
            stride: self.stride,
        }
    }

    fn out_shape_(&self) -> Shape {
        let g = self.geom(1);
        Shape::new(self.input.c, g.out_h(), g.out_w())
    }
}

impl<B: Backend> Layer<B> for MaxPool2d<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        self.out_shape_()
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        _train: bool,
    ) -> BResult<()> {
        bufs.backend.maxpool_forward(MaxPoolForwardArgs {
            x: x.view(),
            geom: self.geom(n),
            y: y.view_mut(),
            argmax: Out::new(&mut self.argmax),
        })
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        _x: &Tensor<B>,
        _y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        match dx {
            Some(dx) => bufs.backend.maxpool_backward(MaxPoolBackwardArgs {
                dy: dy.view(),
                argmax: In::new(&self.argmax),
                geom: self.geom(n),
                dx: dx.view_mut(),
            }),
            None => Ok(()),
        }
    }
}

/// The mean of each `h x w` plane: `[c, n, h, w] -> [c, n]`; no parameters.
pub struct GlobalAvgPool {
    name: String,
    input: Shape,
}

impl GlobalAvgPool {
    /// A global average pool named `name` over activations of `input`.
    pub fn new(name: &str, input: Shape) -> Self {
        Self {
            name: name.to_string(),
            input,
        }
    }
}

impl<B: Backend> Layer<B> for GlobalAvgPool {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        Shape::vector(self.input.c)
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        _train: bool,
    ) -> BResult<()> {
        // Planes are (channel, image) in order, so the output is `[c, n]` as it stands.
        bufs.backend.avgpool_forward(AvgPoolForwardArgs {
            x: x.view(),
            planes: self.input.c * n,
            hw: self.input.hw(),
            y: y.view_mut(),
        })
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        _x: &Tensor<B>,
        _y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        match dx {
            Some(dx) => bufs.backend.avgpool_backward(AvgPoolBackwardArgs {
                dy: dy.view(),
                planes: self.input.c * n,
                hw: self.input.hw(),
                dx: dx.view_mut(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::gradcheck;

    #[test]
    fn maxpool_backward_matches_finite_differences() {
        let s = Shape::new(2, 4, 6);
        gradcheck::check(
            |b| Box::new(MaxPool2d::new(b, "pool", s, 2, 2).unwrap()),
            s,
            2,
            |v| v,
        );
    }

    #[test]
    fn overlapping_maxpool_backward_matches_finite_differences() {
        let s = Shape::new(1, 5, 5);
        gradcheck::check(
            |b| Box::new(MaxPool2d::new(b, "pool", s, 3, 2).unwrap()),
            s,
            2,
            |v| v,
        );
    }

    #[test]
    fn avgpool_backward_matches_finite_differences() {
        let s = Shape::new(3, 3, 4);
        gradcheck::check(|_| Box::new(GlobalAvgPool::new("gap", s)), s, 2, |v| v);
    }
}
