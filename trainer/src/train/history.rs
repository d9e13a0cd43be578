//! What a run records as it goes: the loss read back at logged steps, where each step's
//! time went, one record per finished epoch (kept in checkpoints, so a resumed run's
//! history is whole), and the totals a summary prints.

use serde::{Deserialize, Serialize};

use crate::model::Stats;

/// The mean training loss and accuracy over the steps since the previous point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogPoint {
    /// Steps done when it was read (1-based: the point after step `step`).
    pub step: u64,
    /// The epoch in progress, from 0.
    pub epoch: u64,
    /// Mean training loss per sample since the previous point (all ranks').
    pub loss: f32,
    /// Mean accuracy over the same samples (the exact-match ratio for a multi-label
    /// model).
    pub accuracy: f32,
    /// Learning rate of the last step before the point.
    pub lr: f32,
}

/// Where one step's time went, in seconds; or, once [`History`] has merged entries, the
/// mean over `count` consecutive steps ending at `step`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTime {
    /// The (last) step covered.
    pub step: u64,
    /// Steps covered: 1, until the history merges entries.
    pub count: u32,
    /// Samples over all the steps covered.
    pub samples: u64,
    /// Blocked in the loader's `next()`, plus handing the batch to the device (the
    /// feed's `put`: an upload on CUDA; see [`crate::feed::BatchFeed::wait_covers`]).
    pub wait: f32,
    /// Forward, backward and optimizer step (on an asynchronous device: enqueueing them;
    /// in a distributed run the backward is also waited for, before the exchange).
    pub compute: f32,
    /// Averaging the gradients across ranks, including waiting for the slowest rank (on
    /// a GPU with either engine: until the averaged gradients are on the device).
    /// Zero in a single process.
    pub comm: f32,
}

impl StepTime {
    /// `self` followed by `next`: the later step, the counts and samples added, the times
    /// averaged by count.
    fn then(&self, next: &StepTime) -> StepTime {
        let count = self.count + next.count;
        let (a, b) = (self.count as f32, next.count as f32);
        let mean = |x: f32, y: f32| (x * a + y * b) / count as f32;
        StepTime {
            step: next.step,
            count,
            samples: self.samples + next.samples,
            wait: mean(self.wait, next.wait),
            compute: mean(self.compute, next.compute),
            comm: mean(self.comm, next.comm),
        }
    }
}

/// What one epoch did.
///
/// Checkpoints keep these records as JSON (`train.epochs`): the field names are part of
/// the checkpoint format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// The epoch, from 0.
    pub epoch: u64,
    /// Mean over the epoch's training samples, as the model saw them (augmented, in
    /// training mode), accumulated as the epoch went.
    pub train_loss: f64,
    /// Mean accuracy over the same samples (the exact-match ratio for a multi-label
    /// model).
    pub train_accuracy: f64,
    /// Training samples of the epoch (all ranks' in a data-parallel run).
    pub samples: u64,
    /// Loss and accuracy on the validation data after the epoch; `None` without any.
    #[serde(flatten, with = "val_fields")]
    pub val: Option<Stats>,
    /// Data wait, compute and gradient averaging over the epoch's steps; excludes
    /// evaluation.
    pub train_seconds: f64,
    /// The part of `train_seconds` spent waiting for data.
    pub wait_seconds: f64,
    /// Evaluation after the epoch.
    pub eval_seconds: f64,
}

impl EpochRecord {
    /// Training throughput: the epoch's samples per second of `train_seconds`.
    pub fn images_per_sec(&self) -> f64 {
        self.samples as f64 / self.train_seconds.max(1e-9)
    }

    /// Share of the training time spent waiting for data.
    pub fn wait_share(&self) -> f64 {
        self.wait_seconds / self.train_seconds.max(1e-9)
    }
}

/// `EpochRecord::val` as checkpoints store it (`train.epochs` is a list of epoch
/// records): three flat fields, null together when there was no validation data.
mod val_fields {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::label_metrics::LabelMetrics;
    use crate::model::Stats;

    #[derive(Serialize, Deserialize)]
    struct ValFields {
        val_loss: Option<f32>,
        val_accuracy: Option<f32>,
        val_samples: Option<u64>,
        /// A multi-label run's metrics: absent from classification records, so their
        /// checkpoints read and write as before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        val_labels: Option<LabelMetrics>,
    }

    pub fn serialize<S: Serializer>(val: &Option<Stats>, s: S) -> Result<S::Ok, S::Error> {
        ValFields {
            val_loss: val.map(|v| v.loss),
            val_accuracy: val.map(|v| v.accuracy),
            val_samples: val.map(|v| v.samples),
            val_labels: val.and_then(|v| v.labels),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Stats>, D::Error> {
        let v = ValFields::deserialize(d)?;
        Ok(match (v.val_loss, v.val_accuracy, v.val_samples) {
            (Some(loss), Some(accuracy), Some(samples)) => Some(Stats {
                loss,
                accuracy,
                samples,
                labels: v.val_labels,
            }),
            _ => None,
        })
    }
}

/// Everything the run recorded, for reports and plots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// The loss read back at every log point, in order.
    pub log: Vec<LogPoint>,
    /// The steps taken by this process, one entry per step until there are more than
    /// [`History::MAX_STEP_ENTRIES`]; then neighbours are merged in pairs, and every
    /// entry covers twice as many steps from then on, so a long run's history stays
    /// bounded and evenly spaced. Add to it with [`History::push_step`].
    pub steps: Vec<StepTime>,
    /// Every finished epoch, including those before a resume.
    pub epochs: Vec<EpochRecord>,
    /// Steps per entry of `steps` (0 counts as 1).
    pub(crate) step_stride: u32,
}

impl History {
    /// Most entries `steps` holds.
    pub const MAX_STEP_ENTRIES: usize = 10_000;

