//! Continuing a checkpoint's epoch with another batch size or number of ranks.
//!
//! Every rank takes a stride of one shuffled order of the epoch (rank r visits
//! positions r, r + W, r + 2W, ...), so after n steps of batch B on W ranks the run as
//! a whole has seen exactly the first n * B * W positions of that order, whatever W is.
//! A run with batch B' on W' ranks can therefore take over at the same place when
//! n * B * W is a whole number of its own steps. Anything else would skip or repeat
//! samples, so it is refused with the reason.

use stoker_loader::LoaderState;

/// Where `saved` (a checkpoint's loader state) continues for a loader whose own state
/// at the start of an epoch is `target`. `saved_shard_len` is how many samples each
/// rank of the saved run visited per epoch; `target_batches` is this loader's batches
/// per epoch.
pub fn reshard(
    saved: &LoaderState,
    saved_shard_len: usize,
    target: &LoaderState,
    target_batches: usize,
) -> Result<LoaderState, String> {
    // The count first: when it differs, it says more than the fingerprint.
    if saved.samples != target.samples {
        return Err(format!(
            "the checkpoint was trained on {} samples, this data has {}",
            saved.samples, target.samples
        ));
    }
    if let (Some(a), Some(b)) = (saved.fingerprint, target.fingerprint) {
        if a != b {
            return Err(format!(
                "the checkpoint was trained on another data set (its fingerprint is \
                 {a:016x}, this data's {b:016x}: other names, labels or classes)"
            ));
        }
    }
    if saved.seed != target.seed {
        return Err(format!(
            "the checkpoint shuffled with seed {}, this run with seed {} (give --seed {})",
            saved.seed, target.seed, saved.seed
        ));
    }
    let at = |next_batch| LoaderState {
        epoch: saved.epoch,
        next_batch,
        ..*target
    };
    if saved.batch_size == target.batch_size && saved.world == target.world {
        return Ok(at(saved.next_batch));
    }
    let per_rank_done = saved.next_batch.saturating_mul(saved.batch_size);
    if per_rank_done >= saved_shard_len {
        // The epoch's steps are all done; only its evaluation is left.
        return Ok(at(target_batches));
    }
    let seen = per_rank_done * saved.world;
    let step = target.batch_size * target.world;
    if !seen.is_multiple_of(step) {
        return Err(format!(
            "the checkpoint stopped {seen} samples into epoch {} ({} steps of batch {} on {} \
             rank(s)), which is not a whole number of steps of batch {} on {} rank(s): \
             resume with the checkpoint's batch size and rank count, or from a checkpoint \
             written at the end of an epoch",
            saved.epoch + 1,
            saved.next_batch,
            saved.batch_size,
            saved.world,
            target.batch_size,
            target.world
        ));
    }
    Ok(at(seen / step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_loader::{Sampler, ShardPolicy};

    fn state(batch_size: usize, rank: usize, world: usize, next_batch: usize) -> LoaderState {
        LoaderState {
            seed: 7,
            epoch: 2,
            next_batch,
            batch_size,
            samples: 1000,
            rank,
            world,
            fingerprint: None,
        }
    }

    #[test]
    fn same_layout_keeps_the_batch_and_takes_the_rank() {
        let got = reshard(&state(16, 0, 2, 5), 500, &state(16, 1, 2, 0), 32).unwrap();
        assert_eq!(got, state(16, 1, 2, 5));
    }

    #[test]
    fn whole_steps_carry_over_between_world_sizes() {
        // 4 steps of 2 x 16 = 128 samples = 2 steps of 1 x 64.
        let got = reshard(&state(16, 0, 2, 4), 500, &state(64, 0, 1, 0), 16).unwrap();
        assert_eq!(got.next_batch, 2);
        // 3 steps of 2 x 16 = 96 samples: not a whole step of 64.
        let e = reshard(&state(16, 0, 2, 3), 500, &state(64, 0, 1, 0), 16).unwrap_err();
        assert!(e.contains("96 samples into epoch 3"), "{e}");
        assert!(reshard(&state(16, 0, 2, 0), 500, &state(64, 0, 1, 0), 16).is_ok());
    }

    #[test]
    fn other_data_or_seed_is_refused() {
        let mut other = state(16, 0, 2, 0);
        other.samples = 999;
        assert!(reshard(&state(16, 0, 2, 1), 500, &other, 32).is_err());
        other = state(16, 0, 2, 0);
        other.seed = 8;
        assert!(reshard(&state(16, 0, 2, 1), 500, &other, 32)
            .unwrap_err()
            .contains("--seed 7"));
        // Same count, another data set: the fingerprints differ.
        let fp = |f| LoaderState {
            fingerprint: Some(f),
            ..state(16, 0, 2, 1)
        };
        assert!(reshard(&fp(1), 500, &fp(2), 32)
            .unwrap_err()
            .contains("another data set"));
        assert_eq!(reshard(&fp(1), 500, &fp(1), 32).unwrap(), fp(1));
        // A checkpoint from before fingerprints resumes as it did.
        assert!(reshard(&state(16, 0, 2, 1), 500, &fp(2), 32).is_ok());
    }

    /// The claim the module rests on: the samples seen by n steps of W ranks are the
    /// first n*B*W positions of the one-process order, for every W.
    #[test]
    fn strided_shards_cover_a_prefix_of_the_one_process_order() {
        let (len, batch) = (103, 4);
        let whole = Sampler::shuffled(3).indices(len, 1);
        for world in 1..5 {
            for steps in 0..len / (batch * world) {
                let mut seen: Vec<usize> = (0..world)
                    .flat_map(|r| {
                        let s = Sampler::shuffled(3).distributed(r, world, ShardPolicy::Pad);
                        s.indices(len, 1).into_iter().take(steps * batch)
                    })
                    .collect();
                let mut want = whole[..steps * batch * world].to_vec();
                seen.sort_unstable();
                want.sort_unstable();
                assert_eq!(seen, want, "world {world}, {steps} steps");
            }
        }
    }
}
