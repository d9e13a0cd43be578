//! The training loop: epochs of loader batches through forward, backward and the
//! optimizer step, an evaluation pass per epoch, checkpoints that resume exactly, and
//! the two timings that matter for the data pipeline: how long each step waited for
//! its batch, and how long it computed.
//!
//! ```text
//! for epoch:
//!     for batch in loader:            <- time blocked here is the "data wait",
//!         feed.put(batch)             <- and so is handing it to the device
//!         feed.forward_backward; optimizer step at lr(step); feed.end_step
//!         every log_every steps: read the loss back (the only host sync)
//!     evaluate on the validation loader (timed separately)
//! ```
//!
//! The loop is generic over the [`Backend`]; how a batch reaches the model is the
//! [`BatchFeed`] chosen once per run (the host batch on the CPU, the loader's upload
//! stage on CUDA), so the same loop drives both.
//!
//! Here: the loop and its state. [`history`]: what a run records. [`resume`]: the
//! loop's part of a checkpoint, and putting a run back where one stopped.

pub mod history;
pub mod resume;

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use stoker_loader::{Loader, LoaderError, LoaderState};

pub use history::{EpochRecord, History, LogPoint, StepTime, Totals};
use resume::write_checkpoint;

use crate::backend::Backend;
use crate::checkpoint::CheckpointError;
use crate::collective::{Collective, CollectiveError, Local};
use crate::error::ModelError;
use crate::feed::{BatchFeed, FeedError, HostFeed};
use crate::label_metrics::LabelScores;
use crate::model::{Model, Stats};
use crate::optim::Optimizer;
use crate::schedule::Schedule;

/// What the loop can fail with: the data, the model, or a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The loader could not deliver a batch, or resume where a checkpoint says.
    #[error("data: {0}")]
    Loader(#[from] LoaderError),
    /// The model refused a batch or a step failed, or the trainer's parts do not fit
    /// together (e.g. loaders sharded for another rank).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Saving or loading the model's and optimizer's part of a checkpoint failed.
    #[error("checkpoint {0}")]
    Checkpoint(#[from] CheckpointError),
    /// Handing a batch to the model failed (on CUDA: its upload).
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// An exchange with the other ranks failed, timed out, or found them disagreeing.
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// The loop's entries of a checkpoint (the training state besides the model and
    /// optimizer) cannot be read, do not fit this run, or cannot be written.
    #[error("checkpoint {path}: {reason}")]
    Resume {
        /// The checkpoint file.
        path: String,
        /// What is wrong, in words.
        reason: String,
        /// The error that found it, where there was one (the JSON parser's, the
        /// loader's refusal to resume).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

/// How long to train, at what rate, and how often to look at the loss.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Epochs to train in all (a resumed run counts those done before it).
    pub epochs: u64,
    /// Learning rate by optimizer step, counted over the whole run.
    pub schedule: Schedule,
    /// Read the loss back to the host every this many steps (and at each epoch's end):
    /// on a GPU every read is a synchronisation, so it is rare on purpose.
    pub log_every: u64,
    /// Stop once this many steps are done in total (counting those before a resume),
    /// possibly mid-epoch: a checkpoint saved then resumes exactly.
    pub max_steps: Option<u64>,
    /// Written after every epoch and when `max_steps` stops the run.
    pub checkpoint: Option<PathBuf>,
}

/// Where a run stands: saved in checkpoints, so a resumed run continues the same sums.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Position {
    /// Optimizer steps done; the learning rate of the next is `schedule.lr(step)`.
    pub step: u64,
    /// The epoch in progress, or the next one.
    pub epoch: u64,
    /// The loader's place: the next batch of `epoch` (None before the first step).
    pub loader: Option<LoaderState>,
    /// Running sums of the epoch in progress: the training losses of its samples read
    /// back so far (all ranks' in a data-parallel run).
    pub loss_sum: f64,
    /// Correct predictions among those samples (exact matches for a multi-label model).
    pub correct: f64,
    /// Samples the sums cover.
    pub samples: u64,
    /// Seconds of the epoch's steps so far, data wait included (this process's).
    pub train_seconds: f64,
    /// The part of `train_seconds` spent waiting for data.
    pub wait_seconds: f64,
}

/// Why [`Trainer::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Every epoch is done.
    Finished,
    /// `max_steps` reached; `position` says where.
    MaxSteps,
}

