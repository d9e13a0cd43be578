//! Winograd F(2x2, 3x3) convolution on the CPU, for the 3x3, stride-1, pad-1 layers:
//! each 2x2 tile of output is 16 products of transformed 4x4 input patches and
//! transformed weights instead of 36 multiply-adds, so the GEMMs do 4/9 of im2col's
//! work, and nothing 9 times the input's size is written and read back.
//!
//! The forward is `y = A^T [(G g G^T) . (B^T d B)] A` per tile (Lavin and Gray, "Fast
//! Algorithms for Convolutional Neural Networks", 2016): the input patches and the
//! weights are transformed, the 16 element-wise products summed over input channels
//! become 16 GEMMs `M[xi] = U[xi] V[xi]`, and the output transform folds each tile's 16
//! sums into its 2x2 pixels. The backward is that computation's adjoint, so it uses the
//! same transforms: the output gradient is taken to the 16 positions (`A dY A^T`), the
//! weight gradient is `G^T (sum over tiles of dM . V) G` and the input gradient
//! `B (U^T dM) B^T`, scattered back onto the overlapping 4x4 patches.
//!
//! The work is cut as in `conv_blocks`: fixed groups of images, one task each, blocks
//! of images whose transformed matrices stay in cache, single-threaded GEMMs, and the
//! groups' weight gradients added in group order, so the result does not depend on the
//! thread count.

use gemm_common::Parallelism;
use rayon::prelude::*;

use super::conv::planes_by_image;
use super::gemm::{RawGemm, Strided};
use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, ConvBackwardArgs, ConvForwardArgs, ConvGeom};

/// Transformed positions per tile (4 x 4).
const XI: usize = 16;

/// Groups of images the batch is cut into (as `conv_blocks`).
const GROUPS: usize = 8;

/// Fewer input channels than this stay on im2col: the GEMMs' sums would be too short
/// to pay for the transforms (the first layer, with its 3 colour channels).
const MIN_CHANNELS: usize = 8;

/// Most floats of one block's transformed input and output (1 MiB): an L2's worth.
pub(super) const BLOCK_FLOATS: usize = 1 << 18;

/// Whether this convolution runs here rather than on im2col.
pub(super) fn applies(geom: &ConvGeom) -> bool {
    geom.kh == 3 && geom.kw == 3 && geom.stride == 1 && geom.pad == 1 && geom.c >= MIN_CHANNELS
}

/// How a batch is cut, and where things are in the scratch: the transformed weights
/// `U` first (`[16][cout][c]`), then per group the block's transformed input `V`
/// (`[16][c][tiles]`), its transformed output or output gradient `M` (`[16][cout][tiles]`)
/// and the group's transformed weight gradient (`[16][cout][c]`).
#[derive(Clone, Copy, Debug)]
struct Plan {
    c: usize,
    cout: usize,
    /// Tile rows and columns of an image, and their product.
    th: usize,
    tw: usize,
    tiles: usize,
    /// Images per block.
    block: usize,
    groups: usize,
    per_group: usize,
}

impl Plan {
    fn new(geom: &ConvGeom, cout: usize, block_floats: usize) -> Self {
        let (th, tw) = (geom.h.div_ceil(2), geom.w.div_ceil(2));
        let tiles = th * tw;
        let n = geom.n.max(1);
        let per_image = XI * (geom.c + cout) * tiles;
        let block = (block_floats / per_image.max(1)).clamp(1, n);
        Self {
            c: geom.c,
            cout,
            th,
            tw,
            tiles,
            block,
            groups: GROUPS.min(n),
            per_group: block * per_image + XI * cout * geom.c,
        }
    }

    fn weights(&self) -> usize {
        XI * self.cout * self.c
    }

    fn scratch(&self) -> usize {
        self.weights() + self.groups * self.per_group
    }

    /// Images of group `g` of a batch of `n`.
    fn images(&self, g: usize, n: usize) -> (usize, usize) {
        (g * n / self.groups, (g + 1) * n / self.groups)
    }

