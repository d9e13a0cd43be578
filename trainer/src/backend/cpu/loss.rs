//! The losses on the CPU: softmax and cross-entropy (hard or soft targets), and sigmoid
//! with binary cross-entropy (multi-label), over a batch of logits, with the gradient
//! of the mean loss, in one sequential pass (a fixed summation order).

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    BResult, BackendError, Elem, In, LossIo, LossOps, RowLoss, RowLossArgs, SoftmaxXentArgs,
};

/// A loss's views as slices: logits, targets (`tlen` of them), stats and the gradient,
/// checked in that order.
type Views<'a, T> = (&'a [f32], &'a [T], &'a mut [f32], Option<&'a mut [f32]>);

fn views<'a, T: Elem>(
    io: LossIo<'a, CpuBackend>,
    targets: In<'a, CpuBackend, T>,
    tlen: usize,
    op: &'static str,
) -> BResult<Views<'a, T>> {
    let len = io.classes * io.n;
    let z = read_slice(io.logits, len, op)?;
    let t = read_slice(targets, tlen, op)?;
    let stats = write_slice(io.stats, 2, op)?;
    let dz = io.dlogits.map(|d| write_slice(d, len, op)).transpose()?;
    Ok((z, t, stats, dz))
}

/// The loop every loss shares: `row(j, dz)` gives sample j's loss and whether the
/// logits got it right, writing its column of `dz` if given. Batches are small (n x
/// classes); a sequential pass keeps the loss sum's order fixed and costs nothing next
/// to the GEMMs.
fn sum_rows(
    n: usize,
    stats: &mut [f32],
    mut dz: Option<&mut [f32]>,
    mut row: impl FnMut(usize, Option<&mut [f32]>) -> BResult<(f32, bool)>,
) -> BResult<()> {
    let (mut loss, mut right) = (0f64, 0u64);
    for j in 0..n {
        let (l, ok) = row(j, dz.as_deref_mut())?;
        loss += l as f64;
        right += u64::from(ok);
    }
    stats[0] = loss as f32;
    stats[1] = right as f32;
    Ok(())
}

/// The largest of `f(0..classes)` and its first index (`>`: NaN never wins).
fn argmax(classes: usize, f: impl Fn(usize) -> f32) -> (f32, usize) {
    let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
    for k in 0..classes {
        if f(k) > max {
            max = f(k);
            arg = k;
        }
    }
    (max, arg)
}

/// The softmax of one sample's logits `at(0..classes)`.
struct Softmax {
    max: f32,
    arg: usize,
    /// `sum exp(z - max)`.
    sum: f32,
}

impl Softmax {
    fn new(classes: usize, at: impl Fn(usize) -> f32) -> Self {
        let (max, arg) = argmax(classes, &at);
        let sum = (0..classes).map(|k| (at(k) - max).exp()).sum();
        Self { max, arg, sum }
    }
    /// `log sum exp(z)`.
    fn lse(&self) -> f32 {
        self.sum.ln() + self.max
    }
    /// The probability of logit `z`.
    fn p(&self, z: f32) -> f32 {
        (z - self.max).exp() / self.sum
    }
}

/// `log(1 + exp(-|z|))` and `sigmoid(z)`, without overflow for any `z`: `exp` only
/// ever sees a non-positive argument.
fn bce_parts(z: f32) -> (f32, f32) {
    let e = (-z.abs()).exp();
    let sig = if z >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    };
    (e.ln_1p(), sig)
}

impl LossOps for CpuBackend {
    fn softmax_xent(&self, op: SoftmaxXentArgs<'_, Self>) -> BResult<()> {
        let (classes, n) = (op.io.classes, op.io.n);
        let (z, labels, stats, dz) = views(op.io, op.labels, n, "softmax_xent")?;
        let inv_n = 1.0 / n.max(1) as f32;
        sum_rows(n, stats, dz, |j, dz| {
            let label = labels[j];
            let t = label as usize;
            if t >= classes {
                return Err(BackendError::Label {
                    row: j,
                    label,
                    classes,
                });
            }
            let at = |k: usize| z[k * n + j];
            let s = Softmax::new(classes, at);
            if let Some(dz) = dz {
                for k in 0..classes {
                    dz[k * n + j] = (s.p(at(k)) - if k == t { 1.0 } else { 0.0 }) * inv_n;
                }
            }
            Ok((s.lse() - at(t), s.arg == t))
        })
    }

    fn row_loss(&self, op: RowLossArgs<'_, Self>) -> BResult<()> {
        let (classes, n) = (op.io.classes, op.io.n);
        let (z, t, stats, dz) = views(op.io, op.targets, classes * n, op.loss.name())?;
        match op.loss {
            RowLoss::SoftmaxXent => {
                let inv_n = 1.0 / n.max(1) as f32;
                sum_rows(n, stats, dz, |j, dz| {
                    let at = |k: usize| z[k * n + j];
                    let tt = |k: usize| t[k * n + j];
                    let s = Softmax::new(classes, at);
                    let (_, targ) = argmax(classes, tt);
                    let lse = s.lse();
                    let (mut l, mut tsum) = (0f32, 0f32);
                    for k in 0..classes {
                        l += tt(k) * (lse - at(k));
                        tsum += tt(k);
                    }
                    if let Some(dz) = dz {
                        for k in 0..classes {
                            dz[k * n + j] = (s.p(at(k)) * tsum - tt(k)) * inv_n;
                        }
                    }
                    Ok((l, s.arg == targ))
                })
            }
            // Each term `max(z, 0) - z t + log(1 + exp(-|z|))`.
            RowLoss::SigmoidBce => {
                let inv_k = 1.0 / classes.max(1) as f32;
                let inv_nk = inv_k / n.max(1) as f32;
                sum_rows(n, stats, dz, |j, mut dz| {
                    let (mut l, mut all_right) = (0f32, true);
                    for k in 0..classes {
                        let (zz, tt) = (z[k * n + j], t[k * n + j]);
                        let (softplus, sig) = bce_parts(zz);
                        l += zz.max(0.0) - zz * tt + softplus;
                        all_right &= (zz > 0.0) == (tt > 0.5);
                        if let Some(dz) = dz.as_deref_mut() {
                            dz[k * n + j] = (sig - tt) * inv_nk;
                        }
                    }
                    Ok((l * inv_k, all_right))
                })
            }
        }
    }
}
