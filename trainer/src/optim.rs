//! Optimizers over the model's one flat parameter buffer: each step is one fused pass
//! (a single backend call) over every parameter, its gradient and the optimizer's state.
//! Weight decay applies to the leading `decay_len` elements (weights), not to biases or
//! batch-norm parameters; see [`crate::param`].

use crate::backend::{AdamWStep, AdamWStepArgs, Backend, FlatParams, SgdStep, SgdStepArgs};
use crate::error::{config, Result};
use crate::model::Model;
use crate::tensor::Tensor;

/// Which update rule, and its hyper-parameters (the learning rate comes per step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// PyTorch's SGD: `v = momentum * v + (g + wd * p)`, `p -= lr * v` (or the
    /// Nesterov form `p -= lr * (g + wd * p + momentum * v)`).
    Sgd {
        /// Momentum coefficient (0 for plain SGD).
        momentum: f32,
        /// L2 penalty added to the gradient of the decayed elements.
        weight_decay: f32,
        /// Use the Nesterov form.
        nesterov: bool,
    },
    /// AdamW (decoupled decay): `p -= lr * wd * p`, then the bias-corrected Adam step.
    AdamW {
        /// Decay of the gradient's running mean, in [0, 1) (usually 0.9).
        beta1: f32,
        /// Decay of the squared gradient's running mean, in [0, 1) (usually 0.999).
        beta2: f32,
        /// Added to the denominator's square root, against division by 0.
        eps: f32,
        /// Decoupled decay rate of the decayed elements (scaled by `lr` each step).
        weight_decay: f32,
    },
}

impl OptimizerKind {
    /// SGD with `momentum` and `weight_decay`, without Nesterov.
    pub fn sgd(momentum: f32, weight_decay: f32) -> Self {
        OptimizerKind::Sgd {
            momentum,
            weight_decay,
            nesterov: false,
        }
    }

    /// AdamW with the usual betas (0.9, 0.999) and eps 1e-8.
    pub fn adamw(weight_decay: f32) -> Self {
        OptimizerKind::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        }
    }

    /// The peak learning rate a run uses unless told otherwise: 0.1 for SGD, 0.003
    /// for AdamW.
    pub fn default_lr(&self) -> f32 {
        match self {
            OptimizerKind::Sgd { .. } => 0.1,
            OptimizerKind::AdamW { .. } => 3e-3,
        }
    }

    /// Short name as the command line and checkpoints spell it: `sgd` or `adamw`.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerKind::Sgd { .. } => "sgd",
            OptimizerKind::AdamW { .. } => "adamw",
        }
    }

    /// Names of the per-parameter state buffers, as checkpoints store them.
    pub fn slots(&self) -> &'static [&'static str] {
        match self {
            OptimizerKind::Sgd { .. } => &["momentum"],
            OptimizerKind::AdamW { .. } => &["exp_avg", "exp_avg_sq"],
        }
    }
}

/// An optimizer bound to one model's parameter layout.
pub struct Optimizer<B: Backend> {
    kind: OptimizerKind,
    pub(crate) slots: Vec<Tensor<B>>,
    pub(crate) steps: u64,
    len: usize,
}

