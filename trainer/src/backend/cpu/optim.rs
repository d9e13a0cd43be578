//! Optimizer steps on the CPU: one fused SGD or AdamW pass over the flat parameter
//! buffer, its gradient and the optimizer's state.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend, CHUNK};
use crate::backend::{AdamWStepArgs, BResult, FlatParams, OptimOps, SgdStepArgs};

/// The parameters and their gradient as slices.
fn slices<'a>(
    flat: FlatParams<'a, CpuBackend>,
    op: &'static str,
) -> BResult<(&'a mut [f32], &'a [f32])> {
    let p = write_slice(flat.params, flat.len, op)?;
    let g = read_slice(flat.grads, flat.len, op)?;
    Ok((p, g))
}

impl OptimOps for CpuBackend {
    fn sgd_step(&self, op: SgdStepArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "sgd_step";
        let (len, decay_len, h) = (op.flat.len, op.flat.decay_len, op.h);
        let (p, g) = slices(op.flat, OP)?;
        let b = write_slice(op.momentum, len, OP)?;
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

    fn adamw_step(&self, op: AdamWStepArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "adamw_step";
        let (len, decay_len, h) = (op.flat.len, op.flat.decay_len, op.h);
        let (p, g) = slices(op.flat, OP)?;
        let m = write_slice(op.m, len, OP)?;
        let v = write_slice(op.v, len, OP)?;
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
}
