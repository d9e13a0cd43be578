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
mod cache;
mod cursor;
mod fields;
mod plan_state;
mod sync;
pub mod tune;
pub(crate) mod work;

use std::sync::Arc;

use stoker_augment::Pipeline;

use crate::config::setting;
use crate::config::{LoaderConfig, Mode, OnError};
use crate::metrics::{Counters, Metrics};
use crate::pool::Pool;
use crate::sample::Field;
use crate::sampler::{Sampler, ShardPolicy};
use crate::source::Source;
use crate::state::LoaderState;
use crate::trace::Trace;
use crate::{Batch, LoaderError, Setting};

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
    pub mixup: Option<(crate::Mix, usize)>,
    /// Fields beyond image and class; `None` for classification, whose samples
    /// take the path they always took.
    pub fields: Option<fields::FieldPlan>,
    /// The source's fingerprint (for states), computed when first asked for.
    pub fingerprint: std::sync::OnceLock<u64>,
    /// The caller's own steps (with any, `fields` is set: see `field_plan`).
    pub steps: Vec<crate::step::UserStep>,
    /// A resumed epoch's plan, and a mixture's.
    pub(crate) kept_plans: plan_state::KeptPlans,
    /// Samples kept decoded after their first decode (`decoded_cache`).
    pub(crate) cache: Option<cache::DecodedCache>,
}

impl Shared {
    pub fn slot_bytes(&self) -> usize {
        self.shape.0 * self.shape.1 * self.shape.2
    }

    /// Bytes of one sample's masks: its class map and room for its instance masks (0
    /// without masks).
    pub fn mask_bytes(&self) -> usize {
        self.fields
            .as_ref()
            .map_or(0, fields::FieldPlan::mask_bytes)
    }

