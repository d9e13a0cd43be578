//! `stoker-load show DATA --transform SPEC --out grid.png`: a grid of augmented samples
//! with their boxes, tinted masks (each instance mask in a colour of its own),
//! keypoints and captions drawn over them: the picture that shows whether an
//! augmentation pipeline keeps the labels on their objects.

use std::path::PathBuf;

use anyhow::Context;
use plotters::prelude::*;
use plotters::style::FontStyle;
use stoker_augment::Pipeline;
use stoker_loader::{source, Batch, Field, Loader, LoaderConfig, Mode};

use crate::args;
use crate::data::DataArgs;

#[derive(clap::Args)]
pub struct Args {
    /// A data set (any format `bench` reads).
    data: PathBuf,
    #[command(flatten)]
    source: DataArgs,
    /// Transform spec, e.g. `rrc:512,flip`.
    #[arg(long, default_value = "")]
    transform: String,
    /// The PNG to write.
    #[arg(long)]
    out: PathBuf,
    /// Samples in the grid.
    #[arg(long, default_value_t = 16, value_parser = args::batch_size)]
    count: usize,
    /// The seed of the shuffle and of the augmentation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Which epoch's draws to show (each epoch draws anew).
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Show samples in order instead of shuffled.
    #[arg(long)]
    no_shuffle: bool,
}

/// The font the binary ships (no system fonts needed), shared with stoker-train.
const FONT: &str = "stoker-sans";

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let bytes: &'static [u8] =
            include_bytes!("../../../trainer/cli/assets/DejaVuSans-ascii.ttf");
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, bytes);
    });
}

