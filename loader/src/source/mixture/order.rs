//! A mixture's epoch order: which part each position draws from, and where each part
//! stands.
//!
//! Position n of the order draws part k by a Weyl sequence: x_n = key + n * phi * 2^64
//! (mod 2^64), key seeded by (seed, epoch) (by the seed alone under `never`, whose
//! counter runs on across epochs); x_n / 2^64 falls in part k's slice of [0, 1), the
//! slices sized by the weights of the parts still drawn. The sequence is spread
//! evenly (a golden-ratio sequence), so after n draws each part's share is within a
//! few draws of its weight, not the sqrt(n) a random draw would wander by; and the
//! draw depends on nothing but the counter, so every worker count gives one order.
//!
//! Each part is read in its own epoch order (the plain or shard-aware shuffle, seeded
//! by (seed, part)); under `never` a part that runs out starts its next epoch.

use serde::{Deserialize, Serialize};
use stoker_augment::SampleRng;

use super::{Mixture, Stop};
use crate::sampler::Sampler;

/// Where one part stands: its epoch, its next sample, whether it is left out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartPos {
    /// The part's own epoch, whose order it is read in (under `never` it moves on
    /// each time the part runs out).
    pub epoch: u64,
    /// Position, in the part's epoch order, of the part's next sample.
    pub next: usize,
    /// Ran out (under `first_exhausted` / `all_exhausted`): no longer drawn.
    #[serde(default)]
    pub out: bool,
}

/// Where a mixture stands: the draw counter and each part's place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixPos {
    /// Draws made so far: the position of the next draw in the sequence.
    pub counter: u64,
    /// Where each part stands, in the mixture's order of parts.
    pub parts: Vec<PartPos>,
}

impl MixPos {
    /// The start of `epoch` for a mixture whose epochs are independent (every part
    /// at the start of the same epoch).
    pub fn fresh(parts: usize, epoch: u64) -> MixPos {
        MixPos {
            counter: 0,
            parts: vec![
                PartPos {
                    epoch,
                    next: 0,
                    out: false
                };
                parts
            ],
        }
    }
}

/// 2^64 / phi: the step of the golden-ratio sequence.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The part of position `counter`, among those with weight above 0 not left out.
fn pick(key: u64, counter: u64, weights: &[f64], pos: &MixPos) -> Option<usize> {
    let live = |k: usize| weights[k] > 0.0 && !pos.parts[k].out;
    let total: f64 = (0..weights.len())
        .filter(|&k| live(k))
        .map(|k| weights[k])
        .sum();
    if total <= 0.0 {
        return None;
    }
    let x = key.wrapping_add(counter.wrapping_mul(GOLDEN));
    let target = (x >> 11) as f64 / (1u64 << 53) as f64 * total;
    let mut acc = 0.0;
    let mut last = None;
    for k in (0..weights.len()).filter(|&k| live(k)) {
        acc += weights[k];
        last = Some(k);
        if target < acc {
            return Some(k);
        }
    }
    // Rounding at the very top of [0, 1): the last part drawn.
    last
}

/// The seed of part `k`'s own shuffle: apart from the mixture's and each other's.
fn part_seed(seed: u64, k: usize) -> u64 {
    SampleRng::new(seed, k as u64, u64::MAX - 8).next_u64()
}

/// Generates a mixture's order from positions.
pub(crate) struct Generator<'a> {
    mix: &'a Mixture,
    base: &'a Sampler,
    weights: &'a [f64],
    key: u64,
    /// The order of each part's current epoch, made when first needed.
    orders: Vec<Option<(u64, Vec<usize>)>>,
}

impl<'a> Generator<'a> {
    /// `base` gives the shuffle settings and seed; `key_epoch` the epoch whose key the
    /// draws use (0 under `never`).
    pub fn new(mix: &'a Mixture, base: &'a Sampler, weights: &'a [f64], key_epoch: u64) -> Self {
        let key = SampleRng::new(base.seed, key_epoch, u64::MAX - 9).next_u64();
        Generator {
            mix,
            base,
            weights,
            key,
            orders: vec![None; mix.parts.len()],
        }
    }

    /// The next sample (a mixture index), advancing `pos`; `None` once the stop rule
    /// ends the epoch.
    pub fn next(&mut self, pos: &mut MixPos) -> Option<usize> {
        let stop = self.mix.spec.stop;
        if stop == Stop::FirstExhausted && pos.parts.iter().any(|p| p.out) {
            return None;
        }
        // The sequence has 2^64 positions; the draws end at the last.
        let after = pos.counter.checked_add(1)?;
        let k = pick(self.key, pos.counter, self.weights, pos)?;
        pos.counter = after;
        let len = self.mix.part_len(k);
        let p = &mut pos.parts[k];
        let order = match &self.orders[k] {
            Some((e, o)) if *e == p.epoch => o,
            _ => {
                let s = Sampler {
                    seed: part_seed(self.base.seed, k),
                    rank: 0,
                    world_size: 1,
                    ..self.base.clone()
                };
                let o = s.indices_in(len, self.mix.part_shards(k), p.epoch);
                &self.orders[k].insert((p.epoch, o)).1
            }
        };
        let i = order[p.next.min(len - 1)];
        p.next += 1;
        if p.next >= len {
            match stop {
                Stop::Never => {
                    p.epoch += 1;
                    p.next = 0;
                }
                Stop::FirstExhausted | Stop::AllExhausted => p.out = true,
            }
        }
        Some(self.mix.global(k, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_keeps_to_the_weights() {
        let weights = [0.7, 0.3];
        let pos = MixPos::fresh(2, 0);
        for key in [0u64, 1, 12345, u64::MAX / 3] {
            let mut count = [0usize; 2];
            for n in 0..10_000u64 {
                count[pick(key, n, &weights, &pos).unwrap()] += 1;
            }
            // An evenly spread sequence: within a handful of draws, not ~46 (sqrt n).
            assert!((count[0] as i64 - 7000).abs() <= 5, "{count:?}");
        }
        // A part left out is not drawn; a zero weight is never drawn.
        let mut out = MixPos::fresh(2, 0);
        out.parts[0].out = true;
        assert!((0..100).all(|n| pick(3, n, &weights, &out) == Some(1)));
        assert!((0..100).all(|n| pick(3, n, &[0.0, 1.0], &pos) == Some(1)));
        out.parts[1].out = true;
        assert_eq!(pick(3, 0, &weights, &out), None);
    }
}
