//! Test images made in the test: gradients encoded with the `image` crate.
#![allow(dead_code)]

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};

/// A smooth RGB gradient (smooth so that JPEG keeps it close).
pub fn gradient(w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            v.push((x * 255 / w.max(2).saturating_sub(1).max(1)) as u8);
            v.push((y * 255 / h.max(2).saturating_sub(1).max(1)) as u8);
            v.push(((x + y) * 127 / (w + h)) as u8 + 60);
        }
    }
    v
}

pub fn jpeg(data: &[u8], w: usize, h: usize, color: ExtendedColorType) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 95)
        .write_image(data, w as u32, h as u32, color)
        .expect("encode jpeg");
    out
}

pub fn png(data: &[u8], w: usize, h: usize, color: ExtendedColorType) -> Vec<u8> {
    let mut out = Vec::new();
    PngEncoder::new(&mut out)
        .write_image(data, w as u32, h as u32, color)
        .expect("encode png");
    out
}

pub fn rgb_jpeg(w: usize, h: usize) -> Vec<u8> {
    jpeg(&gradient(w, h), w, h, ExtendedColorType::Rgb8)
}

pub fn max_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0)
}

pub fn mean_diff(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y) as f64)
        .sum::<f64>()
        / a.len() as f64
}

/// A valid small JPEG whose frame header claims `w` x `h` (a decompression bomb: the
/// file is a few hundred bytes).
pub fn jpeg_claiming(w: u16, h: u16) -> Vec<u8> {
    let mut bytes = rgb_jpeg(16, 16);
    let sof = (0..bytes.len() - 1)
        .find(|&i| bytes[i] == 0xff && matches!(bytes[i + 1], 0xc0..=0xc2))
        .expect("a frame header");
    // FF Cx, length (2), precision (1), height (2), width (2).
    bytes[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    bytes[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    bytes
}

/// A valid small PNG whose IHDR claims `w` x `h`.
pub fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut bytes = png(&gradient(16, 16), 16, 16, ExtendedColorType::Rgb8);
    bytes[16..20].copy_from_slice(&w.to_be_bytes());
    bytes[20..24].copy_from_slice(&h.to_be_bytes());
    bytes
}
