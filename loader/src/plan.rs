//! A plan: one epoch as an ordered list of index batches.

use crate::sampler::Sampler;

/// The batches of one epoch, in order.
#[derive(Clone, Debug)]
pub struct Plan {
    pub epoch: u64,
    indices: Vec<usize>,
    batch_size: usize,
    batches: usize,
}

impl Plan {
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
        }
    }

    /// Number of batches.
    pub fn len(&self) -> usize {
        self.batches
    }

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
