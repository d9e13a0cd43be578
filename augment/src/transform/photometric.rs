//! The photometric ops of the augmentation policies, in place, as torchvision's
//! `transforms.v2.functional` computes them on uint8 tensors: posterize, solarize,
//! equalize, autocontrast, invert, brightness, contrast, saturation ("color") and
//! sharpness.
//!
//! These follow the *tensor* kernels (float32 arithmetic, results truncated towards
//! zero by `.to(uint8)`), which is what RandAugment and friends run in a tensor
//! pipeline. They are not the `jitter` transform's PIL `ImageEnhance` formulas (which
//! stay as they are): brightness agrees, but torchvision's tensor contrast and
//! saturation use the truncated gray `0.2989 R + 0.587 G + 0.114 B` where PIL uses its
//! rounded fixed-point luma, so the two can differ by one grey level.
//!
//! Images of 3 channels are RGB; on other channel counts saturation does nothing and
//! contrast pivots on the mean of all samples (torchvision's 1-channel case).

/// One photometric op with its magnitude.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Adjust {
    /// `F.posterize(img, bits)`: keep the `bits` high bits (0..=8).
    Posterize(u8),
    /// `F.solarize(img, threshold)`: invert samples `>= threshold` (0..=255).
    Solarize(f64),
    /// `F.equalize(img)`: per-channel histogram equalisation (PIL's scheme).
    Equalize,
    /// `F.autocontrast(img)`: stretch each channel's min..max to 0..255.
    AutoContrast,
    /// `F.invert(img)`: 255 - v.
    Invert,
    /// `F.adjust_brightness(img, f)`, f >= 0.
    Brightness(f64),
    /// `F.adjust_contrast(img, f)`, f >= 0.
    Contrast(f64),
    /// `F.adjust_saturation(img, f)`, f >= 0.
    Color(f64),
    /// `F.adjust_sharpness(img, f)`, f >= 0.
    Sharpness(f64),
}

impl Adjust {
    /// Apply to an HWC image of `w` x `h` x `c`; `tmp` is scratch space (sharpness
    /// reads a copy of the image).
    pub fn apply(&self, data: &mut [u8], w: usize, h: usize, c: usize, tmp: &mut Vec<u8>) {
        match *self {
            Adjust::Posterize(bits) => posterize(data, bits),
            Adjust::Solarize(t) => solarize(data, t),
            Adjust::Equalize => equalize(data, c),
            Adjust::AutoContrast => autocontrast(data, c),
            Adjust::Invert => invert(data),
            Adjust::Brightness(f) => brightness(data, f),
            Adjust::Contrast(f) => contrast(data, c, f),
            Adjust::Color(f) => saturation(data, c, f),
            Adjust::Sharpness(f) => sharpness(data, w, h, c, f, tmp),
        }
    }
}

fn apply_lut(data: &mut [u8], lut: &[u8; 256]) {
    data.iter_mut().for_each(|v| *v = lut[*v as usize]);
}

fn lut_of(f: impl Fn(u8) -> u8) -> [u8; 256] {
    let mut lut = [0u8; 256];
    for (v, slot) in lut.iter_mut().enumerate() {
        *slot = f(v as u8);
    }
    lut
}

/// float32 -> uint8 as `clamp_(0, 255).to(torch.uint8)`: clamped, then truncated.
#[inline]
fn clamp_trunc(x: f32) -> u8 {
    x.clamp(0.0, 255.0) as u8
}

/// `image & mask` with the `bits` high bits set; 8 or more bits change nothing.
pub fn posterize(data: &mut [u8], bits: u8) {
    if bits >= 8 {
        return;
    }
    let mask = (((1u16 << bits) - 1) << (8 - bits)) as u8;
    data.iter_mut().for_each(|v| *v &= mask);
}

/// `where(image >= threshold, 255 - image, image)`, compared as floats.
pub fn solarize(data: &mut [u8], threshold: f64) {
    let t = threshold as f32;
    let lut = lut_of(|v| if v as f32 >= t { 255 - v } else { v });
    apply_lut(data, &lut);
}

/// `255 - image` for every sample (`F.invert`).
pub fn invert(data: &mut [u8]) {
    data.iter_mut().for_each(|v| *v = 255 - *v);
}

