//! Augmentation policies drawn per sample: RandAugment, TrivialAugmentWide and
//! AutoAugment, with torchvision's (`transforms.v2`) op lists, magnitude bins, signs,
//! nearest interpolation and fill.
//!
//! A policy step first draws its ops from the sample's [`SampleRng`] ([`Policy::draw`]
//! gives them as concrete [`Op`]s with their parameters), then applies them in order.
//! Each op says what it did to the geometry ([`Op::applied`]): a warp's matrices, or
//! nothing (a pixel op).
//!
//! Draws, in order:
//! - `randaugment:n=N:m=M`: for each of the N ops, the op (one of 14, uniformly), then,
//!   for the signed ops, the sign (negative with probability 1/2).
//! - `trivialaugment`: the op (one of 14), then for ops with a magnitude the bin (one
//!   of 31), then for signed ops the sign.
//! - `autoaugment:policy=P`: the sub-policy (one of 25), then for each of its two ops
//!   whether it applies (its probability), and if it does and is signed, the sign.
//!
//! Magnitudes are torchvision's float32 tables (`linspace` values, taken as float32),
//! computed for the size of the image the policy receives.

use super::affine::{Affine, Matrix};
use super::photometric::Adjust;
use crate::SampleRng;

/// The most ops one policy step applies (RandAugment's `n` is at most this).
pub const MAX_OPS: usize = 16;
/// RandAugment's and TrivialAugmentWide's number of magnitude bins.
pub const BINS: usize = 31;
/// AutoAugment's number of magnitude bins.
const AA_BINS: usize = 10;

/// The ops of torchvision's augmentation spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    /// Leaves the image as it is.
    Identity,
    /// Shears along x (an affine warp about the top-left corner).
    ShearX,
    /// Shears along y (an affine warp about the top-left corner).
    ShearY,
    /// Shifts the image horizontally by a whole number of pixels.
    TranslateX,
    /// Shifts the image vertically by a whole number of pixels.
    TranslateY,
    /// Rotates the image about its centre.
    Rotate,
    /// Scales brightness ([`Adjust::Brightness`]).
    Brightness,
    /// Scales saturation ([`Adjust::Color`]).
    Color,
    /// Scales contrast ([`Adjust::Contrast`]).
    Contrast,
    /// Sharpens or blurs ([`Adjust::Sharpness`]).
    Sharpness,
    /// Keeps only the high bits of each sample ([`Adjust::Posterize`]).
    Posterize,
    /// Inverts samples at or above a threshold ([`Adjust::Solarize`]).
    Solarize,
    /// Stretches each channel to the full 0..=255 range ([`Adjust::AutoContrast`]).
    AutoContrast,
    /// Equalises each channel's histogram ([`Adjust::Equalize`]).
    Equalize,
    /// Inverts every sample (AutoAugment only; [`Adjust::Invert`]).
    Invert,
}

use Name::*;

/// RandAugment's and TrivialAugmentWide's op list, in torchvision's order.
pub const WIDE_OPS: [Name; 14] = [
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
];

/// AutoAugment's learned policies (torchvision's `AutoAugmentPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPolicy {
    /// The policy learned on ImageNet (spec name `imagenet`, the default).
    ImageNet,
    /// The policy learned on CIFAR-10 (spec name `cifar10`).
    Cifar10,
    /// The policy learned on SVHN (spec name `svhn`).
    Svhn,
}

impl AutoPolicy {
    /// The spec names of the policies, for error messages.
    pub const NAMES: &'static str = "imagenet, cifar10, svhn";

    /// The policy with spec name `s` (case-insensitive), or `None` for an unknown name.
    pub fn parse(s: &str) -> Option<AutoPolicy> {
        match s.to_ascii_lowercase().as_str() {
            "imagenet" => Some(AutoPolicy::ImageNet),
            "cifar10" => Some(AutoPolicy::Cifar10),
            "svhn" => Some(AutoPolicy::Svhn),
            _ => None,
        }
    }

