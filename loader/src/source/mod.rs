//! Data sources: random access to samples by index.
//!
//! A source knows how many samples it holds, each sample's label, and how to copy a
//! sample's bytes into a caller's buffer. It does not decode: encoded records (JPEG,
//! PNG) go to the augment stage, raw records carry their pixel shape.

pub mod cifar;
pub mod coco;
mod detect;
pub mod files;
pub mod folder;
mod location;
pub mod manifest;
pub mod mixture;
pub mod mnist;
mod open;
pub mod pack_image;
pub mod packed;
pub mod parquet;
pub mod place;
pub mod segpairs;
pub mod tar;
mod why;

use std::future::Future;
use std::ops::Range;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::sample::{Annotation, Fields, KeypointSchema};
pub(crate) use why::Why;

pub use cifar::Cifar10;
pub use coco::Coco;
pub use folder::ImageFolder;
pub use manifest::Manifest;
pub use mnist::Mnist;
pub use open::{is_url, open, open_url, open_with, OpenOptions, Split, DEFAULT_CACHE_BYTES};
pub use pack_image::{Encoding, PackOptions};
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
    /// the schema and the row groups; COCO: the annotations it left out); empty for
    /// sources with nothing to add.
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
                    Err(SourceError::record(
                        format!("sample {index}"),
                        format!("the read task was cancelled: {e}"),
                    )
                    .caused_by(e)),
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
                Err(SourceError::record(
                    format!("sample {index}"),
                    format!("the read task was cancelled: {e}"),
                )
                .caused_by(e)),
                Vec::new(),
            ),
        }
    })
}

pub(crate) use crate::positioned::read_at;

/// The error under a [`SourceError`] (a parser's, a decoder's, the storage client's),
/// kept as its [`source`](std::error::Error::source).
pub(crate) type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error opening or reading a source. Messages name the file or record; the error
/// that caused one, where there was one, is its
/// [`source`](std::error::Error::source).
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
        /// The error that found it, where there was one (a JSON or Parquet parser's,
        /// the local cache's [`StorageError`](crate::storage::StorageError)).
        #[source]
        source: Option<Cause>,
    },
    /// One record inside a container is bad.
    #[error("{what}: {reason}")]
    Record {
        /// The record, as [`Source::describe`] names it.
        what: String,
        /// What is wrong with it.
        reason: String,
        /// The error that found it, where there was one (a decoder's, a cancelled
        /// read task's).
        #[source]
        source: Option<Cause>,
    },
    /// A remote object could not be read (after retries), or is not what it should
    /// be. `url` names it.
    #[error("{url}: {reason}")]
    Remote {
        /// The object's URL.
        url: String,
        /// Why it could not be read, or what is wrong with it.
        reason: String,
        /// The error that found it, where there was one: for a failed request the
        /// [`StorageError`](crate::storage::StorageError), whose own source is the
        /// storage client's error.
        #[source]
        source: Option<Cause>,
    },
    /// An option the data set is opened with does not fit it (a split by name of a
    /// set that has none): names the setting, as [`LoaderError::Setting`] does.
    ///
    /// [`LoaderError::Setting`]: crate::LoaderError::Setting
    #[error(transparent)]
    Setting(#[from] crate::SettingError),
}

impl SourceError {
    /// An [`Io`](SourceError::Io) error about `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SourceError::Io {
            path: path.into(),
            source,
        }
    }

    /// A [`Format`](SourceError::Format) error about `path` (with no error under it;
    /// see [`caused_by`](Self::caused_by)).
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        SourceError::Format {
            path: path.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// A [`Record`](SourceError::Record) error about the record `what` (with no error
    /// under it; see [`caused_by`](Self::caused_by)).
    pub fn record(what: impl Into<String>, reason: impl Into<String>) -> Self {
        SourceError::Record {
            what: what.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// A [`Remote`](SourceError::Remote) error about the object at `url` (with no error
    /// under it; see [`caused_by`](Self::caused_by)).
    pub fn remote(url: impl Into<String>, reason: impl Into<String>) -> Self {
        SourceError::Remote {
            url: url.into(),
            reason: reason.into(),
            source: None,
        }
    }

    /// This error with `cause` as its [`source`](std::error::Error::source): the error
    /// that its reason reports. An [`Io`](SourceError::Io) error keeps its own.
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        match &mut self {
            // A setting's error has no cause under it to keep.
            SourceError::Io { .. } | SourceError::Setting(_) => {}
            SourceError::Format { source, .. }
            | SourceError::Record { source, .. }
            | SourceError::Remote { source, .. } => *source = Some(cause.into()),
        }
        self
    }

    /// The file or directory the error is about, where it names one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            SourceError::Io { path, .. } | SourceError::Format { path, .. } => Some(path),
            SourceError::Record { .. } | SourceError::Remote { .. } | SourceError::Setting(_) => {
                None
            }
        }
    }

    /// The URL of the remote object the error is about, for a
    /// [`Remote`](SourceError::Remote) error.
    pub fn url(&self) -> Option<&str> {
        match self {
            SourceError::Remote { url, .. } => Some(url),
            _ => None,
        }
    }

    /// The record the error is about, as [`Source::describe`] names it, for a
    /// [`Record`](SourceError::Record) error.
    pub fn record_name(&self) -> Option<&str> {
        match self {
            SourceError::Record { what, .. } => Some(what),
            _ => None,
        }
    }
}

#[cfg(feature = "remote")]
impl From<crate::storage::StorageError> for SourceError {
    /// The storage error, kept as the source, under a message of the same words.
    fn from(e: crate::storage::StorageError) -> Self {
        use crate::storage::StorageError;
        let out = match &e {
            StorageError::Cache {
                path, what, source, ..
            } => SourceError::format(path.clone(), format!("{what}: {source}")),
            StorageError::Url { url, reason, .. } => {
                SourceError::remote(url.clone(), reason.clone())
            }
            StorageError::Config { url, reason, .. } => {
                SourceError::remote(url.clone(), format!("cannot configure the store: {reason}"))
            }
            StorageError::NotFound { url, reason, .. } => {
                SourceError::remote(url.clone(), format!("not found ({reason})"))
            }
            StorageError::Request {
                url, what, reason, ..
            } => SourceError::remote(url.clone(), format!("{what} failed: {reason}")),
            StorageError::Changed { url, .. } => {
                // The message starts with the URL, as every storage error's does.
                let text = e.to_string();
                let reason = text.strip_prefix(url.as_str()).unwrap_or(&text);
                SourceError::remote(url.clone(), reason.trim_start_matches(": "))
            }
            StorageError::Runtime { .. } => SourceError::remote("storage", e.to_string()),
        };
        out.caused_by(e)
    }
}
