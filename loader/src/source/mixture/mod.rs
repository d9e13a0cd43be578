//! A mixture: several sources read as one, each sample's source drawn by weight.
//!
//! [`Mixture`] is a [`Source`] over the concatenated index spaces of its parts (part
//! k's sample i is index `offset[k] + i`), so the pipeline, the workers and the
//! digests treat it like any source. What makes it a mixture is its epoch order
//! ([`order`]): position n of an epoch takes the next sample of the part that a
//! seeded counter picks by weight; the order is the same for every worker count and
//! mode because nothing but (seed, counter) decides it.
//!
//! Classes are combined by name: the mixture's classes are the first part's, then
//! each later part's names not seen before, in that part's order. A part's label is
//! mapped to the position of its class name there, so "cat" is one class whichever
//! part a cat comes from.

pub mod order;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::sample::{Annotation, Fields, KeypointSchema};
use crate::source::{ReadFuture, RecordKind, SampleFuture, Source, SourceError};

pub use order::MixPos;

/// When an epoch of a mixture ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// When the first part runs out (the sample that empties it is the last).
    FirstExhausted,
    /// When every part with a weight above zero has given each of its samples once;
    /// a part that runs out is left out of the draws and the others share its weight.
    AllExhausted,
    /// Never by itself: a part that runs out starts its next epoch (a new shuffle),
    /// and an epoch is `epoch_batches` batches on every rank.
    Never,
}

impl std::str::FromStr for Stop {
    type Err = crate::ParseSettingError;
    fn from_str(s: &str) -> Result<Stop, crate::ParseSettingError> {
        match s.trim() {
            "first_exhausted" => Ok(Stop::FirstExhausted),
            "all_exhausted" => Ok(Stop::AllExhausted),
            "never" => Ok(Stop::Never),
            other => Err(crate::ParseSettingError::Stop(other.to_string())),
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::FirstExhausted => "first_exhausted",
            Stop::AllExhausted => "all_exhausted",
            Stop::Never => "never",
        })
    }
}

/// Why a mixture cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum MixtureError {
    /// The list of sources is empty.
    #[error("a mixture needs at least one source")]
    NoSources,
    /// The number of weights differs from the number of sources.
    #[error("{weights} weights for {sources} sources: give one weight per source")]
    WeightCount {
        /// Number of weights given.
        weights: usize,
        /// Number of sources given.
        sources: usize,
    },
    /// A weight is negative, infinite or NaN.
    #[error("weight {index} ({value}) must be a finite number of at least 0")]
    BadWeight {
        /// Position of the weight (and its source) in the list, from 0.
        index: usize,
        /// The weight given.
        value: f64,
    },
    /// Every weight is 0, so no source would ever be drawn.
    #[error("every weight is 0: at least one source must be drawn")]
    AllZero,
    /// A source has no samples.
    #[error("source {index} ({what}) has no samples")]
    Empty {
        /// Position of the source in the list, from 0.
        index: usize,
        /// The source's format name (see [`Source::format`]).
        what: String,
    },
    /// [`Stop::Never`] was asked for without `epoch_batches` (or with 0).
    #[error("stop=never needs epoch_batches (batches per epoch on each rank), at least 1")]
    NeedsEpochBatches,
    /// `epoch_batches` was given with a stop rule other than [`Stop::Never`].
    #[error("epoch_batches is only for stop=never (the other rules end an epoch by themselves)")]
    EpochBatchesWithoutNever,
    /// A source carries other fields than the first source.
    #[error(
        "source {index} ({what}) has fields {has}, source 0 has {first}: mixed sources carry \
         the same fields"
    )]
    Fields {
        /// Position of the source in the list, from 0.
        index: usize,
        /// The source's format name (see [`Source::format`]).
        what: String,
        /// The fields that source carries.
        has: String,
        /// The fields the first source carries.
        first: String,
    },
}

/// How to mix: one weight per source, the stop rule, and for [`Stop::Never`] the
/// batches per epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct MixtureSpec {
    /// One weight per source, finite and at least 0, not all 0; a source's share of
    /// the draws is its weight over their sum.
    pub weights: Vec<f64>,
    /// When an epoch ends.
    pub stop: Stop,
    /// Batches per epoch on every rank: required (at least 1) with [`Stop::Never`],
    /// and only there.
    pub epoch_batches: Option<usize>,
}

