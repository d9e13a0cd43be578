//! Samplers: which sample indices an epoch visits, and in what order.
//!
//! Every order is a pure function of (seed, epoch, rank, world), so two processes (or
//! a resumed run) agree on it without talking to each other.

use serde::{Deserialize, Serialize};
use stoker_augment::SampleRng;

/// How a distributed sampler makes shards equal in length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShardPolicy {
    /// Repeat samples from the start of the order until every rank has
    /// `ceil(len / world)` (PyTorch's DistributedSampler default).
    Pad,
    /// Drop the tail so every rank has `floor(len / world)`.
    Drop,
    /// Every sample exactly once: ranks below `len % world` get one more. For
    /// evaluation, whose sums are added up across ranks; training ranks must take
    /// equal steps, so they pad or drop instead.
    Exact,
}

/// The order of one epoch's samples.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampler {
    /// Shuffle with a permutation seeded by (seed, epoch); otherwise sequential.
    pub shuffle: bool,
    pub seed: u64,
    /// This process's rank and the world size; (0, 1) for a single process.
    pub rank: usize,
    pub world: usize,
    pub shard_policy: ShardPolicy,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            shuffle: true,
            seed: 0,
            rank: 0,
            world: 1,
            shard_policy: ShardPolicy::Pad,
        }
    }
}

impl Sampler {
    pub fn sequential() -> Self {
        Sampler {
            shuffle: false,
            ..Sampler::default()
        }
    }

    pub fn shuffled(seed: u64) -> Self {
        Sampler {
            shuffle: true,
            seed,
            ..Sampler::default()
        }
    }

    /// This sampler restricted to one rank's shard.
    pub fn distributed(mut self, rank: usize, world: usize, policy: ShardPolicy) -> Self {
        self.rank = rank;
        self.world = world;
        self.shard_policy = policy;
        self
    }

    /// Checks the rank and world size.
    pub fn validate(&self) -> Result<(), String> {
        if self.world == 0 {
            return Err("world size must be at least 1".into());
        }
        if self.rank >= self.world {
            return Err(format!(
                "rank {} is out of range for world size {}",
                self.rank, self.world
            ));
        }
        Ok(())
    }

    /// The number of samples this rank sees per epoch out of `len`.
    pub fn shard_len(&self, len: usize) -> usize {
        let world = self.world.max(1);
        match self.shard_policy {
            ShardPolicy::Pad => len.div_ceil(world),
            ShardPolicy::Drop => len / world,
            ShardPolicy::Exact => (len + world - 1 - self.rank.min(world - 1)) / world,
        }
    }

    /// The indices of epoch `epoch` for this rank, in visiting order.
    pub fn indices(&self, len: usize, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..len).collect();
        if self.shuffle {
            // A stream of its own (index u64::MAX) so that it never coincides with a
            // sample's augmentation stream.
            let mut rng = SampleRng::new(self.seed, epoch, u64::MAX);
            for i in (1..len).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        if self.world <= 1 {
            return order;
        }
        if self.shard_policy == ShardPolicy::Exact {
            return order
                .into_iter()
                .skip(self.rank)
                .step_by(self.world)
                .collect();
        }
        let per_rank = self.shard_len(len);
        let total = per_rank * self.world;
        if total > len && len > 0 {
            // Pad by wrapping around, as PyTorch does.
            let extra: Vec<usize> = order.iter().cycle().take(total - len).copied().collect();
            order.extend(extra);
        }
        order.truncate(total);
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.world)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sequential_is_identity() {
        assert_eq!(Sampler::sequential().indices(5, 3), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn shuffle_depends_on_epoch_and_seed() {
        let s = Sampler::shuffled(1);
        assert_ne!(s.indices(100, 0), s.indices(100, 1));
        assert_eq!(s.indices(100, 4), s.indices(100, 4));
        assert_ne!(s.indices(100, 0), Sampler::shuffled(2).indices(100, 0));
    }

    #[test]
    fn bad_rank_is_rejected() {
        assert!(Sampler::default()
            .distributed(2, 2, ShardPolicy::Pad)
            .validate()
            .is_err());
        assert!(Sampler::default()
            .distributed(0, 0, ShardPolicy::Pad)
            .validate()
            .is_err());
    }

    proptest! {
        #[test]
        fn shuffle_is_a_permutation(len in 0usize..500, seed: u64, epoch in 0u64..50) {
            let mut got = Sampler::shuffled(seed).indices(len, epoch);
            got.sort_unstable();
            prop_assert_eq!(got, (0..len).collect::<Vec<_>>());
        }

        #[test]
        fn shards_are_disjoint_and_cover(len in 1usize..300, world in 1usize..6, seed: u64) {
            let drop_shards: Vec<Vec<usize>> = (0..world)
                .map(|r| Sampler::shuffled(seed).distributed(r, world, ShardPolicy::Drop).indices(len, 1))
                .collect();
            let mut all: Vec<usize> = drop_shards.concat();
            prop_assert!(drop_shards.iter().all(|s| s.len() == len / world));
            all.sort_unstable();
            let n = all.len();
            all.dedup();
            prop_assert_eq!(all.len(), n, "drop shards overlap");

            let pad_shards: Vec<Vec<usize>> = (0..world)
                .map(|r| Sampler::shuffled(seed).distributed(r, world, ShardPolicy::Pad).indices(len, 1))
                .collect();
            prop_assert!(pad_shards.iter().all(|s| s.len() == len.div_ceil(world)));
            let mut covered: Vec<usize> = pad_shards.concat();
            covered.sort_unstable();
            covered.dedup();
            prop_assert_eq!(covered, (0..len).collect::<Vec<_>>());
        }

        #[test]
        fn exact_shards_partition_the_epoch(len in 1usize..300, world in 1usize..6, seed: u64) {
            let shards: Vec<Vec<usize>> = (0..world)
                .map(|r| Sampler::shuffled(seed).distributed(r, world, ShardPolicy::Exact))
                .map(|s| {
                    let got = s.indices(len, 2);
                    assert_eq!(got.len(), s.shard_len(len), "rank {}", s.rank);
                    got
                })
                .collect();
            let mut all: Vec<usize> = shards.concat();
            all.sort_unstable();
            prop_assert_eq!(all, (0..len).collect::<Vec<_>>());
        }
    }
}
