//! The Rust object behind `stoker.Loader`: the loader, and the position that the
//! loader's methods (`loader.rs`) and its epoch iterators (`epoch.rs`) share.

use std::mem::ManuallyDrop;
use std::time::Instant;

use pyo3::prelude::*;
use stoker_loader::{Cursor, Loader};

use crate::errors::busy;
use crate::map::MapPool;

/// A deterministic, bounded-memory loader over an image folder, a packed file, or an
/// MNIST/CIFAR-10 set. Iterate `loader.epoch(e)` (or the loader itself: the next
/// epoch, or the rest of an interrupted one) for (images, labels) pairs: images a
/// uint8 (N, H, W, C) numpy array viewing the loader's pooled buffer, labels int64
/// (N,). Batches are the same bytes in either mode and for any number of workers.
/// With `mixup=ALPHA` and/or `cutmix=ALPHA` (and `mix_prob`, the chance of CutMix
/// when both are given) each batch is mixed and comes as a dict: `image`, `label`
/// (each image's own label) and `soft_labels` (float32 (N, classes)).
/// With `map=fn` (and `map_threads=N`, default 2), `fn(sample, rng)` runs on N
/// threads for every sample: `sample` a dict of numpy arrays (`image`, `label` and the
/// other fields), `rng` a `numpy.random.Generator` seeded by (seed, epoch, index); it
/// returns a dict, and batches are dicts with its keys, stacked (or padded, with
/// `<key>_count`, when only the first axis differs).
#[pyclass(module = "stoker", name = "Loader")]
pub struct PyLoader {
    /// Dropped by hand (see `Drop`), to stop the pipeline with the GIL released.
    pub(crate) inner: ManuallyDrop<Loader>,
    /// The data set(s), for `repr`.
    pub(crate) data: String,
    /// Where `for ... in loader` goes on: (epoch, next batch) after the last batch
    /// delivered (by any iterator of this loader).
    pub(crate) position: (u64, usize),
    /// A cursor made by `load_state_dict`, for the next iteration of its epoch.
    pub(crate) pending: Option<Cursor>,
    /// When the first epoch was asked for, and when the last batch came: images/s.
    pub(crate) started: Option<Instant>,
    pub(crate) last_batch: Option<Instant>,
    /// The threads of `map=`, when given.
    pub(crate) map: Option<MapPool>,
    /// Samples a map left out under on_error="skip".
    pub(crate) map_skipped: usize,
    /// What each batch's images become at handout (`device`, `dtype`, `layout`,
    /// `normalize`).
    pub(crate) output: crate::output::Output,
}

impl PyLoader {
    pub(crate) fn borrow<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRef<'py, Self>> {
        slf.try_borrow().map_err(|_| busy("the loader"))
    }

    pub(crate) fn borrow_mut<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRefMut<'py, Self>> {
        slf.try_borrow_mut().map_err(|_| busy("the loader"))
    }

    /// Where `for ... in loader` starts: the rest of the epoch last left unfinished,
    /// else the start of the next one. After epoch 2**64-1 there is none: the end of
    /// that one, so that iteration ends at once and the state says where it stands.
    pub(crate) fn next_position(&self) -> (u64, usize) {
        let (e, b) = self.position;
        let len = self.inner.batches_per_epoch();
        match e.checked_add(1) {
            Some(next) if len > 0 && b >= len => (next, 0),
            _ => (e, b),
        }
    }
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let map = self.map.take();
        // Dropping the loader stops and joins its pipeline threads, which may wait for
        // a read or a decode in flight, and the map threads, which need the GIL to
        // finish a call of the map: let other Python threads run meanwhile.
        Python::attach(|py| {
            py.detach(move || {
                drop(map);
                drop(inner);
            })
        });
    }
}
