//! Normalisation: `BatchNorm2d` (batch statistics in training, running ones in eval,
//! optional fused ReLU) and `DataNorm`, the model's first layer, which turns the
//! loader's u8 NHWC batch into normalised f32 on the compute device.

use crate::backend::{
    BResult, Backend, BackendError, BatchNormBackwardArgs, BatchNormForwardArgs, BnGeom, BnGrads,
    BnState, DataLayout, DataNormArgs, In, Out,
};
use crate::error::{config, Result};
use crate::layer::{Builder, Layer, ModelBuffers, Shape};
use crate::param::{Init, ParamId};
use crate::tensor::Tensor;

/// Batch norm over `[c, n, h, w]`, per channel, with an optional fused ReLU; shape
/// unchanged. Parameters `<name>.weight` (gamma) and `<name>.bias` (beta), state
/// `<name>.running_mean` and `<name>.running_var`, all `[c]` and never decayed.
pub struct BatchNorm2d<B: Backend> {
    name: String,
    shape: Shape,
    relu: bool,
    eps: f32,
    momentum: f32,
    params: BnParams,
    /// `[mean(c), inv_std(c)]` of the last training batch.
    saved: Tensor<B>,
}

/// A batch norm's parameters (gamma, beta) and running statistics (mean, var), shared
/// by [`BatchNorm2d`] and the fused batch norm + pool layer.
pub(super) struct BnParams {
    /// Channels.
    c: usize,
    gamma: ParamId,
    beta: ParamId,
    running_mean: ParamId,
    running_var: ParamId,
}

impl BnParams {
    /// Registers `{name}.weight`, `.bias`, `.running_mean` and `.running_var` for `c`
    /// channels, back to back in the no-decay group: the ops take [gamma, beta] and
    /// [mean, var] as one contiguous span each.
    pub(super) fn register<B: Backend>(bld: &mut Builder<'_, B>, name: &str, c: usize) -> Self {
        let c = [c];
        let mut param = |state: bool, what: &str, init| {
            let reg = if state {
                &mut bld.state
            } else {
                &mut bld.params
            };
            reg.add(&format!("{name}.{what}"), &c, init, false)
        };
        Self {
            c: c[0],
            gamma: param(false, "weight", Init::Ones),
            beta: param(false, "bias", Init::Zeros),
            running_mean: param(true, "running_mean", Init::Zeros),
            running_var: param(true, "running_var", Init::Ones),
        }
    }

    /// Offsets of [gamma, beta] in the parameters and of [mean, var] in the state,
    /// after checking that each pair is contiguous (`op` and `layer` name a failure).
    fn offsets<B: Backend>(
        &self,
        bufs: &ModelBuffers<'_, B>,
        op: &'static str,
        layer: &str,
    ) -> BResult<(usize, usize)> {
        let c = self.c;
        let goff = bufs.reg.offset(self.gamma);
        let roff = bufs.state_reg.offset(self.running_mean);
        if bufs.reg.offset(self.beta) == goff + c
            && bufs.state_reg.offset(self.running_var) == roff + c
        {
            Ok((goff, roff))
        } else {
            Err(BackendError::Op {
                op,
                reason: format!("{layer}: gamma/beta or running stats not adjacent"),
            })
        }
    }

    /// What the forward reads and updates besides its output: `x`, [gamma, beta], the
    /// running statistics and `saved` (`op` and `layer` name a failure).
    pub(super) fn state<'a, B: Backend>(
        &self,
        bufs: &'a mut ModelBuffers<'_, B>,
        op: &'static str,
        layer: &str,
        x: &'a Tensor<B>,
        saved: &'a mut Tensor<B>,
        train: bool,
    ) -> BResult<BnState<'a, B>> {
        let (goff, roff) = self.offsets(bufs, op, layer)?;
        Ok(BnState {
            x: x.view(),
            gamma_beta: In::at(bufs.params, goff),
            running: Out::at(bufs.state, roff),
            saved: saved.view_mut(),
            train,
        })
    }

    /// What the backward reads and writes besides the gradient that reaches it.
    pub(super) fn grads<'a, B: Backend>(
        &self,
        bufs: &'a mut ModelBuffers<'_, B>,
        op: &'static str,
        layer: &str,
        x: &'a Tensor<B>,
        saved: &'a Tensor<B>,
        dx: Option<&'a mut Tensor<B>>,
    ) -> BResult<BnGrads<'a, B>> {
        let (goff, _) = self.offsets(bufs, op, layer)?;
        // The parameter gradients come from the same pass as dx, so the pass needs
        // somewhere to write dx; a batch norm always follows a layer that wants it (no
        // model starts with one), so no dx is a wiring mistake, not a case to serve.
        let Some(dx) = dx else {
            return Err(BackendError::Op {
                op,
                reason: format!("{layer}: input gradient is required"),
            });
        };
        Ok(BnGrads {
            x: x.view(),
            gamma_beta: In::at(bufs.params, goff),
            saved: saved.view(),
            dgamma_beta: Out::at(bufs.grads, goff),
            dx: dx.view_mut(),
        })
    }
}

