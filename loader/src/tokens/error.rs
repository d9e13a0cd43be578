//! The token loader's errors: each names the file (and row, line or offset) and what
//! is wrong with it.

use std::path::PathBuf;

use crate::source::SourceError;

/// Why a token loader could not be made, or a batch could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A setting out of range or contradicting another.
    #[error("{0}")]
    Settings(String),
    /// The tokenizer file does not parse, or lacks what is asked of it.
    #[error("tokenizer {path}: {reason}")]
    Tokenizer {
        /// The tokenizer.json file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// One document (or a stretch of a token file) is unusable.
    #[error("{at}: {reason}")]
    Record {
        /// The file, and the row, line or token offset within it.
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The data set could not be opened (Parquet files, URLs).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A saved state that does not fit this loader.
    #[error("token loader state: {0}")]
    State(String),
    /// The worker threads stopped before the epoch ended.
    #[error("the tokenizing workers stopped: {0}")]
    Stopped(String),
}

impl TokenError {
    pub(crate) fn record(at: impl Into<String>, reason: impl Into<String>) -> Self {
        TokenError::Record {
            at: at.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TokenError::Io {
            path: path.into(),
            source,
        }
    }
}
