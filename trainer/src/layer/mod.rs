//! Layers: each an explicit forward and backward over a backend, in the manner of llm.c.
//!
//! A layer reads its input activation, writes its output activation, and in backward
//! turns the output gradient into its parameter gradients and (when asked) the input
//! gradient. Activations and their gradients belong to the model (planned once for the
//! largest batch); a layer owns only its scratch (im2col columns, argmax, batch
//! statistics). Parameters and their gradients live in the model's flat buffers, found
//! through the [`Registry`].
//!
//! Every gradient a backward writes is overwritten, not accumulated: each parameter has
//! exactly one writer per step, so nothing needs zeroing between steps.

pub mod act;
pub mod bce;
pub mod bn_pool;
pub mod conv;
pub mod linear;
pub mod loss;
pub mod norm;
pub mod pool;

pub use act::Relu;
pub use bce::SigmoidBce;
pub use bn_pool::BatchNormReluPool;
pub use conv::Conv2d;
pub use linear::Linear;
pub use loss::SoftmaxCrossEntropy;
pub use norm::{BatchNorm2d, DataNorm};
pub use pool::{GlobalAvgPool, MaxPool2d};

use crate::backend::{BResult, Backend, In, Out};
use crate::param::{ParamId, Registry};
use crate::tensor::Tensor;

/// Per-sample shape of an activation: `c` channels of `h x w` (a vector is `c x 1 x 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Channels (features, for a vector).
    pub c: usize,
    /// Height, in pixels.
    pub h: usize,
    /// Width, in pixels.
    pub w: usize,
}

impl Shape {
    /// `c` channels of `h x w`.
    pub fn new(c: usize, h: usize, w: usize) -> Self {
        Self { c, h, w }
    }
    /// A vector of `c` features: `c x 1 x 1`.
    pub fn vector(c: usize) -> Self {
        Self { c, h: 1, w: 1 }
    }
    /// Elements per sample, `c * h * w`.
    pub fn numel(&self) -> usize {
        self.c * self.h * self.w
    }
    /// Pixels per channel, `h * w`.
    pub fn hw(&self) -> usize {
        self.h * self.w
    }
}

/// What layers register themselves with while a model is built.
pub struct Builder<'a, B: Backend> {
    /// The backend the layers allocate their scratch on.
    pub backend: &'a B,
    /// Trained parameters (one flat buffer, with a twin for gradients).
    pub params: Registry,
    /// Non-trained state that checkpoints must keep (batch norm running statistics).
    pub state: Registry,
    /// Largest batch any call will use: scratch buffers are sized for it.
    pub max_batch: usize,
}

impl<'a, B: Backend> Builder<'a, B> {
    /// Empty registries, for layers that run batches of up to `max_batch` on `backend`.
    pub fn new(backend: &'a B, max_batch: usize) -> Self {
        Self {
            backend,
            params: Registry::new(),
            state: Registry::new(),
            max_batch,
        }
    }
}

/// The model's flat buffers, lent to a layer for one call.
pub struct ModelBuffers<'a, B: Backend> {
    /// The backend that runs the layer's ops.
    pub backend: &'a B,
    /// Layout of `params` and `grads`.
    pub reg: &'a Registry,
    /// The flat parameter buffer.
    pub params: &'a B::Buf<f32>,
    /// The flat gradient buffer, laid out as `params`.
    pub grads: &'a mut B::Buf<f32>,
    /// Layout of `state`.
    pub state_reg: &'a Registry,
    /// The flat state buffer (batch-norm running statistics).
    pub state: &'a mut B::Buf<f32>,
}

impl<B: Backend> ModelBuffers<'_, B> {
    /// A parameter's values.
    pub fn param(&self, id: ParamId) -> In<'_, B> {
        In::at(self.params, self.reg.offset(id))
    }
    /// A parameter's gradient.
    pub fn grad(&mut self, id: ParamId) -> Out<'_, B> {
        Out::at(self.grads, self.reg.offset(id))
    }
    /// A state entry.
    pub fn state_entry(&mut self, id: ParamId) -> Out<'_, B> {
        Out::at(self.state, self.state_reg.offset(id))
    }
}

/// One layer of a model. `n` is the batch size of the call (at most the planned maximum).
pub trait Layer<B: Backend>: Send {
    /// Name in summaries and profiles; the prefix of its parameters' names (`conv1` for
    /// `conv1.weight`).
    fn name(&self) -> &str;
    /// Per-sample shape of the output activation.
    fn out_shape(&self) -> Shape;
    /// `y = f(x)`; `train` selects batch statistics over running ones.
    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        train: bool,
    ) -> BResult<()>;
    /// From `dy` (which the layer may overwrite), writes the parameter gradients and,
    /// if `dx` is given, the input gradient. Follows a training-mode `forward` of the
    /// same batch.
    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()>;
}

#[cfg(test)]
pub(crate) mod gradcheck {
    //! Finite-difference checks shared by the layer tests.

    use super::*;
    use crate::backend::{Buffers, CpuBackend};
    use crate::rng::Rng;

    /// Central-difference step. The loss is summed in f64 from f32 outputs, so its
    /// rounding error is about 1e-6; divided by 2 * EPS that is ~5e-4, well inside TOL.
    const EPS: f32 = 1e-3;
    /// Mismatch allowed: `|numeric - analytic| <= TOL * max(1, |analytic|)`.
    pub const TOL: f64 = 2e-2;

