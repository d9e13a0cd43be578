//! The image side of Winograd F(2x2, 3x3): the input patches' transform `B^T d B`, the
//! output's `A^T M A`, and their adjoints for the backward, on sub-planes of even and
//! odd rows and columns (see `split_padded`), built for the common widths.

use super::plan::{Block, Images, Plan, Work};
use crate::backend::ConvGeom;

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

/// The transforms, built for one image width (see `width`).
pub(super) struct Transforms {
    pub(super) input: fn(&[f32], Block<'_>, &mut Work, &mut [f32]),
    pub(super) gradient: fn(&[f32], Block<'_>, &mut Work, &mut [f32]),
    pub(super) output: fn(&[f32], Block<'_>, &mut Work, Images<'_, '_>),
    pub(super) input_gradient: fn(&[f32], Block<'_>, &mut Work, Images<'_, '_>),
}

impl Transforms {
    pub(super) fn for_width(w: usize) -> Self {
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