    /// Where the masks start in a batch buffer: after every image slot.
    pub fn masks_offset(&self) -> usize {
        self.batch_size * self.slot_bytes()
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
    /// The process that made the pipeline and pool: a forked child has their memory
    /// but not their threads (see `Loader::after_fork`).
    pid: u32,
}

impl Loader {
    /// Checks the configuration, looks at the first sample to learn the image size,
    /// and sizes the buffer pool. Nothing runs until an epoch is asked for.
    pub fn new(source: Arc<dyn Source>, config: LoaderConfig) -> Result<Loader, LoaderError> {
        let cfg = &config;
        cfg.validate()?;
        let sampler = cfg.sampler();
        if source.is_empty() {
            return Err(LoaderError::NoSamples);
        }
        if let Some(mix) = source.mixture() {
            plan_state::check_never_steps(mix, cfg.batch_size, cfg.world_size)?;
        }
        // A mixture's epochs are as long as its stop rule makes them (checked below).
        let per_rank = match source.mixture() {
            Some(_) => cfg.batch_size,
            None => sampler.shard_len(source.len()),
        };
        if cfg.drop_last && per_rank < cfg.batch_size {
            return Err(setting(
                Setting::DropLast,
                format!(
                "drop_last with batch size {} leaves no batch: this shard has {per_rank} samples",
                cfg.batch_size
            ),
            ));
        }
        // An exact shard may be empty (fewer samples than ranks): that rank evaluates
        // nothing. Training shards may not: every rank must take steps.
        if per_rank == 0 && cfg.shard_policy != ShardPolicy::Exact {
            return Err(setting(
                Setting::ShardPolicy,
                format!(
                    "{} samples cannot be shared among {} ranks with drop",
                    source.len(),
                    cfg.world_size
                ),
            ));
        }
        let (w, h, raw_c) = first_image_size(source.as_ref(), cfg)?;
        let (ow, oh) = cfg.transform.output_size(w, h);
        // Under `skip` a part whose first image is odd may still be usable.
        if let (Some(mix), OnError::Fail) = (source.mixture(), cfg.on_error) {
            one_size_for_all_parts(source.as_ref(), mix, cfg, (ow, oh))?;
        }
        let c = cfg.channels.or(raw_c).unwrap_or(3);
        let shape = (oh, ow, c);
        let mixup = match cfg.mixup {
            None => None,
            // Without a class per sample every label is 0, and every soft label would
            // be all on class 0: nothing to learn from.
            Some(m) if !source.fields().contains(Field::Class) => {
                return Err(setting(
                    Setting::Mixup,
                    format!(
                        "mixup '{m}' mixes the samples' classes, and this data set has no class \
                     per sample (its fields: {}): leave mixing out",
                        source.fields()
                    ),
                ))
            }
            Some(m) => match source.classes().len() {
                0 | 1 => {
                    return Err(setting(
                        Setting::Mixup,
                        format!(
                            "mixup '{m}': soft labels need at least 2 classes, and this data set \
                         has {}",
                            source.classes().len()
                        ),
                    ))
                }
                k => Some((m, k)),
            },
        };
        let fields = field_plan(source.as_ref(), cfg, (oh, ow))?;
        if let (Some((m, _)), false) = (&mixup, cfg.steps.is_empty()) {
            // A step may add arrays or change classes, which mixing has no rule for.
            return Err(setting(
                Setting::Mixup,
                format!(
                    "mixup '{m}' and user steps cannot be combined yet: mix in the step, or \
                 leave mixing out"
                ),
            ));
        }
        if let (Some((m, _)), Some(plan)) = (&mixup, &fields) {
            // Mixing blends images and classes; boxes, masks and captions have no
            // blend that a loss could use, so the two are not combined.
            return Err(setting(
                Setting::Mixup,
                format!(
                    "mixup '{m}' mixes classes, and this loader's batches carry {}: pick \
                 fields=[\"image\", \"label\"] to mix, or leave mixing out",
                    plan.fields
                ),
            ));
        }
        // A mask is one more byte per pixel in the same buffer, and each place for an
        // instance mask one more.
        let map = usize::from(fields.as_ref().is_some_and(|f| f.mask.is_some()));
        let instances = fields.as_ref().and_then(|f| f.masks).map_or(0, |(k, _)| k);
        let with_masks = (oh, ow, c + map + instances);
        let bytes = cfg
            .batch_bytes(with_masks)
            .map_err(|e| match (instances, e) {
                (0, e) => e,
                (k, LoaderError::Setting(e)) => setting(
                    e.setting,
                    format!(
                        "{}; each image carries up to {k} instance masks of {oh}x{ow} \
                     (max_instances)",
                        e.problem
                    ),
                ),
                (_, e) => e,
            })?;
        let pool = Pool::new(cfg.pool_capacity(), bytes);
        // batch_bytes checked that the pool's bytes fit in the bound.
        let cache = cfg
            .decoded_cache_bytes(pool.capacity() * pool.buf_bytes())?
            .map(|bytes| cache::DecodedCache::new(source.len(), bytes));
        let trace = match &cfg.trace {
            Some(path) => Some(Arc::new(Trace::create(path).map_err(|source| {
                LoaderError::Trace {
                    path: path.clone(),
                    source,
                }
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
                .workers
                .budget()
                .filter(|_| cfg.mode == Mode::Async)
                .map(|budget| {
                    let io_cap = cfg.pool_capacity().saturating_mul(cfg.batch_size);
                    Arc::new(tune::AutoState::new(budget, cfg.io_depth, io_cap))
                }),
            mixup,
            fields,
            fingerprint: std::sync::OnceLock::new(),
            steps: cfg.steps.clone(),
            kept_plans: plan_state::KeptPlans::default(),
            cache,
        });
        if shared.source.mixture().is_some() && shared.plan(0).is_empty() {
            return Err(setting(
                Setting::Rank,
                format!(
                    "the mixture's first epoch gives rank {} of {} no batch",
                    cfg.rank, cfg.world_size
                ),
            ));
        }
        Ok(Loader {
            shared,
            config,
            pool,
            sync: sync::SyncState::default(),
            running: None,
            starts: 0,
            pid: std::process::id(),
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
        let base = self.plain_state(epoch, next_batch);
        if self.shared.plan_in_state(epoch) {
            let plan = self.shared.plan(epoch);
            return self.shared.state_in(&plan, next_batch, base);
        }
        base
    }

    /// The state's fields that every plan has.
    fn plain_state(&self, epoch: u64, next_batch: usize) -> LoaderState {
        LoaderState {
            seed: self.config.seed,
            epoch,
            next_batch,
            batch_size: self.config.batch_size,
            samples: self.shared.source.len(),
            rank: self.config.rank,
            world_size: self.config.world_size,
            fingerprint: Some(self.fingerprint()),
            elastic: None,
            mixture: None,
        }
    }

    /// The source's fingerprint ([`crate::state::fingerprint`]), which states carry.
    pub fn fingerprint(&self) -> u64 {
        *self
            .shared
            .fingerprint
            .get_or_init(|| crate::state::fingerprint(self.shared.source.as_ref()))
    }

    /// The configuration the loader was built with.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The source the loader reads.
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

    /// The fields batches carry: image and class for classification.
    pub fn fields(&self) -> crate::Fields {
        self.shared
            .fields
            .as_ref()
            .map_or(crate::Fields::CLASSIFICATION, |f| f.fields)
    }

    /// Totals since the loader was made.
    pub fn metrics(&self) -> Metrics {
        let mut m = self.shared.counters.snapshot();
        m.decoded_cache_bytes = self.shared.cache.as_ref().map_or(0, |c| c.held());
        m
    }

    /// The most bytes the decoded cache may hold: `None` without one.
    pub fn decoded_cache_capacity(&self) -> Option<u64> {
        self.shared.cache.as_ref().map(|c| c.capacity())
    }

    /// The most memory the loader's buffers will hold: pool capacity times buffer
    /// size, plus the decoded cache's bound when it has one (the consumer holding every
    /// buffer at once may add to it; see [`Loader::pool_grown`]).
    pub fn memory_bound_bytes(&self) -> usize {
        let cache = self.decoded_cache_capacity().unwrap_or(0) as usize;
        self.pool.capacity() * self.pool.buf_bytes() + cache
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

    /// What [`Workers::Auto`](crate::Workers::Auto) chose: `None` unless it is on
    /// (async mode).
    pub fn auto_workers(&self) -> Option<&tune::AutoState> {
        self.shared.auto.as_deref()
    }

    /// Batches made (or a failed batch's error) waiting in the async prefetch queue
    /// now, 0 in sync mode or while no pipeline runs: how far the pipeline is ahead of
    /// the consumer, for a monitor, or for a test that asks for a batch only once the
    /// queue is full (a slow consumer without a timer).
    pub fn batches_ready(&self) -> usize {
        if self.pid != std::process::id() {
            // A forked child: the queue belongs to the parent's threads.
            return 0;
        }
        self.running.as_ref().map_or(0, |r| r.batches_ready())
    }

    /// Number of live pipeline threads (0 in sync mode or before the first epoch).
    pub fn threads(&self) -> usize {
        if self.pid != std::process::id() {
            // A forked child: the pipeline's threads stayed in the parent.
            return 0;
        }
        self.running.as_ref().map_or(0, |r| r.threads())
    }

    /// In a process forked from the one that ran this loader, the pipeline's threads
    /// did not come along (fork copies only the calling thread), and any lock they
    /// held stays held: the dead pipeline is forgotten without being joined, and a
    /// fresh buffer pool replaces the old one (whose buffers the dead threads hold).
    /// The next batch then starts a new pipeline in this process, at the same place.
    fn after_fork(&mut self) {
        let pid = std::process::id();
        if pid == self.pid {
            return;
        }
        self.pid = pid;
        // Running's drop sees the other pid and leaks instead of joining.
        self.running = None;
        self.pool = Pool::new(self.pool.capacity(), self.pool.buf_bytes());
        self.sync = sync::SyncState::default();
    }
}

/// (width, height, channels of a raw record) of the first image of `source` that
/// reads, as [`Loader::new`] learns it: the image size its batches take before the
/// transforms (`cfg.transform.output_size` gives the size after them). Under
/// [`OnError::Skip`] up to 64 unreadable samples at the front are passed over, so that
/// they do not make the whole data set unusable.
pub fn first_image_size(
    source: &dyn Source,
    cfg: &LoaderConfig,
) -> Result<(usize, usize, Option<usize>), LoaderError> {
    let tries = match cfg.on_error {
        OnError::Fail => 1,
        OnError::Skip => source.len().min(64),
    };
    let mut probed = work::probe_shape(source, 0, cfg.max_pixels);
    for index in 1..tries {
        if probed.is_ok() {
            break;
        }
        probed = work::probe_shape(source, index, cfg.max_pixels);
    }
    probed
}

/// What the loader does with the source's fields beyond image and class: `None` when
/// batches carry none (classification), else the plan. Asking for a field the source
/// does not have is an error that lists what it has.
/// Each data set of a mixture must give images of the batch's size after the
/// transforms (judged by its first image): a set of another size fails every one of
/// its samples, which under `fail` would show only when the first of them is drawn. A
/// part whose first sample cannot be probed is left to that sample's own error.
fn one_size_for_all_parts(
    source: &dyn Source,
    mix: &crate::Mixture,
    cfg: &LoaderConfig,
    want: (usize, usize),
) -> Result<(), LoaderError> {
    for k in 1..mix.parts().len() {
        let index = mix.global(k, 0);
        let Ok((w, h, _)) = work::probe_shape(source, index, cfg.max_pixels) else {
            continue;
        };
        let got = cfg.transform.output_size(w, h);
        if got != want {
            return Err(setting(
                Setting::Transform,
                format!(
                    "data set {} of the mixture ({}) gives {}x{} images after the transforms, \
                 and the first gives {}x{}: images of different sizes need a transform \
                 that ends in a fixed size (resize:, center:, rrc:)",
                    k + 1,
                    source.describe(index),
                    got.0,
                    got.1,
                    want.0,
                    want.1
                ),
            ));
        }
    }
    Ok(())
}

fn field_plan(
    source: &dyn Source,
    cfg: &LoaderConfig,
    (oh, ow): (usize, usize),
) -> Result<Option<fields::FieldPlan>, LoaderError> {
    use crate::sample::Fields;
    let has = source.fields();
    let wanted = match cfg.fields {
        // Instance masks take max_instances x H x W bytes a sample: they come only
        // when asked for by name.
        None => has.without(Field::Masks),
        Some(want) => {
            if let Some(missing) = want.iter().find(|f| !has.contains(*f)) {
                // `masks` once meant `mask`: say which is which to those who meant that.
                let hint = if missing == Field::Masks {
                    format!(
                        "; 'masks' is one binary mask per instance, and 'mask' one class map \
                         per image{}",
                        if has.contains(Field::Mask) {
                            " (this data set has 'mask': ask for it by that name)"
                        } else {
                            ""
                        }
                    )
                } else {
                    String::new()
                };
                return Err(setting(
                    Setting::Fields,
                    format!("the data set has no field '{missing}' (it has: {has}){hint}"),
                ));
            }
            want.with(Field::Image)
        }
    };
    // A user step's output travels with the fields, so a classification loader
    // with a step takes the fields path (and only then). A data set without a class
    // per sample (captions, COCO) takes it too, even for images alone: plain
    // classification batches would label every sample 0.
    if wanted.is_classification() && cfg.steps.is_empty() && has.contains(Field::Class) {
        return Ok(None);
    }
    if wanted.contains(Field::Masks) && !wanted.contains(Field::Boxes) {
        return Err(setting(
            Setting::Fields,
            "the masks field is one mask per box, in the boxes' order: ask for boxes too \
             (fields image,boxes,masks), or for mask, one class map per image"
                .into(),
        ));
    }
    let schema = source.keypoint_schema().cloned().unwrap_or_default();
    if wanted.contains(Field::Keypoints) && schema.is_empty() {
        return Err(setting(
            Setting::Fields,
            "the data set has keypoints but does not say how many points an instance has".into(),
        ));
    }
    let fields: Fields = wanted;
    // Instance masks take room in the batch buffer for every box kept: they bound the
    // boxes, by default to DEFAULT_MASK_INSTANCES.
    let masks = fields.contains(Field::Masks).then(|| {
        let k = cfg
            .max_instances
            .unwrap_or(crate::sample::DEFAULT_MASK_INSTANCES);
        (k, (oh, ow))
    });
    Ok(Some(fields::FieldPlan {
        fields,
        classes: source.classes().len(),
        schema,
        min_box_visibility: cfg.min_box_visibility,
        max_instances: masks.map(|(k, _)| k).or(cfg.max_instances),
        mask: fields.contains(Field::Mask).then_some((oh, ow)),
        masks,
        max_pixels: cfg.max_pixels,
    }))
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

    /// Whether the epoch has no batches at all.
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
        // Under skip, a batch whose samples were all skipped is left out.
        let least = match self.loader.config.on_error {
            OnError::Skip => 0,
            OnError::Fail => n,
        };
        (least, Some(n))
    }
}
