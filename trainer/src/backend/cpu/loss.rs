//! The loss on the CPU: softmax and cross-entropy over a batch of logits, with the
//! gradient of the mean loss, in one sequential pass (a fixed summation order).

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
