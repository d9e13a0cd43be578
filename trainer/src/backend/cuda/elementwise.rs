//! Element-wise ops on CUDA (`kernels/elementwise.cu`, `kernels/bias_act.cu`): fill,
//! add, the residual join, bias + activation and ReLU, forward and backward.

use cudarc::driver::LaunchConfig;

use super::buffer::{device_addr, op_err};
use super::{cuda_err, CudaBackend, RED_THREADS};
use crate::backend::{BResult, In, Out};

pub(super) fn fill(
    backend: &CudaBackend,
    dst: Out<'_, CudaBackend>,
    len: usize,
    value: f32,
) -> BResult<()> {
    if len == 0 {
        return Ok(());
    }
    let s = backend.stream();
    let y = device_addr(s, dst.buf, dst.off, len, "fill", "output")?;
    backend
        .kernels()
        .fill_f32(s, backend.grid(len), y, len as u64, value)
        .map_err(cuda_err("fill"))
}

pub(super) fn add(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    y: Out<'_, CudaBackend>,
    len: usize,
) -> BResult<()> {
    if len == 0 {
        return Ok(());
    }
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, len, "add", "input")?;
    let yp = device_addr(s, y.buf, y.off, len, "add", "output")?;
    backend
        .kernels()
        .add_f32(s, backend.grid(len), xp, yp, len as u64)
        .map_err(cuda_err("add"))
}

pub(super) fn add_act(
    backend: &CudaBackend,
    a: In<'_, CudaBackend>,
    b: In<'_, CudaBackend>,
    y: Out<'_, CudaBackend>,
    len: usize,
    relu: bool,
) -> BResult<()> {
    if len == 0 {
        return Ok(());
    }
    let s = backend.stream();
    let ap = device_addr(s, a.buf, a.off, len, "add_act", "input")?;
    let bp = device_addr(s, b.buf, b.off, len, "add_act", "input")?;
    let yp = device_addr(s, y.buf, y.off, len, "add_act", "output")?;
    backend
        .kernels()
        .add_act(s, backend.grid(len), ap, bp, yp, len as u64, relu as i32)
        .map_err(cuda_err("add_act"))
}

pub(super) fn bias_act_forward(
    backend: &CudaBackend,
    y: Out<'_, CudaBackend>,
    bias: Option<In<'_, CudaBackend>>,
    rows: usize,
    cols: usize,
    relu: bool,
) -> BResult<()> {
    let s = backend.stream();
    let yp = device_addr(s, y.buf, y.off, rows * cols, "bias_act_forward", "output")?;
    let bp = match bias {
        Some(b) => Some(device_addr(
            s,
            b.buf,
            b.off,
            rows,
            "bias_act_forward",
            "bias",
        )?),
        None => None,
    };
    if rows * cols == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .bias_act_forward(
            s,
            backend.grid(rows * cols),
            yp,
            bp.unwrap_or(yp),
            bp.is_some() as i32,
            rows as u64,
            cols as u64,
            relu as i32,
        )
        .map_err(cuda_err("bias_act_forward"))
}

pub(super) fn bias_act_backward(
    backend: &CudaBackend,
    y: In<'_, CudaBackend>,
    dy: Out<'_, CudaBackend>,
    dbias: Option<Out<'_, CudaBackend>>,
    rows: usize,
    cols: usize,
    relu: bool,
) -> BResult<()> {
    let s = backend.stream();
    let n = rows * cols;
    let yp = device_addr(s, y.buf, y.off, n, "bias_act_backward", "output")?;
    let dp = device_addr(s, dy.buf, dy.off, n, "bias_act_backward", "gradient")?;
    match dbias {
        Some(db) => {
            let bp = device_addr(
                s,
                db.buf,
                db.off,
                rows,
                "bias_act_backward",
                "bias gradient",
            )?;
            if cols == 0 || rows == 0 {
                // The CPU leaves dbias alone when there are no columns.
                return Ok(());
            }
            let cfg = LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (RED_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            if rows > u32::MAX as usize {
                return Err(op_err("bias_act_backward", "too many rows"));
            }
            backend
                .kernels()
                .bias_act_backward_rows(s, cfg, yp, dp, bp, cols as u64, relu as i32)
                .map_err(cuda_err("bias_act_backward"))
        }
        None if relu && n > 0 => backend
            .kernels()
            .relu_mask(s, backend.grid(n), yp, dp, n as u64)
            .map_err(cuda_err("bias_act_backward")),
        None => Ok(()),
    }
}

pub(super) fn relu_forward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    y: Out<'_, CudaBackend>,
    len: usize,
) -> BResult<()> {
    if len == 0 {
        return Ok(());
    }
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, len, "relu_forward", "input")?;
    let yp = device_addr(s, y.buf, y.off, len, "relu_forward", "output")?;
    backend
        .kernels()
        .relu_forward(s, backend.grid(len), xp, yp, len as u64)
        .map_err(cuda_err("relu_forward"))
}

pub(super) fn relu_backward(
    backend: &CudaBackend,
    y: In<'_, CudaBackend>,
    dy: In<'_, CudaBackend>,
    dx: Out<'_, CudaBackend>,
    len: usize,
) -> BResult<()> {
    if len == 0 {
        return Ok(());
    }
    let s = backend.stream();
    let yp = device_addr(s, y.buf, y.off, len, "relu_backward", "output")?;
    let dyp = device_addr(s, dy.buf, dy.off, len, "relu_backward", "gradient")?;
    let dxp = device_addr(s, dx.buf, dx.off, len, "relu_backward", "input gradient")?;
    backend
        .kernels()
        .relu_backward(s, backend.grid(len), yp, dyp, dxp, len as u64)
        .map_err(cuda_err("relu_backward"))
}