/// torchvision's `equalize_image`, per channel: `lut[0] = 0`, `lut[k] =
/// (cum_hist[k - 1] + step / 2) / step` clamped to 255 with `step = (pixels - count of
/// the channel's largest value) / 255` (integer divisions); a channel with `step == 0`
/// is left as it is.
pub fn equalize(data: &mut [u8], c: usize) {
    let c = c.max(1);
    let n = data.len() / c;
    for ch in 0..c {
        let mut hist = [0u64; 256];
        data.iter()
            .skip(ch)
            .step_by(c)
            .for_each(|&v| hist[v as usize] += 1);
        let top = hist.iter().rposition(|&k| k > 0).unwrap_or(0);
        let step = (n as u64 - hist[top]) / 255;
        if step == 0 {
            continue;
        }
        let mut lut = [0u8; 256];
        let mut cum = 0u64;
        for k in 1..256 {
            cum += hist[k - 1];
            lut[k] = ((cum + step / 2) / step).min(255) as u8;
        }
        data.iter_mut()
            .skip(ch)
            .step_by(c)
            .for_each(|v| *v = lut[*v as usize]);
    }
}

/// torchvision's `autocontrast_image`, per channel, in float32:
/// `(v - min) / ((max - min) * (1 / 255))`, clamped and truncated; a flat channel is
/// left as it is.
pub fn autocontrast(data: &mut [u8], c: usize) {
    let c = c.max(1);
    for ch in 0..c {
        let (mut lo, mut hi) = (255u8, 0u8);
        data.iter().skip(ch).step_by(c).for_each(|&v| {
            lo = lo.min(v);
            hi = hi.max(v);
        });
        if lo >= hi {
            continue;
        }
        let inv_scale = (hi - lo) as f32 * (1.0f64 / 255.0) as f32;
        let min = lo as f32;
        let lut = lut_of(|v| clamp_trunc((v as f32 - min) / inv_scale));
        data.iter_mut()
            .skip(ch)
            .step_by(c)
            .for_each(|v| *v = lut[*v as usize]);
    }
}

/// `image.mul(f).clamp_(0, 255).to(uint8)`.
pub fn brightness(data: &mut [u8], factor: f64) {
    let f = factor as f32;
    apply_lut(data, &lut_of(|v| clamp_trunc(v as f32 * f)));
}

/// `a * b + c` rounded once to float32, as torch's `add_(x, alpha=...)` computes it (a
/// fused multiply-add on CPUs that have one). The product of two float32 is exact in
/// f64, so only the sum is rounded twice (to f64, then to f32), which gives the fused
/// result except when the f64 sum lands exactly half-way between two float32 values;
/// unlike `f32::mul_add` this needs no libm call where FMA is not compiled in.
#[inline]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    (a as f64 * b as f64 + c as f64) as f32
}

/// torchvision's `_rgb_to_grayscale_image` then `floor_()`: float32
/// `r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114)`.
#[inline]
fn gray_floor(r: u8, g: u8, b: u8) -> f32 {
    fma(b as f32, 0.114, fma(g as f32, 0.587, r as f32 * 0.2989)).floor()
}

/// torchvision's `_blend(image, other, ratio)` for one sample:
/// `image.mul(ratio).add_(other, alpha=1 - ratio)`, clamped, truncated.
#[inline]
fn blend(v: u8, ratio: f32, other: f32, rest: f32) -> u8 {
    clamp_trunc(fma(other, rest, v as f32 * ratio))
}

/// `F.adjust_contrast`: blend with the mean of the floored gray (of the image itself
/// when it is not RGB).
pub fn contrast(data: &mut [u8], c: usize, factor: f64) {
    let c = c.max(1);
    if data.is_empty() {
        return;
    }
    let mean = if c == 3 {
        let sum: f64 = data
            .chunks_exact(3)
            .map(|p| gray_floor(p[0], p[1], p[2]) as f64)
            .sum();
        sum / (data.len() / 3) as f64
    } else {
        data.iter().map(|&v| v as f64).sum::<f64>() / data.len() as f64
    } as f32;
    let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
    apply_lut(data, &lut_of(|v| blend(v, ratio, mean, rest)));
}

/// `F.adjust_saturation`: each pixel blended with its own floored gray; nothing on
/// images that are not RGB.
pub fn saturation(data: &mut [u8], c: usize, factor: f64) {
    if c != 3 {
        return;
    }
    let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
    for p in data.chunks_exact_mut(3) {
        let gray = gray_floor(p[0], p[1], p[2]);
        for v in p.iter_mut() {
            *v = blend(*v, ratio, gray, rest);
        }
    }
}

