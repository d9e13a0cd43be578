//! Inputs for the benches: photo-like JPEGs made in memory, so that a bench needs no
//! files (and the peer comparison uses real photos from `peers/make_photos.py`).

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};
use stoker_augment::SampleRng;

/// RGB pixels with smooth structure and fine noise, which compress (and decode)
/// like a photograph rather than like a flat synthetic colour.
pub fn photo_pixels(width: usize, height: usize, seed: u64) -> Vec<u8> {
    let mut rng = SampleRng::from_seed(seed);
    let phase: Vec<f64> = (0..6).map(|_| rng.uniform(0.0, 6.3)).collect();
    let mut out = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        for x in 0..width {
            let (fx, fy) = (x as f64 / width as f64, y as f64 / height as f64);
            for c in 0..3 {
                let smooth = 0.5
                    + 0.25 * (fx * 9.0 + phase[c] + fy * 3.0).sin()
                    + 0.2 * (fy * 13.0 + phase[c + 3] * fx).cos();
                let noise = rng.uniform(-0.08, 0.08);
                out.push(((smooth + noise).clamp(0.0, 1.0) * 255.0) as u8);
            }
        }
    }
    out
}

/// A photo-like JPEG at quality 90.
pub fn photo_jpeg(width: usize, height: usize, seed: u64) -> Vec<u8> {
    let px = photo_pixels(width, height, seed);
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 90)
        .write_image(&px, width as u32, height as u32, ExtendedColorType::Rgb8)
        .expect("encoding into memory cannot fail");
    out
}

/// The same picture as a PNG.
pub fn photo_png(width: usize, height: usize, seed: u64) -> Vec<u8> {
    let px = photo_pixels(width, height, seed);
    let mut out = Vec::new();
    PngEncoder::new(&mut out)
        .write_image(&px, width as u32, height as u32, ExtendedColorType::Rgb8)
        .expect("encoding into memory cannot fail");
    out
}

/// Encoded images held in memory: the loader with the disk taken out.
pub struct MemorySource {
    pub images: Vec<Vec<u8>>,
    pub classes: Vec<String>,
}

impl MemorySource {
    /// `n` photo-like JPEGs of `width` x `height`.
    pub fn jpegs(n: usize, width: usize, height: usize) -> MemorySource {
        MemorySource {
            images: (0..n)
                .map(|i| photo_jpeg(width, height, i as u64))
                .collect(),
            classes: (0..10).map(|c| c.to_string()).collect(),
        }
    }
}

impl stoker_loader::Source for MemorySource {
    fn len(&self) -> usize {
        self.images.len()
    }
    fn classes(&self) -> &[String] {
        &self.classes
    }
    fn label(&self, index: usize) -> u32 {
        (index % 10) as u32
    }
    fn describe(&self, index: usize) -> String {
        format!("memory image {index}")
    }
    fn read(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
    ) -> Result<stoker_loader::RecordKind, stoker_loader::SourceError> {
        let img = self.images.get(index).ok_or_else(|| {
            stoker_loader::SourceError::record(self.describe(index), "index out of range")
        })?;
        buf.clear();
        buf.extend_from_slice(img);
        Ok(stoker_loader::RecordKind::Encoded)
    }
    fn format(&self) -> &'static str {
        "memory"
    }
}
