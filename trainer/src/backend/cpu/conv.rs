//! Convolution as im2col + GEMM on the CPU: `im2col` unfolds images into the column
//! matrix a GEMM multiplies by the weights, and `col2im` (its adjoint) folds the
//! columns' gradient back onto the images.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, BackendError, ConvGeom, In, Out};

/// For a stride-1 convolution tap at column offset `kx`: the output columns
/// `lo..hi` whose input column `ox + kx - pad` lies inside `0..w` (`lo <= hi`).
fn valid_cols(ow: usize, w: usize, kx: usize, pad: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(kx).min(ow);
    let hi = (w + pad).saturating_sub(kx).min(ow).max(lo);
    (lo, hi)
}

pub(super) fn im2col(
    x: In<'_, CpuBackend>,
    geom: ConvGeom,
    n0: usize,
    nc: usize,
    col: Out<'_, CpuBackend>,
) -> BResult<()> {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let hw = geom.h * geom.w;
    let row = nc * oh * ow;
    if n0 + nc > geom.n {
        return Err(BackendError::Op {
            op: "im2col",
            reason: format!("images {n0}..{} of {}", n0 + nc, geom.n),
        });
    }
    let x = read_slice(x, geom.c * geom.n * hw, "im2col")?;
    let col = write_slice(col, geom.col_rows() * row, "im2col")?;
    if row == 0 {
        return Ok(());
    }
    col.par_chunks_mut(row).enumerate().for_each(|(r, dst)| {
        let ci = r / (geom.kh * geom.kw);
        let ky = (r / geom.kw) % geom.kh;
        let kx = r % geom.kw;
        for ni in 0..nc {
            let plane = &x[(ci * geom.n + n0 + ni) * hw..][..hw];
            let out = &mut dst[ni * oh * ow..][..oh * ow];
            for oy in 0..oh {
                let seg = &mut out[oy * ow..][..ow];
                let iy = (oy * geom.stride + ky) as isize - geom.pad as isize;
                if iy < 0 || iy >= geom.h as isize {
                    seg.fill(0.0);
                    continue;
                }
                let src = &plane[iy as usize * geom.w..][..geom.w];
                if geom.stride == 1 {
                    let (lo, hi) = valid_cols(ow, geom.w, kx, geom.pad);
                    seg[..lo].fill(0.0);
                    seg[lo..hi].copy_from_slice(&src[lo + kx - geom.pad..hi + kx - geom.pad]);
                    seg[hi..].fill(0.0);
                    continue;
                }
                for (ox, v) in seg.iter_mut().enumerate() {
                    let ix = (ox * geom.stride + kx) as isize - geom.pad as isize;
                    *v = if ix < 0 || ix >= geom.w as isize {
                        0.0
                    } else {
                        src[ix as usize]
                    };
                }
            }
        }
    });
    Ok(())
}

pub(super) fn col2im(
    col: In<'_, CpuBackend>,
    geom: ConvGeom,
    n0: usize,
    nc: usize,
    dx: Out<'_, CpuBackend>,
) -> BResult<()> {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let hw = geom.h * geom.w;
    let row = nc * oh * ow;
    if n0 + nc > geom.n {
        return Err(BackendError::Op {
            op: "col2im",
            reason: format!("images {n0}..{} of {}", n0 + nc, geom.n),
        });
    }
    let col = read_slice(col, geom.col_rows() * row, "col2im")?;
    let dx = write_slice(dx, geom.c * geom.n * hw, "col2im")?;
    if hw == 0 {
        return Ok(());
    }
    // One task per input channel: it owns its planes, and sums its kernel taps in a
    // fixed order.
    dx.par_chunks_mut(geom.n * hw)
        .enumerate()
        .for_each(|(ci, planes)| {
            let region = &mut planes[n0 * hw..(n0 + nc) * hw];
            region.fill(0.0);
            for ky in 0..geom.kh {
                for kx in 0..geom.kw {
                    let r = (ci * geom.kh + ky) * geom.kw + kx;
                    let src = &col[r * row..][..row];
                    for ni in 0..nc {
                        let plane = &mut region[ni * hw..][..hw];
                        let s = &src[ni * oh * ow..][..oh * ow];
                        for oy in 0..oh {
                            let iy = (oy * geom.stride + ky) as isize - geom.pad as isize;
                            if iy < 0 || iy >= geom.h as isize {
                                continue;
                            }
                            let drow = &mut plane[iy as usize * geom.w..][..geom.w];
                            if geom.stride == 1 {
                                let (lo, hi) = valid_cols(ow, geom.w, kx, geom.pad);
                                let d = &mut drow[lo + kx - geom.pad..hi + kx - geom.pad];
                                for (d, v) in d.iter_mut().zip(&s[oy * ow + lo..oy * ow + hi]) {
                                    *d += v;
                                }
                                continue;
                            }
                            for ox in 0..ow {
                                let ix = (ox * geom.stride + kx) as isize - geom.pad as isize;
                                if ix >= 0 && ix < geom.w as isize {
                                    drow[ix as usize] += s[oy * ow + ox];
                                }
                            }
                        }
                    }
                }
            }
        });
    Ok(())
}
