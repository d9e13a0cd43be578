//! Rotation, shear and translation: one matrix builder and one nearest-neighbour warp.
//!
//! Everything geometric here (the `rotate` and `affine` transforms and the policies'
//! ShearX/Y, TranslateX/Y and Rotate) goes through [`Affine::matrices`], which builds
//! the matrix with torchvision's `_get_inverse_affine_matrix`, and [`warp_nearest`],
//! which samples like torchvision's `grid_sample(mode="nearest", align_corners=False)`
//! with a constant fill. The output has the input's size.
//!
//! # Coordinates
//!
//! Both matrices act on continuous pixel coordinates: the origin is the top-left
//! corner of the top-left pixel, x to the right, y down, and pixel (row i, column j)
//! covers `[j, j + 1) x [i, i + 1)`, so its centre is `(j + 0.5, i + 0.5)`. The image
//! centre is `(w / 2, h / 2)`. A box corner `(x0, y0)` is moved by `forward`; the pixel
//! at output centre `p` is read from input point `inverse * p`. (torchvision's box
//! kernels use the same convention: `affine_bounding_boxes` builds the forward matrix
//! with centre `(w / 2, h / 2)` in these coordinates.)

use super::cpu;
use crate::ImageView;

/// A 2x3 affine map, row-major: `(x, y) -> (m[0] x + m[1] y + m[2], m[3] x + m[4] y + m[5])`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Matrix(pub [f64; 6]);

impl Matrix {
    /// The map that leaves every point where it is.
    pub const IDENTITY: Matrix = Matrix([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);

    /// Where `(x, y)` goes.
    pub fn apply(&self, x: f64, y: f64) -> (f64, f64) {
        let m = &self.0;
        (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5])
    }

    /// `self` after `first`: the map `p -> self(first(p))`.
    pub fn then(&self, first: &Matrix) -> Matrix {
        let (a, b) = (&self.0, &first.0);
        Matrix([
            a[0] * b[0] + a[1] * b[3],
            a[0] * b[1] + a[1] * b[4],
            a[0] * b[2] + a[1] * b[5] + a[2],
            a[3] * b[0] + a[4] * b[3],
            a[3] * b[1] + a[4] * b[4],
            a[3] * b[2] + a[4] * b[5] + a[5],
        ])
    }
}

/// An affine transform as torchvision's `F.affine` takes it (scale 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Affine {
    /// Rotation in degrees, clockwise on screen (`F.affine`'s `angle`; `F.rotate(a)`,
    /// counter-clockwise, is `angle = -a`).
    pub angle: f64,
    /// Translation in pixels (x, y), applied after the rotation and shear.
    pub translate: (f64, f64),
    /// Shear angles in degrees (x, y).
    pub shear: (f64, f64),
    /// The fixed point of rotation and shear, in the pixel coordinates above; `None` is
    /// the image centre (`F.affine(center=None)`).
    pub center: Option<(f64, f64)>,
    /// The value of output pixels whose source lies outside the image (every channel).
    pub fill: u8,
}

impl Affine {
    /// `F.rotate(img, degrees)`: counter-clockwise about the centre, same size.
    pub fn rotate(degrees: f64, fill: u8) -> Affine {
        Affine {
            angle: -degrees,
            translate: (0.0, 0.0),
            shear: (0.0, 0.0),
            center: None,
            fill,
        }
    }

    /// (inverse, forward) matrices for a `w` x `h` image (see the module docs).
    pub fn matrices(&self, w: usize, h: usize) -> (Matrix, Matrix) {
        let center = self.center.unwrap_or((w as f64 * 0.5, h as f64 * 0.5));
        let m = |inverted| {
            affine_matrix(
                center,
                self.angle,
                self.translate,
                1.0,
                self.shear,
                inverted,
            )
        };
        (m(true), m(false))
    }

    /// Warp `src` into `dst` (same size and channels). The matrix is built as
    /// torchvision builds it, about the centre of the image, so that the float32
    /// sampling grid is bit for bit torchvision's.
    pub fn apply(&self, src: ImageView<'_>, dst: &mut [u8]) {
        let (w, h) = (src.width as f64, src.height as f64);
        let center = match self.center {
            None => (0.0, 0.0),
            Some((cx, cy)) => (cx - w * 0.5, cy - h * 0.5),
        };
        let theta = affine_matrix(center, self.angle, self.translate, 1.0, self.shear, true);
        sample_nearest(src, dst, &theta, self.fill);
    }
}

