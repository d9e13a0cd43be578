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
use crate::backend::{BResult, ConvBackwardArgs, ConvForwardArgs, ConvGeom, In, Out};

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

    /// Nothing to compute: no images, no pixels or no output channels.
    fn is_empty(&self, geom: &ConvGeom) -> bool {
        geom.n == 0 || geom.h == 0 || geom.w == 0 || self.cout == 0
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

/// The planes of a group's images, by image then channel.
type Planes<'a> = Vec<Vec<&'a mut [f32]>>;

/// The planes of a block's images, by image then channel.
type Images<'p, 'a> = &'p mut [Vec<&'a mut [f32]>];

/// One block's work, as `Plan::each_block` hands it over.
struct Job<'j, 'a> {
    /// The block's index in its group.
    index: usize,
    blk: Block<'j>,
    /// The block's transformed input `V`, its `M`, and its group's transformed weight
    /// gradient.
    v: &'j mut [f32],
    m: &'j mut [f32],
    du: &'j mut [f32],
    /// The planes of the block's images (none if the call gave none).
    out: Images<'j, 'a>,
    /// The task's buffers for the transforms.
    wk: &'j mut Work,
}

impl Plan {
    /// Runs `f` on every block, the groups in parallel (a task each, with its part of
    /// `scratch`, its images' planes, none if `planes` has none, and its transforms'
    /// buffers), a group's blocks in order.
    fn each_block<F>(&self, geom: &ConvGeom, scratch: &mut [f32], planes: &mut [Planes<'_>], f: F)
    where
        F: Fn(Job<'_, '_>) + Sync,
    {
        scratch
            .par_chunks_mut(self.per_group)
            .zip(planes.par_iter_mut())
            .enumerate()
            .for_each(|(g, (sc, planes))| {
                let (i0, i1) = self.images(g, geom.n);
                let mut wk = Work::new(self);
                for (bi, b0) in (i0..i1).step_by(self.block).enumerate() {
                    let nb = self.block.min(i1 - b0);
                    let blk = Block {
                        geom,
                        p: self,
                        b0,
                        nb,
                    };
                    let (v, m, du) = self.split(sc, nb);
                    f(Job {
                        index: bi,
                        blk,
                        v,
                        m,
                        du,
                        out: planes.get_mut(b0 - i0..).unwrap_or_default(),
                        wk: &mut wk,
                    });
                }
            });
    }
}

/// f32 elements of scratch for a convolution of `geom` into `cout` channels.
pub(super) fn scratch(geom: &ConvGeom, cout: usize) -> usize {
    Plan::new(geom, cout, BLOCK_FLOATS).scratch()
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
    for (k, g) in w.chunks_exact(9).enumerate() {
        // G g: each column of the kernel, from 3 values to 4.
        let mut t = [[0f32; 3]; 4];
        for x in 0..3 {
            let (g0, g1, g2) = (g[x], g[3 + x], g[6 + x]);
            t[0][x] = g0;
            t[1][x] = 0.5 * (g0 + g1 + g2);
            t[2][x] = 0.5 * (g0 - g1 + g2);
            t[3][x] = g2;
        }
        // Then each row, times G^T.
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
    for (k, g) in dw.chunks_exact_mut(9).enumerate() {
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

/// `dst = f(a, b)`, element by element (iterators, not indices, so that it vectorises).
#[inline(always)]
fn map2(dst: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    for (d, (a, b)) in dst.iter_mut().zip(a.iter().zip(b)) {
        *d = f(*a, *b);
    }
}

/// `dst = -a`, element by element.
#[inline(always)]
fn negate(dst: &mut [f32], a: &[f32]) {
    for (d, a) in dst.iter_mut().zip(a) {
        *d = -a;
    }
}

/// `dst = f(a, b, c)`, element by element.
#[inline(always)]
fn map3(dst: &mut [f32], a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) {
    for (d, ((a, b), c)) in dst.iter_mut().zip(a.iter().zip(b).zip(c)) {
        *d = f(*a, *b, *c);
    }
}

/// A task's buffers for the transforms of its blocks, made once per call and group.
struct Work {
    /// Sub-planes `[a * 2 + b]`: the pixels of each image at even or odd rows (`a`) and
    /// columns (`b`), either of the zero-padded input (`(th + 1) x (tw + 1)` an image,
    /// see `split_padded`) or of the output (`th x tw`).
    sub: [Vec<f32>; 4],
    /// A transform's first pass: up to sixteen arrays, of one value per element of the
    /// block's padded sub-planes or per tile.
    one: Vec<f32>,
    /// The input gradient's second pass: sixteen arrays of one value per tile.
    two: Vec<f32>,
    /// A row of zeros, `tw` long: the missing neighbour rows at the planes' edges.
    zeros: Vec<f32>,
}

impl Work {
    fn new(p: &Plan) -> Self {
        let padded = p.block * (p.th + 1) * (p.tw + 1);
        Self {
            sub: std::array::from_fn(|_| vec![0.0; padded]),
            one: vec![0.0; 16 * padded],
            two: vec![0.0; 16 * p.block * p.tiles],
            zeros: vec![0.0; p.tw],
        }
    }
}

/// The plane `h x w`, padded with a zero row above and a zero column on the left (the
/// convolution's padding, `P[y][x] = plane[y - 1][x - 1]`), cut into its even and odd
/// rows and columns: `sub[a * 2 + b][u * (tw + 1) + v] = P[2u + a][2v + b]`, zeros
/// beyond the plane. The 4x4 patch of tile `(ty, tx)` starts at `P[2ty][2tx]`, so its
/// element `(r, c)` is `sub[(r & 1) * 2 + (c & 1)]` at `(ty + r / 2, tx + c / 2)`:
/// every element of every patch is a shifted, contiguous view of one sub-plane.
fn split_padded<const W: usize>(plane: &[f32], geom: &ConvGeom, p: &Plan, sub: [&mut [f32]; 4]) {
    let (w, w1) = (width::<W>(geom), p.tw + 1);
    let [s00, s01, s10, s11] = sub;
    for s in [&mut *s00, &mut *s01, &mut *s10, &mut *s11] {
        s.fill(0.0);
    }
    let mut parity = [(s00, s01), (s10, s11)];
    for (iy, row) in plane.chunks_exact(w).take(geom.h).enumerate() {
        let (a, u) = ((iy + 1) & 1, (iy + 1) >> 1);
        let (s0, s1) = &mut parity[a];
        let (s0, s1) = (&mut s0[u * w1..][..w1], &mut s1[u * w1..][..w1]);
        // Column ix is P's column ix + 1: even ix is odd (b = 1, v = ix / 2), odd ix is
        // even (b = 0, v = ix / 2 + 1).
        let mut pairs = row.chunks_exact(2);
        for (pair, (o, e)) in (&mut pairs).zip(s1.iter_mut().zip(&mut s0[1..])) {
            *o = pair[0];
            *e = pair[1];
        }
        if let [last] = pairs.remainder() {
            s1[w / 2] = *last;
        }
    }
}

/// The image width `W`, or `geom.w` if `W` is 0: the transforms are built for the
/// common even widths, so that their short row loops have a known length.
#[inline(always)]
fn width<const W: usize>(geom: &ConvGeom) -> usize {
    if W > 0 {
        W
    } else {
        geom.w
    }
}

/// Tile columns of an image `W` wide (see `width`).
#[inline(always)]
fn tile_cols<const W: usize>(p: &Plan) -> usize {
    if W > 0 {
        W / 2
    } else {
        p.tw
    }
}

/// The four sub-planes' parts `at..at + len`.
fn quarter(sub: &mut [Vec<f32>; 4], at: usize, len: usize) -> [&mut [f32]; 4] {
    sub.each_mut().map(|s| &mut s[at..at + len])
}

/// `B^T d B` of every 4x4 input patch of images `b0..b0+nb`, into `v[16][c][tiles]`.
fn input_transform<const W: usize>(x: &[f32], blk: Block<'_>, wk: &mut Work, v: &mut [f32]) {
    let Block { geom, p, b0, nb } = blk;
    let hw = geom.h * geom.w;
    let tb = nb * p.tiles;
    let tw = tile_cols::<W>(p);
    let w1 = tw + 1;
    let ps = (p.th + 1) * w1;
    // The sub-planes of the block's images, one after another; the flat loops below
    // run over all of them but their last row (which only the row above reads).
    let len = nb * ps - w1;
    for ci in 0..p.c {
        for li in 0..nb {
            let plane = &x[(ci * geom.n + b0 + li) * hw..][..hw];
            split_padded::<W>(plane, geom, p, quarter(&mut wk.sub, li * ps, ps));
        }
        // B^T down each patch's columns: e[i * 2 + b] at (ty, v) from the sub-planes'
        // rows ty and ty + 1.
        let e = &mut wk.one[..8 * len];
        for b in 0..2 {
            let (s0, s1) = (&wk.sub[b], &wk.sub[2 + b]);
            let (s0, s0n, s1, s1n) = (&s0[..len], &s0[w1..], &s1[..len], &s1[w1..]);
            let mut e = e.chunks_exact_mut(len).skip(b).step_by(2);
            map2(e.next().unwrap(), s0, s0n, |a, b| a - b);
            map2(e.next().unwrap(), s1, s0n, |a, b| a + b);
            map2(e.next().unwrap(), s0n, s1, |a, b| a - b);
            map2(e.next().unwrap(), s1, s1n, |a, b| a - b);
        }
        // B along each patch's rows, tile row by tile row (the sub-planes have one
        // column more than the tiles).
        for i in 0..4 {
            let (e0, e1) = (&e[(i * 2) * len..][..len], &e[(i * 2 + 1) * len..][..len]);
            for li in 0..nb {
                for ty in 0..p.th {
                    let f = li * ps + ty * w1;
                    let (e0, e0n) = (&e0[f..f + tw], &e0[f + 1..f + w1]);
                    let (e1, e1n) = (&e1[f..f + tw], &e1[f + 1..f + w1]);
                    let at = |j: usize| (i * 4 + j) * p.c * tb + ci * tb + (li * p.th + ty) * tw;
                    map2(&mut v[at(0)..][..tw], e0, e0n, |a, b| a - b);
                    map2(&mut v[at(1)..][..tw], e1, e0n, |a, b| a + b);
                    map2(&mut v[at(2)..][..tw], e0n, e1, |a, b| a - b);
                    map2(&mut v[at(3)..][..tw], e1, e1n, |a, b| a - b);
                }
            }
        }
    }
}

/// `A^T M A` of every tile of `m[16][cout][tiles]` into the output planes of the
/// block's images (`out[image][channel]`, `h x w`; a tile's pixels beyond the
/// image's edge are dropped).
fn output_transform<const W: usize>(m: &[f32], blk: Block<'_>, wk: &mut Work, out: Images<'_, '_>) {
    let Block { geom, p, nb, .. } = blk;
    let tb = nb * p.tiles;
    for co in 0..p.cout {
        let at = |i: usize, j: usize| &m[(i * 4 + j) * p.cout * tb + co * tb..][..tb];
        // A^T along each tile's rows: h[i * 2 + b].
        let h = &mut wk.one[..8 * tb];
        for (i, hi) in h.chunks_exact_mut(2 * tb).enumerate() {
            let (h0, h1) = hi.split_at_mut(tb);
            map3(h0, at(i, 0), at(i, 1), at(i, 2), |a, b, c| a + b + c);
            map3(h1, at(i, 1), at(i, 2), at(i, 3), |a, b, c| a - b - c);
        }
        // A^T down the columns: the outputs' sub-planes (a, b), th x tw an image.
        let hr = |i: usize, b: usize| &h[(i * 2 + b) * tb..][..tb];
        for b in 0..2 {
            map3(
                &mut wk.sub[b][..tb],
                hr(0, b),
                hr(1, b),
                hr(2, b),
                |a, b, c| a + b + c,
            );
            map3(
                &mut wk.sub[2 + b][..tb],
                hr(1, b),
                hr(2, b),
                hr(3, b),
                |a, b, c| a - b - c,
            );
        }
        for (li, image) in out.iter_mut().enumerate().take(nb) {
            let sub = wk.sub.each_ref().map(|s| &s[li * p.tiles..][..p.tiles]);
            interleave::<W>(sub, geom, p, image[co]);
        }
    }
}

/// Writes a `h x w` plane from its sub-planes of even and odd rows and columns
/// (`sub[a * 2 + b][ty * tw + tx]` is pixel `(2ty + a, 2tx + b)`).
fn interleave<const W: usize>(sub: [&[f32]; 4], geom: &ConvGeom, p: &Plan, plane: &mut [f32]) {
    let (w, tw) = (width::<W>(geom), tile_cols::<W>(p));
    for (y, row) in plane.chunks_exact_mut(w).take(geom.h).enumerate() {
        let (a, ty) = (y & 1, y >> 1);
        let (even, odd) = (
            &sub[a * 2][ty * tw..][..tw],
            &sub[a * 2 + 1][ty * tw..][..tw],
        );
        let mut pairs = row.chunks_exact_mut(2);
        for (d, (e, o)) in (&mut pairs).zip(even.iter().zip(odd)) {
            d[0] = *e;
            d[1] = *o;
        }
        if let [last] = pairs.into_remainder() {
            *last = even[tw - 1];
        }
    }
}

/// `interleave`'s inverse: a `h x w` plane into its sub-planes of even and odd rows
/// and columns, `th x tw` each, zeros where a tile runs past the plane's edge.
fn deinterleave<const W: usize>(plane: &[f32], geom: &ConvGeom, p: &Plan, sub: [&mut [f32]; 4]) {
    let (w, tw) = (width::<W>(geom), tile_cols::<W>(p));
    let [s00, s01, s10, s11] = sub;
    for s in [&mut *s00, &mut *s01, &mut *s10, &mut *s11] {
        s.fill(0.0);
    }
    let mut parity = [(s00, s01), (s10, s11)];
    for (y, row) in plane.chunks_exact(w).take(geom.h).enumerate() {
        let (a, ty) = (y & 1, y >> 1);
        let (s0, s1) = &mut parity[a];
        let (s0, s1) = (&mut s0[ty * tw..][..tw], &mut s1[ty * tw..][..tw]);
        let mut pairs = row.chunks_exact(2);
        for (pair, (e, o)) in (&mut pairs).zip(s0.iter_mut().zip(s1.iter_mut())) {
            *e = pair[0];
            *o = pair[1];
        }
        if let [last] = pairs.remainder() {
            s0[tw - 1] = *last;
        }
    }
}

/// `A dY A^T` of every 2x2 tile of the output gradient of images `b0..b0+nb`, into
/// `m[16][cout][tiles]` (pixels beyond the image's edge count as zeros).
fn gradient_transform<const W: usize>(dy: &[f32], blk: Block<'_>, wk: &mut Work, m: &mut [f32]) {
    let Block { geom, p, b0, nb } = blk;
    let hw = geom.h * geom.w;
    let tb = nb * p.tiles;
    for co in 0..p.cout {
        // The tiles' pixels (a, b), as sub-planes th x tw an image.
        for li in 0..nb {
            let plane = &dy[(co * geom.n + b0 + li) * hw..][..hw];
            deinterleave::<W>(plane, geom, p, quarter(&mut wk.sub, li * p.tiles, p.tiles));
        }
        // A down the columns: y0, y0 + y1, y0 - y1, -y1, as a[i * 2 + b].
        let a = &mut wk.one[..8 * tb];
        for b in 0..2 {
            let (d0, d1) = (&wk.sub[b][..tb], &wk.sub[2 + b][..tb]);
            let mut a = a.chunks_exact_mut(tb).skip(b).step_by(2);
            a.next().unwrap().copy_from_slice(d0);
            map2(a.next().unwrap(), d0, d1, |x, y| x + y);
            map2(a.next().unwrap(), d0, d1, |x, y| x - y);
            negate(a.next().unwrap(), d1);
        }
        // A along the rows, into the 16 matrices.
        for i in 0..4 {
            let (a0, a1) = (&a[(i * 2) * tb..][..tb], &a[(i * 2 + 1) * tb..][..tb]);
            let at = |j: usize| (i * 4 + j) * p.cout * tb + co * tb;
            m[at(0)..][..tb].copy_from_slice(a0);
            map2(&mut m[at(1)..][..tb], a0, a1, |x, y| x + y);
            map2(&mut m[at(2)..][..tb], a0, a1, |x, y| x - y);
            negate(&mut m[at(3)..][..tb], a1);
        }
    }
}

/// `B dV B^T` of every tile of `v[16][c][tiles]`, added up over the overlapping 4x4
/// patches into the block's input planes (`out[image][channel]`, overwritten); the
/// parts outside the image are dropped.
fn input_gradient<const W: usize>(v: &[f32], blk: Block<'_>, wk: &mut Work, out: Images<'_, '_>) {
    let Block { geom, p, nb, .. } = blk;
    let tb = nb * p.tiles;
    let (w, tw) = (width::<W>(geom), tile_cols::<W>(p));
    let w1 = tw + 1;
    let ps = (p.th + 1) * w1;
    for ci in 0..p.c {
        let dv = |i: usize, j: usize| &v[(i * 4 + j) * p.c * tb + ci * tb..][..tb];
        // B along each tile's rows: rows[i * 4 + k], for patch column k.
        let rows = &mut wk.one[..16 * tb];
        for (i, row_i) in rows.chunks_exact_mut(4 * tb).enumerate() {
            let mut k = row_i.chunks_exact_mut(tb);
            k.next().unwrap().copy_from_slice(dv(i, 0));
            map3(
                k.next().unwrap(),
                dv(i, 1),
                dv(i, 2),
                dv(i, 3),
                |a, b, c| a - b + c,
            );
            map3(
                k.next().unwrap(),
                dv(i, 1),
                dv(i, 2),
                dv(i, 0),
                |a, b, c| a + b - c,
            );
            negate(k.next().unwrap(), dv(i, 3));
        }
        // B down the columns: q[r * 4 + k], patch element (r, k) of every tile.
        let qs = &mut wk.two[..16 * tb];
        for k in 0..4 {
            let cr = |r: usize| &rows[(r * 4 + k) * tb..][..tb];
            let q_at = |r: usize| (r * 4 + k) * tb;
            qs[q_at(0)..][..tb].copy_from_slice(cr(0));
            map3(&mut qs[q_at(1)..][..tb], cr(1), cr(2), cr(3), |a, b, c| {
                a - b + c
            });
            map3(&mut qs[q_at(2)..][..tb], cr(1), cr(2), cr(0), |a, b, c| {
                a + b - c
            });
            negate(&mut qs[q_at(3)..][..tb], cr(3));
        }
        for (li, image) in out.iter_mut().enumerate().take(nb) {
            // Patch element (r, k) of tile (ty, tx) is P[2ty + r][2tx + k]: sub-plane
            // (r & 1, k & 1) at (ty + r / 2, tx + k / 2).
            let qrow = |r: usize, k: usize, ty: usize| {
                &qs[(r * 4 + k) * tb + (li * p.th + ty) * tw..][..tw]
            };
            for (ab, s) in wk.sub.iter_mut().enumerate() {
                let (a, b) = (ab >> 1, ab & 1);
                for (u, srow) in s[..ps].chunks_exact_mut(w1).enumerate() {
                    // S[u][v] = Q(a, b)[u][v] + Q(a, b + 2)[u][v - 1]
                    //   + Q(a + 2, b)[u - 1][v] + Q(a + 2, b + 2)[u - 1][v - 1],
                    // of the rows that exist, in one pass: adding into the row four times,
                    // at shifts of one, stalls on every load of what the last pass stored.
                    let (q1, q2) = if u < p.th {
                        (qrow(a, b, u), qrow(a, b + 2, u))
                    } else {
                        (&wk.zeros[..tw], &wk.zeros[..tw])
                    };
                    let (q3, q4) = if u > 0 {
                        (qrow(a + 2, b, u - 1), qrow(a + 2, b + 2, u - 1))
                    } else {
                        (&wk.zeros[..tw], &wk.zeros[..tw])
                    };
                    srow[0] = q1[0] + q3[0];
                    for (d, (((q1, q2), q3), q4)) in srow[1..tw]
                        .iter_mut()
                        .zip(q1[1..].iter().zip(q2).zip(&q3[1..]).zip(q4))
                    {
                        *d = q1 + q2 + q3 + q4;
                    }
                    srow[tw] = q2[tw - 1] + q4[tw - 1];
                }
            }
            // The plane from P = the sub-planes, less the padding row and column.
            for (iy, row) in image[ci].chunks_exact_mut(w).take(geom.h).enumerate() {
                let (a, u) = ((iy + 1) & 1, (iy + 1) >> 1);
                let (s0, s1) = (
                    &wk.sub[a * 2][u * w1..][..w1],
                    &wk.sub[a * 2 + 1][u * w1..][..w1],
                );
                // Even ix is P's odd column ix + 1 (b = 1, v = ix / 2); odd ix is even
                // (b = 0, v = ix / 2 + 1).
                let mut pairs = row.chunks_exact_mut(2);
                for (d, (o, e)) in (&mut pairs).zip(s1.iter().zip(&s0[1..])) {
                    d[0] = *o;
                    d[1] = *e;
                }
                if let [last] = pairs.into_remainder() {
                    *last = s1[w / 2];
                }
            }
        }
    }
}

/// One block of images: the convolution, its plan, and images `b0..b0 + nb`.
#[derive(Clone, Copy)]
struct Block<'a> {
    geom: &'a ConvGeom,
    p: &'a Plan,
    b0: usize,
    nb: usize,
}

/// The transforms, built for one image width (see `width`).
struct Transforms {
    input: fn(&[f32], Block<'_>, &mut Work, &mut [f32]),
    gradient: fn(&[f32], Block<'_>, &mut Work, &mut [f32]),
    output: fn(&[f32], Block<'_>, &mut Work, Images<'_, '_>),
    input_gradient: fn(&[f32], Block<'_>, &mut Work, Images<'_, '_>),
}

impl Transforms {
    fn for_width(w: usize) -> Self {
        match w {
            8 => Self::of::<8>(),
            16 => Self::of::<16>(),
            32 => Self::of::<32>(),
            64 => Self::of::<64>(),
            _ => Self::of::<0>(),
        }
    }

    fn of<const W: usize>() -> Self {
        Self {
            input: input_transform::<W>,
            gradient: gradient_transform::<W>,
            output: output_transform::<W>,
            input_gradient: input_gradient::<W>,
        }
    }
}

/// Each group's planes of a `[c, n, h, w]` activation: `[group][image - i0][channel]`.
fn planes_by_group<'a>(buf: &'a mut [f32], geom: &ConvGeom, p: &Plan) -> Vec<Planes<'a>> {
    let mut all = planes_by_image(buf, geom, 0, geom.n).into_iter();
    (0..p.groups)
        .map(|g| {
            let (i0, i1) = p.images(g, geom.n);
            all.by_ref().take(i1 - i0).collect()
        })
        .collect()
}

/// What both directions start from.
struct Prepared<'x, 's> {
    p: Plan,
    /// The input.
    x: &'x [f32],
    /// The transformed weights, at the head of the scratch.
    u: &'s [f32],
    /// The groups' parts of the scratch, after `u`.
    groups: &'s mut [f32],
}

/// A call's plan, its input `x`, and its scratch with the weights `w` transformed into
/// its head.
fn prepare<'x, 's>(
    (geom, cout, block_floats): (&ConvGeom, usize, usize),
    x: In<'x, CpuBackend>,
    (w, scratch): (In<'_, CpuBackend>, Out<'s, CpuBackend>),
    op: &'static str,
) -> BResult<Prepared<'x, 's>> {
    let p = Plan::new(geom, cout, block_floats);
    let x = read_slice(x, geom.input_len(), op)?;
    let w = read_slice(w, cout * geom.c * 9, op)?;
    let scratch = write_slice(scratch, p.scratch(), op)?;
    let (u, groups) = scratch.split_at_mut(p.weights());
    weight_transform(w, &p, u);
    Ok(Prepared { p, x, u, groups })
}

/// `conv_forward` by blocks of at most `block_floats` floats of transformed input and
/// output.
pub(super) fn forward(op: ConvForwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_forward";
    let geom = op.geom;
    let shape = (&geom, op.cout, block_floats);
    let Prepared { p, x, u, groups } = prepare(shape, op.x, (op.w, op.scratch), OP)?;
    let y = write_slice(op.y, p.cout * geom.n * geom.h * geom.w, OP)?;
    if p.is_empty(&geom) {
        return Ok(());
    }
    let t = Transforms::for_width(geom.w);
    let mut planes = planes_by_group(y, &geom, &p);
    p.each_block(&geom, groups, &mut planes, |job| {
        let Job {
            blk, v, m, out, wk, ..
        } = job;
        let tb = blk.nb * p.tiles;
        (t.input)(x, blk, wk, v);
        let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
        for xi in 0..XI {
            // M[xi][cout, tb] = U[xi][cout, c] V[xi][c, tb]
            // SAFETY: the three are dense slices of these shapes.
            unsafe {
                gemm(
                    (p.cout, tb, p.c),
                    (&u[xi * uw..][..uw], Strided::rows(p.c)),
                    (&v[xi * vw..][..vw], Strided::rows(tb)),
                    &mut m[xi * mw..][..mw],
                    false,
                );
            }
        }
        (t.output)(m, blk, wk, out);
    });
    Ok(())
}

/// `conv_backward` by blocks of at most `block_floats` floats of transformed input and
/// output gradient.
pub(super) fn backward(op: ConvBackwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_backward";
    let geom = op.geom;
    let Prepared { p, x, u, groups } =
        prepare((&geom, op.cout, block_floats), op.x, (op.w, op.scratch), OP)?;
    let dy = read_slice(op.dy, p.cout * geom.n * geom.h * geom.w, OP)?;
    let dw = write_slice(op.dw, p.cout * geom.c * 9, OP)?;
    let dx = op
        .dx
        .map(|d| write_slice(d, geom.input_len(), OP))
        .transpose()?;
    if p.is_empty(&geom) {
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
    let t = Transforms::for_width(geom.w);
    p.each_block(&geom, groups, &mut planes, |job| {
        let Job {
            index: bi,
            blk,
            v,
            m,
            du,
            out,
            wk,
        } = job;
        let tb = blk.nb * p.tiles;
        (t.input)(x, blk, wk, v);
        (t.gradient)(dy, blk, wk, m);
        let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
        for xi in 0..XI {
            let (vx, mx) = (&mut v[xi * vw..][..vw], &m[xi * mw..][..mw]);
            // SAFETY (both): dense slices of these shapes.
            unsafe {
                // dU[xi][cout, c] (+)= dM[xi][cout, tb] V[xi]^T[tb, c]
                gemm(
                    (p.cout, p.c, tb),
                    (mx, Strided::rows(tb)),
                    (vx, Strided::cols(tb)),
                    &mut du[xi * uw..][..uw],
                    bi > 0,
                );
                if with_dx {
                    // dV[xi][c, tb] = U[xi]^T[c, cout] dM[xi][cout, tb], over V.
                    gemm(
                        (p.c, tb, p.cout),
                        (&u[xi * uw..][..uw], Strided::cols(p.c)),
                        (mx, Strided::rows(tb)),
                        vx,
                        false,
                    );
                }
            }
        }
        if with_dx {
            (t.input_gradient)(v, blk, wk, out);
        }
    });
    // The groups' transformed gradients, added in group order into the first group's,
    // then taken back to 3x3.
    let uw = p.weights();
    let grad_at = p.per_group - uw;
    let (first, rest) = groups.split_at_mut(p.per_group);
    let sum = &mut first[grad_at..];
    for g in rest.chunks_exact(p.per_group) {
        for (s, t) in sum.iter_mut().zip(&g[grad_at..]) {
            *s += t;
        }
    }
    weight_gradient(sum, &p, dw);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::conv::{check_convolution, run_convolution, Blocked};
    use crate::backend::ColLayout;

    const WINOGRAD: Blocked = Blocked {
        forward,
        backward,
        scratch: |g, cout, block| Plan::new(g, cout, block).scratch(),
    };

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
    /// pixel, the widths with transforms of their own (8, 16, 32, 64) and others,
    /// blocks of one image and of several, groups of one image and of several.
    #[test]
    fn winograd_matches_a_direct_convolution() {
        for (c, cout, n, h, w) in [
            (3, 5, 11, 7, 6),
            (8, 4, 3, 8, 8),
            (2, 3, 9, 5, 3),
            (4, 2, 2, 1, 1),
            (5, 6, 17, 4, 9),
            (3, 2, 2, 15, 16),
            (2, 3, 3, 32, 32),
            (2, 3, 2, 9, 64),
        ] {
            let per_image = XI * (c + cout) * usize::div_ceil(h, 2) * usize::div_ceil(w, 2);
            check_convolution(
                &WINOGRAD,
                geom(c, n, h, w),
                cout,
                &[1, 2 * per_image, 1 << 20],
            );
        }
    }

    /// The output and both gradients are the same bits on one thread and on three, and
    /// the weight gradient does not depend on whether dx is wanted.
    #[test]
    fn winograd_does_not_depend_on_the_threads() {
        let (g, cout) = (geom(9, 13, 6, 10), 7);
        let vals = |len: usize, f: f32| (0..len).map(|i| (i as f32 * f).cos()).collect::<Vec<_>>();
        let (x, w, dy) = (
            vals(g.input_len(), 0.3),
            vals(cout * g.c * 9, 0.7),
            vals(cout * g.n * 60, 0.2),
        );
        let run = |threads: usize, with_dx: bool| {
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    run_convolution(&WINOGRAD, (g, cout, BLOCK_FLOATS), [&x, &w, &dy], with_dx)
                })
                .map(bits)
        };
        let one = run(1, true);
        assert_eq!(one, run(3, true));
        assert_eq!(one[1], run(2, false)[1]);
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
