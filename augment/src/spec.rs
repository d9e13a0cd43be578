//! Pipelines written as spec strings, and their canonical form.
//!
//! # Grammar
//!
//! ```text
//! spec      := "" | "none" | transform ("," transform)*
//! transform := name (":" arg)*
//! arg       := value | key "=" value
//! size      := N | WxH                  (positive integers, at most 65536)
//! range     := a-b                      (numbers; a number may be a fraction, 3/4)
//! ```
//!
//! Names are case-insensitive, spaces around parts are ignored. The transforms:
//!
//! | spec | torchvision equivalent |
//! |------|------------------------|
//! | `resize:N` / `resize:WxH` | `Resize(N)` (shorter side) / `Resize((H, W))` |
//! | `center:N` / `center:WxH` | `CenterCrop` |
//! | `rrc:SIZE[:scale=0.08-1][:ratio=3/4-4/3]` | `RandomResizedCrop` |
//! | `flip[:p=0.5]` | `RandomHorizontalFlip(p)` |
//! | `crop:SIZE[:pad=P]` | `RandomCrop(size, padding=P)` (zero padding) |
//! | `pad:P` | `Pad(P)` (zero padding on every side) |
//! | `jitter[:V][:b=B][:c=C][:s=S][:h=H]` | `ColorJitter(B, C, S, H)`; `V` sets b, c and s |
//! | `gray[:p=P]` | `Grayscale(3)`, or `RandomGrayscale(P)` |
//! | `erase[:p=0.5][:scale=0.02-0.33][:ratio=0.3-3.3]` | `RandomErasing(value=0)` |
//! | `cutout:N` | Cutout with an N x N zero square |
//! | `posterize:B` | `F.posterize(img, B)` |
//! | `solarize:T` | `F.solarize(img, T)` |
//! | `equalize`, `autocontrast`, `invert` | `F.equalize`, `F.autocontrast`, `F.invert` |
//! | `brightness:F`, `contrast:F`, `color:F`, `sharpness:F` | `F.adjust_brightness`, `F.adjust_contrast`, `F.adjust_saturation`, `F.adjust_sharpness` |
//! | `rotate:DEG[:fill=V]` | `F.rotate(img, DEG, fill=V)`: counter-clockwise, nearest |
//! | `affine[:deg=D][:tx=X][:ty=Y][:shear=S][:fill=V]` | `F.affine(img, angle=D, translate=[X, Y], scale=1, shear=[S, 0])`, nearest |
//! | `blur:K[:sigma=S]` | `F.gaussian_blur(img, [K, K], [S, S])`; `sigma=LO-HI` draws S like `GaussianBlur` |
//! | `randaugment[:n=2][:m=9][:fill=V]` | `RandAugment(num_ops=n, magnitude=m)` |
//! | `trivialaugment[:fill=V]` | `TrivialAugmentWide()` |
//! | `autoaugment[:policy=imagenet][:fill=V]` | `AutoAugment(policy)`: imagenet, cifar10, svhn |
//!
//! The ops from `posterize` on follow `torchvision.transforms.v2.functional` on uint8
//! tensors (see [`crate::transform::photometric`], [`crate::transform::affine`],
//! [`crate::transform::blur`] and [`crate::transform::policy`]).
//!
//! Examples: `rrc:224,flip`, `resize:256,center:224`, `crop:32:pad=4,flip`,
//! `rrc:224:scale=0.35-1,flip,jitter:0.4`. The `Display` of a [`Pipeline`] prints the
//! canonical spec (defaults left out), which parses back to the same pipeline.

use std::fmt;

use crate::transform::blur::Blur;
pub use crate::transform::check::validate;
use crate::transform::check::{validate_as, MAX_SIZE};
use crate::transform::color::Jitter;
use crate::transform::erase::Erasing;
use crate::transform::photometric::Adjust;
use crate::transform::policy::{AutoPolicy, Policy, PolicyKind};
use crate::transform::{ResizeTo, Transform};
use crate::{Pipeline, SpecError};

const KNOWN: &str = "resize, center, rrc, flip, crop, pad, jitter, gray, erase, cutout, \
    posterize, solarize, equalize, autocontrast, invert, brightness, contrast, color, sharpness, rotate, \
    affine, blur, randaugment, trivialaugment, autoaugment";
