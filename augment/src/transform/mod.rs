//! The transforms a pipeline is made of, and how each one changes the image size.
//!
//! Each variant mirrors a torchvision transform (named in its doc) and draws its random
//! numbers from the sample's [`SampleRng`](crate::SampleRng) in a fixed, documented
//! order, so a (seed, epoch, index) triple always yields the same pixels.

pub mod affine;
pub mod blur;
pub(crate) mod check;
pub mod color;
mod cpu;
pub mod crop;
pub mod erase;
pub mod flip;
mod lanes;
pub mod normalize;
pub mod photometric;
pub mod policy;
pub mod resize;

/// Target of a resize.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResizeTo {
    /// The shorter side becomes this long, keeping the aspect ratio
    /// (torchvision `Resize(n)`).
    Shorter(usize),
    /// Exactly this width and height (torchvision `Resize((h, w))`).
    Exact {
        /// Width of the output in pixels (1..=65536).
        width: usize,
        /// Height of the output in pixels (1..=65536).
        height: usize,
    },
}

/// One step of a [`Pipeline`](crate::Pipeline).
#[derive(Clone, Debug, PartialEq)]
pub enum Transform {
    /// torchvision `Resize`, bilinear with antialiasing.
    Resize(ResizeTo),
    /// torchvision `CenterCrop`: zero padding where the crop is larger than the image.
    CenterCrop {
        /// Width of the crop (the output) in pixels (1..=65536).
        width: usize,
        /// Height of the crop (the output) in pixels (1..=65536).
        height: usize,
    },
    /// torchvision `RandomResizedCrop`, bilinear with antialiasing. Draws, per attempt:
    /// scale, then log-ratio, then (if the box fits) top, then left.
    RandomResizedCrop {
        /// Width of the output in pixels (1..=65536).
        width: usize,
        /// Height of the output in pixels (1..=65536).
        height: usize,
        /// Range of the crop's area as a fraction of the image's, `0 < lo <= hi <= 1`
        /// ([`RRC_SCALE`](crate::spec::RRC_SCALE) where a spec leaves it out).
        scale: (f64, f64),
        /// Range of the crop's aspect ratio, width over height, drawn log-uniformly
        /// ([`RRC_RATIO`](crate::spec::RRC_RATIO) where a spec leaves it out).
        ratio: (f64, f64),
    },
    /// torchvision `RandomHorizontalFlip(p)`. Draws one number.
    HorizontalFlip {
        /// Probability of flipping, 0..=1 (0.5 where a spec leaves it out).
        p: f64,
    },
    /// torchvision `RandomCrop(size, padding=pad)`: zero-pad every side by `pad`, then
    /// crop at a random place. Draws top, then left.
    RandomCrop {
        /// Width of the crop (the output) in pixels (1..=65536).
        width: usize,
        /// Height of the crop (the output) in pixels (1..=65536).
        height: usize,
        /// Zero pixels added on every side before cropping (0..=65536).
        pad: usize,
    },
    /// torchvision `Pad(n)`: `n` zero pixels on every side.
    Pad(usize),
    /// torchvision `ColorJitter(brightness, contrast, saturation, hue)`. See
    /// [`color`] for the draw order.
    ColorJitter(color::Jitter),
    /// torchvision `RandomGrayscale(p)` (`Grayscale` when p = 1); the channel count is
    /// kept. Draws one number unless p = 1.
    Grayscale {
        /// Probability of turning the image gray, 0..=1 (1 always does).
        p: f64,
    },
    /// torchvision `RandomErasing(p, scale, ratio, value=0)`. See [`erase`].
    RandomErasing(erase::Erasing),
    /// Cutout (DeVries & Taylor 2017): a `size` x `size` zero square centred on a
    /// uniformly drawn pixel, clipped at the borders. Draws centre row, then column.
    Cutout {
        /// Side of the square in pixels (1..=65536).
        size: usize,
    },
    /// One of torchvision v2's photometric ops on uint8 tensors (`F.posterize`,
    /// `F.solarize`, `F.equalize`, `F.autocontrast`, `F.invert`, `F.adjust_brightness`,
    /// `F.adjust_contrast`, `F.adjust_saturation`, `F.adjust_sharpness`). No draws.
    Adjust(photometric::Adjust),
    /// `F.rotate(img, degrees, NEAREST, fill=fill)`: counter-clockwise about the centre,
    /// same size. No draws.
    Rotate {
        /// Angle in degrees, counter-clockwise (-360..=360).
        degrees: f64,
        /// Value of the pixels the rotation uncovers, in every channel.
        fill: u8,
    },
    /// `F.affine(img, angle=degrees, translate, scale=1, shear=[shear, 0], NEAREST,
    /// fill=fill)`: `degrees` clockwise, as torchvision's `affine`. No draws.
    Affine {
        /// Rotation angle in degrees, clockwise (-360..=360).
        degrees: f64,
        /// Shift (x, y) in pixels, applied after the rotation and shear.
        translate: (f64, f64),
        /// Shear along x in degrees, strictly between -90 and 90.
        shear: f64,
        /// Value of the pixels the warp uncovers, in every channel.
        fill: u8,
    },
    /// `F.gaussian_blur(img, [k, k], [s, s])`; a sigma range draws s (one draw).
    Blur(blur::Blur),
    /// RandAugment, TrivialAugmentWide or AutoAugment; see [`policy`] for the draws.
    Policy(policy::Policy),
}

