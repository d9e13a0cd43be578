//! Decode JPEG and PNG bytes into u8 HWC with 1 or 3 channels.
//!
//! JPEG goes through `zune-jpeg` directly (fast, and it can write into a buffer we
//! keep); PNG goes through the `image` crate's PNG decoder, also into our buffer.
//! Colour handling follows what a PyTorch user gets from `PIL.Image.open(f).convert(..)`:
//! alpha is dropped (not composited), gray is replicated to RGB, RGB becomes gray with
//! PIL's rounded ITU-R 601-2 luma, and 16-bit samples keep their high byte. EXIF
//! orientation is not applied (neither does torchvision's `ImageFolder`).

use std::io::Cursor;

use image::{ColorType, ImageDecoder};
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use crate::contain::contained;
use crate::convert::{convert_in_place, Native};
use crate::limits::{check_channels, check_size};
use crate::{AugmentError, Image};

pub use crate::convert::luma;
pub use crate::limits::DEFAULT_MAX_PIXELS;

/// The encoded formats we recognise by their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// JPEG: starts with `FF D8 FF`.
    Jpeg,
    /// PNG: starts with the 8-byte PNG signature.
    Png,
    /// WebP: a RIFF container of type `WEBP`.
    WebP,
}

const PNG_MAGIC: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Which format `bytes` hold, judged by the signature only.
pub fn sniff(bytes: &[u8]) -> Result<Format, AugmentError> {
    if bytes.is_empty() {
        return Err(AugmentError::Empty);
    }
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        return Ok(Format::Jpeg);
    }
    if bytes.starts_with(&PNG_MAGIC) {
        return Ok(Format::Png);
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Ok(Format::WebP);
    }
    Err(AugmentError::UnknownFormat {
        head: describe_head(bytes),
    })
}

/// The first bytes in hex and as text, so that "this is an HTML page" or "this is a
/// GIF" is visible at a glance in the error.
fn describe_head(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(8)];
    let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = head
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    format!("{} \"{}\"", hex.join(" "), text)
}

/// Width and height from the header alone, refusing images of more than
/// [`DEFAULT_MAX_PIXELS`].
pub fn probe(bytes: &[u8]) -> Result<(usize, usize), AugmentError> {
    probe_limited(bytes, DEFAULT_MAX_PIXELS)
}

/// Width and height from the header alone, refusing images of more than `max_pixels`.
pub fn probe_limited(bytes: &[u8], max_pixels: usize) -> Result<(usize, usize), AugmentError> {
    let (w, h) = match sniff(bytes)? {
        Format::Jpeg => contained(|| {
            let mut dec = JpegDecoder::new_with_options(ZCursor::new(bytes), jpeg_options());
            dec.decode_headers().map_err(|e| jpeg_error(bytes, e))?;
            dec.dimensions()
                .ok_or_else(|| AugmentError::jpeg("no frame header"))
        })
        .unwrap_or_else(|msg| {
            Err(AugmentError::jpeg(format!(
                "the JPEG decoder (zune-jpeg) failed on this file's header: {msg}"
            )))
        })?,
        Format::Png => probe_png(bytes)?,
        Format::WebP => probe_webp(bytes)?,
    };
    check_size(w, h, max_pixels)?;
    Ok((w, h))
}

/// PNG keeps its size at a fixed offset of the mandatory first chunk, so reading it
/// needs no decoder at all.
fn probe_png(bytes: &[u8]) -> Result<(usize, usize), AugmentError> {
    if bytes.len() < 24 {
        return Err(AugmentError::png(format!(
            "truncated PNG header ({} bytes)",
            bytes.len()
        )));
    }
    if &bytes[12..16] != b"IHDR" {
        return Err(AugmentError::png("first chunk is not IHDR"));
    }
    let be = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
    Ok((be(&bytes[16..20]), be(&bytes[20..24])))
}

/// Decode into an owned image with `channels` (1 or 3) channels.
pub fn decode(bytes: &[u8], channels: usize) -> Result<Image, AugmentError> {
    let mut img = Image::default();
    decode_into(bytes, channels, &mut img)?;
    Ok(img)
}

/// Decode into `out`, reusing the capacity of `out.data`: once it has grown to the
/// largest image seen, decoding allocates nothing for pixels. With the `turbo`
/// feature, JPEGs go through libjpeg-turbo (falling back to zune-jpeg for anything
/// it does not decode cleanly).
pub fn decode_into(bytes: &[u8], channels: usize, out: &mut Image) -> Result<(), AugmentError> {
    decode_into_with(bytes, channels, out, cfg!(stoker_turbo), DEFAULT_MAX_PIXELS)
}

