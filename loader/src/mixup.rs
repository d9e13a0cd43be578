//! MixUp and CutMix on finished batches, with soft labels.
//!
//! As torchvision's `transforms.v2.MixUp` / `CutMix` (and timm's batch mode) do, one
//! draw serves the whole batch and each sample is paired with the batch *rolled by
//! one*: sample i is mixed with sample i - 1, and sample 0 with the last one.
//!
//! - MixUp: `lam ~ Beta(alpha, alpha)`; image i becomes `lam * x[i] + (1 - lam) *
//!   x[i-1]`, rounded to u8 (torchvision works on float images; the rounding is the one
//!   difference), and its soft label `lam * onehot(y[i]) + (1 - lam) * onehot(y[i-1])`.
//! - CutMix: `lam ~ Beta(alpha, alpha)`, a centre (x, y) uniform over the pixels, a box
//!   of half-sides `int(0.5 sqrt(1 - lam) W)` and `int(0.5 sqrt(1 - lam) H)` around it,
//!   clipped to the image; image i takes that box from image i - 1. Its soft label
//!   weighs `y[i]` by the share of pixels it kept, `1 - box area / (W H)` after clipping
//!   (torchvision's `lam_adjusted`), and `y[i-1]` by the rest.
//! - Both given: each batch is CutMix with probability `switch_prob` (timm's
//!   `switch_prob`), else MixUp.
//!
//! Randomness: a [`SampleRng`] of its own per batch, seeded by (seed, epoch, batch
//! position) through a salt that keeps it apart from the per-sample streams. Draws in
//! order: the switch (only when both are on), `lam` (two Gamma variates, a variable
//! number of draws), then for CutMix the centre's column and row. So a batch is mixed
//! the same way in sync and async mode, for any worker count, and after a resume.

use std::fmt;

use stoker_augment::SampleRng;

/// Keeps the batch streams apart from the per-sample ones (which are seeded by
/// (seed, epoch, index)): "mixbatch".
const SALT: u64 = 0x6d69_7862_6174_6368;

/// A mixing setting that cannot be used, naming the setting as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad mix setting '{spec}': {reason}")]
pub struct MixError {
    /// The setting as written.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

/// MixUp and/or CutMix, as `mixup:ALPHA`, `cutmix:ALPHA` or both with
/// `mix_prob:P` (see [`Mix::parse`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// MixUp's Beta parameter, if on.
    pub mixup: Option<f64>,
    /// CutMix's Beta parameter, if on.
    pub cutmix: Option<f64>,
    /// With both on: the probability that a batch uses CutMix.
    pub switch_prob: f64,
}

/// What one batch drew.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MixDraw {
    /// Every image `lam` of itself and `1 - lam` of its neighbour.
    MixUp {
        /// Weight of each image itself, 0..=1, drawn from `Beta(alpha, alpha)`.
        lam: f64,
    },
    /// The box `[x1, x2) x [y1, y2)` pasted from the neighbour; `lam` is the share of
    /// pixels each image kept.
    CutMix {
        /// Left column of the box (inclusive), in pixels.
        x1: usize,
        /// Top row of the box (inclusive), in pixels.
        y1: usize,
        /// Right column of the box (exclusive), in pixels.
        x2: usize,
        /// Bottom row of the box (exclusive), in pixels.
        y2: usize,
        /// Share of its pixels each image kept, `1 - box area / (W H)`.
        lam: f64,
    },
}

impl MixDraw {
    /// The weight of each sample's own label.
    pub fn lam(&self) -> f64 {
        match *self {
            MixDraw::MixUp { lam } | MixDraw::CutMix { lam, .. } => lam,
        }
    }
}

fn alpha_ok(spec: &str, alpha: f64) -> Result<f64, MixError> {
    if alpha > 0.0 && alpha.is_finite() {
        Ok(alpha)
    } else {
        Err(MixError {
            spec: spec.to_string(),
            reason: format!("alpha must be a positive number, got {alpha}"),
        })
    }
}

