//! The upload stage (feature `cuda`): batches from the loader's host pool to the GPU,
//! through pinned staging buffers, on a copy stream of their own, ordered with events.
//!
//! Two slots alternate. Each has a pinned host buffer (page-locked, allocated once with
//! `cuMemHostAlloc` flags 0: cached, so the CPU may also read it; write-combined memory
//! would make any CPU read crawl) and a device buffer for the images and one for the
//! labels. `upload(batch k + 1)` copies the finished host batch into its slot's pinned
//! buffer (one host memcpy) and enqueues the pinned-to-device copy on the copy stream,
//! which overlaps the compute stream's work on batch k:
//!
//! ```text
//! copy stream:     [wait released(k-1)] [H2D k+1] (record copied(k+1))
//! compute stream:  ... step k ...   [wait copied(k+1)] step k+1 ... (record released(k+1))
//! ```
//!
//! - the compute stream waits on the slot's `copied` event before anything enqueued
//!   after `upload` returns, so a step never reads a half-copied batch;
//! - the copy into a slot waits (on the device, not the host) for the `released` event
//!   that [`Uploader::release`] records on the compute stream after the step that used
//!   the slot, so a batch is never overwritten while a kernel still reads it;
//! - the host waits on a slot's previous `copied` event before refilling its pinned
//!   buffer (that copy finished long ago in steady state).
//!
//! Sync mode ([`Uploader::new_sync`]) copies on the compute stream and waits for the
//! copy: simple to reason about, and what the async mode is measured against.
//!
//! The loader's own pool stays pageable `Vec<u8>`s: the extra host memcpy into the
//! pinned slot costs a fraction of the step, keeps the pool free of CUDA, and lets the
//! default build have no CUDA at all.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{
    result as drv, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError,
    PinnedHostSlice,
};

use crate::Batch;

/// What the upload stage can fail with.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The driver library is missing, or the device cannot be opened.
    #[error("no usable CUDA device: {reason}")]
    NoDevice {
        /// Why, naming the device.
        reason: String,
        /// The driver's error, where it gave one.
        #[source]
        source: Option<DriverError>,
    },
    /// A CUDA driver call failed.
    #[error("CUDA {op}: {err}")]
    Cuda {
        /// The call, e.g. "memcpy HtoD".
        op: &'static str,
        /// The driver's error.
        #[source]
        err: DriverError,
    },
    /// A batch has more image bytes or labels than the uploader was sized for.
    #[error("batch of {got} bytes ({labels} labels) exceeds the {max} bytes ({max_labels} labels) the uploader was sized for")]
    TooLarge {
        /// Image bytes of the batch.
        got: usize,
        /// The most image bytes a slot holds.
        max: usize,
        /// Labels of the batch.
        labels: usize,
        /// The most labels a slot holds.
        max_labels: usize,
    },
    /// A [`DeviceBatch`] used after its release, or after its slot took a newer batch;
    /// carries the batch's generation.
    #[error("device batch {0} was already released or its slot reused")]
    Stale(u64),
}

fn cu(op: &'static str) -> impl Fn(DriverError) -> UploadError {
    move |err| UploadError::Cuda { op, err }
}

/// Opens CUDA device `ordinal` (primary context), or says why not. Never panics: the
/// driver library is probed before cudarc would load it (and panic if missing).
pub fn open_cuda_context(ordinal: usize) -> Result<Arc<CudaContext>, UploadError> {
    // SAFETY: only tries `dlopen` on the driver's candidate names; nothing is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(UploadError::NoDevice {
            reason: "libcuda (the NVIDIA driver) not found".into(),
            source: None,
        });
    }
    match catch_unwind(AssertUnwindSafe(|| CudaContext::new(ordinal))) {
        Ok(Ok(ctx)) => Ok(ctx),
        Ok(Err(e)) => Err(UploadError::NoDevice {
            reason: format!("cuda:{ordinal}: {e}"),
            source: Some(e),
        }),
        Err(_) => Err(UploadError::NoDevice {
            reason: format!("cuda:{ordinal}: the CUDA driver library failed to load"),
            source: None,
        }),
    }
}