/// [`decode_into`] that always decodes JPEG with zune-jpeg, as a build without
/// libjpeg-turbo does (to compare the two; the same as `decode_into` in such a build).
pub fn decode_into_zune(
    bytes: &[u8],
    channels: usize,
    out: &mut Image,
) -> Result<(), AugmentError> {
    decode_into_with(bytes, channels, out, false, DEFAULT_MAX_PIXELS)
}

pub(crate) fn decode_into_with(
    bytes: &[u8],
    channels: usize,
    out: &mut Image,
    turbo: bool,
    max_pixels: usize,
) -> Result<(), AugmentError> {
    check_channels(channels)?;
    let (w, h, src) = match sniff(bytes)? {
        Format::Jpeg => {
            // A cut file is refused whatever a decoder would make of it (zune-jpeg can
            // pad a short scan without an error, even in strict mode).
            if !ends_with_eoi(bytes) && !reaches_eoi(bytes) {
                return Err(AugmentError::truncated_jpeg(
                    bytes.len(),
                    "the data ends before the end-of-image marker",
                ));
            }
            match turbo_full(bytes, &mut out.data, turbo, max_pixels) {
                Some(r) => {
                    let (w, h) = r?;
                    (w, h, Native::Rgb8)
                }
                None => decode_jpeg_native(bytes, &mut out.data, max_pixels)?,
            }
        }
        Format::Png => decode_png_native(bytes, &mut out.data, max_pixels)?,
        Format::WebP => decode_webp_native(bytes, &mut out.data, max_pixels)?,
    };
    convert_in_place(&mut out.data, w * h, src, channels);
    out.width = w;
    out.height = h;
    out.channels = channels;
    Ok(())
}

/// libjpeg-turbo's full decode, for complete files only (a file cut before its end
/// marker is left to zune-jpeg, which reports it as truncated).
#[cfg(stoker_turbo)]
fn turbo_full(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    on: bool,
    max_pixels: usize,
) -> Option<Result<(usize, usize), AugmentError>> {
    if !on || !ends_with_eoi(bytes) {
        return None;
    }
    crate::turbo::decode_full(bytes, buf, max_pixels)
}

#[cfg(not(stoker_turbo))]
fn turbo_full(
    _: &[u8],
    _: &mut Vec<u8>,
    _: bool,
    _: usize,
) -> Option<Result<(usize, usize), AugmentError>> {
    None
}

fn jpeg_options() -> DecoderOptions {
    DecoderOptions::default()
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
        .jpeg_set_out_colorspace(ColorSpace::RGB)
}

/// A JPEG is complete when its last marker is EOI; only then is a lenient retry safe,
/// because a lenient decode of a cut file silently fills the missing rows with grey.
pub(crate) fn ends_with_eoi(bytes: &[u8]) -> bool {
    let mut end = bytes.len();
    // Some writers pad after EOI with zeros or newlines.
    while end > 0 && bytes.len() - end < 64 && matches!(bytes[end - 1], 0 | b'\n' | b'\r') {
        end -= 1;
    }
    end >= 2 && bytes[end - 2] == 0xff && bytes[end - 1] == 0xd9
}

