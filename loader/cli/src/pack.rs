//! `stoker-load pack SRC OUT`: copy a data set into one packed file, or with
//! `--format tar` into WebDataset tar shards (and their indexes) in the folder OUT.
//! An OUT that is a URL is written locally first, then uploaded.

use std::path::{Path, PathBuf};

use anyhow::Context;
use stoker_loader::source::{self, is_url, packed, tar, Encoding, PackOptions};

use crate::args;
use crate::data::DataArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One stoker packed file.
    Packed,
    /// WebDataset tar shards (KEY.jpg/png + KEY.cls) with a SHARD.tar.idx index each.
    Tar,
}

#[derive(clap::Args)]
pub struct Args {
    /// A data set (any the loader reads, local or a URL).
    src: PathBuf,
    /// The packed file to write (written to a temporary name, renamed when complete),
    /// or with --format tar the folder of shards; a URL is uploaded to when done.
    out: PathBuf,
    #[command(flatten)]
    source: DataArgs,
    #[arg(long, value_enum, default_value_t = Format::Packed)]
    format: Format,
    /// The largest tar shard (K, M, G suffixes); a sample larger on its own gets a
    /// shard to itself.
    #[arg(long, default_value = "256M", value_parser = args::shard_size)]
    shard_size: u64,
    /// Resize every image whose longer side exceeds this many pixels to it, keeping
    /// its aspect ratio (antialiased; sizes as PIL's Image.thumbnail gives them).
    #[arg(long, value_parser = args::max_side)]
    max_side: Option<u32>,
    /// How images are stored: keep (their bytes as they are; re-encoded in their own
    /// format only when resized), raw (u8 pixels with their shape, read without
    /// decoding), jpeg:Q (quality 1 to 100) or png.
    #[arg(long, default_value = "keep", value_parser = args::encoding)]
    encoding: Encoding,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let opts = PackOptions::new(a.max_side, a.encoding)?;
    let src = source::open_with(&a.src, &a.source.options())?;
    let out_text = a.out.to_string_lossy().into_owned();
    let remote = is_url(&out_text);
    if remote && a.format == Format::Tar {
        refuse_remote_shards(&out_text)?;
    }
    // A remote OUT is staged in a temporary folder beside nothing the user owns.
    let staging = if remote {
        Some(Staging(tempdir_for(&out_text)?))
    } else {
        None
    };
    let local_out: PathBuf = match staging.as_ref().map(|s| &s.0) {
        Some(dir) if a.format == Format::Tar => dir.join("shards"),
        Some(dir) => dir.join("data.pack"),
        None => a.out.clone(),
    };
    let bar = crate::progress_bar(src.len() as u64, "pack");
    let what = || format!("packing {} into {}", a.src.display(), a.out.display());
    let summary = match a.format {
        Format::Packed => {
            let stats = packed::pack_source_with(src.as_ref(), &local_out, &opts, |done, _| {
                bar.set_position(done as u64)
            })
            .with_context(what)?;
            format!("{stats:?}")
        }
        Format::Tar => {
            let stats =
                tar::pack_tar_with(src.as_ref(), &local_out, a.shard_size, &opts, |done, _| {
                    bar.set_position(done as u64)
                })
                .with_context(what)?;
            format!("{stats:?}")
        }
    };
    bar.finish_and_clear();
    if remote {
        upload(&local_out, &out_text, a.format)?;
    }
    drop(staging);
    println!(
        "packed {} records ({} classes) from {} into {} ({summary})",
        src.len(),
        src.classes().len(),
        a.src.display(),
        a.out.display(),
    );
    Ok(())
}

/// A remote prefix that holds `.tar` objects already is refused before any work, as a
/// local folder is (`tar::pack_tar`): the upload would overwrite a finished pack's
/// shards, or mix another pack's in.
fn refuse_remote_shards(url: &str) -> anyhow::Result<()> {
    use stoker_loader::storage::{self, Bucket, RemoteOptions};
    let (bucket, key) = Bucket::open(url, &RemoteOptions::default())?;
    let prefix = if key.is_empty() || key.ends_with('/') {
        key
    } else {
        format!("{key}/")
    };
    let listed = storage::wait(async move { bucket.list(&prefix).await })
        .and_then(|r| r)
        .with_context(|| format!("listing {url} before packing into it"))?;
    if let Some(o) = listed.iter().find(|o| tar::is_tar_name(&o.key)) {
        anyhow::bail!(
            "{url} holds .tar files already ({}): shards of another pack would be \
             overwritten or mix in; give an empty or new prefix",
            o.url()
        );
    }
    Ok(())
}

fn upload(local: &Path, url: &str, format: Format) -> anyhow::Result<()> {
    use stoker_loader::storage::{self, RemoteOptions};
    let opts = RemoteOptions::default();
    match format {
        Format::Packed => storage::upload_file(local, url, &opts)?,
        Format::Tar => {
            storage::upload_dir(local, url, &opts, 16)?;
        }
    }
    Ok(())
}

/// A staging folder, removed when dropped (after the upload, or on an error).
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh staging folder under the system's temporary folder.
fn tempdir_for(url: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "stoker-pack-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("staging {url} in {}", dir.display()))?;
    Ok(dir)
}