    /// A group's scratch cut into `V` and `M` for blocks of `nb` images (dense, `nb *
    /// tiles` columns), and its weight gradient.
    fn split<'s>(
        &self,
        sc: &'s mut [f32],
        nb: usize,
    ) -> (&'s mut [f32], &'s mut [f32], &'s mut [f32]) {
        let tiles = self.block * self.tiles;
        let (v, rest) = sc.split_at_mut(XI * self.c * tiles);
        let (m, du) = rest.split_at_mut(XI * self.cout * tiles);
        let tb = nb * self.tiles;
        (
            &mut v[..XI * self.c * tb],
            &mut m[..XI * self.cout * tb],
            du,
        )
    }
}

/// f32 elements of scratch for a convolution of `geom` into `cout` channels.
pub(super) fn scratch(geom: &ConvGeom, cout: usize) -> usize {
    Plan::new(geom, cout, BLOCK_FLOATS).scratch()
}

fn rows(ld: usize) -> Strided {
    Strided {
        rs: ld as isize,
        cs: 1,
    }
}

fn cols(ld: usize) -> Strided {
    Strided {
        rs: 1,
        cs: ld as isize,
    }
}

/// `C[m, n] (+)= A B` on this thread, all dense; `A` and `B` as the strides say.
///
/// # Safety
/// The operands must hold every element the shapes and strides address.
unsafe fn gemm(
    dims: (usize, usize, usize),
    a: (&[f32], Strided),
    b: (&[f32], Strided),
    c: &mut [f32],
    acc: bool,
) {
    RawGemm {
        dims,
        alpha: 1.0,
        a: a.0.as_ptr(),
        sa: a.1,
        b: b.0.as_ptr(),
        sb: b.1,
        beta: if acc { 1.0 } else { 0.0 },
        c: c.as_mut_ptr(),
        ldc: dims.1,
        par: Parallelism::None,
    }
    .run();
}

/// `G g G^T` of every 3x3 kernel `w[cout][c]` into `u[16][cout][c]`.
fn weight_transform(w: &[f32], p: &Plan, u: &mut [f32]) {
    let plane = p.cout * p.c;
    for (k, g) in w.chunks_exact(9).enumerate().take(plane) {
        // G g: the columns of each row of the kernel, taken to 4.
        let mut t = [[0f32; 3]; 4];
        for x in 0..3 {
            let (g0, g1, g2) = (g[x], g[3 + x], g[6 + x]);
            t[0][x] = g0;
            t[1][x] = 0.5 * (g0 + g1 + g2);
            t[2][x] = 0.5 * (g0 - g1 + g2);
            t[3][x] = g2;
        }
        for (i, r) in t.iter().enumerate() {
            let [g0, g1, g2] = *r;
            let out = [g0, 0.5 * (g0 + g1 + g2), 0.5 * (g0 - g1 + g2), g2];
            for (j, v) in out.into_iter().enumerate() {
                u[(i * 4 + j) * plane + k] = v;
            }
        }
    }
}

/// The weight gradient `G^T dU G` of every kernel, from `du[16][cout][c]` into
/// `dw[cout][c][3][3]`.
fn weight_gradient(du: &[f32], p: &Plan, dw: &mut [f32]) {
    let plane = p.cout * p.c;
    // G^T applied to four values.
    let gt = |m: [f32; 4]| {
        [
            m[0] + 0.5 * (m[1] + m[2]),
            0.5 * (m[1] - m[2]),
            0.5 * (m[1] + m[2]) + m[3],
        ]
    };
    for (k, g) in dw.chunks_exact_mut(9).enumerate().take(plane) {
        let mut t = [[0f32; 3]; 4];
        for (i, r) in t.iter_mut().enumerate() {
            *r = gt(std::array::from_fn(|j| du[(i * 4 + j) * plane + k]));
        }
        for x in 0..3 {
            let col = gt([t[0][x], t[1][x], t[2][x], t[3][x]]);
            for y in 0..3 {
                g[y * 3 + x] = col[y];
            }
        }
    }
}

