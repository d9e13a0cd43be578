//! Data sources: random access to samples by index.
//!
//! A source knows how many samples it holds, each sample's label, and how to copy a
//! sample's bytes into a caller's buffer. It does not decode: encoded records (JPEG,
//! PNG) go to the augment stage, raw records carry their pixel shape.

pub mod cifar;
pub mod coco;
pub mod files;
pub mod folder;
pub mod manifest;
pub mod mixture;
pub mod mnist;
mod open;
pub mod packed;
pub mod parquet;
pub mod place;
#[cfg(feature = "remote")]
pub mod remote_folder;
pub mod segpairs;
pub mod tar;

use std::future::Future;
use std::ops::Range;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::sample::{Annotation, Fields, KeypointSchema};

pub use cifar::Cifar10;
pub use coco::Coco;
pub use folder::ImageFolder;
pub use manifest::Manifest;
pub use mnist::Mnist;
pub use open::{is_url, open, open_url, open_with, OpenOptions, DEFAULT_CACHE_BYTES};
pub use packed::{PackedReader, PackedWriter};
pub use parquet::{BoxFormat, ParquetColumns, ParquetSource};
pub use segpairs::SegPairs;
pub use tar::TarSource;

/// What [`Source::read_sample_async`] yields: the read's outcome, the buffer and the
/// annotation back.
pub type SampleFuture =
    Pin<Box<dyn Future<Output = (Result<RecordKind, SourceError>, Vec<u8>, Annotation)> + Send>>;

/// The most classes a data set may have (labels are below it). Where the class count
/// comes from label values (tar shards without a class table) it bounds the class list
/// a stray label could otherwise make enormous (a `.cls` of 4294967294).
pub use crate::sample::MAX_CLASSES;

/// Opens `path` for reading if it is a regular file. Anything else is an error saying
/// what it is: a FIFO would block the open (and the loader) until something writes to
/// it, and a device is not a data set. The open itself does not block (`O_NONBLOCK`,
/// which regular files ignore).
pub fn open_regular(path: &std::path::Path) -> Result<std::fs::File, SourceError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(|e| SourceError::io(path, e))?;
    let meta = file.metadata().map_err(|e| SourceError::io(path, e))?;
    if !meta.is_file() {
        return Err(SourceError::format(
            path,
            format!(
                "{}, not a regular file: give a file or a folder of data",
                crate::durable::node_kind(&meta)
            ),
        ));
    }
    Ok(file)
}

/// What [`Source::read_async`] yields: the read's outcome and the buffer back.
pub type ReadFuture =
    Pin<Box<dyn Future<Output = (Result<RecordKind, SourceError>, Vec<u8>)> + Send>>;

/// How the bytes a source hands out are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A whole JPEG or PNG file.
    Encoded,
    /// Raw u8 HWC pixels of this shape.
    Raw {
        /// Width of the image in pixels.
        width: u32,
        /// Height of the image in pixels.
        height: u32,
        /// Bytes per pixel (1 for gray, 3 for RGB).
        channels: u8,
    },
}

