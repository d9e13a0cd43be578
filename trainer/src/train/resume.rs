//! Checkpoints of the loop: what [`Trainer::save`] adds to the model and optimizer
//! (the loader's place, the running sums of the epoch in progress, the schedule, the
//! finished epochs), and [`Trainer::load`], which puts a run back exactly where it
//! stopped, on this rank's shard of the data.
//!
//! The loop's entries are JSON strings in the safetensors metadata, under `train.*`
//! keys; their field names are the checkpoint format. They are written through
//! `serde_json::Value`, as they always were (keys sorted, f32 values widened to f64), so
//! that older builds read new checkpoints the same.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use stoker_loader::LoaderState;

use super::{
    weights_fingerprint, EpochRecord, History, Position, TrainConfig, TrainError, Trainer,
};
use crate::backend::Backend;
use crate::checkpoint;
use crate::model::Model;
use crate::optim::Optimizer;
use crate::schedule::Schedule;

/// Checkpoint metadata keys of the loop (the model and optimizer keys are
/// `checkpoint`'s own).
const KEY_LOADER: &str = "train.loader_state";
const KEY_POSITION: &str = "train.position";
const KEY_SCHEDULE: &str = "train.schedule";
const KEY_EPOCHS: &str = "train.epochs";

/// `train.position`: the loop's [`Position`] without the loader's place (a key of its
/// own), plus the model's training accumulator (sums not yet read back).
#[derive(Debug, Serialize, Deserialize)]
struct SavedPosition {
    step: u64,
    epoch: u64,
    loss_sum: f64,
    correct: f64,
    samples: u64,
    train_seconds: f64,
    wait_seconds: f64,
    /// f32 bit patterns: the device accumulator must come back exactly.
    acc_bits: [u32; 2],
    acc_samples: u64,
}

