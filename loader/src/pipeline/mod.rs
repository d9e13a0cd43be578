//! The loader: one switch between synchronous and asynchronous reading over the same
//! per-sample work.
//!
//! ```text
//! Sampler -> Plan -> Read (tokio, io_depth in flight) --flume--> decode+augment workers
//!   (write into batch slots) -> collate in order -> prefetch queue -> consumer
//! ```
//!
//! In [`Mode::Sync`] the consumer's own thread reads, decodes and collates each batch
//! when asked: simple, and the data time is plain to see. In [`Mode::Async`] the stages
//! run on their own threads and keep `prefetch` batches ready, so batch k+1 is made
//! while batch k is used; the pipeline runs on into the next epoch so there is no
//! refill pause. Both produce the same bytes, because every random choice is seeded by
//! (seed, epoch, index).

mod async_;
mod cursor;
mod sync;
pub mod tune;
pub(crate) mod work;

use std::sync::Arc;

use stoker_augment::Pipeline;

use crate::config::{LoaderConfig, Mode, OnError};
use crate::metrics::{Counters, Metrics};
use crate::plan::Plan;
use crate::pool::Pool;
use crate::sampler::{Sampler, ShardPolicy};
use crate::source::Source;
use crate::state::LoaderState;
use crate::trace::Trace;
use crate::{Batch, LoaderError};

pub use cursor::{Cursor, Next};

/// What every stage of one loader shares.
pub(crate) struct Shared {
    pub source: Arc<dyn Source>,
    pub transform: Pipeline,
    pub sampler: Sampler,
    pub seed: u64,
    pub batch_size: usize,
    pub drop_last: bool,
    pub on_error: OnError,
    /// (height, width, channels) of every output image.
    pub shape: (usize, usize, usize),
    pub counters: Counters,
    pub trace: Option<Arc<Trace>>,
    /// What `workers = auto` chose, when it is on.
    pub auto: Option<Arc<tune::AutoState>>,
    /// MixUp/CutMix, and the class count of the soft labels.
    pub mix: Option<(crate::Mix, usize)>,
}

impl Shared {
    pub fn slot_bytes(&self) -> usize {
        self.shape.0 * self.shape.1 * self.shape.2
    }

    pub fn plan(&self, epoch: u64) -> Plan {
        Plan::with_shards(
            &self.sampler,
            self.source.len(),
            self.source.shards(),
            epoch,
            self.batch_size,
            self.drop_last,
        )
    }
}

/// A data loader over one source. See the crate docs for an example.
pub struct Loader {
    shared: Arc<Shared>,
    config: LoaderConfig,
    pool: Pool,
    sync: sync::SyncState,
    running: Option<async_::Running>,
    starts: usize,
}

impl Loader {
    /// Checks the configuration, looks at the first sample to learn the image size,
    /// and sizes the buffer pool. Nothing runs until an epoch is asked for.
    pub fn new(source: Arc<dyn Source>, config: LoaderConfig) -> Result<Loader, LoaderError> {
        let cfg = &config;
        cfg.validate()?;
        let sampler = cfg.sampler();
        if source.is_empty() {
            return Err(LoaderError::Config("the data set has no samples".into()));
        }
        let per_rank = sampler.shard_len(source.len());
        if cfg.drop_last && per_rank < cfg.batch_size {
            return Err(LoaderError::Config(format!(
                "drop_last with batch size {} leaves no batch: this shard has {per_rank} samples",
                cfg.batch_size
            )));
        }
        // An exact shard may be empty (fewer samples than ranks): that rank evaluates
        // nothing. Training shards may not: every rank must take steps.
        if per_rank == 0 && cfg.shard_policy != ShardPolicy::Exact {
            return Err(LoaderError::Config(format!(
                "{} samples cannot be shared among {} ranks with drop",
                source.len(),
                cfg.world
            )));
        }
        // The first sample that reads fixes the batch's image size; under `skip`, bad
        // samples at the front must not make the whole data set unusable.
        let tries = match cfg.on_error {
            OnError::Fail => 1,
            OnError::Skip => source.len().min(64),
        };
        let mut probed = work::probe_shape(source.as_ref(), 0, cfg.max_pixels);
        for index in 1..tries {
            if probed.is_ok() {
                break;
            }
            probed = work::probe_shape(source.as_ref(), index, cfg.max_pixels);
        }
        let (w, h, raw_c) = probed?;
        let (ow, oh) = cfg.transform.output_size(w, h);
        let c = cfg.channels.or(raw_c).unwrap_or(3);
        let shape = (oh, ow, c);
        let pool = Pool::new(cfg.pool_capacity(), cfg.batch_bytes(shape)?);
        let mix = match cfg.mix {
            None => None,
            Some(m) => match source.classes().len() {
                0 | 1 => {
                    return Err(LoaderError::Config(format!(
                        "mix '{m}': soft labels need at least 2 classes, and this data set \
                         has {}",
                        source.classes().len()
                    )))
                }
                k => Some((m, k)),
            },
        };
        let trace = match &cfg.trace {
            Some(path) => Some(Arc::new(Trace::create(path).map_err(|e| {
                LoaderError::Config(format!("trace: cannot create {}: {e}", path.display()))
            })?)),
            None => None,
        };
        let shared = Arc::new(Shared {
            source,
            transform: cfg.transform.clone().with_max_pixels(cfg.max_pixels),
            sampler,
            seed: cfg.seed,
            batch_size: cfg.batch_size,
            drop_last: cfg.drop_last,
            on_error: cfg.on_error,
            shape,
            counters: Counters::default(),
            trace,
            auto: cfg
                .auto_workers
                .filter(|_| cfg.mode == Mode::Async)
                .map(|budget| {
                    let io_cap = cfg.pool_capacity().saturating_mul(cfg.batch_size);
                    Arc::new(tune::AutoState::new(budget, cfg.io_depth, io_cap))
                }),
            mix,
        });
        Ok(Loader {
            shared,
            config,
            pool,
            sync: sync::SyncState::default(),
            running: None,
            starts: 0,
        })
    }