/// Callbacks for progress display. Every method has an empty default.
pub trait Observer {
    /// An epoch starts (or resumes at batch `done` of `batches`).
    fn epoch_start(&mut self, _epoch: u64, _batches: usize, _done: usize) {}
    /// A step finished; `log` is set when the loss was read back at this step.
    fn step(&mut self, _time: &StepTime, _log: Option<&LogPoint>) {}
    /// Training of the epoch is over; evaluation begins.
    fn eval_start(&mut self, _epoch: u64) {}
    /// An epoch is over, evaluation included; `record` is what it did.
    fn epoch_end(&mut self, _record: &EpochRecord) {}
}

/// An observer that shows nothing.
impl Observer for () {}

/// A model, its optimizer, the training and validation loaders, and the loop's state.
pub struct Trainer<B: Backend + Clone + 'static> {
    /// The network being trained.
    pub model: Model<B>,
    /// The optimizer, bound to `model`'s parameters.
    pub optimizer: Optimizer<B>,
    /// The training loader (sharded for this rank in a data-parallel run).
    pub train: Loader,
    /// The validation loader, evaluated after every epoch; `None` skips evaluation.
    pub val: Option<Loader>,
    /// Length, learning rate, logging and checkpoints of the run.
    pub config: TrainConfig,
    /// Where the run stands (saved in checkpoints).
    pub position: Position,
    /// What the run has recorded so far.
    pub history: History,
    /// How batches reach the model: the host path unless `with_feed` says otherwise.
    feed: Box<dyn BatchFeed<B>>,
    /// Set by `load`: the loader state the next `run` resumes from.
    resume: Option<LoaderState>,
    /// The other ranks of a data-parallel run ([`Local`] in a single process).
    collective: Rc<dyn Collective<B>>,
}

