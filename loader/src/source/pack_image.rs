//! How `pack` stores each image: resized to a longest side and re-encoded (raw pixels,
//! JPEG, PNG), or its bytes kept as they are; and how a sample's fields follow a resize.

use std::str::FromStr;

use stoker_augment::decode::{self, Format};
use stoker_augment::transform::resize::resize_whole;
use stoker_augment::{Image, ImageView, DEFAULT_MAX_PIXELS};

use super::why::Why;
use super::RecordKind;
use crate::sample::{Annotation, MaskData};
use crate::setting::ParseSettingError;

/// The JPEG quality an image stored with `keep` is written at when it had to be
/// resized (FFCV's default quality).
pub const KEEP_JPEG_QUALITY: u8 = 90;

/// How a packed image is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// The source's bytes, unchanged unless the image is resized (then re-encoded in
    /// its own format: JPEG at [`KEEP_JPEG_QUALITY`], PNG, raw pixels; WebP, which
    /// is not written here, as JPEG).
    #[default]
    Keep,
    /// u8 HWC pixels with their shape, read without decoding.
    Raw,
    /// JPEG at this quality (1 to 100).
    Jpeg(u8),
    /// Lossless PNG.
    Png,
}

impl FromStr for Encoding {
    type Err = ParseSettingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "keep" => Ok(Encoding::Keep),
            "raw" => Ok(Encoding::Raw),
            "png" => Ok(Encoding::Png),
            _ => match t.strip_prefix("jpeg:").or_else(|| t.strip_prefix("jpg:")) {
                Some(q) => q
                    .parse::<u8>()
                    .ok()
                    .filter(|q| (1..=100).contains(q))
                    .map(Encoding::Jpeg)
                    .ok_or_else(|| ParseSettingError::JpegQuality(q.to_string())),
                None => Err(ParseSettingError::Encoding(s.to_string())),
            },
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Encoding::Keep => f.write_str("keep"),
            Encoding::Raw => f.write_str("raw"),
            Encoding::Jpeg(q) => write!(f, "jpeg:{q}"),
            Encoding::Png => f.write_str("png"),
        }
    }
}

/// What `pack` does to each image: the defaults copy every record's bytes as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackOptions {
    /// Images whose longer side exceeds this are resized to it, keeping their aspect
    /// ratio (as PIL's `Image.thumbnail` sizes them).
    pub max_side: Option<u32>,
    /// How each image is stored.
    pub encoding: Encoding,
}

impl PackOptions {
    /// The options, checked: a `max_side` of 0 fits no image.
    pub fn new(max_side: Option<u32>, encoding: Encoding) -> Result<Self, ParseSettingError> {
        if max_side == Some(0) {
            return Err(ParseSettingError::MaxSide(0));
        }
        Ok(PackOptions { max_side, encoding })
    }

    /// True when every record is copied as it is (today's pack, byte for byte).
    pub fn keeps_bytes(&self) -> bool {
        self.max_side.is_none() && self.encoding == Encoding::Keep
    }
}

/// The size PIL's `Image.thumbnail((n, n))` gives a `w` x `h` image, or `None` when it
/// fits already. The arithmetic is Python's, in f64, so the sizes are PIL's exactly.
pub fn thumbnail_size(w: usize, h: usize, n: usize) -> Option<(usize, usize)> {
    if n >= w && n >= h {
        return None;
    }
    let (x, y) = (n as f64, n as f64);
    let aspect = w as f64 / h as f64;
    // PIL's round_aspect: floor or ceil, whichever keeps the aspect closer (floor on
    // a tie), and at least 1.
    let round = |v: f64, key: &dyn Fn(f64) -> f64| -> usize {
        let (lo, hi) = (v.floor(), v.ceil());
        let pick = if key(hi) < key(lo) { hi } else { lo };
        pick.max(1.0) as usize
    };
    if x / y >= aspect {
        let nw = round(y * aspect, &|k| (aspect - k / y).abs());
        Some((nw, n))
    } else {
        let nh = round(x / aspect, &|k| {
            if k == 0.0 {
                0.0
            } else {
                (aspect - x / k).abs()
            }
        });
        Some((n, nh))
    }
}

/// An image's size before and after [`store`] resized it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resized {
    /// Width and height of the source image.
    pub from: (usize, usize),
    /// Width and height as stored.
    pub to: (usize, usize),
}

