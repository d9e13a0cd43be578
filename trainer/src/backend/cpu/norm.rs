//! Normalisation on the CPU: batch norm (forward in training and eval mode, backward,
//! with the fused ReLU) and `datanorm`, which turns u8 images into normalised f32
//! activations.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    BResult, BatchNormBackwardArgs, BatchNormForwardArgs, BnGeom, DataLayout, DataNormArgs, NormOps,
};

/// Lanes of the blocked sums below: wide enough for the compiler to vectorise, and a
/// fixed order, so results do not depend on threads.
const LANES: usize = 16;

/// `(sum u, sum v)` of `f(x[i], y[i], z[i]) = (u, v)` over three equal-length rows, in
/// f32 lanes folded into f64 every block: vectorised (no indexing, no branches in the
/// hot loop) and accurate for rows of millions of elements.
#[inline(always)]
pub(super) fn blocked_sums(
    x: &[f32],
    y: &[f32],
    z: &[f32],
    f: impl Fn(f32, f32, f32) -> (f32, f32),
) -> (f64, f64) {
    const BLOCK: usize = 1024;
    let (mut s1, mut s2) = (0f64, 0f64);
    for ((xb, yb), zb) in x.chunks(BLOCK).zip(y.chunks(BLOCK)).zip(z.chunks(BLOCK)) {
        let (mut a, mut b) = ([0f32; LANES], [0f32; LANES]);
        let (xl, yl, zl) = (
            xb.chunks_exact(LANES),
            yb.chunks_exact(LANES),
            zb.chunks_exact(LANES),
        );
        let tail = xl
            .remainder()
            .iter()
            .zip(yl.remainder())
            .zip(zl.remainder());
        for ((xs, ys), zs) in xl.zip(yl).zip(zl) {
            for l in 0..LANES {
                let (u, v) = f(xs[l], ys[l], zs[l]);
                a[l] += u;
                b[l] += v;
            }
        }
        for ((&xv, &yv), &zv) in tail {
            let (u, v) = f(xv, yv, zv);
            a[0] += u;
            b[0] += v;
        }
        s1 += a.iter().map(|&v| v as f64).sum::<f64>();
        s2 += b.iter().map(|&v| v as f64).sum::<f64>();
    }
    (s1, s2)
}

/// Batch statistics of one channel's row `xs` (not empty): writes the saved mean and
/// inverse std, updates the running mean and (unbiased) variance, and returns the
/// `(scale, shift)` that normalise the row. Shared by the plain and the fused batch
/// norm, so the two give the same bits.
pub(super) fn train_channel(
    xs: &[f32],
    bn: &BnGeom,
    (gamma, beta): (f32, f32),
    (sm, si): (&mut f32, &mut f32),
    (rm, rv): (&mut f32, &mut f32),
) -> (f32, f32) {
    let m = xs.len();
    // Sums of x - x[0]: shifting by a sample keeps E[x^2] - E[x]^2 from cancelling
    // when the mean is large next to the spread.
    let k = xs[0];
    let (s, ss) = blocked_sums(xs, xs, xs, |x, _, _| {
        let d = x - k;
        (d, d * d)
    });
    let dm = s / m as f64;
    let mean = k as f64 + dm;
    let var = (ss / m as f64 - dm * dm).max(0.0);
    let inv = 1.0 / (var + bn.eps as f64).sqrt();
    *sm = mean as f32;
    *si = inv as f32;
    let unbiased = if m > 1 {
        var * m as f64 / (m - 1) as f64
    } else {
        var
    };
    *rm = (1.0 - bn.momentum) * *rm + bn.momentum * mean as f32;
    *rv = (1.0 - bn.momentum) * *rv + bn.momentum * unbiased as f32;
    let scale = gamma * inv as f32;
    (scale, beta - mean as f32 * scale)
}

/// `(scale, shift)` of one channel in eval mode, from the running statistics.
pub(super) fn eval_channel(
    bn: &BnGeom,
    (gamma, beta): (f32, f32),
    (rm, rv): (f32, f32),
) -> (f32, f32) {
    let scale = gamma / (rv + bn.eps).sqrt();
    (scale, beta - rm * scale)
}

/// From one channel's sums `sd = sum(d)` and `sdc = sum(d (x - mean))` of its output
/// gradient `d` (after the ReLU mask), over `m` elements: writes `dgamma` and `dbeta`
/// and returns `(a, b, c)` with `dx = a d + b x + c`, the expansion of
/// `dx = gamma inv / m (m d - sd - xhat dgamma)`.
pub(super) fn backward_coeffs(
    sd: f64,
    sdc: f64,
    (mean, inv, gamma): (f32, f32, f32),
    m: usize,
    (dg, db): (&mut f32, &mut f32),
) -> (f32, f32, f32) {
    let sdx = sdc * inv as f64;
    *dg = sdx as f32;
    *db = sd as f32;
    let k = gamma * inv / m as f32;
    let (sd, sdx) = (sd as f32, sdx as f32);
    (k * m as f32, -k * inv * sdx, k * (inv * sdx * mean - sd))
}