/// RandAugment's default number of ops applied per image (torchvision's `num_ops`).
pub const RANDAUGMENT_N: usize = 2;
/// RandAugment's default magnitude, a bin of `0..31` (torchvision's `magnitude`).
pub const RANDAUGMENT_M: usize = 9;
/// RandomResizedCrop's default range of the crop's area, as a fraction of the image's
/// (torchvision's `scale`).
pub const RRC_SCALE: (f64, f64) = (0.08, 1.0);
/// RandomResizedCrop's default range of the crop's aspect ratio, width over height
/// (torchvision's `ratio`).
pub const RRC_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

impl Pipeline {
    /// Parse a spec such as `rrc:224,flip` (see the [module docs](crate::spec)).
    pub fn parse(spec: &str) -> Result<Pipeline, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() || spec.eq_ignore_ascii_case("none") {
            return Ok(Pipeline::identity());
        }
        let transforms = spec
            .split(',')
            .map(parse_part)
            .collect::<Result<Vec<_>, _>>()?;
        Pipeline::new(transforms)
    }
}

/// One `name:arg:key=value` part, split up.
struct Part<'a> {
    text: &'a str,
    name: String,
    positional: Vec<&'a str>,
    options: Vec<(String, &'a str)>,
}

impl<'a> Part<'a> {
    fn err(&self, reason: impl Into<String>) -> SpecError {
        SpecError {
            part: self.text.to_string(),
            reason: reason.into(),
        }
    }

    fn split(text: &'a str) -> Result<Self, SpecError> {
        let mut fields = text.split(':').map(str::trim);
        let name = fields.next().unwrap_or_default().to_ascii_lowercase();
        let mut part = Part {
            text,
            name,
            positional: Vec::new(),
            options: Vec::new(),
        };
        if part.name.is_empty() {
            return Err(part.err("missing transform name"));
        }
        for f in fields {
            if f.is_empty() {
                return Err(part.err("empty argument (two colons in a row?)"));
            }
            match f.split_once('=') {
                Some((k, v)) => {
                    let k = k.trim().to_ascii_lowercase();
                    if part.options.iter().any(|(seen, _)| *seen == k) {
                        return Err(part.err(format!("option '{k}' given twice")));
                    }
                    part.options.push((k, v.trim()));
                }
                None => part.positional.push(f),
            }
        }
        Ok(part)
    }

    /// Reject options outside `known` and more than `max_positional` plain arguments.
    fn expect(&self, max_positional: usize, known: &[&str]) -> Result<(), SpecError> {
        if self.positional.len() > max_positional {
            let extra = self.positional[max_positional];
            return Err(self.err(match max_positional {
                0 => format!("'{}' takes no argument, got '{extra}'", self.name),
                _ => format!("unexpected extra argument '{extra}'"),
            }));
        }
        for (k, _) in &self.options {
            if !known.contains(&k.as_str()) {
                let known = if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                };
                return Err(self.err(format!(
                    "unknown option '{k}' for '{}' (known: {known})",
                    self.name
                )));
            }
        }
        Ok(())
    }

    fn option(&self, key: &str) -> Option<&'a str> {
        self.options.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    fn size(&self, example: &str) -> Result<(usize, usize, bool), SpecError> {
        let Some(s) = self.positional.first() else {
            return Err(self.err(format!("'{}' needs a size, e.g. {example}", self.name)));
        };
        parse_size(s).map_err(|r| self.err(r))
    }

    fn number(&self, key: &str, default: f64) -> Result<f64, SpecError> {
        match self.option(key) {
            None => Ok(default),
            Some(v) => parse_number(v).map_err(|r| self.err(format!("{key}: {r}"))),
        }
    }

    /// The first plain argument as a number (`what` names it in the error).
    fn value(&self, what: &str, example: &str) -> Result<f64, SpecError> {
        let Some(v) = self.positional.first() else {
            return Err(self.err(format!("'{}' needs {what}, e.g. {example}", self.name)));
        };
        parse_number(v).map_err(|r| self.err(format!("{what}: {r}")))
    }

    /// A whole number: the first plain argument (`key` None) or an option.
    fn count(&self, key: Option<&str>, default: usize, example: &str) -> Result<usize, SpecError> {
        let (what, v) = match key {
            None => ("argument", self.positional.first().copied()),
            Some(k) => (k, self.option(k)),
        };
        match v {
            None if key.is_none() => Err(self.err(format!(
                "'{}' needs a whole number, e.g. {example}",
                self.name
            ))),
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| self.err(format!("{what}: '{v}' is not a whole number"))),
        }
    }

    /// The `fill` option: one value 0..=255 for every channel (default 0).
    fn fill(&self) -> Result<u8, SpecError> {
        match self.option("fill") {
            None => Ok(0),
            Some(v) => v
                .parse::<u8>()
                .map_err(|_| self.err(format!("fill: '{v}' is not a value within 0..=255"))),
        }
    }

    fn range(&self, key: &str, default: (f64, f64)) -> Result<(f64, f64), SpecError> {
        match self.option(key) {
            None => Ok(default),
            Some(v) => parse_range(v).map_err(|r| self.err(format!("{key}: {r}"))),
        }
    }
}