struct Slot {
    /// Images then labels (u32 little-endian), staged for the copy.
    pinned: PinnedHostSlice<u8>,
    images: CudaSlice<u8>,
    labels: CudaSlice<u8>,
    /// Recorded on the copy stream after this slot's copy.
    copied: CudaEvent,
    /// Recorded on the compute stream after the last step that read this slot.
    released: CudaEvent,
    /// Bumped at each upload into the slot; a `DeviceBatch` names the one it holds.
    generation: u64,
    held: bool,
}

/// A batch on the device: which slot, and its shape. Read its buffers through
/// [`Uploader::images`] and [`Uploader::labels`]; hand it back with
/// [`Uploader::release`] once the step that reads it is enqueued.
#[derive(Debug)]
pub struct DeviceBatch {
    slot: usize,
    generation: u64,
    /// Samples in the batch.
    pub n: usize,
    /// (height, width, channels) of each image.
    pub image_shape: (usize, usize, usize),
    /// The loader's epoch and step of the batch.
    pub epoch: u64,
    /// The batch's position in its epoch ([`Batch::step`]).
    pub step: usize,
}

/// Double-buffered uploads of loader batches (see the module docs).
pub struct Uploader {
    compute: Arc<CudaStream>,
    /// The copy stream; `None` in sync mode (copies go on the compute stream).
    copy: Option<Arc<CudaStream>>,
    slots: Vec<Slot>,
    next: usize,
    batch_bytes: usize,
    max_labels: usize,
    uploaded_bytes: u64,
}

impl Uploader {
    /// An uploader for batches of at most `batch_bytes` image bytes and `max_labels`
    /// labels, feeding `compute` (the stream the model runs on), with its own copy
    /// stream. Allocates everything now: nothing is allocated per batch.
    pub fn new(
        compute: &Arc<CudaStream>,
        batch_bytes: usize,
        max_labels: usize,
    ) -> Result<Self, UploadError> {
        let copy = compute.context().new_stream().map_err(cu("new_stream"))?;
        Self::build(compute, Some(copy), batch_bytes, max_labels)
    }

    /// Sync mode: copies on the compute stream and waits for each copy.
    pub fn new_sync(
        compute: &Arc<CudaStream>,
        batch_bytes: usize,
        max_labels: usize,
    ) -> Result<Self, UploadError> {
        Self::build(compute, None, batch_bytes, max_labels)
    }

