//! Samplers: which sample indices an epoch visits, and in what order.
//!
//! Every order is a pure function of (seed, epoch, rank, world), so two processes (or
//! a resumed run) agree on it without talking to each other.
//!
//! A source stored in shards (tar files, Parquet row groups, see
//! [`Source::shards`](crate::Source::shards)) is shuffled as WebDataset shuffles,
//! shards first, then a buffer: the shard order is permuted by (seed, epoch), and the
//! permuted shards' samples, one shard after another, make one stream; each rank
//! takes one contiguous run of that stream, of the plain per-rank length (padded or
//! dropped by [`deal`]'s rule), so the ranks' shares are disjoint and cover the epoch
//! whatever the shard sizes; each rank's run passes through a bounded shuffle buffer
//! of `shuffle_buffer` samples seeded by (seed, epoch, rank). It is simulated on
//! indices, so the whole epoch is still known up front, and reading stays shard-local
//! (a run holds whole shards but for the two at its ends, and a shard is read from
//! start to end within about one buffer).

use std::ops::Range;

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
    /// Seeds the permutations, together with the epoch (and the rank, for the shuffle
    /// buffer).
    pub seed: u64,
    /// This process's rank and the world size; (0, 1) for a single process.
    pub rank: usize,
    /// Number of processes that share the data (at least 1).
    #[serde(alias = "world")]
    pub world_size: usize,
    /// How the ranks' shards are made equal in length.
    pub shard_policy: ShardPolicy,
    /// Samples held by the shuffle buffer of a sharded source (1: shards are read in
    /// order, only the shard order is shuffled).
    #[serde(default = "default_shuffle_buffer")]
    pub shuffle_buffer: usize,
}

/// The default shuffle buffer: 1024 samples.
pub const DEFAULT_SHUFFLE_BUFFER: usize = 1024;

fn default_shuffle_buffer() -> usize {
    DEFAULT_SHUFFLE_BUFFER
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            shuffle: true,
            seed: 0,
            rank: 0,
            world_size: 1,
            shard_policy: ShardPolicy::Pad,
            shuffle_buffer: DEFAULT_SHUFFLE_BUFFER,
        }
    }
}

/// True when `shards` are non-empty, in order, and cover `0..len` exactly.
fn partitions(shards: &[Range<usize>], len: usize) -> bool {
    let mut next = 0;
    for r in shards {
        if r.start != next || r.end < r.start {
            return false;
        }
        next = r.end;
    }
    !shards.is_empty() && next == len
}

/// WebDataset's shuffle buffer: fill it, then each new sample takes the place of a
/// random one, which leaves; at the end the rest leave in random order.
fn buffer_shuffle(stream: Vec<usize>, capacity: usize, rng: &mut SampleRng) -> Vec<usize> {
    let capacity = capacity.max(1);
    if capacity == 1 {
        return stream;
    }
    let mut out = Vec::with_capacity(stream.len());
    let mut buf = Vec::with_capacity(capacity.min(stream.len()));
    for x in stream {
        if buf.len() < capacity {
            buf.push(x);
            continue;
        }
        let j = rng.below(capacity as u64) as usize;
        out.push(std::mem::replace(&mut buf[j], x));
    }
    while !buf.is_empty() {
        let j = rng.below(buf.len() as u64) as usize;
        out.push(buf.swap_remove(j));
    }
    out
}

impl Sampler {
    /// A single-process sampler that visits the samples in source order.
    pub fn sequential() -> Self {
        Sampler {
            shuffle: false,
            ..Sampler::default()
        }
    }

