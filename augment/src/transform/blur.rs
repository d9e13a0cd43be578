//! Gaussian blur as torchvision's `F.gaussian_blur(img, [k, k], [s, s])` on uint8
//! tensors: the kernel `softmax(-(x / s)^2)` over `x = linspace(-lim, lim, k)`,
//! `lim = (k - 1) / (2 sqrt 2)` (the normalised `exp(-d^2 / 2 s^2)` at integer
//! offsets d), reflect padding (the edge pixel is not repeated), float32
//! convolution, rounded half to even.
//!
//! torchvision convolves with the 2-D outer product; this runs the same kernel as two
//! 1-D passes (rows, then columns) in float32, which differs from it only in the last
//! bits of the sums, so an output can differ by 1 where a sum lands within about
//! 1e-5 of a half.

use super::affine::round_even;
use crate::SampleRng;

/// `blur:K:sigma=S` (or `sigma=LO-HI`, drawn per sample like `GaussianBlur`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blur {
    /// Odd kernel side.
    pub kernel: usize,
    /// Standard deviation; a range is drawn uniformly per sample (one draw), a single
    /// value (lo == hi) draws nothing.
    pub sigma: (f64, f64),
}

/// The largest kernel side accepted.
pub const MAX_KERNEL: usize = 255;

impl Blur {
    /// torchvision's default sigma for a kernel side: `k * 0.15 + 0.35`.
    pub fn default_sigma(kernel: usize) -> f64 {
        kernel as f64 * 0.15 + 0.35
    }

    /// The sigma for this sample.
    pub fn draw(&self, rng: &mut SampleRng) -> f64 {
        if self.sigma.0 == self.sigma.1 {
            self.sigma.0
        } else {
            rng.uniform(self.sigma.0, self.sigma.1)
        }
    }
}

/// The normalised 1-D kernel (float32 like torchvision's; computed in f64 first).
pub fn kernel1d(k: usize, sigma: f64) -> Vec<f32> {
    let half = (k as f64 - 1.0) * 0.5;
    let w: Vec<f64> = (0..k)
        .map(|i| {
            let d = i as f64 - half;
            (-0.5 * (d / sigma) * (d / sigma)).exp()
        })
        .collect();
    let sum: f64 = w.iter().sum();
    w.iter().map(|v| (v / sum) as f32).collect()
}

/// Index `i` (possibly outside `0..n`) reflected into it without repeating the edge:
/// -1 -> 1, n -> n - 2; repeated for offsets longer than the image (where torch's
/// reflect padding would refuse the input).
#[inline]
fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    (if m < n as isize { m } else { period - m }) as usize
}

