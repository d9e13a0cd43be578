//! The model's error type: every failure building or running a model can have, with
//! context. (The training loop's error, `TrainError`, wraps it.)

use crate::backend::BackendError;

/// What building or running a model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    #[error("batch of {n} samples exceeds the planned maximum of {max}")]
    BatchTooLarge { n: usize, max: usize },
    #[error("empty batch")]
    EmptyBatch,
    #[error("{what}: expected {expected} elements, got {got}")]
    InputLen {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("label {label} of sample {index} is out of range for {classes} classes")]
    Label {
        index: usize,
        label: u32,
        classes: usize,
    },
    /// A classification call on a multi-label model, or the other way round.
    #[error("the model is built for {model} targets, not {given}")]
    WrongTarget {
        model: &'static str,
        given: &'static str,
    },
    /// A multi-label step with no tags to learn (a batch without the `labels` field).
    #[error(
        "multi-label training needs each sample's `labels` tags, and this batch has none \
         (train on a data set with a `labels` field, or on its classes)"
    )]
    NoTags,
    #[error("cannot build {what}: {reason}")]
    Config { what: String, reason: String },
}

/// Shorthand for trainer results.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

pub(crate) fn config(what: impl Into<String>, reason: impl Into<String>) -> ModelError {
    ModelError::Config {
        what: what.into(),
        reason: reason.into(),
    }
}