impl NormOps for CpuBackend {
    fn batchnorm_forward(&self, op: BatchNormForwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "batchnorm_forward";
        let bn = op.bn;
        let m = bn.n * bn.hw;
        let x = read_slice(op.state.x, bn.c * m, OP)?;
        let gb = read_slice(op.state.gamma_beta, 2 * bn.c, OP)?;
        let y = write_slice(op.y, bn.c * m, OP)?;
        let running = write_slice(op.state.running, 2 * bn.c, OP)?;
        if m == 0 {
            return Ok(());
        }
        let (gamma, beta) = gb.split_at(bn.c);
        let (rmean, rvar) = running.split_at_mut(bn.c);
        let act = |v: f32| if bn.relu { v.max(0.0) } else { v };
        if !op.state.train {
            y.par_chunks_mut(m).enumerate().for_each(|(c, y)| {
                let (scale, shift) = eval_channel(&bn, (gamma[c], beta[c]), (rmean[c], rvar[c]));
                for (y, x) in y.iter_mut().zip(&x[c * m..][..m]) {
                    *y = act(x * scale + shift);
                }
            });
            return Ok(());
        }
        let saved = write_slice(op.state.saved, 2 * bn.c, OP)?;
        let (smean, sinv) = saved.split_at_mut(bn.c);
        y.par_chunks_mut(m)
            .zip(smean.par_iter_mut().zip(sinv.par_iter_mut()))
            .zip(rmean.par_iter_mut().zip(rvar.par_iter_mut()))
            .enumerate()
            .for_each(|(c, ((y, (sm, si)), (rm, rv)))| {
                let xs = &x[c * m..][..m];
                let (scale, shift) =
                    train_channel(xs, &bn, (gamma[c], beta[c]), (sm, si), (rm, rv));
                for (y, x) in y.iter_mut().zip(xs) {
                    *y = act(x * scale + shift);
                }
            });
        Ok(())
    }

    fn batchnorm_backward(&self, op: BatchNormBackwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "batchnorm_backward";
        let bn = op.bn;
        let m = bn.n * bn.hw;
        let x = read_slice(op.grads.x, bn.c * m, OP)?;
        let y = if bn.relu {
            read_slice(op.y, bn.c * m, OP)?
        } else {
            &[][..]
        };
        let dy = read_slice(op.dy, bn.c * m, OP)?;
        let gb = read_slice(op.grads.gamma_beta, 2 * bn.c, OP)?;
        let saved = read_slice(op.grads.saved, 2 * bn.c, OP)?;
        let dgb = write_slice(op.grads.dgamma_beta, 2 * bn.c, OP)?;
        let dx = write_slice(op.grads.dx, bn.c * m, OP)?;
        if m == 0 {
            return Ok(());
        }
        let (dgamma, dbeta) = dgb.split_at_mut(bn.c);
        let relu = bn.relu;
        dx.par_chunks_mut(m)
            .zip(dgamma.par_iter_mut().zip(dbeta.par_iter_mut()))
            .enumerate()
            .for_each(|(c, (dx, (dg, db)))| {
                let (mean, inv, gamma) = (saved[c], saved[bn.c + c], gb[c]);
                let xs = &x[c * m..][..m];
                let dys = &dy[c * m..][..m];
                let ys = if relu { &y[c * m..][..m] } else { &[][..] };
                let (sd, sdc) = if relu {
                    blocked_sums(xs, dys, ys, |x, dy, y| {
                        let di = if y <= 0.0 { 0.0 } else { dy };
                        (di, di * (x - mean))
                    })
                } else {
                    blocked_sums(xs, dys, xs, |x, dy, _| (dy, dy * (x - mean)))
                };
                let (a, bx, c0) = backward_coeffs(sd, sdc, (mean, inv, gamma), m, (dg, db));
                if relu {
                    for ((o, &x), (&dy, &y)) in dx.iter_mut().zip(xs).zip(dys.iter().zip(ys)) {
                        let di = if y <= 0.0 { 0.0 } else { dy };
                        *o = a * di + bx * x + c0;
                    }
                } else {
                    for ((o, &x), &dy) in dx.iter_mut().zip(xs).zip(dys) {
                        *o = a * dy + bx * x + c0;
                    }
                }
            });
        Ok(())
    }

    fn datanorm(&self, op: DataNormArgs<'_, Self>) -> BResult<()> {
        let c = op.channels()?;
        let (n, hw, mean, std) = (op.n, op.h * op.w, op.mean, op.std);
        let x = read_slice(op.x, n * hw * c, "datanorm")?;
        let y = write_slice(op.y, n * hw * c, "datanorm")?;
        if n == 0 || hw == 0 {
            return Ok(());
        }
        let scale = |ch: usize| 1.0 / (255.0 * std[ch]);
        let shift = |ch: usize| -mean[ch] / std[ch];
        match op.layout {
            DataLayout::ChannelMajor => {
                y.par_chunks_mut(hw).enumerate().for_each(|(row, y)| {
                    let (ch, ni) = (row / n, row % n);
                    let (a, b) = (scale(ch), shift(ch));
                    let img = &x[ni * hw * c..][..hw * c];
                    for (p, y) in y.iter_mut().enumerate() {
                        *y = img[p * c + ch] as f32 * a + b;
                    }
                });
            }
            DataLayout::FeatureMajor => {
                let f = hw * c;
                y.par_chunks_mut(n).enumerate().for_each(|(fi, y)| {
                    let ch = fi % c;
                    let (a, b) = (scale(ch), shift(ch));
                    for (ni, y) in y.iter_mut().enumerate() {
                        *y = x[ni * f + fi] as f32 * a + b;
                    }
                });
            }
        }
        Ok(())
    }
}