/// Row `iy` of `plane` (`w` wide) into `dst[1..=w]`, zeros around it; all zeros if
/// the row is outside the image.
fn padded_row(plane: &[f32], w: usize, iy: isize, dst: &mut [f32]) {
    dst.fill(0.0);
    if iy >= 0 && (iy as usize) < plane.len() / w.max(1) {
        dst[1..=w].copy_from_slice(&plane[iy as usize * w..][..w]);
    }
}

/// `B^T d B` of every 4x4 input patch of images `b0..b0+nb`, into `v[16][c][tiles]`.
fn input_transform(x: &[f32], geom: &ConvGeom, p: &Plan, b0: usize, nb: usize, v: &mut [f32]) {
    let (hw, w) = (geom.h * geom.w, geom.w);
    let tb = nb * p.tiles;
    let pw = 2 * p.tw + 2;
    let mut r = vec![0f32; 4 * pw];
    let mut a = vec![0f32; 4 * pw];
    for ci in 0..p.c {
        for li in 0..nb {
            let plane = &x[(ci * geom.n + b0 + li) * hw..][..hw];
            for ty in 0..p.th {
                for (k, row) in r.chunks_exact_mut(pw).enumerate() {
                    padded_row(plane, w, 2 * ty as isize - 1 + k as isize, row);
                }
                let (r0, r1, r2, r3) = (&r[..pw], &r[pw..2 * pw], &r[2 * pw..3 * pw], &r[3 * pw..]);
                // B^T down the columns.
                for (j, a) in a.chunks_exact_mut(pw).enumerate() {
                    for (k, o) in a.iter_mut().enumerate() {
                        *o = match j {
                            0 => r0[k] - r2[k],
                            1 => r1[k] + r2[k],
                            2 => r2[k] - r1[k],
                            _ => r1[k] - r3[k],
                        };
                    }
                }
                // B^T along the rows: tile tx reads padded columns 2tx..2tx+4.
                let t0 = (li * p.th + ty) * p.tw;
                for (i, ai) in a.chunks_exact(pw).enumerate() {
                    let mut out = |j: usize, f: fn(&[f32], usize) -> f32| {
                        let at = (i * 4 + j) * p.c * tb + ci * tb + t0;
                        fill_with(&mut v[at..][..p.tw], |tx| f(ai, 2 * tx));
                    };
                    out(0, |a, k| a[k] - a[k + 2]);
                    out(1, |a, k| a[k + 1] + a[k + 2]);
                    out(2, |a, k| a[k + 2] - a[k + 1]);
                    out(3, |a, k| a[k + 1] - a[k + 3]);
                }
            }
        }
    }
}

/// `dst[i] = f(i)` for every element.
#[inline(always)]
fn fill_with(dst: &mut [f32], f: impl Fn(usize) -> f32) {
    for (i, o) in dst.iter_mut().enumerate() {
        *o = f(i);
    }
}

/// `A^T M A` of every tile of `m[16][cout][tiles]` into the output planes of the
/// block's images (`planes[image][channel]`, `h x w`; a tile's pixels beyond the
/// image's edge are dropped).
fn output_transform(
    m: &[f32],
    geom: &ConvGeom,
    p: &Plan,
    nb: usize,
    planes: &mut [Vec<&mut [f32]>],
) {
    let (h, w) = (geom.h, geom.w);
    let tb = nb * p.tiles;
    let tw = p.tw;
    // Per tile row: for each row i of the tiles, the two columns of A^T along it.
    let mut hrow = vec![0f32; 8 * tw];
    let mut e = vec![0f32; 2 * tw];
    for co in 0..p.cout {
        for (li, image) in planes.iter_mut().enumerate().take(nb) {
            let plane = &mut image[co];
            for ty in 0..p.th {
                let t0 = (li * p.th + ty) * tw;
                let at = |i: usize, j: usize| &m[(i * 4 + j) * p.cout * tb + co * tb + t0..][..tw];
                for i in 0..4 {
                    let (m0, m1, m2, m3) = (at(i, 0), at(i, 1), at(i, 2), at(i, 3));
                    let (h0, h1) = hrow[i * 2 * tw..][..2 * tw].split_at_mut(tw);
                    fill_with(h0, |t| m0[t] + m1[t] + m2[t]);
                    fill_with(h1, |t| m1[t] - m2[t] - m3[t]);
                }
                let hr = |i: usize, b: usize| &hrow[(i * 2 + b) * tw..][..tw];
                for a in 0..2 {
                    let y = 2 * ty + a;
                    if y >= h {
                        break;
                    }
                    let (e0, e1) = e.split_at_mut(tw);
                    for (b, eb) in [e0, e1].into_iter().enumerate() {
                        let (q0, q1, q2, q3) = (hr(0, b), hr(1, b), hr(2, b), hr(3, b));
                        if a == 0 {
                            fill_with(eb, |t| q0[t] + q1[t] + q2[t]);
                        } else {
                            fill_with(eb, |t| q1[t] - q2[t] - q3[t]);
                        }
                    }
                    let row = &mut plane[y * w..][..w];
                    for (x, o) in row.iter_mut().enumerate() {
                        *o = e[(x & 1) * tw + x / 2];
                    }
                }
            }
        }
    }
}