/// Stores one image as `opts` say: its bytes (encoded, or raw pixels of `kind`) become
/// `out`'s, and the kind returned is what `out` holds. Never called with options that
/// keep bytes (the caller copies them).
pub(crate) fn store(
    opts: &PackOptions,
    kind: RecordKind,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(RecordKind, Option<Resized>), Why> {
    out.clear();
    let (w, h, format) = match kind {
        RecordKind::Encoded => {
            let (w, h) = decode::probe(bytes).map_err(Why::of)?;
            (w, h, Some(decode::sniff(bytes).map_err(Why::of)?))
        }
        RecordKind::Raw { width, height, .. } => (width as usize, height as usize, None),
    };
    let target = opts.max_side.and_then(|n| thumbnail_size(w, h, n as usize));
    if target.is_none() && opts.encoding == Encoding::Keep {
        out.extend_from_slice(bytes);
        return Ok((kind, None));
    }
    let decoded;
    let src = match kind {
        // Three channels: the loader's batches default to RGB, and one channel count
        // for every record is what raw records need.
        RecordKind::Encoded => {
            decoded = decode::decode(bytes, 3).map_err(Why::of)?;
            decoded.view()
        }
        RecordKind::Raw {
            width,
            height,
            channels,
        } => ImageView::new(width as usize, height as usize, channels as usize, bytes).ok_or_else(
            || {
                format!(
                    "{} bytes, not {width}x{height}x{channels} pixels",
                    bytes.len()
                )
            },
        )?,
    };
    let resized_img: Image;
    let img = match target {
        Some((tw, th)) => {
            resized_img = resize_whole(src, tw, th).map_err(Why::of)?;
            resized_img.view()
        }
        None => src,
    };
    let encoding = match (opts.encoding, format) {
        (Encoding::Keep, Some(Format::Png)) => Encoding::Png,
        (Encoding::Keep, Some(_)) => Encoding::Jpeg(KEEP_JPEG_QUALITY),
        (Encoding::Keep, None) => Encoding::Raw,
        (e, _) => e,
    };
    let stored = encode(img, encoding, out)?;
    Ok((stored, target.map(|to| Resized { from: (w, h), to })))
}

/// Writes `img` into `out` as `encoding` says; the kind of what was written.
fn encode(img: ImageView<'_>, encoding: Encoding, out: &mut Vec<u8>) -> Result<RecordKind, Why> {
    use image::ImageEncoder;
    let (w, h, c) = (img.width, img.height, img.channels);
    let dim =
        |v: usize| u32::try_from(v).map_err(|_| Why::from(format!("an image {v} pixels across")));
    let color = match c {
        1 => image::ExtendedColorType::L8,
        2 => image::ExtendedColorType::La8,
        3 => image::ExtendedColorType::Rgb8,
        4 => image::ExtendedColorType::Rgba8,
        c => return Err(format!("{c} channels cannot be stored").into()),
    };
    match encoding {
        Encoding::Raw | Encoding::Keep => {
            out.extend_from_slice(img.data);
            Ok(RecordKind::Raw {
                width: dim(w)?,
                height: dim(h)?,
                channels: c as u8,
            })
        }
        Encoding::Png => {
            image::codecs::png::PngEncoder::new(&mut *out)
                .write_image(img.data, dim(w)?, dim(h)?, color)
                .map_err(|e| Why::because(format!("encoding {w}x{h}x{c} as PNG: {e}"), e))?;
            Ok(RecordKind::Encoded)
        }
        Encoding::Jpeg(q) => {
            if matches!(c, 2 | 4) {
                return Err(format!("{c} channels cannot be stored as JPEG").into());
            }
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut *out, q)
                .write_image(img.data, dim(w)?, dim(h)?, color)
                .map_err(|e| Why::because(format!("encoding {w}x{h}x{c} as JPEG: {e}"), e))?;
            Ok(RecordKind::Encoded)
        }
    }
}