impl<B: Backend> BatchNorm2d<B> {
    /// PyTorch's defaults: eps 1e-5, momentum 0.1. `relu` fuses a ReLU after it.
    pub fn new(bld: &mut Builder<'_, B>, name: &str, shape: Shape, relu: bool) -> Result<Self> {
        if shape.c == 0 {
            return Err(config(name, "batch norm over zero channels"));
        }
        let params = BnParams::register(bld, name, shape.c);
        Ok(Self {
            name: name.to_string(),
            shape,
            relu,
            eps: 1e-5,
            momentum: 0.1,
            params,
            saved: Tensor::zeros(bld.backend, &[2 * shape.c])?,
        })
    }

    fn geom(&self, n: usize) -> BnGeom {
        BnGeom {
            c: self.shape.c,
            n,
            hw: self.shape.hw(),
            eps: self.eps,
            momentum: self.momentum,
            relu: self.relu,
        }
    }
}

impl<B: Backend> Layer<B> for BatchNorm2d<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        self.shape
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
        let backend = bufs.backend;
        let state = self
            .params
            .state(bufs, "batchnorm", &self.name, x, &mut self.saved, train)?;
        backend.batchnorm_forward(BatchNormForwardArgs {
            state,
            y: y.view_mut(),
            bn: g,
        })
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
        let backend = bufs.backend;
        let grads =
            self.params
                .grads(bufs, "batchnorm_backward", &self.name, x, &self.saved, dx)?;
        backend.batchnorm_backward(BatchNormBackwardArgs {
            grads,
            y: y.view(),
            dy: dy.view(),
            bn: self.geom(n),
        })
    }
}

/// u8 NHWC batch -> `(x / 255 - mean) / std` in f32, per channel, on the device.
pub struct DataNorm {
    /// Image height, in pixels.
    pub h: usize,
    /// Image width, in pixels.
    pub w: usize,
    /// Channels per pixel.
    pub c: usize,
    /// Per-channel mean, in units of the [0, 1] pixel range.
    pub mean: Vec<f32>,
    /// Per-channel standard deviation, in units of the [0, 1] pixel range (positive).
    pub std: Vec<f32>,
    /// Layout of the f32 output: `[c, n, h, w]` or `[h * w * c, n]`.
    pub layout: DataLayout,
}

impl DataNorm {
    /// `mean` and `std` are per channel, in units of the [0, 1] pixel range.
    pub fn new(
        (h, w, c): (usize, usize, usize),
        mean: &[f32],
        std: &[f32],
        layout: DataLayout,
    ) -> Result<Self> {
        if mean.len() != c || std.len() != c {
            return Err(config(
                "datanorm",
                format!(
                    "{c} channels but {} means and {} stds",
                    mean.len(),
                    std.len()
                ),
            ));
        }
        if std.iter().any(|s| !(s.is_finite() && *s > 0.0)) || mean.iter().any(|m| !m.is_finite()) {
            return Err(config(
                "datanorm",
                "std must be positive and finite, mean finite",
            ));
        }
        Ok(Self {
            h,
            w,
            c,
            mean: mean.to_vec(),
            std: std.to_vec(),
            layout,
        })
    }

    /// Per-sample output shape.
    pub fn out_shape(&self) -> Shape {
        match self.layout {
            DataLayout::ChannelMajor => Shape::new(self.c, self.h, self.w),
            DataLayout::FeatureMajor => Shape::vector(self.h * self.w * self.c),
        }
    }