/// `A dY A^T` of every 2x2 tile of the output gradient of images `b0..b0+nb`, into
/// `m[16][cout][tiles]` (pixels beyond the image's edge count as zeros).
fn gradient_transform(dy: &[f32], geom: &ConvGeom, p: &Plan, b0: usize, nb: usize, m: &mut [f32]) {
    let (hw, w) = (geom.h * geom.w, geom.w);
    let tb = nb * p.tiles;
    // Rows padded to 2 tw + 2 (the padded_row layout: column x at x + 1).
    let pw = 2 * p.tw + 2;
    let mut r = vec![0f32; 2 * pw];
    let mut a = vec![0f32; 4 * pw];
    for co in 0..p.cout {
        for li in 0..nb {
            let plane = &dy[(co * geom.n + b0 + li) * hw..][..hw];
            for ty in 0..p.th {
                for (k, row) in r.chunks_exact_mut(pw).enumerate() {
                    padded_row(plane, w, (2 * ty + k) as isize, row);
                }
                let (y0, y1) = r.split_at(pw);
                // A down the columns: y0, y0 + y1, y0 - y1, -y1.
                for (j, a) in a.chunks_exact_mut(pw).enumerate() {
                    match j {
                        0 => fill_with(a, |k| y0[k]),
                        1 => fill_with(a, |k| y0[k] + y1[k]),
                        2 => fill_with(a, |k| y0[k] - y1[k]),
                        _ => fill_with(a, |k| -y1[k]),
                    }
                }
                // A along the rows: tile tx holds padded columns 2tx + 1 and 2tx + 2.
                let t0 = (li * p.th + ty) * p.tw;
                for (i, ai) in a.chunks_exact(pw).enumerate() {
                    let mut out = |j: usize, f: fn(&[f32], usize) -> f32| {
                        let at = (i * 4 + j) * p.cout * tb + co * tb + t0;
                        fill_with(&mut m[at..][..p.tw], |tx| f(ai, 2 * tx + 1));
                    };
                    out(0, |a, k| a[k]);
                    out(1, |a, k| a[k] + a[k + 1]);
                    out(2, |a, k| a[k] - a[k + 1]);
                    out(3, |a, k| -a[k + 1]);
                }
            }
        }
    }
}

