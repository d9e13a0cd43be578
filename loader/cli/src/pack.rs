//! `stoker-load pack SRC OUT`: copy a data set into one packed file.

use std::path::PathBuf;

use anyhow::Context;
use stoker_loader::source::{self, packed};

#[derive(clap::Args)]
pub struct Args {
    /// An image folder, or an MNIST/CIFAR set.
    src: PathBuf,
    /// The packed file to write (written to a temporary name, renamed when complete).
    out: PathBuf,
    /// For MNIST/CIFAR sets: pack the test split instead of the training split.
    #[arg(long)]
    test: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let src = source::open(&a.src, !a.test)?;
    let bar = crate::progress_bar(src.len() as u64, "pack");
    let stats = packed::pack_source(src.as_ref(), &a.out, |done, _| {
        bar.set_position(done as u64)
    })
    .with_context(|| format!("packing {} into {}", a.src.display(), a.out.display()))?;
    bar.finish_and_clear();
    println!(
        "packed {} records ({} classes) from {} into {} ({:?})",
        src.len(),
        src.classes().len(),
        a.src.display(),
        a.out.display(),
        stats
    );
    Ok(())
}
