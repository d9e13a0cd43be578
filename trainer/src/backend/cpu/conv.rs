//! Convolution as im2col + GEMM on the CPU: `im2col` unfolds images into the column
//! matrix a GEMM multiplies by the weights, and `col2im` (its adjoint) folds the
//! columns' gradient back onto the images; each in both layouts (tap-major `[K, P]`,
//! pixel-major `[P, K]`, see [`ColLayout`]). Both layouts sum a pixel's taps in the same
//! order, so `col2im` gives the same bits from either.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, BackendError, ColLayout, ConvGeom, In, Out};

/// Input column of output column `ox` at tap column `kx`, if inside the image.
#[inline(always)]
fn input_col(geom: &ConvGeom, ox: usize, kx: usize) -> Option<usize> {
    let ix = (ox * geom.stride + kx).checked_sub(geom.pad)?;
    (ix < geom.w).then_some(ix)
}

/// Input row of output row `oy` at tap row `ky`, if inside the image.
#[inline(always)]
fn input_row(geom: &ConvGeom, oy: usize, ky: usize) -> Option<usize> {
    let iy = (oy * geom.stride + ky).checked_sub(geom.pad)?;
    (iy < geom.h).then_some(iy)
}

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
    if geom.col == ColLayout::PixelMajor {
        im2col_pixel_major(x, &geom, n0, col);
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
    if geom.col == ColLayout::PixelMajor {
        col2im_pixel_major(col, &geom, n0, nc, dx);
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

/// `[P, K]`: one task per output row of an image, which owns that row's `ow` pixel rows
/// of `col` (`ow * K` floats, in L1/L2) and fills them tap by tap.
fn im2col_pixel_major(x: &[f32], geom: &ConvGeom, n0: usize, col: &mut [f32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let (hw, kdim) = (geom.h * geom.w, geom.col_rows());
    col.par_chunks_mut(ow * kdim)
        .enumerate()
        .for_each(|(row, dst)| {
            let (ni, oy) = (n0 + row / oh, row % oh);
            for ci in 0..geom.c {
                let plane = &x[(ci * geom.n + ni) * hw..][..hw];
                for ky in 0..geom.kh {
                    let src = input_row(geom, oy, ky).map(|iy| &plane[iy * geom.w..][..geom.w]);
                    for kx in 0..geom.kw {
                        let r = (ci * geom.kh + ky) * geom.kw + kx;
                        let taps = dst[r..].iter_mut().step_by(kdim);
                        match src {
                            None => taps.for_each(|v| *v = 0.0),
                            Some(src) => {
                                for (ox, v) in taps.enumerate() {
                                    *v = input_col(geom, ox, kx).map_or(0.0, |ix| src[ix]);
                                }
                            }
                        }
                    }
                }
            }
        });
}

/// `[P, K]`: one task per image, which owns that image's plane in every channel and adds
/// its pixels' rows of `col` into them, tap by tap (the tap-major order).
fn col2im_pixel_major(col: &[f32], geom: &ConvGeom, n0: usize, nc: usize, dx: &mut [f32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let (hw, kdim) = (geom.h * geom.w, geom.col_rows());
    // The planes of images n0..n0+nc, grouped by image: plane (ci, ni) is chunk
    // ci * n + ni of `dx`.
    let mut by_image: Vec<Vec<&mut [f32]>> = (0..nc).map(|_| Vec::with_capacity(geom.c)).collect();
    for (i, plane) in dx.chunks_mut(hw).enumerate() {
        let ni = i % geom.n;
        if (n0..n0 + nc).contains(&ni) {
            by_image[ni - n0].push(plane);
        }
    }
    by_image
        .par_iter_mut()
        .zip(col.par_chunks(oh * ow * kdim))
        .for_each(|(planes, src)| {
            for (ci, plane) in planes.iter_mut().enumerate() {
                plane.fill(0.0);
                for ky in 0..geom.kh {
                    for kx in 0..geom.kw {
                        let r = (ci * geom.kh + ky) * geom.kw + kx;
                        for oy in 0..oh {
                            let Some(iy) = input_row(geom, oy, ky) else {
                                continue;
                            };
                            let drow = &mut plane[iy * geom.w..][..geom.w];
                            let taps = src[(oy * ow) * kdim + r..].iter().step_by(kdim);
                            for (ox, &v) in taps.take(ow).enumerate() {
                                if let Some(ix) = input_col(geom, ox, kx) {
                                    drow[ix] += v;
                                }
                            }
                        }
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBuf;
    use crate::backend::Backend;

    fn geoms() -> Vec<ConvGeom> {
        let mut v = Vec::new();
        for (k, stride, pad) in [(3, 1, 1), (3, 2, 1), (1, 2, 0), (3, 1, 0), (2, 3, 1)] {
            v.push(ConvGeom {
                c: 3,
                n: 5,
                h: 7,
                w: 6,
                kh: k,
                kw: k,
                stride,
                pad,
                col: ColLayout::TapMajor,
            });
        }
        v
    }

    /// The pixel-major matrix is the tap-major one transposed, and col2im gives the same
    /// bits from either layout (same sum order), for a chunk in the middle of the batch.
    #[test]
    fn pixel_major_is_the_transpose_of_tap_major() {
        let b = CpuBackend::new();
        for g in geoms() {
            let (n0, nc) = (1, 3);
            let x: Vec<f32> = (0..g.c * g.n * g.h * g.w)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let (kdim, p) = (g.col_rows(), nc * g.out_h() * g.out_w());
            let xb = CpuBuf(x.clone());
            let mut tap = CpuBuf(vec![f32::NAN; kdim * p]);
            let mut pix = CpuBuf(vec![f32::NAN; kdim * p]);
            let pg = ConvGeom {
                col: ColLayout::PixelMajor,
                ..g
            };
            b.im2col(In::new(&xb), g, n0, nc, Out::new(&mut tap))
                .unwrap();
            b.im2col(In::new(&xb), pg, n0, nc, Out::new(&mut pix))
                .unwrap();
            for r in 0..kdim {
                for j in 0..p {
                    assert_eq!(
                        tap.0[r * p + j].to_bits(),
                        pix.0[j * kdim + r].to_bits(),
                        "{g:?} tap {r} pixel {j}"
                    );
                }
            }
            // col2im overwrites images n0..n0+nc and leaves the others alone.
            let mut dt = CpuBuf(x.clone());
            let mut dp = CpuBuf(x.clone());
            let cols: Vec<f32> = (0..kdim * p).map(|i| (i as f32 * 0.11).cos()).collect();
            let colt: Vec<f32> = (0..kdim * p)
                .map(|i| cols[(i % kdim) * p + i / kdim])
                .collect();
            b.col2im(In::new(&CpuBuf(cols)), g, n0, nc, Out::new(&mut dt))
                .unwrap();
            b.col2im(In::new(&CpuBuf(colt)), pg, n0, nc, Out::new(&mut dp))
                .unwrap();
            assert!(
                dt.0.iter()
                    .zip(&dp.0)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{g:?}"
            );
            assert_ne!(dt.0, x, "{g:?}: col2im wrote nothing");
        }
    }
}
