//! Where a sample's geometric steps moved its pixels, so that boxes, masks and
//! keypoints follow the image.
//!
//! A pipeline run that records geometry (see [`Scratch::record_geometry`]) notes each
//! geometric step as the [`GeoOp`] it actually applied, with the parameters it drew:
//! the random draws happen once, for the image, and every spatial field replays them.
//!
//! Coordinates are continuous pixel coordinates: pixel `(i, j)` covers
//! `[i, i + 1) x [j, j + 1)`, so a box `[x1, y1, x2, y2]` around the whole of a `W` x `H`
//! image is `[0, 0, W, H]`, and a horizontal flip maps `x` to `W - x`. Each field is
//! carried through the steps one at a time, because a step's output is all that the
//! next step sees:
//! - a box is mapped (for a rotation or shear, to the bounding box of its four mapped
//!   corners) and clipped to each step's output; it is dropped when it has no area
//!   left, or when less than `min_visibility` of the area it would have had without
//!   clipping is left;
//! - a keypoint is mapped, and becomes invisible when it lies outside the input image
//!   or falls outside a step's output (what lies there is padding, not the point);
//! - a mask is resampled nearest-neighbour (the source pixel under each output pixel's
//!   centre), and areas that come from padding or erasing get [`MASK_FILL`].
//!
//! [`Scratch::record_geometry`]: crate::Scratch::record_geometry

use crate::transform::resize::{Rect, SoftBox};

/// The mask value of pixels that hold no data (padding, erased areas): "ignore", as in
/// VOC and most segmentation losses.
pub const MASK_FILL: u8 = 255;

/// One geometric step as applied to one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GeoOp {
    /// The part `keep` of the input (in its coordinates) resampled to `to`: resize,
    /// random resized crop, and a resize fused with its centre crop.
    Resample {
        /// The part of the input kept, in input pixel coordinates.
        keep: SoftBox,
        /// (width, height) of the output, in pixels.
        to: (usize, usize),
    },
    /// The `to`-sized window whose top-left corner is at (`left`, `top`) of the input;
    /// window pixels outside the input are padding: crops, centre crops, padding.
    Window {
        /// Column of the window's left edge in the input (negative: padding on the left).
        left: i64,
        /// Row of the window's top edge in the input (negative: padding on top).
        top: i64,
        /// (width, height) of the window, which is the output, in pixels.
        to: (usize, usize),
    },
    /// A left-right mirror (the width is the input's).
    FlipH,
    /// An affine warp to a `to`-sized output: `forward` maps input coordinates to
    /// output coordinates, `(x, y) -> (a x + b y + c, d x + e y + f)`, and `inverse`
    /// the other way; pixels that map from outside the input are fill.
    Affine {
        /// `[a, b, c, d, e, f]` mapping input coordinates to output coordinates.
        forward: [f64; 6],
        /// The same form, mapping output coordinates back to input coordinates.
        inverse: [f64; 6],
        /// (width, height) of the output, in pixels.
        to: (usize, usize),
    },
    /// A rectangle of the image overwritten (random erasing, cutout): no pixel moves,
    /// but a mask marks it as [`MASK_FILL`].
    Erase(Rect),
}

impl GeoOp {
    /// The output size for an input of `(w, h)`.
    pub fn output_size(&self, (w, h): (usize, usize)) -> (usize, usize) {
        match *self {
            GeoOp::Resample { to, .. } | GeoOp::Window { to, .. } | GeoOp::Affine { to, .. } => to,
            GeoOp::FlipH | GeoOp::Erase(_) => (w, h),
        }
    }

    /// Maps a point of an input of `size` to the output.
    pub fn map_point(&self, (w, _h): (usize, usize), x: f64, y: f64) -> (f64, f64) {
        match *self {
            GeoOp::Resample { keep, to } => (
                (x - keep.left) * to.0 as f64 / keep.width,
                (y - keep.top) * to.1 as f64 / keep.height,
            ),
            GeoOp::Window { left, top, .. } => (x - left as f64, y - top as f64),
            GeoOp::FlipH => (w as f64 - x, y),
            GeoOp::Affine { forward: m, .. } => apply(&m, x, y),
            GeoOp::Erase(_) => (x, y),
        }
    }
}

