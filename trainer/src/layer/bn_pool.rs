//! `BatchNormReluPool`: batch norm, ReLU and 2x2 max pooling as one layer, through the
//! backend's fused op. Its parameters and state have the names a `BatchNorm2d` of the
//! same name registers (`<bn>.weight`, `<bn>.running_mean`, ...), so checkpoints read
//! the same either way; only the full-size activation between the norm and the pool is
//! gone.

use crate::backend::{
    BResult, Backend, BnPoolGeom, BnReluPoolBackwardArgs, BnReluPoolForwardArgs, In, Out,
};
use crate::error::{config, Result};
use crate::layer::norm::BnParams;
use crate::layer::{Builder, Layer, ModelBuffers, Shape};
use crate::tensor::Tensor;

/// `maxpool2x2(relu(batchnorm(x)))` over `[c, n, h, w]`, giving `[c, n, h / 2, w / 2]`.
pub struct BatchNormReluPool<B: Backend> {
    /// Shown in summaries and profiles: `<bn>+<pool>`.
    name: String,
    input: Shape,
    eps: f32,
    momentum: f32,
    params: BnParams,
    /// `[mean(c), inv_std(c)]` of the last training batch.
    saved: Tensor<B>,
    /// Each window's winner, in the backend's format.
    winners: B::Buf<u32>,
    /// The backend's scratch for the fused op (empty on the CPU).
    scratch: Tensor<B>,
}

impl<B: Backend> BatchNormReluPool<B> {
    /// Batch norm `bn` (PyTorch's defaults: eps 1e-5, momentum 0.1) with a ReLU, then
    /// max pooling 2x2 with stride 2 named `pool`, over `input` (at least 2x2).
    pub fn new(bld: &mut Builder<'_, B>, bn: &str, pool: &str, input: Shape) -> Result<Self> {
        let name = format!("{bn}+{pool}");
        if input.c == 0 || input.h < 2 || input.w < 2 {
            return Err(config(
                &name,
                format!("batch norm + 2x2 pool on {input:?}: needs channels and 2x2 planes"),
            ));
        }
        // The same parameters, under the same names, as a BatchNorm2d named `bn`.
        let params = BnParams::register(bld, bn, input.c);
        let mut layer = Self {
            name,
            input,
            eps: 1e-5,
            momentum: 0.1,
            params,
            saved: Tensor::zeros(bld.backend, &[2 * input.c])?,
            winners: bld.backend.alloc(0)?,
            scratch: Tensor::zeros(bld.backend, &[0])?,
        };
        let g = layer.geom(bld.max_batch);
        layer.winners = bld.backend.alloc(g.c * g.n * g.out_h() * g.out_w())?;
        let scratch = bld.backend.bn_relu_pool_scratch(g);
        layer.scratch = Tensor::zeros(bld.backend, &[scratch])?;
        Ok(layer)
    }

    fn geom(&self, n: usize) -> BnPoolGeom {
        BnPoolGeom {
            c: self.input.c,
            n,
            h: self.input.h,
            w: self.input.w,
            eps: self.eps,
            momentum: self.momentum,
        }
    }
}

