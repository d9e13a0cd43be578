//! Synthetic scenes for detection, segmentation, multi-label and captions: several
//! shapes per image over the same gradient-and-noise background as [`super::shapes`],
//! written as a JSON-lines manifest (`train.jsonl`) with, per image, its boxes and
//! their classes, a mask PNG (class + 1 per pixel, 0 for background), the set of
//! classes present, a caption, and three keypoints per shape.
//!
//! Image `i` is drawn from `SampleRng::new(seed, 20, i)`, so a set is the same bytes
//! whatever the number of threads.

use std::fs;
use std::path::Path;
use std::time::Instant;

use image::codecs::jpeg::JpegEncoder;
use image::ExtendedColorType;
use stoker_augment::SampleRng;

use super::{
    check_target, inside, io_err, luma, publish, random_colour, temp_dir_for, GenError, GenStats,
    TempDir, JPEG_QUALITY, SHAPES,
};

/// The keypoints of each shape: its leftmost and rightmost points along its own
/// horizontal axis, and its centre.
pub const KEYPOINT_NAMES: [&str; 3] = ["left_end", "right_end", "centre"];

/// What [`scenes`] makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenesOptions {
    /// Number of images (at least 1).
    pub count: usize,
    /// Width of each image in pixels, 16..=4096.
    pub width: u32,
    /// Height of each image in pixels, 16..=4096.
    pub height: u32,
    /// Shapes per image: 1 to this many.
    pub max_shapes: usize,
    /// Kinds of shape, 1..=10 (the first of [`SHAPES`]).
    pub classes: usize,
    /// Seeds every image's generator: the same options always make the same bytes.
    pub seed: u64,
}

impl Default for ScenesOptions {
    fn default() -> Self {
        ScenesOptions {
            count: 1000,
            width: 64,
            height: 64,
            max_shapes: 4,
            classes: 10,
            seed: 0,
        }
    }
}

/// One shape placed in a scene.
struct Placed {
    kind: usize,
    cx: f32,
    cy: f32,
    r: f32,
    sin: f32,
    cos: f32,
    aux: f32,
    fill: [f32; 3],
}

/// Coverage of pixel (px, py) by `s`, from 2x2 samples.
fn coverage(s: &Placed, px: usize, py: usize) -> f32 {
    const SUB: [f32; 2] = [0.25, 0.75];
    let mut hits = 0u32;
    for oy in SUB {
        for ox in SUB {
            let dx = (px as f32 + ox - s.cx) / s.r;
            let dy = (py as f32 + oy - s.cy) / s.r;
            let x = dx * s.cos + dy * s.sin;
            let y = -dx * s.sin + dy * s.cos;
            hits += u32::from(inside(s.kind, x, y, s.aux));
        }
    }
    hits as f32 / 4.0
}

