//! Pooling on CUDA (`kernels/pool.cu`): max pooling with its argmax, and global average
//! pooling, forward and backward.

use super::buffer::device_addr;
use super::{cuda_err, CudaBackend};
use crate::backend::{BResult, In, Out, PoolGeom};

pub(super) fn maxpool_forward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    geom: PoolGeom,
    y: Out<'_, CudaBackend>,
    argmax: Out<'_, CudaBackend, u32>,
) -> BResult<()> {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let (hw, ohw) = (geom.h * geom.w, oh * ow);
    let s = backend.stream();
    let xp = device_addr(
        s,
        x.buf,
        x.off,
        geom.planes * hw,
        "maxpool_forward",
        "input",
    )?;
    let yp = device_addr(
        s,
        y.buf,
        y.off,
        geom.planes * ohw,
        "maxpool_forward",
        "output",
    )?;
    let ap = device_addr(
        s,
        argmax.buf,
        argmax.off,
        geom.planes * ohw,
        "maxpool_forward",
        "argmax",
    )?;
    let total = geom.planes * ohw;
    if total == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .maxpool_forward(
            s,
            backend.grid(total),
            xp,
            yp,
            ap,
            geom.planes as u64,
            geom.h as i32,
            geom.w as i32,
            geom.k as i32,
            geom.stride as i32,
            oh as i32,
            ow as i32,
        )
        .map_err(cuda_err("maxpool_forward"))
}

pub(super) fn maxpool_backward(
    backend: &CudaBackend,
    dy: In<'_, CudaBackend>,
    argmax: In<'_, CudaBackend, u32>,
    geom: PoolGeom,
    dx: Out<'_, CudaBackend>,
) -> BResult<()> {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let (hw, ohw) = (geom.h * geom.w, oh * ow);
    let s = backend.stream();
    let dyp = device_addr(
        s,
        dy.buf,
        dy.off,
        geom.planes * ohw,
        "maxpool_backward",
        "gradient",
    )?;
    let ap = device_addr(
        s,
        argmax.buf,
        argmax.off,
        geom.planes * ohw,
        "maxpool_backward",
        "argmax",
    )?;
    let dxp = device_addr(
        s,
        dx.buf,
        dx.off,
        geom.planes * hw,
        "maxpool_backward",
        "input gradient",
    )?;
    let total = geom.planes * hw;
    if total == 0 || ohw == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .maxpool_backward(
            s,
            backend.grid(total),
            dyp,
            ap,
            dxp,
            geom.planes as u64,
            geom.h as i32,
            geom.w as i32,
            geom.k as i32,
            geom.stride as i32,
            oh as i32,
            ow as i32,
        )
        .map_err(cuda_err("maxpool_backward"))
}

pub(super) fn avgpool_forward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    planes: usize,
    hw: usize,
    y: Out<'_, CudaBackend>,
) -> BResult<()> {
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, planes * hw, "avgpool_forward", "input")?;
    let yp = device_addr(s, y.buf, y.off, planes, "avgpool_forward", "output")?;
    if hw == 0 || planes == 0 {
        return Ok(());
    }
    let inv = 1.0 / hw as f32;
    backend
        .kernels()
        .avgpool_forward(
            s,
            backend.grid(planes),
            xp,
            yp,
            planes as u64,
            hw as u64,
            inv,
        )
        .map_err(cuda_err("avgpool_forward"))
}

pub(super) fn avgpool_backward(
    backend: &CudaBackend,
    dy: In<'_, CudaBackend>,
    planes: usize,
    hw: usize,
    dx: Out<'_, CudaBackend>,
) -> BResult<()> {
    let s = backend.stream();
    let dyp = device_addr(s, dy.buf, dy.off, planes, "avgpool_backward", "gradient")?;
    let dxp = device_addr(
        s,
        dx.buf,
        dx.off,
        planes * hw,
        "avgpool_backward",
        "input gradient",
    )?;
    if hw == 0 || planes == 0 {
        return Ok(());
    }
    let inv = 1.0 / hw as f32;
    backend
        .kernels()
        .avgpool_backward(
            s,
            backend.grid(planes * hw),
            dyp,
            dxp,
            planes as u64,
            hw as u64,
            inv,
        )
        .map_err(cuda_err("avgpool_backward"))
}
