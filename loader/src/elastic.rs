//! Taking over an epoch at another rank count or batch size (elastic resume) for a
//! single source.
//!
//! The epoch's first layout (W ranks, batch B) is the sampler's: strided for plain
//! sources, contiguous runs of the shard stream for tar and Parquet shards. When a state saved after b of its
//! batches is loaded at another layout, the samples no rank has taken yet are listed
//! in a fixed order, the remainder: the first untaken sample of rank 0, of rank 1,
//! ..., then the second of each, ... (for a strided first layout this is the epoch's
//! order from the first untaken position on; for tar and Parquet shards,
//! a new layout of as many ranks continues each rank's own shards), each sample once
//! (the padding repeats of the first layout are left out, as is anything already
//! taken).
//! Every later layout deals the rest of the remainder by stride
//! ([`deal`]), so after n batches of B' on W' ranks exactly its
//! next min(n * B', per rank) * W' samples are taken, and a state need only say how
//! far into the remainder it is (`offset`). Repeats happen only where a layout pads
//! its ranks to equal length (`ShardPolicy::Pad`: the first samples of what it was
//! dealt come again at its end), as in any epoch.

use std::ops::Range;

use crate::epoch_plan::{Plan, PlanMeta};
use crate::sampler::{deal, Sampler, ShardPolicy};

pub use crate::state::Elastic;

/// The samples of epoch `epoch` that the first layout of `origin` did not take, in the
/// order of the module docs.
pub(crate) fn remainder(
    sampler: &Sampler,
    len: usize,
    shards: Option<&[Range<usize>]>,
    epoch: u64,
    drop_last: bool,
    origin: &Elastic,
) -> Vec<usize> {
    let batch_size = origin.batch_size.max(1);
    let first = Sampler {
        rank: 0,
        world_size: origin.world_size.max(1),
        ..sampler.clone()
    };
    // Every rank's plan of the first layout, made together: one at a time, a world of
    // W ranks cost W epochs.
    let plans: Vec<Vec<usize>> = first
        .all_ranks_in(len, shards, epoch)
        .into_iter()
        .map(|mut order| {
            // Cut as Plan::with_shards cuts: whole batches only with drop_last.
            if drop_last {
                order.truncate(order.len() / batch_size * batch_size);
            }
            order
        })
        .collect();
    let taken = origin.batches.saturating_mul(origin.batch_size);
    let plans: Vec<&[usize]> = plans.iter().map(Vec::as_slice).collect();
    untaken(len, taken, &plans)
}

/// The samples of `0..len` that the first `taken` of no rank's plan holds: every rank's
/// tail, interleaved (position j of each, rank by rank, then j + 1), each sample once.
fn untaken(len: usize, taken: usize, plans: &[&[usize]]) -> Vec<usize> {
    let mut seen = vec![false; len];
    for p in plans {
        for &i in &p[..taken.min(p.len())] {
            seen[i] = true;
        }
    }
    let tails: Vec<&[usize]> = plans.iter().map(|p| &p[taken.min(p.len())..]).collect();
    let longest = tails.iter().map(|t| t.len()).max().unwrap_or(0);
    let mut rest = Vec::new();
    for j in 0..longest {
        for t in &tails {
            if let Some(&i) = t.get(j) {
                if !std::mem::replace(&mut seen[i], true) {
                    rest.push(i);
                }
            }
        }
    }
    rest
}

/// The most samples one rank is dealt out of `m` on `world` ranks.
fn per_rank(m: usize, world: usize, policy: ShardPolicy) -> usize {
    match policy {
        ShardPolicy::Drop => m / world.max(1),
        ShardPolicy::Pad | ShardPolicy::Exact => m.div_ceil(world.max(1)),
    }
}

/// How many samples of `m` dealt to `world` ranks are taken once every rank has taken
/// `batches` batches of `batch_size`.
pub(crate) fn taken(
    m: usize,
    world: usize,
    batch_size: usize,
    batches: usize,
    policy: ShardPolicy,
) -> usize {
    let per = per_rank(m, world, policy);
    batches
        .saturating_mul(batch_size)
        .min(per)
        .saturating_mul(world)
        .min(m)
}

/// This rank's plan for the rest of `remainder` from `elastic.offset`, on the layout of
/// `sampler` (its rank and world) and `batch_size`.
pub(crate) fn plan(
    sampler: &Sampler,
    remainder: &[usize],
    epoch: u64,
    batch_size: usize,
    drop_last: bool,
    elastic: Elastic,
) -> Plan {
    let rest = remainder[elastic.offset.min(remainder.len())..].to_vec();
    let mine = deal(rest, sampler.rank, sampler.world_size, sampler.shard_policy);
    Plan::from_indices(
        epoch,
        mine,
        batch_size,
        drop_last,
        PlanMeta::Elastic(elastic),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remainder as it was first written: one plan per rank of the first layout.
    fn remainder_rank_by_rank(
        sampler: &Sampler,
        len: usize,
        shards: Option<&[Range<usize>]>,
        drop_last: bool,
        origin: &Elastic,
    ) -> Vec<usize> {
        let world = origin.world_size;
        let plans: Vec<Plan> = (0..world)
            .map(|rank| {
                let s = Sampler {
                    rank,
                    world_size: world,
                    ..sampler.clone()
                };
                Plan::with_shards(&s, len, shards, 3, origin.batch_size, drop_last)
            })
            .collect();
        // The plans are what changed; taking the tails from them did not.
        let plans: Vec<&[usize]> = plans.iter().map(Plan::indices).collect();
        untaken(len, origin.batches * origin.batch_size, &plans)
    }

    #[test]
    fn the_remainder_is_the_same_as_made_rank_by_rank() {
        // A state's offset counts into the remainder: its order may not change.
        let shards = [0..7, 7..8, 8..20, 20..31];
        for (len, shards) in [(31, None), (31, Some(&shards[..]))] {
            for policy in [ShardPolicy::Pad, ShardPolicy::Drop, ShardPolicy::Exact] {
                for (world, batch_size, batches) in [(1, 4, 2), (3, 2, 1), (4, 3, 2), (9, 2, 1)] {
                    for drop_last in [false, true] {
                        let origin = Elastic {
                            world_size: world,
                            batch_size,
                            batches,
                            offset: 0,
                        };
                        let s = Sampler {
                            shuffle_buffer: 5,
                            ..Sampler::shuffled(8).distributed(0, 2, policy)
                        };
                        assert_eq!(
                            remainder(&s, len, shards, 3, drop_last, &origin),
                            remainder_rank_by_rank(&s, len, shards, drop_last, &origin),
                            "{policy:?} {origin:?} drop_last {drop_last} shards {shards:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_remainder_leaves_out_what_was_taken_and_padding() {
        // 10 samples on 3 ranks, padded to 4 each; 1 batch of 2 taken per rank.
        let s = Sampler::shuffled(5).distributed(0, 3, ShardPolicy::Pad);
        let origin = Elastic {
            world_size: 3,
            batch_size: 2,
            batches: 1,
            offset: 0,
        };
        let rest = remainder(&s, 10, None, 0, false, &origin);
        assert_eq!(rest.len(), 4);
        let whole = Sampler::shuffled(5).indices(10, 0);
        let mut want = whole[6..].to_vec();
        let mut got = rest.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(taken(4, 2, 1, 1, ShardPolicy::Pad), 2);
        assert_eq!(taken(4, 3, 1, 2, ShardPolicy::Pad), 4);
        assert_eq!(taken(5, 2, 4, 1, ShardPolicy::Drop), 4);
    }
}
