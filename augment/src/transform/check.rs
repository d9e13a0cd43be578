//! The valid range of every transform's parameters, checked once when a pipeline is
//! built (from a spec string or from `Transform` values).

use crate::transform::blur::MAX_KERNEL;
use crate::transform::photometric::Adjust;
use crate::transform::policy::{PolicyKind, BINS, MAX_OPS};
use crate::transform::{ResizeTo, Transform};
use crate::SpecError;

/// The largest size (side, crop, pad) a transform may ask for.
pub(crate) const MAX_SIZE: usize = 65536;

/// Whether `v` is a number within `-limit..=limit` (false for NaN).
fn within(v: f64, limit: f64) -> bool {
    v.abs() <= limit
}

/// Check a transform's parameters (for transforms built in code).
pub fn validate(t: &Transform) -> Result<(), SpecError> {
    validate_as(t, &t.to_string())
}

pub(crate) fn validate_as(t: &Transform, part: &str) -> Result<(), SpecError> {
    let err = |reason: String| {
        Err(SpecError {
            part: part.to_string(),
            reason,
        })
    };
    let size_ok = |w: usize, h: usize| (1..=MAX_SIZE).contains(&w) && (1..=MAX_SIZE).contains(&h);
    let prob = |name: &str, p: f64| -> Result<(), SpecError> {
        if (0.0..=1.0).contains(&p) {
            Ok(())
        } else {
            err(format!("{name} must be within 0..1, got {p}"))
        }
    };
    let positive_range = |name: &str, r: (f64, f64), max: f64| -> Result<(), SpecError> {
        if r.0 > 0.0 && r.0 <= r.1 && r.1 <= max && r.1.is_finite() {
            Ok(())
        } else if max.is_finite() {
            err(format!(
                "{name} range {}-{} must satisfy 0 < lo <= hi <= {max}",
                r.0, r.1
            ))
        } else {
            err(format!(
                "{name} range {}-{} must satisfy 0 < lo <= hi",
                r.0, r.1
            ))
        }
    };
    match *t {
        Transform::Resize(ResizeTo::Shorter(n)) if !size_ok(n, n) => {
            err(format!("size must be within 1..={MAX_SIZE}"))
        }
        Transform::Resize(ResizeTo::Exact { width, height })
        | Transform::CenterCrop { width, height }
        | Transform::RandomCrop { width, height, .. }
        | Transform::RandomResizedCrop { width, height, .. }
            if !size_ok(width, height) =>
        {
            err(format!("size must be within 1..={MAX_SIZE}"))
        }
        Transform::Cutout { size } if !size_ok(size, size) => {
            err(format!("size must be within 1..={MAX_SIZE}"))
        }
        Transform::Pad(pad) if !(1..=MAX_SIZE).contains(&pad) => {
            err(format!("pad must be within 1..={MAX_SIZE}"))
        }
        Transform::RandomCrop { pad, .. } if pad > MAX_SIZE => {
            err(format!("pad must be at most {MAX_SIZE}"))
        }
        Transform::RandomResizedCrop { scale, ratio, .. } => {
            positive_range("scale", scale, 1.0)?;
            positive_range("ratio", ratio, f64::INFINITY)
        }
        Transform::HorizontalFlip { p } | Transform::Grayscale { p } => prob("p", p),
        Transform::ColorJitter(j) => {
            for (name, v) in [("b", j.brightness), ("c", j.contrast), ("s", j.saturation)] {
                if !(v >= 0.0 && v.is_finite()) {
                    return err(format!("{name} must be a non-negative number, got {v}"));
                }
            }
            if !(0.0..=0.5).contains(&j.hue) {
                return err(format!("h must be within 0..0.5, got {}", j.hue));
            }
            Ok(())
        }
        Transform::RandomErasing(e) => {
            prob("p", e.p)?;
            positive_range("scale", e.scale, 1.0)?;
            positive_range("ratio", e.ratio, f64::INFINITY)
        }
        Transform::Adjust(a) => match a {
            Adjust::Posterize(bits) if bits > 8 => {
                err(format!("bits must be within 0..=8, got {bits}"))
            }
            Adjust::Solarize(t) if !(0.0..=255.0).contains(&t) => {
                err(format!("threshold must be within 0..=255, got {t}"))
            }
            Adjust::Brightness(f)
            | Adjust::Contrast(f)
            | Adjust::Color(f)
            | Adjust::Sharpness(f)
                if !(f >= 0.0 && f.is_finite()) =>
            {
                err(format!("factor must be a non-negative number, got {f}"))
            }
            Adjust::Posterize(_)
            | Adjust::Solarize(_)
            | Adjust::Equalize
            | Adjust::AutoContrast
            | Adjust::Invert
            | Adjust::Brightness(_)
            | Adjust::Contrast(_)
            | Adjust::Color(_)
            | Adjust::Sharpness(_) => Ok(()),
        },
        Transform::Rotate { degrees, .. } if !within(degrees, 360.0) => err(format!(
            "angle must be within -360..=360 degrees, got {degrees}"
        )),
        Transform::Affine {
            degrees,
            translate,
            shear,
            ..
        } => {
            if !within(degrees, 360.0) {
                return err(format!("deg must be within -360..=360, got {degrees}"));
            }
            for (name, t) in [("tx", translate.0), ("ty", translate.1)] {
                if !within(t, MAX_SIZE as f64) {
                    return err(format!(
                        "{name} must be within -{MAX_SIZE}..={MAX_SIZE} pixels, got {t}"
                    ));
                }
            }
            if !(within(shear, 90.0) && shear.abs() != 90.0) {
                return err(format!(
                    "shear must be strictly between -90 and 90 degrees, got {shear}"
                ));
            }
            Ok(())
        }
        Transform::Blur(b) => {
            if b.kernel % 2 == 0 || !(1..=MAX_KERNEL).contains(&b.kernel) {
                return err(format!(
                    "kernel size must be odd and within 1..={MAX_KERNEL}, got {}",
                    b.kernel
                ));
            }
            positive_range("sigma", b.sigma, f64::INFINITY)
        }
        Transform::Policy(p) => match p.kind {
            PolicyKind::RandAugment { n, m } => {
                if n > MAX_OPS {
                    return err(format!("n must be within 0..={MAX_OPS}, got {n}"));
                }
                if m >= BINS {
                    return err(format!("m must be within 0..={}, got {m}", BINS - 1));
                }
                Ok(())
            }
            PolicyKind::TrivialAugment | PolicyKind::AutoAugment(_) => Ok(()),
        },
        // Within range (the guarded arms above took the rest).
        Transform::Resize(_)
        | Transform::CenterCrop { .. }
        | Transform::RandomCrop { .. }
        | Transform::Pad(_)
        | Transform::Cutout { .. }
        | Transform::Rotate { .. } => Ok(()),
    }
}
