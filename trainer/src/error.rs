//! The model's error type: every failure building or running a model can have, with
//! context. (The training loop's error, `TrainError`, wraps it.)

use crate::backend::BackendError;

/// What building or running a model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A backend operation failed (allocation, bad arguments, a CUDA call).
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// A call passed more samples than the model's `max_batch`, which its buffers are
    /// planned for.
    #[error("batch of {n} samples exceeds the planned maximum of {max}")]
    BatchTooLarge {
        /// Samples in the batch.
        n: usize,
        /// The model's `max_batch`.
        max: usize,
    },
    /// A call passed a batch of zero samples.
    #[error("empty batch")]
    EmptyBatch,
    /// A host input does not have the length the batch size and model need.
    #[error("{what}: expected {expected} elements, got {got}")]
    InputLen {
        /// The input, with the formula of its length, e.g. `images (n * h * w * c bytes)`.
        what: &'static str,
        /// Length it must have.
        expected: usize,
        /// Length it has.
        got: usize,
    },
    /// A host label is not below the model's class count.
    #[error("label {label} of sample {index} is out of range for {classes} classes")]
    Label {
        /// Index of the sample within the batch.
        index: usize,
        /// The offending label.
        label: u32,
        /// The model's classes (labels must be `< classes`).
        classes: usize,
    },
    /// A classification call on a multi-label model, or the other way round.
    #[error("the model is built for {model} targets, not {given}")]
    WrongTarget {
        /// The model's target (`class` or `labels`).
        model: &'static str,
        /// The target of the call.
        given: &'static str,
    },
    /// A multi-label step with no tags to learn (a batch without the `labels` field).
    #[error(
        "multi-label training needs each sample's `labels` tags, and this batch has none \
         (train on a data set with a `labels` field, or on its classes)"
    )]
    NoTags,
    /// A model, layer, optimizer step or trainer cannot be built or run from what it
    /// was given: bad sizes, an unknown name, parts that do not match.
    #[error("cannot build {what}: {reason}")]
    Config {
        /// What was being built (a model kind, a layer's name, `optimizer step`), or
        /// the name that could not be parsed.
        what: String,
        /// Why it cannot be, in words.
        reason: String,
    },
}

/// Shorthand for trainer results.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

pub(crate) fn config(what: impl Into<String>, reason: impl Into<String>) -> ModelError {
    ModelError::Config {
        what: what.into(),
        reason: reason.into(),
    }
}