impl<B: Backend + Clone + 'static> Trainer<B> {
    /// A trainer at the start of the run (step 0, epoch 0), in a single process, with
    /// batches on the host path ([`HostFeed`]).
    pub fn new(
        model: Model<B>,
        optimizer: Optimizer<B>,
        train: Loader,
        val: Option<Loader>,
        config: TrainConfig,
    ) -> Self {
        Self {
            model,
            optimizer,
            train,
            val,
            config,
            position: Position::default(),
            history: History::default(),
            feed: Box::new(HostFeed::new()),
            resume: None,
            collective: Rc::new(Local),
        }
    }

    /// Trains as one rank of a data-parallel run: gradients are averaged over the
    /// ranks after every backward, statistics are summed over them, and only rank 0
    /// writes checkpoints. The training loader must be sharded for this rank (and the
    /// validation loader too, with `ShardPolicy::Exact`, so that each validation sample
    /// counts once). Checks with the other ranks that they train the same model on the
    /// same data; every rank must call this at the same point.
    pub fn with_collective(mut self, c: Rc<dyn Collective<B>>) -> Result<Self, TrainError> {
        let (rank, world) = (c.rank(), c.world());
        let bad = |what: &str, config: &stoker_loader::LoaderConfig| {
            TrainError::Model(crate::error::config(
                "data-parallel trainer",
                format!(
                    "the {what} loader is sharded as rank {} of {}, but this process is \
                     rank {rank} of {world}",
                    config.rank, config.world_size
                ),
            ))
        };
        let config = self.train.config();
        if (config.rank, config.world_size) != (rank, world) {
            return Err(bad("training", config));
        }
        if let Some(v) = &self.val {
            let vc = v.config();
            if (vc.rank, vc.world_size) != (rank, world) {
                return Err(bad("validation", vc));
            }
        }
        c.check_same("the parameter count", self.model.param_count() as u64)?;
        c.check_same("the batch size", config.batch_size as u64)?;
        c.check_same("the sample count", self.train.source().len() as u64)?;
        c.check_same("the seed", config.seed)?;
        c.check_same(
            "the batches per epoch",
            self.train.batches_per_epoch() as u64,
        )?;
        c.check_same("the epoch count", self.config.epochs)?;
        // What decides which collective calls the loop makes, and when.
        c.check_same("--log-every", self.config.log_every)?;
        c.check_same("--max-steps", self.config.max_steps.unwrap_or(u64::MAX))?;
        c.check_same(
            "writing checkpoints",
            self.config.checkpoint.is_some() as u64,
        )?;
        c.check_same("having validation data", self.val.is_some() as u64)?;
        if c.world() > 1 {
            let fingerprint = weights_fingerprint(&self.model)?;
            c.check_same("the initial weights (a fingerprint)", fingerprint)?;
        }
        self.collective = c;
        Ok(self)
    }

    /// The model being trained (its weights: [`Model::params_to_host`]).
    pub fn model(&self) -> &Model<B> {
        &self.model
    }

    /// This process's rank in the run (0 in a single process).
    pub fn rank(&self) -> usize {
        self.collective.rank()
    }

    /// Number of processes training together.
    pub fn world(&self) -> usize {
        self.collective.world()
    }

    /// Feeds batches through `feed` (e.g. the CUDA upload stage) instead of the host path.
    pub fn with_feed(mut self, feed: Box<dyn BatchFeed<B>>) -> Self {
        self.feed = feed;
        self
    }

    /// What a step's data wait covers with this trainer's feed, in words.
    pub fn wait_covers(&self) -> &'static str {
        self.feed.wait_covers()
    }

    /// Trains until every epoch is done or `max_steps` is reached.
    pub fn run(&mut self, obs: &mut dyn Observer) -> Result<Stop, TrainError> {
        let Self {
            model,
            optimizer,
            train,
            val,
            config,
            position,
            history,
            feed,
            resume,
            collective,
        } = self;
        let coll = collective.as_ref();
        let distributed = coll.world() > 1;
        let writes = coll.rank() == 0;
        let backend = model.backend().clone();
        let log_every = config.log_every.max(1);
        while position.epoch < config.epochs {
            // A fresh epoch, or the rest of the one a checkpoint stopped in.
            let mut batches = match resume.take() {
                Some(state) => train.resume(&state)?,
                None => train.epoch(position.epoch),
            };
            position.loader = Some(batches.state());
            obs.epoch_start(position.epoch, batches.len(), batches.state().next_batch);
            loop {
                if config.max_steps.is_some_and(|m| position.step >= m) {
                    if let Some(path) = &config.checkpoint {
                        if distributed {
                            // Rank 0 saves the whole run's state: the other ranks' share
                            // of the running sums and batch-norm statistics too.
                            take_stats(model, position, history, config, coll)?;
                            average_state(model, coll)?;
                        }
                        if writes {
                            write_checkpoint(path, model, optimizer, position, config, history)?;
                        }
                    }
                    return Ok(Stop::MaxSteps);
                }
                let t0 = Instant::now();
                let Some(batch) = batches.next() else { break };
                let batch = batch?;
                let n = batch.len();
                // On CUDA: the upload of this batch, overlapping the previous step when
                // the feed is asynchronous.
                feed.put(batch)?;
                let t1 = Instant::now();
                feed.forward_backward(model)?;
                if distributed {
                    // On a device that runs behind the host, wait for the backward here,
                    // so that the exchange's time below is the exchange's (and the wait
                    // for slower ranks), not the rest of this rank's backward.
                    backend.synchronize().map_err(ModelError::from)?;
                }
                let t2 = Instant::now();
                if distributed {
                    coll.all_reduce_mean(&backend, &mut model.grads)?;
                }
                let t3 = Instant::now();
                optimizer.step(model, config.schedule.lr(position.step))?;
                feed.end_step(model)?;
                let t4 = Instant::now();

                position.step += 1;
                position.loader = Some(batches.state());
                let time = StepTime {
                    step: position.step,
                    count: 1,
                    samples: n as u64,
                    wait: (t1 - t0).as_secs_f32(),
                    compute: ((t2 - t1) + (t4 - t3)).as_secs_f32(),
                    comm: (t3 - t2).as_secs_f32(),
                };
                position.wait_seconds += (t1 - t0).as_secs_f64();
                position.train_seconds += (t4 - t0).as_secs_f64();
                history.push_step(time);
                let logged = if position.step % log_every == 0 {
                    take_stats(model, position, history, config, coll)?
                } else {
                    None
                };
                obs.step(&time, logged.as_ref());
            }
            drop(batches);
            // The next epoch from its start (its own plan, whatever this one was).
            let next_state = train.state_at(position.epoch + 1, 0);
            // The epoch's last partial logging window.
            take_stats(model, position, history, config, coll)?;
            if distributed {
                average_state(model, coll)?;
                // Every rank applies the same averaged gradients to the same weights, so
                // the weights agree to the bit. A difference is a bug (in an engine or in
                // this loop) that would otherwise grow silently: stop and say so.
                let fingerprint = weights_fingerprint(model)?;
                let what = format!(
                    "the weights after epoch {} (a fingerprint)",
                    position.epoch + 1
                );
                coll.check_same(&what, fingerprint)?;
            }

            obs.eval_start(position.epoch);
            let t = Instant::now();
            let val_stats = match val.as_mut() {
                Some(v) => Some(evaluate(model, feed.as_mut(), v, coll)?),
                None => None,
            };
            let record = EpochRecord {
                epoch: position.epoch,
                train_loss: position.loss_sum / position.samples.max(1) as f64,
                train_accuracy: position.correct / position.samples.max(1) as f64,
                samples: position.samples,
                val: val_stats,
                train_seconds: position.train_seconds,
                wait_seconds: position.wait_seconds,
                eval_seconds: t.elapsed().as_secs_f64(),
            };
            obs.epoch_end(&record);
            history.epochs.push(record);
            *position = Position {
                step: position.step,
                epoch: position.epoch + 1,
                loader: Some(next_state),
                ..Position::default()
            };
            if let Some(path) = config.checkpoint.as_ref().filter(|_| writes) {
                write_checkpoint(path, model, optimizer, position, config, history)?;
            }
        }
        Ok(Stop::Finished)
    }

    /// Loss and accuracy of the current weights on the validation loader.
    pub fn evaluate(&mut self) -> Result<Option<Stats>, TrainError> {
        match self.val.as_mut() {
            Some(v) => Ok(Some(evaluate(
                &mut self.model,
                self.feed.as_mut(),
                v,
                self.collective.as_ref(),
            )?)),
            None => Ok(None),
        }
    }
}