    /// A single-process sampler that shuffles each epoch, seeded by `seed`.
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
        self.world_size = world;
        self.shard_policy = policy;
        self
    }

    /// Checks the rank and world size.
    pub fn validate(&self) -> Result<(), crate::SettingError> {
        use crate::{Setting, SettingError};
        if self.world_size == 0 {
            return Err(SettingError::new(
                Setting::WorldSize,
                "world size must be at least 1",
            ));
        }
        if self.rank >= self.world_size {
            return Err(SettingError::new(
                Setting::Rank,
                format!(
                    "rank {} is out of range for world size {}",
                    self.rank, self.world_size
                ),
            ));
        }
        Ok(())
    }

    /// The number of samples this rank sees per epoch out of `len`.
    pub fn shard_len(&self, len: usize) -> usize {
        let world = self.world_size.max(1);
        match self.shard_policy {
            ShardPolicy::Pad => len.div_ceil(world),
            ShardPolicy::Drop => len / world,
            ShardPolicy::Exact => (len + world - 1 - self.rank.min(world - 1)) / world,
        }
    }

    /// The indices of epoch `epoch` for this rank, in visiting order, for a source
    /// whose samples are stored in `shards` (see the module docs); without shards, or
    /// unshuffled, the same as [`indices`](Self::indices).
    pub fn indices_in(
        &self,
        len: usize,
        shards: Option<&[Range<usize>]>,
        epoch: u64,
    ) -> Vec<usize> {
        match shards {
            Some(s) if self.shuffle && partitions(s, len) => self.shard_order(len, s, epoch),
            _ => self.indices(len, epoch),
        }
    }

    fn shard_order(&self, len: usize, shards: &[Range<usize>], epoch: u64) -> Vec<usize> {
        let world = self.world_size.max(1);
        let rank = self.rank.min(world - 1);
        self.shard_orders(len, shards, epoch, rank..rank + 1)
            .pop()
            .unwrap_or_default()
    }

    /// [`shard_order`](Self::shard_order) of each rank in `ranks`, with the shard
    /// order (and the stream of samples it makes) made once for them all.
    fn shard_orders(
        &self,
        len: usize,
        shards: &[Range<usize>],
        epoch: u64,
        ranks: Range<usize>,
    ) -> Vec<Vec<usize>> {
        // Streams of their own: u64::MAX is the sample shuffle's, sample indices are
        // the augmentations'.
        let mut rng = SampleRng::new(self.seed, epoch, u64::MAX - 1);
        let mut order: Vec<usize> = (0..shards.len()).collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let world = self.world_size.max(1);
        let mut stream: Vec<usize> = order.iter().flat_map(|&s| shards[s].clone()).collect();
        // The padding rule is `deal`'s: Pad repeats the stream's first samples after
        // its end, Drop leaves its tail out, Exact neither.
        let total = match self.shard_policy {
            ShardPolicy::Exact => len,
            _ => self.shard_len(len) * world,
        };
        if total > len && len > 0 {
            let extra: Vec<usize> = stream.iter().cycle().take(total - len).copied().collect();
            stream.extend(extra);
        }
        stream.truncate(total);
        // Each rank takes one contiguous run of the stream, not every world-th shard:
        // shards of unequal size would give the ranks unequal shares, which they could
        // only even out by leaving samples for another epoch or reading some twice.
        // A run holds whole shards but for the two at its ends, which it shares with
        // its neighbours, so reading stays shard-local.
        let start = |rank: usize| match self.shard_policy {
            ShardPolicy::Exact => rank * (len / world) + rank.min(len % world),
            _ => rank * self.shard_len(len),
        };
        ranks
            .map(|rank| {
                let run = stream[start(rank)..start(rank + 1)].to_vec();
                let mut brng = SampleRng::new(self.seed, epoch, u64::MAX - 2 - rank as u64);
                buffer_shuffle(run, self.shuffle_buffer, &mut brng)
            })
            .collect()
    }

    /// [`indices_in`](Self::indices_in) of every rank of this sampler's world (its
    /// own rank aside), rank by rank. What the ranks share (the shuffle, the padding,
    /// the shard order) is made once, so W ranks cost about an epoch plus W steps, not
    /// W epochs: taking over an epoch from W ranks makes them all.
    pub(crate) fn all_ranks_in(
        &self,
        len: usize,
        shards: Option<&[Range<usize>]>,
        epoch: u64,
    ) -> Vec<Vec<usize>> {
        let world = self.world_size.max(1);
        match shards {
            Some(s) if self.shuffle && partitions(s, len) => {
                self.shard_orders(len, s, epoch, 0..world)
            }
            _ => {
                let one = Sampler {
                    rank: 0,
                    world_size: 1,
                    ..self.clone()
                };
                deal_all(one.indices(len, epoch), world, self.shard_policy)
            }
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
        deal(order, self.rank, self.world_size, self.shard_policy)
    }
}

