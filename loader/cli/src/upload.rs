//! `stoker-load upload LOCAL URL`: copy a file, or a folder's files (keys keep their
//! relative paths), to object storage, e.g. to stage data for a remote benchmark.

use std::path::PathBuf;

use anyhow::Context;
use stoker_loader::storage::{self, RemoteOptions};

#[derive(clap::Args)]
pub struct Args {
    /// A local file or folder.
    src: PathBuf,
    /// Where to put it: the object's URL for a file, a prefix for a folder.
    url: String,
    /// PUTs in flight for a folder.
    #[arg(long, default_value_t = 16, value_parser = crate::args::io_depth)]
    parallel: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let opts = RemoteOptions::default();
    if a.src.is_dir() {
        let n = storage::upload_dir(&a.src, &a.url, &opts, a.parallel)
            .with_context(|| format!("uploading {} to {}", a.src.display(), a.url))?;
        println!("uploaded {n} files from {} to {}", a.src.display(), a.url);
    } else {
        storage::upload_file(&a.src, &a.url, &opts)
            .with_context(|| format!("uploading {} to {}", a.src.display(), a.url))?;
        println!("uploaded {} to {}", a.src.display(), a.url);
    }
    Ok(())
}
