//! Opening a data argument: a local path or a URL (`s3://`, `gs://`, `az://`,
//! `http(s)://`, `file://`; with the `remote` feature), with its options. Every CLI
//! flag and library call that takes data comes here; what the argument is, is decided
//! by `detect.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Source, SourceError};

/// The default size bound of `--cache DIR`: 10 GiB.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;

/// True when `s` starts with `scheme://` (a URL, not a local path).
pub fn is_url(s: &str) -> bool {
    match s.find("://") {
        Some(i) if i > 0 => {
            let scheme = &s[..i];
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        _ => false,
    }
}

/// How [`open_with`] opens a data set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// For MNIST/CIFAR sets that hold both splits: the training split (else the test
    /// split).
    pub train: bool,
    /// Read packed files through a memory map instead of positioned reads (faster per
    /// record; a file truncated while open then kills the process with SIGBUS).
    pub mmap: bool,
    /// Keep whole remote objects (tar shards, images; not packed files, which are read
    /// by ranges) in this folder for later epochs and runs.
    pub cache: Option<PathBuf>,
    /// The cache's size bound in bytes (least recently used objects leave first).
    pub cache_bytes: u64,
    /// Timeouts, retries and store settings for URLs.
    #[cfg(feature = "remote")]
    pub remote: crate::storage::RemoteOptions,
    /// The folder of masks (a path or URL) that pairs with the images of the data
    /// argument by stem (segmentation pairs).
    pub masks: Option<String>,
    /// The folder of images (a path or URL) that a COCO annotation file's
    /// `file_name`s are relative to; required for COCO, ignored elsewhere.
    pub images: Option<String>,
    /// The columns of a Parquet data set.
    pub parquet: super::parquet::ParquetColumns,
    /// The split of a Hugging Face Hub repository's Parquet files (`data/{split}-*`,
    /// `{config}/{split}/*`); `None`: `train` when `train` is set, else `validation`
    /// or `test` (docs/parquet.md).
    pub split: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            train: true,
            mmap: false,
            cache: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            #[cfg(feature = "remote")]
            remote: crate::storage::RemoteOptions::default(),
            masks: None,
            images: None,
            parquet: super::parquet::ParquetColumns::default(),
            split: None,
        }
    }
}

/// Which part to read of a data set that holds more than one: MNIST's and CIFAR-10's
/// training or test files, a Hugging Face Hub repository's Parquet split. A data set
/// of one part (a folder, a packed file, tar shards) reads the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// The training part: MNIST's `train-*` files, CIFAR-10's `data_batch_*.bin`, the
    /// Hub's `train` split.
    #[default]
    Train,
    /// The held-out part: MNIST's `t10k-*` files, CIFAR-10's `test_batch.bin`, the
    /// Hub's `validation` split (else `test`).
    Test,
}

impl Split {
    /// Whether this is the training part (as [`OpenOptions::train`] says it).
    pub fn is_train(self) -> bool {
        self == Split::Train
    }
}

/// [`open_with`] the default options and the given split:
/// `source::open("data/train", source::Split::Train)`.
pub fn open(path: impl AsRef<Path>, split: Split) -> Result<Arc<dyn Source>, SourceError> {
    open_with(
        path,
        &OpenOptions {
            train: split.is_train(),
            ..OpenOptions::default()
        },
    )
}

/// Open whatever `path` holds, a local path or a URL: a packed file, an image folder,
/// a folder (or file) of MNIST IDX or CIFAR-10 binary batches, tar shards (a `.tar`
/// file, a folder of them, or a brace pattern `train-{000000..000127}.tar`), Parquet
/// files (one, a glob, or a folder in the Hugging Face Hub's layout), a COCO
/// annotation file (`.json`, its images in the folder `options.images`, required), a
/// JSON-lines manifest (`.jsonl`, `.ndjson`), or segmentation pairs (`options.masks`,
/// or a folder holding `images/` and `masks/`).
///
/// Local paths and URLs follow the same rules (`detect.rs`); a local data set is read
/// with plain file I/O (positioned reads, `options.mmap`), a URL through the storage
/// runtime. MNIST and CIFAR-10 are read from local files only: behind a URL they are
/// an error that says so.
pub fn open_with(
    path: impl AsRef<Path>,
    options: &OpenOptions,
) -> Result<Arc<dyn Source>, SourceError> {
    let path = path.as_ref();
    let format = super::detect::detect(path, options)?;
    format.open(&path.to_string_lossy(), options)
}

/// [`open_with`] for a URL (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`): the
/// same rules as a local path. Without the `remote` feature a URL is an error that
/// says so.
pub fn open_url(url: &str, options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    open_with(url, options)
}