/// torchvision's `_get_inverse_affine_matrix(center, angle, translate, scale, shear,
/// inverted)`, term for term (angles in degrees; `angle` clockwise, as `F.affine`).
/// With `inverted` it maps output points to input points, else input to output. Given
/// `center` in the pixel coordinates of the module docs, the matrix is in them too.
pub fn affine_matrix(
    center: (f64, f64),
    angle: f64,
    translate: (f64, f64),
    scale: f64,
    shear: (f64, f64),
    inverted: bool,
) -> Matrix {
    let rot = angle.to_radians();
    let (sx, sy) = (shear.0.to_radians(), shear.1.to_radians());
    let (cx, cy) = center;
    let (tx, ty) = translate;
    let cos_sy = sy.cos();
    let tan_sx = sx.tan();
    let rot_minus_sy = rot - sy;
    let cx_plus_tx = cx + tx;
    let cy_plus_ty = cy + ty;
    // Rotation and shear without scale: RSS = R(a) * SHy(sy) * SHx(sx).
    let a = rot_minus_sy.cos() / cos_sy;
    let b = -(a * tan_sx + rot.sin());
    let c = rot_minus_sy.sin() / cos_sy;
    let d = rot.cos() - c * tan_sx;
    let mut m = if inverted {
        // det([[a, b], [c, d]]) = 1, so the inverse is the adjugate.
        [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    } else {
        [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0]
    };
    if inverted {
        // C * RSS^-1 * C^-1 * T^-1
        m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
        m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    } else {
        // T * C * RSS * C^-1
        m[2] += cx_plus_tx - m[0] * cx - m[1] * cy;
        m[5] += cy_plus_ty - m[3] * cx - m[4] * cy;
    }
    Matrix(m)
}

/// Round half to even, exact for |x| < 2^22 (the sum pushes the fraction out of the
/// float32 mantissa under the default rounding mode): what `grid_sample`'s
/// `nearbyint` does, without a libm call on CPUs where `round_ties_even` is not one
/// instruction. Larger values are returned as they are: they lie far outside any
/// image.
#[inline]
pub(super) fn round_even(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23
    if x.abs() < 4_194_304.0 {
        (x + SHIFT) - SHIFT
    } else {
        x
    }
}

/// Nearest-neighbour warp of `src` into `dst` (same size and channels) through the
/// `inverse` matrix of the module docs: output pixel (i, j) takes the input pixel
/// nearest to `inverse * (j + 0.5, i + 0.5)` (half-way cases to even), or `fill` when
/// that lies outside the image.
pub fn warp_nearest(src: ImageView<'_>, dst: &mut [u8], inverse: &Matrix, fill: u8) {
    // torchvision's theta works about the image centre: the same map with the
    // centre moved to the origin.
    let (cx, cy) = (src.width as f64 * 0.5, src.height as f64 * 0.5);
    let m = &inverse.0;
    let theta = Matrix([
        m[0],
        m[1],
        m[0] * cx + m[1] * cy + m[2] - cx,
        m[3],
        m[4],
        m[3] * cx + m[4] * cy + m[5] - cy,
    ]);
    sample_nearest(src, dst, &theta, fill);
}

/// torchvision's `_affine_grid` and `grid_sample`'s unnormalisation for one warp, as
/// float32 constants: where output pixel (i, j) reads is [`Grid::source`] of the column
/// terms [`Grid::column`] and the row terms [`Grid::row`]. Every path of the warp
/// computes it through these three functions, so they all perform the same float32
/// operations in the same order and pick the same source pixels, ties included.
#[derive(Clone, Copy, Debug)]
struct Grid {
    /// theta^T / [w / 2, h / 2], as _affine_grid rescales it.
    r: [f32; 6],
    /// grid_sample's unnormalisation: (g + 1) * (size / 2) - 0.5.
    half: (f32, f32),
    /// The base grid's first column and row: pixel centres about the image centre
    /// (exact in float32).
    first: (f32, f32),
    /// The image size as floats, the bounds of an inside source.
    size: (f32, f32),
}

impl Grid {
    fn new(w: usize, h: usize, theta: &Matrix) -> Grid {
        let t = theta.0.map(|v| v as f32);
        let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
        Grid {
            r: [
                t[0] / hw,
                t[1] / hw,
                t[2] / hw,
                t[3] / hh,
                t[4] / hh,
                t[5] / hh,
            ],
            half: (w as f32 / 2.0, h as f32 / 2.0),
            first: ((1.0 - w as f32) * 0.5, (1.0 - h as f32) * 0.5),
            size: (w as f32, h as f32),
        }
    }

    /// The terms of column `j`: the same float32 products whether computed once per
    /// column or once per pixel, so they can be hoisted out of the rows.
    #[inline(always)]
    fn column(&self, j: usize) -> (f32, f32) {
        let x = self.first.0 + j as f32;
        (x * self.r[0], x * self.r[3])
    }

    /// The terms of row `i`.
    #[inline(always)]
    fn row(&self, i: usize) -> (f32, f32) {
        let y = self.first.1 + i as f32;
        (y * self.r[1], y * self.r[4])
    }

    /// The source pixel (column, row), rounded half to even, as whole floats: the sums
    /// in torchvision's order (column term, then row term, then the constant).
    #[inline(always)]
    fn source(&self, col: (f32, f32), row: (f32, f32)) -> (f32, f32) {
        let gx = (col.0 + row.0) + self.r[2];
        let gy = (col.1 + row.1) + self.r[5];
        (
            round_even((gx + 1.0) * self.half.0 - 0.5),
            round_even((gy + 1.0) * self.half.1 - 0.5),
        )
    }

    /// Whether a source pixel lies in the image (`false` for NaN).
    #[inline(always)]
    fn inside(&self, (sx, sy): (f32, f32)) -> bool {
        (sx >= 0.0) & (sy >= 0.0) & (sx < self.size.0) & (sy < self.size.1)
    }
}

/// The one sampling loop: torchvision's `_affine_grid` and `grid_sample(nearest, zeros
/// padding, align_corners=False)`, then the fill where the source is outside, in its
/// float32 operations and their order (so the same source pixel is picked, ties
/// included). `theta` maps output to input about the image centre.
fn sample_nearest(src: ImageView<'_>, dst: &mut [u8], theta: &Matrix, fill: u8) {
    sample_with(src, dst, theta, fill, cpu::avx2());
}

/// [`sample_nearest`], through the AVX2 build of the row loop when `avx2` is set (and
/// the CPU has it).
fn sample_with(src: ImageView<'_>, dst: &mut [u8], theta: &Matrix, fill: u8, avx2: bool) {
    let (w, h, c) = (src.width, src.height, src.channels);
    let grid = Grid::new(w, h, theta);
    // Whole numbers in [0, 2^22) are read from the mantissa of `v + 2^23`; sample
    // offsets must fit a u32 below the `OUTSIDE` mark.
    let fits = w < 1 << 22 && h < 1 << 22 && (w * h * c) < OUTSIDE as usize;
    if !fits || !matches!(c, 1 | 3) {
        sample_each(src, dst, &grid, fill);
        return;
    }
    let (col0, col3): (Vec<f32>, Vec<f32>) = (0..w).map(|j| grid.column(j)).unzip();
    let rows = Rows {
        grid,
        col0: &col0,
        col3: &col3,
        src: src.data,
        width: w as u32,
        channels: c as u32,
        fill,
    };
    let mut at = vec![OUTSIDE; w];
    #[cfg(target_arch = "x86_64")]
    if avx2 && cpu::avx2() {
        // SAFETY: the CPU has AVX2 (checked just above), all that `warp_rows_avx2`
        // needs beyond the baseline.
        unsafe { warp_rows_avx2(&rows, dst, &mut at) };
        return;
    }
    let _ = avx2;
    warp_rows::<false>(&rows, dst, &mut at);
}

/// The per-pixel form, for channel counts other than 1 and 3 and for images too large
/// for the offsets' u32: each pixel's source, then a copy or the fill.
fn sample_each(src: ImageView<'_>, dst: &mut [u8], grid: &Grid, fill: u8) {
    let (w, h, c) = (src.width, src.height, src.channels);
    for (i, row) in dst.chunks_exact_mut(w * c).take(h).enumerate() {
        let row_terms = grid.row(i);
        for (j, px) in row.chunks_exact_mut(c).enumerate() {
            let s = grid.source(grid.column(j), row_terms);
            if grid.inside(s) {
                let at = (s.1 as usize * w + s.0 as usize) * c;
                px.copy_from_slice(&src.data[at..at + c]);
            } else {
                px.fill(fill);
            }
        }
    }
}

/// What the row loop reads: the grid, its column terms, the source samples, and the
/// geometry of a 1- or 3-channel image that fits the u32 offsets.
struct Rows<'a> {
    grid: Grid,
    col0: &'a [f32],
    col3: &'a [f32],
    src: &'a [u8],
    width: u32,
    channels: u32,
    fill: u8,
}