    fn build(
        compute: &Arc<CudaStream>,
        copy: Option<Arc<CudaStream>>,
        batch_bytes: usize,
        max_labels: usize,
    ) -> Result<Self, UploadError> {
        let ctx = compute.context().clone();
        let alloc_stream = copy.clone().unwrap_or_else(|| compute.clone());
        let staged = batch_bytes + 4 * max_labels;
        let mut slots = Vec::new();
        for _ in 0..2 {
            // SAFETY: the memory is uninitialised until written; only bytes written by
            // `upload` (images, then labels) are ever copied out of it.
            let pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(staged.max(1), 0) }
                .map_err(cu("cuMemHostAlloc"))?;
            slots.push(Slot {
                pinned,
                images: alloc_stream
                    .alloc_zeros::<u8>(batch_bytes.max(1))
                    .map_err(cu("alloc"))?,
                labels: alloc_stream
                    .alloc_zeros::<u8>(4 * max_labels.max(1))
                    .map_err(cu("alloc"))?,
                copied: ctx.new_event(None).map_err(cu("new_event"))?,
                released: ctx.new_event(None).map_err(cu("new_event"))?,
                generation: 0,
                held: false,
            });
        }
        // The buffers were zeroed on `alloc_stream`; make both streams see that first.
        alloc_stream.synchronize().map_err(cu("synchronize"))?;
        Ok(Self {
            compute: compute.clone(),
            copy,
            slots,
            next: 0,
            batch_bytes,
            max_labels,
            uploaded_bytes: 0,
        })
    }

    /// Whether copies run on their own stream (overlapping compute).
    pub fn is_async(&self) -> bool {
        self.copy.is_some()
    }

    /// Bytes uploaded so far (images and labels).
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded_bytes
    }

    /// Enqueues the upload of `batch` into the next slot and makes the compute stream
    /// wait for it. Returns once the batch is staged in pinned memory (the loader's
    /// buffer may be dropped right away). In sync mode, returns once it is on the device.
    pub fn upload(&mut self, batch: &Batch) -> Result<DeviceBatch, UploadError> {
        let (img, labels) = (&batch.images[..], &batch.labels[..]);
        if img.len() > self.batch_bytes || labels.len() > self.max_labels {
            return Err(UploadError::TooLarge {
                got: img.len(),
                max: self.batch_bytes,
                labels: labels.len(),
                max_labels: self.max_labels,
            });
        }
        let i = self.next;
        self.next = (self.next + 1) % self.slots.len();
        let compute = self.compute.clone();
        let copy = self.copy.clone().unwrap_or_else(|| compute.clone());
        let slot = &mut self.slots[i];
        if slot.held {
            // The consumer never released it: order the overwrite after everything it
            // has enqueued so far, the latest point it could still be read at.
            slot.released.record(&compute).map_err(cu("event record"))?;
        }
        // The pinned buffer's previous copy must be done before the host refills it.
        slot.copied.synchronize().map_err(cu("event sync"))?;
        let staged = slot.pinned.as_mut_slice().map_err(cu("pinned"))?;
        staged[..img.len()].copy_from_slice(img);
        let lab = &mut staged[self.batch_bytes..self.batch_bytes + 4 * labels.len()];
        for (d, l) in lab.chunks_exact_mut(4).zip(labels) {
            d.copy_from_slice(&l.to_le_bytes());
        }
        // The device buffers may still be read by the step before last.
        copy.wait(&slot.released).map_err(cu("stream wait"))?;
        let staged = slot.pinned.as_slice().map_err(cu("pinned"))?;
        let (ip, _ri) = slot.images.device_ptr(&copy);
        let (lp, _rl) = slot.labels.device_ptr(&copy);
        // SAFETY: the sources lie inside the pinned allocation, which lives as long as
        // the slot and is not written again before `copied` completes (checked above at
        // the next refill); the destinations were sized for batch_bytes and max_labels,
        // both checked above.
        unsafe {
            drv::memcpy_htod_async(ip, &staged[..img.len()], copy.cu_stream())
                .map_err(cu("memcpy HtoD"))?;
            let lab = &staged[self.batch_bytes..self.batch_bytes + 4 * labels.len()];
            drv::memcpy_htod_async(lp, lab, copy.cu_stream()).map_err(cu("memcpy HtoD"))?;
        }
        slot.copied.record(&copy).map_err(cu("event record"))?;
        if self.copy.is_some() {
            compute.wait(&slot.copied).map_err(cu("stream wait"))?;
        } else {
            compute.synchronize().map_err(cu("synchronize"))?;
        }
        slot.generation += 1;
        slot.held = true;
        self.uploaded_bytes += (img.len() + 4 * labels.len()) as u64;
        Ok(DeviceBatch {
            slot: i,
            generation: slot.generation,
            n: labels.len(),
            image_shape: batch.image_shape,
            epoch: batch.epoch,
            step: batch.step,
        })
    }

    fn slot_of(&self, db: &DeviceBatch) -> Result<&Slot, UploadError> {
        let s = &self.slots[db.slot];
        if s.generation != db.generation || !s.held {
            return Err(UploadError::Stale(db.generation));
        }
        Ok(s)
    }

    /// The batch's images on the device, u8 (N, H, W, C), in a buffer sized for the
    /// largest batch (the first `n * h * w * c` bytes are this batch's).
    pub fn images(&self, db: &DeviceBatch) -> Result<&CudaSlice<u8>, UploadError> {
        Ok(&self.slot_of(db)?.images)
    }

    /// The batch's labels on the device, u32 little-endian, as bytes (the trainer views
    /// them as a u32 buffer); the first `n` are this batch's.
    pub fn labels(&self, db: &DeviceBatch) -> Result<&CudaSlice<u8>, UploadError> {
        Ok(&self.slot_of(db)?.labels)
    }

    /// Blocks the host until the slot the next [`upload`](Self::upload) fills has
    /// finished its previous copy, which itself waited on the device for the step
    /// that read the slot before: the one wait for the device that `upload` would
    /// otherwise do, done now. A caller that runs ahead of the device calls it at the
    /// end of its step, so that the time the device is behind counts as the step's,
    /// and `upload` then waits only for the host copy into pinned memory. Returns at
    /// once in sync mode (every copy was waited for) and in a steady state the
    /// device keeps up with.
    pub fn wait_next_slot(&self) -> Result<(), UploadError> {
        self.slots[self.next]
            .copied
            .synchronize()
            .map_err(cu("event sync"))
    }

    /// Hands a batch back once the work that reads it is enqueued on the compute
    /// stream: the slot is overwritten only after that work completes.
    pub fn release(&mut self, db: DeviceBatch) -> Result<(), UploadError> {
        self.slot_of(&db)?;
        let s = &mut self.slots[db.slot];
        s.released
            .record(&self.compute)
            .map_err(cu("event record"))?;
        s.held = false;
        Ok(())
    }
}

