//! The token loader's errors: each names the file (and row, line or offset) and what
//! is wrong with it.

use std::path::PathBuf;

use crate::source::SourceError;

/// One of the token loader's settings, named as its field of
/// [`TokenConfig`](super::TokenConfig) (and as `stoker.TokenLoader`'s argument): an
/// error about a setting carries this value, and each front end spells it its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenSetting {
    /// The data sets (what a mixture can hold, what a `.bin` file holds).
    Data,
    /// The tokenizer file (needed for text).
    Tokenizer,
    /// Tokens each window predicts.
    SeqLen,
    /// Windows per batch.
    BatchSize,
    /// The end-of-text token.
    Eos,
    /// Tokenizing threads.
    Workers,
    /// This process's rank.
    Rank,
    /// The number of processes sharing the documents.
    WorldSize,
    /// The largest text chunk tokenized at once.
    ChunkBytes,
    /// Windows made ahead of the consumer.
    Ahead,
    /// A mixture's weights.
    Weights,
    /// A mixture's stop rule.
    Stop,
}

impl TokenSetting {
    /// The setting's name: its field's name in the token loader's configuration.
    pub const fn name(self) -> &'static str {
        match self {
            TokenSetting::Data => "data",
            TokenSetting::Tokenizer => "tokenizer",
            TokenSetting::SeqLen => "seq_len",
            TokenSetting::BatchSize => "batch_size",
            TokenSetting::Eos => "eos",
            TokenSetting::Workers => "workers",
            TokenSetting::Rank => "rank",
            TokenSetting::WorldSize => "world_size",
            TokenSetting::ChunkBytes => "chunk_bytes",
            TokenSetting::Ahead => "ahead",
            TokenSetting::Weights => "weights",
            TokenSetting::Stop => "stop",
        }
    }
}

impl std::fmt::Display for TokenSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a token loader could not be made, or a batch could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A setting out of range, contradicting another, or not fit for the data: which
    /// one, and why.
    #[error("{setting}: {problem}")]
    Setting {
        /// The setting at fault.
        setting: TokenSetting,
        /// What is wrong with it, and what would work.
        problem: String,
    },
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
    /// `setting` cannot work because of `problem`.
    pub(crate) fn setting(setting: TokenSetting, problem: impl Into<String>) -> Self {
        TokenError::Setting {
            setting,
            problem: problem.into(),
        }
    }

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