impl<B: Backend + Clone + 'static> Optimizer<B> {
    /// Zeroed state sized for `model`'s parameters.
    pub fn new(model: &Model<B>, kind: OptimizerKind) -> Result<Self> {
        let len = model.param_count();
        let slots = kind
            .slots()
            .iter()
            .map(|_| Tensor::zeros(model.backend(), &[len]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            kind,
            slots,
            steps: 0,
            len,
        })
    }

    /// The update rule and its hyper-parameters.
    pub fn kind(&self) -> OptimizerKind {
        self.kind
    }

    /// Steps taken so far (restored by checkpoints).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Updates every parameter of `model` from its current gradients, at rate `lr`.
    pub fn step(&mut self, model: &mut Model<B>, lr: f32) -> Result<()> {
        if model.param_count() != self.len {
            return Err(config(
                "optimizer step",
                format!(
                    "optimizer was built for {} parameters, model has {}",
                    self.len,
                    model.param_count()
                ),
            ));
        }
        let decay_len = model.reg.decay_len();
        let b = model.backend().clone();
        // Counted once the update is done: a step refused before it starts leaves the
        // count (and AdamW's bias correction) where it was. (A backend that fails
        // part-way may have changed some parameters; the run stops on that error.)
        let step = self.steps + 1;
        let flat = FlatParams {
            params: model.params.view_mut(),
            grads: model.grads.view(),
            len: self.len,
            decay_len,
        };
        match (self.kind, self.slots.as_mut_slice()) {
            (
                OptimizerKind::Sgd {
                    momentum,
                    weight_decay,
                    nesterov,
                },
                [mom],
            ) => b.sgd_step(SgdStepArgs {
                flat,
                momentum: mom.view_mut(),
                h: SgdStep {
                    lr,
                    momentum,
                    weight_decay,
                    nesterov,
                },
            })?,
            (
                OptimizerKind::AdamW {
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                },
                [m, v],
            ) => b.adamw_step(AdamWStepArgs {
                flat,
                m: m.view_mut(),
                v: v.view_mut(),
                h: AdamWStep {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                    step,
                },
            })?,
            _ => {
                return Err(config(
                    "optimizer step",
                    "state buffers do not match the kind",
                ))
            }
        }
        self.steps = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{
        AdamWStep, AdamWStepArgs, CpuBackend, FlatParams, OptimOps, SgdStep, SgdStepArgs,
    };
    use crate::tensor::Tensor;

    fn run_sgd(
        h: SgdStep,
        p: &[f32],
        g: &[f32],
        m: &[f32],
        decay_len: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let b = CpuBackend::new();
        let mut pt = Tensor::from_slice(&b, &[p.len()], p).unwrap();
        let gt = Tensor::from_slice(&b, &[p.len()], g).unwrap();
        let mut mt = Tensor::from_slice(&b, &[p.len()], m).unwrap();
        let flat = FlatParams {
            params: pt.view_mut(),
            grads: gt.view(),
            len: p.len(),
            decay_len,
        };
        b.sgd_step(SgdStepArgs {
            flat,
            momentum: mt.view_mut(),
            h,
        })
        .unwrap();
        (pt.to_vec(&b).unwrap(), mt.to_vec(&b).unwrap())
    }

    #[test]
    fn sgd_matches_hand_computed_step() {
        let h = SgdStep {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.01,
            nesterov: false,
        };
        // Element 0 decays, element 1 does not.
        let (p, m) = run_sgd(h, &[1.0, 2.0], &[0.5, -1.0], &[0.2, 0.3], 1);
        // d0 = 0.5 + 0.01 * 1 = 0.51; v0 = 0.9 * 0.2 + 0.51 = 0.69; p0 = 1 - 0.069
        // d1 = -1; v1 = 0.27 - 1 = -0.73; p1 = 2 + 0.073
        assert!(
            (m[0] - 0.69).abs() < 1e-6 && (m[1] + 0.73).abs() < 1e-6,
            "{m:?}"
        );
        assert!(
            (p[0] - 0.931).abs() < 1e-6 && (p[1] - 2.073).abs() < 1e-6,
            "{p:?}"
        );
        let (p, _) = run_sgd(
            SgdStep {
                nesterov: true,
                ..h
            },
            &[1.0],
            &[0.5],
            &[0.2],
            1,
        );
        // p = 1 - 0.1 * (0.51 + 0.9 * 0.69)
        assert!((p[0] - (1.0 - 0.1 * (0.51 + 0.9 * 0.69))).abs() < 1e-6);
    }

    #[test]
    fn adamw_matches_hand_computed_steps() {
        let b = CpuBackend::new();
        let mut p = Tensor::from_slice(&b, &[2], &[1.0, -2.0]).unwrap();
        let g = Tensor::from_slice(&b, &[2], &[0.5, 0.25]).unwrap();
        let mut m = Tensor::zeros(&b, &[2]).unwrap();
        let mut v = Tensor::zeros(&b, &[2]).unwrap();
        let mut h = AdamWStep {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            step: 1,
        };
        // Reference in f64, PyTorch's AdamW formula.
        let (mut rp, mut rm, mut rv) = ([1.0f64, -2.0], [0.0f64; 2], [0.0f64; 2]);
        for step in 1..=3u64 {
            h.step = step;
            let flat = FlatParams {
                params: p.view_mut(),
                grads: g.view(),
                len: 2,
                decay_len: 1,
            };
            b.adamw_step(AdamWStepArgs {
                flat,
                m: m.view_mut(),
                v: v.view_mut(),
                h,
            })
            .unwrap();
            for i in 0..2 {
                let gi = [0.5, 0.25][i];
                if i == 0 {
                    rp[i] -= 0.01 * 0.1 * rp[i];
                }
                rm[i] = 0.9 * rm[i] + 0.1 * gi;
                rv[i] = 0.999 * rv[i] + 0.001 * gi * gi;
                let mh = rm[i] / (1.0 - 0.9f64.powi(step as i32));
                let vh = rv[i] / (1.0 - 0.999f64.powi(step as i32));
                rp[i] -= 0.01 * mh / (vh.sqrt() + 1e-8);
            }
        }
        let got = p.to_vec(&b).unwrap();
        for i in 0..2 {
            assert!((got[i] as f64 - rp[i]).abs() < 1e-6, "{got:?} vs {rp:?}");
        }
    }
}