/// [`warp_rows`] compiled with AVX2: 8 float lanes for the offsets (the same bytes,
/// see the `cpu` module).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn warp_rows_avx2(rows: &Rows<'_>, dst: &mut [u8], at: &mut [u32]) {
    warp_rows::<true>(rows, dst, at);
}

/// Every output row: first each pixel's source offset (or [`OUTSIDE`]) in a loop
/// without branches or integer conversions (vector lanes), then the fill on both sides
/// of the inside run, in bulk, and the run's pixels copied.
///
/// The inside pixels of a row are one run: along a row, the source column is a
/// monotone function of the output column (each float32 operation between them, a
/// product or a sum with a constant, and the rounding to a whole number, is monotone),
/// and so is the source row, so each bound holds on an interval of columns and all
/// four on their intersection. The run is still checked (one vector pass); a row
/// where it did not hold would take the per-pixel copy.
///
/// With `GATHER` (the AVX2 build only), 3-channel runs are copied 8 pixels at a time
/// by [`gather_run3`].
#[inline(always)]
fn warp_rows<const GATHER: bool>(rows: &Rows<'_>, dst: &mut [u8], at: &mut [u32]) {
    let Rows {
        grid,
        col0,
        col3,
        src,
        width,
        channels,
        fill,
    } = *rows;
    let c = channels as usize;
    let row_len = width as usize * c;
    for (i, row) in dst.chunks_exact_mut(row_len).enumerate() {
        let row_terms = grid.row(i);
        for ((a, &x0), &x3) in at.iter_mut().zip(col0).zip(col3) {
            let s = grid.source((x0, x3), row_terms);
            let ix = (s.0 + MANTISSA).to_bits() & 0x7F_FFFF;
            let iy = (s.1 + MANTISSA).to_bits() & 0x7F_FFFF;
            *a = if grid.inside(s) {
                (iy * width + ix) * channels
            } else {
                OUTSIDE
            };
        }
        let Some(k0) = at.iter().position(|&a| a != OUTSIDE) else {
            row.fill(fill);
            continue;
        };
        let k1 = at.iter().rposition(|&a| a != OUTSIDE).map_or(k0, |k| k + 1);
        let (head, rest) = row.split_at_mut(k0 * c);
        let (out, tail) = rest.split_at_mut((k1 - k0) * c);
        head.fill(fill);
        tail.fill(fill);
        let run = &at[k0..k1];
        let last = run.iter().fold(0, |m, &a| m.max(a));
        let one_run = last != OUTSIDE;
        match (c, one_run) {
            (3, true)
                if GATHER && last as usize + 4 <= src.len() && src.len() <= i32::MAX as usize =>
            {
                // SAFETY: the CPU has AVX2 (`GATHER` is set only in its build), and
                // every offset of the run is at most `last`, whose 4 bytes lie in
                // `src`, within i32.
                let done = unsafe { gather_run3(out, run, src) };
                copy_run3(&mut out[3 * done..], &run[done..], src);
            }
            (3, true) => copy_run3(out, run, src),
            (1, true) => copy_run1(out, run, src),
            (3, false) => copy_pixels::<3>(out, run, src, fill),
            _ => copy_pixels::<1>(out, run, src, fill),
        }
    }
}

