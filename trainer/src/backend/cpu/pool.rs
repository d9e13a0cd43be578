//! Pooling on the CPU: max pooling (recording each window's winner for the backward)
//! and global average pooling, forward and backward.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, In, Out, PoolGeom};

pub(super) fn maxpool_forward(
    x: In<'_, CpuBackend>,
    geom: PoolGeom,
    y: Out<'_, CpuBackend>,
    argmax: Out<'_, CpuBackend, u32>,
) -> BResult<()> {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let (hw, ohw) = (geom.h * geom.w, oh * ow);
    let x = read_slice(x, geom.planes * hw, "maxpool_forward")?;
    let y = write_slice(y, geom.planes * ohw, "maxpool_forward")?;
    let am = write_slice(argmax, geom.planes * ohw, "maxpool_forward")?;
    if ohw == 0 {
        return Ok(());
    }
    y.par_chunks_mut(ohw)
        .zip(am.par_chunks_mut(ohw))
        .enumerate()
        .for_each(|(p, (y, am))| {
            let plane = &x[p * hw..][..hw];
            if geom.k == 2 && geom.stride == 2 {
                for oy in 0..oh {
                    let (r0, r1) = (2 * oy * geom.w, (2 * oy + 1) * geom.w);
                    for ox in 0..ow {
                        let i = [r0 + 2 * ox, r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1];
                        // Selects, not branches: after a ReLU the winner is a coin flip,
                        // and mispredictions cost more than the loads.
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
                return;
            }
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
        });
    Ok(())
}

pub(super) fn maxpool_backward(
    dy: In<'_, CpuBackend>,
    argmax: In<'_, CpuBackend, u32>,
    geom: PoolGeom,
    dx: Out<'_, CpuBackend>,
) -> BResult<()> {
    let (hw, ohw) = (geom.h * geom.w, geom.out_h() * geom.out_w());
    let dy = read_slice(dy, geom.planes * ohw, "maxpool_backward")?;
    let am = read_slice(argmax, geom.planes * ohw, "maxpool_backward")?;
    let dx = write_slice(dx, geom.planes * hw, "maxpool_backward")?;
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

pub(super) fn avgpool_forward(
    x: In<'_, CpuBackend>,
    planes: usize,
    hw: usize,
    y: Out<'_, CpuBackend>,
) -> BResult<()> {
    let x = read_slice(x, planes * hw, "avgpool_forward")?;
    let y = write_slice(y, planes, "avgpool_forward")?;
    if hw == 0 {
        return Ok(());
    }
    let inv = 1.0 / hw as f32;
    y.par_iter_mut()
        .zip(x.par_chunks(hw))
        .for_each(|(y, x)| *y = x.iter().sum::<f32>() * inv);
    Ok(())
}

pub(super) fn avgpool_backward(
    dy: In<'_, CpuBackend>,
    planes: usize,
    hw: usize,
    dx: Out<'_, CpuBackend>,
) -> BResult<()> {
    let dy = read_slice(dy, planes, "avgpool_backward")?;
    let dx = write_slice(dx, planes * hw, "avgpool_backward")?;
    if hw == 0 {
        return Ok(());
    }
    let inv = 1.0 / hw as f32;
    dx.par_chunks_mut(hw)
        .zip(dy.par_iter())
        .for_each(|(dx, dy)| dx.fill(dy * inv));
    Ok(())
}
