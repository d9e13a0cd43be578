//! `stoker-load gen shapes DIR`: a procedural ImageFolder of JPEGs.

use std::path::PathBuf;

use anyhow::Context;
use stoker_loader::gen::{self, ShapesOptions};

use crate::args;

#[derive(clap::Args)]
pub struct Args {
    /// What to generate (only `shapes` for now).
    #[arg(value_parser = ["shapes"])]
    kind: String,
    /// Output folder (one sub-folder per class).
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
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let opts = ShapesOptions {
        count: a.count,
        size: a.size,
        classes: a.classes,
        seed: a.seed,
    };
    let bar = crate::progress_bar(a.count as u64, "gen");
    let stats = gen::shapes(&a.dir, &opts, |done, _| bar.set_position(done as u64))
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