/// Copy 3-byte pixels from their offsets, all inside: each as one 4-byte load and one
/// 4-byte store, whose 4th byte the next pixel overwrites (the run's last pixel, and a
/// source pixel at the very end of `src`, take 3 bytes).
#[inline(always)]
fn copy_run3(out: &mut [u8], run: &[u32], src: &[u8]) {
    let Some((&last, body)) = run.split_last() else {
        return;
    };
    for (j, &a) in body.iter().enumerate() {
        let a = a as usize;
        let word = match src.get(a..a + 4) {
            Some(s) => u32::from_ne_bytes(s.try_into().expect("4 bytes")),
            None => u32::from_le_bytes([src[a], src[a + 1], src[a + 2], 0]),
        };
        // Before the last pixel: the 4th byte lands in the next pixel's slot.
        out[3 * j..3 * j + 4].copy_from_slice(&word.to_ne_bytes());
    }
    let (a, n) = (last as usize, body.len());
    out[3 * n..3 * n + 3].copy_from_slice(&src[a..a + 3]);
}

/// Copy the first pixels of a 3-byte run, 8 at a time: one gather of 8 4-byte words
/// from the run's offsets, a shuffle that drops each word's 4th byte, and two 16-byte
/// stores (each with 4 bytes the next group overwrites), stopping while the stores
/// stay inside `out`. Returns how many pixels it copied; [`copy_run3`] does the rest.
///
/// # Safety
///
/// The CPU has AVX2; `out` holds at least `3 * run.len()` bytes; every offset in
/// `run` is at most `i32::MAX` and has 4 bytes of `src` from it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gather_run3(out: &mut [u8], run: &[u32], src: &[u8]) -> usize {
    use std::arch::x86_64::*;
    let pack = _mm256_setr_epi8(
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, //
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
    );
    let mut j = 0;
    // The second store ends 28 bytes after the group's first pixel.
    while j + 8 <= run.len() && 3 * j + 28 <= out.len() {
        // SAFETY: `run[j..j + 8]` is in bounds (the loop's condition); the gather
        // reads 4 bytes at each offset, inside `src` (the caller's promise); both
        // stores end at most at `out[3 * j + 28]`, inside `out`.
        unsafe {
            let idx = _mm256_loadu_si256(run.as_ptr().add(j).cast());
            let words = _mm256_i32gather_epi32::<1>(src.as_ptr().cast(), idx);
            let packed = _mm256_shuffle_epi8(words, pack);
            let o = out.as_mut_ptr().add(3 * j);
            _mm_storeu_si128(o.cast(), _mm256_castsi256_si128(packed));
            _mm_storeu_si128(o.add(12).cast(), _mm256_extracti128_si256::<1>(packed));
        }
        j += 8;
    }
    j
}