/// A colour per class, spread around the hue circle.
fn colour(class: i64) -> RGBColor {
    let h = (class.unsigned_abs() as f64 * 0.618_034) % 1.0;
    let hsl = HSLColor(h, 0.85, 0.5).to_rgba();
    RGBColor(hsl.0, hsl.1, hsl.2)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let src = source::open_with(&a.data, &a.source.options())?;
    let classes = src.classes().to_vec();
    // Every field the data has, the instance masks too (a loader leaves them out
    // unless asked: they cost M x H x W bytes a sample).
    let has = src.fields();
    let fields = (has.contains(Field::Masks) && has.contains(Field::Boxes)).then_some(has);
    let cfg = LoaderConfig {
        fields,
        batch_size: a.count,
        mode: Mode::Sync,
        seed: a.seed,
        shuffle: !a.no_shuffle,
        transform: Pipeline::parse(&a.transform)?,
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, cfg)?;
    let batch = loader
        .epoch(a.epoch)
        .next()
        .context("the data set gave no batch")??;
    let img = draw(&batch, &classes)?;
    img.save(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!(
        "{}: {} samples of {}x{} ({})",
        a.out.display(),
        batch.len(),
        batch.shape()[2],
        batch.shape()[1],
        loader.fields()
    );
    Ok(())
}

/// The grid: one cell per sample, scaled up so small images stay visible, with a
/// caption line under each cell when samples have text.
fn draw(b: &Batch, classes: &[String]) -> anyhow::Result<image::RgbImage> {
    register_font();
    let [n, h, w, c] = b.shape();
    let scale = (160 / w.max(h)).max(1);
    let (cw, ch) = (w * scale, h * scale);
    let f = b.fields.as_deref();
    let has = |x: Field| f.is_some_and(|f| f.fields.contains(x));
    let caption = if has(Field::Text) { 16 } else { 0 };
    let cols = (n as f64).sqrt().ceil().max(1.0) as usize;
    let rows = n.div_ceil(cols);
    let pad = 4;
    let (gw, gh) = (cols * (cw + pad) + pad, rows * (ch + caption + pad) + pad);
    let mut buf = vec![255u8; gw * gh * 3];
    // Pixels first, in the buffer: the image, then the mask's tint over it.
    for i in 0..n {
        let (x0, y0) = cell(i, cols, cw, ch + caption, pad);
        let pixels = b.image(i);
        let mask = b.masks().map(|m| &m[i * w * h..(i + 1) * w * h]);
        let instances = b.instance_masks_of(i).unwrap_or_default();
        for y in 0..ch {
            for x in 0..cw {
                let (sx, sy) = (x / scale, y / scale);
                let p = &pixels[(sy * w + sx) * c..(sy * w + sx + 1) * c];
                let mut rgb = if c >= 3 {
                    [p[0], p[1], p[2]]
                } else {
                    [p[0]; 3]
                };
                if let Some(m) = mask {
                    let v = m[sy * w + sx];
                    if v != 0 {
                        let t = if v == 255 {
                            RGBColor(255, 255, 255)
                        } else {
                            colour(i64::from(v))
                        };
                        for (k, tv) in [t.0, t.1, t.2].into_iter().enumerate() {
                            rgb[k] = ((rgb[k] as u16 * 11 + tv as u16 * 9) / 20) as u8;
                        }
                    }
                }
                // The last instance over the pixel, in its own colour (by its place
                // among the sample's boxes, not its class: two dogs differ).
                let over = instances
                    .chunks_exact(w * h)
                    .rposition(|m| m[sy * w + sx] != 0);
                if let Some(j) = over {
                    let t = colour(j as i64 + 101);
                    for (k, tv) in [t.0, t.1, t.2].into_iter().enumerate() {
                        rgb[k] = ((rgb[k] as u16 * 2 + tv as u16 * 3) / 5) as u8;
                    }
                }
                let at = ((y0 + y) * gw + x0 + x) * 3;
                buf[at..at + 3].copy_from_slice(&rgb);
            }
        }
    }
    {
        let root = BitMapBackend::with_buffer(&mut buf, (gw as u32, gh as u32)).into_drawing_area();
        let text = (FONT, 12).into_font().color(&BLACK);
        for i in 0..n {
            let (x0, y0) = cell(i, cols, cw, ch + caption, pad);
            let at = |x: f32, y: f32| {
                (
                    x0 as i32 + (x * scale as f32).round() as i32,
                    y0 as i32 + (y * scale as f32).round() as i32,
                )
            };
            if let Some(f) = f.filter(|_| has(Field::Boxes)) {
                let (boxes, labels) = f.boxes_of(i);
                for (bx, &l) in boxes.iter().zip(labels) {
                    let col = colour(l + 1);
                    let rect =
                        Rectangle::new([at(bx[0], bx[1]), at(bx[2], bx[3])], col.stroke_width(2));
                    root.draw(&rect)?;
                    let name = classes
                        .get(l as usize)
                        .cloned()
                        .unwrap_or_else(|| l.to_string());
                    let (tx, ty) = at(bx[0], bx[1]);
                    root.draw(&Text::new(
                        name,
                        (tx + 2, ty + 1),
                        (FONT, 11).into_font().color(&col),
                    ))?;
                }
            }
            if let Some(f) = f.filter(|_| has(Field::Keypoints)) {
                let k = &f.keypoints;
                let per = k.per_instance * 3;
                let count = k.count.get(i).copied().unwrap_or(0) as usize;
                let start = i * k.max * per;
                for (m, inst) in k.points[start..start + count * per]
                    .chunks_exact(per)
                    .enumerate()
                {
                    for p in inst.chunks_exact(3).filter(|p| p[2] > 0.0) {
                        root.draw(&Circle::new(
                            at(p[0], p[1]),
                            3,
                            colour(m as i64 + 7).filled(),
                        ))?;
                    }
                }
            }
            if let Some(f) = f.filter(|_| has(Field::Text)) {
                let t = f.text.get(i).map(String::as_str).unwrap_or_default();
                // About 6 px per character at this size: cut to the cell's width.
                let fit: String = t.chars().take(cw / 6).collect();
                root.draw(&Text::new(
                    fit,
                    (x0 as i32, (y0 + ch + 2) as i32),
                    text.clone(),
                ))?;
            }
        }
        root.present()?;
    }
    image::RgbImage::from_raw(gw as u32, gh as u32, buf).context("grid buffer size")
}

/// Top-left corner of cell `i`.
fn cell(i: usize, cols: usize, cw: usize, ch: usize, pad: usize) -> (usize, usize) {
    (pad + (i % cols) * (cw + pad), pad + (i / cols) * (ch + pad))
}
