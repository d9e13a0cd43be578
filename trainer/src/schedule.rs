//! Learning-rate schedule: linear warm-up from 0, then cosine decay to a floor.

/// `lr(step)` for step 0, 1, ...: rises linearly over `warmup` steps to `base`, then
/// follows half a cosine down to `min` at `total` steps, and stays there. Checkpoints
/// keep it as JSON (`train.schedule`), under these field names.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    /// Peak rate, reached at the end of the warm-up.
    pub base: f32,
    /// Floor the cosine ends at, kept from step `total` on (0 unless set).
    pub min: f32,
    /// Steps of linear warm-up (0: none): step `s < warmup` gets `base * (s + 1) / warmup`.
    pub warmup: u64,
    /// Step at which the cosine reaches `min`, counted from 0 with the warm-up included.
    pub total: u64,
}

impl Schedule {
    /// Warm-up over `warmup` steps to `base`, then a cosine down to 0 at step `total`.
    pub fn new(base: f32, warmup: u64, total: u64) -> Self {
        Self {
            base,
            min: 0.0,
            warmup,
            total,
        }
    }

    /// The default for a run of `epochs` epochs of `steps_per_epoch` steps: warm up
    /// over half an epoch (at most a tenth of the run, at least one step), then a cosine
    /// down to zero at the run's last step.
    pub fn warmup_cosine(base: f32, steps_per_epoch: u64, epochs: u64) -> Self {
        let total = steps_per_epoch * epochs;
        let warmup = (steps_per_epoch / 2).min(total / 10).max(1);
        Self::new(base, warmup, total)
    }

    /// A constant rate.
    pub fn constant(lr: f32) -> Self {
        Self {
            base: lr,
            min: lr,
            warmup: 0,
            total: 0,
        }
    }

    /// The learning rate of step `step` (counted from 0).
    pub fn lr(&self, step: u64) -> f32 {
        if step < self.warmup {
            return self.base * (step + 1) as f32 / self.warmup as f32;
        }
        let decay = self.total.saturating_sub(self.warmup);
        if decay == 0 {
            return self.base;
        }
        let t = ((step - self.warmup) as f64 / decay as f64).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        (self.min as f64 + (self.base - self.min) as f64 * cos) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine() {
        let s = Schedule::new(1.0, 4, 14);
        assert_eq!(s.lr(0), 0.25);
        assert_eq!(s.lr(3), 1.0);
        assert_eq!(s.lr(4), 1.0);
        assert!((s.lr(9) - 0.5).abs() < 1e-6);
        assert!(s.lr(14).abs() < 1e-6);
        assert!(s.lr(100).abs() < 1e-6);
        let mut prev = f32::MAX;
        for step in 4..=14 {
            assert!(s.lr(step) <= prev);
            prev = s.lr(step);
        }
        assert_eq!(Schedule::constant(0.1).lr(1000), 0.1);
    }

    #[test]
    fn the_default_warms_up_over_half_an_epoch_at_most_a_tenth_of_the_run() {
        // The demo: 6 epochs of 79 steps.
        let s = Schedule::warmup_cosine(0.1, 79, 6);
        assert_eq!((s.warmup, s.total), (39, 474));
        assert_eq!(s.lr(38), 0.1);
        assert!(s.lr(473) < 1e-5);
        // One epoch: a tenth of it.
        assert_eq!(Schedule::warmup_cosine(0.1, 79, 1).warmup, 7);
        // Tiny runs still warm up over one step.
        assert_eq!(Schedule::warmup_cosine(0.1, 1, 1).warmup, 1);
        assert_eq!(Schedule::warmup_cosine(0.1, 3, 2).warmup, 1);
    }
}