impl<B: Backend + Clone + 'static> Trainer<B> {
    /// Saves model, optimizer, loader position, running sums and schedule to `path`.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        write_checkpoint(
            path,
            &self.model,
            &self.optimizer,
            &self.position,
            &self.config,
            &self.history,
        )
    }

    /// Restores a checkpoint written by [`Trainer::save`]: the next `run` continues
    /// exactly where that run stopped. Returns whether the checkpoint's learning-rate
    /// schedule differs from this trainer's (then the run goes on with this one's).
    pub fn load(&mut self, path: &Path) -> Result<bool, TrainError> {
        let bad = |reason: String| TrainError::Resume {
            path: path.display().to_string(),
            reason,
            source: None,
        };
        // `reason` reports `e`, which is kept as the source.
        let bad_because =
            |reason: String, e: Box<dyn std::error::Error + Send + Sync>| TrainError::Resume {
                path: path.display().to_string(),
                reason,
                source: Some(e),
            };
        // Read and check the loop's own metadata before anything is changed.
        let meta = checkpoint::read_metadata(path)?;
        let entry = |k: &str| {
            meta.get(k)
                .ok_or_else(|| bad(format!("no `{k}` entry: not written by stoker-train")))
        };
        let saved: SavedPosition = serde_json::from_str(entry(KEY_POSITION)?)
            .map_err(|e| bad_because(format!("`{KEY_POSITION}`: {e}"), e.into()))?;
        // The checkpoint holds rank 0's place; the loader continues it on this rank,
        // also when the batch size or the number of ranks changed (the rest of the
        // epoch is divided again among this run's ranks: docs/loader-engine.md). With
        // another batch per step in all, the step count is re-counted in this run's
        // steps, which its learning-rate schedule and --max-steps are in.
        let mut step = saved.step;
        let loader = match meta.get(KEY_LOADER) {
            Some(s) => {
                let at_save = LoaderState::from_json(s)
                    .map_err(|e| bad_because(format!("`{KEY_LOADER}`: {e}"), e.into()))?;
                let target = self.train.state_at(at_save.epoch, 0);
                // The count first: when it differs, it says more than the fingerprint.
                if at_save.samples != target.samples {
                    return Err(bad(format!(
                        "the checkpoint was trained on {} samples, this data has {}",
                        at_save.samples, target.samples
                    )));
                }
                if at_save.seed != target.seed {
                    return Err(bad(format!(
                        "the checkpoint shuffled with seed {}, this run with seed {} (give \
                         --seed {})",
                        at_save.seed, target.seed, at_save.seed
                    )));
                }
                // Before the resume: a resumed epoch's plan (the rest, dealt again) is
                // what the loader counts in once it is set.
                let per_epoch = self.train.batches_per_epoch();
                let cursor = self
                    .train
                    .resume_cursor(&at_save)
                    .map_err(|e| bad_because(e.to_string(), e.into()))?;
                let mine = self.train.cursor_state(&cursor);
                if at_save.batch_size * at_save.world_size != target.batch_size * target.world_size
                {
                    step = at_save.epoch * per_epoch as u64
                        + per_epoch.saturating_sub(cursor.remaining()) as u64;
                }
                Some(mine)
            }
            None => None,
        };
        let position = Position {
            step,
            epoch: saved.epoch,
            loader,
            loss_sum: saved.loss_sum,
            correct: saved.correct,
            samples: saved.samples,
            train_seconds: saved.train_seconds,
            wait_seconds: saved.wait_seconds,
        };
        if let Some(s) = &position.loader {
            if s.epoch != position.epoch {
                return Err(bad(format!(
                    "loader state is in epoch {}, training position in epoch {}",
                    s.epoch, position.epoch
                )));
            }
        }
        let epochs = match meta.get(KEY_EPOCHS) {
            Some(s) => serde_json::from_str::<Vec<EpochRecord>>(s).map_err(|e| {
                bad_because(
                    format!("`{KEY_EPOCHS}` is not a list of epochs: {e}"),
                    e.into(),
                )
            })?,
            None => Vec::new(),
        };
        let schedule_changed = meta.get(KEY_SCHEDULE).is_some_and(|s| {
            serde_json::from_str::<Schedule>(s).ok() != Some(self.config.schedule)
        });

        checkpoint::load(path, &mut self.model, &mut self.optimizer)?;
        // Every rank reads its own copy of the file: a stale copy on one machine would
        // put the ranks out of step. Compare where each would continue, and the weights.
        let c = self.collective.as_ref();
        c.check_same("the checkpoint's step", position.step)?;
        c.check_same("the checkpoint's epoch", position.epoch)?;
        c.check_same(
            "the checkpoint's batch in its epoch",
            position.loader.as_ref().map_or(0, |s| s.next_batch as u64),
        )?;
        if c.world() > 1 {
            let fingerprint = weights_fingerprint(&self.model)?;
            c.check_same("the checkpoint's weights (a fingerprint)", fingerprint)?;
        }
        // Sums not yet taken belong to the run that wrote the checkpoint; they must be
        // counted once, so only rank 0 takes them back.
        let (acc, acc_samples) = if self.collective.rank() == 0 {
            (saved.acc_bits.map(f32::from_bits), saved.acc_samples)
        } else {
            ([0.0; 2], 0)
        };
        self.model.set_train_accumulator(acc, acc_samples)?;
        self.resume = position.loader.clone();
        self.position = position;
        self.history = History {
            epochs,
            ..History::default()
        };
        Ok(schedule_changed)
    }
}

/// The checkpoint of [`Trainer::save`], from the trainer's parts (the loop holds them
/// apart).
pub(super) fn write_checkpoint<B: Backend + Clone + 'static>(
    path: &Path,
    model: &Model<B>,
    optimizer: &Optimizer<B>,
    p: &Position,
    config: &TrainConfig,
    history: &History,
) -> Result<(), TrainError> {
    let (acc, acc_samples) = model.train_accumulator()?;
    let position = SavedPosition {
        step: p.step,
        epoch: p.epoch,
        loss_sum: p.loss_sum,
        correct: p.correct,
        samples: p.samples,
        train_seconds: p.train_seconds,
        wait_seconds: p.wait_seconds,
        acc_bits: acc.map(f32::to_bits),
        acc_samples,
    };
    let mut meta = BTreeMap::new();
    if let Some(state) = &p.loader {
        meta.insert(KEY_LOADER.to_string(), state.to_json());
    }
    meta.insert(
        KEY_POSITION.to_string(),
        to_json(path, KEY_POSITION, &position)?,
    );
    meta.insert(
        KEY_SCHEDULE.to_string(),
        to_json(path, KEY_SCHEDULE, &config.schedule)?,
    );
    meta.insert(
        KEY_EPOCHS.to_string(),
        to_json(path, KEY_EPOCHS, &history.epochs)?,
    );
    checkpoint::save(path, model, optimizer, &meta)?;
    Ok(())
}

