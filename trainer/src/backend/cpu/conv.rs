//! Convolution as im2col + GEMM on the CPU: `im2col` unfolds images into the column
//! matrix a GEMM multiplies by the weights, and `col2im` (its adjoint) folds the
//! columns' gradient back onto the images; each in both layouts (tap-major `[K, P]`,
//! pixel-major `[P, K]`, see [`ColLayout`]).

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, ColLayout, ConvGeom, Im2colArgs, Im2colOps};

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

impl Im2colOps for CpuBackend {
    fn im2col_budget(&self) -> usize {
        // 16 MiB of f32: GEMM panels stay warm in cache, and a chunk still holds enough
        // columns for the GEMM's threads to split.
        4 << 20
    }

    fn col_layout(&self) -> ColLayout {
        ColLayout::PixelMajor
    }

    fn im2col(&self, op: Im2colArgs<'_, Self>) -> BResult<()> {
        let (geom, n0, nc) = (op.geom, op.n0, op.nc);
        let row = nc * geom.out_h() * geom.out_w();
        geom.check_chunk("im2col", n0, nc)?;
        let x = read_slice(op.src, geom.input_len(), "im2col")?;
        let col = write_slice(op.dst, geom.col_rows() * row, "im2col")?;
        if row == 0 {
            return Ok(());
        }
        if geom.col == ColLayout::PixelMajor {
            im2col_pixel_major(x, &geom, n0, col);
            return Ok(());
        }
        col.par_chunks_mut(row)
            .enumerate()
            .for_each(|(r, dst)| tap_row(x, &geom, n0, nc, r, dst));
        Ok(())
    }

