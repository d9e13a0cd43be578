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
    pub epoch: u64,
    pub loss: f32,
    pub accuracy: f32,
    pub lr: f32,
}

/// Where one step's time went, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTime {
    pub step: u64,
    pub samples: u32,
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

/// What one epoch did.
///
/// Checkpoints keep these records as JSON (`train.epochs`): the field names are part of
/// the checkpoint format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u64,
    /// Mean over the epoch's training samples, as the model saw them (augmented, in
    /// training mode), accumulated as the epoch went.
    pub train_loss: f64,
    pub train_accuracy: f64,
    pub samples: u64,
    #[serde(flatten, with = "val_fields")]
    pub val: Option<Stats>,
    /// Data wait, compute and gradient averaging over the epoch's steps; excludes
    /// evaluation.
    pub train_seconds: f64,
    pub wait_seconds: f64,
    pub eval_seconds: f64,
}

impl EpochRecord {
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

    use crate::model::Stats;

    #[derive(Serialize, Deserialize)]
    struct ValFields {
        val_loss: Option<f32>,
        val_accuracy: Option<f32>,
        val_samples: Option<u64>,
    }

    pub fn serialize<S: Serializer>(val: &Option<Stats>, s: S) -> Result<S::Ok, S::Error> {
        ValFields {
            val_loss: val.map(|v| v.loss),
            val_accuracy: val.map(|v| v.accuracy),
            val_samples: val.map(|v| v.samples),
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
            }),
            _ => None,
        })
    }
}

/// Everything the run recorded, for reports and plots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub log: Vec<LogPoint>,
    /// One entry per step taken by this process.
    pub steps: Vec<StepTime>,
    /// Every finished epoch, including those before a resume.
    pub epochs: Vec<EpochRecord>,
}

/// Totals over a run, for the final summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    pub steps: u64,
    pub images: u64,
    /// Data wait, compute and gradient averaging over the steps this process took;
    /// excludes evaluation.
    pub train_seconds: f64,
    pub wait_seconds: f64,
    /// Averaging gradients across ranks (zero in a single process).
    pub comm_seconds: f64,
    pub eval_seconds: f64,
}

impl Totals {
    pub fn of(h: &History) -> Self {
        let mut t = Totals {
            steps: h.steps.len() as u64,
            images: 0,
            train_seconds: 0.0,
            wait_seconds: 0.0,
            comm_seconds: 0.0,
            eval_seconds: h.epochs.iter().fold(0.0, |s, e| s + e.eval_seconds),
        };
        for s in &h.steps {
            t.images += s.samples as u64;
            t.wait_seconds += s.wait as f64;
            t.comm_seconds += s.comm as f64;
            t.train_seconds += (s.wait + s.compute + s.comm) as f64;
        }
        t
    }

    /// Share of the training time spent averaging gradients across ranks.
    pub fn comm_share(&self) -> f64 {
        self.comm_seconds / self.train_seconds.max(1e-9)
    }

    pub fn images_per_sec(&self) -> f64 {
        self.images as f64 / self.train_seconds.max(1e-9)
    }

    pub fn wait_share(&self) -> f64 {
        self.wait_seconds / self.train_seconds.max(1e-9)
    }
}
