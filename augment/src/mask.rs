//! Decoding segmentation masks: PNG files whose pixel values are classes, kept as they
//! are (palette indices are not turned into colours, grey levels not into RGB).

use crate::limits::check_size;
use crate::AugmentError;

/// Decodes a mask PNG into `out` (one byte per pixel) and returns its (width, height).
/// Grey and palette PNGs of 1, 2, 4 or 8 bits are read as class indices; 16-bit,
/// colour and alpha PNGs are refused, since their values are not classes.
pub fn decode_mask(
    bytes: &[u8],
    out: &mut Vec<u8>,
    max_pixels: usize,
) -> Result<(usize, usize), AugmentError> {
    if bytes.is_empty() {
        return Err(AugmentError::Empty);
    }
    if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Err(AugmentError::Mask(
            "not a PNG file (masks must be lossless PNGs of class indices)".into(),
        ));
    }
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::IDENTITY);
    let png_err = AugmentError::png_from;
    let mut reader = decoder.read_info().map_err(png_err)?;
    let info = reader.info();
    let (w, h) = (info.width as usize, info.height as usize);
    check_size(w, h, max_pixels)?;
    let (color, depth) = (info.color_type, info.bit_depth);
    if !matches!(color, png::ColorType::Grayscale | png::ColorType::Indexed) {
        return Err(AugmentError::Mask(format!(
            "a {color:?} PNG: masks must be grey or palette PNGs whose values are classes"
        )));
    }
    let bits = match depth {
        png::BitDepth::One => 1,
        png::BitDepth::Two => 2,
        png::BitDepth::Four => 4,
        png::BitDepth::Eight => 8,
        png::BitDepth::Sixteen => {
            return Err(AugmentError::Mask(
                "a 16-bit PNG: masks hold one byte per pixel (at most 256 classes)".into(),
            ))
        }
    };
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| AugmentError::Mask("the PNG's size overflows".into()))?;
    let mut raw = vec![0u8; size];
    let frame = reader.next_frame(&mut raw).map_err(png_err)?;
    let line = frame.line_size;
    out.clear();
    out.reserve(w * h);
    for row in raw.chunks(line).take(h) {
        if bits == 8 {
            out.extend_from_slice(&row[..w]);
            continue;
        }
        let per_byte = 8 / bits;
        let max = (1u8 << bits) - 1;
        for x in 0..w {
            let byte = row[x / per_byte];
            let shift = 8 - bits * (x % per_byte + 1);
            out.push((byte >> shift) & max);
        }
    }
    if out.len() != w * h {
        return Err(AugmentError::Mask(format!(
            "the PNG holds {} pixels, not {w}x{h}",
            out.len()
        )));
    }
    Ok((w, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(w: u32, h: u32, color: png::ColorType, depth: png::BitDepth, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut out, w, h);
            enc.set_color(color);
            enc.set_depth(depth);
            if color == png::ColorType::Indexed {
                enc.set_palette(vec![0u8; 3 * 256]);
            }
            let mut wr = enc.write_header().unwrap();
            wr.write_image_data(data).unwrap();
        }
        out
    }

    #[test]
    fn palette_indices_are_the_classes() {
        let png = encode(
            3,
            2,
            png::ColorType::Indexed,
            png::BitDepth::Eight,
            &[0, 1, 2, 255, 4, 5],
        );
        let mut out = Vec::new();
        assert_eq!(decode_mask(&png, &mut out, 1 << 20).unwrap(), (3, 2));
        assert_eq!(out, [0, 1, 2, 255, 4, 5]);
    }

    #[test]
    fn packed_bit_depths_unpack() {
        // 2-bit grey, 5 pixels in a row: 0b00_01_10_11, 0b01_000000.
        let png = encode(
            5,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Two,
            &[0b0001_1011, 0b0100_0000],
        );
        let mut out = Vec::new();
        assert_eq!(decode_mask(&png, &mut out, 1 << 20).unwrap(), (5, 1));
        assert_eq!(out, [0, 1, 2, 3, 1]);
    }

    #[test]
    fn colour_and_deep_pngs_are_refused() {
        let rgb = encode(1, 1, png::ColorType::Rgb, png::BitDepth::Eight, &[1, 2, 3]);
        let e = decode_mask(&rgb, &mut Vec::new(), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("grey or palette"), "{e}");
        let deep = encode(
            1,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Sixteen,
            &[1, 2],
        );
        let e = decode_mask(&deep, &mut Vec::new(), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("16-bit"), "{e}");
        let e = decode_mask(b"\xff\xd8\xff", &mut Vec::new(), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("not a PNG"), "{e}");
        let e = decode_mask(&rgb[..20], &mut Vec::new(), 1 << 20).unwrap_err();
        let AugmentError::Png {
            reason,
            source: Some(cause),
        } = &e
        else {
            panic!("{e:?}");
        };
        // The png crate's error is kept, and the message is still its words.
        assert!(
            cause.downcast_ref::<png::DecodingError>().is_some(),
            "{cause:?}"
        );
        assert_eq!(reason, &cause.to_string());
    }
}
