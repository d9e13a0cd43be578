//! Where crops go (centre, random, random-resized) and copying a crop with zero padding.

use super::resize::Rect;
use crate::{ImageView, SampleRng};

/// Python's `round`: halves go to the even neighbour, which is what torchvision's
/// centre crop and crop-size arithmetic use.
fn round_even(x: f64) -> f64 {
    x.round_ties_even()
}

/// torchvision `CenterCrop` offset of a `crop`-long window in a `size`-long side.
/// Negative when the crop is larger: the image then sits inside zero padding,
/// `(crop - size) / 2` from the left/top, as torchvision pads it.
pub fn center_offset(size: usize, crop: usize) -> i64 {
    if crop > size {
        -(((crop - size) / 2) as i64)
    } else {
        round_even((size - crop) as f64 / 2.0) as i64
    }
}

/// torchvision `RandomCrop(size, padding=pad)`: the offset of the window in
/// the original image's coordinates (so it may be negative). Draws top, then left.
/// Where even the padded image is smaller than the crop, the window starts at the
/// padded corner and the rest is zero, as with `pad_if_needed`.
pub fn random_offset(
    rng: &mut SampleRng,
    w: usize,
    h: usize,
    cw: usize,
    ch: usize,
    pad: usize,
) -> (i64, i64) {
    let (pw, ph) = (w + 2 * pad, h + 2 * pad);
    let top = rng.below(ph.saturating_sub(ch) as u64 + 1) as i64 - pad as i64;
    let left = rng.below(pw.saturating_sub(cw) as u64 + 1) as i64 - pad as i64;
    (left, top)
}

/// torchvision `RandomResizedCrop.get_params`: up to 10 attempts of (area scale,
/// log-uniform aspect ratio), then a centre crop clamped to the ratio range.
pub fn rrc_box(
    rng: &mut SampleRng,
    width: usize,
    height: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Rect {
    let area = (width * height) as f64;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let w = round_even((target_area * aspect).sqrt());
        let h = round_even((target_area / aspect).sqrt());
        if w > 0.0 && w <= width as f64 && h > 0.0 && h <= height as f64 {
            let (w, h) = (w as usize, h as usize);
            let top = rng.below((height - h + 1) as u64) as usize;
            let left = rng.below((width - w + 1) as u64) as usize;
            return Rect {
                left,
                top,
                width: w,
                height: h,
            };
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (lo, hi) = (ratio.0.min(ratio.1), ratio.0.max(ratio.1));
    let (w, h) = if in_ratio < lo {
        (width, round_even(width as f64 / lo) as usize)
    } else if in_ratio > hi {
        (round_even(height as f64 * hi) as usize, height)
    } else {
        (width, height)
    };
    // Rounding can only push a side one past the image on degenerate inputs; never
    // let the box leave it or vanish.
    let (w, h) = (w.clamp(1, width.max(1)), h.clamp(1, height.max(1)));
    Rect {
        left: width.saturating_sub(w) / 2,
        top: height.saturating_sub(h) / 2,
        width: w,
        height: h,
    }
}

/// Copy the `dst_w` x `dst_h` window at (`left`, `top`) of `src` into `dst`; window
/// pixels outside the source are zero.
pub fn copy_window(src: ImageView<'_>, left: i64, top: i64, dst: &mut [u8], dst_w: usize) {
    let c = src.channels;
    let row_len = dst_w * c;
    if row_len == 0 {
        return;
    }
    // Columns of the window that hit the source: [x0, x1) in window coordinates.
    let x0 = (-left).clamp(0, dst_w as i64) as usize;
    let x1 = (src.width as i64 - left).clamp(x0 as i64, dst_w as i64) as usize;
    for (y, row) in dst.chunks_exact_mut(row_len).enumerate() {
        let sy = top + y as i64;
        if sy < 0 || sy >= src.height as i64 || x0 == x1 {
            row.fill(0);
            continue;
        }
        row[..x0 * c].fill(0);
        row[x1 * c..].fill(0);
        let sx = (left + x0 as i64) as usize;
        let start = (sy as usize * src.width + sx) * c;
        row[x0 * c..x1 * c].copy_from_slice(&src.data[start..start + (x1 - x0) * c]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn center_offsets_match_torchvision() {
        assert_eq!(center_offset(256, 224), 16);
        // (5 / 2) = 2.5 rounds to even.
        assert_eq!(center_offset(7, 2), 2);
        assert_eq!(center_offset(9, 2), 4);
        assert_eq!(center_offset(4, 8), -2);
        assert_eq!(center_offset(4, 7), -1);
    }

    #[test]
    fn window_pads_with_zeros() {
        let data: Vec<u8> = (1..=6).collect(); // 3x2, 1 channel
        let src = ImageView::new(3, 2, 1, &data).unwrap();
        let mut dst = vec![9u8; 5 * 4];
        copy_window(src, -1, -1, &mut dst, 5);
        #[rustfmt::skip]
        let want = [
            0, 0, 0, 0, 0,
            0, 1, 2, 3, 0,
            0, 4, 5, 6, 0,
            0, 0, 0, 0, 0,
        ];
        assert_eq!(dst, want);
        let mut dst = vec![9u8; 2];
        copy_window(src, 2, 1, &mut dst, 2);
        assert_eq!(dst, [6, 0]);
        copy_window(src, 10, 10, &mut dst, 2);
        assert_eq!(dst, [0, 0]);
    }

    #[test]
    fn rrc_fallback_is_clamped_centre() {
        // scale > 1 can never fit, so every attempt fails.
        let mut rng = SampleRng::from_seed(1);
        let r = rrc_box(&mut rng, 400, 100, (2.0, 3.0), (0.75, 4.0 / 3.0));
        assert_eq!((r.width, r.height), (133, 100));
        assert_eq!((r.left, r.top), (133, 0));
        let r = rrc_box(&mut rng, 100, 100, (2.0, 3.0), (0.75, 4.0 / 3.0));
        assert_eq!(r, Rect::full(100, 100));
    }
}
