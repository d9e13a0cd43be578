//! `stoker-load inspect DATA`: what a data set holds, and whether every record reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use stoker_augment::decode;
use stoker_loader::source::{self, RecordKind};

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
    let bar = crate::progress_bar(n as u64, "inspect");
    for i in 0..n {
        bar.set_position(i as u64);
        if let Some(c) = per_class.get_mut(src.label(i) as usize) {
            *c += 1;
        }
        let dims = src
            .read(i, &mut buf)
            .map_err(|e| e.to_string())
            .and_then(|kind| {
                bytes += buf.len() as u64;
                match kind {
                    // A full decode: a header can be whole when the data behind it is not.
                    RecordKind::Encoded => decode::decode_into(&buf, 3, &mut img)
                        .map(|()| (img.width, img.height))
                        .map_err(|e| e.to_string()),
                    RecordKind::Raw { width, height, .. } => Ok((width as usize, height as usize)),
                }
            });
        match dims {
            Ok(d) => *sizes.entry(d).or_default() += 1,
            Err(e) => bad.push(format!("{}: {e}", src.describe(i))),
        }
    }
    bar.finish_and_clear();
    if a.json {
        let doc = serde_json::json!({
            "path": a.data,
            "format": src.format(),
            "samples": src.len(),
            "checked": n,
            "classes": src.classes(),
            "per_class": per_class,
            "bytes": bytes,
            "sizes": sizes.iter().map(|((w, h), c)| serde_json::json!({"width": w, "height": h, "count": c})).collect::<Vec<_>>(),
            "bad": bad,
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
        for (name, count) in src.classes().iter().zip(&per_class) {
            println!("  {name:<20} {count}");
        }
        println!("checked {n} records, {:.1} MB", bytes as f64 / 1e6);
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
