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

/// The one sampling loop: torchvision's `_affine_grid` and `grid_sample(nearest, zeros
/// padding, align_corners=False)`, then the fill where the source is outside, in its
/// float32 operations and their order (so the same source pixel is picked, ties
/// included). `theta` maps output to input about the image centre.
fn sample_nearest(src: ImageView<'_>, dst: &mut [u8], theta: &Matrix, fill: u8) {
    let (w, h, c) = (src.width, src.height, src.channels);
    let t = theta.0.map(|v| v as f32);
    // theta^T / [w / 2, h / 2], as _affine_grid rescales it.
    let (hw, hh) = ((0.5 * w as f64) as f32, (0.5 * h as f64) as f32);
    let (r0, r1, r2) = (t[0] / hw, t[1] / hw, t[2] / hw);
    let (r3, r4, r5) = (t[3] / hh, t[4] / hh, t[5] / hh);
    // grid_sample's unnormalisation: (g + 1) * (size / 2) - 0.5.
    let (sw, sh) = (w as f32 / 2.0, h as f32 / 2.0);
    let (x_first, y_first) = ((1.0 - w as f32) * 0.5, (1.0 - h as f32) * 0.5);
    let (wf, hf) = (w as f32, h as f32);
    // The column terms of the grid, once per column instead of once per pixel: the
    // same float32 products, so the same sums below.
    let x_at = |j: usize| x_first + j as f32;
    let col0: Vec<f32> = (0..w).map(|j| x_at(j) * r0).collect();
    let col3: Vec<f32> = (0..w).map(|j| x_at(j) * r3).collect();
    // Whole numbers in [0, 2^22) are read from the mantissa of `v + 2^23`; sample
    // offsets must fit a u32 below the `OUTSIDE` mark.
    let fits = w < 1 << 22 && h < 1 << 22 && (w * h * c) < OUTSIDE as usize;
    let mut at = vec![OUTSIDE; w];
    let row_len = w * c;
    for (i, row) in dst.chunks_exact_mut(row_len).take(h).enumerate() {
        // The base grid: pixel centres about the image centre (exact in float32).
        let y = y_first + i as f32;
        let (yx, yy) = (y * r1, y * r4);
        // Where each output pixel of this row reads, or `None` outside the image.
        let source = |k: usize| {
            let gx = (col0[k] + yx) + r2;
            let gy = (col3[k] + yy) + r5;
            let sx = round_even((gx + 1.0) * sw - 0.5);
            let sy = round_even((gy + 1.0) * sh - 0.5);
            ((sx >= 0.0) & (sy >= 0.0) & (sx < wf) & (sy < hf)).then_some((sx, sy))
        };
        if !fits || !matches!(c, 1 | 3) {
            for (k, px) in row.chunks_exact_mut(c).enumerate() {
                match source(k) {
                    Some((sx, sy)) => {
                        let at = (sy as usize * w + sx as usize) * c;
                        px.copy_from_slice(&src.data[at..at + c]);
                    }
                    None => px.fill(fill),
                }
            }
            continue;
        }
        // First every pixel's source offset, in a loop without branches or integer
        // conversions (vector lanes), then the copies.
        let (w32, c32) = (w as u32, c as u32);
        for (k, a) in at.iter_mut().enumerate() {
            let gx = (col0[k] + yx) + r2;
            let gy = (col3[k] + yy) + r5;
            let sx = round_even((gx + 1.0) * sw - 0.5);
            let sy = round_even((gy + 1.0) * sh - 0.5);
            let inside = (sx >= 0.0) & (sy >= 0.0) & (sx < wf) & (sy < hf);
            let ix = (sx + MANTISSA).to_bits() & 0x7F_FFFF;
            let iy = (sy + MANTISSA).to_bits() & 0x7F_FFFF;
            *a = if inside {
                (iy * w32 + ix) * c32
            } else {
                OUTSIDE
            };
        }
        match c {
            3 => copy_pixels::<3>(row, &at, src.data, fill),
            _ => copy_pixels::<1>(row, &at, src.data, fill),
        }
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
                    let (mut a, mut b) = (vec![0u8; src.len()], vec![0u8; src.len()]);
                    sample_nearest(view, &mut a, &theta, 7);
                    scalar_sample(view, &mut b, &theta, 7);
                    assert_eq!(a, b, "{w}x{h}x{c} {angle} {shear}");
                }
            }
        }
    }
}
