//! Data sources: random access to samples by index.
//!
//! A source knows how many samples it holds, each sample's label, and how to copy a
//! sample's bytes into a caller's buffer. It does not decode: encoded records (JPEG,
//! PNG) go to the augment stage, raw records carry their pixel shape.

pub mod cifar;
pub mod folder;
pub mod mnist;
pub mod packed;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use cifar::Cifar10;
pub use folder::ImageFolder;
pub use mnist::Mnist;
pub use packed::{PackedReader, PackedWriter};

/// How the bytes a source hands out are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A whole JPEG or PNG file.
    Encoded,
    /// Raw u8 HWC pixels of this shape.
    Raw {
        width: u32,
        height: u32,
        channels: u8,
    },
}

/// Random access to labelled samples. Sources are shared across reader threads.
pub trait Source: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

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
}

/// An error opening or reading a source. Messages name the file or record.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file exists but is not what it should be (damaged, truncated, wrong format).
    #[error("{}: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    /// One record inside a container is bad.
    #[error("{what}: {reason}")]
    Record { what: String, reason: String },
}

impl SourceError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SourceError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        SourceError::Format {
            path: path.into(),
            reason: reason.into(),
        }
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
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            train: true,
            mmap: false,
        }
    }
}

/// [`open_with`] the default options and the given split.
pub fn open(path: &Path, train: bool) -> Result<Arc<dyn Source>, SourceError> {
    open_with(
        path,
        &OpenOptions {
            train,
            ..OpenOptions::default()
        },
    )
}

/// Open whatever `path` holds: a packed file, an ImageFolder directory, or a directory
/// (or file) of MNIST IDX or CIFAR-10 binary batches.
///
/// A directory is MNIST when it holds any MNIST file (`train-images-idx3-ubyte`, …),
/// else CIFAR-10 when it holds any batch (`data_batch_N.bin`, `test_batch.bin`, also
/// inside `cifar-10-batches-bin/`), else an ImageFolder. A file is packed when it starts
/// with the packed magic, MNIST when it is an IDX file (plain or gzipped), CIFAR-10 when
/// it is a `.bin` batch.
pub fn open_with(path: &Path, options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    let train = options.train;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::format(path, "no such file or directory"))
        }
        Err(e) => return Err(SourceError::io(path, e)),
    };
    if meta.is_dir() {
        if Mnist::detect(path) {
            return Ok(Arc::new(Mnist::open_dir(path, train)?));
        }
        if Cifar10::detect(path) {
            return Ok(Arc::new(Cifar10::open_dir(path, train)?));
        }
        return Ok(Arc::new(ImageFolder::open(path)?));
    }
    if meta.len() == 0 {
        return Err(SourceError::format(path, "empty file"));
    }
    let mut head = [0u8; 8];
    let n = {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(|e| SourceError::io(path, e))?;
        let mut n = 0;
        // `take` + read_to_end would allocate; a short loop fills the fixed array.
        let mut file = file.take(head.len() as u64);
        while n < head.len() {
            match file.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SourceError::io(path, e)),
            }
        }
        n
    };
    let head = &head[..n];
    if packed::has_magic(head) {
        let reader = if options.mmap {
            PackedReader::open_mapped(path)?
        } else {
            PackedReader::open(path)?
        };
        return Ok(Arc::new(reader));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    // Name first: a CIFAR batch starts with arbitrary pixel bytes, which could
    // happen to spell an IDX magic.
    if name.ends_with(".bin") {
        return Ok(Arc::new(Cifar10::open_file(path)?));
    }
    let idx_magic = |m: u32| head.starts_with(&m.to_be_bytes());
    let gz = head.starts_with(&[0x1f, 0x8b]);
    if idx_magic(mnist::IMAGES_MAGIC)
        || idx_magic(mnist::LABELS_MAGIC)
        || (gz && (name.contains("idx3") || name.contains("idx1")))
    {
        return Ok(Arc::new(Mnist::open_file(path)?));
    }
    Err(SourceError::format(
        path,
        "unknown file format: not a stoker packed file (magic STKPACK1), an MNIST IDX file \
         or a CIFAR-10 .bin batch; for an image folder give its directory",
    ))
}
