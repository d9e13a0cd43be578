//! The loader's error type: every message names the sample (file or record) and why.

use crate::source::SourceError;

/// Why the loader could not produce a batch.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// One sample could not be read or decoded. `what` names the file or record.
    #[error("sample {index} ({what}): {reason}")]
    Sample {
        /// The sample's index in the source.
        index: usize,
        /// The file or record the sample comes from.
        what: String,
        /// Why it could not be read or decoded.
        reason: String,
    },
    /// The source as a whole is unusable (missing, damaged, empty).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The configuration cannot work (zero batch size, bad rank, ...).
    #[error("invalid loader configuration: {0}")]
    Config(String),
    /// A pipeline thread panicked; the epoch ends here rather than hang.
    #[error("a pipeline thread panicked while {during}: {message}")]
    Panic {
        /// What the thread was doing, e.g. "collating a batch".
        during: String,
        /// The panic's message.
        message: String,
    },
    /// A pipeline thread went away without saying why (should not happen; never a hang).
    #[error("the pipeline stopped unexpectedly: {0}")]
    Stopped(String),
    /// A resume state from another run.
    #[error("cannot resume: {0}")]
    Resume(String),
}

impl LoaderError {
    /// Turn a caught panic payload into an error value.
    pub(crate) fn from_panic(during: String, payload: Box<dyn std::any::Any + Send>) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-string panic payload".to_string()
        };
        LoaderError::Panic { during, message }
    }
}