/// Host-to-device copy rates measured by [`bench_upload`], in GB/s (1e9 bytes/s).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct UploadBench {
    /// Bytes per copy.
    pub bytes: usize,
    /// Copies timed per kind of host memory (after one warm-up copy).
    pub iters: usize,
    /// Rate from pinned (page-locked) host memory, in GB/s.
    pub pinned_gbps: f64,
    /// Rate from ordinary (pageable) host memory, in GB/s.
    pub pageable_gbps: f64,
}

/// Times `iters` copies of `bytes` from pinned and from pageable host memory to
/// device `ordinal`.
pub fn bench_upload(
    ordinal: usize,
    bytes: usize,
    iters: usize,
) -> Result<UploadBench, UploadError> {
    let ctx = open_cuda_context(ordinal)?;
    let stream = ctx.new_stream().map_err(cu("new_stream"))?;
    let bytes = bytes.max(1);
    let iters = iters.max(1);
    let mut dev = stream.alloc_zeros::<u8>(bytes).map_err(cu("alloc"))?;
    // SAFETY: filled right below before any copy reads it.
    let mut pinned =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(cu("cuMemHostAlloc"))?;
    pinned
        .as_mut_slice()
        .map_err(cu("pinned"))?
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    let pageable: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut time = |src: &dyn Fn(&mut CudaSlice<u8>) -> Result<(), DriverError>| {
        // One warm-up copy (first-touch, TLB), then the timed ones.
        src(&mut dev).map_err(cu("memcpy HtoD"))?;
        stream.synchronize().map_err(cu("synchronize"))?;
        let t = Instant::now();
        for _ in 0..iters {
            src(&mut dev).map_err(cu("memcpy HtoD"))?;
        }
        stream.synchronize().map_err(cu("synchronize"))?;
        Ok::<f64, UploadError>((bytes * iters) as f64 / t.elapsed().as_secs_f64() / 1e9)
    };
    let pinned_gbps = time(&|d| stream.memcpy_htod(&pinned, d))?;
    let pageable_gbps = time(&|d| stream.memcpy_htod(&pageable[..], d))?;
    Ok(UploadBench {
        bytes,
        iters,
        pinned_gbps,
        pageable_gbps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_opening_a_device_is_an_error() {
        let r = catch_unwind(|| open_cuda_context(0)).expect("never panics");
        if let Err(e) = r {
            eprintln!("no device here: {e}");
            assert!(e.to_string().contains("CUDA"), "{e}");
        }
        let r = catch_unwind(|| bench_upload(4096, 16, 1)).expect("never panics");
        assert!(r.is_err(), "device 4096 does not exist");
    }

    fn batch(pool: &crate::pool::Pool, fill: u8, n: usize, step: usize) -> Batch {
        let mut buf = pool.acquire_now();
        buf.as_mut_slice().iter_mut().for_each(|b| *b = fill);
        let len = n * 4 * 4 * 3;
        Batch {
            images: crate::Images::new(buf, len),
            labels: (0..n as u32).map(|l| l * 1000 + fill as u32).collect(),
            soft_labels: None,
            indices: (0..n).collect(),
            skipped: 0,
            epoch: 0,
            step,
            image_shape: (4, 4, 3),
            fields: None,
        }
    }

    /// On a GPU: batches round-trip through both slots in both modes, a smaller batch
    /// after a full one, and a released handle is refused.
    #[test]
    fn batches_round_trip_through_both_slots() {
        let ctx = match open_cuda_context(0) {
            Ok(c) => c,
            Err(e) => {
                crate::gpu_test::skip(e);
                return;
            }
        };
        let compute = ctx.new_stream().unwrap();
        let pool = crate::pool::Pool::new(4, 8 * 48);
        for sync in [false, true] {
            let mut up = if sync {
                Uploader::new_sync(&compute, 8 * 48, 8).unwrap()
            } else {
                Uploader::new(&compute, 8 * 48, 8).unwrap()
            };
            assert_eq!(up.is_async(), !sync);
            let mut held = Vec::new();
            for (k, n) in [8, 8, 5, 8, 3].into_iter().enumerate() {
                let b = batch(&pool, k as u8 + 1, n, k);
                let db = up.upload(&b).unwrap();
                drop(b);
                held.push(db);
                if held.len() == 2 {
                    let db = held.remove(0);
                    let img = compute.clone_dtoh(up.images(&db).unwrap()).unwrap();
                    let lab = compute.clone_dtoh(up.labels(&db).unwrap()).unwrap();
                    let fill = db.step as u8 + 1;
                    assert!(
                        img[..db.n * 48].iter().all(|&v| v == fill),
                        "step {}",
                        db.step
                    );
                    for j in 0..db.n {
                        let l = u32::from_le_bytes(lab[4 * j..4 * j + 4].try_into().unwrap());
                        assert_eq!(l, j as u32 * 1000 + fill as u32);
                    }
                    let again = DeviceBatch { ..db };
                    up.release(db).unwrap();
                    assert!(matches!(up.images(&again), Err(UploadError::Stale(_))));
                }
            }
            // From a pool of bigger buffers: one of 8 * 48 bytes cannot hold 9 images.
            let big = crate::pool::Pool::new(1, 9 * 48);
            let too_big = batch(&big, 1, 9, 9);
            assert!(matches!(
                up.upload(&too_big),
                Err(UploadError::TooLarge { .. })
            ));
        }
    }

    /// On a GPU: `wait_next_slot` returns only once the copy into the next upload's
    /// slot is done, also while that copy still waits for a busy compute stream (the
    /// step that read the slot before). The trainer's CUDA feed relies on it to count
    /// the device's lag as the step's time, not as a wait for data.
    #[test]
    fn waiting_for_the_next_slot_waits_for_the_device() {
        let ctx = match open_cuda_context(0) {
            Ok(c) => c,
            Err(e) => {
                crate::gpu_test::skip(e);
                return;
            }
        };
        let compute = ctx.new_stream().unwrap();
        let pool = crate::pool::Pool::new(4, 8 * 48);
        let mut up = Uploader::new(&compute, 8 * 48, 8).unwrap();
        // Work that keeps the compute stream busy for a millisecond or more (8 memsets of
        // 512 MiB), standing for a step.
        let mut busy = compute.alloc_zeros::<u8>(512 << 20).unwrap();
        compute.synchronize().unwrap();
        let (b0, b1) = (batch(&pool, 1, 8, 0), batch(&pool, 2, 8, 1));
        let (d0, d1) = (up.upload(&b0).unwrap(), up.upload(&b1).unwrap());
        for _ in 0..8 {
            compute.memset_zeros(&mut busy).unwrap();
        }
        // Both slots released after the busy work: the next copies into them wait for it.
        up.release(d0).unwrap();
        up.release(d1).unwrap();
        let (b2, b3) = (batch(&pool, 3, 8, 2), batch(&pool, 4, 8, 3));
        let d2 = up.upload(&b2).unwrap();
        let d3 = up.upload(&b3).unwrap();
        // The next upload goes into d2's slot, whose copy waits for the busy stream.
        up.wait_next_slot().unwrap();
        assert!(
            up.slots[up.next].copied.try_is_complete().unwrap(),
            "wait_next_slot returned before the copy into the next slot was done"
        );
        up.release(d2).unwrap();
        up.release(d3).unwrap();
        compute.synchronize().unwrap();
    }
}