/// `N` (square, `true`) or `WxH` (`false`).
fn parse_size(s: &str) -> Result<(usize, usize, bool), String> {
    let one = |t: &str| -> Result<usize, String> {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| format!("'{t}' is not a size (want N or WxH, e.g. 224 or 64x48)"))?;
        if n == 0 {
            return Err("size must be positive".into());
        }
        if n > MAX_SIZE {
            return Err(format!("size {n} is larger than {MAX_SIZE}"));
        }
        Ok(n)
    };
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((one(w)?, one(h)?, false)),
        None => {
            let n = one(s)?;
            Ok((n, n, true))
        }
    }
}

fn parse_number(s: &str) -> Result<f64, String> {
    let v = match s.split_once('/') {
        Some((a, b)) => {
            let a: f64 = a
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a number"))?;
            let b: f64 = b
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a number"))?;
            a / b
        }
        None => s.parse().map_err(|_| format!("'{s}' is not a number"))?,
    };
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("'{s}' is not a finite number"))
    }
}

fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not a range (want lo-hi, e.g. 0.08-1)"))?;
    let (lo, hi) = (parse_number(a.trim())?, parse_number(b.trim())?);
    if lo > hi {
        return Err(format!("range {lo}-{hi} is reversed"));
    }
    Ok((lo, hi))
}

