//! Batch norm + ReLU + 2x2 max pool on CUDA: no fused kernel yet, so the op runs the
//! existing batch-norm and max-pool kernels in sequence through a scratch buffer that
//! holds the full-size normalised activation (kept for the backward) and its gradient.
//! Same results as the separate layers; the CPU backend is where the fusion saves time.

use super::CudaBackend;
use crate::backend::{
    BResult, BatchNormBackwardArgs, BatchNormForwardArgs, BnPoolGeom, BnPoolOps,
    BnReluPoolBackwardArgs, BnReluPoolForwardArgs, In, MaxPoolBackwardArgs, MaxPoolForwardArgs,
    NormOps, Out, PoolOps,
};

impl BnPoolOps for CudaBackend {
    /// Scratch: the batch norm's output, then the gradient routed back through the pool.
    fn bn_relu_pool_scratch(&self, g: BnPoolGeom) -> usize {
        2 * g.c * g.n * g.h * g.w
    }

    fn bn_relu_pool_forward(&self, op: BnReluPoolForwardArgs<'_, Self>) -> BResult<()> {
        let Out { buf, off } = op.scratch;
        self.batchnorm_forward(BatchNormForwardArgs {
            state: op.state,
            y: Out::at(&mut *buf, off),
            bn: op.g.bn(),
        })?;
        self.maxpool_forward(MaxPoolForwardArgs {
            x: In::at(&*buf, off),
            geom: op.g.pool(),
            y: op.y,
            argmax: op.winners,
        })
    }

    fn bn_relu_pool_backward(&self, op: BnReluPoolBackwardArgs<'_, Self>) -> BResult<()> {
        let g = op.g;
        let full = g.c * g.n * g.h * g.w;
        let Out { buf, off } = op.scratch;
        self.maxpool_backward(MaxPoolBackwardArgs {
            dy: op.dy,
            argmax: op.winners,
            geom: g.pool(),
            dx: Out::at(&mut *buf, off + full),
        })?;
        self.batchnorm_backward(BatchNormBackwardArgs {
            grads: op.grads,
            y: In::at(&*buf, off),
            dy: In::at(&*buf, off + full),
            bn: g.bn(),
        })
    }
}