/// Random access to labelled samples. Sources are shared across reader threads.
pub trait Source: Send + Sync + 'static {
    /// Number of samples.
    fn len(&self) -> usize;

    /// Whether the source has no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Class names, indexed by label.
    fn classes(&self) -> &[String];

    /// The label of sample `index` (cheap: no I/O).
    fn label(&self, index: usize) -> u32;

    /// Where sample `index` comes from, for messages: a path, or `FILE record N`.
    fn describe(&self, index: usize) -> String;

    /// Copy sample `index`'s bytes into `buf` (cleared first; its capacity is reused).
    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError>;

    /// A short name of the format, e.g. `folder`, `packed`, `mnist`, `cifar10`.
    fn format(&self) -> &'static str;

    /// The samples of each shard, as index ranges in order that cover `0..len()`,
    /// for sources stored in shards (tar files): a shuffled epoch then visits shard
    /// by shard (see [`Sampler`](crate::Sampler)). `None`: no shards.
    fn shards(&self) -> Option<&[Range<usize>]> {
        None
    }

    /// The mixture this source is, if it is one (its epochs then follow the
    /// mixture's order rather than the sampler's).
    fn mixture(&self) -> Option<&crate::source::mixture::Mixture> {
        None
    }

    /// The fields this source's samples carry: image and class unless it says more.
    fn fields(&self) -> Fields {
        Fields::CLASSIFICATION
    }

    /// The points of a keypoint instance, when samples carry keypoints.
    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        None
    }

    /// How the container is laid out, a line each, for `stoker-load inspect` (Parquet:
    /// the schema and the row groups); empty for sources with nothing to add.
    fn layout(&self) -> Vec<String> {
        Vec::new()
    }

    /// Reads sample `index`: its image bytes into `buf`, as [`read`](Self::read) does,
    /// and those of its `wanted` fields beyond image and class into `ann` (cleared
    /// first), in the coordinates of the image before any transform. The loader calls
    /// it only when it wants such a field; sources with fields override it.
    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        let _ = wanted;
        ann.clear();
        self.read(index, buf)
    }

    /// [`read_sample`](Self::read_sample) as a future (see
    /// [`read_async`](Self::read_async)); by default on tokio's blocking pool.
    fn read_sample_async(
        self: Arc<Self>,
        index: usize,
        wanted: Fields,
        mut buf: Vec<u8>,
        mut ann: Annotation,
    ) -> SampleFuture {
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || {
                let r = self.read_sample(index, wanted, &mut buf, &mut ann);
                (r, buf, ann)
            });
            match task.await {
                Ok(out) => out,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => (
                    Err(SourceError::Record {
                        what: format!("sample {index}"),
                        reason: format!("the read task was cancelled: {e}"),
                    }),
                    Vec::new(),
                    Annotation::default(),
                ),
            }
        })
    }

    /// [`read`](Self::read) as a future, for the async read stage, which keeps
    /// io_depth of them in flight. The default runs `read` on tokio's blocking pool
    /// (so it must be polled inside a tokio runtime); remote sources instead issue
    /// their requests on the storage runtime, holding no thread while they wait.
    fn read_async(self: Arc<Self>, index: usize, buf: Vec<u8>) -> ReadFuture {
        read_blocking(self, index, buf)
    }
}

/// [`Source::read`] on tokio's blocking pool, as a [`ReadFuture`]; a panic in `read`
/// resumes in the awaiting task.
pub fn read_blocking<S: Source + ?Sized>(
    src: Arc<S>,
    index: usize,
    mut buf: Vec<u8>,
) -> ReadFuture {
    Box::pin(async move {
        let task = tokio::task::spawn_blocking(move || {
            let r = src.read(index, &mut buf);
            (r, buf)
        });
        match task.await {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => (
                Err(SourceError::Record {
                    what: format!("sample {index}"),
                    reason: format!("the read task was cancelled: {e}"),
                }),
                Vec::new(),
            ),
        }
    })
}

pub(crate) use crate::positioned::read_at;

/// An error opening or reading a source. Messages name the file or record.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file or directory could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists but is not what it should be (damaged, truncated, wrong format).
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// One record inside a container is bad.
    #[error("{what}: {reason}")]
    Record {
        /// The record, as [`Source::describe`] names it.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A remote object could not be read (after retries), or is not what it should
    /// be. `url` names it.
    #[error("{url}: {reason}")]
    Remote {
        /// The object's URL.
        url: String,
        /// Why it could not be read, or what is wrong with it.
        reason: String,
    },
}

impl SourceError {
    /// An [`Io`](SourceError::Io) error about `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SourceError::Io {
            path: path.into(),
            source,
        }
    }

    /// A [`Format`](SourceError::Format) error about `path`.
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        SourceError::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(feature = "remote")]
impl From<crate::storage::StorageError> for SourceError {
    fn from(e: crate::storage::StorageError) -> Self {
        use crate::storage::StorageError;
        let remote = |url: String, reason: String| SourceError::Remote { url, reason };
        match e {
            StorageError::Cache { path, what, source } => SourceError::Format {
                reason: format!("{what}: {source}"),
                path,
            },
            StorageError::Url { url, reason } => remote(url, reason),
            StorageError::Config { url, reason } => {
                remote(url, format!("cannot configure the store: {reason}"))
            }
            StorageError::NotFound { url, reason } => remote(url, format!("not found ({reason})")),
            StorageError::Request { url, what, reason } => {
                remote(url, format!("{what} failed: {reason}"))
            }
            e @ StorageError::Changed { .. } => {
                // The message starts with the URL, as every storage error's does.
                let url = e.url().unwrap_or_default().to_string();
                let text = e.to_string();
                let reason = text.strip_prefix(url.as_str()).unwrap_or(&text);
                let reason = reason.trim_start_matches(": ").to_string();
                remote(url, reason)
            }
            StorageError::Runtime(r) => {
                remote("storage".into(), format!("the storage runtime: {r}"))
            }
        }
    }
}
