//! 2-D convolution over channel-major `[c, n, h, w]` activations, through the backend's
//! whole-convolution ops (`conv_forward`, `conv_backward`): each backend cuts the batch
//! into im2col + GEMM steps its own way (the CPU by cache-sized blocks of images on
//! each core, CUDA by big chunks), in the im2col layout it prefers ([`ColLayout`]). The
//! layer owns the scratch they need. An optional bias and ReLU are fused into one pass.

use crate::backend::{
    BResult, Backend, BiasActBackwardArgs, BiasActForwardArgs, BiasActGeom, ColLayout,
    ConvBackwardArgs, ConvForwardArgs, ConvGeom, In, Out,
};
use crate::error::{config, Result};
use crate::layer::{Builder, Layer, ModelBuffers, Shape};
use crate::param::{Init, ParamId};
use crate::tensor::Tensor;

/// A 2-D convolution `[c, n, h, w] -> [cout, n, oh, ow]` with square `k x k` kernels,
/// then an optional bias and ReLU. Parameters `<name>.weight` `[cout, c, k, k]`
/// (decayed) and, with a bias, `<name>.bias` `[cout]`.
pub struct Conv2d<B: Backend> {
    name: String,
    input: Shape,
    cout: usize,
    k: usize,
    stride: usize,
    pad: usize,
    w: ParamId,
    b: Option<ParamId>,
    relu: bool,
    /// The im2col layout, the backend's choice.
    layout: ColLayout,
    /// The backend's scratch for the convolution ops, planned for the largest batch.
    scratch: Tensor<B>,
    /// The scratch still holds what the last training forward left in it.
    scratch_valid: bool,
}

/// How a convolution is set up.
#[derive(Clone, Copy, Debug)]
pub struct ConvSpec {
    /// Output channels.
    pub cout: usize,
    /// Kernel side (`k x k`).
    pub k: usize,
    /// Step between neighbouring output pixels, in input pixels.
    pub stride: usize,
    /// Zeros added on every side of the input, in pixels.
    pub pad: usize,
    /// Add a bias (off when a batch norm follows).
    pub bias: bool,
    /// Fuse a ReLU after the bias.
    pub relu: bool,
}

impl ConvSpec {
    /// A `k x k` convolution with "same" padding for odd `k`, no bias, no ReLU.
    pub fn same(cout: usize, k: usize, stride: usize) -> Self {
        Self {
            cout,
            k,
            stride,
            pad: k / 2,
            bias: false,
            relu: false,
        }
    }
}

impl<B: Backend> Conv2d<B> {
    /// Registers the parameters (initialised as PyTorch's `Conv2d`) and plans the
    /// backend's scratch for `bld.max_batch` images of `input`. Fails on a zero size or
    /// a kernel larger than the padded input.
    pub fn new(bld: &mut Builder<'_, B>, name: &str, input: Shape, s: ConvSpec) -> Result<Self> {
        if s.k == 0 || s.stride == 0 || s.cout == 0 || input.c == 0 {
            return Err(config(name, format!("bad convolution {s:?} on {input:?}")));
        }
        if input.h + 2 * s.pad < s.k || input.w + 2 * s.pad < s.k {
            return Err(config(
                name,
                format!("kernel {} larger than padded input {input:?}", s.k),
            ));
        }
        // PyTorch's Conv2d default, weights and bias (docs/trainer.md, "Initialisation").
        let init = Init::FanInUniform {
            fan_in: input.c * s.k * s.k,
        };
        let w = bld.params.add(
            &format!("{name}.weight"),
            &[s.cout, input.c, s.k, s.k],
            init,
            true,
        );
        let b = s.bias.then(|| {
            bld.params
                .add(&format!("{name}.bias"), &[s.cout], init, false)
        });
        let mut conv = Self {
            name: name.to_string(),
            input,
            cout: s.cout,
            k: s.k,
            stride: s.stride,
            pad: s.pad,
            w,
            b,
            relu: s.relu,
            layout: bld.backend.col_layout(),
            scratch: Tensor::zeros(bld.backend, &[0])?,
            scratch_valid: false,
        };
        let len = bld.backend.conv_scratch(conv.geom(bld.max_batch), s.cout);
        conv.scratch = Tensor::zeros(bld.backend, &[len])?;
        Ok(conv)
    }

