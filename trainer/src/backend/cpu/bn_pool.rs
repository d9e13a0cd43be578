//! Batch norm + ReLU + 2x2 max pool (stride 2), fused, on the CPU.
//!
//! The separate ops pass over the full-size activation seven times (statistics, apply,
//! pool; mask + sums, apply, route the pooled gradient back, and the zeroing of it);
//! fused, each channel is read twice in the forward (statistics, then normalise + pool
//! from cache-warm memory) and twice in the backward, which writes `dx` once. The
//! normalised activation is never stored: the forward keeps only the pooled output and
//! a 2-bit code per window for its winner, and the backward recomputes the winner's
//! ReLU test from the input and the saved statistics (the same f32 operations, so the
//! same answer).
//!
//! The forward gives the same bits as `batchnorm_forward` + `maxpool_forward` (shared
//! statistics code, the same per-element expression, the same first-maximum rule). The
//! backward's sums run in another order than `batchnorm_backward`'s, so it agrees with
//! the separate ops to rounding, not to the bit.

use rayon::prelude::*;

use super::norm::{backward_coeffs, eval_channel, train_channel};
use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    BResult, BackendError, BnPoolGeom, BnPoolOps, BnReluPoolBackwardArgs, BnReluPoolForwardArgs,
};

/// Windows per word of `winners`: a winner (0 top left, 1 top right, 2 bottom left,
/// 3 bottom right) takes 2 bits.
const PER_WORD: usize = 16;

/// Words of `winners` per output row (each row starts a word, so a plane's codes never
/// share a word with another plane's, and channels split cleanly across threads).
fn words_per_row(ow: usize) -> usize {
    ow.div_ceil(PER_WORD)
}

fn check(g: &BnPoolGeom, op: &'static str) -> BResult<()> {
    if g.h < 2 || g.w < 2 {
        return Err(BackendError::Op {
            op,
            reason: format!(
                "a 2x2 pool needs planes of at least 2x2, got {}x{}",
                g.h, g.w
            ),
        });
    }
    Ok(())
}

/// Normalise, ReLU and pool one `h x w` plane; writes the pooled plane and the codes.
#[inline(always)]
fn pool_plane(
    plane: &[f32],
    w: usize,
    (oh, ow): (usize, usize),
    y: &mut [f32],
    codes: &mut [u32],
    (scale, shift): (f32, f32),
) {
    let wpr = words_per_row(ow);
    let f = |v: f32| (v * scale + shift).max(0.0);
    for oy in 0..oh {
        let r0 = &plane[2 * oy * w..][..2 * ow];
        let r1 = &plane[(2 * oy + 1) * w..][..2 * ow];
        let yrow = &mut y[oy * ow..][..ow];
        let words = &mut codes[oy * wpr..][..wpr];
        // Sixteen windows (one word of codes) at a time, with no branches and no
        // bit packing inside the loop, so that it vectorises.
        let tops = r0.chunks(2 * PER_WORD).zip(r1.chunks(2 * PER_WORD));
        for ((ys, word), (top, bottom)) in yrow.chunks_mut(PER_WORD).zip(words).zip(tops) {
            let mut at = [0u32; PER_WORD];
            let pairs = top.chunks_exact(2).zip(bottom.chunks_exact(2));
            for ((yv, a), (t, b)) in ys.iter_mut().zip(at.iter_mut()).zip(pairs) {
                let v = [f(t[0]), f(t[1]), f(b[0]), f(b[1])];
                // `>` keeps the first maximum, as maxpool_forward; selects, not
                // branches: after a ReLU the winner is a coin flip.
                let (mut best, mut win) = (v[0], 0u32);
                for (j, &vj) in v.iter().enumerate().skip(1) {
                    let better = vj > best;
                    win = if better { j as u32 } else { win };
                    best = if better { vj } else { best };
                }
                *yv = best;
                *a = win;
            }
            *word = at
                .iter()
                .enumerate()
                .fold(0, |bits, (j, &c)| bits | c << (2 * j));
        }
    }
}

/// Calls `f(i, x[i], d)` for each window of output row `oy` of one plane whose winner
/// `i` (an index into the plane) passed the ReLU, `d` being that window's gradient.
#[inline(always)]
fn live_winners(
    plane: &[f32],
    w: usize,
    oy: usize,
    codes: &[u32],
    dy: &[f32],
    (scale, shift): (f32, f32),
    mut f: impl FnMut(usize, f32, f32),
) {
    for (wi, (&bits, dys)) in codes.iter().zip(dy.chunks(PER_WORD)).enumerate() {
        for (j, &d) in dys.iter().enumerate() {
            let ox = wi * PER_WORD + j;
            let code = ((bits >> (2 * j)) & 3) as usize;
            let i = (2 * oy + (code >> 1)) * w + 2 * ox + (code & 1);
            let z = plane[i];
            // The forward's own test on the winner: its output was this, and positive.
            if (z * scale + shift).max(0.0) > 0.0 {
                f(i, z, d);
            }
        }
    }
}

/// The fused op needs no scratch on the CPU: the forward keeps only the pooled output
/// and the winners' codes.
impl BnPoolOps for CpuBackend {
    fn bn_relu_pool_scratch(&self, _g: BnPoolGeom) -> usize {
        0
    }