/// One scene's pixels, mask and annotation line.
fn render(i: usize, o: &ScenesOptions, rgb: &mut Vec<u8>, mask: &mut Vec<u8>) -> serde_json::Value {
    let mut rng = SampleRng::new(o.seed, 20, i as u64);
    let (w, h) = (o.width as usize, o.height as usize);
    let (wf, hf) = (w as f32, h as f32);
    let c0 = random_colour(&mut rng);
    let c1 = random_colour(&mut rng);
    let phi = rng.uniform(0.0, std::f64::consts::TAU) as f32;
    let (gx, gy) = (phi.cos() / wf, phi.sin() / hf);
    let noise = rng.uniform(8.0, 28.0) as f32;
    let n = 1 + rng.below(o.max_shapes as u64) as usize;
    let side = wf.min(hf);
    let mut shapes = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = rng.below(o.classes as u64) as usize;
        let r = rng.uniform(0.08, 0.22) as f32 * side;
        let cx = rng.uniform(r as f64, (wf - r) as f64) as f32;
        let cy = rng.uniform(r as f64, (hf - r) as f64) as f32;
        let theta = rng.uniform(-0.3, 0.3) as f32;
        let aux = match kind {
            4 => rng.uniform(0.5, 0.68) as f32,
            _ => rng.uniform(0.4, 0.6) as f32,
        };
        let mut fill = random_colour(&mut rng);
        let bg: [f32; 3] = std::array::from_fn(|k| (c0[k] + c1[k]) / 2.0);
        if (luma(fill) - luma(bg)).abs() < 70.0 {
            let target = if luma(bg) > 128.0 { 0.0 } else { 255.0 };
            fill = fill.map(|c| c + (target - c) * 0.7);
        }
        let (sin, cos) = theta.sin_cos();
        shapes.push(Placed {
            kind,
            cx,
            cy,
            r,
            sin,
            cos,
            aux,
            fill,
        });
    }
    rgb.clear();
    rgb.resize(w * h * 3, 0);
    mask.clear();
    mask.resize(w * h, 0);
    // Each shape's box: the pixels it covers at all, occluded or not.
    let mut boxes = vec![[f32::MAX, f32::MAX, 0f32, 0f32]; n];
    for py in 0..h {
        for px in 0..w {
            let t =
                ((px as f32 - wf / 2.0) * gx + (py as f32 - hf / 2.0) * gy + 0.5).clamp(0.0, 1.0);
            let mut px_rgb: [f32; 3] = std::array::from_fn(|k| {
                c0[k] + (c1[k] - c0[k]) * t + rng.uniform(-1.0, 1.0) as f32 * noise
            });
            for (k, s) in shapes.iter().enumerate() {
                let a = coverage(s, px, py);
                if a > 0.0 {
                    let b = &mut boxes[k];
                    b[0] = b[0].min(px as f32);
                    b[1] = b[1].min(py as f32);
                    b[2] = b[2].max(px as f32 + 1.0);
                    b[3] = b[3].max(py as f32 + 1.0);
                    for (c, f) in px_rgb.iter_mut().zip(s.fill) {
                        *c = *c * (1.0 - a) + f * a;
                    }
                    if a >= 0.5 {
                        mask[py * w + px] = s.kind as u8 + 1;
                    }
                }
            }
            let o = (py * w + px) * 3;
            for (dst, v) in rgb[o..o + 3].iter_mut().zip(px_rgb) {
                *dst = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    let names: Vec<&str> = shapes.iter().map(|s| SHAPES[s.kind]).collect();
    let mut present: Vec<&str> = names.clone();
    present.sort_unstable();
    present.dedup();
    let keypoints: Vec<Vec<[f32; 3]>> = shapes
        .iter()
        .map(|s| {
            let end = |d: f32| [s.cx + d * s.r * s.cos, s.cy + d * s.r * s.sin, 2.0];
            vec![end(-1.0), end(1.0), [s.cx, s.cy, 2.0]]
        })
        .collect();
    serde_json::json!({
        "image": format!("images/{i:06}.jpg"),
        "mask": format!("masks/{i:06}.png"),
        "boxes": boxes,
        "box_labels": names,
        "labels": present,
        "text": caption(&names),
        "keypoints": keypoints,
    })
}

/// "a circle, two squares and a star".
fn caption(names: &[&str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match counts.iter_mut().find(|(m, _)| m == n) {
            Some(c) => c.1 += 1,
            None => counts.push((n, 1)),
        }
    }
    let words = ["a", "two", "three", "four", "five", "six", "seven", "eight"];
    let parts: Vec<String> = counts
        .iter()
        .map(|(n, c)| match c {
            1 => format!("a {n}"),
            c => format!("{} {n}s", words.get(c - 1).copied().unwrap_or("many")),
        })
        .collect();
    match parts.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Generates `opts.count` scenes in `dir`: `images/`, `masks/` and `train.jsonl`
/// (built in a temporary folder and renamed into place when whole, as
/// [`super::shapes`] does).
pub fn scenes(
    dir: &Path,
    opts: &ScenesOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<GenStats, GenError> {
    if opts.count == 0 || opts.max_shapes == 0 {
        return Err(GenError::Options(
            "count and max_shapes must be at least 1".into(),
        ));
    }
    if !(1..=SHAPES.len()).contains(&opts.classes) {
        return Err(GenError::Options(format!(
            "classes must be 1..={}, not {}",
            SHAPES.len(),
            opts.classes
        )));
    }
    if !(16..=4096).contains(&opts.width) || !(16..=4096).contains(&opts.height) {
        return Err(GenError::Options(format!(
            "width and height must be 16..=4096 pixels, not {}x{}",
            opts.width, opts.height
        )));
    }
    let start = Instant::now();
    check_target(dir)?;
    let tmp = temp_dir_for(dir)?;
    let mut guard = TempDir(Some(tmp.clone()));
    for sub in ["images", "masks"] {
        let d = tmp.join(sub);
        fs::create_dir_all(&d).map_err(io_err(&d))?;
    }
    let header = serde_json::json!({
        "classes": &SHAPES[..opts.classes],
        "keypoint_names": KEYPOINT_NAMES,
    });
    let mut lines = vec![header.to_string()];
    let (mut rgb, mut mask, mut jpeg) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0u64;
    for i in 0..opts.count {
        let line = render(i, opts, &mut rgb, &mut mask);
        let img_path = tmp.join(format!("images/{i:06}.jpg"));
        jpeg.clear();
        JpegEncoder::new_with_quality(&mut jpeg, JPEG_QUALITY)
            .encode(&rgb, opts.width, opts.height, ExtendedColorType::Rgb8)
            .map_err(|e| GenError::Encode {
                path: img_path.clone(),
                source: e.into(),
            })?;
        fs::write(&img_path, &jpeg).map_err(io_err(&img_path))?;
        let mask_path = tmp.join(format!("masks/{i:06}.png"));
        image::GrayImage::from_raw(opts.width, opts.height, mask.clone())
            .ok_or_else(|| GenError::Options("mask size".into()))?
            .save(&mask_path)
            .map_err(|e| GenError::Encode {
                path: mask_path.clone(),
                source: e.into(),
            })?;
        bytes += jpeg.len() as u64;
        lines.push(line.to_string());
        progress(i + 1, opts.count);
    }
    let manifest = tmp.join("train.jsonl");
    fs::write(&manifest, lines.join("\n") + "\n").map_err(io_err(&manifest))?;
    publish(&tmp, dir)?;
    guard.0 = None;
    Ok(GenStats {
        images: opts.count,
        classes: opts.classes,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captions_count_their_shapes() {
        assert_eq!(caption(&["circle"]), "a circle");
        assert_eq!(
            caption(&["circle", "square", "circle", "star"]),
            "two circles, a square and a star"
        );
    }

    #[test]
    fn boxes_hold_their_shapes_mask_pixels() {
        let o = ScenesOptions {
            width: 80,
            height: 60,
            ..ScenesOptions::default()
        };
        let (mut rgb, mut mask) = (Vec::new(), Vec::new());
        for i in 0..20 {
            let line = render(i, &o, &mut rgb, &mut mask);
            let boxes: Vec<[f32; 4]> = serde_json::from_value(line["boxes"].clone()).unwrap();
            let names: Vec<String> = serde_json::from_value(line["box_labels"].clone()).unwrap();
            for (y, row) in mask.chunks_exact(80).enumerate() {
                for (x, &v) in row.iter().enumerate() {
                    if v == 0 {
                        continue;
                    }
                    // Some box of that class holds the pixel.
                    let class = SHAPES[v as usize - 1];
                    let (xf, yf) = (x as f32 + 0.5, y as f32 + 0.5);
                    assert!(
                        boxes.iter().zip(&names).any(|(b, n)| n == class
                            && b[0] <= xf
                            && xf <= b[2]
                            && b[1] <= yf
                            && yf <= b[3]),
                        "scene {i}: mask pixel ({x}, {y}) of {class} outside its boxes"
                    );
                }
            }
        }
    }
}
