//! How a loader batch reaches the model: chosen once per run, so the loop in `train.rs`
//! reads the same on every device.
//!
//! ```text
//! feed.put(batch)            CPU: keep the host batch     CUDA: upload it (Uploader)
//! feed.forward_backward(m)   CPU: m.forward_backward      CUDA: m.forward_backward_on,
//!                                                               then release the slot
//! feed.end_step(m)           nothing                      CUDA: wait for the next upload
//!                                                               slot (sync: for the step)
//! ```
//!
//! On CUDA the async feed uses the loader's double-buffered [`Uploader`]: `put(k + 1)`
//! stages batch k + 1 in pinned memory and enqueues its copy on the copy stream while
//! the compute stream still runs step k (the host is ahead of the device). The host can
//! run only so far ahead: the next upload's slot is free once the device is done with
//! the step that read it. `end_step` waits for that slot, so that when the device is
//! the bottleneck its lag counts as the step's time; `put`, inside the data wait, then
//! waits only for the loader and the host copy. (Waiting for the slot inside `put`
//! counted a GPU-bound run's device time as data wait: about half of each step of the
//! 32 px demo on an H200.) The sync feed copies on the compute stream, waits for the
//! copy, and waits for each step to finish, so that read, copy and compute follow each
//! other as the sync reader's name promises.

use stoker_loader::upload::{DeviceBatch, UploadError, Uploader};
use stoker_loader::{Batch, BatchFields, Field, Mode};

use crate::backend::cuda::{CudaBackend, CudaBuf};
use crate::backend::{Backend, BackendError, Buffers};
use crate::error::ModelError;
use crate::model::{Model, Target};

/// What handing a batch to the model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The loader's uploader could not copy the batch to the device.
    #[error("upload: {0}")]
    Upload(#[from] UploadError),
    /// The model refused the batch or its step failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A feed asked to run a step before any batch was put into it (a bug in the caller).
    #[error("the batch feed was asked for a step with no batch put")]
    NoBatch,
}

/// Hands loader batches to a model on backend `B` (see the module docs).
pub trait BatchFeed<B: Backend + Clone + 'static> {
    /// What the data wait of a step covers, in words, for reports.
    fn wait_covers(&self) -> &'static str;

    /// Makes `batch` the one the next `forward_backward` or `evaluate` reads. Its time
    /// counts as waiting for data: a device feed uploads here.
    fn put(&mut self, batch: Batch) -> Result<(), FeedError>;

    /// A training forward and backward on the batch last `put`, which is then let go.
    fn forward_backward(&mut self, model: &mut Model<B>) -> Result<(), FeedError>;

    /// An eval-mode forward on the batch last `put`, which is then let go.
    fn evaluate(&mut self, model: &mut Model<B>) -> Result<(), FeedError>;

    /// Called once the whole step (optimizer included) is enqueued.
    fn end_step(&mut self, _model: &Model<B>) -> Result<(), FeedError> {
        Ok(())
    }
}

/// The host path: the model copies the host batch itself (a plain memory copy on the
/// CPU backend). Works with any backend.
#[derive(Debug, Default)]
pub struct HostFeed {
    batch: Option<Batch>,
}

impl HostFeed {
    /// A feed holding no batch yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn take(&mut self) -> Result<Batch, FeedError> {
        self.batch.take().ok_or(FeedError::NoBatch)
    }
}

impl<B: Backend + Clone + 'static> BatchFeed<B> for HostFeed {
    fn wait_covers(&self) -> &'static str {
        "time blocked in the loader's next()"
    }

    fn put(&mut self, batch: Batch) -> Result<(), FeedError> {
        self.batch = Some(batch);
        Ok(())
    }

    fn forward_backward(&mut self, model: &mut Model<B>) -> Result<(), FeedError> {
        let b = self.take()?;
        if model.config().target == Target::Labels {
            let tags = k_hot(b.fields.as_deref(), model.config().classes)?;
            model.forward_backward_labels(&b.images, &tags, b.len())?;
            return Ok(());
        }
        model.forward_backward_mixed(&b.images, &b.labels, b.soft_labels.as_deref(), b.len())?;
        // `b` drops here: its buffer goes back to the loader's pool.
        Ok(())
    }

    fn evaluate(&mut self, model: &mut Model<B>) -> Result<(), FeedError> {
        let b = self.take()?;
        if model.config().target == Target::Labels {
            let tags = k_hot(b.fields.as_deref(), model.config().classes)?;
            model.evaluate_labels(&b.images, &tags, b.len())?;
            return Ok(());
        }
        model.evaluate(&b.images, &b.labels, b.len())?;
        Ok(())
    }
}

/// A batch's multi-label tags, u8 `(n, classes)` k-hot; an error when the batch has
/// none (a source without the `labels` field, or fields not asked for).
fn k_hot(fields: Option<&BatchFields>, classes: usize) -> Result<Vec<u8>, ModelError> {
    fields
        .filter(|f| f.fields.contains(Field::Labels))
        .map(|f| f.labels_k_hot(classes))
        .ok_or(ModelError::NoTags)
}

/// The device path on CUDA: batches go through the loader's upload stage, and the
/// model reads them where they landed (no second copy).
pub struct DeviceFeed {
    backend: CudaBackend,
    up: Uploader,
    batch: Option<DeviceBatch>,
    /// The staged batch's host labels and soft labels, for the soft-target loss.
    host: (Vec<u32>, Option<Vec<f32>>),
    /// The staged batch's other fields, whose tags a multi-label model learns (they
    /// go up with the step, as soft labels do).
    fields: Option<Box<BatchFields>>,
}

