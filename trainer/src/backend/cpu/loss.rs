//! The losses on the CPU: softmax and cross-entropy (hard or soft targets), and sigmoid
//! with binary cross-entropy (multi-label), over a batch of logits, with the gradient
//! of the mean loss, in one sequential pass (a fixed summation order).

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, BackendError, In, Out};

pub(super) fn softmax_xent(
    logits: In<'_, CpuBackend>,
    labels: In<'_, CpuBackend, u32>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CpuBackend>>,
    stats: Out<'_, CpuBackend>,
) -> BResult<()> {
    let z = read_slice(logits, classes * n, "softmax_xent")?;
    let labels = read_slice(labels, n, "softmax_xent")?;
    let stats = write_slice(stats, 2, "softmax_xent")?;
    let mut dz = match dlogits {
        Some(d) => Some(write_slice(d, classes * n, "softmax_xent")?),
        None => None,
    };
    // Batches are small (n x classes); a sequential pass keeps the loss sum's order
    // fixed and costs nothing next to the GEMMs.
    let (mut loss, mut correct) = (0f64, 0u64);
    let inv_n = 1.0 / n.max(1) as f32;
    for (j, &label) in labels.iter().enumerate() {
        let t = label as usize;
        if t >= classes {
            return Err(BackendError::Label {
                row: j,
                label,
                classes,
            });
        }
        let at = |k: usize| z[k * n + j];
        let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
        for k in 0..classes {
            if at(k) > max {
                max = at(k);
                arg = k;
            }
        }
        let sum: f32 = (0..classes).map(|k| (at(k) - max).exp()).sum();
        loss += (sum.ln() + max - at(t)) as f64;
        correct += u64::from(arg == t);
        if let Some(dz) = dz.as_deref_mut() {
            for k in 0..classes {
                let p = (at(k) - max).exp() / sum;
                dz[k * n + j] = (p - if k == t { 1.0 } else { 0.0 }) * inv_n;
            }
        }
    }
    stats[0] = loss as f32;
    stats[1] = correct as f32;
    Ok(())
}

/// The soft-target loss (see `Backend::softmax_xent_soft`), in the same sequential order.
pub(super) fn softmax_xent_soft(
    logits: In<'_, CpuBackend>,
    targets: In<'_, CpuBackend>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CpuBackend>>,
    stats: Out<'_, CpuBackend>,
) -> BResult<()> {
    let z = read_slice(logits, classes * n, "softmax_xent_soft")?;
    let t = read_slice(targets, classes * n, "softmax_xent_soft")?;
    let stats = write_slice(stats, 2, "softmax_xent_soft")?;
    let mut dz = match dlogits {
        Some(d) => Some(write_slice(d, classes * n, "softmax_xent_soft")?),
        None => None,
    };
    let (mut loss, mut correct) = (0f64, 0u64);
    let inv_n = 1.0 / n.max(1) as f32;
    for j in 0..n {
        let at = |k: usize| z[k * n + j];
        let tt = |k: usize| t[k * n + j];
        let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
        let (mut tmax, mut targ) = (f32::NEG_INFINITY, 0);
        for k in 0..classes {
            if at(k) > max {
                max = at(k);
                arg = k;
            }
            if tt(k) > tmax {
                tmax = tt(k);
                targ = k;
            }
        }
        let sum: f32 = (0..classes).map(|k| (at(k) - max).exp()).sum();
        let lse = sum.ln() + max;
        let (mut l, mut tsum) = (0f32, 0f32);
        for k in 0..classes {
            l += tt(k) * (lse - at(k));
            tsum += tt(k);
        }
        loss += l as f64;
        correct += u64::from(arg == targ);
        if let Some(dz) = dz.as_deref_mut() {
            for k in 0..classes {
                let p = (at(k) - max).exp() / sum;
                dz[k * n + j] = (p * tsum - tt(k)) * inv_n;
            }
        }
    }
    stats[0] = loss as f32;
    stats[1] = correct as f32;
    Ok(())
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

/// Sigmoid + binary cross-entropy (see `Backend::sigmoid_bce`), one sample at a time in
/// a fixed order, each term `max(z, 0) - z t + log(1 + exp(-|z|))`.
pub(super) fn sigmoid_bce(
    logits: In<'_, CpuBackend>,
    targets: In<'_, CpuBackend>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CpuBackend>>,
    stats: Out<'_, CpuBackend>,
) -> BResult<()> {
    let z = read_slice(logits, classes * n, "sigmoid_bce")?;
    let t = read_slice(targets, classes * n, "sigmoid_bce")?;
    let stats = write_slice(stats, 2, "sigmoid_bce")?;
    let mut dz = match dlogits {
        Some(d) => Some(write_slice(d, classes * n, "sigmoid_bce")?),
        None => None,
    };
    let (mut loss, mut exact) = (0f64, 0u64);
    let inv_k = 1.0 / classes.max(1) as f32;
    let inv_nk = inv_k / n.max(1) as f32;
    for j in 0..n {
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
        loss += (l * inv_k) as f64;
        exact += u64::from(all_right);
    }
    stats[0] = loss as f32;
    stats[1] = exact as f32;
    Ok(())
}
