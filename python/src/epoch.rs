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
use stoker_loader::{Batch, Cursor, Next};

use crate::batch::to_python;
use crate::errors::{busy, loader_error};
use crate::loader::PyLoader;

/// How long one wait lasts before Python gets to run its signal handlers.
const POLL: Duration = Duration::from_millis(50);

/// The batches of one epoch of a `stoker.Loader`, as (images, labels) pairs, or as
/// dicts with `image`, `label` and `soft_labels` when MixUp/CutMix is on.
#[pyclass(module = "stoker", name = "EpochIterator")]
pub struct EpochIter {
    loader: Py<PyLoader>,
    cursor: Cursor,
    /// The batch made when a signal handler raised instead of returning it: the next
    /// call returns it.
    held: Option<Batch>,
}

impl EpochIter {
    pub fn new(loader: Py<PyLoader>, cursor: Cursor) -> Self {
        EpochIter {
            loader,
            cursor,
            held: None,
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
        let batch = match me.held.take() {
            Some(b) => b,
            None => loop {
                let inner = &mut this.inner;
                let cursor = &mut me.cursor;
                let next = py.detach(|| inner.next_batch_within(cursor, Some(POLL)));
                match next {
                    Next::TimedOut => py.check_signals()?,
                    Next::End => {
                        // Batches whose samples were all skipped may end the epoch.
                        this.position = (me.cursor.epoch(), me.cursor.next_batch());
                        return Ok(None);
                    }
                    Next::Batch(Err(e)) => return Err(loader_error(e)),
                    Next::Batch(Ok(batch)) => break batch,
                }
            },
        };
        // Handlers of signals that came while the batch was made run here, before it
        // is handed over; Python would otherwise run them right after this call and
        // drop the batch it returned.
        if let Err(e) = py.check_signals() {
            me.held = Some(batch);
            return Err(e);
        }
        this.position = (me.cursor.epoch(), me.cursor.next_batch());
        this.last_batch = Some(Instant::now());
        let classes = this.inner.source().classes().len();
        to_python(py, batch, classes).map(Some)
    }

    /// Batches left in this epoch (at most: under on_error="skip", a batch whose
    /// samples were all skipped is left out).
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let me = Self::borrow(slf)?;
        Ok(me.cursor.remaining() + usize::from(me.held.is_some()))
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
        Ok(me.cursor.next_batch() - usize::from(me.held.is_some()))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        match Self::borrow(slf) {
            Ok(me) => format!(
                "<stoker.EpochIterator epoch {}, batch {} of {}>",
                me.cursor.epoch(),
                me.cursor.next_batch() - usize::from(me.held.is_some()),
                me.cursor.len()
            ),
            Err(_) => "<stoker.EpochIterator (in use by another thread)>".into(),
        }
    }
}