impl<B: Backend> Layer<B> for BatchNormReluPool<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        let g = self.geom(1);
        Shape::new(self.input.c, g.out_h(), g.out_w())
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
        let state =
            self.params
                .state(bufs, "bn_relu_pool", &self.name, x, &mut self.saved, train)?;
        backend.bn_relu_pool_forward(BnReluPoolForwardArgs {
            state,
            y: y.view_mut(),
            winners: Out::new(&mut self.winners),
            scratch: self.scratch.view_mut(),
            g,
        })
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        _y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        let g = self.geom(n);
        let backend = bufs.backend;
        let grads = self.params.grads(
            bufs,
            "bn_relu_pool_backward",
            &self.name,
            x,
            &self.saved,
            dx,
        )?;
        backend.bn_relu_pool_backward(BnReluPoolBackwardArgs {
            grads,
            dy: dy.view(),
            winners: In::new(&self.winners),
            scratch: self.scratch.view_mut(),
            g,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::layer::{gradcheck, BatchNorm2d, MaxPool2d};

    #[test]
    fn backward_matches_finite_differences() {
        let s = Shape::new(3, 4, 6);
        gradcheck::check(
            |b| Box::new(BatchNormReluPool::new(b, "bn", "pool", s).unwrap()),
            s,
            3,
            |v| v,
        );
    }

    #[test]
    fn odd_planes_backward_matches_finite_differences() {
        // The last row and column are dropped by the pool, yet still in the statistics.
        let s = Shape::new(2, 5, 7);
        gradcheck::check(
            |b| Box::new(BatchNormReluPool::new(b, "bn", "pool", s).unwrap()),
            s,
            2,
            |v| v,
        );
    }

    /// Runs `layers` in sequence (training forward, backward of `dy0`, eval forward) and
    /// returns y, dx, parameter gradients, state, eval y.
    fn run(
        layers: &mut [Box<dyn Layer<CpuBackend>>],
        bld: Builder<'_, CpuBackend>,
        n: usize,
        x0: &[f32],
        dy0: &[f32],
    ) -> Vec<Vec<f32>> {
        let b = bld.backend;
        let (reg, sreg) = (bld.params, bld.state);
        let p0: Vec<f32> = reg
            .init_values(1)
            .iter()
            .enumerate()
            .map(|(i, v)| v + (i as f32 * 1.9).cos() * 1.5)
            .collect();
        let params = Tensor::from_slice(b, &[p0.len()], &p0).unwrap();
        let mut grads = Tensor::zeros(b, &[p0.len()]).unwrap();
        let mut state = Tensor::from_slice(b, &[sreg.total()], &sreg.init_values(0)).unwrap();
        let x = Tensor::from_slice(b, &[x0.len()], x0).unwrap();
        let mut acts = vec![x];
        for l in layers.iter() {
            acts.push(Tensor::zeros(b, &[l.out_shape().numel() * n]).unwrap());
        }
        let mut bufs = ModelBuffers {
            backend: b,
            reg: &reg,
            params: params.buf(),
            grads: grads.buf_mut(),
            state_reg: &sreg,
            state: state.buf_mut(),
        };
        for (i, l) in layers.iter_mut().enumerate() {
            let (lo, hi) = acts.split_at_mut(i + 1);
            l.forward(&mut bufs, &lo[i], &mut hi[0], n, true).unwrap();
        }
        let y = acts.last().unwrap().to_vec(b).unwrap();
        let mut d = Tensor::from_slice(b, &[dy0.len()], dy0).unwrap();
        for (i, l) in layers.iter_mut().enumerate().rev() {
            let mut dx = Tensor::zeros(b, &[acts[i].len()]).unwrap();
            l.backward(&mut bufs, &acts[i], &acts[i + 1], &mut d, Some(&mut dx), n)
                .unwrap();
            d = dx;
        }
        let dx = d.to_vec(b).unwrap();
        for (i, l) in layers.iter_mut().enumerate() {
            let (lo, hi) = acts.split_at_mut(i + 1);
            l.forward(&mut bufs, &lo[i], &mut hi[0], n, false).unwrap();
        }
        let ye = acts.last().unwrap().to_vec(b).unwrap();
        vec![
            y,
            dx,
            grads.to_vec(b).unwrap(),
            state.to_vec(b).unwrap(),
            ye,
        ]
    }

    /// Against BatchNorm2d (ReLU) + MaxPool2d: the forward (train and eval) and the
    /// running statistics bit for bit, the gradients to rounding; on odd planes, with
    /// ties after the ReLU, and with a negative gamma (so the pool cannot be moved
    /// before the norm).
    #[test]
    fn matches_the_separate_layers() {
        let b = CpuBackend::new();
        for (s, n) in [(Shape::new(4, 6, 8), 3), (Shape::new(3, 5, 7), 2)] {
            let x0: Vec<f32> = (0..s.numel() * n)
                .map(|i| (i as f32 * 0.61).sin() * 2.0 + 0.3)
                .collect();
            let out = Shape::new(s.c, s.h / 2, s.w / 2);
            let dy0: Vec<f32> = (0..out.numel() * n)
                .map(|i| (i as f32 * 0.29).cos())
                .collect();
            let mut bld = Builder::new(&b, n);
            let mut fused: Vec<Box<dyn Layer<CpuBackend>>> = vec![Box::new(
                BatchNormReluPool::new(&mut bld, "bn", "pool", s).unwrap(),
            )];
            bld.params.finish();
            bld.state.finish();
            let f = run(&mut fused, bld, n, &x0, &dy0);
            let mut bld = Builder::new(&b, n);
            let mut sep: Vec<Box<dyn Layer<CpuBackend>>> = vec![
                Box::new(BatchNorm2d::new(&mut bld, "bn", s, true).unwrap()),
                Box::new(MaxPool2d::new(&mut bld, "pool", s, 2, 2).unwrap()),
            ];
            bld.params.finish();
            bld.state.finish();
            let u = run(&mut sep, bld, n, &x0, &dy0);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for i in [0, 3, 4] {
                assert_eq!(bits(&f[i]), bits(&u[i]), "{s:?}: output {i}");
            }
            assert!(f[0].contains(&0.0) && f[0].iter().any(|&v| v > 0.0));
            for i in [1, 2] {
                for (j, (a, c)) in f[i].iter().zip(&u[i]).enumerate() {
                    assert!(
                        (a - c).abs() <= 1e-5 * (1.0 + c.abs()),
                        "{s:?}: output {i}[{j}] {a} vs {c}"
                    );
                }
            }
        }
    }
}
