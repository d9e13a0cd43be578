//! Colour transforms in place: ColorJitter (brightness, contrast, saturation, hue) and
//! grayscale.
//!
//! Brightness, contrast and saturation follow PIL's `ImageEnhance` (what torchvision
//! runs on PIL images): a float blend truncated towards zero and clipped to [0, 255],
//! with PIL's rounded luma as "gray" and the rounded mean luma as the contrast pivot.
//! Hue follows torchvision's tensor `adjust_hue` (a float HSV round trip, rounded),
//! since PIL's 8-bit HSV loses more than the shift itself.
//!
//! Random draws, in order: a permutation of the four adjustments (Fisher-Yates, three
//! draws, always made, as torchvision always draws `randperm(4)`), then one factor for
//! each *enabled* adjustment in the order brightness, contrast, saturation, hue. The
//! adjustments are then applied in the drawn order.

use super::lanes;
use crate::convert::luma;
use crate::SampleRng;

/// Strengths of a ColorJitter; 0 disables that adjustment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Jitter {
    /// Brightness factor drawn from [max(0, 1 - b), 1 + b].
    pub brightness: f64,
    /// Contrast factor drawn from [max(0, 1 - c), 1 + c].
    pub contrast: f64,
    /// Saturation factor drawn from [max(0, 1 - s), 1 + s].
    pub saturation: f64,
    /// Hue shift drawn from [-h, h], in turns; at most 0.5.
    pub hue: f64,
}

/// The factors one sample drew, in application order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JitterDraw {
    /// The adjustments in the order they apply: 0 brightness, 1 contrast,
    /// 2 saturation, 3 hue.
    pub order: [u8; 4],
    /// Brightness factor, or `None` when brightness is disabled.
    pub brightness: Option<f64>,
    /// Contrast factor, or `None` when contrast is disabled.
    pub contrast: Option<f64>,
    /// Saturation factor, or `None` when saturation is disabled.
    pub saturation: Option<f64>,
    /// Hue shift in turns, or `None` when hue is disabled.
    pub hue: Option<f64>,
}

impl Jitter {
    /// Draws one sample's order and factors (see the module docs for the draw order).
    pub fn draw(&self, rng: &mut SampleRng) -> JitterDraw {
        let mut order = [0u8, 1, 2, 3];
        for i in (1..4).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let mut factor = |v: f64| (v > 0.0).then(|| rng.uniform((1.0 - v).max(0.0), 1.0 + v));
        let brightness = factor(self.brightness);
        let contrast = factor(self.contrast);
        let saturation = factor(self.saturation);
        let hue = (self.hue > 0.0).then(|| rng.uniform(-self.hue, self.hue));
        JitterDraw {
            order,
            brightness,
            contrast,
            saturation,
            hue,
        }
    }
}

/// Apply one draw to an HWC image in place.
pub fn apply_jitter(data: &mut [u8], channels: usize, d: &JitterDraw) {
    for step in d.order {
        match step {
            0 => {
                if let Some(f) = d.brightness {
                    brightness(data, f);
                }
            }
            1 => {
                if let Some(f) = d.contrast {
                    contrast(data, channels, f);
                }
            }
            2 => {
                if let Some(f) = d.saturation {
                    saturation(data, channels, f);
                }
            }
            _ => {
                if let Some(h) = d.hue {
                    hue(data, channels, h);
                }
            }
        }
    }
}

/// PIL's `Image.blend(a, b, alpha)` for one sample: float, truncated, clipped. The
/// clamp is a min and a max (no branch), so the loops that call it run in vector
/// lanes; NaN cannot occur (both ends are samples, `alpha` is finite).
#[inline]
fn blend(a: f32, b: f32, alpha: f32) -> u8 {
    lanes::trunc_u8((a + alpha * (b - a)).clamp(0.0, 255.0))
}

/// Pixels per block in the RGB loops: each block's lumas go to an array first, so
/// that the loops have fixed trip counts the compiler runs in vector lanes.
const BLOCK: usize = 16;

/// Run `f` on each RGB pixel with its luma, a block at a time.
#[inline]
fn with_luma(data: &mut [u8], f: impl Fn(&mut [u8], u8)) {
    let mut chunks = data.chunks_exact_mut(3 * BLOCK);
    for block in &mut chunks {
        let mut y = [0u8; BLOCK];
        for (y, p) in y.iter_mut().zip(block.chunks_exact(3)) {
            *y = luma(p[0], p[1], p[2]);
        }
        for (p, &y) in block.chunks_exact_mut(3).zip(&y) {
            f(p, y);
        }
    }
    for p in chunks.into_remainder().chunks_exact_mut(3) {
        let y = luma(p[0], p[1], p[2]);
        f(p, y);
    }
}

/// One 256-entry table per image: the same work whatever the image size.
fn apply_lut(data: &mut [u8], f: impl Fn(u8) -> u8) {
    let mut lut = [0u8; 256];
    for (v, slot) in lut.iter_mut().enumerate() {
        *slot = f(v as u8);
    }
    data.iter_mut().for_each(|v| *v = lut[*v as usize]);
}