/// The JSON text of a metadata entry, through `serde_json::Value` (see the module docs).
fn to_json<T: Serialize>(path: &Path, key: &str, value: &T) -> Result<String, TrainError> {
    serde_json::to_value(value)
        .map(|v| v.to_string())
        .map_err(|e| TrainError::Resume {
            path: path.display().to_string(),
            reason: format!("cannot write `{key}`: {e}"),
            source: Some(e.into()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop's entries as a checkpoint of the build before serde derive wrote them
    /// (`stoker-train --model mlp --max-steps 120`, acc_bits made non-zero).
    const POSITION: &str = r#"{"acc_bits":[1065353216,3212836864],"acc_samples":3,"correct":592.0000076293945,"epoch":1,"loss_sum":11973.56591796875,"samples":5248,"step":120,"train_seconds":0.38367287899999997,"wait_seconds":0.002715434000000002}"#;
    const EPOCHS: &str = r#"[{"epoch":0,"eval_seconds":0.207916062,"samples":10000,"train_accuracy":0.11049999898672104,"train_loss":2.357225818634033,"train_seconds":1.361666423,"val_accuracy":0.10499999672174454,"val_loss":2.298222303390503,"val_samples":2000,"wait_seconds":0.112141},{"epoch":1,"eval_seconds":0.0,"samples":8,"train_accuracy":0.5,"train_loss":1.0,"train_seconds":0.5,"val_accuracy":null,"val_loss":null,"val_samples":null,"wait_seconds":0.25}]"#;
    const SCHEDULE: &str = r#"{"base":0.10000000149011612,"min":0.0,"total":158,"warmup":15}"#;

    #[test]
    fn existing_checkpoint_entries_read_back_and_are_written_the_same() {
        let p = Path::new("x.safetensors");
        let position: SavedPosition = serde_json::from_str(POSITION).unwrap();
        assert_eq!(
            (position.step, position.epoch, position.samples),
            (120, 1, 5248)
        );
        assert_eq!(position.acc_bits.map(f32::from_bits), [1.0, -1.0]);
        assert_eq!(to_json(p, KEY_POSITION, &position).unwrap(), POSITION);

        let epochs: Vec<EpochRecord> = serde_json::from_str(EPOCHS).unwrap();
        let val = epochs[0].val.expect("validation statistics");
        assert_eq!(
            (val.loss, val.accuracy, val.samples),
            (2.2982223, 0.105, 2000)
        );
        assert_eq!(epochs[0].train_loss, 2.357225818634033);
        assert_eq!(epochs[1].val, None);
        assert_eq!(to_json(p, KEY_EPOCHS, &epochs).unwrap(), EPOCHS);

        let schedule: Schedule = serde_json::from_str(SCHEDULE).unwrap();
        assert_eq!(schedule, Schedule::new(0.1, 15, 158));
        assert_eq!(to_json(p, KEY_SCHEDULE, &schedule).unwrap(), SCHEDULE);
    }

    #[test]
    fn a_multi_label_epoch_keeps_its_metrics_through_a_checkpoint() {
        let p = Path::new("x.safetensors");
        let mut epochs: Vec<EpochRecord> = serde_json::from_str(EPOCHS).unwrap();
        let labels = crate::label_metrics::LabelMetrics {
            map: Some(0.8125),
            f1_micro: 0.75,
            f1_macro: 0.5,
        };
        epochs[0].val.as_mut().unwrap().labels = Some(labels);
        let text = to_json(p, KEY_EPOCHS, &epochs).unwrap();
        assert!(
            text.contains(r#""val_labels":{"f1_macro":0.5,"f1_micro":0.75,"map":0.8125}"#),
            "{text}"
        );
        let back: Vec<EpochRecord> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, epochs);
        assert_eq!(back[0].val.unwrap().labels, Some(labels));
    }

    #[test]
    fn a_damaged_entry_is_an_error_that_names_the_field() {
        let missing = POSITION.replace(r#""step":120,"#, "");
        let e = serde_json::from_str::<SavedPosition>(&missing).unwrap_err();
        assert!(e.to_string().contains("`step`"), "{e}");
        let big = POSITION.replace("1065353216", "4294967296");
        assert!(serde_json::from_str::<SavedPosition>(&big).is_err());
    }
}
