//! The demo data set: procedural shapes, a training and a validation split, made once
//! in the stoker cache folder and reused by later runs.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use stoker_loader::gen::{self, ShapesOptions};

/// Side of the demo images: small enough that the convnet trains in about two
/// minutes on two CPU cores, large enough that the ten shapes stay distinct.
pub const SIZE: u32 = 32;
pub const TRAIN_COUNT: usize = 10_000;
pub const VAL_COUNT: usize = 2_000;
/// The demo's training augmentation: random shifts (pad 4, crop back) and flips.
pub const TRANSFORM: &str = "crop:32:pad=4,flip";

/// The demo's (train, val) folders, generated first when missing.
pub fn ensure() -> anyhow::Result<(PathBuf, PathBuf)> {
    let root = gen::cache_dir().join(format!("train-shapes-{SIZE}px"));
    let train = root.join("train");
    let val = root.join("val");
    // Different seeds: the validation images are drawn independently of the training ones.
    make(&train, TRAIN_COUNT, 1)?;
    make(&val, VAL_COUNT, 2)?;
    Ok((train, val))
}

fn make(dir: &Path, count: usize, seed: u64) -> anyhow::Result<()> {
    // `gen::shapes` writes to a temporary folder and renames it when complete, so an
    // existing folder is a whole one.
    if dir.exists() {
        return Ok(());
    }
    eprintln!(
        "making the demo set: {count} shapes of {SIZE}x{SIZE} px in {}",
        dir.display()
    );
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(count as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let made = gen::shapes(
        dir,
        &ShapesOptions {
            count,
            size: SIZE,
            classes: 10,
            seed,
        },
        |done, _| bar.set_position(done as u64),
    );
    bar.finish_and_clear();
    match made {
        Ok(_) => Ok(()),
        // Another process (another machine's rank on a shared folder) published the set
        // first (sets appear only whole, by a rename). Its bytes depend only on the
        // options, so it is the same set.
        Err(_) if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("generating the demo set in {}", dir.display())),
    }
}
