//! Convolution as im2col + GEMM on CUDA (`kernels/im2col.cu`): `im2col` unfolds images
//! into the column matrix, `col2im` (its adjoint) folds the columns' gradient back, and
//! `forward` / `backward` run a whole convolution as chunks of images, each one im2col
//! and a cuBLAS GEMM written straight into the output's columns (the GEMM's `ldc` skips
//! the other images); a chunk's columns fill the scratch, sized by `im2col_budget`.

use super::buffer::{device_addr, op_err};
use super::{cuda_err, CudaBackend};
use crate::backend::{BResult, Backend, ColLayout, ConvGeom, Gemm, In, Out};

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

/// Images per chunk: as many as the im2col budget holds, at least one.
fn chunk(backend: &CudaBackend, geom: &ConvGeom) -> usize {
    let per_image = geom.col_rows() * geom.out_h() * geom.out_w();
    (backend.im2col_budget() / per_image.max(1)).clamp(1, geom.n.max(1))
}

pub(super) fn scratch_len(backend: &CudaBackend, geom: ConvGeom, _cout: usize) -> usize {
    geom.col_rows() * geom.out_h() * geom.out_w() * chunk(backend, &geom)
}

pub(super) fn forward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    w: In<'_, CudaBackend>,
    geom: ConvGeom,
    cout: usize,
    y: Out<'_, CudaBackend>,
    scratch: Out<'_, CudaBackend>,
) -> BResult<()> {
    check_layout(&geom, "conv_forward")?;
    let (ohw, kdim, n) = (geom.out_h() * geom.out_w(), geom.col_rows(), geom.n);
    let chunk = chunk(backend, &geom);
    let (Out { buf: yb, off: yo }, Out { buf: sb, off: so }) = (y, scratch);
    for n0 in (0..n).step_by(chunk) {
        let nc = chunk.min(n - n0);
        backend.im2col(x, geom, n0, nc, Out::at(&mut *sb, so))?;
        let mut gm = Gemm::dense(false, false, cout, nc * ohw, kdim);
        gm.ldc = n * ohw;
        backend.gemm(gm, w, In::at(&*sb, so), Out::at(&mut *yb, yo + n0 * ohw))?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    w: In<'_, CudaBackend>,
    dy: In<'_, CudaBackend>,
    geom: ConvGeom,
    cout: usize,
    dw: Out<'_, CudaBackend>,
    mut dx: Option<Out<'_, CudaBackend>>,
    scratch: Out<'_, CudaBackend>,
    reuse: bool,
) -> BResult<()> {
    check_layout(&geom, "conv_backward")?;
    let (ohw, kdim, n) = (geom.out_h() * geom.out_w(), geom.col_rows(), geom.n);
    let chunk = chunk(backend, &geom);
    // The forward's columns are still in the scratch only if it took one chunk.
    let mut cols_valid = reuse && n <= chunk;
    let (Out { buf: wb, off: wo }, Out { buf: sb, off: so }) = (dw, scratch);
    for (i, n0) in (0..n).step_by(chunk).enumerate() {
        let nc = chunk.min(n - n0);
        if !cols_valid {
            backend.im2col(x, geom, n0, nc, Out::at(&mut *sb, so))?;
        }
        // dW[cout, K] (+)= dy[cout, nc*ohw] col[K, nc*ohw]^T
        let mut gw = Gemm::dense(false, true, cout, kdim, nc * ohw);
        gw.lda = n * ohw;
        gw.beta = if i == 0 { 0.0 } else { 1.0 };
        backend.gemm(
            gw,
            dy.skip(n0 * ohw),
            In::at(&*sb, so),
            Out::at(&mut *wb, wo),
        )?;
        if let Some(Out { buf: db, off: dof }) = dx.as_mut() {
            // dcol[K, nc*ohw] = W[cout, K]^T dy[cout, nc*ohw], into the same scratch.
            let mut gc = Gemm::dense(true, false, kdim, nc * ohw, cout);
            gc.ldb = n * ohw;
            backend.gemm(gc, w, dy.skip(n0 * ohw), Out::at(&mut *sb, so))?;
            backend.col2im(In::at(&*sb, so), geom, n0, nc, Out::at(&mut **db, *dof))?;
            cols_valid = false;
        }
    }
    Ok(())
}