fn apply(m: &[f64; 6], x: f64, y: f64) -> (f64, f64) {
    (m[0] * x + m[1] * y + m[2], m[3] * x + m[4] * y + m[5])
}

/// The geometric steps applied to one sample, in order, and the size it started at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Geometry {
    input: (usize, usize),
    ops: Vec<GeoOp>,
}

/// Reusable buffers for [`Geometry::map_mask`].
#[derive(Default)]
pub struct MaskScratch {
    a: Vec<u8>,
    b: Vec<u8>,
}

impl Geometry {
    /// Starts a new sample of `width` x `height` (keeps the list's capacity).
    pub fn reset(&mut self, width: usize, height: usize) {
        self.input = (width, height);
        self.ops.clear();
    }

    /// Appends a step, applied after those already recorded.
    pub fn push(&mut self, op: GeoOp) {
        self.ops.push(op);
    }

    /// The steps recorded since the last [`reset`](Self::reset), in the order applied.
    pub fn ops(&self) -> &[GeoOp] {
        &self.ops
    }

    /// (width, height) of the sample before the steps.
    pub fn input_size(&self) -> (usize, usize) {
        self.input
    }

    /// (width, height) after every step.
    pub fn output_size(&self) -> (usize, usize) {
        self.ops
            .iter()
            .fold(self.input, |size, op| op.output_size(size))
    }

    /// Whether the image ends up mirrored (an odd number of flips): keypoints that
    /// name a left and a right side then swap places.
    pub fn mirrored(&self) -> bool {
        self.ops.iter().filter(|op| **op == GeoOp::FlipH).count() % 2 == 1
    }

    /// Maps a box `[x1, y1, x2, y2]` of the input to the output, clipping it to each
    /// step's output; `None` when it is dropped (see the module docs).
    pub fn map_box(&self, b: [f32; 4], min_visibility: f32) -> Option<[f32; 4]> {
        let mut clipped = [b[0] as f64, b[1] as f64, b[2] as f64, b[3] as f64];
        let mut free = clipped;
        let mut size = self.input;
        for op in &self.ops {
            clipped = map_box_once(op, size, clipped);
            free = map_box_once(op, size, free);
            size = op.output_size(size);
            let (w, h) = (size.0 as f64, size.1 as f64);
            clipped = [
                clipped[0].clamp(0.0, w),
                clipped[1].clamp(0.0, h),
                clipped[2].clamp(0.0, w),
                clipped[3].clamp(0.0, h),
            ];
            if clipped[2] <= clipped[0] || clipped[3] <= clipped[1] {
                return None;
            }
        }
        let area = |b: &[f64; 4]| (b[2] - b[0]).max(0.0) * (b[3] - b[1]).max(0.0);
        let whole = area(&free);
        if whole > 0.0 && area(&clipped) < f64::from(min_visibility) * whole {
            return None;
        }
        Some(clipped.map(|v| v as f32))
    }

    /// Maps a point of the input to the output; `None` when it lies outside the input
    /// image or leaves the image at any step.
    pub fn map_point(&self, x: f32, y: f32) -> Option<(f32, f32)> {
        let inside = |x: f64, y: f64, (w, h): (usize, usize)| {
            x >= 0.0 && y >= 0.0 && x < w as f64 && y < h as f64
        };
        let (mut x, mut y) = (x as f64, y as f64);
        let mut size = self.input;
        // A point the annotation put off the image is no more visible without a
        // transform than one a crop cut off.
        if !inside(x, y, size) {
            return None;
        }
        for op in &self.ops {
            (x, y) = op.map_point(size, x, y);
            size = op.output_size(size);
            if !inside(x, y, size) {
                return None;
            }
        }
        Some((x as f32, y as f32))
    }