/// Where AVX2 cannot run, nothing is gathered (the caller's `GATHER` is never set).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn gather_run3(_: &mut [u8], _: &[u32], _: &[u8]) -> usize {
    0
}

/// Copy 1-byte pixels from their offsets, all inside.
#[inline(always)]
fn copy_run1(out: &mut [u8], run: &[u32], src: &[u8]) {
    for (o, &a) in out.iter_mut().zip(run) {
        *o = src[a as usize];
    }
}

/// The offset that marks an output pixel whose source is outside the image.
const OUTSIDE: u32 = u32::MAX;

/// 2^23: `v + 2^23` holds a whole `v` in [0, 2^22) in its mantissa's low bits.
const MANTISSA: f32 = 8_388_608.0;

/// One output row of `C`-channel pixels, each from its source offset in `at`, or
/// `fill` where that is [`OUTSIDE`]; fixed-size copies (a pixel of unknown size is a
/// `memcpy` call).
#[inline]
fn copy_pixels<const C: usize>(row: &mut [u8], at: &[u32], src: &[u8], fill: u8) {
    for (px, &a) in row.chunks_exact_mut(C).zip(at) {
        let px: &mut [u8; C] = px.try_into().expect("C-sample chunks");
        *px = if a == OUTSIDE {
            [fill; C]
        } else {
            let a = a as usize;
            src[a..a + C].try_into().expect("C samples")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(w: usize, h: usize, c: usize) -> Vec<u8> {
        (0..w * h * c).map(|i| (i * 7 % 251) as u8 + 1).collect()
    }

    #[test]
    fn forward_and_inverse_are_inverses() {
        let t = Affine {
            angle: 23.0,
            translate: (3.0, -7.5),
            shear: (12.0, -4.0),
            center: None,
            fill: 0,
        };
        let (inv, fwd) = t.matrices(40, 30);
        let id = inv.then(&fwd);
        for (a, b) in id.0.iter().zip(Matrix::IDENTITY.0) {
            assert!((a - b).abs() < 1e-9, "{id:?}");
        }
        // The centre stays where it is under a pure rotation.
        let (_, fwd) = Affine::rotate(37.0, 0).matrices(40, 30);
        let (x, y) = fwd.apply(20.0, 15.0);
        assert!((x - 20.0).abs() < 1e-9 && (y - 15.0).abs() < 1e-9);
    }

    #[test]
    fn rotate_is_counter_clockwise_on_screen() {
        // A point right of the centre goes up (smaller y) under +90 degrees.
        let (_, fwd) = Affine::rotate(90.0, 0).matrices(10, 10);
        let (x, y) = fwd.apply(8.0, 5.0);
        assert!((x - 5.0).abs() < 1e-9 && (y - 2.0).abs() < 1e-9, "{x} {y}");
    }

    #[test]
    fn identity_and_integer_translation_are_exact() {
        let (w, h, c) = (9, 7, 3);
        let src = img(w, h, c);
        let view = ImageView::new(w, h, c, &src).unwrap();
        let mut out = vec![0u8; src.len()];
        Affine::rotate(0.0, 0).apply(view, &mut out);
        assert_eq!(out, src);
        let t = Affine {
            angle: 0.0,
            translate: (2.0, -1.0),
            shear: (0.0, 0.0),
            center: None,
            fill: 9,
        };
        t.apply(view, &mut out);
        for i in 0..h {
            for j in 0..w {
                let got = &out[(i * w + j) * c..][..c];
                let (si, sj) = (i as isize + 1, j as isize - 2);
                if si < h as isize && sj >= 0 {
                    let at = (si as usize * w + sj as usize) * c;
                    assert_eq!(got, &src[at..at + c]);
                } else {
                    assert_eq!(got, [9, 9, 9]);
                }
            }
        }
    }

    #[test]
    fn half_turn_on_a_square_reverses_the_pixels() {
        let (w, c) = (6, 1);
        let src = img(w, w, c);
        let view = ImageView::new(w, w, c, &src).unwrap();
        let mut out = vec![0u8; src.len()];
        Affine::rotate(180.0, 0).apply(view, &mut out);
        let rev: Vec<u8> = src.iter().rev().copied().collect();
        assert_eq!(out, rev);
        Affine::rotate(90.0, 0).apply(view, &mut out);
        // Counter-clockwise: the top row becomes the left column, read upwards.
        for j in 0..w {
            assert_eq!(out[(w - 1 - j) * w], src[j]);
        }
    }

    #[test]
    fn round_even_matches_the_library() {
        for x in [
            -2.5f32,
            -1.5,
            -0.5,
            0.5,
            1.5,
            2.5,
            3.49,
            -3.51,
            1e6 + 0.5,
            4e6 + 0.5,
        ] {
            assert_eq!(round_even(x), f32::round_ties_even(x), "{x}");
        }
    }

    #[test]
    fn the_pixel_matrix_warps_as_the_transform_does() {
        let (w, h, c) = (23, 17, 3);
        let src = img(w, h, c);
        let view = ImageView::new(w, h, c, &src).unwrap();
        for t in [
            Affine::rotate(31.0, 5),
            Affine {
                angle: -12.0,
                translate: (2.0, 3.5),
                shear: (20.0, -7.0),
                center: Some((0.0, 0.0)),
                fill: 0,
            },
        ] {
            let mut a = vec![0u8; src.len()];
            let mut b = vec![0u8; src.len()];
            t.apply(view, &mut a);
            warp_nearest(view, &mut b, &t.matrices(w, h).0, t.fill);
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            // Only a sample whose source lies within float rounding of a half pixel
            // may go the other way.
            assert!(differ <= c * 2, "{t:?}: {differ} samples differ");
        }
    }

    /// The sampling loop before the column terms were hoisted and the pixel copies
    /// given fixed sizes: the reference the fast loop must equal.
    fn scalar_sample(src: ImageView<'_>, dst: &mut [u8], theta: &Matrix, fill: u8) {
        let (w, h, c) = (src.width, src.height, src.channels);
        let t = theta.0.map(|v| v as f32);
        let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
        let (r0, r1, r2) = (t[0] / hw, t[1] / hw, t[2] / hw);
        let (r3, r4, r5) = (t[3] / hh, t[4] / hh, t[5] / hh);
        let (sw, sh) = (w as f32 / 2.0, h as f32 / 2.0);
        let (x_first, y_first) = ((1.0 - w as f32) * 0.5, (1.0 - h as f32) * 0.5);
        for (i, row) in dst.chunks_exact_mut(w * c).take(h).enumerate() {
            let y = y_first + i as f32;
            let (yx, yy) = (y * r1, y * r4);
            for (j, px) in row.chunks_exact_mut(c).enumerate() {
                let x = x_first + j as f32;
                let sx = round_even(((x * r0 + yx) + r2 + 1.0) * sw - 0.5);
                let sy = round_even(((x * r3 + yy) + r5 + 1.0) * sh - 0.5);
                if sx >= 0.0 && sy >= 0.0 && sx < w as f32 && sy < h as f32 {
                    let at = (sy as usize * w + sx as usize) * c;
                    px.copy_from_slice(&src.data[at..at + c]);
                } else {
                    px.fill(fill);
                }
            }
        }
    }

    /// Both builds of the row loop (baseline and AVX2, where the CPU has it) against
    /// the per-pixel reference.
    fn both_builds_equal_the_reference(view: ImageView<'_>, theta: &Matrix, fill: u8) {
        let n = view.data.len();
        let mut want = vec![0u8; n];
        scalar_sample(view, &mut want, theta, fill);
        for avx2 in [false, true] {
            let mut got = vec![0u8; n];
            sample_with(view, &mut got, theta, fill, avx2);
            let (w, h, c) = (view.width, view.height, view.channels);
            assert_eq!(got, want, "{w}x{h}x{c} {theta:?} avx2={avx2}");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_fast_warp_equals_the_per_pixel_one(
            w in 1usize..70,
            h in 1usize..70,
            c in 1usize..=4,
            angle in -360.0f64..360.0,
            shear in (-80.0f64..80.0, -80.0f64..80.0),
            translate in (-80.0f64..80.0, -80.0f64..80.0),
            center in proptest::option::of((-20.0f64..90.0, -20.0f64..90.0)),
            fill: u8,
            seed: u64,
        ) {
            let mut rng = crate::SampleRng::from_seed(seed);
            let src: Vec<u8> = (0..w * h * c).map(|_| rng.below(256) as u8).collect();
            let view = ImageView::new(w, h, c, &src).unwrap();
            let (wf, hf) = (w as f64, h as f64);
            let centre = center.map_or((0.0, 0.0), |(x, y)| (x - wf * 0.5, y - hf * 0.5));
            let theta = affine_matrix(centre, angle, translate, 1.0, shear, true);
            both_builds_equal_the_reference(view, &theta, fill);
            // Whole angles and translations put sources on exact half pixels: the ties.
            let theta = affine_matrix((0.0, 0.0), angle.round(), (translate.0.round() + 0.5, translate.1.round()), 1.0, (0.0, 0.0), true);
            both_builds_equal_the_reference(view, &theta, fill);
        }
    }

    #[test]
    fn the_hoisted_loop_equals_the_per_pixel_one() {
        for (w, h) in [(1, 1), (9, 7), (40, 30), (33, 51)] {
            for c in 1..=4 {
                let src = img(w, h, c);
                let view = ImageView::new(w, h, c, &src).unwrap();
                for (angle, shear, tx) in [(0.0, 0.0, 0.0), (30.0, 0.0, 1.5), (-135.0, 17.0, -4.0)]
                {
                    let t = Affine {
                        angle,
                        translate: (tx, 2.0),
                        shear: (shear, -shear / 2.0),
                        center: None,
                        fill: 7,
                    };
                    let theta = affine_matrix((0.0, 0.0), angle, t.translate, 1.0, t.shear, true);
                    both_builds_equal_the_reference(view, &theta, 7);
                }
            }
        }
    }
}
