//! The loader's resumable state: where in which epoch of which run it stands.

use serde::{Deserialize, Serialize};

use crate::source::mixture::{MixPos, Stop};
use crate::source::Source;

/// Everything needed to continue an epoch exactly where it stopped. The order of an
/// epoch and every sample's augmentation are functions of (seed, epoch, index), so
/// (seed, epoch, next_batch) is enough; the other fields guard against resuming a
/// state with a loader that would cut the data differently.
///
/// `rank`, `world` and `batch_size` are those of the run that saved it; a loader with
/// another rank count or batch size takes over the rest of the epoch (see
/// [`Elastic`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoaderState {
    /// The run's seed ([`LoaderConfig::seed`](crate::LoaderConfig::seed)).
    pub seed: u64,
    /// The epoch the state stands in.
    pub epoch: u64,
    /// The first batch not yet delivered.
    pub next_batch: usize,
    /// Samples per batch of the run that saved the state.
    pub batch_size: usize,
    /// Number of samples in the source.
    pub samples: usize,
    /// Rank of the process that saved the state.
    pub rank: usize,
    /// Number of ranks of the run that saved the state.
    #[serde(alias = "world")]
    pub world_size: usize,
    /// The data set's [`fingerprint`]: a state of another data set with the same
    /// number of samples is refused. `None` in states saved before it existed (they
    /// are checked as before, without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<u64>,
    /// Set once the epoch was taken over from another layout: where in the rest of
    /// the epoch `next_batch` counts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
    /// A mixture's position; `None` for one source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture: Option<MixtureState>,
}

/// Where a mixture stands: the plan `next_batch` counts in starts at `base` (drawn
/// with `weights`), and once the batches before `next_batch` are taken on every rank
/// the mixture is at `at`. `end`: the draw counter a `never` epoch ends at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixtureState {
    /// The mixture's stop rule.
    pub stop: Stop,
    /// The weights the plan was drawn with, one per source.
    pub weights: Vec<f64>,
    /// Samples in each source.
    pub lens: Vec<usize>,
    /// Where the mixture stood at the start of the plan `next_batch` counts in.
    pub base: MixPos,
    /// Where the mixture stands once the batches before `next_batch` are taken on
    /// every rank.
    pub at: MixPos,
    /// The draw counter a `never` epoch ends at; `None` under the other stop rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
}

/// Samples whose names go into a [`fingerprint`] (spread evenly, first and last
/// included); every sample's label goes in.
const NAMED_SAMPLES: usize = 4096;

/// A fingerprint of a data set: a hash (xxh3) of its sample count, its class names,
/// every sample's label, and the names ([`Source::describe`]) of up to 4096 samples
/// spread evenly through it, with the prefix those names share removed, so that the
/// same data set copied to another folder or bucket keeps its fingerprint. It costs
/// one pass over the labels, once per loader.
pub fn fingerprint(source: &dyn Source) -> u64 {
    use xxhash_rust::xxh3::Xxh3;
    let n = source.len();
    let mut h = Xxh3::new();
    let text = |h: &mut Xxh3, s: &str| {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    h.update(&(n as u64).to_le_bytes());
    let classes = source.classes();
    h.update(&(classes.len() as u64).to_le_bytes());
    for c in classes {
        text(&mut h, c);
    }
    for i in 0..n {
        h.update(&source.label(i).to_le_bytes());
    }
    let picks: Vec<usize> = if n <= NAMED_SAMPLES {
        (0..n).collect()
    } else {
        (0..NAMED_SAMPLES)
            .map(|k| k * (n - 1) / (NAMED_SAMPLES - 1))
            .collect()
    };
    let names: Vec<String> = picks.iter().map(|&i| source.describe(i)).collect();
    let mut common = names.first().map_or(0, String::len);
    for name in &names[1.min(names.len())..] {
        common = names[0]
            .bytes()
            .zip(name.bytes())
            .take(common)
            .take_while(|(a, b)| a == b)
            .count();
    }
    // On a character boundary of every name (they share these bytes).
    while common > 0 && !names[0].is_char_boundary(common) {
        common -= 1;
    }
    for name in &names {
        text(&mut h, &name[common..]);
    }
    h.digest()
}

impl LoaderState {
    /// Serialised as a small JSON object (for checkpoints).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a state written by [`to_json`](Self::to_json).
    pub fn from_json(s: &str) -> Result<LoaderState, serde_json::Error> {
        serde_json::from_str(s)
    }
}

/// Where an epoch taken over from another layout stands: the layout it started with
/// (`world`, `batch_size`), the batches each of those ranks took (`batches`), and the
/// samples of the remainder taken by the layouts since, up to the plan the state's
/// `next_batch` counts in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elastic {
    /// Number of ranks of the epoch's first layout.
    #[serde(alias = "world")]
    pub world_size: usize,
    /// Samples per batch of the epoch's first layout.
    pub batch_size: usize,
    /// Batches each rank of the first layout took before the takeover.
    pub batches: usize,
    /// Samples of the remainder taken by the later layouts, up to the plan the
    /// state's `next_batch` counts in.
    pub offset: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_saved_with_the_old_world_key_loads() {
        // As the last release wrote it: `world`, in the state and in its elastic part.
        let old = r#"{"seed":7,"epoch":2,"next_batch":1,"batch_size":3,"samples":10,
            "rank":1,"world":2,
            "elastic":{"world":4,"batch_size":3,"batches":1,"offset":0}}"#;
        let s = LoaderState::from_json(old).expect("an old state loads");
        assert_eq!((s.rank, s.world_size), (1, 2));
        assert_eq!(s.elastic.as_ref().map(|e| e.world_size), Some(4));
        // Written back, it takes the new spelling, and reads back the same.
        let new = s.to_json();
        assert!(
            new.contains(r#""world_size":2"#) && !new.contains(r#""world":"#),
            "{new}"
        );
        assert_eq!(LoaderState::from_json(&new).unwrap(), s);
    }
}