/// Reads the training sums since the last read (one host sync), adds them to the
/// epoch's, and logs them. None when no step ran since the last read. In a
/// data-parallel run the sums are those of all ranks (every rank calls this at the
/// same steps), so every rank holds the same running totals.
fn take_stats<B: Backend + Clone + 'static>(
    model: &mut Model<B>,
    position: &mut Position,
    history: &mut History,
    config: &TrainConfig,
    coll: &dyn Collective<B>,
) -> Result<Option<LogPoint>, TrainError> {
    let mut s = model.take_train_stats()?;
    if coll.world() > 1 {
        s = sum_stats(s, coll)?;
    }
    if s.samples == 0 {
        return Ok(None);
    }
    position.loss_sum += s.loss as f64 * s.samples as f64;
    position.correct += s.accuracy as f64 * s.samples as f64;
    position.samples += s.samples;
    let point = LogPoint {
        step: position.step,
        epoch: position.epoch,
        loss: s.loss,
        accuracy: s.accuracy,
        lr: config.schedule.lr(position.step.saturating_sub(1)),
    };
    history.log.push(point);
    Ok(Some(point))
}

/// One pass over `loader`'s first epoch in eval mode, through the run's feed; in a
/// data-parallel run each rank evaluates its shard and the sums are added up.
fn evaluate<B: Backend + Clone + 'static>(
    model: &mut Model<B>,
    feed: &mut dyn BatchFeed<B>,
    loader: &mut Loader,
    coll: &dyn Collective<B>,
) -> Result<Stats, TrainError> {
    for batch in loader.epoch(0) {
        feed.put(batch?)?;
        feed.evaluate(model)?;
    }
    // Taken before the stats, which would otherwise score this rank's alone.
    let scores = model.take_eval_scores();
    let mut s = model.take_eval_stats()?;
    if coll.world() > 1 {
        s = sum_stats(s, coll)?;
    }
    if let Some(scores) = scores {
        let all = if coll.world() > 1 {
            gather_scores(scores, coll)?
        } else {
            scores
        };
        s.labels = (!all.is_empty()).then(|| all.metrics());
    }
    Ok(s)
}

/// Every rank's multi-label scores, in rank order, on every rank: the ranking metrics
/// need all of them. Two sums: the ranks' sample counts, then a buffer in which each
/// rank fills its own part and leaves the others' zero.
fn gather_scores<B: Backend>(
    mine: LabelScores,
    coll: &dyn Collective<B>,
) -> Result<LabelScores, TrainError> {
    let (rank, k) = (coll.rank(), mine.classes());
    let mut counts = vec![0.0; coll.world()];
    counts[rank] = mine.len() as f64;
    coll.all_reduce_sum(&mut counts)?;
    let total = counts.iter().sum::<f64>() as usize;
    let before = counts[..rank].iter().sum::<f64>() as usize;
    // Logits first, then tags as 0/1; f32 values and small integers are exact in f64,
    // and adding zeros keeps them so.
    let mut buf = vec![0.0f64; 2 * total * k];
    let (logits, tags) = buf.split_at_mut(total * k);
    let at = before * k..(before + mine.len()) * k;
    for (d, &z) in logits[at.clone()].iter_mut().zip(mine.logits()) {
        *d = f64::from(z);
    }
    for (d, &t) in tags[at].iter_mut().zip(mine.tags()) {
        *d = f64::from(u8::from(t));
    }
    coll.all_reduce_sum(&mut buf)?;
    let (logits, tags) = buf.split_at(total * k);
    let mut all = LabelScores::new(k);
    let logits: Vec<f32> = logits.iter().map(|&z| z as f32).collect();
    let tags: Vec<bool> = tags.iter().map(|&t| t != 0.0).collect();
    all.push_rows(&logits, &tags);
    Ok(all)
}

