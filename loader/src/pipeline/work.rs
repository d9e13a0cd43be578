//! The per-sample work shared by both modes: read bytes, decode and augment them
//! straight into the sample's batch slot, and finish a batch.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use stoker_augment::{decode, Image, ImageView, SampleRng, Scratch};

use super::cache::{Decoded, DecodedCache, Keep};
use super::fields::FieldScratch;
use super::{OnError, Shared};
use crate::batch::{Batch, Images};
use crate::error::SampleError;
use crate::metrics::add_time;
use crate::mixup::{mix_images, soft_labels};
use crate::pool::PooledBuf;
use crate::sample::{Annotation, SampleFields};
use crate::source::RecordKind;
use crate::step::{collate_extra, step_rng, StepSample};
use crate::LoaderError;

/// A sample as read, ready to decode: which one, and what its source gave.
pub(crate) struct ReadSample<'a> {
    /// The epoch: with the index, it seeds the sample's augmentation.
    pub(crate) epoch: u64,
    /// The sample's index in the source.
    pub(crate) index: usize,
    /// Its bytes as read, or its decoded image from the cache.
    pub(crate) input: Input<'a>,
}

/// Where a sample's image comes from.
pub(crate) enum Input<'a> {
    /// Read from the source just now.
    Read {
        /// Encoded bytes, or a raw record and its shape.
        kind: RecordKind,
        /// The bytes read.
        bytes: &'a [u8],
        /// Its fields beyond image and class, as read.
        ann: &'a Annotation,
    },
    /// Kept by the decoded cache at an earlier decode.
    Cached(&'a Decoded),
}

impl Input<'_> {
    fn ann(&self) -> &Annotation {
        match self {
            Input::Read { ann, .. } => ann,
            Input::Cached(d) => &d.ann,
        }
    }
}

impl Shared {
    pub(crate) fn sample_error(&self, index: usize, source: SampleError) -> LoaderError {
        LoaderError::Sample {
            index,
            what: self.source.describe(index),
            source,
        }
    }

