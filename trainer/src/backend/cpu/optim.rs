//! Optimizer steps on the CPU: one fused SGD or AdamW pass over the flat parameter
//! buffer, its gradient and the optimizer's state.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend, CHUNK};
use crate::backend::{AdamWStep, BResult, In, Out, SgdStep};

pub(super) fn sgd_step(
    params: Out<'_, CpuBackend>,
    grads: In<'_, CpuBackend>,
    momentum: Out<'_, CpuBackend>,
    len: usize,
    decay_len: usize,
    h: SgdStep,
) -> BResult<()> {
    let p = write_slice(params, len, "sgd_step")?;
    let g = read_slice(grads, len, "sgd_step")?;
    let b = write_slice(momentum, len, "sgd_step")?;
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(b.par_chunks_mut(CHUNK)))
        .enumerate()
        .for_each(|(ci, (p, (g, b)))| {
            for (i, ((p, g), b)) in p.iter_mut().zip(g).zip(b.iter_mut()).enumerate() {
                let wd = if ci * CHUNK + i < decay_len {
                    h.weight_decay
                } else {
                    0.0
                };
                let d = g + wd * *p;
                *b = h.momentum * *b + d;
                let step = if h.nesterov { d + h.momentum * *b } else { *b };
                *p -= h.lr * step;
            }
        });
    Ok(())
}

pub(super) fn adamw_step(
    params: Out<'_, CpuBackend>,
    grads: In<'_, CpuBackend>,
    m: Out<'_, CpuBackend>,
    v: Out<'_, CpuBackend>,
    len: usize,
    decay_len: usize,
    h: AdamWStep,
) -> BResult<()> {
    let p = write_slice(params, len, "adamw_step")?;
    let g = read_slice(grads, len, "adamw_step")?;
    let m = write_slice(m, len, "adamw_step")?;
    let v = write_slice(v, len, "adamw_step")?;
    let t = h.step.max(1) as i32;
    let c1 = 1.0 - h.beta1.powi(t);
    let c2 = 1.0 - h.beta2.powi(t);
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .enumerate()
        .for_each(|(ci, ((p, g), (m, v)))| {
            for (i, (((p, g), m), v)) in p
                .iter_mut()
                .zip(g)
                .zip(m.iter_mut())
                .zip(v.iter_mut())
                .enumerate()
            {
                if ci * CHUNK + i < decay_len {
                    *p -= h.lr * h.weight_decay * *p;
                }
                *m = h.beta1 * *m + (1.0 - h.beta1) * g;
                *v = h.beta2 * *v + (1.0 - h.beta2) * g * g;
                let mhat = *m / c1;
                let vhat = *v / c2;
                *p -= h.lr * mhat / (vhat.sqrt() + h.eps);
            }
        });
    Ok(())
}
