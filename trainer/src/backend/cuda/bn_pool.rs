//! Batch norm + ReLU + 2x2 max pool on CUDA: no fused kernel yet, so the op runs the
//! existing batch-norm and max-pool kernels in sequence through a scratch buffer that
//! holds the full-size normalised activation (kept for the backward) and its gradient.
//! Same results as the separate layers; the CPU backend is where the fusion saves time.

use super::CudaBackend;
use crate::backend::{BResult, Backend, BnPoolGeom, In, Out};

/// Scratch: the batch norm's output, then the gradient routed back through the pool.
pub(super) fn scratch_len(g: BnPoolGeom) -> usize {
    2 * g.c * g.n * g.h * g.w
}

#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    b: &CudaBackend,
    x: In<'_, CudaBackend>,
    gamma_beta: In<'_, CudaBackend>,
    running: Out<'_, CudaBackend>,
    saved: Out<'_, CudaBackend>,
    y: Out<'_, CudaBackend>,
    winners: Out<'_, CudaBackend, u32>,
    scratch: Out<'_, CudaBackend>,
    g: BnPoolGeom,
    train: bool,
) -> BResult<()> {
    let Out { buf, off } = scratch;
    b.batchnorm_forward(
        x,
        gamma_beta,
        running,
        saved,
        Out::at(&mut *buf, off),
        g.bn(),
        train,
    )?;
    b.maxpool_forward(In::at(&*buf, off), g.pool(), y, winners)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    b: &CudaBackend,
    x: In<'_, CudaBackend>,
    dy: In<'_, CudaBackend>,
    winners: In<'_, CudaBackend, u32>,
    gamma_beta: In<'_, CudaBackend>,
    saved: In<'_, CudaBackend>,
    dgamma_beta: Out<'_, CudaBackend>,
    dx: Out<'_, CudaBackend>,
    scratch: Out<'_, CudaBackend>,
    g: BnPoolGeom,
) -> BResult<()> {
    let full = g.c * g.n * g.h * g.w;
    let Out { buf, off } = scratch;
    b.maxpool_backward(dy, winners, g.pool(), Out::at(&mut *buf, off + full))?;
    b.batchnorm_backward(
        x,
        In::at(&*buf, off),
        In::at(&*buf, off + full),
        gamma_beta,
        saved,
        dgamma_beta,
        dx,
        g.bn(),
    )
}