/// Adds `B dV B^T` of every tile of `v[16][c][tiles]` onto the 4x4 input patches of
/// the block's images (`planes[image][channel]`, overwritten: zeroed first); the
/// patches overlap, and the parts outside the image are dropped.
fn input_gradient(v: &[f32], geom: &ConvGeom, p: &Plan, nb: usize, planes: &mut [Vec<&mut [f32]>]) {
    let (h, w) = (geom.h, geom.w);
    let tb = nb * p.tiles;
    let tw = p.tw;
    let pw = 2 * tw + 2;
    // The four rows of a tile row's patches, after B along the rows.
    let mut hrow = vec![0f32; 4 * pw];
    let mut out = vec![0f32; pw];
    for ci in 0..p.c {
        for (li, image) in planes.iter_mut().enumerate().take(nb) {
            let plane = &mut image[ci];
            plane.fill(0.0);
            for ty in 0..p.th {
                let t0 = (li * p.th + ty) * tw;
                let at = |i: usize, j: usize| &v[(i * 4 + j) * p.c * tb + ci * tb + t0..][..tw];
                for (i, hr) in hrow.chunks_exact_mut(pw).enumerate() {
                    let (v0, v1, v2, v3) = (at(i, 0), at(i, 1), at(i, 2), at(i, 3));
                    // B v: v0, v1 - v2 + v3, -v0 + v1 + v2, -v3 at padded columns
                    // 2tx..2tx+4; neighbouring tiles overlap by two columns.
                    for t in 0..tw {
                        hr[2 * t] = v0[t];
                        hr[2 * t + 1] = v1[t] - v2[t] + v3[t];
                    }
                    hr[2 * tw] = 0.0;
                    hr[2 * tw + 1] = 0.0;
                    for t in 0..tw {
                        hr[2 * t + 2] += v1[t] + v2[t] - v0[t];
                        hr[2 * t + 3] -= v3[t];
                    }
                }
                let (q0, q1, q2, q3) = (
                    &hrow[..pw],
                    &hrow[pw..2 * pw],
                    &hrow[2 * pw..3 * pw],
                    &hrow[3 * pw..],
                );
                // B down the columns, onto input rows 2ty - 1 .. 2ty + 3.
                for k in 0..4 {
                    let iy = 2 * ty as isize - 1 + k as isize;
                    if iy < 0 || iy as usize >= h {
                        continue;
                    }
                    match k {
                        0 => fill_with(&mut out, |x| q0[x]),
                        1 => fill_with(&mut out, |x| q1[x] - q2[x] + q3[x]),
                        2 => fill_with(&mut out, |x| q1[x] + q2[x] - q0[x]),
                        _ => fill_with(&mut out, |x| -q3[x]),
                    }
                    let row = &mut plane[iy as usize * w..][..w];
                    for (d, s) in row.iter_mut().zip(&out[1..=w]) {
                        *d += s;
                    }
                }
            }
        }
    }
}

/// Each group's planes of a `[c, n, h, w]` activation: `[group][image - i0][channel]`.
fn planes_by_group<'a>(
    buf: &'a mut [f32],
    geom: &ConvGeom,
    p: &Plan,
) -> Vec<Vec<Vec<&'a mut [f32]>>> {
    let mut all = planes_by_image(buf, geom, 0, geom.n).into_iter();
    (0..p.groups)
        .map(|g| {
            let (i0, i1) = p.images(g, geom.n);
            all.by_ref().take(i1 - i0).collect()
        })
        .collect()
}

/// `conv_forward` by blocks of at most `block_floats` floats of transformed input and
/// output.
pub(super) fn forward(op: ConvForwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_forward";
    let (geom, cout) = (op.geom, op.cout);
    let p = Plan::new(&geom, cout, block_floats);
    let n = geom.n;
    let x = read_slice(op.x, geom.input_len(), OP)?;
    let w = read_slice(op.w, cout * geom.c * 9, OP)?;
    let y = write_slice(op.y, cout * n * geom.h * geom.w, OP)?;
    let scratch = write_slice(op.scratch, p.scratch(), OP)?;
    if n == 0 || geom.h == 0 || geom.w == 0 || cout == 0 {
        return Ok(());
    }
    let (u, groups) = scratch.split_at_mut(p.weights());
    weight_transform(w, &p, u);
    let u = &*u;
    let mut planes = planes_by_group(y, &geom, &p);
    groups
        .par_chunks_mut(p.per_group)
        .zip(planes.par_iter_mut())
        .enumerate()
        .for_each(|(g, (sc, planes))| {
            let (i0, i1) = p.images(g, n);
            for b0 in (i0..i1).step_by(p.block) {
                let nb = p.block.min(i1 - b0);
                let tb = nb * p.tiles;
                let (v, m, _) = p.split(sc, nb);
                input_transform(x, &geom, &p, b0, nb, v);
                let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
                for xi in 0..XI {
                    // M[xi][cout, tb] = U[xi][cout, c] V[xi][c, tb]
                    // SAFETY: the three are dense slices of these shapes.
                    unsafe {
                        gemm(
                            (p.cout, tb, p.c),
                            (&u[xi * uw..][..uw], rows(p.c)),
                            (&v[xi * vw..][..vw], rows(tb)),
                            &mut m[xi * mw..][..mw],
                            false,
                        );
                    }
                }
                output_transform(m, &geom, &p, nb, &mut planes[b0 - i0..]);
            }
        });
    Ok(())
}

