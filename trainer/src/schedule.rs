//! Learning-rate schedule: linear warm-up from 0, then cosine decay to a floor.

/// `lr(step)` for step 0, 1, ...: rises linearly over `warmup` steps to `base`, then
/// follows half a cosine down to `min` at `total` steps, and stays there. Checkpoints
/// keep it as JSON (`train.schedule`), under these field names.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    pub base: f32,
    pub min: f32,
    pub warmup: u64,
    pub total: u64,
}

impl Schedule {
    pub fn new(base: f32, warmup: u64, total: u64) -> Self {
        Self {
            base,
            min: 0.0,
            warmup,
            total,
        }
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
}