fn parse_part(text: &str) -> Result<Transform, SpecError> {
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

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.transforms.is_empty() {
            return f.write_str("none");
        }
        for (i, t) in self.transforms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        match Pipeline::parse(spec) {
            Ok(p) => panic!("'{spec}' parsed as {p}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_the_common_specs() {
        let p = Pipeline::parse("rrc:224,flip").unwrap();
        assert_eq!(
            p.transforms(),
            [
                Transform::RandomResizedCrop {
                    width: 224,
                    height: 224,
                    scale: RRC_SCALE,
                    ratio: RRC_RATIO
                },
                Transform::HorizontalFlip { p: 0.5 }
            ]
        );
        let p = Pipeline::parse(" Resize:256 , center:224 ").unwrap();
        assert_eq!(p.output_size(500, 375), (224, 224));
        assert_eq!(p.to_string(), "resize:256,center:224");
        let p = Pipeline::parse("resize:64x48").unwrap();
        assert_eq!(p.output_size(10, 1000), (64, 48));
        assert!(Pipeline::parse("").unwrap().is_identity());
        assert!(Pipeline::parse("none").unwrap().is_identity());
        assert_eq!(Pipeline::identity().to_string(), "none");
    }

    #[test]
    fn options_parse() {
        let p = Pipeline::parse("rrc:224:scale=0.35-1:ratio=3/4-4/3,jitter:0.4:h=0.1").unwrap();
        assert_eq!(
            p.to_string(),
            "rrc:224:scale=0.35-1,jitter:b=0.4:c=0.4:s=0.4:h=0.1"
        );
        let p = Pipeline::parse("crop:32:pad=4,flip:p=1,gray:p=0.2,erase:p=0.25,cutout:8").unwrap();
        assert_eq!(
            p.to_string(),
            "crop:32:pad=4,flip:p=1,gray:p=0.2,erase:p=0.25,cutout:8"
        );
    }

    #[test]
    fn canonical_form_round_trips() {
        for spec in [
            "rrc:224,flip",
            "rrc:32x24:scale=0.5-0.9:ratio=0.5-2,flip:p=0.25",
            "resize:256,center:224",
            "resize:64x48,center:30x20",
            "crop:32:pad=4,flip,jitter:b=0.1:h=0.05,gray,erase,cutout:16",
            "erase:p=1:scale=0.1-0.2:ratio=1-2",
            "posterize:4,solarize:128,equalize,autocontrast,invert",
            "brightness:1.5,contrast:0.5,color:0,sharpness:2",
            "rotate:-30,rotate:12.5:fill=128,affine:deg=10:tx=-3:ty=4.5:shear=20",
            "affine,affine:fill=7,blur:5,blur:9:sigma=2,blur:3:sigma=0.1-2",
            "rrc:224,flip,randaugment,randaugment:n=3:m=14:fill=128",
            "trivialaugment,autoaugment,autoaugment:policy=cifar10,autoaugment:policy=svhn",
            "pad:4,center:30",
        ] {
            let p = Pipeline::parse(spec).unwrap();
            let again = Pipeline::parse(&p.to_string()).unwrap();
            assert_eq!(p, again, "{spec} -> {p}");
        }
    }

    #[test]
    fn every_bad_part_names_itself_and_why() {
        let cases = [
            ("rcc:224", "unknown transform 'rcc' (known: resize"),
            ("rrc", "'rrc' needs a size, e.g. rrc:224"),
            ("resize", "'resize' needs a size"),
            ("center:0", "size must be positive"),
            ("rrc:abc", "'abc' is not a size"),
            ("rrc:224x", "'' is not a size"),
            ("rrc:99999", "larger than 65536"),
            ("rrc:224,,flip", "empty transform"),
            ("rrc:224,", "empty transform"),
            ("rrc:224::", "empty argument"),
            ("rrc:224:scale=1-0.5", "reversed"),
            ("rrc:224:scale=0-1", "0 < lo <= hi <= 1"),
            ("rrc:224:scale=0.1", "not a range"),
            ("rrc:224:ratio=x-2", "'x' is not a number"),
            (
                "rrc:224:foo=1",
                "unknown option 'foo' for 'rrc' (known: scale, ratio)",
            ),
            ("rrc:224:scale=0.1-1:scale=0.2-1", "given twice"),
            ("rrc:224:7", "unexpected extra argument '7'"),
            ("flip:3", "'flip' takes no argument"),
            ("flip:p=2", "p must be within 0..1"),
            ("flip:p=nan", "not a finite number"),
            ("pad", "'pad' needs a pixel count"),
            ("pad:0", "'0' is not a pixel count from 1"),
            ("pad:4x4", "'4x4' is not a pixel count"),
            ("crop:32:pad=-1", "pad: '-1' is not a pixel count"),
            ("jitter:h=0.7", "h must be within 0..0.5"),
            ("jitter:b=-1", "b must be a non-negative number"),
            ("gray:p=1.5", "p must be within 0..1"),
            ("erase:scale=0.1-2", "0 < lo <= hi <= 1"),
            ("cutout", "'cutout' needs a size"),
            ("cutout:4x8", "one side length"),
            (":224", "missing transform name"),
            ("none,flip", "unknown transform 'none'"),
            ("posterize:9", "bits must be within 0..=8, got 9"),
            ("posterize:-1", "'-1' is not a whole number"),
            ("posterize", "'posterize' needs a whole number"),
            ("solarize:256", "threshold must be within 0..=255"),
            ("solarize", "'solarize' needs a threshold"),
            (
                "brightness:-0.5",
                "factor must be a non-negative number, got -0.5",
            ),
            ("contrast", "'contrast' needs a factor, e.g. contrast:1.5"),
            ("color:nan", "not a finite number"),
            ("sharpness:x", "'x' is not a number"),
            ("equalize:3", "'equalize' takes no argument"),
            ("rotate", "'rotate' needs an angle"),
            ("rotate:400", "angle must be within -360..=360"),
            (
                "rotate:30:fill=300",
                "fill: '300' is not a value within 0..=255",
            ),
            (
                "affine:shear=90",
                "shear must be strictly between -90 and 90",
            ),
            ("affine:deg=-361", "deg must be within -360..=360"),
            ("affine:tx=1e9", "tx must be within"),
            ("affine:scale=2", "unknown option 'scale' for 'affine'"),
            ("blur:4", "kernel size must be odd"),
            (
                "blur:5:sigma=0",
                "sigma range 0-0 must satisfy 0 < lo <= hi",
            ),
            ("blur:5:sigma=2-1", "reversed"),
            ("randaugment:m=31", "m must be within 0..=30, got 31"),
            ("randaugment:n=17", "n must be within 0..=16, got 17"),
            ("randaugment:n=two", "n: 'two' is not a whole number"),
            ("randaugment:2", "'randaugment' takes no argument"),
            (
                "autoaugment:policy=coco",
                "unknown policy 'coco' (known: imagenet, cifar10, svhn)",
            ),
            (
                "trivialaugment:m=3",
                "unknown option 'm' for 'trivialaugment'",
            ),
        ];
        for (spec, want) in cases {
            let e = err(spec);
            assert!(e.contains(want), "'{spec}': got '{e}', want '{want}'");
        }
        assert!(err("rcc:224").contains("in 'rcc:224'"));
        assert!(err("rrc:224,autoaugment:policy=x").contains("in 'autoaugment:policy=x'"));
        assert!(err("randaugment:m=99").contains("in 'randaugment:m=99'"));
    }
}
