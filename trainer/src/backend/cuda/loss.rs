//! The losses on CUDA (`kernels/softmax_xent.cu`): one kernel writes each sample's loss
//! (softmax cross-entropy against a label or soft targets, or sigmoid + binary
//! cross-entropy) and whether it was right, then one block sums them in a fixed order.
//! A label out of range is recorded on the device and reported by the next `download`
//! or `synchronize`.

use std::sync::atomic::Ordering;

use super::buffer::DevPtr;
use super::kernels::{BceRows, LossRows, XentRows, XentSoftRows, XentSum};
use super::launch::{blocks, OpCx};
use super::CudaBackend;
use crate::backend::{BResult, Elem, In, LossIo, LossOps, RowLoss, RowLossArgs, SoftmaxXentArgs};

/// A loss's views as the row kernels' parameters, and the stats' address: checks the
/// logits, the targets (`tlen` of them, called `what`), the stats and the gradient, in
/// that order.
fn rows_io<T: Elem>(
    cx: &OpCx<'_>,
    io: LossIo<'_, CudaBackend>,
    targets: In<'_, CudaBackend, T>,
    tlen: usize,
    what: &str,
) -> BResult<(LossRows, DevPtr)> {
    let len = io.classes * io.n;
    let z = cx.read(io.logits, len, "logits")?;
    let t = cx.read(targets, tlen, what)?;
    let stats = cx.write(&io.stats, 2, "stats")?;
    let dz = io
        .dlogits
        .map(|d| cx.write(&d, len, "dlogits"))
        .transpose()?;
    let rows = LossRows {
        z,
        t,
        classes: io.classes as u64,
        n: io.n as u64,
        dz: dz.unwrap_or(z),
        has_dz: dz.is_some() as i32,
    };
    Ok((rows, stats))
}

/// Runs `rows(scratch)`, which writes the `n` samples' (loss, right) pairs into the
/// scratch, then sums them into `stats` in a fixed order.
fn sum_rows(
    cx: &OpCx<'_>,
    n: usize,
    stats: DevPtr,
    rows: impl FnOnce(DevPtr) -> BResult<()>,
) -> BResult<()> {
    cx.backend.with_scratch(n.max(1) * 8, |scratch| {
        if n > 0 {
            rows(scratch)?;
        }
        let sum = XentSum {
            rows: scratch,
            n: n as u64,
            stats,
        };
        cx.launch(&cx.backend.kernels().xent_sum, blocks(1, 1), sum)
    })
}

impl LossOps for CudaBackend {
    fn softmax_xent(&self, op: SoftmaxXentArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("softmax_xent");
        let (classes, n) = (op.io.classes, op.io.n);
        // The labels' pointer goes where the row kernels take the targets.
        let (io, stats) = rows_io(&cx, op.io, op.labels, n, "labels")?;
        let inv_n = 1.0 / n.max(1) as f32;
        self.inner.xent_classes.store(classes, Ordering::Relaxed);
        let flag = self
            .inner
            .bad_label
            .lock()
            .map_err(|_| cx.err("lock poisoned by an earlier panic"))?;
        let bad = DevPtr::of(&flag, self.stream());
        sum_rows(&cx, n, stats, |rows| {
            let params = XentRows {
                io,
                inv_n,
                rows,
                bad,
            };
            cx.launch(&self.kernels().xent_rows, cx.grid(n), params)
        })
    }

    fn row_loss(&self, op: RowLossArgs<'_, Self>) -> BResult<()> {
        let cx = self.op(op.loss.name());
        let (classes, n) = (op.io.classes, op.io.n);
        let (io, stats) = rows_io(&cx, op.io, op.targets, classes * n, "targets")?;
        let kernels = self.kernels();
        sum_rows(&cx, n, stats, |rows| match op.loss {
            RowLoss::SoftmaxXent => {
                let inv_n = 1.0 / n.max(1) as f32;
                let params = XentSoftRows { io, inv_n, rows };
                cx.launch(&kernels.xent_soft_rows, cx.grid(n), params)
            }
            RowLoss::SigmoidBce => {
                let inv_k = 1.0 / classes.max(1) as f32;
                let inv_nk = inv_k / n.max(1) as f32;
                let params = BceRows {
                    io,
                    inv_k,
                    inv_nk,
                    rows,
                };
                cx.launch(&kernels.bce_rows, cx.grid(n), params)
            }
        })
    }
}
