//! Per-sample random numbers, seeded by (seed, epoch, index).
//!
//! We keep our own small generator instead of `rand` so that the stream of numbers
//! (and therefore every augmented pixel) can never change under a dependency upgrade:
//! determinism across versions is part of the contract.

/// A xoshiro256** generator seeded from (seed, epoch, index) through SplitMix64.
#[derive(Clone, Debug)]
pub struct SampleRng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SampleRng {
    /// The generator for one sample of one epoch. Different triples give independent
    /// streams; the same triple always gives the same stream.
    pub fn new(seed: u64, epoch: u64, index: u64) -> Self {
        // Mix each part in turn so that (1, 2, 3) and (3, 2, 1) differ.
        let mut st = seed;
        let a = splitmix64(&mut st);
        let mut st = a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let b = splitmix64(&mut st);
        let mut st = b ^ index.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7);
        let s = [
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
        ];
        SampleRng { s }
    }

    /// A generator from a single seed (for callers outside the per-sample scheme).
    pub fn from_seed(seed: u64) -> Self {
        Self::new(seed, 0, 0)
    }

    /// The next 64 uniformly distributed bits of the stream.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// Uniform integer in [0, n); `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift: unbiased enough for augmentation and branch-free.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_triple_same_stream() {
        let mut a = SampleRng::new(1, 2, 3);
        let mut b = SampleRng::new(1, 2, 3);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn different_triples_differ() {
        let first = |s, e, i| SampleRng::new(s, e, i).next_u64();
        assert_ne!(first(1, 2, 3), first(3, 2, 1));
        assert_ne!(first(0, 0, 0), first(0, 0, 1));
        assert_ne!(first(0, 0, 0), first(0, 1, 0));
    }

    #[test]
    fn ranges_hold() {
        let mut r = SampleRng::from_seed(7);
        for _ in 0..10_000 {
            let x = r.uniform(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&x));
            assert!(r.below(5) < 5);
        }
    }
}
