//! The demo data sets: procedural shapes, a training and a validation split, made once
//! in the stoker cache folder and reused by later runs. The classification demo has
//! one shape per image; the multi-label one (`--target labels`) has scenes of several,
//! each image tagged with the kinds it shows.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use stoker_loader::synthetic::{self, ScenesOptions, ShapesOptions};
use stoker_loader::DecodedCacheSize;

/// Side of the demo images: small enough that the convnet trains in about two
/// minutes on two CPU cores, large enough that the ten shapes stay distinct.
pub const SIZE: u32 = 32;
pub const TRAIN_COUNT: usize = 10_000;
pub const VAL_COUNT: usize = 2_000;
/// The demo's training augmentation: random shifts (pad 4, crop back) and flips.
pub const TRANSFORM: &str = "crop:32:pad=4,flip";

/// The demo's (train, val) folders, generated first when missing.
pub fn ensure() -> anyhow::Result<(PathBuf, PathBuf)> {
    let root = stoker_loader::system::cache_dir().join(format!("train-shapes-{SIZE}px"));
    let train = root.join("train");
    let val = root.join("val");
    // Different seeds: the validation images are drawn independently of the training ones.
    make(&train, TRAIN_COUNT, 1)?;
    make(&val, VAL_COUNT, 2)?;
    Ok((train, val))
}

/// The decoded cache of a demo's training loader on CUDA: room for all of its
/// TRAIN_COUNT decoded images (3 KiB of pixels each, plus the entry's few hundred
/// bytes and tags: about 34 MB), bounded so that a cache never outgrows the set.
/// Reading and decoding its small JPEG files is most of a sample's cost (about 5x the
/// transforms alone); a GPU steps about as fast as 15 workers decode (docs/trainer.md,
/// "The data wait on a GPU"), and the batches are the same bytes with or without it.
pub const CUDA_DECODED_CACHE: DecodedCacheSize = DecodedCacheSize::Bytes(48 << 20);

/// The training loader's decoded cache for a demo set: `--decoded-cache` when given,
/// else [`CUDA_DECODED_CACHE`] on CUDA, else none (the CPU demo as it always ran).
pub fn decoded_cache(flag: Option<DecodedCacheSize>, cuda: bool) -> Option<DecodedCacheSize> {
    flag.or(cuda.then_some(CUDA_DECODED_CACHE))
}

/// Scenes of the multi-label demo: 1 to this many shapes per image. More would crowd
/// a 32 px image; fewer would make most images single-label.
pub const SCENE_SHAPES: usize = 4;
/// Its training augmentation: flips only (a shifted crop could cut a small shape off
/// the image and leave a tag with nothing to see).
pub const SCENES_TRANSFORM: &str = "flip";

/// Its peak SGD learning rate (when `--lr` is not given), ten times the classification
/// demo's: the loss is the mean over N x classes binary terms, so each logit's gradient
/// is 1/10 of what a softmax step over these 10 classes gives it, and at lr 0.1 the
/// convnet reaches a validation mAP of only 0.66 in the 6 default epochs (torch's
/// same recipe: 0.53 after 2 of them, as stoker's 0.52). At 1.0 it passes 0.8 in them.
pub const SCENES_SGD_LR: f32 = 1.0;

/// The multi-label demo's (train, val) manifests, generated first when missing.
pub fn ensure_scenes() -> anyhow::Result<(PathBuf, PathBuf)> {
    let root = stoker_loader::system::cache_dir().join(format!("train-scenes-{SIZE}px"));
    let (train, val) = (root.join("train"), root.join("val"));
    make_with(&train, TRAIN_COUNT, "scenes", |dir, bar| {
        synthetic::scenes(dir, &scenes_options(TRAIN_COUNT, 1), bar).map(|_| ())
    })?;
    make_with(&val, VAL_COUNT, "scenes", |dir, bar| {
        synthetic::scenes(dir, &scenes_options(VAL_COUNT, 2), bar).map(|_| ())
    })?;
    Ok((train.join("train.jsonl"), val.join("train.jsonl")))
}

fn scenes_options(count: usize, seed: u64) -> ScenesOptions {
    ScenesOptions {
        count,
        width: SIZE,
        height: SIZE,
        max_shapes: SCENE_SHAPES,
        classes: 10,
        seed,
    }
}

fn make(dir: &Path, count: usize, seed: u64) -> anyhow::Result<()> {
    make_with(dir, count, "shapes", |dir, bar| {
        synthetic::shapes(
            dir,
            &ShapesOptions {
                count,
                size: SIZE,
                classes: 10,
                seed,
            },
            bar,
        )
        .map(|_| ())
    })
}

/// Runs `generate` into `dir` unless the folder is there, with a progress bar.
fn make_with(
    dir: &Path,
    count: usize,
    what: &str,
    generate: impl FnOnce(&Path, &mut dyn FnMut(usize, usize)) -> Result<(), synthetic::GenError>,
) -> anyhow::Result<()> {
    // The generators write to a temporary folder and rename it when complete, so an
    // existing folder is a whole one.
    if dir.exists() {
        return Ok(());
    }
    eprintln!(
        "making the demo set: {count} {what} of {SIZE}x{SIZE} px in {}",
        dir.display()
    );
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(count as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let made = generate(dir, &mut |done, _| bar.set_position(done as u64));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_decodes_once_on_cuda_only_and_the_flag_wins() {
        assert_eq!(decoded_cache(None, false), None);
        assert_eq!(decoded_cache(None, true), Some(CUDA_DECODED_CACHE));
        let flag = Some(DecodedCacheSize::Auto);
        assert_eq!(decoded_cache(flag, true), flag);
        assert_eq!(decoded_cache(flag, false), flag);
    }

    #[test]
    fn the_cuda_cache_holds_a_whole_demo_set() {
        let DecodedCacheSize::Bytes(bound) = CUDA_DECODED_CACHE else {
            panic!("a fixed bound");
        };
        // Pixels (RGB) plus a generous 1 KiB a sample for the entry and its tags.
        let need = TRAIN_COUNT as u64 * (u64::from(SIZE * SIZE) * 3 + 1024);
        assert!(need <= bound, "{need} bytes needed, {bound} kept");
    }
}