    /// Resamples a one-byte-per-pixel map of the input size (a mask) through every
    /// step, nearest-neighbour, into `out` (exactly the output size).
    ///
    /// # Panics
    /// When `mask` or `out` has the wrong length (the caller checks the sizes).
    pub fn map_mask(&self, mask: &[u8], out: &mut [u8], scratch: &mut MaskScratch) {
        let (iw, ih) = self.input;
        assert_eq!(mask.len(), iw * ih, "mask size");
        let (ow, oh) = self.output_size();
        assert_eq!(out.len(), ow * oh, "output mask size");
        if self.ops.is_empty() {
            out.copy_from_slice(mask);
            return;
        }
        let MaskScratch { a, b } = scratch;
        let mut size = self.input;
        // The map lives in `mask`, then alternately in `a` and `b`; the last step
        // writes `out`.
        let mut cur: u8 = 0;
        for (k, op) in self.ops.iter().enumerate() {
            let to = op.output_size(size);
            let last = k + 1 == self.ops.len();
            let (src, dst): (&[u8], &mut [u8]) = match (cur, last) {
                (0, true) => (mask, &mut *out),
                (1, true) => (a.as_slice(), &mut *out),
                (_, true) => (b.as_slice(), &mut *out),
                (0, false) => (mask, sized(a, to)),
                (1, false) => (a.as_slice(), sized(b, to)),
                (_, false) => (b.as_slice(), sized(a, to)),
            };
            map_mask_once(op, src, size, dst, to);
            cur = match cur {
                0 | 2 => 1,
                _ => 2,
            };
            size = to;
        }
    }
}

fn sized(buf: &mut Vec<u8>, (w, h): (usize, usize)) -> &mut [u8] {
    buf.resize(w * h, 0);
    buf.as_mut_slice()
}

/// One step of a box, unclipped: the bounding box of its mapped corners.
fn map_box_once(op: &GeoOp, size: (usize, usize), b: [f64; 4]) -> [f64; 4] {
    let corners = [(b[0], b[1]), (b[2], b[1]), (b[0], b[3]), (b[2], b[3])];
    let mut out = [
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ];
    for (x, y) in corners {
        let (x, y) = op.map_point(size, x, y);
        out[0] = out[0].min(x);
        out[1] = out[1].min(y);
        out[2] = out[2].max(x);
        out[3] = out[3].max(y);
    }
    out
}

/// The input pixel under output coordinate `v` of a resample that maps `[start,
/// start + len)` onto `n` pixels, clamped into `0..limit`.
fn nearest(start: f64, len: f64, n: usize, v: usize, limit: usize) -> usize {
    let x = start + (v as f64 + 0.5) * len / n as f64;
    (x.floor().max(0.0) as usize).min(limit - 1)
}