impl Mix {
    /// From the three settings (e.g. Python's `mixup=`, `cutmix=`, `mix_prob=`). At
    /// least one alpha; `mix_prob` only with both (default 0.5).
    pub fn new(
        mixup: Option<f64>,
        cutmix: Option<f64>,
        mix_prob: Option<f64>,
    ) -> Result<Mix, MixError> {
        let mixup = mixup
            .map(|a| alpha_ok(&format!("mixup:{a}"), a))
            .transpose()?;
        let cutmix = cutmix
            .map(|a| alpha_ok(&format!("cutmix:{a}"), a))
            .transpose()?;
        if let Some(p) = mix_prob {
            let spec = format!("mix_prob:{p}");
            if !(0.0..=1.0).contains(&p) {
                return Err(MixError {
                    spec,
                    reason: "the switch probability must be within 0..1".into(),
                });
            }
            if mixup.is_none() || cutmix.is_none() {
                return Err(MixError {
                    spec,
                    reason: "mix_prob is the chance of CutMix over MixUp; it needs both \
                             mixup and cutmix"
                        .into(),
                });
            }
        }
        if mixup.is_none() && cutmix.is_none() {
            return Err(MixError {
                spec: String::new(),
                reason: "give mixup, cutmix or both".into(),
            });
        }
        Ok(Mix {
            mixup,
            cutmix,
            switch_prob: mix_prob.unwrap_or(0.5),
        })
    }

    /// `mixup:0.2`, `cutmix:1.0`, or `mixup:0.8,cutmix:1.0[,mix_prob:0.5]`.
    pub fn parse(spec: &str) -> Result<Mix, MixError> {
        let (mut mixup, mut cutmix, mut prob) = (None, None, None);
        for part in spec.split(',').map(str::trim) {
            let bad = |reason: String| MixError {
                spec: part.to_string(),
                reason,
            };
            let (key, value) = part
                .split_once(':')
                .ok_or_else(|| bad("want mixup:ALPHA, cutmix:ALPHA or mix_prob:P".into()))?;
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("'{}' is not a number", value.trim())))?;
            let slot = match key.trim().to_ascii_lowercase().as_str() {
                "mixup" => &mut mixup,
                "cutmix" => &mut cutmix,
                "mix_prob" => &mut prob,
                other => {
                    return Err(bad(format!(
                        "unknown '{other}' (known: mixup, cutmix, mix_prob)"
                    )))
                }
            };
            if slot.replace(v).is_some() {
                return Err(bad("given twice".into()));
            }
        }
        Mix::new(mixup, cutmix, prob)
    }

    /// The batch's draw for images of `w` x `h`.
    pub fn draw(&self, seed: u64, epoch: u64, step: usize, w: usize, h: usize) -> MixDraw {
        let mut rng = SampleRng::new(seed ^ SALT, epoch, step as u64);
        let cut = match (self.mixup, self.cutmix) {
            (Some(_), Some(_)) => rng.chance(self.switch_prob),
            (None, Some(_)) => true,
            _ => false,
        };
        let alpha = if cut { self.cutmix } else { self.mixup }.unwrap_or(1.0);
        let lam = beta(&mut rng, alpha);
        if !cut {
            return MixDraw::MixUp { lam };
        }
        let cx = rng.below(w.max(1) as u64) as usize;
        let cy = rng.below(h.max(1) as u64) as usize;
        let r = 0.5 * (1.0 - lam).max(0.0).sqrt();
        let (rw, rh) = ((r * w as f64) as usize, (r * h as f64) as usize);
        let (x1, y1) = (cx.saturating_sub(rw), cy.saturating_sub(rh));
        let (x2, y2) = ((cx + rw).min(w), (cy + rh).min(h));
        let area = ((x2 - x1) * (y2 - y1)) as f64;
        MixDraw::CutMix {
            x1,
            y1,
            x2,
            y2,
            lam: 1.0 - area / (w * h).max(1) as f64,
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(a) = self.mixup {
            parts.push(format!("mixup:{a}"));
        }
        if let Some(a) = self.cutmix {
            parts.push(format!("cutmix:{a}"));
        }
        if self.mixup.is_some() && self.cutmix.is_some() && self.switch_prob != 0.5 {
            parts.push(format!("mix_prob:{}", self.switch_prob));
        }
        f.write_str(&parts.join(","))
    }
}

/// Uniform in (0, 1].
fn open_unit(rng: &mut SampleRng) -> f64 {
    1.0 - rng.next_f64()
}

fn normal(rng: &mut SampleRng) -> f64 {
    let (u, v) = (open_unit(rng), rng.next_f64());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// The log of a Gamma(a, 1) variate (Marsaglia and Tsang; for a < 1 boosted by
/// U^(1/a), kept in logs so that small alphas do not underflow to 0).
fn ln_gamma(rng: &mut SampleRng, a: f64) -> f64 {
    if a < 1.0 {
        let boost = open_unit(rng).ln() / a;
        return ln_gamma(rng, a + 1.0) + boost;
    }
    let d = a - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    // Accepts with probability above 0.95 per round; the cap only guards the loop.
    for _ in 0..10_000 {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = open_unit(rng);
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return (d * v).ln();
        }
    }
    d.ln()
}

