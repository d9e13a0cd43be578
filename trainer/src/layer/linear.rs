//! Fully connected layer `y = act(W x + b)` on `[features, n]` activations, with the
//! bias and optional ReLU fused into one pass after the GEMM.

use crate::backend::{
    BResult, Backend, BiasActBackwardArgs, BiasActForwardArgs, BiasActGeom, Gemm, GemmArgs,
};
use crate::error::{config, Result};
use crate::layer::{Builder, Layer, ModelBuffers, Shape};
use crate::param::{Init, ParamId};
use crate::tensor::Tensor;

/// `y[out, n] = W[out, in] x[in, n] + b[out]`, then a ReLU if asked; parameters
/// `<name>.weight` `[out, in]` (decayed) and `<name>.bias` `[out]`.
pub struct Linear {
    name: String,
    in_features: usize,
    out_features: usize,
    relu: bool,
    w: ParamId,
    b: ParamId,
}

impl Linear {
    /// `input` must be a vector shape. `relu` fuses a ReLU after the bias. Weights and
    /// bias start as PyTorch's `Linear` does (docs/trainer.md, "Initialisation").
    pub fn new<B: Backend>(
        bld: &mut Builder<'_, B>,
        name: &str,
        input: Shape,
        out_features: usize,
        relu: bool,
    ) -> Result<Self> {
        if input.h != 1 || input.w != 1 || input.c == 0 || out_features == 0 {
            return Err(config(
                name,
                format!(
                    "linear needs a non-empty vector input and output, got {input:?} -> {out_features}"
                ),
            ));
        }
        let init = Init::FanInUniform { fan_in: input.c };
        let w = bld.params.add(
            &format!("{name}.weight"),
            &[out_features, input.c],
            init,
            true,
        );
        let b = bld
            .params
            .add(&format!("{name}.bias"), &[out_features], init, false);
        Ok(Self {
            name: name.to_string(),
            in_features: input.c,
            out_features,
            relu,
            w,
            b,
        })
    }

    /// The bias and ReLU pass over this layer's output for `n` samples.
    fn bias_act(&self, n: usize) -> BiasActGeom {
        BiasActGeom {
            rows: self.out_features,
            cols: n,
            relu: self.relu,
        }
    }
}

impl<B: Backend> Layer<B> for Linear {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        Shape::vector(self.out_features)
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        _train: bool,
    ) -> BResult<()> {
        // y[out, n] = W[out, in] x[in, n]
        bufs.backend.gemm(GemmArgs {
            spec: Gemm::dense(false, false, self.out_features, n, self.in_features),
            a: bufs.param(self.w),
            b: x.view(),
            c: y.view_mut(),
        })?;
        bufs.backend.bias_act_forward(BiasActForwardArgs {
            y: y.view_mut(),
            bias: Some(bufs.param(self.b)),
            geom: self.bias_act(n),
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
        let (b, w, bias) = (bufs.backend, self.w, self.b);
        // dz = dy * relu'(z), in place; db = row sums of dz.
        b.bias_act_backward(BiasActBackwardArgs {
            y: y.view(),
            dy: dy.view_mut(),
            dbias: Some(bufs.grad(bias)),
            geom: self.bias_act(n),
        })?;
        // dW[out, in] = dz[out, n] x[in, n]^T
        b.gemm(GemmArgs {
            spec: Gemm::dense(false, true, self.out_features, self.in_features, n),
            a: dy.view(),
            b: x.view(),
            c: bufs.grad(w),
        })?;
        if let Some(dx) = dx {
            // dx[in, n] = W[out, in]^T dz[out, n]
            b.gemm(GemmArgs {
                spec: Gemm::dense(true, false, self.in_features, n, self.out_features),
                a: bufs.param(w),
                b: dy.view(),
                c: dx.view_mut(),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::gradcheck;

    #[test]
    fn backward_matches_finite_differences() {
        gradcheck::check(
            |b| Box::new(Linear::new(b, "fc", Shape::vector(7), 5, false).unwrap()),
            Shape::vector(7),
            4,
            |v| v,
        );
    }

    #[test]
    fn fused_relu_backward_matches_finite_differences() {
        gradcheck::check(
            |b| Box::new(Linear::new(b, "fc", Shape::vector(6), 9, true).unwrap()),
            Shape::vector(6),
            3,
            |v| v,
        );
    }

    #[test]
    fn weights_and_bias_start_as_pytorchs_linear() {
        let b = crate::backend::CpuBackend::new();
        let mut bld = Builder::new(&b, 2);
        Linear::new(&mut bld, "fc", Shape::vector(12), 4, true).unwrap();
        let want = Init::FanInUniform { fan_in: 12 };
        let inits: Vec<_> = bld.params.entries().iter().map(|e| e.init).collect();
        assert_eq!(inits, [want, want]);
    }

    #[test]
    fn rejects_spatial_input() {
        let b = crate::backend::CpuBackend::new();
        let mut bld = Builder::new(&b, 2);
        assert!(Linear::new(&mut bld, "fc", Shape::new(3, 2, 2), 4, false).is_err());
    }
}