/// One step of a mask: `src` is `from`, `dst` is `to`.
fn map_mask_once(op: &GeoOp, src: &[u8], from: (usize, usize), dst: &mut [u8], to: (usize, usize)) {
    let (fw, fh) = from;
    let (tw, th) = to;
    match *op {
        GeoOp::Resample { keep, .. } => {
            // Columns repeat on every row: look them up once.
            let cols: Vec<usize> = (0..tw)
                .map(|x| nearest(keep.left, keep.width, tw, x, fw))
                .collect();
            for (y, row) in dst.chunks_exact_mut(tw).enumerate() {
                let sy = nearest(keep.top, keep.height, th, y, fh);
                let src_row = &src[sy * fw..(sy + 1) * fw];
                for (d, &sx) in row.iter_mut().zip(&cols) {
                    *d = src_row[sx];
                }
            }
        }
        GeoOp::Window { left, top, .. } => {
            for (y, row) in dst.chunks_exact_mut(tw).enumerate() {
                let sy = top + y as i64;
                if sy < 0 || sy >= fh as i64 {
                    row.fill(MASK_FILL);
                    continue;
                }
                for (x, d) in row.iter_mut().enumerate() {
                    let sx = left + x as i64;
                    *d = if sx < 0 || sx >= fw as i64 {
                        MASK_FILL
                    } else {
                        src[sy as usize * fw + sx as usize]
                    };
                }
            }
        }
        GeoOp::FlipH => {
            for (d, s) in dst.chunks_exact_mut(tw).zip(src.chunks_exact(fw)) {
                for (dv, sv) in d.iter_mut().zip(s.iter().rev()) {
                    *dv = *sv;
                }
            }
        }
        GeoOp::Affine { inverse, .. } => {
            for (y, row) in dst.chunks_exact_mut(tw).enumerate() {
                for (x, d) in row.iter_mut().enumerate() {
                    let (sx, sy) = apply(&inverse, x as f64 + 0.5, y as f64 + 0.5);
                    let (sx, sy) = (sx.floor(), sy.floor());
                    *d = if sx >= 0.0 && sy >= 0.0 && sx < fw as f64 && sy < fh as f64 {
                        src[sy as usize * fw + sx as usize]
                    } else {
                        MASK_FILL
                    };
                }
            }
        }
        GeoOp::Erase(r) => {
            dst.copy_from_slice(src);
            for y in r.top..(r.top + r.height).min(th) {
                let row = &mut dst[y * tw..(y + 1) * tw];
                let end = (r.left + r.width).min(tw);
                if r.left < end {
                    row[r.left..end].fill(MASK_FILL);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft(left: f64, top: f64, width: f64, height: f64) -> SoftBox {
        SoftBox {
            left,
            top,
            width,
            height,
        }
    }

    fn geo(w: usize, h: usize, ops: &[GeoOp]) -> Geometry {
        let mut g = Geometry::default();
        g.reset(w, h);
        for op in ops {
            g.push(*op);
        }
        g
    }

    fn close(a: [f32; 4], b: [f32; 4]) -> bool {
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-3)
    }

    #[test]
    fn resize_scales_boxes_and_points() {
        // 200x100 -> 100x50: everything halves.
        let g = geo(
            200,
            100,
            &[GeoOp::Resample {
                keep: soft(0.0, 0.0, 200.0, 100.0),
                to: (100, 50),
            }],
        );
        assert!(close(
            g.map_box([10.0, 20.0, 110.0, 60.0], 0.0).unwrap(),
            [5.0, 10.0, 55.0, 30.0]
        ));
        assert_eq!(g.map_point(50.0, 50.0), Some((25.0, 25.0)));
        assert_eq!(g.output_size(), (100, 50));
    }

    #[test]
    fn a_point_off_the_input_is_invisible_without_any_step() {
        let g = geo(64, 48, &[]);
        assert_eq!(g.map_point(10.0, 20.0), Some((10.0, 20.0)));
        assert_eq!(g.map_point(0.0, 47.5), Some((0.0, 47.5)));
        for (x, y) in [
            (500.0, 20.0),
            (10.0, -3.0),
            (64.0, 0.0),
            (-0.5, 0.0),
            (1e9, 1e9),
        ] {
            assert_eq!(g.map_point(x, y), None, "({x}, {y})");
        }
        // Nor does padding bring it back: what a pad adds is fill, not the point.
        let pad = GeoOp::Window {
            left: -4,
            top: -4,
            to: (72, 56),
        };
        let g = geo(64, 48, &[pad]);
        assert_eq!(g.map_point(1.0, 10.0), Some((5.0, 14.0)));
        assert_eq!(g.map_point(-2.0, 10.0), None);
    }

    #[test]
    fn flip_mirrors_and_swaps_sides() {
        let g = geo(100, 40, &[GeoOp::FlipH]);
        assert!(close(
            g.map_box([10.0, 5.0, 30.0, 15.0], 0.0).unwrap(),
            [70.0, 5.0, 90.0, 15.0]
        ));
        assert_eq!(g.map_point(10.0, 3.0), Some((90.0, 3.0)));
        assert!(g.mirrored());
        assert!(!geo(100, 40, &[GeoOp::FlipH, GeoOp::FlipH]).mirrored());
    }

    #[test]
    fn windows_clip_and_drop() {
        // A 50x50 window at (25, 25) of a 100x100 image.
        let g = geo(
            100,
            100,
            &[GeoOp::Window {
                left: 25,
                top: 25,
                to: (50, 50),
            }],
        );
        // Half inside: clipped.
        assert!(close(
            g.map_box([0.0, 30.0, 50.0, 40.0], 0.0).unwrap(),
            [0.0, 5.0, 25.0, 15.0]
        ));
        // Half is left, which is under a threshold of 0.6.
        assert_eq!(g.map_box([0.0, 30.0, 50.0, 40.0], 0.6), None);
        // Wholly outside.
        assert_eq!(g.map_box([0.0, 0.0, 20.0, 20.0], 0.0), None);
        assert_eq!(g.map_point(10.0, 50.0), None);
        assert_eq!(g.map_point(30.0, 50.0), Some((5.0, 25.0)));
    }

    #[test]
    fn padding_shifts_and_masks_fill() {
        // pad:2 on a 3x2 map.
        let g = geo(
            3,
            2,
            &[GeoOp::Window {
                left: -2,
                top: -2,
                to: (7, 6),
            }],
        );
        assert!(close(
            g.map_box([0.0, 0.0, 3.0, 2.0], 0.0).unwrap(),
            [2.0, 2.0, 5.0, 4.0]
        ));
        let mask = [1, 2, 3, 4, 5, 6];
        let mut out = vec![0; 42];
        g.map_mask(&mask, &mut out, &mut MaskScratch::default());
        let f = MASK_FILL;
        #[rustfmt::skip]
        let want = vec![
            f, f, f, f, f, f, f,
            f, f, f, f, f, f, f,
            f, f, 1, 2, 3, f, f,
            f, f, 4, 5, 6, f, f,
            f, f, f, f, f, f, f,
            f, f, f, f, f, f, f,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn masks_resample_nearest_by_pixel_centres() {
        // 4x1 -> 2x1: output centres 0.5 and 1.5 sit over input 1 and 3.
        let g = geo(
            4,
            1,
            &[GeoOp::Resample {
                keep: soft(0.0, 0.0, 4.0, 1.0),
                to: (2, 1),
            }],
        );
        let mut out = [0u8; 2];
        g.map_mask(&[10, 11, 12, 13], &mut out, &mut MaskScratch::default());
        assert_eq!(out, [11, 13]);
        // 2x1 -> 4x1 repeats each pixel.
        let g = geo(
            2,
            1,
            &[GeoOp::Resample {
                keep: soft(0.0, 0.0, 2.0, 1.0),
                to: (4, 1),
            }],
        );
        let mut out = [0u8; 4];
        g.map_mask(&[7, 9], &mut out, &mut MaskScratch::default());
        assert_eq!(out, [7, 7, 9, 9]);
    }

    #[test]
    fn steps_compose_through_the_scratch_buffers() {
        // Flip, pad by 1, crop back to 3x1, erase the middle: four steps, so the map
        // passes through both scratch buffers.
        let g = geo(
            3,
            1,
            &[
                GeoOp::FlipH,
                GeoOp::Window {
                    left: -1,
                    top: -1,
                    to: (5, 3),
                },
                GeoOp::Window {
                    left: 1,
                    top: 1,
                    to: (3, 1),
                },
                GeoOp::Erase(Rect {
                    left: 1,
                    top: 0,
                    width: 1,
                    height: 1,
                }),
            ],
        );
        let mut out = [0u8; 3];
        g.map_mask(&[1, 2, 3], &mut out, &mut MaskScratch::default());
        assert_eq!(out, [3, MASK_FILL, 1]);
        assert_eq!(g.map_point(0.5, 0.5), Some((2.5, 0.5)));
    }

    #[test]
    fn a_rotation_bounds_the_mapped_corners() {
        // 90 degrees counter-clockwise about the centre of a 10x10 image:
        // (x, y) -> (y, 10 - x).
        let forward = [0.0, 1.0, 0.0, -1.0, 0.0, 10.0];
        let inverse = [0.0, -1.0, 10.0, 1.0, 0.0, 0.0];
        let g = geo(
            10,
            10,
            &[GeoOp::Affine {
                forward,
                inverse,
                to: (10, 10),
            }],
        );
        assert!(close(
            g.map_box([1.0, 2.0, 3.0, 6.0], 0.0).unwrap(),
            [2.0, 7.0, 6.0, 9.0]
        ));
        // The mask follows: the top-left pixel goes to the bottom-left.
        let mut mask = vec![0u8; 100];
        mask[0] = 1;
        let mut out = vec![0u8; 100];
        g.map_mask(&mask, &mut out, &mut MaskScratch::default());
        assert_eq!(out.iter().position(|&v| v == 1), Some(90));
    }
}
