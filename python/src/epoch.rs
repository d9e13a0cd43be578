//! The iterator over one epoch's batches. It waits for each batch with the GIL
//! released, in slices of [`POLL`], checking for signals in between, so Ctrl-C
//! raises KeyboardInterrupt within about that long even while the loader is stuck.
//!
//! A signal that arrives while a batch is being made is handled before the batch is
//! handed over: when its handler raises (Ctrl-C), the batch is kept for the next call,
//! so an interrupted `next(it)` loses nothing and the position (`state_dict`) moves
//! only when a batch reaches Python.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stoker_loader::{Batch, Cursor, Next};

use crate::batch::{to_map_input, to_python};
use crate::errors::{busy, loader_error};
use crate::loader::PyLoader;
use crate::map::MapOutcome;

/// How long one wait lasts before Python gets to run its signal handlers.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// The batches of one epoch of a `stoker.Loader`, as (images, labels) pairs, or as
/// dicts with `image`, `label` and `soft_labels` when MixUp/CutMix is on.
#[pyclass(module = "stoker", name = "EpochIterator")]
pub struct EpochIter {
    loader: Py<PyLoader>,
    cursor: Cursor,
    /// The batch made when a signal handler raised instead of returning it: the next
    /// call returns it.
    held: Option<Batch>,
    /// A batch whose map was interrupted: the next call maps it again.
    held_mapped: Option<HeldMapped>,
}

/// A loader batch (as the dict the map reads samples from) waiting for its map.
struct HeldMapped {
    batch: Py<PyDict>,
    indices: Vec<usize>,
    epoch: u64,
}

impl EpochIter {
    pub fn new(loader: Py<PyLoader>, cursor: Cursor) -> Self {
        EpochIter {
            loader,
            cursor,
            held: None,
            held_mapped: None,
        }
    }

    fn borrow<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRef<'py, Self>> {
        slf.try_borrow().map_err(|_| busy("this epoch iterator"))
    }
}

#[pymethods]
impl EpochIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = slf.py();
        let mut me = slf
            .try_borrow_mut()
            .map_err(|_| busy("this epoch iterator"))?;
        let me = &mut *me;
        let loader = me.loader.bind(py);
        let mut guard = loader.try_borrow_mut().map_err(|_| busy("the loader"))?;
        let this = &mut *guard;
        loop {
            // A batch whose map an interrupt cut short is mapped again (the same
            // result: its samples' rngs are seeded by (seed, epoch, index)).
            let input = match me.held_mapped.take() {
                Some(h) => h,
                None => {
                    let batch = match me.held.take() {
                        Some(b) => b,
                        None => loop {
                            let inner = &mut this.inner;
                            let cursor = &mut me.cursor;
                            let next = py.detach(|| inner.next_batch_within(cursor, Some(POLL)));
                            match next {
                                Next::TimedOut => py.check_signals()?,
                                Next::End => {
                                    // Batches whose samples were all skipped may end the
                                    // epoch.
                                    this.position = (me.cursor.epoch(), me.cursor.next_batch());
                                    return Ok(None);
                                }
                                Next::Batch(Err(e)) => return Err(loader_error(e)),
                                Next::Batch(Ok(batch)) => break batch,
                            }
                        },
                    };
                    // Handlers of signals that came while the batch was made run here,
                    // before it is handed over; Python would otherwise run them right
                    // after this call and drop the batch it returned.
                    if let Err(e) = py.check_signals() {
                        me.held = Some(batch);
                        return Err(e);
                    }
                    let classes = this.inner.source().classes().len();
                    if this.map.is_none() {
                        this.position = (me.cursor.epoch(), me.cursor.next_batch());
                        this.last_batch = Some(Instant::now());
                        return to_python(py, batch, classes).map(Some);
                    }
                    let (indices, epoch) = (batch.indices.clone(), batch.epoch);
                    let dict = to_map_input(py, batch, classes)?;
                    HeldMapped {
                        batch: dict.unbind(),
                        indices,
                        epoch,
                    }
                }
            };
            let Some(pool) = &this.map else {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "a batch waits for a map the loader does not have",
                ));
            };
            let src = this.inner.source().clone();
            let describe = move |i: usize| src.describe(i);
            let out = pool.map_batch(
                py,
                input.batch.bind(py),
                &input.indices,
                input.epoch,
                &describe,
            )?;
            match out {
                MapOutcome::Interrupted(e) => {
                    me.held_mapped = Some(input);
                    return Err(e);
                }
                MapOutcome::Done(mapped) => {
                    this.map_skipped += mapped.skipped;
                    this.position = (me.cursor.epoch(), me.cursor.next_batch());
                    this.last_batch = Some(Instant::now());
                    if let Some(b) = mapped.batch {
                        return Ok(Some(b.into_bound(py)));
                    }
                    // Every sample skipped: on to the next batch, as the loader does.
                }
            }
        }
    }

    /// Batches left in this epoch (at most: under on_error="skip", a batch whose
    /// samples were all skipped is left out).
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let me = Self::borrow(slf)?;
        Ok(me.cursor.remaining() + usize::from(me.held.is_some() || me.held_mapped.is_some()))
    }

    /// The epoch this iterator walks.
    #[getter]
    fn epoch(slf: &Bound<'_, Self>) -> PyResult<u64> {
        Ok(Self::borrow(slf)?.cursor.epoch())
    }

    /// The next batch it will deliver.
    #[getter]
    fn next_batch(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let me = Self::borrow(slf)?;
        Ok(me.cursor.next_batch() - usize::from(me.held.is_some() || me.held_mapped.is_some()))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        match Self::borrow(slf) {
            Ok(me) => format!(
                "<stoker.EpochIterator epoch {}, batch {} of {}>",
                me.cursor.epoch(),
                me.cursor.next_batch() - usize::from(me.held.is_some() || me.held_mapped.is_some()),
                me.cursor.len()
            ),
            Err(_) => "<stoker.EpochIterator (in use by another thread)>".into(),
        }
    }
}