    fn col2im(&self, op: Im2colArgs<'_, Self>) -> BResult<()> {
        let (geom, n0, nc) = (op.geom, op.n0, op.nc);
        let (oh, ow) = (geom.out_h(), geom.out_w());
        let hw = geom.h * geom.w;
        let row = nc * oh * ow;
        geom.check_chunk("col2im", n0, nc)?;
        let col = read_slice(op.src, geom.col_rows() * row, "col2im")?;
        let dx = write_slice(op.dst, geom.input_len(), "col2im")?;
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
}

/// The tap-major columns of images `n0..n0+nc` into `col`, on this thread.
pub(super) fn im2col_tap_block(x: &[f32], geom: &ConvGeom, n0: usize, nc: usize, col: &mut [f32]) {
    let row = nc * geom.out_h() * geom.out_w();
    for (r, dst) in col.chunks_exact_mut(row).take(geom.col_rows()).enumerate() {
        tap_row(x, geom, n0, nc, r, dst);
    }
}

/// Row `r` (one kernel tap) of the tap-major columns of images `n0..n0+nc`.
fn tap_row(x: &[f32], geom: &ConvGeom, n0: usize, nc: usize, r: usize, dst: &mut [f32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let hw = geom.h * geom.w;
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
}

/// The output columns `lo..hi` whose whole `kw`-wide window lies inside the input row
/// (copied without per-element checks); the columns before and after are the edges.
fn inside_cols(geom: &ConvGeom) -> (usize, usize) {
    let ow = geom.out_w();
    // ox * stride >= pad, and ox * stride - pad + kw <= w.
    let lo = geom.pad.div_ceil(geom.stride).min(ow);
    let hi = if geom.w + geom.pad >= geom.kw {
        ((geom.w + geom.pad - geom.kw) / geom.stride + 1).min(ow)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// `[P, K]`: one task per output row of an image, which owns that row's `ow` pixel rows
/// of `col` (`ow * K` floats, in L1/L2).
fn im2col_pixel_major(x: &[f32], geom: &ConvGeom, n0: usize, col: &mut [f32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let fill = im2col_row_fn(geom.kw);
    col.par_chunks_mut(ow * geom.col_rows())
        .enumerate()
        .for_each(|(row, dst)| fill(x, geom, n0 + row / oh, row % oh, dst));
}

/// The pixel-major columns of images `n0..n0+nc` into `col`, on this thread.
pub(super) fn im2col_block(x: &[f32], geom: &ConvGeom, n0: usize, nc: usize, col: &mut [f32]) {
    let (oh, ow) = (geom.out_h(), geom.out_w());
    let fill = im2col_row_fn(geom.kw);
    for (row, dst) in col
        .chunks_exact_mut(ow * geom.col_rows())
        .take(nc * oh)
        .enumerate()
    {
        fill(x, geom, n0 + row / oh, row % oh, dst);
    }
}

type RowFn = fn(&[f32], &ConvGeom, usize, usize, &mut [f32]);

/// `im2col_row` for this window width: a known width turns each window's copy into a
/// few moves instead of a memcpy call, and the copies are most of the work.
fn im2col_row_fn(kw: usize) -> RowFn {
    match kw {
        1 => im2col_row::<1>,
        3 => im2col_row::<3>,
        _ => im2col_row::<0>,
    }
}

/// The `ow` pixel rows (`K` floats each) of output row `oy` of image `ni`, for windows
/// `KW` wide (0: any width, `geom.kw`). One input row at a time (a channel and a tap
/// row): its taps go to every pixel of the output row, so the row lookups and checks
/// are made once per row instead of once per pixel, and the inner loop is a copy of
/// `KW` floats.
fn im2col_row<const KW: usize>(x: &[f32], geom: &ConvGeom, ni: usize, oy: usize, dst: &mut [f32]) {
    let (hw, kdim, kw, ow) = (geom.h * geom.w, geom.col_rows(), geom.kw, geom.out_w());
    let dst = &mut dst[..ow * kdim];
    let (lo, hi) = inside_cols(geom);
    for ci in 0..geom.c {
        let plane = &x[(ci * geom.n + ni) * hw..][..hw];
        for ky in 0..geom.kh {
            let t0 = (ci * geom.kh + ky) * kw;
            // Pixel ox's taps of this row: dst[ox * kdim + t0..][..kw].
            let Some(iy) = input_row(geom, oy, ky) else {
                for px in dst.chunks_exact_mut(kdim) {
                    px[t0..t0 + kw].fill(0.0);
                }
                continue;
            };
            let src = &plane[iy * geom.w..][..geom.w];
            let edge = |ox: usize, px: &mut [f32]| {
                for (kx, t) in px[t0..t0 + kw].iter_mut().enumerate() {
                    *t = input_col(geom, ox, kx).map_or(0.0, |ix| src[ix]);
                }
            };
            let (left, rest) = dst.split_at_mut(lo * kdim);
            let (mid, right) = rest.split_at_mut((hi - lo) * kdim);
            for (ox, px) in left.chunks_exact_mut(kdim).enumerate() {
                edge(ox, px);
            }
            for (j, px) in right.chunks_exact_mut(kdim).enumerate() {
                edge(hi + j, px);
            }
            if hi == lo {
                continue;
            }
            let windows = src[lo * geom.stride - geom.pad..]
                .windows(kw)
                .step_by(geom.stride);
            for (px, win) in mid.chunks_exact_mut(kdim).zip(windows) {
                if KW > 0 {
                    let t: &mut [f32; KW] = (&mut px[t0..t0 + KW]).try_into().expect("KW taps");
                    *t = win.try_into().expect("KW elements");
                } else {
                    px[t0..t0 + kw].copy_from_slice(win);
                }
            }
        }
    }
}

/// Plane `(ci, ni)` of images `n0..n0+nc` of a `[c, n, h, w]` activation, grouped by
/// image: `result[ni - n0][ci]`.
pub(super) fn planes_by_image<'a>(
    dx: &'a mut [f32],
    geom: &ConvGeom,
    n0: usize,
    nc: usize,
) -> Vec<Vec<&'a mut [f32]>> {
    let mut by_image: Vec<Vec<&'a mut [f32]>> =
        (0..nc).map(|_| Vec::with_capacity(geom.c)).collect();
    for (i, plane) in dx.chunks_mut(geom.h * geom.w).enumerate() {
        let ni = i % geom.n;
        if (n0..n0 + nc).contains(&ni) {
            by_image[ni - n0].push(plane);
        }
    }
    by_image
}

/// `[P, K]`: one task per image, which owns that image's plane in every channel (in L2)
/// and adds its pixels' rows of `col` (read once, in order) into them. Each input
/// element sums its taps in pixel order, the reverse of the tap-major order, so the two
/// layouts agree to rounding, not to the bit.
fn col2im_pixel_major(col: &[f32], geom: &ConvGeom, n0: usize, nc: usize, dx: &mut [f32]) {
    let ohw = geom.out_h() * geom.out_w();
    let fold = col2im_image_fn(geom.kw);
    planes_by_image(dx, geom, n0, nc)
        .par_iter_mut()
        .zip(col.par_chunks(ohw * geom.col_rows()))
        .for_each(|(planes, src)| fold(src, geom, planes));
}

type ImageFn = fn(&[f32], &ConvGeom, &mut [&mut [f32]]);

/// `col2im_image` for this window width (see `im2col_row_fn`).
pub(super) fn col2im_image_fn(kw: usize) -> ImageFn {
    match kw {
        1 => col2im_image::<1>,
        3 => col2im_image::<3>,
        _ => col2im_image::<0>,
    }
}

/// Overwrites one image's `planes` (one per input channel) with the sums of its
/// pixel-major columns `src` (`oh * ow` rows of `K`), for windows `KW` wide. Loops as
/// `im2col_row`: an output row, then an input row (channel, tap row), then the pixels
/// along it. Each input element adds its taps in pixel order (for one output row only
/// one tap row reaches an input row, and along it the pixels go left to right).
fn col2im_image<const KW: usize>(src: &[f32], geom: &ConvGeom, planes: &mut [&mut [f32]]) {
    let (ow, kdim, kw) = (geom.out_w(), geom.col_rows(), geom.kw);
    let (lo, hi) = inside_cols(geom);
    planes.iter_mut().for_each(|p| p.fill(0.0));
    for (oy, rows) in src.chunks_exact(ow * kdim).take(geom.out_h()).enumerate() {
        for (ci, plane) in planes.iter_mut().enumerate() {
            for ky in 0..geom.kh {
                let Some(iy) = input_row(geom, oy, ky) else {
                    continue;
                };
                let drow = &mut plane[iy * geom.w..][..geom.w];
                let t0 = (ci * geom.kh + ky) * kw;
                // A pixel whose window is cut by the row's ends.
                let edge = |ox: usize, px: &[f32], drow: &mut [f32]| {
                    for (kx, t) in px[t0..t0 + kw].iter().enumerate() {
                        if let Some(ix) = input_col(geom, ox, kx) {
                            drow[ix] += t;
                        }
                    }
                };
                let pixels = rows.chunks_exact(kdim);
                for (ox, px) in pixels.clone().enumerate().take(lo) {
                    edge(ox, px, drow);
                }
                for (ox, px) in pixels.clone().enumerate().take(hi).skip(lo) {
                    let x0 = ox * geom.stride - geom.pad;
                    if KW > 0 {
                        let d: &mut [f32; KW] =
                            (&mut drow[x0..x0 + KW]).try_into().expect("KW elements");
                        let t: &[f32; KW] = px[t0..t0 + KW].try_into().expect("KW taps");
                        for (d, t) in d.iter_mut().zip(t) {
                            *d += t;
                        }
                    } else {
                        for (d, t) in drow[x0..x0 + kw].iter_mut().zip(&px[t0..t0 + kw]) {
                            *d += t;
                        }
                    }
                }
                for (ox, px) in pixels.enumerate().skip(hi) {
                    edge(ox, px, drow);
                }
            }
        }
    }
}

/// The tests' convolutions: `c` channels of `n` images of 7 x 6 pixels, square windows.
#[cfg(test)]
pub(super) fn test_geom(
    (c, n): (usize, usize),
    (k, stride, pad): (usize, usize, usize),
    col: ColLayout,
) -> ConvGeom {
    ConvGeom {
        c,
        n,
        h: 7,
        w: 6,
        kh: k,
        kw: k,
        stride,
        pad,
        col,
    }
}

/// Direct convolution in f64: y, dW, dx for dy.
#[cfg(test)]
fn reference(
    g: &ConvGeom,
    cout: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (oh, ow, hw) = (g.out_h(), g.out_w(), g.h * g.w);
    let ld = g.n * oh * ow;
    let mut y = vec![0f64; cout * ld];
    let mut dw = vec![0f64; w.len()];
    let mut dx = vec![0f64; x.len()];
    for co in 0..cout {
        for ni in 0..g.n {
            for oy in 0..oh {
                for ox in 0..ow {
                    let o = co * ld + (ni * oh + oy) * ow + ox;
                    for ci in 0..g.c {
                        for ky in 0..g.kh {
                            for kx in 0..g.kw {
                                let (Some(iy), Some(ix)) =
                                    (input_row(g, oy, ky), input_col(g, ox, kx))
                                else {
                                    continue;
                                };
                                let xi = (ci * g.n + ni) * hw + iy * g.w + ix;
                                let wi = ((co * g.c + ci) * g.kh + ky) * g.kw + kx;
                                y[o] += w[wi] as f64 * x[xi] as f64;
                                dw[wi] += dy[o] as f64 * x[xi] as f64;
                                dx[xi] += dy[o] as f64 * w[wi] as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    (y, dw, dx)
}

/// A blocked convolution under test: its forward and backward by blocks of at most
/// the given floats, and the scratch they need for `(geom, cout, block floats)`.
#[cfg(test)]
pub(super) struct Blocked {
    pub forward: fn(crate::backend::ConvForwardArgs<'_, CpuBackend>, usize) -> BResult<()>,
    pub backward: fn(crate::backend::ConvBackwardArgs<'_, CpuBackend>, usize) -> BResult<()>,
    pub scratch: fn(&ConvGeom, usize, usize) -> usize,
}

/// `conv`'s forward then backward, by blocks of `block` floats, on `x`, `w` and `dy`:
/// y, dW and (if `with_dx`) dx, with NaN wherever nothing was written.
#[cfg(test)]
pub(super) fn run_convolution(
    conv: &Blocked,
    (g, cout, block): (ConvGeom, usize, usize),
    [x, w, dy]: [&[f32]; 3],
    with_dx: bool,
) -> [Vec<f32>; 3] {
    use crate::backend::cpu::CpuBuf;
    use crate::backend::{ConvBackwardArgs, ConvForwardArgs, In, Out};
    let nan = |len: usize| CpuBuf::from(vec![f32::NAN; len]);
    let (mut y, mut dw, mut dx) = (nan(dy.len()), nan(w.len()), nan(x.len()));
    let mut sc = nan((conv.scratch)(&g, cout, block));
    let (xb, wb, dyb) = (
        CpuBuf::from(x.to_vec()),
        CpuBuf::from(w.to_vec()),
        CpuBuf::from(dy.to_vec()),
    );
    let forward = ConvForwardArgs {
        x: In::new(&xb),
        w: In::new(&wb),
        geom: g,
        cout,
        y: Out::new(&mut y),
        scratch: Out::new(&mut sc),
    };
    (conv.forward)(forward, block).unwrap();
    let backward = ConvBackwardArgs {
        x: In::new(&xb),
        w: In::new(&wb),
        dy: In::new(&dyb),
        geom: g,
        cout,
        dw: Out::new(&mut dw),
        dx: with_dx.then(|| Out::new(&mut dx)),
        scratch: Out::new(&mut sc),
        reuse: false,
    };
    (conv.backward)(backward, block).unwrap();
    [y.0, dw.0, dx.0]
}

/// Runs `conv` by blocks of each of `blocks` floats on `cout` channels of
/// deterministic values in the shapes of `g`, and checks y, dW and dx against a direct
/// convolution in f64.
#[cfg(test)]
pub(super) fn check_convolution(conv: &Blocked, g: ConvGeom, cout: usize, blocks: &[usize]) {
    let vals = |len: usize, f: f32| (0..len).map(|i| (i as f32 * f).sin()).collect::<Vec<_>>();
    let x = vals(g.input_len(), 0.37);
    let w = vals(cout * g.col_rows(), 0.91);
    let dy = vals(cout * g.n * g.out_h() * g.out_w(), 0.53);
    let want = reference(&g, cout, &x, &w, &dy);
    for &block in blocks {
        let got = run_convolution(conv, (g, cout, block), [&x, &w, &dy], true);
        for (name, got, want) in [
            ("y", &got[0], &want.0),
            ("dw", &got[1], &want.1),
            ("dx", &got[2], &want.2),
        ] {
            for (i, (a, b)) in got.iter().zip(want.iter()).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{g:?} by blocks of {block} floats: {name}[{i}] {a} vs {b}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBuf;
    use crate::backend::{In, Out};

    fn geoms() -> Vec<ConvGeom> {
        [(3, 1, 1), (3, 2, 1), (1, 2, 0), (3, 1, 0), (2, 3, 1)]
            .into_iter()
            .map(|kernel| test_geom((3, 5), kernel, ColLayout::TapMajor))
            .collect()
    }

    /// Images 1..4 of `geom`, from `src` to `dst`.
    fn chunk<'a>(
        geom: ConvGeom,
        src: &'a CpuBuf<f32>,
        dst: &'a mut CpuBuf<f32>,
    ) -> Im2colArgs<'a, CpuBackend> {
        Im2colArgs {
            geom,
            n0: 1,
            nc: 3,
            src: In::new(src),
            dst: Out::new(dst),
        }
    }

    /// The pixel-major matrix is the tap-major one transposed, and col2im agrees from
    /// either layout (to rounding: the sums run in another order), for a chunk in the
    /// middle of the batch, leaving the other images alone.
    #[test]
    fn pixel_major_is_the_transpose_of_tap_major() {
        let b = CpuBackend::new();
        for g in geoms() {
            let (n0, nc) = (1, 3);
            let x: Vec<f32> = (0..g.c * g.n * g.h * g.w)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let (kdim, p) = (g.col_rows(), nc * g.out_h() * g.out_w());
            let xb = CpuBuf::from(x.clone());
            let mut tap = CpuBuf::from(vec![f32::NAN; kdim * p]);
            let mut pix = CpuBuf::from(vec![f32::NAN; kdim * p]);
            let pg = ConvGeom {
                col: ColLayout::PixelMajor,
                ..g
            };
            for (geom, col) in [(g, &mut tap), (pg, &mut pix)] {
                b.im2col(chunk(geom, &xb, col)).unwrap();
            }
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
            let mut dt = CpuBuf::from(x.clone());
            let mut dp = CpuBuf::from(x.clone());
            let cols: Vec<f32> = (0..kdim * p).map(|i| (i as f32 * 0.11).cos()).collect();
            let colt: Vec<f32> = (0..kdim * p)
                .map(|i| cols[(i % kdim) * p + i / kdim])
                .collect();
            for (geom, col, dx) in [(g, cols, &mut dt), (pg, colt, &mut dp)] {
                b.col2im(chunk(geom, &CpuBuf::from(col), dx)).unwrap();
            }
            assert!(
                dt.0.iter()
                    .zip(&dp.0)
                    .all(|(a, b)| (a - b).abs() <= 1e-6 * (1.0 + a.abs())),
                "{g:?}"
            );
            let img = g.h * g.w;
            for (i, (a, b)) in dp.0.chunks(img).zip(x.chunks(img)).enumerate() {
                let ni = i % g.n;
                assert_eq!(a == b, !(n0..n0 + nc).contains(&ni), "{g:?} plane {i}");
            }
        }
    }
}