/// Blur an HWC image in place. `tmp` holds the float32 row pass and one row of sums.
pub fn gaussian_blur(
    data: &mut [u8],
    w: usize,
    h: usize,
    c: usize,
    kernel: usize,
    sigma: f64,
    tmp: &mut Vec<f32>,
) {
    if kernel <= 1 || data.len() != w * h * c || data.is_empty() {
        return;
    }
    let kv = kernel1d(kernel, sigma);
    let r = (kernel / 2) as isize;
    let row = w * c;
    // Pass 1: along each row into `tmp`; source column offsets reflected once per
    // column, not per sample.
    tmp.clear();
    tmp.resize(w * h * c + row, 0.0);
    let (tmp, acc) = tmp.split_at_mut(w * h * c);
    let cols: Vec<usize> = (0..w as isize)
        .flat_map(|j| (-r..=r).map(move |d| reflect(j + d, w)))
        .collect();
    // Columns whose taps all lie inside the row need no reflection: for them the
    // pass is one multiply-add of a shifted row per tap, over contiguous samples
    // (vector lanes), adding the taps in the same order as the edge columns do.
    let inner = if w > 2 * r as usize {
        r as usize..w - r as usize
    } else {
        0..0
    };
    for i in 0..h {
        let src = &data[i * row..(i + 1) * row];
        let dst = &mut tmp[i * row..(i + 1) * row];
        for j in (0..w).filter(|j| !inner.contains(j)) {
            let taps = &cols[j * kernel..(j + 1) * kernel];
            for ch in 0..c {
                let mut s = 0.0f32;
                for (&t, &kw) in taps.iter().zip(&kv) {
                    s += kw * src[t * c + ch] as f32;
                }
                dst[j * c + ch] = s;
            }
        }
        if inner.is_empty() {
            continue;
        }
        let out = &mut dst[inner.start * c..inner.end * c];
        out.fill(0.0);
        let n = out.len();
        for (t, &kw) in kv.iter().enumerate() {
            let shifted = &src[(inner.start - r as usize + t) * c..][..n];
            for (o, &v) in out.iter_mut().zip(shifted) {
                *o += kw * v as f32;
            }
        }
    }
    // Pass 2: down each column, rounded back into `data`.
    for i in 0..h {
        acc.fill(0.0);
        for (d, &kw) in (-r..=r).zip(&kv) {
            let src = &tmp[reflect(i as isize + d, h) * row..][..row];
            for (a, &v) in acc.iter_mut().zip(src) {
                *a += kw * v;
            }
        }
        for (o, &a) in data[i * row..(i + 1) * row].iter_mut().zip(acc.iter()) {
            *o = round_even(a).clamp(0.0, 255.0) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_skips_the_edge() {
        let got: Vec<usize> = (-3..8).map(|i| reflect(i, 5)).collect();
        assert_eq!(got, [3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1]);
        assert_eq!(reflect(-7, 1), 0);
    }

    #[test]
    fn kernel_is_normalised_and_symmetric() {
        let k = kernel1d(7, 1.5);
        let s: f32 = k.iter().sum();
        assert!((s - 1.0).abs() < 1e-6);
        for i in 0..7 {
            assert_eq!(k[i], k[6 - i]);
        }
        assert!(k[3] > k[2] && k[2] > k[1]);
    }

    #[test]
    fn flat_images_stay_flat_and_blur_lowers_contrast() {
        let mut flat = vec![90u8; 10 * 8 * 3];
        gaussian_blur(&mut flat, 10, 8, 3, 5, 2.0, &mut Vec::new());
        assert!(flat.iter().all(|&v| v == 90));
        let mut stripes: Vec<u8> = (0..16 * 16)
            .map(|i| if i % 2 == 0 { 0 } else { 200 })
            .collect();
        gaussian_blur(&mut stripes, 16, 16, 1, 5, 3.0, &mut Vec::new());
        assert!(
            stripes.iter().all(|&v| (80..=120).contains(&v)),
            "{stripes:?}"
        );
    }

    /// The blur as it was before the contiguous inner pass (every column through the
    /// reflected taps, `round_ties_even`), the reference the fast form must equal.
    fn scalar_blur(data: &mut [u8], w: usize, h: usize, c: usize, kernel: usize, sigma: f64) {
        let kv = kernel1d(kernel, sigma);
        let r = (kernel / 2) as isize;
        let row = w * c;
        let mut tmp = vec![0.0f32; w * h * c];
        for i in 0..h {
            for j in 0..w {
                for ch in 0..c {
                    let mut s = 0.0f32;
                    for (d, &kw) in (-r..=r).zip(&kv) {
                        s += kw * data[i * row + reflect(j as isize + d, w) * c + ch] as f32;
                    }
                    tmp[i * row + j * c + ch] = s;
                }
            }
        }
        for i in 0..h {
            let mut acc = vec![0.0f32; row];
            for (d, &kw) in (-r..=r).zip(&kv) {
                let src = &tmp[reflect(i as isize + d, h) * row..][..row];
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a += kw * v;
                }
            }
            for (o, a) in data[i * row..(i + 1) * row].iter_mut().zip(acc) {
                *o = a.round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }

    #[test]
    fn the_contiguous_pass_equals_the_reflected_one() {
        let mut rng = SampleRng::from_seed(7);
        for &(w, h) in &[(1, 1), (2, 3), (4, 4), (9, 7), (31, 20), (64, 40)] {
            for c in [1, 3, 4] {
                let img: Vec<u8> = (0..w * h * c).map(|_| rng.below(256) as u8).collect();
                for (k, sigma) in [(3, 0.8), (5, 1.5), (9, 3.0), (23, 3.5)] {
                    let (mut a, mut b) = (img.clone(), img.clone());
                    gaussian_blur(&mut a, w, h, c, k, sigma, &mut Vec::new());
                    scalar_blur(&mut b, w, h, c, k, sigma);
                    assert_eq!(a, b, "{w}x{h}x{c} k={k}");
                }
            }
        }
    }
}
