//! The canonical form of a transform: its spec with the defaults left out, which
//! parses back to the same transform.

use std::fmt;

use super::{RANDAUGMENT_M, RANDAUGMENT_N, RRC_RATIO, RRC_SCALE};
use crate::transform::blur::Blur;
use crate::transform::erase::Erasing;
use crate::transform::photometric::Adjust;
use crate::transform::policy::{AutoPolicy, PolicyKind};
use crate::transform::{ResizeTo, Transform};

fn write_size(f: &mut fmt::Formatter<'_>, w: usize, h: usize) -> fmt::Result {
    if w == h {
        write!(f, "{w}")
    } else {
        write!(f, "{w}x{h}")
    }
}

fn write_range(
    f: &mut fmt::Formatter<'_>,
    key: &str,
    r: (f64, f64),
    default: (f64, f64),
) -> fmt::Result {
    if r != default {
        write!(f, ":{key}={}-{}", r.0, r.1)?;
    }
    Ok(())
}

fn write_fill(f: &mut fmt::Formatter<'_>, fill: u8) -> fmt::Result {
    if fill != 0 {
        write!(f, ":fill={fill}")?;
    }
    Ok(())
}

impl fmt::Display for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Transform::Resize(ResizeTo::Shorter(n)) => write!(f, "resize:{n}"),
            Transform::Resize(ResizeTo::Exact { width, height }) => {
                write!(f, "resize:{width}x{height}")
            }
            Transform::CenterCrop { width, height } => {
                f.write_str("center:")?;
                write_size(f, width, height)
            }
            Transform::RandomResizedCrop {
                width,
                height,
                scale,
                ratio,
            } => {
                f.write_str("rrc:")?;
                write_size(f, width, height)?;
                write_range(f, "scale", scale, RRC_SCALE)?;
                write_range(f, "ratio", ratio, RRC_RATIO)
            }
            Transform::HorizontalFlip { p } => {
                f.write_str("flip")?;
                if p != 0.5 {
                    write!(f, ":p={p}")?;
                }
                Ok(())
            }
            Transform::RandomCrop { width, height, pad } => {
                f.write_str("crop:")?;
                write_size(f, width, height)?;
                if pad > 0 {
                    write!(f, ":pad={pad}")?;
                }
                Ok(())
            }
            Transform::Pad(n) => write!(f, "pad:{n}"),
            Transform::ColorJitter(j) => {
                f.write_str("jitter")?;
                for (k, v) in [
                    ("b", j.brightness),
                    ("c", j.contrast),
                    ("s", j.saturation),
                    ("h", j.hue),
                ] {
                    if v != 0.0 {
                        write!(f, ":{k}={v}")?;
                    }
                }
                Ok(())
            }
            Transform::Grayscale { p } => {
                f.write_str("gray")?;
                if p != 1.0 {
                    write!(f, ":p={p}")?;
                }
                Ok(())
            }
            Transform::RandomErasing(e) => {
                let d = Erasing::default();
                f.write_str("erase")?;
                if e.p != d.p {
                    write!(f, ":p={}", e.p)?;
                }
                write_range(f, "scale", e.scale, d.scale)?;
                write_range(f, "ratio", e.ratio, d.ratio)
            }
            Transform::Cutout { size } => write!(f, "cutout:{size}"),
            Transform::Adjust(a) => match a {
                Adjust::Posterize(b) => write!(f, "posterize:{b}"),
                Adjust::Solarize(t) => write!(f, "solarize:{t}"),
                Adjust::Equalize => f.write_str("equalize"),
                Adjust::AutoContrast => f.write_str("autocontrast"),
                Adjust::Invert => f.write_str("invert"),
                Adjust::Brightness(v) => write!(f, "brightness:{v}"),
                Adjust::Contrast(v) => write!(f, "contrast:{v}"),
                Adjust::Color(v) => write!(f, "color:{v}"),
                Adjust::Sharpness(v) => write!(f, "sharpness:{v}"),
            },
            Transform::Rotate { degrees, fill } => {
                write!(f, "rotate:{degrees}")?;
                write_fill(f, fill)
            }
            Transform::Affine {
                degrees,
                translate,
                shear,
                fill,
            } => {
                f.write_str("affine")?;
                for (k, v) in [
                    ("deg", degrees),
                    ("tx", translate.0),
                    ("ty", translate.1),
                    ("shear", shear),
                ] {
                    if v != 0.0 {
                        write!(f, ":{k}={v}")?;
                    }
                }
                write_fill(f, fill)
            }
            Transform::Blur(b) => {
                write!(f, "blur:{}", b.kernel)?;
                let d = Blur::default_sigma(b.kernel);
                if b.sigma.0 != b.sigma.1 {
                    write!(f, ":sigma={}-{}", b.sigma.0, b.sigma.1)
                } else if b.sigma.0 != d {
                    write!(f, ":sigma={}", b.sigma.0)
                } else {
                    Ok(())
                }
            }
            Transform::Policy(p) => {
                match p.kind {
                    PolicyKind::RandAugment { n, m } => {
                        f.write_str("randaugment")?;
                        if n != RANDAUGMENT_N {
                            write!(f, ":n={n}")?;
                        }
                        if m != RANDAUGMENT_M {
                            write!(f, ":m={m}")?;
                        }
                    }
                    PolicyKind::TrivialAugment => f.write_str("trivialaugment")?,
                    PolicyKind::AutoAugment(a) => {
                        f.write_str("autoaugment")?;
                        if a != AutoPolicy::ImageNet {
                            write!(f, ":policy={}", a.name())?;
                        }
                    }
                }
                write_fill(f, p.fill)
            }
        }
    }
}
