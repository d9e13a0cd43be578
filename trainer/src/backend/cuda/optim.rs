//! Optimizer steps on CUDA (`kernels/optim.cu`): one fused SGD or AdamW pass over the
//! flat parameter buffer.

use super::buffer::device_addr;
use super::{cuda_err, CudaBackend};
use crate::backend::{AdamWStep, BResult, In, Out, SgdStep};

pub(super) fn sgd_step(
    backend: &CudaBackend,
    params: Out<'_, CudaBackend>,
    grads: In<'_, CudaBackend>,
    momentum: Out<'_, CudaBackend>,
    len: usize,
    decay_len: usize,
    h: SgdStep,
) -> BResult<()> {
    let op = "sgd_step";
    let s = backend.stream();
    let pp = device_addr(s, params.buf, params.off, len, op, "params")?;
    let gp = device_addr(s, grads.buf, grads.off, len, op, "grads")?;
    let bp = device_addr(s, momentum.buf, momentum.off, len, op, "momentum")?;
    if len == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .sgd_step(
            s,
            backend.grid(len),
            pp,
            gp,
            bp,
            len as u64,
            decay_len as u64,
            h.lr,
            h.momentum,
            h.weight_decay,
            h.nesterov as i32,
        )
        .map_err(cuda_err(op))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn adamw_step(
    backend: &CudaBackend,
    params: Out<'_, CudaBackend>,
    grads: In<'_, CudaBackend>,
    m: Out<'_, CudaBackend>,
    v: Out<'_, CudaBackend>,
    len: usize,
    decay_len: usize,
    h: AdamWStep,
) -> BResult<()> {
    let op = "adamw_step";
    let s = backend.stream();
    let pp = device_addr(s, params.buf, params.off, len, op, "params")?;
    let gp = device_addr(s, grads.buf, grads.off, len, op, "grads")?;
    let mp = device_addr(s, m.buf, m.off, len, op, "m")?;
    let vp = device_addr(s, v.buf, v.off, len, op, "v")?;
    if len == 0 {
        return Ok(());
    }
    // The bias corrections as the CPU computes them (f32 powi on the host).
    let t = h.step.max(1) as i32;
    let c1 = 1.0 - h.beta1.powi(t);
    let c2 = 1.0 - h.beta2.powi(t);
    backend
        .kernels()
        .adamw_step(
            s,
            backend.grid(len),
            pp,
            gp,
            mp,
            vp,
            len as u64,
            decay_len as u64,
            h.lr,
            h.beta1,
            h.beta2,
            1.0 - h.beta1,
            1.0 - h.beta2,
            h.eps,
            h.weight_decay,
            c1,
            c2,
        )
        .map_err(cuda_err(op))
}
