//! The losses on CUDA (`kernels/softmax_xent.cu`): per-sample softmax cross-entropy (or
//! sigmoid + binary cross-entropy) rows, then one block that sums them in a fixed order. A label out of range is recorded on
//! the device and reported by the next `download` or `synchronize`.

use std::sync::atomic::Ordering;

use cudarc::driver::LaunchConfig;

use super::buffer::{device_addr, op_err, DevPtr};
use super::{cuda_err, CudaBackend, RED_THREADS};
use crate::backend::{BResult, In, Out};

pub(super) fn softmax_xent(
    backend: &CudaBackend,
    logits: In<'_, CudaBackend>,
    labels: In<'_, CudaBackend, u32>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CudaBackend>>,
    stats: Out<'_, CudaBackend>,
) -> BResult<()> {
    let op = "softmax_xent";
    let s = backend.stream();
    let zp = device_addr(s, logits.buf, logits.off, classes * n, op, "logits")?;
    let lp = device_addr(s, labels.buf, labels.off, n, op, "labels")?;
    let sp = device_addr(s, stats.buf, stats.off, 2, op, "stats")?;
    let dz = match dlogits {
        Some(d) => Some(device_addr(s, d.buf, d.off, classes * n, op, "dlogits")?),
        None => None,
    };
    let inv_n = 1.0 / n.max(1) as f32;
    backend.inner.xent_classes.store(classes, Ordering::Relaxed);
    let flag = backend
        .inner
        .bad_label
        .lock()
        .map_err(|_| op_err(op, "lock poisoned by an earlier panic"))?;
    let fp = DevPtr::of(&flag, s);
    backend.with_scratch(n.max(1) * 8, |rows| {
        if n > 0 {
            backend
                .kernels()
                .xent_rows(
                    s,
                    backend.grid(n),
                    zp,
                    lp,
                    classes as u64,
                    n as u64,
                    dz.unwrap_or(zp),
                    dz.is_some() as i32,
                    inv_n,
                    rows,
                    fp,
                )
                .map_err(cuda_err(op))?;
        }
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        backend
            .kernels()
            .xent_sum(s, one, rows, n as u64, sp)
            .map_err(cuda_err(op))
    })
}

/// The soft-target loss (`kernels/softmax_xent.cu`, `xent_soft_rows`), summed by the same
/// fixed-order block as the hard one.
pub(super) fn softmax_xent_soft(
    backend: &CudaBackend,
    logits: In<'_, CudaBackend>,
    targets: In<'_, CudaBackend>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CudaBackend>>,
    stats: Out<'_, CudaBackend>,
) -> BResult<()> {
    let op = "softmax_xent_soft";
    let s = backend.stream();
    let zp = device_addr(s, logits.buf, logits.off, classes * n, op, "logits")?;
    let tp = device_addr(s, targets.buf, targets.off, classes * n, op, "targets")?;
    let sp = device_addr(s, stats.buf, stats.off, 2, op, "stats")?;
    let dz = match dlogits {
        Some(d) => Some(device_addr(s, d.buf, d.off, classes * n, op, "dlogits")?),
        None => None,
    };
    let inv_n = 1.0 / n.max(1) as f32;
    backend.with_scratch(n.max(1) * 8, |rows| {
        if n > 0 {
            backend
                .kernels()
                .xent_soft_rows(
                    s,
                    backend.grid(n),
                    zp,
                    tp,
                    classes as u64,
                    n as u64,
                    dz.unwrap_or(zp),
                    dz.is_some() as i32,
                    inv_n,
                    rows,
                )
                .map_err(cuda_err(op))?;
        }
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        backend
            .kernels()
            .xent_sum(s, one, rows, n as u64, sp)
            .map_err(cuda_err(op))
    })
}

/// Sigmoid + binary cross-entropy (`kernels/softmax_xent.cu`, `bce_rows`), summed by the
/// same fixed-order block as the softmax losses.
pub(super) fn sigmoid_bce(
    backend: &CudaBackend,
    logits: In<'_, CudaBackend>,
    targets: In<'_, CudaBackend>,
    classes: usize,
    n: usize,
    dlogits: Option<Out<'_, CudaBackend>>,
    stats: Out<'_, CudaBackend>,
) -> BResult<()> {
    let op = "sigmoid_bce";
    let s = backend.stream();
    let zp = device_addr(s, logits.buf, logits.off, classes * n, op, "logits")?;
    let tp = device_addr(s, targets.buf, targets.off, classes * n, op, "targets")?;
    let sp = device_addr(s, stats.buf, stats.off, 2, op, "stats")?;
    let dz = match dlogits {
        Some(d) => Some(device_addr(s, d.buf, d.off, classes * n, op, "dlogits")?),
        None => None,
    };
    let inv_k = 1.0 / classes.max(1) as f32;
    let inv_nk = inv_k / n.max(1) as f32;
    backend.with_scratch(n.max(1) * 8, |rows| {
        if n > 0 {
            backend
                .kernels()
                .bce_rows(
                    s,
                    backend.grid(n),
                    zp,
                    tp,
                    classes as u64,
                    n as u64,
                    dz.unwrap_or(zp),
                    dz.is_some() as i32,
                    inv_k,
                    inv_nk,
                    rows,
                )
                .map_err(cuda_err(op))?;
        }
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        backend
            .kernels()
            .xent_sum(s, one, rows, n as u64, sp)
            .map_err(cuda_err(op))
    })
}