    /// Reads sample `index` into `buf` (and, when the loader carries fields, its
    /// annotation into `ann`), catching a panicking source.
    pub(crate) fn read(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, LoaderError> {
        let t0 = Instant::now();
        let out = catch_unwind(AssertUnwindSafe(|| match &self.fields {
            None => self.source.read(index, buf),
            Some(plan) => self.source.read_sample(index, plan.fields, buf, ann),
        }));
        add_time(&self.counters.read_ns, t0.elapsed());
        self.counters.reads.fetch_add(1, Relaxed);
        if let Some(tr) = &self.trace {
            tr.span("read", t0, Some(serde_json::json!({ "index": index })));
        }
        match out {
            Ok(Ok(kind)) => {
                self.counters
                    .bytes_read
                    .fetch_add(buf.len() as u64, Relaxed);
                Ok(kind)
            }
            Ok(Err(e)) => Err(self.sample_error(index, SampleError::Read(e))),
            Err(p) => Err(LoaderError::from_panic(
                format!("reading {}", self.source.describe(index)),
                p,
            )),
        }
    }

    /// Reads sample `index` through the source's async read (io_depth of these run at
    /// once in the async read stage), timing it like [`read`](Self::read); a panic in
    /// the source becomes [`LoaderError::Panic`].
    pub(crate) async fn read_async(
        self: &Arc<Self>,
        index: usize,
        buf: Vec<u8>,
        ann: Annotation,
    ) -> (Result<RecordKind, LoaderError>, Vec<u8>, Annotation) {
        let t0 = Instant::now();
        // A task of its own, so that a panic in the source is caught as a JoinError.
        let out = match &self.fields {
            None => tokio::spawn(self.source.clone().read_async(index, buf))
                .await
                .map(|(r, buf)| (r, buf, ann)),
            Some(plan) => {
                tokio::spawn(
                    self.source
                        .clone()
                        .read_sample_async(index, plan.fields, buf, ann),
                )
                .await
            }
        };
        add_time(&self.counters.read_ns, t0.elapsed());
        self.counters.reads.fetch_add(1, Relaxed);
        if let Some(tr) = &self.trace {
            tr.span("read", t0, Some(serde_json::json!({ "index": index })));
        }
        match out {
            Ok((Ok(kind), buf, ann)) => {
                self.counters
                    .bytes_read
                    .fetch_add(buf.len() as u64, Relaxed);
                (Ok(kind), buf, ann)
            }
            Ok((Err(e), buf, ann)) => (
                Err(self.sample_error(index, SampleError::Read(e))),
                buf,
                ann,
            ),
            Err(e) if e.is_panic() => (
                Err(LoaderError::from_panic(
                    format!("reading {}", self.source.describe(index)),
                    e.into_panic(),
                )),
                Vec::new(),
                Annotation::default(),
            ),
            Err(e) => (
                Err(LoaderError::ReadTask { source: e }),
                Vec::new(),
                Annotation::default(),
            ),
        }
    }

    /// The decoded cache's entry for sample `index`, counted as a hit or a miss;
    /// `None` without a cache.
    pub(crate) fn lookup(&self, index: usize) -> Option<Arc<Decoded>> {
        let cache = self.cache.as_ref()?;
        let hit = cache.get(index);
        let counter = match hit {
            Some(_) => &self.counters.decoded_cache_hits,
            None => &self.counters.decoded_cache_misses,
        };
        counter.fetch_add(1, Relaxed);
        hit
    }

    /// Decodes and augments one sample into its slot, seeded by (seed, epoch, index);
    /// a cached sample only runs the transforms, and a sample decoded whole is kept
    /// while the decoded cache has room.
    pub(crate) fn decode(
        &self,
        sample: &ReadSample<'_>,
        scratch: &mut Scratch,
        slot: &mut [u8],
    ) -> Result<(), LoaderError> {
        let (epoch, index) = (sample.epoch, sample.index);
        let t0 = Instant::now();
        let mut rng = SampleRng::new(self.seed, epoch, index as u64);
        let c = self.shape.2;
        // Once the cache is full, misses decode as without one (no image to keep).
        let cache = self.cache.as_ref().filter(|cache| {
            let room = cache.has_room();
            if !room && matches!(sample.input, Input::Read { .. }) {
                self.counters.decoded_cache_no_room.fetch_add(1, Relaxed);
            }
            room
        });
        let out = catch_unwind(AssertUnwindSafe(|| match sample.input {
            Input::Cached(d) => self
                .transform
                .run_image(d.view(), &mut rng, scratch, slot)
                .map_err(SampleError::Decode),
            Input::Read {
                kind: RecordKind::Encoded,
                bytes,
                ann,
            } => match cache {
                None => self
                    .transform
                    .run_encoded(bytes, c, &mut rng, scratch, slot)
                    .map_err(SampleError::Decode),
                Some(cache) => {
                    let mut keep = Image::default();
                    let whole = self
                        .transform
                        .run_encoded_keep(bytes, c, &mut rng, scratch, slot, &mut keep)
                        .map_err(SampleError::Decode)?;
                    if whole {
                        self.keep(cache, index, keep, ann);
                    } else {
                        self.counters.decoded_cache_windowed.fetch_add(1, Relaxed);
                    }
                    Ok(())
                }
            },
            Input::Read {
                kind:
                    RecordKind::Raw {
                        width,
                        height,
                        channels,
                    },
                bytes,
                ann,
            } => {
                if channels as usize != c {
                    return Err(SampleError::Invalid(format!(
                        "record has {channels} channels but batches have {c}"
                    )));
                }
                let view =
                    ImageView::new(width as usize, height as usize, c, bytes).ok_or_else(|| {
                        SampleError::Invalid(format!(
                            "record holds {} bytes, not {width}x{height}x{channels}",
                            bytes.len()
                        ))
                    })?;
                self.transform
                    .run_image(view, &mut rng, scratch, slot)
                    .map_err(SampleError::Decode)?;
                if let Some(cache) = cache {
                    let keep = Image {
                        width: view.width,
                        height: view.height,
                        channels: c,
                        data: bytes.to_vec(),
                    };
                    self.keep(cache, index, keep, ann);
                }
                Ok(())
            }
        }));
        add_time(&self.counters.work_ns, t0.elapsed());
        self.counters.decodes.fetch_add(1, Relaxed);
        if let Some(tr) = &self.trace {
            tr.span("decode", t0, Some(serde_json::json!({ "index": index })));
        }
        match out {
            Ok(r) => r.map_err(|e| self.sample_error(index, e)),
            Err(p) => Err(LoaderError::from_panic(
                format!("decoding {}", self.source.describe(index)),
                p,
            )),
        }
    }

    /// Offers sample `index`'s whole decode (and its fields) to the cache.
    fn keep(&self, cache: &DecodedCache, index: usize, image: Image, ann: &Annotation) {
        let d = Decoded {
            width: image.width,
            height: image.height,
            channels: image.channels,
            pixels: image.data,
            ann: ann.clone(),
        };
        if cache.keep(index, d) == Keep::NoRoom {
            self.counters.decoded_cache_no_room.fetch_add(1, Relaxed);
        }
    }

    /// [`decode`](Self::decode) for a loader with fields: the image into `slot`, then
    /// the sample's fields through the image's geometry, its mask into `mask`.
    pub(crate) fn decode_sample(
        &self,
        sample: ReadSample<'_>,
        scratch: &mut Scratch,
        fields: &mut FieldScratch,
        slot: &mut [u8],
        mask: &mut [u8],
    ) -> Result<SampleFields, LoaderError> {
        let Some(plan) = &self.fields else {
            self.decode(&sample, scratch, slot)?;
            return Ok(SampleFields::default());
        };
        let spatial = plan.fields.any_spatial();
        if spatial != scratch.geometry().is_some() {
            scratch.record_geometry(spatial);
        }
        self.decode(&sample, scratch, slot)?;
        let (epoch, index, ann) = (sample.epoch, sample.index, sample.input.ann());
        let t0 = Instant::now();
        let out = catch_unwind(AssertUnwindSafe(|| {
            plan.carry(ann, scratch.geometry(), fields, mask)
        }));
        add_time(&self.counters.work_ns, t0.elapsed());
        let mut out = match out {
            Ok(r) => r.map_err(|e| self.sample_error(index, e))?,
            Err(p) => {
                return Err(LoaderError::from_panic(
                    format!("carrying the fields of {}", self.source.describe(index)),
                    p,
                ))
            }
        };
        if !self.steps.is_empty() {
            let boxes = out.boxes.len();
            self.run_steps(epoch, index, slot, &mut out)?;
            // Instance mask j lies in the buffer as box j's: a step that adds or
            // drops boxes would pair them with the wrong masks.
            if plan.masks.is_some() && out.boxes.len() != boxes {
                return Err(self.sample_error(
                    index,
                    SampleError::Invalid(format!(
                        "a user step changed the sample's {boxes} boxes to {}, and the \
                         batch carries one instance mask per box: a step may move boxes \
                         but not add or drop them",
                        out.boxes.len()
                    )),
                ));
            }
        }
        Ok(out)
    }

    /// Runs the caller's steps over one sample (its image in `image`, its fields in
    /// `fields`) with the sample's own step stream.
    fn run_steps(
        &self,
        epoch: u64,
        index: usize,
        image: &mut [u8],
        fields: &mut SampleFields,
    ) -> Result<(), LoaderError> {
        let t0 = Instant::now();
        let mut rng = step_rng(self.seed, epoch, index as u64);
        let label = self.source.label(index);
        let mut sample = StepSample {
            index,
            epoch,
            label,
            image,
            shape: self.shape,
            fields,
        };
        let out = catch_unwind(AssertUnwindSafe(|| {
            for step in &self.steps {
                step.0
                    .apply(&mut sample, &mut rng)
                    .map_err(|source| SampleError::Step {
                        name: step.name().to_string(),
                        source,
                    })?;
            }
            Ok(())
        }));
        let changed = (sample.label != label).then_some(sample.label);
        add_time(&self.counters.work_ns, t0.elapsed());
        match out {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.sample_error(index, e)),
            Err(p) => {
                return Err(LoaderError::from_panic(
                    format!("running a user step on {}", self.source.describe(index)),
                    p,
                ))
            }
        }
        fields.label = changed;
        // The fields are public: an array built by hand may not match its shape.
        for (name, a) in &fields.extra {
            let n = a.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            if n != Some(a.data.len()) {
                return Err(self.sample_error(
                    index,
                    SampleError::Invalid(format!(
                        "a user step added '{name}' of shape {:?} with {} elements",
                        a.shape,
                        a.data.len()
                    )),
                ));
            }
        }
        Ok(())
    }

