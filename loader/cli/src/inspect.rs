//! `stoker-load inspect DATA`: what a data set holds (formats, encodings, sizes, fields),
//! and whether every record reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use stoker_augment::decode;
use stoker_loader::sample::MaskData;
use stoker_loader::source::{self, RecordKind};
use stoker_loader::{Annotation, Field};

use crate::args;

#[derive(clap::Args)]
pub struct Args {
    /// A data set: a local path or a URL (see `stoker-load bench --help`).
    data: PathBuf,
    #[command(flatten)]
    source: crate::data::DataArgs,
    /// Check at most this many records (0 = all).
    #[arg(long, default_value_t = 0, value_parser = args::limit)]
    limit: usize,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let src = source::open_with(&a.data, &a.source.options())?;
    let n = if a.limit == 0 {
        src.len()
    } else {
        a.limit.min(src.len())
    };
    let mut per_class = vec![0usize; src.classes().len()];
    let mut sizes: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let (mut bytes, mut bad) = (0u64, Vec::new());
    let mut buf = Vec::new();
    let mut img = stoker_augment::Image::default();
    let fields = src.fields();
    let mut ann = Annotation::default();
    // Per field: samples that have it, and items (boxes, tags, instances).
    let mut counts: BTreeMap<Field, (usize, usize)> = fields.iter().map(|f| (f, (0, 0))).collect();
    let mut mask = Vec::new();
    // How the records are stored (jpeg, png, raw WxHxC...) and how many of each.
    let mut encodings: BTreeMap<&'static str, usize> = BTreeMap::new();
    let bar = crate::progress_bar(n as u64, "inspect");
    for i in 0..n {
        bar.set_position(i as u64);
        if let Some(c) = per_class.get_mut(src.label(i) as usize) {
            *c += 1;
        }
        // A source's error names the record already (said twice, the location hid the
        // reason); the decoder's and the checks' do not, and get its name in front.
        let what = src.describe(i);
        let named = |e: String| format!("{what}: {e}");
        let dims = src
            .read_sample(i, fields, &mut buf, &mut ann)
            .map_err(|e| {
                let e = e.to_string();
                if e.contains(&what) {
                    e
                } else {
                    named(e)
                }
            })
            .and_then(|kind| {
                bytes += buf.len() as u64;
                *encodings.entry(encoding_of(kind, &buf)).or_default() += 1;
                match kind {
                    // A full decode: a header can be whole when the data behind it is not.
                    RecordKind::Encoded => decode::decode_into(&buf, 3, &mut img)
                        .map(|()| (img.width, img.height))
                        .map_err(|e| named(e.to_string())),
                    RecordKind::Raw { width, height, .. } => Ok((width as usize, height as usize)),
                }
            })
            .and_then(|dims| {
                let k = src.keypoint_schema().map_or(1, |s| s.len().max(1));
                count_fields(&ann, k, &mut counts);
                check_annotation(&ann, dims, src.as_ref(), &mut mask)
                    .map(|()| dims)
                    .map_err(named)
            });
        match dims {
            Ok(d) => *sizes.entry(d).or_default() += 1,
            Err(e) => bad.push(e),
        }
    }
    bar.finish_and_clear();
    let max_side = sizes.keys().map(|&(w, h)| w.max(h)).max();
    if a.json {
        let doc = serde_json::json!({
            "path": a.data,
            "format": src.format(),
            "samples": src.len(),
            "checked": n,
            "classes": src.classes(),
            "per_class": per_class,
            "bytes": bytes,
            "fields": counts.iter().map(|(f, (samples, items))| (f.name().to_string(), serde_json::json!({"samples": samples, "count": items}))).collect::<serde_json::Map<_, _>>(),
            "sizes": sizes.iter().map(|((w, h), c)| serde_json::json!({"width": w, "height": h, "count": c})).collect::<Vec<_>>(),
            "bad": bad,
            "encodings": encodings,
            "max_side": max_side,
            "layout": src.layout(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "{}: {} ({} samples, {} classes)",
            a.data.display(),
            src.format(),
            src.len(),
            src.classes().len()
        );
        // Per-class counts come from the class field; a source without one (COCO,
        // manifests of boxes) only names its classes.
        if fields.contains(Field::Class) {
            for (name, count) in src.classes().iter().zip(&per_class) {
                println!("  {name:<20} {count}");
            }
        } else if !src.classes().is_empty() {
            println!("  classes: {}", src.classes().join(", "));
        }
        for line in src.layout() {
            println!("{line}");
        }
        println!("checked {n} records, {:.1} MB", bytes as f64 / 1e6);
        println!("fields:");
        for (f, (samples, items)) in &counts {
            let what = match f {
                Field::Boxes => format!(", {items} boxes"),
                Field::Keypoints => format!(", {items} instances"),
                Field::Labels => format!(", {items} tags"),
                _ => String::new(),
            };
            println!("  {:<10} {samples} samples{what}", f.name());
        }
        let show: Vec<String> = sizes
            .iter()
            .take(5)
            .map(|((w, h), c)| format!("{w}x{h} ({c})"))
            .collect();
        println!(
            "sizes: {}{}",
            show.join(", "),
            if sizes.len() > 5 {
                format!(", and {} more", sizes.len() - 5)
            } else {
                String::new()
            }
        );
        let enc: Vec<String> = encodings
            .iter()
            .map(|(e, c)| format!("{e} ({c})"))
            .collect();
        println!("encodings: {}", enc.join(", "));
        if let Some(m) = max_side {
            println!("longest side: {m}");
        }
        if bad.is_empty() {
            println!("all records read");
        } else {
            println!("{} bad records:", bad.len());
            for b in bad.iter().take(20) {
                println!("  {b}");
            }
        }
    }
    if !bad.is_empty() {
        anyhow::bail!("{} of {n} records could not be read", bad.len());
    }
    Ok(())
}

/// How a record is stored, by its kind and first bytes.
fn encoding_of(kind: RecordKind, bytes: &[u8]) -> &'static str {
    match kind {
        RecordKind::Raw { .. } => "raw",
        RecordKind::Encoded => match decode::sniff(bytes) {
            Ok(decode::Format::Jpeg) => "jpeg",
            Ok(decode::Format::Png) => "png",
            Ok(decode::Format::WebP) => "webp",
            Err(_) => "unknown",
        },
    }
}

/// Counts what one sample's annotation holds, per field (`k`: points per keypoint
/// instance).
fn count_fields(ann: &Annotation, k: usize, counts: &mut BTreeMap<Field, (usize, usize)>) {
    let mut add = |f: Field, present: bool, items: usize| {
        if let Some(c) = counts.get_mut(&f) {
            c.0 += usize::from(present);
            c.1 += items;
        }
    };
    add(Field::Image, true, 1);
    add(Field::Class, true, 1);
    add(Field::Labels, !ann.labels.is_empty(), ann.labels.len());
    add(Field::Text, ann.text.is_some(), 0);
    add(Field::Boxes, !ann.boxes.is_empty(), ann.boxes.len());
    add(Field::Mask, ann.mask.is_some(), 0);
    add(Field::Masks, !ann.masks.is_empty(), ann.masks.len());
    add(Field::Raw, ann.raw.is_some(), 0);
    let instances = ann.keypoints.len() / (3 * k);
    add(Field::Keypoints, instances > 0, instances);
}

/// The checks the loader makes of an annotation against its image, so that inspect
/// finds the records a training run would stop at.
fn check_annotation(
    ann: &Annotation,
    (w, h): (usize, usize),
    src: &dyn stoker_loader::Source,
    mask: &mut Vec<u8>,
) -> Result<(), String> {
    let k = src.keypoint_schema().map_or(0, |s| s.len());
    ann.check(Some((w, h)), src.classes().len(), k)?;
    let dims = match &ann.mask {
        None => return Ok(()),
        Some(MaskData::Raw { width, height, .. }) => (*width, *height),
        Some(MaskData::Png(bytes)) => {
            stoker_augment::mask::decode_mask(bytes, mask, stoker_augment::DEFAULT_MAX_PIXELS)
                .map_err(|e| e.to_string())?
        }
    };
    if dims != (w, h) {
        return Err(format!(
            "the mask is {}x{} but its image is {w}x{h}",
            dims.0, dims.1
        ));
    }
    Ok(())
}