    /// Records one step (`time.count` is 1): a new entry, or into the last one while it
    /// covers fewer steps than the current stride.
    pub fn push_step(&mut self, time: StepTime) {
        let stride = self.step_stride.max(1);
        match self.steps.last_mut() {
            Some(last) if last.count < stride => *last = last.then(&time),
            _ => self.steps.push(time),
        }
        if self.steps.len() > Self::MAX_STEP_ENTRIES {
            let merged = self
                .steps
                .chunks(2)
                .map(|p| match p {
                    [a, b] => a.then(b),
                    [a] => *a,
                    _ => unreachable!("chunks(2) yields one or two entries"),
                })
                .collect();
            self.steps = merged;
            self.step_stride = stride * 2;
        }
    }
}

/// Totals over a run, for the final summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    /// Steps this process took (those [`History::steps`] covers).
    pub steps: u64,
    /// Samples of those steps (this process's).
    pub images: u64,
    /// Data wait, compute and gradient averaging over the steps this process took;
    /// excludes evaluation.
    pub train_seconds: f64,
    /// The part of `train_seconds` spent waiting for data.
    pub wait_seconds: f64,
    /// Averaging gradients across ranks (zero in a single process).
    pub comm_seconds: f64,
    /// Evaluation after every recorded epoch (also those before a resume).
    pub eval_seconds: f64,
}

impl Totals {
    /// The totals of `h`.
    pub fn of(h: &History) -> Self {
        let mut t = Totals {
            steps: 0,
            images: 0,
            train_seconds: 0.0,
            wait_seconds: 0.0,
            comm_seconds: 0.0,
            eval_seconds: h.epochs.iter().fold(0.0, |s, e| s + e.eval_seconds),
        };
        for s in &h.steps {
            let k = s.count as f64;
            t.steps += s.count as u64;
            t.images += s.samples;
            t.wait_seconds += s.wait as f64 * k;
            t.comm_seconds += s.comm as f64 * k;
            t.train_seconds += (s.wait + s.compute + s.comm) as f64 * k;
        }
        t
    }

    /// Share of the training time spent averaging gradients across ranks.
    pub fn comm_share(&self) -> f64 {
        self.comm_seconds / self.train_seconds.max(1e-9)
    }

    /// Training throughput: samples per second of `train_seconds`.
    pub fn images_per_sec(&self) -> f64 {
        self.images as f64 / self.train_seconds.max(1e-9)
    }

    /// Share of the training time spent waiting for data.
    pub fn wait_share(&self) -> f64 {
        self.wait_seconds / self.train_seconds.max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: u64) -> StepTime {
        StepTime {
            step,
            count: 1,
            samples: 8,
            wait: 0.001,
            compute: if step.is_multiple_of(2) { 0.010 } else { 0.030 },
            comm: 0.0,
        }
    }

    #[test]
    fn step_history_stays_bounded_and_keeps_the_totals() {
        let mut h = History::default();
        let n = 3 * History::MAX_STEP_ENTRIES as u64 + 7;
        for s in 1..=n {
            h.push_step(step(s));
            assert!(h.steps.len() <= History::MAX_STEP_ENTRIES, "at step {s}");
        }
        // Merged twice: every entry covers 4 steps but the last, still filling.
        assert!(h.steps.len() > History::MAX_STEP_ENTRIES / 2);
        let (last, rest) = h.steps.split_last().unwrap();
        assert!(rest.iter().all(|e| e.count == 4), "{:?}", &rest[..3]);
        assert_eq!(last.step, n);
        assert!(h
            .steps
            .windows(2)
            .all(|w| w[0].step + w[1].count as u64 == w[1].step));
        // Pairs of an odd and an even step average to 20 ms.
        assert!(rest.iter().all(|e| (e.compute - 0.020).abs() < 1e-6));
        let t = Totals::of(&h);
        assert_eq!((t.steps, t.images), (n, 8 * n));
        let want = n as f64 * 0.001 + (n / 2) as f64 * 0.010 + n.div_ceil(2) as f64 * 0.030;
        assert!(
            (t.train_seconds - want).abs() < 1e-6 * want,
            "{t:?} vs {want}"
        );
    }

    #[test]
    fn short_histories_keep_every_step() {
        let mut h = History::default();
        for s in 1..=100 {
            h.push_step(step(s));
        }
        assert_eq!(h.steps, (1..=100).map(step).collect::<Vec<_>>());
    }
}
