//! Pooling on CUDA (`kernels/pool.cu`): max pooling with its argmax, and global average
//! pooling, forward and backward.

use super::buffer::DevPtr;
use super::kernels::{AvgPool, MaxPoolBackward, MaxPoolForward, PoolDims};
use super::CudaBackend;
use crate::backend::{
    AvgPoolBackwardArgs, AvgPoolForwardArgs, BResult, MaxPoolBackwardArgs, MaxPoolForwardArgs,
    PoolGeom, PoolOps,
};

/// The max-pooling kernels' shape parameters.
fn dims(g: &PoolGeom) -> PoolDims {
    PoolDims {
        planes: g.planes as u64,
        h: g.h as i32,
        w: g.w as i32,
        k: g.k as i32,
        stride: g.stride as i32,
        oh: g.out_h() as i32,
        ow: g.out_w() as i32,
    }
}

/// The average-pooling kernels' parameters, for `planes` planes of `hw` elements.
fn avg(src: DevPtr, dst: DevPtr, planes: usize, hw: usize) -> AvgPool {
    AvgPool {
        src,
        dst,
        planes: planes as u64,
        hw: hw as u64,
        inv: 1.0 / hw as f32,
    }
}

impl PoolOps for CudaBackend {
    fn maxpool_forward(&self, op: MaxPoolForwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("maxpool_forward");
        let g = op.geom;
        let params = MaxPoolForward {
            x: cx.read(op.x, g.in_len(), "input")?,
            y: cx.write(&op.y, g.out_len(), "output")?,
            argmax: cx.write(&op.argmax, g.out_len(), "argmax")?,
            dims: dims(&g),
        };
        // One thread per output.
        if g.out_len() == 0 {
            return Ok(());
        }
        cx.launch(
            &self.kernels().maxpool_forward,
            cx.grid(g.out_len()),
            params,
        )
    }

    fn maxpool_backward(&self, op: MaxPoolBackwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("maxpool_backward");
        let g = op.geom;
        let params = MaxPoolBackward {
            dy: cx.read(op.dy, g.out_len(), "gradient")?,
            argmax: cx.read(op.argmax, g.out_len(), "argmax")?,
            dx: cx.write(&op.dx, g.in_len(), "input gradient")?,
            dims: dims(&g),
        };
        // One thread per input, gathering the outputs it won.
        if g.in_len() == 0 || g.out_len() == 0 {
            return Ok(());
        }
        cx.launch(
            &self.kernels().maxpool_backward,
            cx.grid(g.in_len()),
            params,
        )
    }

    fn avgpool_forward(&self, op: AvgPoolForwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("avgpool_forward");
        let (planes, hw) = (op.planes, op.hw);
        let x = cx.read(op.x, planes * hw, "input")?;
        let y = cx.write(&op.y, planes, "output")?;
        if hw == 0 || planes == 0 {
            return Ok(());
        }
        let params = avg(x, y, planes, hw);
        cx.launch(&self.kernels().avgpool_forward, cx.grid(planes), params)
    }

    fn avgpool_backward(&self, op: AvgPoolBackwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("avgpool_backward");
        let (planes, hw) = (op.planes, op.hw);
        let dy = cx.read(op.dy, planes, "gradient")?;
        let dx = cx.write(&op.dx, planes * hw, "input gradient")?;
        if hw == 0 || planes == 0 {
            return Ok(());
        }
        let params = avg(dy, dx, planes, hw);
        cx.launch(
            &self.kernels().avgpool_backward,
            cx.grid(planes * hw),
            params,
        )
    }
}