/// Moves a sample's fields with its image's resize: boxes and keypoints scaled (x by
/// new width / old width, y by new height / old height), the mask resized
/// nearest-neighbour to the image's new size (classes are never blended).
pub(crate) fn resize_fields(ann: &mut Annotation, r: Resized) -> Result<(), Why> {
    let sx = r.to.0 as f64 / r.from.0 as f64;
    let sy = r.to.1 as f64 / r.from.1 as f64;
    let (fx, fy) = (
        |v: f32| (v as f64 * sx) as f32,
        |v: f32| (v as f64 * sy) as f32,
    );
    for b in &mut ann.boxes {
        *b = [fx(b[0]), fy(b[1]), fx(b[2]), fy(b[3])];
    }
    for p in ann.keypoints.chunks_exact_mut(3) {
        p[0] = fx(p[0]);
        p[1] = fy(p[1]);
    }
    let (mut data, mw, mh) = match ann.mask.take() {
        None => return Ok(()),
        Some(MaskData::Raw {
            width,
            height,
            data,
        }) => (data, width, height),
        Some(MaskData::Png(bytes)) => {
            let mut data = Vec::new();
            let (w, h) = stoker_augment::mask::decode_mask(&bytes, &mut data, DEFAULT_MAX_PIXELS)
                .map_err(|e| Why::because(format!("mask: {e}"), e))?;
            (data, w, h)
        }
    };
    let (tw, th) = r.to;
    data = nearest(&data, mw, mh, tw, th);
    ann.mask = Some(MaskData::Raw {
        width: tw,
        height: th,
        data,
    });
    Ok(())
}

/// PIL's NEAREST: each output pixel takes the source pixel under its centre.
fn nearest(src: &[u8], w: usize, h: usize, tw: usize, th: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(tw * th);
    let xs: Vec<usize> = (0..tw)
        .map(|x| (((x as f64 + 0.5) * w as f64 / tw as f64) as usize).min(w - 1))
        .collect();
    for y in 0..th {
        let sy = (((y as f64 + 0.5) * h as f64 / th as f64) as usize).min(h - 1);
        let row = &src[sy * w..sy * w + w];
        out.extend(xs.iter().map(|&x| row[x]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumbnail_sizes_are_pils() {
        // Values from Pillow 11's Image.thumbnail((n, n)).
        assert_eq!(thumbnail_size(500, 375, 256), Some((256, 192)));
        assert_eq!(thumbnail_size(375, 500, 256), Some((192, 256)));
        assert_eq!(thumbnail_size(333, 500, 100), Some((67, 100)));
        assert_eq!(thumbnail_size(1000, 3, 10), Some((10, 1)));
        assert_eq!(thumbnail_size(256, 100, 256), None);
        assert_eq!(thumbnail_size(40, 40, 32), Some((32, 32)));
    }

    #[test]
    fn encodings_parse_and_bad_ones_are_named() {
        assert_eq!("raw".parse(), Ok(Encoding::Raw));
        assert_eq!("JPEG:90".parse(), Ok(Encoding::Jpeg(90)));
        assert_eq!("png".parse(), Ok(Encoding::Png));
        assert_eq!("keep".parse(), Ok(Encoding::Keep));
        let e = "jpeg:0".parse::<Encoding>().unwrap_err().to_string();
        assert!(e.contains("'0'") && e.contains("1 to 100"), "{e}");
        let e = "jpeg:101".parse::<Encoding>().unwrap_err().to_string();
        assert!(e.contains("'101'"), "{e}");
        let e = "webp".parse::<Encoding>().unwrap_err().to_string();
        assert!(
            e.contains("'webp'") && e.contains("keep, raw, png or jpeg:Q"),
            "{e}"
        );
        let e = PackOptions::new(Some(0), Encoding::Raw)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn nearest_keeps_classes_and_picks_centres() {
        // 4x2 -> 2x1: centres fall on source columns 1 and 3 of row 1.
        let m = [0, 1, 2, 3, 4, 5, 6, 7];
        assert_eq!(nearest(&m, 4, 2, 2, 1), vec![5, 7]);
    }

    #[test]
    fn fields_follow_the_resize() {
        let mut ann = Annotation {
            boxes: vec![[10.0, 20.0, 100.0, 50.0]],
            keypoints: vec![50.0, 25.0, 2.0],
            mask: Some(MaskData::Raw {
                width: 4,
                height: 2,
                data: vec![0, 1, 2, 3, 4, 5, 6, 7],
            }),
            ..Annotation::default()
        };
        let r = Resized {
            from: (200, 100),
            to: (100, 25),
        };
        resize_fields(&mut ann, r).unwrap();
        assert_eq!(ann.boxes, vec![[5.0, 5.0, 50.0, 12.5]]);
        assert_eq!(ann.keypoints, vec![25.0, 6.25, 2.0]);
        let Some(MaskData::Raw {
            width,
            height,
            data,
        }) = &ann.mask
        else {
            panic!("mask {:?}", ann.mask)
        };
        assert_eq!((*width, *height, data.len()), (100, 25, 2500));
    }
}