/// torchvision `adjust_brightness`: blend with black.
pub fn brightness(data: &mut [u8], factor: f64) {
    let f = factor as f32;
    apply_lut(data, |v| blend(0.0, v as f32, f));
}

/// torchvision `adjust_contrast`: blend with the image's mean gray level.
pub fn contrast(data: &mut [u8], channels: usize, factor: f64) {
    let n = data.len() / channels.max(1);
    if n == 0 {
        return;
    }
    let sum: u64 = if channels == 3 {
        let mut chunks = data.chunks_exact(3 * BLOCK);
        let blocks: u64 = (&mut chunks)
            .map(|b| {
                b.chunks_exact(3)
                    .map(|p| luma(p[0], p[1], p[2]) as u32)
                    .sum::<u32>() as u64
            })
            .sum();
        blocks
            + chunks
                .remainder()
                .chunks_exact(3)
                .map(|p| luma(p[0], p[1], p[2]) as u64)
                .sum::<u64>()
    } else {
        data.iter()
            .step_by(channels.max(1))
            .map(|&v| v as u64)
            .sum()
    };
    // PIL: int(mean + 0.5).
    let mean = (sum as f64 / n as f64 + 0.5).floor() as f32;
    let f = factor as f32;
    apply_lut(data, |v| blend(mean, v as f32, f));
}

/// torchvision `adjust_saturation`: blend with the pixel's own gray. A no-op on
/// gray images, as in torchvision.
pub fn saturation(data: &mut [u8], channels: usize, factor: f64) {
    if channels != 3 {
        return;
    }
    let f = factor as f32;
    with_luma(data, |p, g| {
        for v in p.iter_mut() {
            *v = blend(g as f32, *v as f32, f);
        }
    });
}

/// torchvision `adjust_hue`: rotate the hue by `shift` turns. A no-op on gray images.
///
/// The HSV round trip is done on the 0..255 scale, where v = max and s * v = max - min,
/// so it needs one division per pixel and no conversion to and from [0, 1].
pub fn hue(data: &mut [u8], channels: usize, shift: f64) {
    if channels != 3 || shift == 0.0 {
        return;
    }
    let shift6 = (shift * 6.0) as f32;
    for p in data.chunks_exact_mut(3) {
        let (r, g, b) = (p[0] as f32, p[1] as f32, p[2] as f32);
        let max = r.max(g).max(b);
        let delta = max - r.min(g).min(b);
        if delta == 0.0 {
            // Gray pixels have no hue to rotate.
            continue;
        }
        let inv = 1.0 / delta;
        // Hue in sixths of a turn, in [-1, 5) before the shift.
        let h6 = if max == r {
            (g - b) * inv
        } else if max == g {
            (b - r) * inv + 2.0
        } else {
            (r - g) * inv + 4.0
        } + shift6;
        let h6 = h6 - 6.0 * (h6 * (1.0 / 6.0)).floor();
        let sector = h6.floor();
        let f = h6 - sector;
        let (v, lo) = (max, max - delta);
        let (falling, rising) = (max - delta * f, max - delta * (1.0 - f));
        let (r, g, b) = match sector as i32 {
            0 => (v, rising, lo),
            1 => (falling, v, lo),
            2 => (lo, v, rising),
            3 => (lo, falling, v),
            4 => (rising, lo, v),
            _ => (v, lo, falling),
        };
        p[0] = to_u8(r);
        p[1] = to_u8(g);
        p[2] = to_u8(b);
    }
}

#[inline]
fn to_u8(x: f32) -> u8 {
    (x + 0.5).clamp(0.0, 255.0) as u8
}

/// `Grayscale(3)` when `p` >= 1 (no draw), else `RandomGrayscale(p)` (one draw).
pub fn random_grayscale(rng: &mut SampleRng, p: f64, data: &mut [u8], channels: usize) {
    let hit = p >= 1.0 || rng.chance(p);
    if hit {
        grayscale(data, channels);
    }
}