    /// The batches of epoch `epoch`, from the first.
    pub fn epoch(&mut self, epoch: u64) -> Epoch<'_> {
        let cursor = self.start_epoch(epoch);
        Epoch {
            loader: self,
            cursor,
        }
    }

    /// The rest of the epoch that `state` stopped in.
    pub fn resume(&mut self, state: &LoaderState) -> Result<Epoch<'_>, LoaderError> {
        let cursor = self.resume_cursor(state)?;
        Ok(Epoch {
            loader: self,
            cursor,
        })
    }

    /// The state of this loader at batch `next_batch` of `epoch`, as
    /// [`Epoch::state`] would report it there.
    pub fn state_at(&self, epoch: u64, next_batch: usize) -> LoaderState {
        LoaderState {
            seed: self.config.seed,
            epoch,
            next_batch,
            batch_size: self.config.batch_size,
            samples: self.shared.source.len(),
            rank: self.config.rank,
            world: self.config.world,
        }
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    pub fn source(&self) -> &Arc<dyn Source> {
        &self.shared.source
    }

    /// Batches in every epoch (the same for all epochs).
    pub fn batches_per_epoch(&self) -> usize {
        self.shared.plan(0).len()
    }

    /// Samples per epoch on this rank (before any are skipped).
    pub fn samples_per_epoch(&self) -> usize {
        self.shared.plan(0).samples()
    }

    /// (height, width, channels) of every image in a batch.
    pub fn image_shape(&self) -> (usize, usize, usize) {
        self.shared.shape
    }

    /// Totals since the loader was made.
    pub fn metrics(&self) -> Metrics {
        self.shared.counters.snapshot()
    }

    /// The most batch-buffer memory the loader will hold: pool capacity times buffer
    /// size (the consumer holding every buffer at once may add to it; see
    /// [`Loader::pool_grown`]).
    pub fn memory_bound_bytes(&self) -> usize {
        self.pool.capacity() * self.pool.buf_bytes()
    }

    /// The most batch-buffer memory held at once so far.
    pub fn peak_buffer_bytes(&self) -> usize {
        self.pool.peak_bytes()
    }

    /// Batch buffers allocated so far.
    pub fn buffers_allocated(&self) -> usize {
        self.pool.allocated()
    }

    /// Batch buffers the consumer holds now (delivered batches not yet dropped).
    pub fn buffers_held(&self) -> usize {
        self.pool.held_by_consumer()
    }

    /// Times the pool grew past its bound because the consumer held every buffer.
    pub fn pool_grown(&self) -> usize {
        self.pool.grown()
    }

    /// The trace recorded so far, when `trace` was set.
    pub fn trace(&self) -> Option<&Trace> {
        self.shared.trace.as_deref()
    }

    /// How many times an async pipeline was started. Consecutive epochs reuse the
    /// running one (it is already preparing the next epoch); a resume elsewhere or an
    /// error starts a new one.
    pub fn pipeline_starts(&self) -> usize {
        self.starts
    }

    /// What `auto_workers` chose: `None` unless it is on (async mode).
    pub fn auto_workers(&self) -> Option<&tune::AutoState> {
        self.shared.auto.as_deref()
    }

    /// Number of live pipeline threads (0 in sync mode or before the first epoch).
    pub fn threads(&self) -> usize {
        self.running.as_ref().map_or(0, |r| r.threads())
    }
}

/// The batches of one epoch, in order. Also reports where it stands, for resume.
pub struct Epoch<'a> {
    loader: &'a mut Loader,
    cursor: Cursor,
}

impl Epoch<'_> {
    /// Batches in the whole epoch.
    pub fn len(&self) -> usize {
        self.cursor.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursor.is_empty()
    }

    /// The state after the batches delivered so far: resuming it yields the rest.
    pub fn state(&self) -> LoaderState {
        self.loader.cursor_state(&self.cursor)
    }

    /// The loader's totals so far.
    pub fn metrics(&self) -> Metrics {
        self.loader.metrics()
    }

    /// The loader's trace, when `trace` was set (to add the consumer's own spans).
    pub fn trace(&self) -> Option<&Trace> {
        self.loader.trace()
    }
}

impl Iterator for Epoch<'_> {
    type Item = Result<Batch, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.loader.next_batch(&mut self.cursor)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.cursor.remaining();
        (n, Some(n))
    }
}