impl std::fmt::Debug for DeviceFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceFeed")
            .field("backend", &self.backend)
            .field("async", &self.up.is_async())
            .field("batch", &self.batch)
            .finish()
    }
}

impl DeviceFeed {
    /// A feed for batches of at most `max_batch` images of `image_shape` (h, w, c) onto
    /// `backend`'s stream. `Mode::Async`: double-buffered uploads on a copy stream;
    /// `Mode::Sync`: copies on the compute stream, waited for. Allocates its pinned and
    /// device buffers now.
    pub fn new(
        backend: &CudaBackend,
        mode: Mode,
        image_shape: (usize, usize, usize),
        max_batch: usize,
    ) -> Result<Self, UploadError> {
        let (h, w, c) = image_shape;
        let bytes = max_batch * h * w * c;
        let stream = backend.stream();
        let up = match mode {
            Mode::Async => Uploader::new(stream, bytes, max_batch)?,
            Mode::Sync => Uploader::new_sync(stream, bytes, max_batch)?,
        };
        Ok(Self {
            backend: backend.clone(),
            up,
            batch: None,
            host: (Vec::new(), None),
            fields: None,
        })
    }

    /// Whether uploads overlap compute (a copy stream of their own).
    pub fn is_async(&self) -> bool {
        self.up.is_async()
    }

    /// Runs `f` on the staged batch's device buffers, then releases its slot: `f` only
    /// enqueues work, and the release event is recorded on the compute stream after
    /// that work, so the slot is refilled only once the kernels reading it are done.
    /// Only the forward and backward read the batch (the optimizer never does), so
    /// releasing here rather than after the optimizer step is as safe and frees the
    /// slot sooner.
    fn with_batch(
        &mut self,
        f: impl FnOnce(&CudaBuf<u8>, &CudaBuf<u32>, usize) -> Result<(), ModelError>,
    ) -> Result<(), FeedError> {
        let db = self.batch.take().ok_or(FeedError::NoBatch)?;
        let up = &self.up;
        let run = || -> Result<(), FeedError> {
            let view_err = || {
                ModelError::from(BackendError::Op {
                    op: "device batch",
                    reason: "label buffer is not a whole number of u32".into(),
                })
            };
            let images = CudaBuf::<u8>::view(up.images(&db)?).ok_or_else(view_err)?;
            let labels = CudaBuf::<u32>::view(up.labels(&db)?).ok_or_else(view_err)?;
            Ok(f(images, labels, db.n)?)
        };
        let r = run();
        // Released even when the step failed: the slot must not stay held.
        self.up.release(db)?;
        r
    }
}

impl BatchFeed<CudaBackend> for DeviceFeed {
    fn wait_covers(&self) -> &'static str {
        if self.up.is_async() {
            "time blocked in the loader's next() plus staging the batch into pinned memory \
             and enqueueing its copy (the copy itself overlaps the previous step; waiting \
             for the device to free an upload slot counts as compute)"
        } else {
            "time blocked in the loader's next() plus the host-to-device copy of the batch \
             (sync: copied on the compute stream and waited for)"
        }
    }

    fn put(&mut self, mut batch: Batch) -> Result<(), FeedError> {
        if let Some(old) = self.batch.take() {
            // A batch put but never used: free its slot rather than leak it.
            self.up.release(old)?;
        }
        self.batch = Some(self.up.upload(&batch)?);
        self.host = (batch.labels.clone(), batch.soft_labels.clone());
        self.fields = batch.fields.take();
        // `batch` drops here: staged in pinned memory, its pool buffer is free again.
        Ok(())
    }

    fn forward_backward(&mut self, model: &mut Model<CudaBackend>) -> Result<(), FeedError> {
        let (labels, soft) = std::mem::take(&mut self.host);
        let fields = self.fields.take();
        if model.config().target == Target::Labels {
            // Inside `with_batch`, so that a batch without tags still frees its slot.
            return self.with_batch(|x, y, n| {
                let tags = k_hot(fields.as_deref(), model.config().classes)?;
                model.forward_backward_on_labels(x, y, &tags, n)
            });
        }
        self.with_batch(|x, y, n| {
            model.forward_backward_on_mixed(x, y, &labels, soft.as_deref(), n)
        })
    }

    fn evaluate(&mut self, model: &mut Model<CudaBackend>) -> Result<(), FeedError> {
        let fields = self.fields.take();
        if model.config().target == Target::Labels {
            // Inside `with_batch`, so that a batch without tags still frees its slot.
            return self.with_batch(|x, y, n| {
                let tags = k_hot(fields.as_deref(), model.config().classes)?;
                model.evaluate_on_labels(x, y, &tags, n)
            });
        }
        self.with_batch(|x, y, n| model.evaluate_on(x, y, n))
    }

    fn end_step(&mut self, _model: &Model<CudaBackend>) -> Result<(), FeedError> {
        // Sync: the step's compute time is its device time, and the next upload (which
        // synchronises the compute stream) then waits for its copy alone.
        if !self.up.is_async() {
            self.backend.synchronize().map_err(ModelError::from)?;
            return Ok(());
        }
        // Async: the wait for the device that the next `put` would do (see the module
        // docs), done here, in the step's time. The loader's workers go on meanwhile.
        self.up.wait_next_slot()?;
        Ok(())
    }
}

/// A CUDA feed for `mode`, boxed for the trainer's `with_feed`.
pub fn cuda_feed(
    backend: &CudaBackend,
    mode: Mode,
    image_shape: (usize, usize, usize),
    max_batch: usize,
) -> Result<Box<dyn BatchFeed<CudaBackend>>, UploadError> {
    Ok(Box::new(DeviceFeed::new(
        backend,
        mode,
        image_shape,
        max_batch,
    )?))
}