    /// Normalises `n` u8 NHWC images from `images` into `y`, in `layout`.
    pub fn forward<B: Backend>(
        &self,
        b: &B,
        images: In<'_, B, u8>,
        n: usize,
        y: &mut Tensor<B>,
    ) -> BResult<()> {
        b.datanorm(DataNormArgs {
            x: images,
            n,
            h: self.h,
            w: self.w,
            mean: &self.mean,
            std: &self.std,
            layout: self.layout,
            y: y.view_mut(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Buffers, CpuBackend};
    use crate::layer::gradcheck;

    #[test]
    fn batchnorm_backward_matches_finite_differences() {
        let s = Shape::new(3, 2, 3);
        gradcheck::check(
            |b| Box::new(BatchNorm2d::new(b, "bn", s, false).unwrap()),
            s,
            4,
            |v| v,
        );
    }

    #[test]
    fn batchnorm_relu_backward_matches_finite_differences() {
        let s = Shape::new(2, 3, 3);
        gradcheck::check(
            |b| Box::new(BatchNorm2d::new(b, "bn", s, true).unwrap()),
            s,
            3,
            |v| v,
        );
    }

    #[test]
    fn batchnorm_running_stats_and_eval_mode() {
        let b = CpuBackend::new();
        let s = Shape::new(1, 1, 2);
        let mut bld = Builder::new(&b, 2);
        let mut bn = BatchNorm2d::new(&mut bld, "bn", s, false).unwrap();
        bld.params.finish();
        bld.state.finish();
        let p = Tensor::from_slice(&b, &[2], &bld.params.init_values(0)).unwrap();
        let mut g = Tensor::zeros(&b, &[2]).unwrap();
        let mut st = Tensor::from_slice(&b, &[2], &bld.state.init_values(0)).unwrap();
        let x = Tensor::from_slice(&b, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let mut y = Tensor::zeros(&b, &[4]).unwrap();
        let mut bufs = ModelBuffers {
            backend: &b,
            reg: &bld.params,
            params: p.buf(),
            grads: g.buf_mut(),
            state_reg: &bld.state,
            state: st.buf_mut(),
        };
        bn.forward(&mut bufs, &x, &mut y, 2, true).unwrap();
        let yv = y.to_vec(&b).unwrap();
        let mean: f32 = yv.iter().sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6);
        // running = 0.9 * init + 0.1 * batch (unbiased variance 5/3).
        let sv = st.to_vec(&b).unwrap();
        assert!((sv[0] - 0.25).abs() < 1e-6, "{sv:?}");
        assert!((sv[1] - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{sv:?}");
        // Eval uses running stats: y = (x - 0.25) / sqrt(var + eps).
        let mut bufs = ModelBuffers {
            backend: &b,
            reg: &bld.params,
            params: p.buf(),
            grads: g.buf_mut(),
            state_reg: &bld.state,
            state: st.buf_mut(),
        };
        bn.forward(&mut bufs, &x, &mut y, 2, false).unwrap();
        let yv = y.to_vec(&b).unwrap();
        let want = (1.0 - 0.25) / (sv[1] + 1e-5).sqrt();
        assert!((yv[0] - want).abs() < 1e-5);
    }

    #[test]
    fn datanorm_layouts() {
        let b = CpuBackend::new();
        // n=2, h=1, w=2, c=2: NHWC bytes.
        let img: [u8; 8] = [0, 255, 51, 102, 255, 0, 153, 204];
        let mut ib = b.alloc::<u8>(8).unwrap();
        b.upload(&img, Out::new(&mut ib)).unwrap();
        let (mean, std) = ([0.5, 0.0], [0.5, 2.0]);
        let f = |v: u8, ch: usize| (v as f32 / 255.0 - mean[ch]) / std[ch];
        let mut y = Tensor::zeros(&b, &[8]).unwrap();
        let dn = DataNorm::new((1, 2, 2), &mean, &std, DataLayout::ChannelMajor).unwrap();
        dn.forward(&b, In::new(&ib), 2, &mut y).unwrap();
        // [c, n, h*w]
        let want = [
            f(0, 0),
            f(51, 0),
            f(255, 0),
            f(153, 0),
            f(255, 1),
            f(102, 1),
            f(0, 1),
            f(204, 1),
        ];
        let got = y.to_vec(&b).unwrap();
        assert!(
            got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{got:?}"
        );
        let dn = DataNorm::new((1, 2, 2), &mean, &std, DataLayout::FeatureMajor).unwrap();
        dn.forward(&b, In::new(&ib), 2, &mut y).unwrap();
        // [h*w*c, n]
        let want = [
            f(0, 0),
            f(255, 0),
            f(255, 1),
            f(0, 1),
            f(51, 0),
            f(153, 0),
            f(102, 1),
            f(204, 1),
        ];
        let got = y.to_vec(&b).unwrap();
        assert!(
            got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{got:?}"
        );
        assert!(DataNorm::new((1, 2, 2), &mean, &[0.5, 0.0], DataLayout::ChannelMajor).is_err());
    }
}
