//! 2-D convolution as im2col + GEMM over channel-major `[c, n, h, w]` activations.
//!
//! Images are processed in chunks sized by the backend's im2col budget: one chunk is one
//! im2col and one GEMM `W[cout, K] x col[K, nc*oh*ow]` (`K = c*k*k`), written straight
//! into the output's columns for those images (the GEMM's `ldc` skips the other images),
//! so no transpose is ever needed. The column matrix is stored as the backend prefers
//! ([`ColLayout`]): as `[K, P]`, or as `[P, K]` with the GEMMs reading it transposed.
//! An optional bias and ReLU are fused into one pass.

use crate::backend::{BResult, Backend, ColLayout, ConvGeom, Gemm};
use crate::error::{config, Result};
use crate::layer::{Builder, Ctx, Layer, Shape};
use crate::param::{Init, ParamId};
use crate::tensor::Tensor;

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
    /// Images per im2col chunk.
    chunk: usize,
    col: Tensor<B>,
    /// `col` still holds the columns of the last training forward (single-chunk
    /// batches only), so backward can skip recomputing them.
    col_valid: bool,
}

/// How a convolution is set up.
#[derive(Clone, Copy, Debug)]
pub struct ConvSpec {
    pub cout: usize,
    pub k: usize,
    pub stride: usize,
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
        let fan_in = input.c * s.k * s.k;
        let w = bld.params.add(
            &format!("{name}.weight"),
            &[s.cout, input.c, s.k, s.k],
            Init::Normal { fan_in, gain: 2.0 },
            true,
        );
        let b = s.bias.then(|| {
            bld.params
                .add(&format!("{name}.bias"), &[s.cout], Init::Zeros, false)
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
            chunk: 1,
            col: Tensor::zeros(bld.backend, &[0])?,
            col_valid: false,
        };
        let per_image = fan_in * conv.geom(1).out_h() * conv.geom(1).out_w();
        conv.chunk =
            (bld.backend.im2col_budget() / per_image.max(1)).clamp(1, bld.max_batch.max(1));
        conv.col = Tensor::zeros(bld.backend, &[per_image * conv.chunk])?;
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

    /// The GEMM `W[cout, K] x col -> y[cout, nc*ohw]` for a chunk of `p = nc * ohw`
    /// columns in an output whose rows hold `ld` columns.
    fn forward_gemm(&self, kdim: usize, p: usize, ld: usize) -> Gemm {
        let mut gm = match self.layout {
            ColLayout::TapMajor => Gemm::dense(false, false, self.cout, p, kdim),
            ColLayout::PixelMajor => Gemm::dense(false, true, self.cout, p, kdim),
        };
        gm.ldc = ld;
        gm
    }

    /// `dW[cout, K] (+)= dy[cout, p] x col^T` (`dy`'s rows hold `ld` columns).
    fn weight_grad_gemm(&self, kdim: usize, p: usize, ld: usize, accumulate: bool) -> Gemm {
        let mut gm = match self.layout {
            ColLayout::TapMajor => Gemm::dense(false, true, self.cout, kdim, p),
            ColLayout::PixelMajor => Gemm::dense(false, false, self.cout, kdim, p),
        };
        gm.lda = ld;
        gm.beta = if accumulate { 1.0 } else { 0.0 };
        gm
    }

    /// `dcol = W^T dy` in the column layout: `[K, p] = W^T[K, cout] dy[cout, p]`, or
    /// `[p, K] = dy^T[p, cout] W[cout, K]` (operands in that order).
    fn input_grad_gemm(&self, kdim: usize, p: usize, ld: usize) -> Gemm {
        match self.layout {
            ColLayout::TapMajor => {
                let mut gm = Gemm::dense(true, false, kdim, p, self.cout);
                gm.ldb = ld;
                gm
            }
            ColLayout::PixelMajor => {
                let mut gm = Gemm::dense(true, false, p, kdim, self.cout);
                gm.lda = ld;
                gm
            }
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
        cx: &mut Ctx<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        train: bool,
    ) -> BResult<()> {
        let g = self.geom(n);
        let ohw = g.out_h() * g.out_w();
        let kdim = g.col_rows();
        for n0 in (0..n).step_by(self.chunk) {
            let nc = self.chunk.min(n - n0);
            cx.backend
                .im2col(x.view(), g, n0, nc, self.col.view_mut())?;
            let gm = self.forward_gemm(kdim, nc * ohw, n * ohw);
            cx.backend.gemm(
                gm,
                cx.param(self.w),
                self.col.view(),
                y.view_mut_at(n0 * ohw),
            )?;
        }
        self.col_valid = train && n <= self.chunk;
        if self.b.is_some() || self.relu {
            let bias = self.b.map(|b| cx.param(b));
            cx.backend
                .bias_act_forward(y.view_mut(), bias, self.cout, n * ohw, self.relu)?;
        }
        Ok(())
    }

    fn backward(
        &mut self,
        cx: &mut Ctx<'_, B>,
        x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        mut dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        let b = cx.backend;
        let g = self.geom(n);
        let ohw = g.out_h() * g.out_w();
        let kdim = g.col_rows();
        if self.b.is_some() || self.relu {
            let db = self.b.map(|id| cx.grad(id));
            b.bias_act_backward(y.view(), dy.view_mut(), db, self.cout, n * ohw, self.relu)?;
        }
        for (i, n0) in (0..n).step_by(self.chunk).enumerate() {
            let nc = self.chunk.min(n - n0);
            if !self.col_valid {
                b.im2col(x.view(), g, n0, nc, self.col.view_mut())?;
            }
            let gw = self.weight_grad_gemm(kdim, nc * ohw, n * ohw, i > 0);
            b.gemm(gw, dy.view_at(n0 * ohw), self.col.view(), cx.grad(self.w))?;
            if let Some(dx) = dx.as_deref_mut() {
                // dcol into the same scratch, then folded back onto the images.
                let gc = self.input_grad_gemm(kdim, nc * ohw, n * ohw);
                let (w, d) = (cx.param(self.w), dy.view_at(n0 * ohw));
                let (a, bm) = match self.layout {
                    ColLayout::TapMajor => (w, d),
                    ColLayout::PixelMajor => (d, w),
                };
                b.gemm(gc, a, bm, self.col.view_mut())?;
                b.col2im(self.col.view(), g, n0, nc, dx.view_mut())?;
                self.col_valid = false;
            }
        }
        Ok(())
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

    #[test]
    fn strided_with_bias_backward_matches_finite_differences() {
        let s = ConvSpec {
            bias: true,
            ..ConvSpec::same(4, 3, 2)
        };
        check(Shape::new(3, 6, 7), s, 3);
    }

    #[test]
    fn one_by_one_unpadded_backward_matches_finite_differences() {
        let s = ConvSpec {
            pad: 0,
            ..ConvSpec::same(3, 1, 2)
        };
        check(Shape::new(2, 5, 4), s, 2);
    }

    #[test]
    fn chunked_batches_match_one_chunk() {
        // A tiny im2col budget forces one image per chunk; outputs and gradients must
        // equal the single-chunk result.
        use crate::backend::CpuBackend;
        let b = CpuBackend::new();
        let input = Shape::new(2, 6, 6);
        let n = 3;
        let mut bld = Builder::new(&b, n);
        let mut big = Conv2d::new(&mut bld, "c", input, ConvSpec::same(4, 3, 1)).unwrap();
        bld.params.finish();
        let reg = bld.params.clone();
        let mut small = Conv2d {
            chunk: 1,
            col: Tensor::zeros(&b, &[2 * 9 * 36]).unwrap(),
            col_valid: false,
            name: "c".into(),
            ..Conv2d::new(
                &mut Builder::new(&b, n),
                "c",
                input,
                ConvSpec::same(4, 3, 1),
            )
            .unwrap()
        };
        let p = Tensor::from_slice(&b, &[reg.total()], &reg.init_values(5)).unwrap();
        let xs: Vec<f32> = (0..input.numel() * n)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let x = Tensor::from_slice(&b, &[xs.len()], &xs).unwrap();
        let run = |conv: &mut Conv2d<CpuBackend>| {
            let mut g = Tensor::zeros(&b, &[reg.total()]).unwrap();
            let mut st = Tensor::zeros(&b, &[1]).unwrap();
            let mut y = Tensor::zeros(&b, &[4 * 36 * n]).unwrap();
            let mut dx = Tensor::zeros(&b, &[xs.len()]).unwrap();
            let mut cx = Ctx {
                backend: &b,
                reg: &reg,
                params: p.buf(),
                grads: g.buf_mut(),
                state_reg: &reg,
                state: st.buf_mut(),
            };
            conv.forward(&mut cx, &x, &mut y, n, true).unwrap();
            let mut dy = Tensor::from_slice(&b, &[y.len()], &y.to_vec(&b).unwrap()).unwrap();
            conv.backward(&mut cx, &x, &y, &mut dy, Some(&mut dx), n)
                .unwrap();
            (
                y.to_vec(&b).unwrap(),
                dx.to_vec(&b).unwrap(),
                g.to_vec(&b).unwrap(),
            )
        };
        let (a, c) = (run(&mut big), run(&mut small));
        let close = |u: &[f32], v: &[f32]| {
            u.iter()
                .zip(v)
                .all(|(a, b)| (a - b).abs() <= 1e-4 * a.abs().max(1.0))
        };
        assert!(close(&a.0, &c.0) && close(&a.1, &c.1) && close(&a.2, &c.2));
    }
}