/// torchvision `Grayscale(3)`: every channel becomes PIL's luma. A no-op on 1 channel.
pub fn grayscale(data: &mut [u8], channels: usize) {
    if channels != 3 {
        return;
    }
    with_luma(data, |p, g| p.fill(g));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_factors_change_nothing() {
        let orig: Vec<u8> = (0..=255u8).cycle().take(3 * 300).collect();
        let mut d = orig.clone();
        brightness(&mut d, 1.0);
        contrast(&mut d, 3, 1.0);
        saturation(&mut d, 3, 1.0);
        assert_eq!(d, orig);
    }

    #[test]
    fn hue_round_trip_is_near_identity() {
        let orig: Vec<u8> = (0..3 * 500).map(|i| ((i * 37) % 256) as u8).collect();
        let mut d = orig.clone();
        hue(&mut d, 3, 1e-7);
        for (a, b) in d.iter().zip(&orig) {
            assert!((*a as i32 - *b as i32).abs() <= 1);
        }
        // Half a turn maps red to cyan.
        let mut red = vec![255, 0, 0];
        hue(&mut red, 3, 0.5);
        assert_eq!(red, [0, 255, 255]);
    }

    /// Textbook HSV on [0, 1] (Python's colorsys), as a reference for the fast path.
    fn hue_reference(p: [u8; 3], shift: f64) -> [u8; 3] {
        let [r, g, b] = p.map(|v| v as f64 / 255.0);
        let (max, min) = (r.max(g).max(b), r.min(g).min(b));
        if max == min {
            return p;
        }
        let d = max - min;
        let h = if max == r {
            ((g - b) / d).rem_euclid(6.0)
        } else if max == g {
            (b - r) / d + 2.0
        } else {
            (r - g) / d + 4.0
        } / 6.0;
        let (h, s, v) = ((h + shift).rem_euclid(1.0), d / max, max);
        let i = (h * 6.0).floor();
        let f = h * 6.0 - i;
        let (pp, q, t) = (v * (1.0 - s), v * (1.0 - s * f), v * (1.0 - s * (1.0 - f)));
        let (r, g, b) = match i as i32 % 6 {
            0 => (v, t, pp),
            1 => (q, v, pp),
            2 => (pp, v, t),
            3 => (pp, q, v),
            4 => (t, pp, v),
            _ => (v, pp, q),
        };
        [r, g, b].map(|x| (x * 255.0).round() as u8)
    }

    #[test]
    fn hue_matches_textbook_hsv() {
        let mut rng = SampleRng::from_seed(11);
        for _ in 0..20_000 {
            let px = [0, 1, 2].map(|_| rng.below(256) as u8);
            let shift = rng.uniform(-0.5, 0.5);
            let mut got = px.to_vec();
            hue(&mut got, 3, shift);
            let want = hue_reference(px, shift);
            for k in 0..3 {
                assert!(
                    got[k].abs_diff(want[k]) <= 1,
                    "{px:?} {shift}: {got:?} vs {want:?}"
                );
            }
        }
    }

    #[test]
    fn zero_saturation_is_gray() {
        let mut d = vec![200, 10, 30, 5, 250, 90];
        let mut g = d.clone();
        saturation(&mut d, 3, 0.0);
        grayscale(&mut g, 3);
        assert_eq!(d, g);
        assert!(d.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    }

    #[test]
    fn zero_contrast_is_mean() {
        let mut d = vec![0, 0, 0, 255, 255, 255];
        contrast(&mut d, 3, 0.0);
        assert_eq!(d, [128; 6]);
    }

    #[test]
    fn disabled_parts_draw_nothing() {
        let j = Jitter {
            brightness: 0.4,
            ..Default::default()
        };
        let mut a = SampleRng::from_seed(3);
        let d = j.draw(&mut a);
        assert!(d.brightness.is_some() && d.contrast.is_none() && d.hue.is_none());
        let f = d.brightness.unwrap_or(0.0);
        assert!((0.6..1.4).contains(&f));
        let mut sorted = d.order;
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3]);
    }

    /// The PIL blend with its branches, as it was before the clamp became a min and
    /// a max: the reference for the branchless form.
    fn branchy_blend(a: f32, b: f32, alpha: f32) -> u8 {
        let t = a + alpha * (b - a);
        if t <= 0.0 {
            0
        } else if t >= 255.0 {
            255
        } else {
            t as u8
        }
    }

    #[test]
    fn block_forms_equal_the_per_pixel_ones() {
        let mut rng = SampleRng::from_seed(5);
        for n in [0, 1, 15, 16, 17, 100, 50 * 37] {
            let img: Vec<u8> = (0..3 * n).map(|_| rng.below(256) as u8).collect();
            for f in [0.0, 0.3, 0.6, 1.0, 1.4, 2.0] {
                let mut got = img.clone();
                saturation(&mut got, 3, f);
                let mut want = img.clone();
                for p in want.chunks_exact_mut(3) {
                    let g = luma(p[0], p[1], p[2]) as f32;
                    for v in p.iter_mut() {
                        *v = branchy_blend(g, *v as f32, f as f32);
                    }
                }
                assert_eq!(got, want, "saturation {f} on {n} pixels");
                if n > 0 {
                    let mut got = img.clone();
                    contrast(&mut got, 3, f);
                    let sum: u64 = img
                        .chunks_exact(3)
                        .map(|p| luma(p[0], p[1], p[2]) as u64)
                        .sum();
                    let mean = (sum as f64 / n as f64 + 0.5).floor() as f32;
                    let want: Vec<u8> = img
                        .iter()
                        .map(|&v| branchy_blend(mean, v as f32, f as f32))
                        .collect();
                    assert_eq!(got, want, "contrast {f} on {n} pixels");
                }
            }
            let mut got = img.clone();
            grayscale(&mut got, 3);
            for (g, p) in got.chunks_exact(3).zip(img.chunks_exact(3)) {
                assert_eq!(g, [luma(p[0], p[1], p[2]); 3]);
            }
        }
        for a in 0..=255u8 {
            for b in (0..=255u8).step_by(5) {
                for alpha in [-0.5f32, 0.0, 0.25, 0.999, 1.0, 1.5, 3.0] {
                    let (a, b) = (a as f32, b as f32);
                    assert_eq!(blend(a, b, alpha), branchy_blend(a, b, alpha));
                }
            }
        }
    }
}