    /// The policy's spec name: `imagenet`, `cifar10` or `svhn`.
    pub fn name(&self) -> &'static str {
        match self {
            AutoPolicy::ImageNet => "imagenet",
            AutoPolicy::Cifar10 => "cifar10",
            AutoPolicy::Svhn => "svhn",
        }
    }

    /// The sub-policies: two (op, probability, magnitude bin) each.
    pub fn sub_policies(&self) -> &'static [[(Name, f64, usize); 2]] {
        match self {
            AutoPolicy::ImageNet => &IMAGENET,
            AutoPolicy::Cifar10 => &CIFAR10,
            AutoPolicy::Svhn => &SVHN,
        }
    }
}

// Ops without a magnitude carry bin 0, which nothing reads.
const IMAGENET: [[(Name, f64, usize); 2]; 25] = [
    [(Posterize, 0.4, 8), (Rotate, 0.6, 9)],
    [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
    [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
    [(Posterize, 0.6, 7), (Posterize, 0.6, 6)],
    [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
    [(Equalize, 0.4, 0), (Rotate, 0.8, 8)],
    [(Solarize, 0.6, 3), (Equalize, 0.6, 0)],
    [(Posterize, 0.8, 5), (Equalize, 1.0, 0)],
    [(Rotate, 0.2, 3), (Solarize, 0.6, 8)],
    [(Equalize, 0.6, 0), (Posterize, 0.4, 6)],
    [(Rotate, 0.8, 8), (Color, 0.4, 0)],
    [(Rotate, 0.4, 9), (Equalize, 0.6, 0)],
    [(Equalize, 0.0, 0), (Equalize, 0.8, 0)],
    [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
    [(Color, 0.6, 4), (Contrast, 1.0, 8)],
    [(Rotate, 0.8, 8), (Color, 1.0, 2)],
    [(Color, 0.8, 8), (Solarize, 0.8, 7)],
    [(Sharpness, 0.4, 7), (Invert, 0.6, 0)],
    [(ShearX, 0.6, 5), (Equalize, 1.0, 0)],
    [(Color, 0.4, 0), (Equalize, 0.6, 0)],
    [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
    [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
    [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
    [(Color, 0.6, 4), (Contrast, 1.0, 8)],
    [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
];

const CIFAR10: [[(Name, f64, usize); 2]; 25] = [
    [(Invert, 0.1, 0), (Contrast, 0.2, 6)],
    [(Rotate, 0.7, 2), (TranslateX, 0.3, 9)],
    [(Sharpness, 0.8, 1), (Sharpness, 0.9, 3)],
    [(ShearY, 0.5, 8), (TranslateY, 0.7, 9)],
    [(AutoContrast, 0.5, 0), (Equalize, 0.9, 0)],
    [(ShearY, 0.2, 7), (Posterize, 0.3, 7)],
    [(Color, 0.4, 3), (Brightness, 0.6, 7)],
    [(Sharpness, 0.3, 9), (Brightness, 0.7, 9)],
    [(Equalize, 0.6, 0), (Equalize, 0.5, 0)],
    [(Contrast, 0.6, 7), (Sharpness, 0.6, 5)],
    [(Color, 0.7, 7), (TranslateX, 0.5, 8)],
    [(Equalize, 0.3, 0), (AutoContrast, 0.4, 0)],
    [(TranslateY, 0.4, 3), (Sharpness, 0.2, 6)],
    [(Brightness, 0.9, 6), (Color, 0.2, 8)],
    [(Solarize, 0.5, 2), (Invert, 0.0, 0)],
    [(Equalize, 0.2, 0), (AutoContrast, 0.6, 0)],
    [(Equalize, 0.2, 0), (Equalize, 0.6, 0)],
    [(Color, 0.9, 9), (Equalize, 0.6, 0)],
    [(AutoContrast, 0.8, 0), (Solarize, 0.2, 8)],
    [(Brightness, 0.1, 3), (Color, 0.7, 0)],
    [(Solarize, 0.4, 5), (AutoContrast, 0.9, 0)],
    [(TranslateY, 0.9, 9), (TranslateY, 0.7, 9)],
    [(AutoContrast, 0.9, 0), (Solarize, 0.8, 3)],
    [(Equalize, 0.8, 0), (Invert, 0.1, 0)],
    [(TranslateY, 0.7, 9), (AutoContrast, 0.9, 0)],
];

const SVHN: [[(Name, f64, usize); 2]; 25] = [
    [(ShearX, 0.9, 4), (Invert, 0.2, 0)],
    [(ShearY, 0.9, 8), (Invert, 0.7, 0)],
    [(Equalize, 0.6, 0), (Solarize, 0.6, 6)],
    [(Invert, 0.9, 0), (Equalize, 0.6, 0)],
    [(Equalize, 0.6, 0), (Rotate, 0.9, 3)],
    [(ShearX, 0.9, 4), (AutoContrast, 0.8, 0)],
    [(ShearY, 0.9, 8), (Invert, 0.4, 0)],
    [(ShearY, 0.9, 5), (Solarize, 0.2, 6)],
    [(Invert, 0.9, 0), (AutoContrast, 0.8, 0)],
    [(Equalize, 0.6, 0), (Rotate, 0.9, 3)],
    [(ShearX, 0.9, 4), (Solarize, 0.3, 3)],
    [(ShearY, 0.8, 8), (Invert, 0.7, 0)],
    [(Equalize, 0.9, 0), (TranslateY, 0.6, 6)],
    [(Invert, 0.9, 0), (Equalize, 0.6, 0)],
    [(Contrast, 0.3, 3), (Rotate, 0.8, 4)],
    [(Invert, 0.8, 0), (TranslateY, 0.0, 2)],
    [(ShearY, 0.7, 6), (Solarize, 0.4, 8)],
    [(Invert, 0.6, 0), (Rotate, 0.8, 4)],
    [(ShearY, 0.3, 7), (TranslateX, 0.9, 3)],
    [(ShearX, 0.1, 6), (Invert, 0.6, 0)],
    [(Solarize, 0.7, 2), (TranslateY, 0.6, 7)],
    [(ShearY, 0.8, 4), (Invert, 0.8, 0)],
    [(ShearX, 0.7, 9), (TranslateY, 0.8, 3)],
    [(ShearY, 0.8, 5), (AutoContrast, 0.7, 0)],
    [(ShearX, 0.7, 2), (Invert, 0.1, 0)],
];

/// Which policy, with its settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PolicyKind {
    /// `RandAugment(num_ops=n, magnitude=m)`, 31 bins.
    RandAugment {
        /// Number of ops drawn per image, 0..=[`MAX_OPS`]
        /// ([`RANDAUGMENT_N`](crate::spec::RANDAUGMENT_N) where a spec leaves it out).
        n: usize,
        /// Magnitude bin of every op, below [`BINS`]
        /// ([`RANDAUGMENT_M`](crate::spec::RANDAUGMENT_M) where a spec leaves it out).
        m: usize,
    },
    /// `TrivialAugmentWide()`, 31 bins.
    TrivialAugment,
    /// `AutoAugment(policy)`.
    AutoAugment(AutoPolicy),
}

/// A policy step (`randaugment`, `trivialaugment`, `autoaugment`), filling with `fill`
/// where a warp uncovers the image (torchvision's `fill=None` is 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// Which policy runs, with its settings.
    pub kind: PolicyKind,
    /// Value of the pixels a warp uncovers, in every channel.
    pub fill: u8,
}

/// The magnitude table an op uses in a space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// RandAugment's magnitudes (torchvision's `RandAugment._augmentation_space`).
    RandAugment,
    /// TrivialAugmentWide's wider magnitudes.
    TrivialAugment,
    /// AutoAugment's magnitudes (the same ranges as RandAugment's, 10 bins).
    AutoAugment,
}

/// `float(torch.linspace(lo, hi, bins)[i])`: the float32 value, as f64.
fn linspace(lo: f64, hi: f64, bins: usize, i: usize) -> f64 {
    let t = i as f64 / (bins - 1) as f64;
    (lo + (hi - lo) * t) as f32 as f64
}

/// `(8 - arange(bins) / ((bins - 1) / span)).round().int()[i]`, in float32.
fn posterize_bin(span: f64, bins: usize, i: usize) -> f64 {
    let d = ((bins - 1) as f64 / span) as f32;
    (8.0f32 - i as f32 / d).round_ties_even() as f64
}

impl Name {
    /// Whether torchvision flips this op's magnitude's sign at random.
    pub fn signed(self) -> bool {
        matches!(
            self,
            ShearX
                | ShearY
                | TranslateX
                | TranslateY
                | Rotate
                | Brightness
                | Color
                | Contrast
                | Sharpness
        )
    }

    /// Bin `i` of this op's magnitudes in `space` (with `bins` bins) for a `w` x `h`
    /// image, or `None` for ops without a magnitude.
    pub fn magnitude(self, space: Space, bins: usize, i: usize, w: usize, h: usize) -> Option<f64> {
        let wide = space == Space::TrivialAugment;
        let l = |hi: f64| Some(linspace(0.0, hi, bins, i));
        match self {
            Identity | AutoContrast | Equalize | Invert => None,
            ShearX | ShearY => l(if wide { 0.99 } else { 0.3 }),
            TranslateX => l(if wide { 32.0 } else { 150.0 / 331.0 * w as f64 }),
            TranslateY => l(if wide { 32.0 } else { 150.0 / 331.0 * h as f64 }),
            Rotate => l(if wide { 135.0 } else { 30.0 }),
            Brightness | Color | Contrast | Sharpness => l(if wide { 0.99 } else { 0.9 }),
            Posterize => Some(posterize_bin(if wide { 6.0 } else { 4.0 }, bins, i)),
            Solarize => Some(linspace(1.0, 0.0, bins, i)),
        }
    }

    /// The op with signed magnitude `mag` (torchvision's
    /// `_apply_image_or_video_transform`).
    pub fn op(self, mag: f64, fill: u8) -> Op {
        let shear = |sx: f64, sy: f64| {
            Op::Warp(Affine {
                angle: 0.0,
                translate: (0.0, 0.0),
                shear: (sx, sy),
                center: Some((0.0, 0.0)),
                fill,
            })
        };
        let translate = |tx: f64, ty: f64| {
            Op::Warp(Affine {
                angle: 0.0,
                translate: (tx, ty),
                shear: (0.0, 0.0),
                center: None,
                fill,
            })
        };
        match self {
            Identity => Op::Identity,
            ShearX => shear(mag.atan().to_degrees(), 0.0),
            ShearY => shear(0.0, mag.atan().to_degrees()),
            TranslateX => translate(mag.trunc(), 0.0),
            TranslateY => translate(0.0, mag.trunc()),
            Rotate => Op::Warp(Affine::rotate(mag, fill)),
            Brightness => Op::Pixel(Adjust::Brightness(1.0 + mag)),
            Color => Op::Pixel(Adjust::Color(1.0 + mag)),
            Contrast => Op::Pixel(Adjust::Contrast(1.0 + mag)),
            Sharpness => Op::Pixel(Adjust::Sharpness(1.0 + mag)),
            Posterize => Op::Pixel(Adjust::Posterize(mag as u8)),
            Solarize => Op::Pixel(Adjust::Solarize(255.0 * mag)),
            AutoContrast => Op::Pixel(Adjust::AutoContrast),
            Equalize => Op::Pixel(Adjust::Equalize),
            Invert => Op::Pixel(Adjust::Invert),
        }
    }
}

/// One concrete op a policy drew.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// Nothing: the image is left as it is.
    Identity,
    /// A photometric op: pixel values change, none move.
    Pixel(Adjust),
    /// A same-size affine warp, nearest-neighbour, with the policy's fill.
    Warp(Affine),
}

/// What an applied op did to the geometry, for moving boxes, masks and points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Applied {
    /// A same-size affine warp: `inverse` maps output points to input points,
    /// `forward` input to output (pixel coordinates of [`super::affine`]).
    Affine {
        /// Maps output points to input points.
        inverse: Matrix,
        /// Maps input points to output points.
        forward: Matrix,
    },
    /// Pixels changed in place, none moved.
    Pixel,
}

impl Op {
    /// What this op does to the geometry of a `w` x `h` image.
    pub fn applied(&self, w: usize, h: usize) -> Applied {
        match self {
            Op::Warp(a) => {
                let (inverse, forward) = a.matrices(w, h);
                Applied::Affine { inverse, forward }
            }
            Op::Identity | Op::Pixel(_) => Applied::Pixel,
        }
    }

    /// Apply to an HWC image in place; `tmp` is scratch (a warp reads a copy).
    pub fn apply(&self, data: &mut [u8], w: usize, h: usize, c: usize, tmp: &mut Vec<u8>) {
        match self {
            Op::Identity => {}
            Op::Pixel(a) => a.apply(data, w, h, c, tmp),
            Op::Warp(a) => warp_in_place(a, data, w, h, c, tmp),
        }
    }
}

/// An affine warp of `data` onto itself through a copy in `tmp`.
pub fn warp_in_place(a: &Affine, data: &mut [u8], w: usize, h: usize, c: usize, tmp: &mut Vec<u8>) {
    tmp.clear();
    tmp.extend_from_slice(data);
    let src = crate::ImageView {
        width: w,
        height: h,
        channels: c,
        data: tmp,
    };
    a.apply(src, data);
}

/// The ops one sample drew, in the order they apply.
#[derive(Clone, Copy, Debug)]
pub struct Drawn {
    ops: [Op; MAX_OPS],
    len: usize,
}

impl Drawn {
    fn new() -> Self {
        Drawn {
            ops: [Op::Identity; MAX_OPS],
            len: 0,
        }
    }

    fn push(&mut self, op: Op) {
        if self.len < MAX_OPS {
            self.ops[self.len] = op;
            self.len += 1;
        }
    }

    /// The ops drawn (at most [`MAX_OPS`]), in the order they apply.
    pub fn ops(&self) -> &[Op] {
        &self.ops[..self.len]
    }
}

impl Policy {
    /// Draw this sample's ops for a `w` x `h` image (see the module docs for the order).
    pub fn draw(&self, rng: &mut SampleRng, w: usize, h: usize) -> Drawn {
        let mut out = Drawn::new();
        let sign = |rng: &mut SampleRng, name: Name, mag: f64| {
            if name.signed() && rng.chance(0.5) {
                -mag
            } else {
                mag
            }
        };
        match self.kind {
            PolicyKind::RandAugment { n, m } => {
                for _ in 0..n.min(MAX_OPS) {
                    let name = WIDE_OPS[rng.below(WIDE_OPS.len() as u64) as usize];
                    let mag = match name.magnitude(Space::RandAugment, BINS, m, w, h) {
                        Some(v) => sign(rng, name, v),
                        None => 0.0,
                    };
                    out.push(name.op(mag, self.fill));
                }
            }
            PolicyKind::TrivialAugment => {
                let name = WIDE_OPS[rng.below(WIDE_OPS.len() as u64) as usize];
                let mag = if name
                    .magnitude(Space::TrivialAugment, BINS, 0, w, h)
                    .is_some()
                {
                    let bin = rng.below(BINS as u64) as usize;
                    let v = name
                        .magnitude(Space::TrivialAugment, BINS, bin, w, h)
                        .unwrap_or(0.0);
                    sign(rng, name, v)
                } else {
                    0.0
                };
                out.push(name.op(mag, self.fill));
            }
            PolicyKind::AutoAugment(p) => {
                let subs = p.sub_policies();
                let sub = &subs[rng.below(subs.len() as u64) as usize];
                for &(name, prob, bin) in sub {
                    if !rng.chance(prob) {
                        continue;
                    }
                    let mag = match name.magnitude(Space::AutoAugment, AA_BINS, bin, w, h) {
                        Some(v) => sign(rng, name, v),
                        None => 0.0,
                    };
                    out.push(name.op(mag, self.fill));
                }
            }
        }
        out
    }

    /// Draw and apply this sample's ops to an HWC image in place; returns what was
    /// applied (for [`Op::applied`]).
    pub fn apply(
        &self,
        rng: &mut SampleRng,
        data: &mut [u8],
        w: usize,
        h: usize,
        c: usize,
        tmp: &mut Vec<u8>,
    ) -> Drawn {
        let drawn = self.draw(rng, w, h);
        for op in drawn.ops() {
            op.apply(data, w, h, c, tmp);
        }
        drawn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magnitude_tables_match_torchvision_at_known_bins() {
        let (w, h) = (224, 160);
        let ra = |n: Name, i| n.magnitude(Space::RandAugment, BINS, i, w, h).unwrap();
        assert_eq!(ra(ShearX, 30), 0.3f32 as f64);
        assert_eq!(ra(Rotate, 9), 9.0);
        assert_eq!(ra(Posterize, 9), 7.0);
        assert_eq!(ra(Posterize, 30), 4.0);
        assert_eq!(ra(Solarize, 0), 1.0);
        assert_eq!(ra(Solarize, 30), 0.0);
        assert!((ra(TranslateX, 30) - 150.0 / 331.0 * 224.0).abs() < 1e-4);
        assert!((ra(TranslateY, 30) - 150.0 / 331.0 * 160.0).abs() < 1e-4);
        let ta = |n: Name, i| n.magnitude(Space::TrivialAugment, BINS, i, w, h).unwrap();
        assert_eq!(ta(Rotate, 30), 135.0);
        assert_eq!(ta(TranslateX, 30), 32.0);
        assert_eq!(ta(Posterize, 30), 2.0);
        assert_eq!(Identity.magnitude(Space::RandAugment, BINS, 3, w, h), None);
        let aa = |n: Name, i| n.magnitude(Space::AutoAugment, AA_BINS, i, w, h).unwrap();
        assert_eq!(aa(Rotate, 9), 30.0);
        assert_eq!(aa(Posterize, 8), 4.0);
    }

    #[test]
    fn draws_are_deterministic_and_cover_the_ops() {
        let p = Policy {
            kind: PolicyKind::RandAugment { n: 2, m: 9 },
            fill: 0,
        };
        let mut seen = std::collections::HashSet::new();
        for i in 0..500 {
            let a = p.draw(&mut SampleRng::new(1, 0, i), 64, 48);
            let b = p.draw(&mut SampleRng::new(1, 0, i), 64, 48);
            assert_eq!(a.ops(), b.ops());
            assert_eq!(a.ops().len(), 2);
            for op in a.ops() {
                seen.insert(format!("{op:?}").split('(').next().unwrap().to_string());
            }
        }
        assert!(seen.contains("Identity") && seen.contains("Pixel") && seen.contains("Warp"));
        let t = Policy {
            kind: PolicyKind::TrivialAugment,
            fill: 0,
        };
        let a = Policy {
            kind: PolicyKind::AutoAugment(AutoPolicy::ImageNet),
            fill: 0,
        };
        let mut lens = [0usize; 3];
        for i in 0..300 {
            assert_eq!(t.draw(&mut SampleRng::new(2, 0, i), 32, 32).ops().len(), 1);
            lens[a.draw(&mut SampleRng::new(2, 0, i), 32, 32).ops().len()] += 1;
        }
        // AutoAugment applies 0, 1 or 2 ops, each sometimes.
        assert!(lens.iter().all(|&k| k > 0), "{lens:?}");
    }

    #[test]
    fn signs_are_both_drawn() {
        let p = Policy {
            kind: PolicyKind::RandAugment { n: 1, m: 30 },
            fill: 0,
        };
        let (mut pos, mut neg) = (0, 0);
        for i in 0..2000 {
            if let [Op::Pixel(Adjust::Brightness(f))] =
                p.draw(&mut SampleRng::new(3, 0, i), 8, 8).ops()
            {
                if *f > 1.0 {
                    pos += 1;
                } else {
                    neg += 1;
                }
            }
        }
        assert!(pos > 30 && neg > 30, "{pos} {neg}");
    }

    #[test]
    fn warps_report_their_matrices() {
        let op = ShearX.op(0.3, 0);
        let Applied::Affine { inverse, forward } = op.applied(20, 10) else {
            panic!("shear is a warp");
        };
        // ShearX about the top-left corner: the top edge stays, x moves with y.
        let (x, y) = forward.apply(5.0, 0.0);
        assert!((x - 5.0).abs() < 1e-9 && y.abs() < 1e-9);
        let (x, _) = forward.apply(0.0, 10.0);
        assert!((x.abs() - 3.0).abs() < 1e-9, "{x}");
        let back = inverse.then(&forward);
        assert!((back.0[0] - 1.0).abs() < 1e-12 && back.0[2].abs() < 1e-9);
        assert_eq!(Invert.op(0.0, 0).applied(20, 10), Applied::Pixel);
    }
}
