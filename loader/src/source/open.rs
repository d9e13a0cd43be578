//! Opening a data argument: a local path or a URL (`s3://`, `gs://`, `az://`,
//! `http(s)://`, `file://`; with the `remote` feature), with its options. Every CLI
//! flag and library call that takes data comes here; what the argument is, is decided
//! by `detect.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Source, SourceError};
use crate::setting::{Setting, SettingError};

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
    /// Which part of a data set that holds several to read (MNIST's and CIFAR-10's
    /// training or test files, a Parquet split of the Hugging Face Hub's layout).
    pub split: Split,
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
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            split: Split::Train,
            mmap: false,
            cache: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            #[cfg(feature = "remote")]
            remote: crate::storage::RemoteOptions::default(),
            masks: None,
            images: None,
            parquet: super::parquet::ParquetColumns::default(),
        }
    }
}

/// Which part to read of a data set that holds more than one: MNIST's and CIFAR-10's
/// training or test files, a Hugging Face Hub repository's Parquet split. A data set
/// of one part (a folder, a packed file, tar shards) reads the same for `Train`,
/// `Test` and the names `train` and `test`, and refuses other names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// The training part: MNIST's `train-*` files, CIFAR-10's `data_batch_*.bin`, the
    /// Hub's `train` split (all the files when none is named by split).
    #[default]
    Train,
    /// The held-out part: MNIST's `t10k-*` files, CIFAR-10's `test_batch.bin`, the
    /// Hub's `validation` split (else `valid`, `val`, `test`).
    Test,
    /// A part by the name a user gave (`--split`, Python's `split=`): `train` and
    /// `test` are MNIST's and CIFAR-10's parts, and any name picks exactly that split
    /// of a Parquet set in the Hub's layout (docs/parquet.md).
    Named(String),
}

impl Split {
    /// The part a name stands for: [`Split::Named`], checked when the data set is
    /// opened (where its format is known).
    pub fn named(name: impl Into<String>) -> Split {
        Split::Named(name.into())
    }

    /// Whether MNIST and CIFAR-10 read their training files for this split.
    pub fn is_train(&self) -> bool {
        match self {
            Split::Train => true,
            Split::Test => false,
            Split::Named(n) => n != "test",
        }
    }

    /// The name a Parquet split must have exactly, for a split given by name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Split::Named(n) => Some(n),
            Split::Train | Split::Test => None,
        }
    }

    /// Refuses a name that cannot name a split: empty, or with a `/` (a split is a
    /// file name's part, not a path).
    fn check_name(&self) -> Result<(), SettingError> {
        match self.name() {
            Some(n) if n.trim().is_empty() || n.contains('/') => Err(SettingError::new(
                Setting::Split,
                format!("{n:?} is not a split's name (give train, test, validation, ...)"),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a name other than `train` and `test` for a data set of `kind` (not a
    /// Parquet set), which has no parts by name: it would read MNIST's test files, or
    /// a folder whole, without a word.
    pub(crate) fn check_for(&self, kind: &str) -> Result<(), SettingError> {
        match self.name() {
            Some(n) if n != "train" && n != "test" => Err(SettingError::new(
                Setting::Split,
                format!(
                    "'{n}' is a split by name, and {kind} has none: give train or test \
                     (other names pick the files of a Parquet set in the Hub's layout)"
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// [`open_with`] the default options and the given split:
/// `source::open("data/train", source::Split::Train)`.
pub fn open(path: impl AsRef<Path>, split: Split) -> Result<Arc<dyn Source>, SourceError> {
    open_with(
        path,
        &OpenOptions {
            split,
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
    options.split.check_name()?;
    let format = super::detect::detect(path, options)?;
    if let Some(kind) = format.without_splits() {
        options.split.check_for(kind)?;
    }
    format.open(&path.to_string_lossy(), options)
}

/// [`open_with`] for a URL (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`): the
/// same rules as a local path. Without the `remote` feature a URL is an error that
/// says so.
pub fn open_url(url: &str, options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    open_with(url, options)
}