impl MixtureSpec {
    /// Checks the weights against `sources` parts and the stop rule against `epoch_batches`.
    pub fn validate(&self, sources: usize) -> Result<(), MixtureError> {
        if sources == 0 {
            return Err(MixtureError::NoSources);
        }
        if self.weights.len() != sources {
            return Err(MixtureError::WeightCount {
                weights: self.weights.len(),
                sources,
            });
        }
        for (index, &value) in self.weights.iter().enumerate() {
            if !value.is_finite() || value < 0.0 {
                return Err(MixtureError::BadWeight { index, value });
            }
        }
        if self.weights.iter().all(|&w| w == 0.0) {
            return Err(MixtureError::AllZero);
        }
        match (self.stop, self.epoch_batches) {
            (Stop::Never, None | Some(0)) => Err(MixtureError::NeedsEpochBatches),
            (Stop::FirstExhausted | Stop::AllExhausted, Some(_)) => {
                Err(MixtureError::EpochBatchesWithoutNever)
            }
            _ => Ok(()),
        }
    }
}

/// Parses weights written `7,3` or `0.7,0.3` (checked by [`MixtureSpec::validate`]).
pub fn parse_weights(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .map(|w| {
            w.trim()
                .parse::<f64>()
                .map_err(|_| format!("weight {:?} is not a number (give e.g. 7,3)", w.trim()))
        })
        .collect()
}

/// `sources` as one: the source itself when there is one and no weights or stop rule
/// were asked for (the plain path, unchanged), else a [`Mixture`]. `weights`
/// default to 1 each, `stop` to `all_exhausted`.
pub fn combine(
    mut sources: Vec<Arc<dyn Source>>,
    weights: Option<Vec<f64>>,
    stop: Option<Stop>,
    epoch_batches: Option<usize>,
) -> Result<Arc<dyn Source>, MixtureError> {
    if sources.len() == 1 && weights.is_none() && stop.is_none() && epoch_batches.is_none() {
        return Ok(sources.remove(0));
    }
    let spec = MixtureSpec {
        weights: weights.unwrap_or_else(|| vec![1.0; sources.len()]),
        stop: stop.unwrap_or(Stop::AllExhausted),
        epoch_batches,
    };
    Ok(Arc::new(Mixture::new(sources, spec)?))
}

/// Several sources as one (see the module docs).
pub struct Mixture {
    parts: Vec<Arc<dyn Source>>,
    /// Where each part's indices start; one more entry: the total.
    offsets: Vec<usize>,
    classes: Vec<String>,
    /// Per part: its label -> the mixture's label.
    remap: Vec<Vec<u32>>,
    spec: MixtureSpec,
    fields: Fields,
}

impl Mixture {
    /// Checks `spec` (before anything is read) and combines the parts' classes.
    pub fn new(parts: Vec<Arc<dyn Source>>, spec: MixtureSpec) -> Result<Mixture, MixtureError> {
        spec.validate(parts.len())?;
        let mut offsets = vec![0];
        for (index, p) in parts.iter().enumerate() {
            if p.is_empty() {
                return Err(MixtureError::Empty {
                    index,
                    what: p.format().to_string(),
                });
            }
            offsets.push(offsets[index] + p.len());
        }
        let first = parts[0].fields();
        for (index, p) in parts.iter().enumerate() {
            if p.fields() != first {
                return Err(MixtureError::Fields {
                    index,
                    what: p.format().to_string(),
                    has: p.fields().to_string(),
                    first: first.to_string(),
                });
            }
        }
        let mut classes: Vec<String> = Vec::new();
        let mut at: HashMap<String, u32> = HashMap::new();
        let remap = parts
            .iter()
            .map(|p| {
                p.classes()
                    .iter()
                    .map(|c| {
                        *at.entry(c.clone()).or_insert_with(|| {
                            classes.push(c.clone());
                            (classes.len() - 1) as u32
                        })
                    })
                    .collect()
            })
            .collect();
        Ok(Mixture {
            parts,
            offsets,
            classes,
            remap,
            spec,
            fields: first,
        })
    }