/// Beta(alpha, alpha) as X / (X + Y) of two Gamma variates.
pub fn beta(rng: &mut SampleRng, alpha: f64) -> f64 {
    let lx = ln_gamma(rng, alpha);
    let ly = ln_gamma(rng, alpha);
    (1.0 / (1.0 + (ly - lx).exp())).clamp(0.0, 1.0)
}

/// Mixes the `n` images of `images` (u8, `n * h * w * c` bytes) in place as `draw`
/// says, pairing image i with image i - 1 (rolled by one).
pub fn mix_images(images: &mut [u8], n: usize, (h, w, c): (usize, usize, usize), draw: &MixDraw) {
    let slot = h * w * c;
    if n < 2 || slot == 0 || images.len() < n * slot {
        return;
    }
    // Going from the last image down, image i - 1 is still unmixed when image i reads
    // it; only image 0's partner, the last image, must be kept aside.
    let last: Vec<u8> = images[(n - 1) * slot..n * slot].to_vec();
    match *draw {
        MixDraw::MixUp { lam } => {
            let (a, b) = (lam as f32, (1.0 - lam) as f32);
            let blend = |x: &mut u8, y: u8| {
                *x = (a * *x as f32 + b * y as f32 + 0.5).clamp(0.0, 255.0) as u8;
            };
            for i in (1..n).rev() {
                let (lo, hi) = images.split_at_mut(i * slot);
                let prev = &lo[(i - 1) * slot..];
                for (x, &y) in hi[..slot].iter_mut().zip(prev) {
                    blend(x, y);
                }
            }
            for (x, &y) in images[..slot].iter_mut().zip(&last) {
                blend(x, y);
            }
        }
        MixDraw::CutMix { x1, y1, x2, y2, .. } => {
            let row = w * c;
            let span = x1 * c..x2 * c;
            for i in (0..n).rev() {
                for y in y1..y2 {
                    let at = y * row;
                    if i == 0 {
                        images[at + span.start..at + span.end]
                            .copy_from_slice(&last[at + span.start..at + span.end]);
                    } else {
                        let (lo, hi) = images.split_at_mut(i * slot);
                        let prev = &lo[(i - 1) * slot + at..];
                        hi[at + span.start..at + span.end]
                            .copy_from_slice(&prev[span.start..span.end]);
                    }
                }
            }
        }
    }
}