/// `conv_backward` by blocks of at most `block_floats` floats of transformed input and
/// output gradient.
pub(super) fn backward(op: ConvBackwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_backward";
    let (geom, cout) = (op.geom, op.cout);
    let p = Plan::new(&geom, cout, block_floats);
    let n = geom.n;
    let x = read_slice(op.x, geom.input_len(), OP)?;
    let w = read_slice(op.w, cout * geom.c * 9, OP)?;
    let dy = read_slice(op.dy, cout * n * geom.h * geom.w, OP)?;
    let dw = write_slice(op.dw, cout * geom.c * 9, OP)?;
    let dx = op
        .dx
        .map(|d| write_slice(d, geom.input_len(), OP))
        .transpose()?;
    let scratch = write_slice(op.scratch, p.scratch(), OP)?;
    if n == 0 || geom.h == 0 || geom.w == 0 || cout == 0 {
        dw.fill(0.0);
        if let Some(dx) = dx {
            dx.fill(0.0);
        }
        return Ok(());
    }
    let with_dx = dx.is_some();
    let mut planes = match dx {
        Some(dx) => planes_by_group(dx, &geom, &p),
        None => (0..p.groups).map(|_| Vec::new()).collect(),
    };
    let (u, groups) = scratch.split_at_mut(p.weights());
    weight_transform(w, &p, u);
    let u = &*u;
    groups
        .par_chunks_mut(p.per_group)
        .zip(planes.par_iter_mut())
        .enumerate()
        .for_each(|(g, (sc, planes))| {
            let (i0, i1) = p.images(g, n);
            for (bi, b0) in (i0..i1).step_by(p.block).enumerate() {
                let nb = p.block.min(i1 - b0);
                let tb = nb * p.tiles;
                let (v, m, du) = p.split(sc, nb);
                input_transform(x, &geom, &p, b0, nb, v);
                gradient_transform(dy, &geom, &p, b0, nb, m);
                let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
                for xi in 0..XI {
                    let (vx, mx) = (&mut v[xi * vw..][..vw], &m[xi * mw..][..mw]);
                    // SAFETY (both): dense slices of these shapes.
                    unsafe {
                        // dU[xi][cout, c] (+)= dM[xi][cout, tb] V[xi]^T[tb, c]
                        gemm(
                            (p.cout, p.c, tb),
                            (mx, rows(tb)),
                            (vx, cols(tb)),
                            &mut du[xi * uw..][..uw],
                            bi > 0,
                        );
                        if with_dx {
                            // dV[xi][c, tb] = U[xi]^T[c, cout] dM[xi][cout, tb], over V.
                            gemm(
                                (p.c, tb, p.cout),
                                (&u[xi * uw..][..uw], cols(p.c)),
                                (mx, rows(tb)),
                                vx,
                                false,
                            );
                        }
                    }
                }
                if with_dx {
                    input_gradient(v, &geom, &p, nb, &mut planes[b0 - i0..]);
                }
            }
        });
    // The groups' transformed gradients, added in group order, then taken back to 3x3.
    let uw = p.weights();
    let grad_at = p.per_group - uw;
    let sum: Vec<f32> = (0..uw)
        .map(|j| {
            (0..p.groups)
                .map(|g| groups[g * p.per_group + grad_at + j])
                .fold(0.0, |s, t| s + t)
        })
        .collect();
    weight_gradient(&sum, &p, dw);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::conv::check_convolution;
    use crate::backend::cpu::CpuBuf;
    use crate::backend::{ColLayout, In, Out};

    fn geom(c: usize, n: usize, h: usize, w: usize) -> ConvGeom {
        ConvGeom {
            c,
            n,
            h,
            w,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            col: ColLayout::PixelMajor,
        }
    }

    /// Against a direct convolution: odd and even sides (tiles cut by the edge), one
    /// pixel, blocks of one image and of several, groups of one image and of several.
    #[test]
    fn winograd_matches_a_direct_convolution() {
        for (c, cout, n, h, w) in [
            (3, 5, 11, 7, 6),
            (8, 4, 3, 8, 8),
            (2, 3, 9, 5, 3),
            (4, 2, 2, 1, 1),
            (5, 6, 17, 4, 9),
        ] {
            let g = geom(c, n, h, w);
            let per_image = XI * (c + cout) * h.div_ceil(2) * w.div_ceil(2);
            for block_floats in [1, 2 * per_image, 1 << 20] {
                let p = Plan::new(&g, cout, block_floats);
                check_convolution(
                    g,
                    cout,
                    p.scratch(),
                    |op| forward(op, block_floats),
                    |op| backward(op, block_floats),
                    &format!("block {block_floats} ({p:?})"),
                );
            }
        }
    }

    /// The weight gradient and the output are the same bits on one thread and on
    /// three, and the weight gradient does not depend on whether dx is wanted.
    #[test]
    fn winograd_does_not_depend_on_the_threads() {
        let (g, cout) = (geom(9, 13, 6, 10), 7);
        let vals = |len: usize, f: f32| {
            CpuBuf::from((0..len).map(|i| (i as f32 * f).cos()).collect::<Vec<_>>())
        };
        let (x, w, dy) = (
            vals(g.input_len(), 0.3),
            vals(cout * g.c * 9, 0.7),
            vals(cout * g.n * 60, 0.2),
        );
        let p = Plan::new(&g, cout, BLOCK_FLOATS);
        let run = |threads: usize, with_dx: bool| {
            let mut y = CpuBuf::from(vec![0.0; cout * g.n * 60]);
            let mut dw = CpuBuf::from(vec![0.0; cout * g.c * 9]);
            let mut dx = CpuBuf::from(vec![0.0; g.input_len()]);
            let mut sc = CpuBuf::from(vec![0.0; p.scratch()]);
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    forward(
                        ConvForwardArgs {
                            x: In::new(&x),
                            w: In::new(&w),
                            geom: g,
                            cout,
                            y: Out::new(&mut y),
                            scratch: Out::new(&mut sc),
                        },
                        BLOCK_FLOATS,
                    )
                    .unwrap();
                    backward(
                        ConvBackwardArgs {
                            x: In::new(&x),
                            w: In::new(&w),
                            dy: In::new(&dy),
                            geom: g,
                            cout,
                            dw: Out::new(&mut dw),
                            dx: with_dx.then(|| Out::new(&mut dx)),
                            scratch: Out::new(&mut sc),
                            reuse: false,
                        },
                        BLOCK_FLOATS,
                    )
                    .unwrap();
                });
            let bits = |b: &CpuBuf<f32>| b.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            (bits(&y), bits(&dw), bits(&dx))
        };
        let one = run(1, true);
        assert_eq!(one, run(3, true));
        assert_eq!(one.1, run(2, false).1);
    }

    /// Only the 3x3, stride-1, pad-1 convolutions with enough channels come here.
    #[test]
    fn applies_to_same_padded_3x3_only() {
        assert!(applies(&geom(MIN_CHANNELS, 1, 8, 8)));
        assert!(!applies(&geom(3, 1, 8, 8)));
        assert!(!applies(&ConvGeom {
            stride: 2,
            ..geom(16, 1, 8, 8)
        }));
        assert!(!applies(&ConvGeom {
            pad: 0,
            ..geom(16, 1, 8, 8)
        }));
        assert!(!applies(&ConvGeom {
            kh: 1,
            kw: 1,
            pad: 0,
            ..geom(16, 1, 8, 8)
        }));
    }
}
