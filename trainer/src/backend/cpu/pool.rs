//! Pooling on the CPU: max pooling (recording each window's winner for the backward)
//! and global average pooling, forward and backward.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    AvgPoolBackwardArgs, AvgPoolForwardArgs, BResult, MaxPoolBackwardArgs, MaxPoolForwardArgs,
    PoolGeom, PoolOps,
};

/// Max pooling of one plane in 2x2 windows, stride 2: the common case, unrolled.
#[inline(always)]
fn max_2x2(plane: &[f32], w: usize, (oh, ow): (usize, usize), y: &mut [f32], am: &mut [u32]) {
    for oy in 0..oh {
        let (r0, r1) = (2 * oy * w, (2 * oy + 1) * w);
        for ox in 0..ow {
            let i = [r0 + 2 * ox, r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1];
            // Selects, not branches: after a ReLU the winner is a coin flip, and
            // mispredictions cost more than the loads.
            let (mut best, mut at) = (plane[i[0]], i[0]);
            for &j in &i[1..] {
                let v = plane[j];
                let win = v > best;
                at = if win { j } else { at };
                best = if win { v } else { best };
            }
            y[oy * ow + ox] = best;
            am[oy * ow + ox] = at as u32;
        }
    }
}

/// Max pooling of one plane, any window and stride.
#[inline(always)]
fn max_any(plane: &[f32], geom: &PoolGeom, y: &mut [f32], am: &mut [u32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    for oy in 0..oh {
        for ox in 0..ow {
            let mut best = f32::NEG_INFINITY;
            let mut at = (oy * geom.stride) * geom.w + ox * geom.stride;
            for ky in 0..geom.k {
                for kx in 0..geom.k {
                    let i = (oy * geom.stride + ky) * geom.w + ox * geom.stride + kx;
                    // `>` keeps the first maximum; NaN never wins, as in max().
                    if plane[i] > best {
                        best = plane[i];
                        at = i;
                    }
                }
            }
            y[oy * ow + ox] = best;
            am[oy * ow + ox] = at as u32;
        }
    }
}

impl PoolOps for CpuBackend {
    fn maxpool_forward(&self, op: MaxPoolForwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "maxpool_forward";
        let geom = op.geom;
        let (oh, ow) = (geom.out_h(), geom.out_w());
        let (hw, ohw) = (geom.h * geom.w, oh * ow);
        let x = read_slice(op.x, geom.planes * hw, OP)?;
        let y = write_slice(op.y, geom.planes * ohw, OP)?;
        let am = write_slice(op.argmax, geom.planes * ohw, OP)?;
        if ohw == 0 {
            return Ok(());
        }
        y.par_chunks_mut(ohw)
            .zip(am.par_chunks_mut(ohw))
            .enumerate()
            .for_each(|(p, (y, am))| {
                let plane = &x[p * hw..][..hw];
                if geom.k == 2 && geom.stride == 2 {
                    max_2x2(plane, geom.w, (oh, ow), y, am);
                } else {
                    max_any(plane, &geom, y, am);
                }
            });
        Ok(())
    }

    fn maxpool_backward(&self, op: MaxPoolBackwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "maxpool_backward";
        let geom = op.geom;
        let (hw, ohw) = (geom.h * geom.w, geom.out_h() * geom.out_w());
        let dy = read_slice(op.dy, geom.planes * ohw, OP)?;
        let am = read_slice(op.argmax, geom.planes * ohw, OP)?;
        let dx = write_slice(op.dx, geom.planes * hw, OP)?;
        if hw == 0 || ohw == 0 {
            return Ok(());
        }
        dx.par_chunks_mut(hw)
            .zip(dy.par_chunks(ohw).zip(am.par_chunks(ohw)))
            .for_each(|(dx, (dy, am))| {
                dx.fill(0.0);
                for (d, &i) in dy.iter().zip(am) {
                    if let Some(v) = dx.get_mut(i as usize) {
                        *v += d;
                    }
                }
            });
        Ok(())
    }

    fn avgpool_forward(&self, op: AvgPoolForwardArgs<'_, Self>) -> BResult<()> {
        let (planes, hw) = (op.planes, op.hw);
        let x = read_slice(op.x, planes * hw, "avgpool_forward")?;
        let y = write_slice(op.y, planes, "avgpool_forward")?;
        if hw == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        y.par_iter_mut()
            .zip(x.par_chunks(hw))
            .for_each(|(y, x)| *y = x.iter().sum::<f32>() * inv);
        Ok(())
    }

    fn avgpool_backward(&self, op: AvgPoolBackwardArgs<'_, Self>) -> BResult<()> {
        let (planes, hw) = (op.planes, op.hw);
        let dy = read_slice(op.dy, planes, "avgpool_backward")?;
        let dx = write_slice(op.dx, planes * hw, "avgpool_backward")?;
        if hw == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        dx.par_chunks_mut(hw)
            .zip(dy.par_iter())
            .for_each(|(dx, dy)| dx.fill(dy * inv));
        Ok(())
    }
}