    /// Turns a filled buffer into a batch: applies the error policy (dropping skipped
    /// samples by moving later slots down) and updates the counters.
    pub(crate) fn finish(
        &self,
        mut buf: PooledBuf,
        epoch: u64,
        step: usize,
        mut indices: Vec<usize>,
        mut errors: Vec<(usize, LoaderError)>,
        mut outs: Vec<(usize, SampleFields)>,
    ) -> Result<Batch, LoaderError> {
        errors.sort_by_key(|(pos, _)| *pos);
        let fatal = errors
            .iter()
            .position(|(_, e)| matches!(e, LoaderError::Panic { .. }));
        if let Some(i) = fatal {
            return Err(errors.swap_remove(i).1);
        }
        if self.on_error == OnError::Fail {
            if !errors.is_empty() {
                return Err(errors.swap_remove(0).1);
            }
        } else if !errors.is_empty() {
            let slot = self.slot_bytes();
            let (mask, masks_at) = (self.mask_bytes(), self.masks_offset());
            let data = buf.as_mut_slice();
            let mut bad = errors.iter().map(|(p, _)| *p).peekable();
            let mut kept = 0;
            for pos in 0..indices.len() {
                if bad.peek() == Some(&pos) {
                    bad.next();
                    continue;
                }
                if kept != pos {
                    data.copy_within(pos * slot..(pos + 1) * slot, kept * slot);
                    let from = masks_at + pos * mask;
                    data.copy_within(from..from + mask, masks_at + kept * mask);
                    indices[kept] = indices[pos];
                }
                kept += 1;
            }
            indices.truncate(kept);
        }
        let mut labels: Vec<u32> = indices.iter().map(|&i| self.source.label(i)).collect();
        let len = indices.len() * self.slot_bytes();
        let soft_labels = self.mix_batch(&mut buf, epoch, step, &indices, &labels)?;
        let mut fields = None;
        if let Some(plan) = &self.fields {
            // The samples that were not skipped, in batch order (as `indices`).
            outs.sort_by_key(|(pos, _)| *pos);
            let kept: Vec<SampleFields> = outs
                .drain(..)
                .filter(|(pos, _)| !errors.iter().any(|(bad, _)| bad == pos))
                .map(|(_, f)| f)
                .collect();
            let mut f =
                crate::sample::collate(plan.fields, &kept, plan.schema.len(), plan.max_instances);
            if !self.steps.is_empty() {
                for (l, s) in labels.iter_mut().zip(&kept) {
                    *l = s.label.unwrap_or(*l);
                }
                let extra: Vec<&[_]> = kept.iter().map(|s| s.extra.as_slice()).collect();
                // Steps that disagree across samples are a bug in the step, not bad
                // data: the batch fails whatever on_error says.
                f.extra = collate_extra(&extra).map_err(|e| {
                    let index = indices.get(e.pos).copied().unwrap_or(0);
                    self.sample_error(index, SampleError::Collate(e))
                })?;
            }
            fields = Some(Box::new(f));
        }
        let at = self.masks_offset();
        let images = match (&fields, self.fields.as_ref().and_then(|p| p.masks)) {
            (Some(f), Some((k, (h, w)))) => {
                let map = f.fields.contains(crate::Field::Mask) as usize * h * w;
                let (inst, maps) = super::fields::gather_instance_masks(
                    &mut buf.as_mut_slice()[at..],
                    &f.boxes.count,
                    map,
                    (k, h * w),
                    f.boxes.max,
                );
                Images::new(buf, len)
                    .with_instance_masks(at..at + inst)
                    .with_masks(at + inst..at + inst + maps)
            }
            (Some(f), None) => {
                let n = f.fields.contains(crate::Field::Mask) as usize * indices.len();
                Images::new(buf, len).with_masks(at..at + n * self.mask_bytes())
            }
            (None, _) => Images::new(buf, len),
        };
        Ok(Batch {
            images,
            labels,
            soft_labels,
            indices,
            skipped: errors.len(),
            epoch,
            step,
            image_shape: self.shape,
            fields,
        })
    }
}

