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

use super::{cpu, lanes};

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
#[inline(always)]
fn clamp_trunc(x: f32) -> u8 {
    lanes::trunc_u8(x.clamp(0.0, 255.0))
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
///
/// For an integer `v`, `v >= t` exactly when `v >= ceil(t)`, so the test is one
/// integer compare the compiler turns into vector lanes (no table, no branch).
pub fn solarize(data: &mut [u8], threshold: f64) {
    let t = (threshold as f32).ceil();
    // NaN compares false everywhere: nothing is inverted, as in the float compare.
    if t.is_nan() || t > 255.0 {
        return;
    }
    let from = t.max(0.0) as u8;
    data.iter_mut()
        .for_each(|v| *v = if *v >= from { 255 - *v } else { *v });
}

/// `255 - image` for every sample (`F.invert`).
pub fn invert(data: &mut [u8]) {
    data.iter_mut().for_each(|v| *v = 255 - *v);
}

/// torchvision's `equalize_image`, per channel: `lut[0] = 0`, `lut[k] =
/// (cum_hist[k - 1] + step / 2) / step` clamped to 255 with `step = (pixels - count of
/// the channel's largest value) / 255` (integer divisions); a channel with `step == 0`
/// is left as it is.
///
/// One pass counts every channel and one pass maps every channel, instead of a
/// strided pass per channel for each.
pub fn equalize(data: &mut [u8], c: usize) {
    let c = c.max(1);
    let n = data.len() / c;
    let hists = histograms(data, c);
    let mut luts = identity_luts(c);
    let mut any = false;
    for (hist, lut) in hists.iter().zip(luts.iter_mut()) {
        let top = hist.iter().rposition(|&k| k > 0).unwrap_or(0);
        let step = (n as u64 - hist[top] as u64) / 255;
        if step == 0 {
            continue;
        }
        any = true;
        let mut cum = 0u64;
        lut[0] = 0;
        for k in 1..256 {
            cum += hist[k - 1] as u64;
            lut[k] = ((cum + step / 2) / step).min(255) as u8;
        }
    }
    if any {
        apply_channel_luts(data, &luts);
    }
}

/// One histogram per channel of an HWC image (at most 4 channels). Counting into
/// two tables per channel, alternately, halves the stalls where neighbouring samples
/// of the same value update the same counter.
fn histograms(data: &[u8], c: usize) -> Vec<[u32; 256]> {
    let mut h = vec![[0u32; 256]; 2 * c];
    let pair = 2 * c;
    let mut chunks = data.chunks_exact(pair);
    for px in &mut chunks {
        for (k, &v) in px.iter().enumerate() {
            h[k][v as usize] += 1;
        }
    }
    for (k, &v) in chunks.remainder().iter().enumerate() {
        h[k][v as usize] += 1;
    }
    // Table k counts channel k % c.
    let (first, second) = h.split_at_mut(c);
    for (a, b) in first.iter_mut().zip(second.iter()) {
        for (x, y) in a.iter_mut().zip(b.iter()) {
            *x += *y;
        }
    }
    h.truncate(c);
    h
}

/// A table per channel that maps every value to itself.
fn identity_luts(c: usize) -> Vec<[u8; 256]> {
    vec![lut_of(|v| v); c]
}

/// Map every sample through its channel's table, in one pass.
fn apply_channel_luts(data: &mut [u8], luts: &[[u8; 256]]) {
    match luts {
        [one] => apply_lut(data, one),
        [r, g, b] => data.chunks_exact_mut(3).for_each(|p| {
            p[0] = r[p[0] as usize];
            p[1] = g[p[1] as usize];
            p[2] = b[p[2] as usize];
        }),
        _ => {
            let c = luts.len();
            data.chunks_exact_mut(c).for_each(|p| {
                for (v, lut) in p.iter_mut().zip(luts) {
                    *v = lut[*v as usize];
                }
            })
        }
    }
}

/// Each channel's (min, max) of an HWC image (at most 4 channels), in one pass. The
/// running extremes are kept for 48 samples at a time (a multiple of 1, 2, 3 and 4
/// channels, and of a vector's width), so the loop runs in vector lanes.
fn channel_extremes(data: &[u8], c: usize) -> Vec<(u8, u8)> {
    const SPAN: usize = 48;
    if SPAN % c != 0 {
        return (0..c)
            .map(|ch| {
                let lane = || data.iter().skip(ch).step_by(c).copied();
                (lane().min().unwrap_or(255), lane().max().unwrap_or(0))
            })
            .collect();
    }
    let (mut lo, mut hi) = ([255u8; SPAN], [0u8; SPAN]);
    let mut chunks = data.chunks_exact(SPAN);
    for block in &mut chunks {
        for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(block) {
            *l = (*l).min(v);
            *h = (*h).max(v);
        }
    }
    for (k, &v) in chunks.remainder().iter().enumerate() {
        lo[k] = lo[k].min(v);
        hi[k] = hi[k].max(v);
    }
    (0..c)
        .map(|ch| {
            let lanes = (ch..SPAN).step_by(c);
            let l = lanes.clone().map(|k| lo[k]).min().unwrap_or(255);
            let h = lanes.map(|k| hi[k]).max().unwrap_or(0);
            (l, h)
        })
        .collect()
}

/// torchvision's `autocontrast_image`, per channel, in float32:
/// `(v - min) / ((max - min) * (1 / 255))`, clamped and truncated; a flat channel is
/// left as it is. One pass finds every channel's range, one maps them.
pub fn autocontrast(data: &mut [u8], c: usize) {
    let c = c.max(1);
    let mut luts = identity_luts(c);
    let mut any = false;
    for ((lo, hi), lut) in channel_extremes(data, c).into_iter().zip(luts.iter_mut()) {
        if lo >= hi {
            continue;
        }
        any = true;
        let inv_scale = (hi - lo) as f32 * (1.0f64 / 255.0) as f32;
        let min = lo as f32;
        *lut = lut_of(|v| clamp_trunc((v as f32 - min) / inv_scale));
    }
    if any {
        apply_channel_luts(data, &luts);
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
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    (a as f64 * b as f64 + c as f64) as f32
}

/// torchvision's `_rgb_to_grayscale_image` then `floor_()`: float32
/// `r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114)`. The sum is never
/// negative, so truncating through an integer (signed, see [`clamp_trunc`]) is the
/// floor (`f32::floor` is a libm
/// call on CPUs without SSE4.1, and keeps the loops around it out of vector lanes).
#[inline(always)]
fn gray_floor(r: u8, g: u8, b: u8) -> f32 {
    lanes::floor_small(fma(
        b as f32,
        0.114,
        fma(g as f32, 0.587, r as f32 * 0.2989),
    ))
}

/// torchvision's `_blend(image, other, ratio)` for one sample:
/// `image.mul(ratio).add_(other, alpha=1 - ratio)`, clamped, truncated.
#[inline(always)]
fn blend(v: u8, ratio: f32, other: f32, rest: f32) -> u8 {
    clamp_trunc(fma(other, rest, v as f32 * ratio))
}

/// Pixels per block in the RGB loops below: a block's grays are computed into an
/// array first, so that each inner loop has a fixed trip count and no dependence
/// between pixels, which the compiler runs in vector lanes.
const BLOCK: usize = 16;

/// The floored gray of every pixel of an RGB block: the channels are split into
/// arrays first, so that the arithmetic runs on whole vectors.
#[inline(always)]
fn block_grays(block: &[u8]) -> [f32; BLOCK] {
    let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
    for (i, p) in block.chunks_exact(3).take(BLOCK).enumerate() {
        (r[i], g[i], b[i]) = (p[0] as f32, p[1] as f32, p[2] as f32);
    }
    let mut gray = [0f32; BLOCK];
    for i in 0..BLOCK {
        gray[i] = lanes::floor_small(fma(b[i], 0.114, fma(g[i], 0.587, r[i] * 0.2989)));
    }
    gray
}

/// `F.adjust_contrast`: blend with the mean of the floored gray (of the image itself
/// when it is not RGB).
///
/// The floored grays are whole numbers, so their sum is taken in integers: the same
/// value torchvision's float sum reaches (it is exact in f64 for any image this
/// crate decodes), in any order.
pub fn contrast(data: &mut [u8], c: usize, factor: f64) {
    let c = c.max(1);
    if data.is_empty() {
        return;
    }
    let mean = if c == 3 {
        let mut chunks = data.chunks_exact(3 * BLOCK);
        let mut sum: u64 = (&mut chunks)
            // At most 16 x 255 per block: the float sum is exact, in any order.
            .map(|block| block_grays(block).iter().sum::<f32>() as u64)
            .sum();
        sum += chunks
            .remainder()
            .chunks_exact(3)
            .map(|p| gray_floor(p[0], p[1], p[2]) as u64)
            .sum::<u64>();
        sum as f64 / (data.len() / 3) as f64
    } else {
        data.iter().map(|&v| v as u64).sum::<u64>() as f64 / data.len() as f64
    } as f32;
    let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
    apply_lut(data, &lut_of(|v| blend(v, ratio, mean, rest)));
}

/// `F.adjust_saturation`: each pixel blended with its own floored gray; nothing on
/// images that are not RGB.
pub fn saturation(data: &mut [u8], c: usize, factor: f64) {
    saturation_with(data, c, factor, cpu::avx2());
}

/// [`saturation`], through its AVX2 build when `avx2` is set (and the CPU has it).
fn saturation_with(data: &mut [u8], c: usize, factor: f64, avx2: bool) {
    if c != 3 {
        return;
    }
    let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
    #[cfg(target_arch = "x86_64")]
    if avx2 && cpu::avx2() {
        // SAFETY: the CPU has AVX2 (checked just above), all `saturation_avx2` needs.
        unsafe { saturation_avx2(data, ratio, rest) };
        return;
    }
    let _ = avx2;
    saturation_rgb(data, ratio, rest);
}

/// [`saturation_rgb`] compiled with AVX2 (the same bytes, see the `cpu` module).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn saturation_avx2(data: &mut [u8], ratio: f32, rest: f32) {
    saturation_rgb(data, ratio, rest);
}

/// The saturation blend of an RGB image, one pass: each block's grays, then its
/// samples blended with them.
#[inline(always)]
fn saturation_rgb(data: &mut [u8], ratio: f32, rest: f32) {
    let mut chunks = data.chunks_exact_mut(3 * BLOCK);
    for block in &mut chunks {
        let gray = block_grays(block);
        // Each pixel's gray beside each of its samples: one flat loop of blends.
        let mut other = [0f32; 3 * BLOCK];
        for (o, &g) in other.chunks_exact_mut(3).zip(&gray) {
            o.fill(g);
        }
        for (v, &g) in block.iter_mut().zip(&other) {
            *v = blend(*v, ratio, g, rest);
        }
    }
    for p in chunks.into_remainder().chunks_exact_mut(3) {
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
/// Each row's nine neighbours are slices of one length, so the inner loop has no
/// bounds checks and runs in vector lanes.
pub fn sharpness(data: &mut [u8], w: usize, h: usize, c: usize, factor: f64, tmp: &mut Vec<u8>) {
    if w <= 2 || h <= 2 || data.len() != w * h * c {
        return;
    }
    tmp.clear();
    tmp.extend_from_slice(data);
    let src = tmp.as_slice();
    let alpha = (1.0 - factor) as f32;
    let row = w * c;
    // The samples of a row that have a left and a right neighbour.
    let n = row - 2 * c;
    for i in 1..h - 1 {
        let taps = |r: usize, dx: usize| &src[r * row + dx..][..n];
        let (u0, u1, u2) = (taps(i - 1, 0), taps(i - 1, c), taps(i - 1, 2 * c));
        let (m0, m1, m2) = (taps(i, 0), taps(i, c), taps(i, 2 * c));
        let (d0, d1, d2) = (taps(i + 1, 0), taps(i + 1, c), taps(i + 1, 2 * c));
        let out = &mut data[i * row + c..][..n];
        for k in 0..n {
            let v = m1[k] as i32;
            let ring = u0[k] as i32
                + u1[k] as i32
                + u2[k] as i32
                + m0[k] as i32
                + m2[k] as i32
                + d0[k] as i32
                + d1[k] as i32
                + d2[k] as i32;
            // (2 s + 13) / 26 is odd over even, at least 1/26 from a whole number,
            // far more than float32's error on these small values: its float floor is
            // the integer quotient, without an integer division per sample.
            let blur = lanes::floor_small(((ring + 5 * v) * 2 + 13) as f32 * (1.0 / 26.0));
            let vf = v as f32;
            out[k] = clamp_trunc(fma(blur - vf, alpha, vf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SampleRng;

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

    /// The scalar forms these ops had before they were rewritten for vector lanes,
    /// kept verbatim as the reference the fast forms must equal byte for byte.
    mod scalar {
        use super::super::{fma, lut_of};

        fn clamp_trunc(x: f32) -> u8 {
            x.clamp(0.0, 255.0) as u8
        }

        fn blend(v: u8, ratio: f32, other: f32, rest: f32) -> u8 {
            clamp_trunc(fma(other, rest, v as f32 * ratio))
        }

        fn gray_floor(r: u8, g: u8, b: u8) -> f32 {
            fma(b as f32, 0.114, fma(g as f32, 0.587, r as f32 * 0.2989)).floor()
        }

        pub fn solarize(data: &mut [u8], threshold: f64) {
            let t = threshold as f32;
            let lut = lut_of(|v| if v as f32 >= t { 255 - v } else { v });
            data.iter_mut().for_each(|v| *v = lut[*v as usize]);
        }

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
            let lut = lut_of(|v| blend(v, ratio, mean, rest));
            data.iter_mut().for_each(|v| *v = lut[*v as usize]);
        }

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

        pub fn sharpness(data: &mut [u8], w: usize, h: usize, c: usize, factor: f64) {
            if w <= 2 || h <= 2 || data.len() != w * h * c {
                return;
            }
            let src = data.to_vec();
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
    }

    /// Images of every channel count, odd sizes (so the blocks leave a remainder),
    /// smooth and noisy content, flat and saturated patches.
    fn test_images() -> Vec<(usize, usize, usize, Vec<u8>)> {
        let mut rng = SampleRng::from_seed(44);
        let mut out = Vec::new();
        for &(w, h) in &[(1, 1), (3, 3), (17, 5), (37, 45), (64, 48)] {
            for c in 1..=4 {
                let n = w * h * c;
                let noisy = (0..n).map(|_| rng.below(256) as u8).collect();
                let smooth = (0..n)
                    .map(|i| (((i / c) % w) * 3 + (i / (w * c)) * 2 + (i % c) * 40) as u8)
                    .collect();
                let narrow = (0..n).map(|_| 90 + rng.below(12) as u8).collect();
                let patches = (0..n)
                    .map(|i| match (i / (7 * c)) % 3 {
                        0 => 0,
                        1 => 255,
                        _ => rng.below(256) as u8,
                    })
                    .collect();
                for data in [noisy, smooth, narrow, patches] {
                    out.push((w, h, c, data));
                }
            }
        }
        out
    }

    #[test]
    fn vector_forms_equal_the_scalar_ones() {
        let factors = [0.0, 0.1, 0.37, 0.5, 0.9, 1.0, 1.3, 1.7, 1.9, 2.0];
        let thresholds = [
            -1.0, 0.0, 0.5, 64.5, 127.9, 128.0, 200.0, 254.5, 255.0, 256.0,
        ];
        for (w, h, c, img) in test_images() {
            let check = |name: &str, fast: &dyn Fn(&mut [u8]), slow: &dyn Fn(&mut [u8])| {
                let (mut a, mut b) = (img.clone(), img.clone());
                fast(&mut a);
                slow(&mut b);
                assert_eq!(a, b, "{name} on {w}x{h}x{c}");
            };
            check("equalize", &|d| equalize(d, c), &|d| scalar::equalize(d, c));
            check("autocontrast", &|d| autocontrast(d, c), &|d| {
                scalar::autocontrast(d, c)
            });
            for t in thresholds {
                check("solarize", &|d| solarize(d, t), &|d| scalar::solarize(d, t));
            }
            for f in factors {
                check("contrast", &|d| contrast(d, c, f), &|d| {
                    scalar::contrast(d, c, f)
                });
                check("saturation", &|d| saturation(d, c, f), &|d| {
                    scalar::saturation(d, c, f)
                });
                check(
                    "saturation (baseline build)",
                    &|d| saturation_with(d, c, f, false),
                    &|d| scalar::saturation(d, c, f),
                );
                check(
                    "sharpness",
                    &|d| sharpness(d, w, h, c, f, &mut Vec::new()),
                    &|d| scalar::sharpness(d, w, h, c, f),
                );
            }
        }
    }
}
