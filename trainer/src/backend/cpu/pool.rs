//! Pooling on the CPU: max pooling (recording each window's winner for the backward)
//! and global average pooling, forward and backward.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    AvgPoolBackwardArgs, AvgPoolForwardArgs, BResult, MaxPoolBackwardArgs, MaxPoolForwardArgs,
    PoolGeom, PoolOps,
};

/// Max pooling of one plane in 2x2 windows, stride 2: the common case, unrolled. The
/// same rule as `max_any`: `>` from -inf keeps the first maximum, and NaN never wins
/// (a window of NaN gives -inf and its first element).
#[inline(always)]
fn max_2x2(plane: &[f32], w: usize, (oh, ow): (usize, usize), y: &mut [f32], am: &mut [u32]) {
    for oy in 0..oh {
        let (r0, r1) = (2 * oy * w, (2 * oy + 1) * w);
        for ox in 0..ow {
            let i = [r0 + 2 * ox, r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1];
            // Selects, not branches: after a ReLU the winner is a coin flip, and
            // mispredictions cost more than the loads.
            let (mut best, mut at) = (f32::NEG_INFINITY, i[0]);
            for j in i {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The 2x2 path and the general one agree on windows holding NaN in every
    /// position (and all NaN): NaN never wins, the first maximum does.
    #[test]
    fn nan_never_wins_on_either_path() {
        let (nan, ninf) = (f32::NAN, f32::NEG_INFINITY);
        // Eight 2x2 windows side by side (a 2 x 16 plane): NaN top left, top right,
        // bottom left, bottom right, NaN with ties, all NaN, NaN and -inf, none.
        #[rustfmt::skip]
        let plane = [
            [nan, 1.0, 2.0, nan, 3.0, 1.0, 5.0, 4.0, 7.0, nan, nan, nan, nan, -1.0, 0.5, 0.5],
            [0.5, 2.0, 3.0, 1.0, nan, 2.0, 4.0, nan, nan, 7.0, nan, nan, ninf, nan, 0.5, 0.0],
        ]
        .concat();
        let geom = PoolGeom {
            planes: 1,
            h: 2,
            w: 16,
            k: 2,
            stride: 2,
        };
        let (mut y2, mut a2, mut y, mut a) = ([0.0; 8], [0; 8], [0.0; 8], [0; 8]);
        max_2x2(&plane, 16, (1, 8), &mut y2, &mut a2);
        max_any(&plane, &geom, &mut y, &mut a);
        let want_y = [2.0, 3.0, 3.0, 5.0, 7.0, ninf, -1.0, 0.5];
        let want_at = [17, 18, 4, 6, 8, 10, 13, 14];
        assert_eq!(y2.map(f32::to_bits), want_y.map(f32::to_bits), "2x2 path");
        assert_eq!(a2, want_at, "2x2 path");
        assert_eq!(
            y.map(f32::to_bits),
            want_y.map(f32::to_bits),
            "general path"
        );
        assert_eq!(a, want_at, "general path");
    }
}