    /// The weights, stop rule and batches per epoch the mixture was built with.
    pub fn spec(&self) -> &MixtureSpec {
        &self.spec
    }

    /// The sources mixed, in the order given.
    pub fn parts(&self) -> &[Arc<dyn Source>] {
        &self.parts
    }

    /// The part and the part's own index of mixture index `index`.
    fn locate(&self, index: usize) -> (usize, usize) {
        let k = self.offsets.partition_point(|&o| o <= index) - 1;
        (k.min(self.parts.len() - 1), index - self.offsets[k])
    }

    /// The mixture index of part `k`'s sample `i`.
    pub fn global(&self, k: usize, i: usize) -> usize {
        self.offsets[k] + i
    }

    pub(crate) fn part_len(&self, k: usize) -> usize {
        self.parts[k].len()
    }

    pub(crate) fn part_shards(&self, k: usize) -> Option<&[Range<usize>]> {
        self.parts[k].shards()
    }
}

impl Source for Mixture {
    fn len(&self) -> usize {
        self.offsets[self.parts.len()]
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        let (k, i) = self.locate(index);
        let l = self.parts[k].label(i);
        self.remap[k].get(l as usize).copied().unwrap_or(l)
    }

    fn describe(&self, index: usize) -> String {
        let (k, i) = self.locate(index);
        self.parts[k].describe(i)
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        let (k, i) = self.locate(index);
        self.parts[k].read(i, buf)
    }

    fn format(&self) -> &'static str {
        "mixture"
    }

    fn mixture(&self) -> Option<&Mixture> {
        Some(self)
    }

    fn fields(&self) -> Fields {
        self.fields
    }

    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        self.parts[0].keypoint_schema()
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        let (k, i) = self.locate(index);
        self.parts[k].read_sample(i, wanted, buf, ann)
    }

    fn read_sample_async(
        self: Arc<Self>,
        index: usize,
        wanted: Fields,
        buf: Vec<u8>,
        ann: Annotation,
    ) -> SampleFuture {
        let (k, i) = self.locate(index);
        self.parts[k].clone().read_sample_async(i, wanted, buf, ann)
    }

    fn read_async(self: Arc<Self>, index: usize, buf: Vec<u8>) -> ReadFuture {
        // The part's own async read: a remote part keeps its requests on the storage
        // runtime rather than a blocking thread.
        let (k, i) = self.locate(index);
        self.parts[k].clone().read_async(i, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(weights: &[f64], stop: Stop, epoch_batches: Option<usize>) -> MixtureSpec {
        MixtureSpec {
            weights: weights.to_vec(),
            stop,
            epoch_batches,
        }
    }

    #[test]
    fn bad_specs_are_refused() {
        let all = Stop::AllExhausted;
        assert!(matches!(
            spec(&[1.0], all, None).validate(2),
            Err(MixtureError::WeightCount { .. })
        ));
        assert!(matches!(
            spec(&[1.0, -0.5], all, None).validate(2),
            Err(MixtureError::BadWeight { index: 1, .. })
        ));
        assert!(matches!(
            spec(&[f64::NAN, 1.0], all, None).validate(2),
            Err(MixtureError::BadWeight { index: 0, .. })
        ));
        assert!(matches!(
            spec(&[0.0, 0.0], all, None).validate(2),
            Err(MixtureError::AllZero)
        ));
        assert!(matches!(
            spec(&[1.0], Stop::Never, None).validate(1),
            Err(MixtureError::NeedsEpochBatches)
        ));
        assert!(matches!(
            spec(&[1.0], all, Some(3)).validate(1),
            Err(MixtureError::EpochBatchesWithoutNever)
        ));
        assert!(matches!(
            spec(&[], all, None).validate(0),
            Err(MixtureError::NoSources)
        ));
        assert!(spec(&[0.0, 2.0], Stop::Never, Some(3)).validate(2).is_ok());
        assert_eq!("never".parse::<Stop>(), Ok(Stop::Never));
        assert!("sometimes".parse::<Stop>().is_err());
    }
}
