//! An epoch plan: the `Plan` of one epoch on one rank, its sample indices in order and
//! cut into batches (from the sampler's order, a mixture's draws or a resumed epoch's
//! rest), with what a state at each batch must record. Which plan an epoch follows is
//! chosen in `pipeline/plan_state.rs`.

use std::sync::Arc;

use crate::sampler::Sampler;
use crate::source::mixture::MixPos;
use crate::state::Elastic;

/// The batches of one epoch, in order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The epoch this plan covers.
    pub epoch: u64,
    indices: Vec<usize>,
    batch_size: usize,
    batches: usize,
    /// What a state at one of its batches must say besides (epoch, batch).
    pub(crate) meta: PlanMeta,
}

/// How a plan was made, for the states taken at its batches.
#[derive(Clone, Debug, Default)]
pub(crate) enum PlanMeta {
    /// The sampler's order of a whole epoch.
    #[default]
    Plain,
    /// The rest of an epoch taken over from another rank count or batch size.
    Elastic(Elastic),
    /// A mixture's order from `base`; `at[j]` is where the mixture stands after j *
    /// batch * world draws; `end` is the counter a `never` epoch ends at.
    Mix {
        base: MixPos,
        at: Arc<Vec<MixPos>>,
        end: Option<u64>,
        weights: Vec<f64>,
        /// Draws in the whole plan (before padding).
        drawn: usize,
    },
}

impl Plan {
    /// The plan of epoch `epoch` of a source of `len` samples, in `sampler`'s order,
    /// cut into batches of `batch_size` (the short last one dropped with `drop_last`).
    pub fn new(
        sampler: &Sampler,
        len: usize,
        epoch: u64,
        batch_size: usize,
        drop_last: bool,
    ) -> Plan {
        Self::with_shards(sampler, len, None, epoch, batch_size, drop_last)
    }

    /// The plan of a source stored in `shards` (see [`Sampler::indices_in`]).
    pub fn with_shards(
        sampler: &Sampler,
        len: usize,
        shards: Option<&[std::ops::Range<usize>]>,
        epoch: u64,
        batch_size: usize,
        drop_last: bool,
    ) -> Plan {
        let mut indices = sampler.indices_in(len, shards, epoch);
        let batches = if drop_last {
            indices.len() / batch_size
        } else {
            indices.len().div_ceil(batch_size)
        };
        indices.truncate((batches * batch_size).min(indices.len()));
        Plan {
            epoch,
            indices,
            batch_size,
            batches,
            meta: PlanMeta::Plain,
        }
    }

    /// This rank's `indices` cut into batches (the short last one dropped with
    /// `drop_last`).
    pub(crate) fn from_indices(
        epoch: u64,
        indices: Vec<usize>,
        batch_size: usize,
        drop_last: bool,
        meta: PlanMeta,
    ) -> Plan {
        let mut p = Plan::with_shards(
            &Sampler::sequential(),
            0,
            None,
            epoch,
            batch_size,
            drop_last,
        );
        let batches = if drop_last {
            indices.len() / batch_size
        } else {
            indices.len().div_ceil(batch_size)
        };
        p.indices = indices;
        p.indices
            .truncate((batches * batch_size).min(p.indices.len()));
        p.batches = batches;
        p.meta = meta;
        p
    }

    /// Every sample of the plan, batch after batch.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// Number of batches.
    pub fn len(&self) -> usize {
        self.batches
    }

    /// Whether the plan has no batches.
    pub fn is_empty(&self) -> bool {
        self.batches == 0
    }

    /// Number of samples over all batches.
    pub fn samples(&self) -> usize {
        self.indices.len()
    }

    /// The sample indices of batch `b`.
    pub fn batch(&self, b: usize) -> &[usize] {
        let start = b * self.batch_size;
        let end = (start + self.batch_size).min(self.indices.len());
        &self.indices[start.min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_in_order() {
        let p = Plan::new(&Sampler::sequential(), 10, 0, 4, false);
        assert_eq!(p.len(), 3);
        assert_eq!(p.batch(0), &[0, 1, 2, 3]);
        assert_eq!(p.batch(2), &[8, 9]);
        assert_eq!(p.samples(), 10);
    }

    #[test]
    fn drop_last_drops_the_short_batch() {
        let p = Plan::new(&Sampler::sequential(), 10, 0, 4, true);
        assert_eq!(p.len(), 2);
        assert_eq!(p.samples(), 8);
        assert_eq!(p.batch(1), &[4, 5, 6, 7]);
    }
}
