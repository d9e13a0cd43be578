//! Pipelines written as spec strings, and their canonical form.
//!
//! # Grammar
//!
//! ```text
//! spec      := "" | "none" | transform ("," transform)*
//! transform := name (":" arg)*
//! arg       := value | key "=" value
//! size      := N | WxH                  (positive integers, at most 65536)
//! range     := a-b                      (numbers; a number may be a fraction, 3/4,
//!                                        or have an exponent, 1e-3)
//! ```
//!
//! In a range, the `-` that parts the two numbers is the first one that is neither a
//! leading sign nor an exponent's: `ratio=1e-3-1e3` is 0.001 to 1000.
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

mod canonical;
mod number;
mod part;
mod table;

use std::fmt;

pub use crate::transform::check::validate;
use crate::{Pipeline, SpecError};

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
            .map(table::parse_part)
            .collect::<Result<Vec<_>, _>>()?;
        Pipeline::new(transforms)
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
    use crate::transform::Transform;

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
        // Exponents in ranges: their minus is not the separator.
        let p =
            Pipeline::parse("rrc:224:scale=5E-2-1:ratio=1e-3-1e3,blur:3:sigma=1e-1-2e0").unwrap();
        assert_eq!(
            p.to_string(),
            "rrc:224:scale=0.05-1:ratio=0.001-1000,blur:3:sigma=0.1-2"
        );
        assert_eq!(Pipeline::parse(&p.to_string()).unwrap(), p);
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
