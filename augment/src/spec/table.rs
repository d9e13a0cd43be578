//! The transform table: each spec name, the arguments it takes and the
//! [`Transform`] it builds, policies included.

use super::number::{parse_number, parse_range};
use super::part::Part;
use super::{RANDAUGMENT_M, RANDAUGMENT_N, RRC_RATIO, RRC_SCALE};
use crate::transform::blur::Blur;
use crate::transform::check::{validate_as, MAX_SIZE};
use crate::transform::color::Jitter;
use crate::transform::erase::Erasing;
use crate::transform::photometric::Adjust;
use crate::transform::policy::{AutoPolicy, Policy, PolicyKind};
use crate::transform::{ResizeTo, Transform};
use crate::SpecError;

const KNOWN: &str = "resize, center, rrc, flip, crop, pad, jitter, gray, erase, cutout, \
    posterize, solarize, equalize, autocontrast, invert, brightness, contrast, color, sharpness, rotate, \
    affine, blur, randaugment, trivialaugment, autoaugment";

/// One part of a spec (`rrc:224:scale=0.35-1`) as the [`Transform`] it names, checked.
pub(super) fn parse_part(text: &str) -> Result<Transform, SpecError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SpecError {
            part: String::new(),
            reason: "empty transform (two commas in a row, or a trailing comma?)".into(),
        });
    }
    let p = Part::split(text)?;
    let t = match p.name.as_str() {
        "resize" => {
            p.expect(1, &[])?;
            let (w, h, square) = p.size("resize:256 or resize:64x48")?;
            Transform::Resize(if square {
                ResizeTo::Shorter(w)
            } else {
                ResizeTo::Exact {
                    width: w,
                    height: h,
                }
            })
        }
        "center" | "centercrop" => {
            p.expect(1, &[])?;
            let (width, height, _) = p.size("center:224")?;
            Transform::CenterCrop { width, height }
        }
        "rrc" => {
            p.expect(1, &["scale", "ratio"])?;
            let (width, height, _) = p.size("rrc:224")?;
            Transform::RandomResizedCrop {
                width,
                height,
                scale: p.range("scale", RRC_SCALE)?,
                ratio: p.range("ratio", RRC_RATIO)?,
            }
        }
        "flip" | "hflip" => {
            p.expect(0, &["p"])?;
            Transform::HorizontalFlip {
                p: p.number("p", 0.5)?,
            }
        }
        "crop" => {
            p.expect(1, &["pad"])?;
            let (width, height, _) = p.size("crop:32 or crop:32:pad=4")?;
            let pad = match p.option("pad") {
                None => 0,
                Some(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n <= MAX_SIZE)
                    .ok_or_else(|| p.err(format!("pad: '{v}' is not a pixel count")))?,
            };
            Transform::RandomCrop { width, height, pad }
        }
        "jitter" => {
            p.expect(1, &["b", "c", "s", "h"])?;
            let all = match p.positional.first() {
                None => 0.0,
                Some(v) => parse_number(v).map_err(|r| p.err(r))?,
            };
            Transform::ColorJitter(Jitter {
                brightness: p.number("b", all)?,
                contrast: p.number("c", all)?,
                saturation: p.number("s", all)?,
                hue: p.number("h", 0.0)?,
            })
        }
        "gray" | "grayscale" => {
            p.expect(0, &["p"])?;
            Transform::Grayscale {
                p: p.number("p", 1.0)?,
            }
        }
        "erase" => {
            p.expect(0, &["p", "scale", "ratio"])?;
            let d = Erasing::default();
            Transform::RandomErasing(Erasing {
                p: p.number("p", d.p)?,
                scale: p.range("scale", d.scale)?,
                ratio: p.range("ratio", d.ratio)?,
            })
        }
        "cutout" => {
            p.expect(1, &[])?;
            let (w, h, square) = p.size("cutout:16")?;
            if !square {
                return Err(p.err(format!("cutout takes one side length, got {w}x{h}")));
            }
            Transform::Cutout { size: w }
        }
        "posterize" => {
            p.expect(1, &[])?;
            let bits = p.count(None, 0, "posterize:4")?;
            if bits > 8 {
                return Err(p.err(format!("bits must be within 0..=8, got {bits}")));
            }
            Transform::Adjust(Adjust::Posterize(bits as u8))
        }
        "solarize" => {
            p.expect(1, &[])?;
            Transform::Adjust(Adjust::Solarize(p.value("a threshold", "solarize:128")?))
        }
        "equalize" => {
            p.expect(0, &[])?;
            Transform::Adjust(Adjust::Equalize)
        }
        "autocontrast" => {
            p.expect(0, &[])?;
            Transform::Adjust(Adjust::AutoContrast)
        }
        "invert" => {
            p.expect(0, &[])?;
            Transform::Adjust(Adjust::Invert)
        }
        "brightness" | "contrast" | "color" | "saturation" | "sharpness" => {
            p.expect(1, &[])?;
            let example = format!("{}:1.5", p.name);
            let f = p.value("a factor", &example)?;
            Transform::Adjust(match p.name.as_str() {
                "brightness" => Adjust::Brightness(f),
                "contrast" => Adjust::Contrast(f),
                "sharpness" => Adjust::Sharpness(f),
                _ => Adjust::Color(f),
            })
        }
        "rotate" => {
            p.expect(1, &["fill"])?;
            Transform::Rotate {
                degrees: p.value("an angle in degrees", "rotate:30")?,
                fill: p.fill()?,
            }
        }
        "affine" => {
            p.expect(0, &["deg", "tx", "ty", "shear", "fill"])?;
            Transform::Affine {
                degrees: p.number("deg", 0.0)?,
                translate: (p.number("tx", 0.0)?, p.number("ty", 0.0)?),
                shear: p.number("shear", 0.0)?,
                fill: p.fill()?,
            }
        }
        "blur" => {
            p.expect(1, &["sigma"])?;
            let kernel = p.count(None, 0, "blur:5:sigma=1.5")?;
            let sigma = match p.option("sigma") {
                None => {
                    let s = Blur::default_sigma(kernel);
                    (s, s)
                }
                Some(v) => match parse_number(v) {
                    Ok(s) => (s, s),
                    Err(_) => parse_range(v).map_err(|r| p.err(format!("sigma: {r}")))?,
                },
            };
            Transform::Blur(Blur { kernel, sigma })
        }
        "randaugment" => {
            p.expect(0, &["n", "m", "fill"])?;
            Transform::Policy(Policy {
                kind: PolicyKind::RandAugment {
                    n: p.count(Some("n"), RANDAUGMENT_N, "")?,
                    m: p.count(Some("m"), RANDAUGMENT_M, "")?,
                },
                fill: p.fill()?,
            })
        }
        "trivialaugment" | "trivialaugmentwide" => {
            p.expect(0, &["fill"])?;
            Transform::Policy(Policy {
                kind: PolicyKind::TrivialAugment,
                fill: p.fill()?,
            })
        }
        "autoaugment" => {
            p.expect(0, &["policy", "fill"])?;
            let policy = match p.option("policy") {
                None => AutoPolicy::ImageNet,
                Some(v) => AutoPolicy::parse(v).ok_or_else(|| {
                    p.err(format!(
                        "unknown policy '{v}' (known: {})",
                        AutoPolicy::NAMES
                    ))
                })?,
            };
            Transform::Policy(Policy {
                kind: PolicyKind::AutoAugment(policy),
                fill: p.fill()?,
            })
        }
        "pad" => {
            p.expect(1, &[])?;
            let Some(v) = p.positional.first() else {
                return Err(p.err("'pad' needs a pixel count, e.g. pad:4"));
            };
            let n = v
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=MAX_SIZE).contains(&n))
                .ok_or_else(|| p.err(format!("'{v}' is not a pixel count from 1 to {MAX_SIZE}")))?;
            Transform::Pad(n)
        }
        other => {
            return Err(p.err(format!("unknown transform '{other}' (known: {KNOWN})")));
        }
    };
    validate_as(&t, text)?;
    Ok(t)
}
