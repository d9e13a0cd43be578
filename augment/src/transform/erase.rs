//! RandomErasing and Cutout: fill a rectangle with zeros, in place.

use super::resize::Rect;
use crate::SampleRng;

/// torchvision `RandomErasing(p, scale, ratio, value=0)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Erasing {
    /// Probability of erasing a rectangle, 0..=1 (default 0.5).
    pub p: f64,
    /// Range of the rectangle's area as a fraction of the image's, `0 < lo <= hi <= 1`
    /// (default 0.02-0.33).
    pub scale: (f64, f64),
    /// Range of the rectangle's aspect ratio, height over width, drawn log-uniformly
    /// (default 0.3-3.3).
    pub ratio: (f64, f64),
}

impl Default for Erasing {
    fn default() -> Self {
        Erasing {
            p: 0.5,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
        }
    }
}

impl Erasing {
    /// The rectangle to erase, or none. Draws: one number for `p`; if it hits, up to
    /// 10 attempts of (area scale, log ratio, then top and left when the box fits).
    /// As in torchvision, the ratio sets height over width, and a box must be
    /// strictly smaller than the image; after 10 misses nothing is erased.
    pub fn draw(&self, rng: &mut SampleRng, width: usize, height: usize) -> Option<Rect> {
        if !rng.chance(self.p) {
            return None;
        }
        let area = (width * height) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let erase_area = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(log_lo, log_hi).exp();
            let h = (erase_area * aspect).sqrt().round_ties_even() as usize;
            let w = (erase_area / aspect).sqrt().round_ties_even() as usize;
            if !(h < height && w < width) {
                continue;
            }
            let top = rng.below((height - h + 1) as u64) as usize;
            let left = rng.below((width - w + 1) as u64) as usize;
            return Some(Rect {
                left,
                top,
                width: w,
                height: h,
            });
        }
        None
    }
}

/// Cutout's square: centre row then column drawn uniformly, clipped to the image.
pub fn cutout_box(rng: &mut SampleRng, width: usize, height: usize, size: usize) -> Rect {
    let cy = rng.below(height as u64) as usize;
    let cx = rng.below(width as u64) as usize;
    let half = size / 2;
    let (y0, y1) = (cy.saturating_sub(half), (cy + half).min(height));
    let (x0, x1) = (cx.saturating_sub(half), (cx + half).min(width));
    Rect {
        left: x0,
        top: y0,
        width: x1 - x0,
        height: y1 - y0,
    }
}

/// Zero `r` in a `width`-wide HWC image.
pub fn fill_zero(data: &mut [u8], width: usize, channels: usize, r: Rect) {
    let row_len = width * channels;
    for y in r.top..r.top + r.height {
        let start = y * row_len + r.left * channels;
        if let Some(span) = data.get_mut(start..start + r.width * channels) {
            span.fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erasing_boxes_fit() {
        let e = Erasing {
            p: 1.0,
            ..Default::default()
        };
        for seed in 0..500 {
            let mut rng = SampleRng::from_seed(seed);
            if let Some(r) = e.draw(&mut rng, 32, 20) {
                assert!(r.width < 32 && r.height < 20);
                assert!(r.left + r.width <= 32 && r.top + r.height <= 20);
            }
        }
        let never = Erasing {
            p: 0.0,
            ..Default::default()
        };
        assert_eq!(never.draw(&mut SampleRng::from_seed(1), 32, 32), None);
    }

    #[test]
    fn cutout_clips_at_borders() {
        for seed in 0..200 {
            let r = cutout_box(&mut SampleRng::from_seed(seed), 10, 7, 16);
            assert!(r.left + r.width <= 10 && r.top + r.height <= 7);
        }
        let mut d = vec![1u8; 4 * 3];
        fill_zero(
            &mut d,
            4,
            1,
            Rect {
                left: 1,
                top: 1,
                width: 2,
                height: 2,
            },
        );
        assert_eq!(d, [1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1]);
    }
}
