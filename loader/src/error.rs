//! The loader's error types: every message names the sample (file or record) and why,
//! and the error that caused it is kept as its [`source`](std::error::Error::source).

use std::path::PathBuf;

use stoker_augment::AugmentError;

use crate::array::CollateError;
use crate::setting::SettingError;
use crate::source::SourceError;
use crate::step::StepError;

/// Why the loader could not produce a batch.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// One sample could not be read, decoded or stepped. `what` names the file or
    /// record; `source` says which stage failed and keeps its error.
    #[error("sample {index} ({what}): {source}")]
    Sample {
        /// The sample's index in the source.
        index: usize,
        /// The file or record the sample comes from.
        what: String,
        /// Why it could not be read, decoded or stepped.
        #[source]
        source: SampleError,
    },
    /// The source as a whole is unusable (missing, damaged, empty).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A setting cannot work, alone or with this data (zero batch size, a rank
    /// outside the world, a field the data set lacks...): names the setting.
    #[error("invalid loader configuration: {0}")]
    Setting(#[from] SettingError),
    /// The data set has no samples to load.
    #[error("the data set has no samples")]
    NoSamples,
    /// A cursor was passed to a loader other than the one that made it.
    #[error("the cursor was made by another loader")]
    ForeignCursor,
    /// The trace file ([`LoaderConfig::trace`](crate::LoaderConfig::trace)) cannot be
    /// created; reported as a setting that cannot work.
    #[error("invalid loader configuration: trace: cannot create {}: {source}", path.display())]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Why it cannot be created.
        #[source]
        source: std::io::Error,
    },
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
    /// The system refused a pipeline thread (a thread or memory limit).
    #[error("the pipeline stopped unexpectedly: cannot start pipeline thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The system's refusal.
        #[source]
        source: std::io::Error,
    },
    /// A read task of the async read stage ended without its result (its runtime
    /// shut down).
    #[error("the pipeline stopped unexpectedly: read task failed: {source}")]
    ReadTask {
        /// The task's end.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A resume state from another run.
    #[error("cannot resume: {0}")]
    Resume(String),
}

/// Why one sample failed, by stage: the source of a [`LoaderError::Sample`]. Each
/// message is the sample error's reason as it always read; the error under it is
/// kept whole.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The source could not read the sample. The message leaves out the file or
    /// record, which the sample error names already (a remote error keeps its URL:
    /// it may be another object, such as an index).
    #[error("{}", read_reason(.0))]
    Read(#[source] SourceError),
    /// The image (or its mask) could not be decoded or transformed.
    #[error("{0}")]
    Decode(#[source] AugmentError),
    /// One of the caller's steps ([`crate::step`]) returned an error.
    #[error("step '{name}': {source}")]
    Step {
        /// The step's name.
        name: String,
        /// What the step returned.
        #[source]
        source: StepError,
    },
    /// The arrays the steps added to the samples of a batch do not collate (the batch
    /// fails whatever `on_error` says: a bug in the step, not bad data).
    #[error("{0}")]
    Collate(#[source] CollateError),
    /// The sample does not fit its batch or its fields: a raw record of another
    /// channel count or size, a label beyond the classes (soft labels), a field that
    /// cannot follow the transforms, an array a step added that does not match its
    /// shape.
    #[error("{0}")]
    Invalid(String),
}

/// The reason part of a source error (the sample error names the file already).
fn read_reason(e: &SourceError) -> String {
    match e {
        SourceError::Io { source, .. } => source.to_string(),
        SourceError::Format { reason, .. } | SourceError::Record { reason, .. } => reason.clone(),
        // The sample names the shard or file; the URL may be another object (an
        // index), so it stays in the reason.
        SourceError::Remote { .. } | SourceError::Setting(_) => e.to_string(),
    }
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

    /// The setting at fault, for an error about one (a [`Setting`](LoaderError::Setting)
    /// or the [`Trace`](LoaderError::Trace) file): front ends name it their own way.
    pub fn setting(&self) -> Option<crate::Setting> {
        match self {
            LoaderError::Setting(e) | LoaderError::Source(SourceError::Setting(e)) => {
                Some(e.setting)
            }
            LoaderError::Trace { .. } => Some(crate::Setting::Trace),
            _ => None,
        }
    }

    /// The index of the sample that failed, for a [`Sample`](LoaderError::Sample)
    /// error.
    pub fn sample_index(&self) -> Option<usize> {
        match self {
            LoaderError::Sample { index, .. } => Some(*index),
            _ => None,
        }
    }

    /// The source's error: the data set's ([`Source`](LoaderError::Source)), or the
    /// one that kept a sample from being read.
    pub fn source_error(&self) -> Option<&SourceError> {
        match self {
            LoaderError::Source(e)
            | LoaderError::Sample {
                source: SampleError::Read(e),
                ..
            } => Some(e),
            _ => None,
        }
    }

    /// The decoder's or a transform's error that made a sample fail.
    pub fn decode_error(&self) -> Option<&AugmentError> {
        match self {
            LoaderError::Sample {
                source: SampleError::Decode(e),
                ..
            } => Some(e),
            _ => None,
        }
    }
}