/// Mean loss and accuracy over the samples of every rank.
fn sum_stats<B: Backend>(s: Stats, coll: &dyn Collective<B>) -> Result<Stats, TrainError> {
    let n = s.samples as f64;
    // A rank with no samples (a validation shard can be empty) adds nothing; its
    // means are not numbers.
    let mut sums = if s.samples == 0 {
        [0.0; 3]
    } else {
        [s.loss as f64 * n, s.accuracy as f64 * n, n]
    };
    coll.all_reduce_sum(&mut sums)?;
    let n = sums[2].max(1.0);
    Ok(Stats {
        loss: (sums[0] / n) as f32,
        accuracy: (sums[1] / n) as f32,
        samples: sums[2] as u64,
        labels: None,
    })
}

/// A fingerprint of the weights (xxh3 of their bytes), for ranks to compare.
fn weights_fingerprint<B: Backend + Clone + 'static>(model: &Model<B>) -> Result<u64, TrainError> {
    let bytes: Vec<u8> = model
        .params_to_host()?
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    Ok(xxhash_rust::xxh3::xxh3_64(&bytes))
}

/// Averages the non-trained state (batch-norm running statistics) over the ranks:
/// each rank's follows its own shard, and evaluation and checkpoints need one.
fn average_state<B: Backend + Clone + 'static>(
    model: &mut Model<B>,
    coll: &dyn Collective<B>,
) -> Result<(), TrainError> {
    if !model.state.is_empty() {
        let backend = model.backend().clone();
        coll.all_reduce_mean(&backend, &mut model.state)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier, Mutex};

    use super::*;
    use crate::backend::CpuBackend;
    use crate::collective::CollectiveError;
    use crate::tensor::Tensor;

    /// Ranks as threads: sums through shared memory, in step with a barrier.
    struct Threads {
        rank: usize,
        world: usize,
        sum: Arc<Mutex<Vec<f64>>>,
        barrier: Arc<Barrier>,
    }

    impl Collective<CpuBackend> for Threads {
        fn rank(&self) -> usize {
            self.rank
        }
        fn world(&self) -> usize {
            self.world
        }
        fn engine(&self) -> &'static str {
            "threads"
        }
        fn all_reduce_mean(
            &self,
            _: &CpuBackend,
            _: &mut Tensor<CpuBackend>,
        ) -> Result<(), CollectiveError> {
            unreachable!("gathering scores sums plain numbers")
        }
        fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError> {
            {
                let mut s = self.sum.lock().unwrap();
                s.resize(vals.len(), 0.0);
                s.iter_mut().zip(vals.iter()).for_each(|(s, v)| *s += v);
            }
            self.barrier.wait();
            vals.copy_from_slice(&self.sum.lock().unwrap()[..vals.len()]);
            // Everyone has read the sum before the next call starts one.
            if self.barrier.wait().is_leader() {
                self.sum.lock().unwrap().clear();
            }
            self.barrier.wait();
            Ok(())
        }
    }

    #[test]
    fn every_rank_gathers_all_scores_in_rank_order() {
        // Three ranks holding 2, 0 (an empty validation shard) and 1 samples of 2 classes.
        let parts: Vec<(Vec<f32>, Vec<bool>)> = vec![
            (vec![1.5, -2.0, 0.25, 3.0], vec![true, false, false, true]),
            (vec![], vec![]),
            (vec![-0.5, 7.0], vec![false, true]),
        ];
        let (sum, barrier) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Barrier::new(3)));
        let gathered: Vec<LabelScores> = std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .enumerate()
                .map(|(rank, (logits, tags))| {
                    let coll = Threads {
                        rank,
                        world: 3,
                        sum: sum.clone(),
                        barrier: barrier.clone(),
                    };
                    s.spawn(move || {
                        let mut mine = LabelScores::new(2);
                        mine.push_rows(logits, tags);
                        gather_scores(mine, &coll).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut want = LabelScores::new(2);
        for (logits, tags) in &parts {
            want.push_rows(logits, tags);
        }
        assert_eq!(want.len(), 3);
        for g in &gathered {
            assert_eq!(g, &want);
        }
    }
}