    fn bn_relu_pool_forward(&self, op: BnReluPoolForwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "bn_relu_pool_forward";
        let (g, train) = (op.g, op.state.train);
        check(&g, OP)?;
        let (hw, oh, ow) = (g.h * g.w, g.out_h(), g.out_w());
        let (m, wpr) = (g.n * hw, words_per_row(ow));
        let x = read_slice(op.state.x, g.c * m, OP)?;
        let gb = read_slice(op.state.gamma_beta, 2 * g.c, OP)?;
        let running = write_slice(op.state.running, 2 * g.c, OP)?;
        let saved = write_slice(op.state.saved, 2 * g.c, OP)?;
        let y = write_slice(op.y, g.c * g.n * oh * ow, OP)?;
        let codes = write_slice(op.winners, g.c * g.n * oh * wpr, OP)?;
        if g.n == 0 {
            return Ok(());
        }
        let (gamma, beta) = gb.split_at(g.c);
        let (rmean, rvar) = running.split_at_mut(g.c);
        let (smean, sinv) = saved.split_at_mut(g.c);
        let bn = g.bn();
        y.par_chunks_mut(g.n * oh * ow)
            .zip(codes.par_chunks_mut(g.n * oh * wpr))
            .zip(smean.par_iter_mut().zip(sinv.par_iter_mut()))
            .zip(rmean.par_iter_mut().zip(rvar.par_iter_mut()))
            .enumerate()
            .for_each(|(c, (((y, codes), (sm, si)), (rm, rv)))| {
                let xs = &x[c * m..][..m];
                let gb = (gamma[c], beta[c]);
                let ss = if train {
                    train_channel(xs, &bn, gb, (sm, si), (rm, rv))
                } else {
                    eval_channel(&bn, gb, (*rm, *rv))
                };
                for ni in 0..g.n {
                    pool_plane(
                        &xs[ni * hw..][..hw],
                        g.w,
                        (oh, ow),
                        &mut y[ni * oh * ow..][..oh * ow],
                        &mut codes[ni * oh * wpr..][..oh * wpr],
                        ss,
                    );
                }
            });
        Ok(())
    }

    fn bn_relu_pool_backward(&self, op: BnReluPoolBackwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "bn_relu_pool_backward";
        let g = op.g;
        check(&g, OP)?;
        let (hw, oh, ow) = (g.h * g.w, g.out_h(), g.out_w());
        let (m, wpr) = (g.n * hw, words_per_row(ow));
        let x = read_slice(op.grads.x, g.c * m, OP)?;
        let dy = read_slice(op.dy, g.c * g.n * oh * ow, OP)?;
        let codes = read_slice(op.winners, g.c * g.n * oh * wpr, OP)?;
        let gb = read_slice(op.grads.gamma_beta, 2 * g.c, OP)?;
        let saved = read_slice(op.grads.saved, 2 * g.c, OP)?;
        let dgb = write_slice(op.grads.dgamma_beta, 2 * g.c, OP)?;
        let dx = write_slice(op.grads.dx, g.c * m, OP)?;
        if g.n == 0 {
            return Ok(());
        }
        let (dgamma, dbeta) = dgb.split_at_mut(g.c);
        dx.par_chunks_mut(m)
            .zip(dgamma.par_iter_mut().zip(dbeta.par_iter_mut()))
            .enumerate()
            .for_each(|(c, (dx, (dg, db)))| {
                let (mean, inv, gamma, beta) = (saved[c], saved[g.c + c], gb[c], gb[g.c + c]);
                // The forward's scale and shift, from the same f32 values.
                let scale = gamma * inv;
                let ss = (scale, beta - mean * scale);
                let xs = &x[c * m..][..m];
                let dys = &dy[c * g.n * oh * ow..][..g.n * oh * ow];
                let cs = &codes[c * g.n * oh * wpr..][..g.n * oh * wpr];
                // Each plane row in f32 (at most `ow` terms), rows summed in f64.
                let (mut sd, mut sdc) = (0f64, 0f64);
                for ni in 0..g.n {
                    let plane = &xs[ni * hw..][..hw];
                    for oy in 0..oh {
                        let (mut a, mut b) = (0f32, 0f32);
                        let r = ni * oh + oy;
                        let (rc, rd) = (&cs[r * wpr..][..wpr], &dys[r * ow..][..ow]);
                        live_winners(plane, g.w, oy, rc, rd, ss, |_, z, d| {
                            a += d;
                            b += d * (z - mean);
                        });
                        sd += a as f64;
                        sdc += b as f64;
                    }
                }
                let (a, bx, c0) = backward_coeffs(sd, sdc, (mean, inv, gamma), m, (dg, db));
                for ni in 0..g.n {
                    let plane = &xs[ni * hw..][..hw];
                    let out = &mut dx[ni * hw..][..hw];
                    // Every element gets the gradient of the mean and variance; the winners
                    // that passed the ReLU also their own.
                    for (o, &x) in out.iter_mut().zip(plane) {
                        *o = bx * x + c0;
                    }
                    for oy in 0..oh {
                        let r = ni * oh + oy;
                        let (rc, rd) = (&cs[r * wpr..][..wpr], &dys[r * ow..][..ow]);
                        live_winners(plane, g.w, oy, rc, rd, ss, |i, z, d| {
                            out[i] = a * d + bx * z + c0;
                        });
                    }
                }
            });
        Ok(())
    }
}