/// `F.adjust_sharpness`: inside a one-pixel border, `v + (1 - f) * (blur - v)` in
/// float32 (one rounding, as `add_(.., alpha=)`), where `blur` is the 3x3 kernel `[1 1 1; 1 5 1; 1 1 1] / 13` rounded to an
/// integer; the border keeps its pixels, and images of at most 2 rows or columns are
/// left as they are.
///
/// The blur is computed in integers: `(sum + 5 v) / 13` is never within 1/26 of a
/// half, so rounding the exact quotient equals rounding torchvision's float32 one.
pub fn sharpness(data: &mut [u8], w: usize, h: usize, c: usize, factor: f64, tmp: &mut Vec<u8>) {
    if w <= 2 || h <= 2 || data.len() != w * h * c {
        return;
    }
    tmp.clear();
    tmp.extend_from_slice(data);
    let src = tmp.as_slice();
    let alpha = (1.0 - factor) as f32;
    let row = w * c;
    for i in 1..h - 1 {
        let (up, mid, down) = (
            &src[(i - 1) * row..],
            &src[i * row..],
            &src[(i + 1) * row..],
        );
        let out = &mut data[i * row..(i + 1) * row];
        for k in c..row - c {
            let v = mid[k] as u32;
            let ring = up[k - c] as u32
                + up[k] as u32
                + up[k + c] as u32
                + mid[k - c] as u32
                + mid[k + c] as u32
                + down[k - c] as u32
                + down[k] as u32
                + down[k + c] as u32;
            let blur = ((ring + 5 * v) * 2 + 13) / 26;
            let vf = v as f32;
            out[k] = clamp_trunc(fma(blur as f32 - vf, alpha, vf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posterize_keeps_high_bits() {
        let mut d = vec![0b1011_0111, 255, 0];
        posterize(&mut d, 3);
        assert_eq!(d, [0b1010_0000, 0b1110_0000, 0]);
        let mut d = vec![123];
        posterize(&mut d, 8);
        assert_eq!(d, [123]);
        posterize(&mut d, 0);
        assert_eq!(d, [0]);
    }

    #[test]
    fn solarize_inverts_from_the_threshold() {
        let mut d = vec![0, 127, 128, 200, 255];
        solarize(&mut d, 128.0);
        assert_eq!(d, [0, 127, 127, 55, 0]);
        let mut d = vec![0, 255];
        solarize(&mut d, 0.0);
        assert_eq!(d, [255, 0]);
    }

    #[test]
    fn equalize_spreads_a_narrow_histogram_and_skips_a_flat_one() {
        let mut d: Vec<u8> = (0..1000).map(|i| 100 + (i % 20) as u8).collect();
        equalize(&mut d, 1);
        assert_eq!(*d.iter().min().unwrap(), 0);
        assert!(*d.iter().max().unwrap() >= 240);
        let mut flat = vec![77u8; 300];
        equalize(&mut flat, 3);
        assert!(flat.iter().all(|&v| v == 77));
    }

    #[test]
    fn autocontrast_stretches_each_channel() {
        let mut d = vec![10, 50, 0, 20, 60, 0, 30, 70, 0];
        autocontrast(&mut d, 3);
        // torchvision gives 254 for the maximum here: 20 / (20 * float32(1/255)) is
        // 254.99998 in float32, truncated.
        assert_eq!(d, [0, 0, 0, 127, 127, 0, 254, 254, 0]);
    }

    #[test]
    fn unit_factors_change_nothing() {
        let orig: Vec<u8> = (0..9 * 7 * 3).map(|i| (i * 37 % 256) as u8).collect();
        let mut d = orig.clone();
        let mut tmp = Vec::new();
        brightness(&mut d, 1.0);
        contrast(&mut d, 3, 1.0);
        saturation(&mut d, 3, 1.0);
        sharpness(&mut d, 9, 7, 3, 1.0, &mut tmp);
        assert_eq!(d, orig);
    }

    #[test]
    fn sharpness_zero_is_the_blur_inside_the_border() {
        let (w, h) = (5, 4);
        let orig: Vec<u8> = (0..w * h).map(|i| (i * 53 % 256) as u8).collect();
        let mut d = orig.clone();
        sharpness(&mut d, w, h, 1, 0.0, &mut Vec::new());
        for i in 0..h {
            for j in 0..w {
                let got = d[i * w + j];
                if i == 0 || j == 0 || i == h - 1 || j == w - 1 {
                    assert_eq!(got, orig[i * w + j]);
                    continue;
                }
                let mut s = 0.0;
                for di in 0..3 {
                    for dj in 0..3 {
                        let k = if di == 1 && dj == 1 { 5.0 } else { 1.0 };
                        s += k * orig[(i + di - 1) * w + j + dj - 1] as f64;
                    }
                }
                assert_eq!(got as f64, (s / 13.0).round());
            }
        }
    }
}
