//! The loader's resumable state: where in which epoch of which run it stands.

use serde::{Deserialize, Serialize};

/// Everything needed to continue an epoch exactly where it stopped. The order of an
/// epoch and every sample's augmentation are functions of (seed, epoch, index), so
/// (seed, epoch, next_batch) is enough; the other fields guard against resuming a
/// state with a loader that would cut the data differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderState {
    pub seed: u64,
    pub epoch: u64,
    /// The first batch not yet delivered.
    pub next_batch: usize,
    pub batch_size: usize,
    /// Number of samples in the source.
    pub samples: usize,
    pub rank: usize,
    pub world: usize,
}

impl LoaderState {
    /// Serialised as a small JSON object (for checkpoints).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(s: &str) -> Result<LoaderState, serde_json::Error> {
        serde_json::from_str(s)
    }
}