    fn geom(&self, n: usize) -> ConvGeom {
        ConvGeom {
            c: self.input.c,
            n,
            h: self.input.h,
            w: self.input.w,
            kh: self.k,
            kw: self.k,
            stride: self.stride,
            pad: self.pad,
            col: self.layout,
        }
    }

    /// The bias and ReLU pass over this layer's output, `[cout, pixels]`.
    fn bias_act(&self, pixels: usize) -> BiasActGeom {
        BiasActGeom {
            rows: self.cout,
            cols: pixels,
            relu: self.relu,
        }
    }
}

impl<B: Backend> Layer<B> for Conv2d<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        let g = self.geom(1);
        Shape::new(self.cout, g.out_h(), g.out_w())
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        train: bool,
    ) -> BResult<()> {
        let g = self.geom(n);
        let ohw = g.out_h() * g.out_w();
        bufs.backend.conv_forward(ConvForwardArgs {
            x: x.view(),
            w: bufs.param(self.w),
            geom: g,
            cout: self.cout,
            y: y.view_mut(),
            scratch: self.scratch.view_mut(),
        })?;
        self.scratch_valid = train;
        if self.b.is_some() || self.relu {
            let bias = self.b.map(|b| bufs.param(b));
            bufs.backend.bias_act_forward(BiasActForwardArgs {
                y: y.view_mut(),
                bias,
                geom: self.bias_act(n * ohw),
            })?;
        }
        Ok(())
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        let b = bufs.backend;
        let g = self.geom(n);
        let ohw = g.out_h() * g.out_w();
        if self.b.is_some() || self.relu {
            let db = self.b.map(|id| bufs.grad(id));
            b.bias_act_backward(BiasActBackwardArgs {
                y: y.view(),
                dy: dy.view_mut(),
                dbias: db,
                geom: self.bias_act(n * ohw),
            })?;
        }
        let reuse = std::mem::take(&mut self.scratch_valid);
        // Parameters and gradients live in different buffers: the weights are read
        // while their gradient is written.
        let off = bufs.reg.offset(self.w);
        b.conv_backward(ConvBackwardArgs {
            x: x.view(),
            w: In::at(bufs.params, off),
            dy: dy.view(),
            geom: g,
            cout: self.cout,
            dw: Out::at(bufs.grads, off),
            dx: dx.map(|d| d.view_mut()),
            scratch: self.scratch.view_mut(),
            reuse,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::gradcheck;

    fn check(input: Shape, s: ConvSpec, n: usize) {
        gradcheck::check(
            |b| Box::new(Conv2d::new(b, "conv", input, s).unwrap()),
            input,
            n,
            |v| v,
        );
    }

    #[test]
    fn same_padding_backward_matches_finite_differences() {
        check(Shape::new(2, 5, 5), ConvSpec::same(3, 3, 1), 2);
    }

    /// 8 input channels: the CPU backend runs this one as Winograd, with the scratch
    /// the layer asks for.
    #[test]
    fn winograd_backward_matches_finite_differences() {
        check(Shape::new(8, 6, 5), ConvSpec::same(3, 3, 1), 3);
    }

    #[test]
    fn strided_with_bias_backward_matches_finite_differences() {
        let s = ConvSpec {
            bias: true,
            ..ConvSpec::same(4, 3, 2)
        };
        check(Shape::new(3, 6, 7), s, 3);
    }

    #[test]
    fn weights_and_bias_start_as_pytorchs_conv2d() {
        let b = crate::backend::CpuBackend::new();
        let mut bld = Builder::new(&b, 2);
        let s = ConvSpec {
            bias: true,
            ..ConvSpec::same(8, 3, 1)
        };
        Conv2d::new(&mut bld, "conv", Shape::new(5, 6, 6), s).unwrap();
        let want = Init::FanInUniform { fan_in: 5 * 3 * 3 };
        let inits: Vec<_> = bld.params.entries().iter().map(|e| e.init).collect();
        assert_eq!(inits, [want, want]);
    }

    #[test]
    fn one_by_one_unpadded_backward_matches_finite_differences() {
        let s = ConvSpec {
            pad: 0,
            ..ConvSpec::same(3, 1, 2)
        };
        check(Shape::new(2, 5, 4), s, 2);
    }
}
