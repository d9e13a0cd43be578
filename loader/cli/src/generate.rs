//! `stoker-load gen shapes DIR`: a procedural ImageFolder of JPEGs; `stoker-load gen
//! scenes DIR`: several shapes per image with boxes, masks, tags, captions and
//! keypoints in a JSON-lines manifest.

use std::path::PathBuf;

use anyhow::Context;
use stoker_loader::synthetic::{self, ScenesOptions, ShapesOptions};

use crate::args;

#[derive(clap::Args)]
pub struct Args {
    /// What to generate: `shapes` (an image folder, one shape per image) or `scenes`
    /// (several shapes per image, with boxes, masks, tags, captions and keypoints in
    /// DIR/train.jsonl).
    #[arg(value_parser = ["shapes", "scenes"])]
    kind: String,
    /// Output folder.
    dir: PathBuf,
    /// Number of images.
    #[arg(long, value_parser = args::image_count)]
    count: usize,
    /// Image side in pixels.
    #[arg(long, default_value_t = 64, value_parser = args::image_size)]
    size: u32,
    /// Number of classes (at most 10).
    #[arg(long, default_value_t = 10, value_parser = args::classes)]
    classes: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Scenes: image width and height (default: --size).
    #[arg(long, value_parser = args::image_size)]
    width: Option<u32>,
    #[arg(long, value_parser = args::image_size)]
    height: Option<u32>,
    /// Scenes: the most shapes per image.
    #[arg(long, default_value_t = 4, value_parser = args::max_shapes)]
    max_shapes: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.kind == "scenes" {
        let opts = ScenesOptions {
            count: a.count,
            width: a.width.unwrap_or(a.size),
            height: a.height.unwrap_or(a.size),
            max_shapes: a.max_shapes,
            classes: a.classes,
            seed: a.seed,
        };
        let bar = crate::progress_bar(a.count as u64, "gen");
        let stats = synthetic::scenes(&a.dir, &opts, |done, _| bar.set_position(done as u64))
            .with_context(|| format!("generating {} scenes into {}", a.count, a.dir.display()))?;
        bar.finish_and_clear();
        println!(
            "wrote {} scenes to {} ({stats:?})",
            a.count,
            a.dir.display()
        );
        return Ok(());
    }
    let opts = ShapesOptions {
        count: a.count,
        size: a.size,
        classes: a.classes,
        seed: a.seed,
    };
    let bar = crate::progress_bar(a.count as u64, "gen");
    let stats = synthetic::shapes(&a.dir, &opts, |done, _| bar.set_position(done as u64))
        .with_context(|| format!("generating {} shapes into {}", a.count, a.dir.display()))?;
    bar.finish_and_clear();
    println!(
        "wrote {} images in {} classes to {} ({:?})",
        a.count,
        a.classes,
        a.dir.display(),
        stats
    );
    Ok(())
}