impl Shared {
    /// MixUp/CutMix over a finished batch's images, drawn from (seed, epoch, step);
    /// returns its soft labels (`None` when the loader does not mix).
    fn mix_batch(
        &self,
        buf: &mut PooledBuf,
        epoch: u64,
        step: usize,
        indices: &[usize],
        labels: &[u32],
    ) -> Result<Option<Vec<f32>>, LoaderError> {
        let Some((mix, classes)) = &self.mixup else {
            return Ok(None);
        };
        let classes = *classes;
        if let Some(pos) = labels.iter().position(|&l| l as usize >= classes) {
            return Err(self.sample_error(
                indices[pos],
                SampleError::Invalid(format!(
                    "label {} is not below the data set's {classes} classes (soft labels)",
                    labels[pos]
                )),
            ));
        }
        let (h, w, _) = self.shape;
        let draw = mix.draw(self.seed, epoch, step, w, h);
        let n = labels.len();
        mix_images(
            &mut buf.as_mut_slice()[..n * self.slot_bytes()],
            n,
            self.shape,
            &draw,
        );
        Ok(Some(soft_labels(labels, classes, draw.lam())))
    }
}

/// The (width, height, channels) of sample `index` before transforms, from its
/// header or record shape.
pub(crate) fn probe_shape(
    shared_source: &dyn crate::Source,
    index: usize,
    max_pixels: usize,
) -> Result<(usize, usize, Option<usize>), LoaderError> {
    let mut buf = Vec::new();
    let what = || shared_source.describe(index);
    let kind = shared_source
        .read(index, &mut buf)
        .map_err(|e| LoaderError::Sample {
            index,
            what: what(),
            source: SampleError::Read(e),
        })?;
    match kind {
        RecordKind::Encoded => {
            let (w, h) =
                decode::probe_limited(&buf, max_pixels).map_err(|e| LoaderError::Sample {
                    index,
                    what: what(),
                    source: SampleError::Decode(e),
                })?;
            Ok((w, h, None))
        }
        RecordKind::Raw {
            width,
            height,
            channels,
        } => Ok((width as usize, height as usize, Some(channels as usize))),
    }
}