/// Whether the JPEG's scans reach an end-of-image marker: the marker segments are
/// walked and each scan's entropy-coded data skipped (up to the next marker that is
/// neither a stuffed 0xFF00 nor a restart marker). False for a file cut anywhere
/// before its EOI, whatever follows; true for a complete file with other data after
/// its EOI (which [`ends_with_eoi`] alone would call cut). Only looked at when a file
/// does not end with EOI, so complete files cost nothing.
pub(crate) fn reaches_eoi(bytes: &[u8]) -> bool {
    let mut at = 2; // past SOI
    loop {
        if bytes.get(at) != Some(&0xFF) {
            return false;
        }
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let Some(&code) = bytes.get(at) else {
            return false;
        };
        at += 1;
        match code {
            0xD9 => return true,
            // Markers without a segment: TEM and the restart markers.
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let (Some(&hi), Some(&lo)) = (bytes.get(at), bytes.get(at + 1)) else {
            return false;
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if len < 2 {
            return false;
        }
        at += len;
        if code != 0xDA {
            continue;
        }
        // A scan's data: runs to the next real marker.
        loop {
            let Some(k) = bytes
                .get(at..)
                .and_then(|rest| rest.iter().position(|&b| b == 0xFF))
            else {
                return false;
            };
            at += k;
            match bytes.get(at + 1) {
                None => return false,
                Some(0x00 | 0xD0..=0xD7) => at += 2,
                Some(0xFF) => at += 1,
                Some(_) => break,
            }
        }
    }
}

fn jpeg_error(bytes: &[u8], e: zune_jpeg::errors::DecodeErrors) -> AugmentError {
    let reason = e.to_string();
    let source = Some(e.into());
    if ends_with_eoi(bytes) {
        AugmentError::Jpeg { reason, source }
    } else {
        AugmentError::TruncatedJpeg {
            len: bytes.len(),
            reason,
            source,
        }
    }
}

/// Decode a JPEG as RGB into `buf`. Gray JPEGs also come out as RGB: PIL's luma of a
/// replicated gray value is that value, so the 1-channel path loses nothing.
fn decode_jpeg_native(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    max_pixels: usize,
) -> Result<(usize, usize, Native), AugmentError> {
    // Strict first: it is the only mode that reports a cut file instead of padding it.
    match decode_jpeg_with(bytes, buf, jpeg_options().set_strict_mode(true), max_pixels) {
        Ok(r) => Ok(r),
        // Complete files that break a strict rule (stray bytes between markers, say)
        // are common in the wild and decode fine leniently, as libjpeg does with a
        // warning.
        Err(e) if ends_with_eoi(bytes) => decode_jpeg_with(
            bytes,
            buf,
            jpeg_options().set_strict_mode(false),
            max_pixels,
        )
        .map_err(|_| e),
        Err(e) => Err(e),
    }
}

fn decode_jpeg_with(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    options: DecoderOptions,
    max_pixels: usize,
) -> Result<(usize, usize, Native), AugmentError> {
    contained(|| decode_jpeg_uncontained(bytes, buf, options, max_pixels)).unwrap_or_else(|msg| {
        Err(AugmentError::jpeg(format!(
            "the JPEG decoder (zune-jpeg) failed on this file: {msg}"
        )))
    })
}

fn decode_jpeg_uncontained(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    options: DecoderOptions,
    max_pixels: usize,
) -> Result<(usize, usize, Native), AugmentError> {
    let mut dec = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    dec.decode_headers().map_err(|e| jpeg_error(bytes, e))?;
    let (w, h) = dec
        .dimensions()
        .ok_or_else(|| AugmentError::jpeg("no frame header"))?;
    check_size(w, h, max_pixels)?;
    let len = dec
        .output_buffer_size()
        .ok_or_else(|| AugmentError::jpeg("image size overflows"))?;
    if len != w * h * 3 {
        return Err(AugmentError::jpeg(format!(
            "decoder wants {len} bytes for a {w}x{h} RGB image"
        )));
    }
    // Zeroed whole, not just grown: a lenient decode of a damaged file can stop short
    // of the last rows without an error, and a reused buffer would then hand on
    // pixels of the image decoded before it (so output would depend on the worker).
    buf.clear();
    buf.resize(len, 0);
    dec.decode_into(buf).map_err(|e| jpeg_error(bytes, e))?;
    Ok((w, h, Native::Rgb8))
}

fn decode_png_native(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    max_pixels: usize,
) -> Result<(usize, usize, Native), AugmentError> {
    let (pw, ph) = probe_png(bytes)?;
    check_size(pw, ph, max_pixels)?;
    let png_err = AugmentError::png_from;
    let dec = image::codecs::png::PngDecoder::new(Cursor::new(bytes)).map_err(png_err)?;
    let (w, h) = dec.dimensions();
    let (w, h) = (w as usize, h as usize);
    check_size(w, h, max_pixels)?;
    let native = match dec.color_type() {
        ColorType::L8 => Native::L8,
        ColorType::La8 => Native::La8,
        ColorType::Rgb8 => Native::Rgb8,
        ColorType::Rgba8 => Native::Rgba8,
        ColorType::L16 => Native::L16,
        ColorType::La16 => Native::La16,
        ColorType::Rgb16 => Native::Rgb16,
        ColorType::Rgba16 => Native::Rgba16,
        other => {
            return Err(AugmentError::png(format!(
                "unsupported colour type {other:?}"
            )))
        }
    };
    let len = w * h * native.bytes_per_pixel();
    if dec.total_bytes() != len as u64 {
        return Err(AugmentError::png(format!(
            "decoder wants {} bytes for a {w}x{h} {native:?} image",
            dec.total_bytes()
        )));
    }
    buf.resize(len, 0);
    dec.read_image(buf).map_err(png_err)?;
    Ok((w, h, native))
}

fn webp_decoder(
    bytes: &[u8],
) -> Result<image::codecs::webp::WebPDecoder<Cursor<&[u8]>>, AugmentError> {
    image::codecs::webp::WebPDecoder::new(Cursor::new(bytes)).map_err(AugmentError::webp_from)
}

fn probe_webp(bytes: &[u8]) -> Result<(usize, usize), AugmentError> {
    let (w, h) = webp_decoder(bytes)?.dimensions();
    Ok((w as usize, h as usize))
}

/// WebP through the `image` crate's pure-Rust decoder: RGB, or RGBA when the file has
/// alpha (then converted like a PNG's).
fn decode_webp_native(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    max_pixels: usize,
) -> Result<(usize, usize, Native), AugmentError> {
    let dec = webp_decoder(bytes)?;
    let (w, h) = dec.dimensions();
    let (w, h) = (w as usize, h as usize);
    check_size(w, h, max_pixels)?;
    let native = match dec.color_type() {
        ColorType::Rgb8 => Native::Rgb8,
        ColorType::Rgba8 => Native::Rgba8,
        other => {
            return Err(AugmentError::webp(format!(
                "unsupported colour type {other:?}"
            )))
        }
    };
    let len = w * h * native.bytes_per_pixel();
    buf.resize(len, 0);
    dec.read_image(buf).map_err(AugmentError::webp_from)?;
    Ok((w, h, native))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_names_what_it_saw() {
        assert!(matches!(sniff(b""), Err(AugmentError::Empty)));
        let e = sniff(b"<!DOCTYPE html>").unwrap_err().to_string();
        assert!(e.contains("not a JPEG, PNG or WebP"), "{e}");
        assert!(e.contains("<!DOCTYP"), "{e}");
    }

    #[test]
    fn a_decoders_error_is_the_source_of_ours() {
        use std::error::Error as _;
        // A JPEG start, a frame header too short to read, and a JPEG end: zune-jpeg
        // refuses the complete file.
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xc0, 0x00, 0x02];
        jpeg.extend_from_slice(&[0x55; 64]);
        jpeg.extend_from_slice(&[0xff, 0xd9]);
        let e = decode_jpeg_native(&jpeg, &mut Vec::new(), DEFAULT_MAX_PIXELS).unwrap_err();
        assert!(matches!(e, AugmentError::Jpeg { .. }), "{e:?}");
        let cause = e.source().expect("zune-jpeg's error");
        assert!(cause.is::<zune_jpeg::errors::DecodeErrors>(), "{cause:?}");
        assert_eq!(e.to_string(), format!("corrupt JPEG data: {cause}"));
        // Cut before its end marker, the same file is truncated, with the same cause.
        let cut = &jpeg[..jpeg.len() - 2];
        let e = decode_jpeg_native(cut, &mut Vec::new(), DEFAULT_MAX_PIXELS).unwrap_err();
        assert!(matches!(e, AugmentError::TruncatedJpeg { .. }), "{e:?}");
        assert!(e.source().unwrap().is::<zune_jpeg::errors::DecodeErrors>());

        // A PNG header whose chunk checksum is wrong: the `image` crate's error.
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 4, 8, 2, 0, 0, 0]);
        png.extend_from_slice(&[0, 0, 0, 0]);
        let e = decode_png_native(&png, &mut Vec::new(), DEFAULT_MAX_PIXELS).unwrap_err();
        let AugmentError::Png {
            reason,
            source: Some(cause),
        } = &e
        else {
            panic!("{e:?}");
        };
        assert!(cause.is::<image::ImageError>(), "{cause:?}");
        assert_eq!(reason, &cause.to_string());
        // Our own checks have no error under them.
        let e = decode_png_native(&png[..20], &mut Vec::new(), DEFAULT_MAX_PIXELS).unwrap_err();
        assert!(matches!(e, AugmentError::Png { source: None, .. }), "{e:?}");
    }
}
