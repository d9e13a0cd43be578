//! Named parameters laid out in one flat buffer.
//!
//! Layers register their parameters while the model is built; `finish` then assigns
//! offsets: first every parameter that takes weight decay, then the others, each group
//! in registration order. The optimizer can therefore decay exactly `0..decay_len` in
//! its single fused pass, and parameters registered one after the other in a group
//! (batch norm's gamma and beta) are adjacent.

use crate::rng::Rng;

/// How a parameter (or state entry) starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Every element 0 (biases of batch norms, running means).
    Zeros,
    /// Every element 1 (batch-norm scales, running variances).
    Ones,
    /// Normal with standard deviation `sqrt(gain / fan_in)` (He/Kaiming for gain 2).
    Normal {
        /// Inputs feeding each output (a weight's elements per output unit).
        fan_in: usize,
        /// Scale of the variance, `gain / fan_in`: 2 before a ReLU.
        gain: f32,
    },
    /// Uniform on `[-1/sqrt(fan_in), 1/sqrt(fan_in))`: PyTorch's default for the
    /// weights and biases of `Conv2d` and `Linear` (its weights' `kaiming_uniform_` with
    /// `a = sqrt(5)` has exactly this bound; standard deviation `1/sqrt(3 fan_in)`).
    /// What conv and linear layers start from: see docs/trainer.md, "Initialisation".
    FanInUniform {
        /// Inputs feeding each output: `in_features` for a linear layer, `c * k * k`
        /// for a convolution.
        fan_in: usize,
    },
}

/// Index of a registered entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamId(usize);

/// One named entry of the flat buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    /// PyTorch-style name, e.g. `conv1.weight`, `bn1.running_mean`.
    pub name: String,
    /// Dimensions, e.g. `[cout, cin, k, k]` for a convolution's weight.
    pub shape: Vec<usize>,
    /// Index of the first element in the flat buffer (valid once `finish` has run).
    pub offset: usize,
    /// Whether the optimizer applies weight decay to it.
    pub decay: bool,
    /// How its values start.
    pub init: Init,
}

impl ParamInfo {
    /// Elements in the entry: the product of its shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the entry has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The layout of a flat buffer: every entry's name, shape and offset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Registry {
    entries: Vec<ParamInfo>,
    total: usize,
    decay_len: usize,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an entry; its offset is known once `finish` has run.
    pub fn add(&mut self, name: &str, shape: &[usize], init: Init, decay: bool) -> ParamId {
        self.entries.push(ParamInfo {
            name: name.to_string(),
            shape: shape.to_vec(),
            offset: 0,
            decay,
            init,
        });
        ParamId(self.entries.len() - 1)
    }

    /// Assigns offsets: decayed entries first.
    pub fn finish(&mut self) {
        let mut off = 0;
        for decay in [true, false] {
            for e in self.entries.iter_mut().filter(|e| e.decay == decay) {
                e.offset = off;
                off += e.len();
            }
            if decay {
                self.decay_len = off;
            }
        }
        self.total = off;
    }

    /// Where entry `id` starts in the flat buffer. Panics for an id of another registry.
    pub fn offset(&self, id: ParamId) -> usize {
        self.entries[id.0].offset
    }

    /// Name, shape, offset and settings of entry `id`.
    pub fn info(&self, id: ParamId) -> &ParamInfo {
        &self.entries[id.0]
    }

    /// Every entry, in registration order.
    pub fn entries(&self) -> &[ParamInfo] {
        &self.entries
    }

    /// Elements in the flat buffer.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Elements `0..decay_len` take weight decay.
    pub fn decay_len(&self) -> usize {
        self.decay_len
    }

    /// Initial values of the whole flat buffer for `seed`.
    pub fn init_values(&self, seed: u64) -> Vec<f32> {
        let mut v = vec![0.0f32; self.total];
        for (i, e) in self.entries.iter().enumerate() {
            let dst = &mut v[e.offset..e.offset + e.len()];
            match e.init {
                Init::Zeros => dst.fill(0.0),
                Init::Ones => dst.fill(1.0),
                Init::Normal { fan_in, gain } => {
                    let std = (gain as f64 / fan_in.max(1) as f64).sqrt();
                    let mut rng = Rng::stream(seed, i as u64);
                    dst.iter_mut()
                        .for_each(|x| *x = (rng.normal() * std) as f32);
                }
                Init::FanInUniform { fan_in } => {
                    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
                    let mut rng = Rng::stream(seed, i as u64);
                    dst.iter_mut()
                        .for_each(|x| *x = ((2.0 * rng.uniform() - 1.0) * bound) as f32);
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decayed_entries_come_first_and_groups_stay_adjacent() {
        let mut r = Registry::new();
        let g = r.add("bn.weight", &[4], Init::Ones, false);
        let b = r.add("bn.bias", &[4], Init::Zeros, false);
        let w = r.add(
            "conv.weight",
            &[4, 3],
            Init::Normal {
                fan_in: 3,
                gain: 2.0,
            },
            true,
        );
        r.finish();
        assert_eq!(r.offset(w), 0);
        assert_eq!(r.decay_len(), 12);
        assert_eq!(r.offset(g), 12);
        assert_eq!(r.offset(b), 16);
        assert_eq!(r.total(), 20);
        let v = r.init_values(1);
        assert_eq!(&v[12..16], &[1.0; 4]);
        assert_eq!(v, r.init_values(1));
        assert_ne!(v, r.init_values(2));
    }

    #[test]
    fn fan_in_uniform_has_pytorchs_bound_and_spread() {
        let mut r = Registry::new();
        let fan_in = 64 * 9;
        let w = r.add("w", &[128, 64, 3, 3], Init::FanInUniform { fan_in }, true);
        r.finish();
        let v = r.init_values(5);
        let bound = 1.0 / (fan_in as f64).sqrt();
        let xs = &v[r.offset(w)..][..128 * fan_in];
        assert!(xs.iter().all(|&x| (x as f64).abs() <= bound));
        let n = xs.len() as f64;
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        // U(-b, b): variance b^2 / 3, the same as kaiming_uniform_(a = sqrt(5)).
        assert!(mean.abs() < 0.01 * bound, "mean {mean}");
        assert!(
            (var / (bound * bound / 3.0) - 1.0).abs() < 0.02,
            "var {var}"
        );
        // Both tails are reached.
        let (lo, hi) = xs
            .iter()
            .fold((0f32, 0f32), |(l, h), &x| (l.min(x), h.max(x)));
        assert!(lo < -0.99 * bound as f32 && hi > 0.99 * bound as f32);
    }
}