impl Transform {
    /// Whether this step changes the image size (and so needs a fresh buffer).
    pub fn is_geometric(&self) -> bool {
        match self {
            Transform::Resize(_)
            | Transform::CenterCrop { .. }
            | Transform::RandomResizedCrop { .. }
            | Transform::RandomCrop { .. }
            | Transform::Pad(_) => true,
            Transform::HorizontalFlip { .. }
            | Transform::ColorJitter(_)
            | Transform::Grayscale { .. }
            | Transform::RandomErasing(_)
            | Transform::Cutout { .. }
            | Transform::Adjust(_)
            | Transform::Rotate { .. }
            | Transform::Affine { .. }
            | Transform::Blur(_)
            | Transform::Policy(_) => false,
        }
    }

    /// (width, height) after this step for an input of (width, height).
    pub fn output_size(&self, w: usize, h: usize) -> (usize, usize) {
        match *self {
            Transform::Resize(to) => resize::target_size(to, w, h),
            Transform::CenterCrop { width, height }
            | Transform::RandomResizedCrop { width, height, .. }
            | Transform::RandomCrop { width, height, .. } => (width, height),
            Transform::Pad(n) => (
                w.saturating_add(n.saturating_mul(2)),
                h.saturating_add(n.saturating_mul(2)),
            ),
            Transform::HorizontalFlip { .. }
            | Transform::ColorJitter(_)
            | Transform::Grayscale { .. }
            | Transform::RandomErasing(_)
            | Transform::Cutout { .. }
            | Transform::Adjust(_)
            | Transform::Rotate { .. }
            | Transform::Affine { .. }
            | Transform::Blur(_)
            | Transform::Policy(_) => (w, h),
        }
    }

    /// The warp of a `rotate` or `affine` step (same size, fixed parameters).
    pub fn warp(&self) -> Option<affine::Affine> {
        match *self {
            Transform::Rotate { degrees, fill } => Some(affine::Affine::rotate(degrees, fill)),
            Transform::Affine {
                degrees,
                translate,
                shear,
                fill,
            } => Some(affine::Affine {
                angle: degrees,
                translate,
                shear: (shear, 0.0),
                center: None,
                fill,
            }),
            Transform::Resize(_)
            | Transform::CenterCrop { .. }
            | Transform::RandomResizedCrop { .. }
            | Transform::HorizontalFlip { .. }
            | Transform::RandomCrop { .. }
            | Transform::Pad(_)
            | Transform::ColorJitter(_)
            | Transform::Grayscale { .. }
            | Transform::RandomErasing(_)
            | Transform::Cutout { .. }
            | Transform::Adjust(_)
            | Transform::Blur(_)
            | Transform::Policy(_) => None,
        }
    }
}
