//! Optimizer steps on CUDA (`kernels/optim.cu`): one fused SGD or AdamW pass over the
//! flat parameter buffer.

use super::kernels::{AdamWStep, SgdStep};
use super::CudaBackend;
use crate::backend::{AdamWStepArgs, BResult, OptimOps, SgdStepArgs};

impl OptimOps for CudaBackend {
    fn sgd_step(&self, op: SgdStepArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("sgd_step");
        let (len, h) = (op.flat.len, op.h);
        let params = SgdStep {
            p: cx.write(&op.flat.params, len, "params")?,
            g: cx.read(op.flat.grads, len, "grads")?,
            buf: cx.write(&op.momentum, len, "momentum")?,
            n: len as u64,
            decay_len: op.flat.decay_len as u64,
            lr: h.lr,
            momentum: h.momentum,
            weight_decay: h.weight_decay,
            nesterov: h.nesterov as i32,
        };
        if len == 0 {
            return Ok(());
        }
        cx.launch(&self.kernels().sgd_step, cx.grid(len), params)
    }

    fn adamw_step(&self, op: AdamWStepArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("adamw_step");
        let (len, h) = (op.flat.len, op.h);
        let (p, g) = (
            cx.write(&op.flat.params, len, "params")?,
            cx.read(op.flat.grads, len, "grads")?,
        );
        let (m, v) = (cx.write(&op.m, len, "m")?, cx.write(&op.v, len, "v")?);
        if len == 0 {
            return Ok(());
        }
        // The bias corrections as the CPU computes them (f32 powi on the host).
        let t = h.step.max(1) as i32;
        let params = AdamWStep {
            p,
            g,
            m,
            v,
            n: len as u64,
            decay_len: op.flat.decay_len as u64,
            lr: h.lr,
            beta1: h.beta1,
            beta2: h.beta2,
            one_minus_beta1: 1.0 - h.beta1,
            one_minus_beta2: 1.0 - h.beta2,
            eps: h.eps,
            weight_decay: h.weight_decay,
            c1: 1.0 - h.beta1.powi(t),
            c2: 1.0 - h.beta2.powi(t),
        };
        cx.launch(&self.kernels().adamw_step, cx.grid(len), params)
    }
}