/// Soft labels, float32 (n, classes) row-major: `lam` on each sample's own label and
/// `1 - lam` on its neighbour's (rolled by one). Labels must be below `classes`.
pub fn soft_labels(labels: &[u32], classes: usize, lam: f64) -> Vec<f32> {
    let n = labels.len();
    let mut out = vec![0.0f32; n * classes];
    for (i, &l) in labels.iter().enumerate() {
        let prev = labels[(i + n - 1) % n];
        let row = &mut out[i * classes..(i + 1) * classes];
        row[l as usize] += lam as f32;
        row[prev as usize] += (1.0 - lam) as f32;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_print_back() {
        for spec in [
            "mixup:0.2",
            "cutmix:1",
            "mixup:0.8,cutmix:1",
            "mixup:0.8,cutmix:1,mix_prob:0.3",
        ] {
            let m = Mix::parse(spec).unwrap();
            assert_eq!(m.to_string(), spec);
        }
        let m = Mix::parse("mixup:0.2").unwrap();
        assert_eq!(m.mixup, Some(0.2));
        assert_eq!(m.cutmix, None);
    }

    #[test]
    fn bad_settings_name_themselves() {
        let cases = [
            (
                "mixup:0",
                "bad mix setting 'mixup:0': alpha must be a positive number, got 0",
            ),
            ("cutmix:-1", "'cutmix:-1': alpha must be a positive number"),
            (
                "mixup:NaN",
                "'mixup:NaN': alpha must be a positive number, got NaN",
            ),
            ("mixup:inf", "alpha must be a positive number"),
            ("mixup:x", "'mixup:x': 'x' is not a number"),
            ("mixup", "want mixup:ALPHA"),
            ("mixap:1", "unknown 'mixap'"),
            ("mixup:1,mixup:2", "given twice"),
            ("mixup:1,mix_prob:0.5", "needs both mixup and cutmix"),
            (
                "mixup:1,cutmix:1,mix_prob:2",
                "'mix_prob:2': the switch probability",
            ),
        ];
        for (spec, want) in cases {
            let e = Mix::parse(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
        assert!(Mix::new(None, None, None).is_err());
        assert!(Mix::new(Some(f64::NAN), None, None)
            .unwrap_err()
            .to_string()
            .contains("mixup:NaN"));
    }

    #[test]
    fn beta_has_the_right_mean_and_spread() {
        for alpha in [0.2, 1.0, 4.0] {
            let mut rng = SampleRng::from_seed(5);
            let xs: Vec<f64> = (0..20_000).map(|_| beta(&mut rng, alpha)).collect();
            assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)));
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
            // Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)).
            let want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
            assert!((mean - 0.5).abs() < 0.01, "alpha {alpha}: mean {mean}");
            assert!(
                (var - want).abs() < 0.1 * want,
                "alpha {alpha}: var {var} vs {want}"
            );
        }
        // Tiny alphas give values near 0 or 1, never NaN.
        let mut rng = SampleRng::from_seed(6);
        for _ in 0..1000 {
            let x = beta(&mut rng, 1e-3);
            assert!((0.0..=1.0).contains(&x));
        }
    }

    #[test]
    fn mixup_blends_with_the_previous_image() {
        let (h, w, c) = (2, 2, 1);
        let mut imgs: Vec<u8> = [10u8, 100, 200].iter().flat_map(|&v| [v; 4]).collect();
        mix_images(&mut imgs, 3, (h, w, c), &MixDraw::MixUp { lam: 0.75 });
        // 0.75 * own + 0.25 * previous (image 0's previous is image 2).
        assert_eq!(&imgs[0..4], &[58; 4]); // 7.5 + 50 = 57.5 -> 58
        assert_eq!(&imgs[4..8], &[78; 4]); // 75 + 2.5
        assert_eq!(&imgs[8..12], &[175; 4]); // 150 + 25
        let soft = soft_labels(&[0, 2, 1], 3, 0.75);
        assert_eq!(soft, [0.75, 0.25, 0.0, 0.25, 0.0, 0.75, 0.0, 0.75, 0.25]);
    }

    #[test]
    fn cutmix_pastes_the_box_and_weighs_by_kept_pixels() {
        let (h, w, c) = (4, 5, 2);
        let slot = h * w * c;
        let mut imgs: Vec<u8> = (0..3u8).flat_map(|v| vec![v; slot]).collect();
        let d = MixDraw::CutMix {
            x1: 1,
            y1: 2,
            x2: 4,
            y2: 4,
            lam: 1.0 - 6.0 / 20.0,
        };
        mix_images(&mut imgs, 3, (h, w, c), &d);
        for i in 0..3 {
            let prev = ((i + 2) % 3) as u8;
            for y in 0..h {
                for x in 0..w {
                    let inside = (1..4).contains(&x) && (2..4).contains(&y);
                    let want = if inside { prev } else { i as u8 };
                    for k in 0..c {
                        assert_eq!(imgs[i * slot + (y * w + x) * c + k], want, "{i} {x} {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn draws_depend_on_seed_epoch_and_step_only() {
        let m = Mix::parse("mixup:0.8,cutmix:1").unwrap();
        let a = m.draw(1, 2, 3, 32, 24);
        assert_eq!(a, m.draw(1, 2, 3, 32, 24));
        let others = [
            m.draw(1, 2, 4, 32, 24),
            m.draw(1, 3, 3, 32, 24),
            m.draw(2, 2, 3, 32, 24),
        ];
        assert!(others.iter().all(|o| *o != a));
        let (mut cut, mut up) = (0, 0);
        for step in 0..400 {
            match m.draw(9, 0, step, 32, 24) {
                MixDraw::CutMix {
                    x1,
                    y1,
                    x2,
                    y2,
                    lam,
                } => {
                    cut += 1;
                    assert!(x1 <= x2 && x2 <= 32 && y1 <= y2 && y2 <= 24);
                    let kept = 1.0 - ((x2 - x1) * (y2 - y1)) as f64 / (32.0 * 24.0);
                    assert_eq!(lam, kept);
                }
                MixDraw::MixUp { lam } => {
                    up += 1;
                    assert!((0.0..=1.0).contains(&lam));
                }
            }
        }
        assert!(cut > 150 && up > 150, "{cut} {up}");
    }
}