/// Deals `order` (an epoch's samples, in order) to `rank` of `world` by stride: rank
/// r takes positions r, r + world, ... The ranks are made equal in length by
/// `policy`: `Pad` repeats the order's first samples after its end, `Drop` leaves the
/// tail out, `Exact` gives ranks below `len % world` one more. After n samples on
/// every rank the ranks together have taken the first n * world positions.
pub fn deal(mut order: Vec<usize>, rank: usize, world: usize, policy: ShardPolicy) -> Vec<usize> {
    if world <= 1 {
        return order;
    }
    if policy == ShardPolicy::Exact {
        return order.into_iter().skip(rank).step_by(world).collect();
    }
    let len = order.len();
    let per_rank = match policy {
        ShardPolicy::Drop => len / world,
        _ => len.div_ceil(world),
    };
    let total = per_rank * world;
    if total > len && len > 0 {
        // Pad by wrapping around, as PyTorch does.
        let extra: Vec<usize> = order.iter().cycle().take(total - len).copied().collect();
        order.extend(extra);
    }
    order.truncate(total);
    order.into_iter().skip(rank).step_by(world).collect()
}

/// [`deal`] to every rank of `world` at once, rank by rank.
fn deal_all(order: Vec<usize>, world: usize, policy: ShardPolicy) -> Vec<Vec<usize>> {
    if world <= 1 {
        return vec![order];
    }
    let len = order.len();
    let total = match policy {
        ShardPolicy::Exact => len,
        ShardPolicy::Drop => len / world * world,
        ShardPolicy::Pad => len.div_ceil(world) * world,
    };
    let mut ranks = vec![Vec::with_capacity(total.div_ceil(world)); world];
    // Position p of the padded order is the order's p mod len (deal pads by wrapping).
    for p in 0..total {
        ranks[p % world].push(order[p % len]);
    }
    ranks
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

    fn sharded(shuffle_buffer: usize) -> Sampler {
        Sampler {
            shuffle_buffer,
            ..Sampler::shuffled(7)
        }
    }

    fn ranges(sizes: &[usize]) -> Vec<Range<usize>> {
        let mut start = 0;
        sizes
            .iter()
            .map(|&n| {
                start += n;
                start - n..start
            })
            .collect()
    }

    #[test]
    fn shards_are_read_one_after_another() {
        // Buffer 1: whole shards in a permuted order, each in its own order.
        let shards = ranges(&[4, 4, 4, 4]);
        let got = sharded(1).indices_in(16, Some(&shards), 3);
        let mut starts: Vec<usize> = got.chunks(4).map(|c| c[0]).collect();
        for c in got.chunks(4) {
            assert_eq!(c, &(c[0]..c[0] + 4).collect::<Vec<_>>()[..]);
        }
        starts.sort_unstable();
        assert_eq!(starts, [0, 4, 8, 12]);
        assert_ne!(
            got,
            sharded(1).indices_in(16, Some(&shards), 4),
            "per-epoch shard order"
        );
        // Without shuffle, or without shards, the plain order.
        let s = Sampler {
            shuffle: false,
            ..sharded(8)
        };
        assert_eq!(
            s.indices_in(16, Some(&shards), 0),
            (0..16).collect::<Vec<_>>()
        );
        assert_eq!(
            sharded(8).indices_in(16, None, 2),
            sharded(8).indices(16, 2)
        );
        // Ranges that do not cover the data are ignored, not trusted.
        let bad = ranges(&[4, 4]);
        assert_eq!(
            sharded(8).indices_in(16, Some(&bad), 2),
            sharded(8).indices(16, 2)
        );
    }

    #[test]
    fn the_buffer_bounds_how_far_a_sample_moves() {
        // With a buffer of b, the k-th sample out was among the first k + b in.
        let shards = ranges(&[1000]);
        let b = 16;
        let got = sharded(b).indices_in(1000, Some(&shards), 0);
        for (k, &x) in got.iter().enumerate() {
            assert!(x < k + b, "sample {x} came out at {k}");
        }
        assert_ne!(got, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn ranks_take_whole_shards_or_samples_when_too_few() {
        let shards = ranges(&[10, 10, 10, 10]);
        let per_rank: Vec<Vec<usize>> = (0..2)
            .map(|r| {
                sharded(4)
                    .distributed(r, 2, ShardPolicy::Pad)
                    .indices_in(40, Some(&shards), 1)
            })
            .collect();
        // Each rank holds whole shards: 2 of the 4.
        for got in &per_rank {
            let mut ids: Vec<usize> = got.iter().map(|i| i / 10).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 2, "{got:?}");
        }
        let mut all = per_rank.concat();
        all.sort_unstable();
        assert_eq!(all, (0..40).collect::<Vec<_>>());
        // 2 shards, 3 ranks: padded to ceil(20 / 3) = 7 each.
        let shards = ranges(&[10, 10]);
        let per_rank: Vec<Vec<usize>> = (0..3)
            .map(|r| {
                sharded(4)
                    .distributed(r, 3, ShardPolicy::Pad)
                    .indices_in(20, Some(&shards), 1)
            })
            .collect();
        assert!(per_rank.iter().all(|r| r.len() == 7));
        let mut all = per_rank.concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (0..20).collect::<Vec<_>>());
    }

    /// How many times each of `0..len` occurs in the orders of `world` ranks.
    fn counts(
        s: &Sampler,
        len: usize,
        shards: &[Range<usize>],
        world: usize,
        epoch: u64,
    ) -> Vec<usize> {
        let mut n = vec![0; len];
        for r in 0..world {
            let got = Sampler {
                rank: r,
                ..s.clone()
            }
            .indices_in(len, Some(shards), epoch);
            assert_eq!(
                got.len(),
                Sampler {
                    rank: r,
                    ..s.clone()
                }
                .shard_len(len)
            );
            for i in got {
                n[i] += 1;
            }
        }
        n
    }

    #[test]
    fn uneven_shards_give_each_sample_once_per_epoch() {
        // 53 samples in shards of 20, 20, 13 (and odder sizes): dealt whole, shard by
        // shard, these left some samples out of an epoch and gave others twice.
        for sizes in [&[20, 20, 13][..], &[7, 1, 12, 11, 3, 19]] {
            let shards = ranges(sizes);
            let len: usize = sizes.iter().sum();
            for world in [2, 3, 4] {
                for seed in [0, 7, 99] {
                    for epoch in 0..4 {
                        let s = Sampler {
                            shuffle_buffer: 5,
                            ..Sampler::shuffled(seed)
                        };
                        let why = format!("{sizes:?} world {world} seed {seed} epoch {epoch}");
                        // Pad: every sample, and the padding's repeats only: the
                        // ranks' ceil(len / world) each, less len.
                        let pad = counts(
                            &s.clone().distributed(0, world, ShardPolicy::Pad),
                            len,
                            &shards,
                            world,
                            epoch,
                        );
                        assert!(pad.iter().all(|&n| n >= 1), "{why}: {pad:?}");
                        let repeats: usize = pad.iter().map(|n| n - 1).sum();
                        assert_eq!(repeats, len.div_ceil(world) * world - len, "{why}");
                        // Drop: nothing twice, len % world left out.
                        let drop = counts(
                            &s.clone().distributed(0, world, ShardPolicy::Drop),
                            len,
                            &shards,
                            world,
                            epoch,
                        );
                        assert!(drop.iter().all(|&n| n <= 1), "{why}: {drop:?}");
                        assert_eq!(drop.iter().sum::<usize>(), len / world * world, "{why}");
                        // Exact: every sample once.
                        let exact = counts(
                            &s.clone().distributed(0, world, ShardPolicy::Exact),
                            len,
                            &shards,
                            world,
                            epoch,
                        );
                        assert!(exact.iter().all(|&n| n == 1), "{why}: {exact:?}");
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn sharded_orders_have_the_plain_lengths(
            sizes in proptest::collection::vec(0usize..30, 1..12),
            world in 1usize..5,
            buffer in 1usize..40,
            seed: u64,
            policy in 0u8..3,
        ) {
            let len: usize = sizes.iter().sum();
            prop_assume!(len > 0);
            let shards = ranges(&sizes);
            let policy = [ShardPolicy::Pad, ShardPolicy::Drop, ShardPolicy::Exact][policy as usize];
            let mut seen = Vec::new();
            for r in 0..world {
                let s = Sampler { shuffle_buffer: buffer, ..Sampler::shuffled(seed) }
                    .distributed(r, world, policy);
                let got = s.indices_in(len, Some(&shards), 5);
                prop_assert_eq!(got.len(), s.shard_len(len));
                prop_assert!(got.iter().all(|&i| i < len));
                prop_assert_eq!(&got, &s.indices_in(len, Some(&shards), 5), "deterministic");
                seen.extend(got);
            }
            // Each sample once per epoch, but for the padding rule: Pad repeats
            // ceil(len / world) * world - len, Drop leaves len % world out.
            let mut n = vec![0usize; len];
            for &i in &seen {
                n[i] += 1;
            }
            match policy {
                ShardPolicy::Pad => {
                    prop_assert!(n.iter().all(|&c| c >= 1), "{:?}", n);
                    prop_assert_eq!(seen.len() - len, len.div_ceil(world) * world - len);
                }
                ShardPolicy::Drop => {
                    prop_assert!(n.iter().all(|&c| c <= 1), "{:?}", n);
                    prop_assert_eq!(seen.len(), len / world * world);
                }
                ShardPolicy::Exact => prop_assert!(n.iter().all(|&c| c == 1), "{:?}", n),
            }
        }

        #[test]
        fn a_rank_reads_whole_shards_but_at_its_ends(
            sizes in proptest::collection::vec(0usize..30, 1..12),
            world in 1usize..5,
            seed: u64,
        ) {
            // Buffer 1: a rank's order is its run of the shard stream as it is read.
            let len: usize = sizes.iter().sum();
            let shards = ranges(&sizes);
            let shard_of = |i: usize| shards.iter().position(|r| r.contains(&i)).unwrap();
            for r in 0..world {
                let s = Sampler { shuffle_buffer: 1, ..Sampler::shuffled(seed) }
                    .distributed(r, world, ShardPolicy::Drop);
                let got = s.indices_in(len, Some(&shards), 2);
                let runs: Vec<&[usize]> = got.chunk_by(|&a, &b| shard_of(a) == shard_of(b)).collect();
                let mut visited: Vec<usize> = runs.iter().map(|run| shard_of(run[0])).collect();
                for (k, run) in runs.iter().enumerate() {
                    let whole = &shards[shard_of(run[0])];
                    prop_assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", run);
                    if k > 0 && k + 1 < runs.len() {
                        prop_assert_eq!(run.len(), whole.len(), "a middle shard is read whole");
                    }
                }
                let n = visited.len();
                visited.sort_unstable();
                visited.dedup();
                prop_assert_eq!(visited.len(), n, "each shard in one run");
            }
        }

        #[test]
        fn all_ranks_at_once_are_each_rank_alone(
            sizes in proptest::collection::vec(0usize..30, 0..12),
            world in 1usize..9,
            buffer in 1usize..40,
            seed: u64,
            policy in 0u8..3,
            sharded: bool,
            shuffle: bool,
        ) {
            let len: usize = sizes.iter().sum();
            let shards = ranges(&sizes);
            let shards = sharded.then_some(&shards[..]);
            let policy = [ShardPolicy::Pad, ShardPolicy::Drop, ShardPolicy::Exact][policy as usize];
            let s = Sampler { shuffle_buffer: buffer, shuffle, ..Sampler::shuffled(seed) }
                .distributed(0, world, policy);
            let each: Vec<Vec<usize>> = (0..world)
                .map(|r| Sampler { rank: r, ..s.clone() }.indices_in(len, shards, 4))
                .collect();
            prop_assert_eq!(s.all_ranks_in(len, shards, 4), each);
        }

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