    /// Checks `layer`'s backward against central differences of `L = sum(y * r)` for a
    /// random `r`, for the input gradient and every parameter gradient (a sample of at
    /// most 64 entries of each). `x_fn` maps random normals to inputs (to keep inputs
    /// away from a ReLU's kink, for example).
    pub fn check(
        build: impl FnOnce(&mut Builder<'_, CpuBackend>) -> Box<dyn Layer<CpuBackend>>,
        inp: Shape,
        n: usize,
        x_fn: impl Fn(f32) -> f32,
    ) {
        let b = CpuBackend::new();
        let mut bld = Builder::new(&b, n);
        let mut layer = build(&mut bld);
        bld.params.finish();
        bld.state.finish();
        let (reg, sreg) = (bld.params.clone(), bld.state.clone());
        let mut rng = Rng::new(42);
        // Perturb every parameter so zero biases or unit gammas cannot hide a bug.
        let p0: Vec<f32> = reg
            .init_values(3)
            .iter()
            .map(|v| v + 0.3 * rng.normal() as f32)
            .collect();
        let x0: Vec<f32> = (0..inp.numel() * n)
            .map(|_| x_fn(rng.normal() as f32))
            .collect();
        let out = layer.out_shape();
        let r: Vec<f32> = (0..out.numel() * n).map(|_| rng.normal() as f32).collect();
        let s0 = sreg.init_values(0);

        let mut params = Tensor::from_slice(&b, &[p0.len()], &p0).unwrap();
        let mut grads = Tensor::zeros(&b, &[p0.len()]).unwrap();
        let mut state = Tensor::from_slice(&b, &[s0.len().max(1)], &{
            let mut s = s0.clone();
            s.resize(s0.len().max(1), 0.0);
            s
        })
        .unwrap();
        let mut x = Tensor::from_slice(&b, &[x0.len()], &x0).unwrap();
        let mut y = Tensor::zeros(&b, &[r.len()]).unwrap();
        let mut dy = Tensor::zeros(&b, &[r.len()]).unwrap();
        let mut dx = Tensor::zeros(&b, &[x0.len()]).unwrap();

        let loss = |layer: &mut Box<dyn Layer<CpuBackend>>,
                    params: &Tensor<CpuBackend>,
                    grads: &mut Tensor<CpuBackend>,
                    state: &mut Tensor<CpuBackend>,
                    x: &Tensor<CpuBackend>,
                    y: &mut Tensor<CpuBackend>| {
            let mut bufs = ModelBuffers {
                backend: &b,
                reg: &reg,
                params: params.buf(),
                grads: grads.buf_mut(),
                state_reg: &sreg,
                state: state.buf_mut(),
            };
            layer.forward(&mut bufs, x, y, n, true).unwrap();
            let yv = y.to_vec(&b).unwrap();
            yv.iter()
                .zip(&r)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
        };

        loss(&mut layer, &params, &mut grads, &mut state, &x, &mut y);
        b.upload(&r, dy.view_mut()).unwrap();
        {
            let mut bufs = ModelBuffers {
                backend: &b,
                reg: &reg,
                params: params.buf(),
                grads: grads.buf_mut(),
                state_reg: &sreg,
                state: state.buf_mut(),
            };
            layer
                .backward(&mut bufs, &x, &y, &mut dy, Some(&mut dx), n)
                .unwrap();
        }
        let dxv = dx.to_vec(&b).unwrap();
        let gv = grads.to_vec(&b).unwrap();

        let pick = |len: usize, rng: &mut Rng| -> Vec<usize> {
            if len <= 64 {
                (0..len).collect()
            } else {
                (0..64)
                    .map(|_| (rng.next_u64() % len as u64) as usize)
                    .collect()
            }
        };
        let name = layer.name().to_string();
        let agree = |what: &str, i: usize, num: f64, ana: f64| {
            assert!(
                (num - ana).abs() <= TOL * ana.abs().max(1.0),
                "{name}: d{what}[{i}] numeric {num} vs analytic {ana}"
            );
        };
        for i in pick(x0.len(), &mut rng) {
            let mut xp = x0.clone();
            xp[i] += EPS;
            b.upload(&xp, x.view_mut()).unwrap();
            let lp = loss(&mut layer, &params, &mut grads, &mut state, &x, &mut y);
            xp[i] -= 2.0 * EPS;
            b.upload(&xp, x.view_mut()).unwrap();
            let lm = loss(&mut layer, &params, &mut grads, &mut state, &x, &mut y);
            agree("x", i, (lp - lm) / (2.0 * EPS as f64), dxv[i] as f64);
        }
        b.upload(&x0, x.view_mut()).unwrap();
        for i in pick(p0.len(), &mut rng) {
            let mut pp = p0.clone();
            pp[i] += EPS;
            b.upload(&pp, params.view_mut()).unwrap();
            let lp = loss(&mut layer, &params, &mut grads, &mut state, &x, &mut y);
            pp[i] -= 2.0 * EPS;
            b.upload(&pp, params.view_mut()).unwrap();
            let lm = loss(&mut layer, &params, &mut grads, &mut state, &x, &mut y);
            agree("param", i, (lp - lm) / (2.0 * EPS as f64), gv[i] as f64);
        }
    }
}
