//! Convolution as im2col + GEMM on CUDA (`kernels/im2col.cu`): `im2col` unfolds images
//! into the column matrix, `col2im` (its adjoint) folds the columns' gradient back.

use super::buffer::{device_addr, op_err};
use super::{cuda_err, CudaBackend};
use crate::backend::{BResult, ColLayout, ConvGeom, In, Out};

/// The kernels write and read the tap-major layout only.
fn check_layout(geom: &ConvGeom, op: &'static str) -> BResult<()> {
    match geom.col {
        ColLayout::TapMajor => Ok(()),
        ColLayout::PixelMajor => Err(op_err(
            op,
            "the CUDA backend supports only the tap-major im2col layout",
        )),
    }
}

pub(super) fn im2col(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    geom: ConvGeom,
    n0: usize,
    nc: usize,
    col: Out<'_, CudaBackend>,
) -> BResult<()> {
    check_layout(&geom, "im2col")?;
    if n0 + nc > geom.n {
        return Err(op_err(
            "im2col",
            format!("images {n0}..{} of {}", n0 + nc, geom.n),
        ));
    }
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let total = geom.col_rows() * nc * oh * ow;
    let s = backend.stream();
    let xp = device_addr(
        s,
        x.buf,
        x.off,
        geom.c * geom.n * geom.h * geom.w,
        "im2col",
        "input",
    )?;
    let cp = device_addr(s, col.buf, col.off, total, "im2col", "output")?;
    if total == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .im2col(
            s,
            backend.grid(total),
            xp,
            cp,
            geom.c as i32,
            geom.n as u64,
            geom.h as i32,
            geom.w as i32,
            geom.kh as i32,
            geom.kw as i32,
            geom.stride as i32,
            geom.pad as i32,
            oh as i32,
            ow as i32,
            n0 as u64,
            nc as u64,
        )
        .map_err(cuda_err("im2col"))
}

pub(super) fn col2im(
    backend: &CudaBackend,
    col: In<'_, CudaBackend>,
    geom: ConvGeom,
    n0: usize,
    nc: usize,
    dx: Out<'_, CudaBackend>,
) -> BResult<()> {
    check_layout(&geom, "col2im")?;
    if n0 + nc > geom.n {
        return Err(op_err(
            "col2im",
            format!("images {n0}..{} of {}", n0 + nc, geom.n),
        ));
    }
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let s = backend.stream();
    let cols = geom.col_rows() * nc * oh * ow;
    let cp = device_addr(s, col.buf, col.off, cols, "col2im", "input")?;
    let dp = device_addr(
        s,
        dx.buf,
        dx.off,
        geom.c * geom.n * geom.h * geom.w,
        "col2im",
        "output",
    )?;
    let total = geom.c * nc * geom.h * geom.w;
    if total == 0 {
        return Ok(());
    }
    backend
        .kernels()
        .col2im(
            s,
            backend.grid(total),
            cp,
            dp,
            geom.c as i32,
            geom.n as u64,
            geom.h as i32,
            geom.w as i32,
            geom.kh as i32,
            geom.kw as i32,
            geom.stride as i32,
            geom.pad as i32,
            oh as i32,
            ow as i32,
            n0 as u64,
            nc as u64,
        )
        .map_err(cuda_err("col2im"))
}
