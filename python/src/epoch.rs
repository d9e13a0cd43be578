//! The iterator over one epoch's batches. It waits for each batch with the GIL
//! released, in slices of [`POLL`], checking for signals in between, so Ctrl-C
//! raises KeyboardInterrupt within about that long even while the loader is stuck.

use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use stoker_loader::{Cursor, Next};

use crate::batch::to_python;
use crate::errors::loader_error;
use crate::loader::PyLoader;

/// How long one wait lasts before Python gets to run its signal handlers.
const POLL: Duration = Duration::from_millis(50);

/// The batches of one epoch of a `stoker.Loader`, as (images, labels) pairs, or as
/// dicts with `image`, `label` and `soft_labels` when MixUp/CutMix is on.
#[pyclass(module = "stoker", name = "EpochIterator")]
pub struct EpochIter {
    loader: Py<PyLoader>,
    cursor: Cursor,
}

impl EpochIter {
    pub fn new(loader: Py<PyLoader>, cursor: Cursor) -> Self {
        EpochIter { loader, cursor }
    }
}

#[pymethods]
impl EpochIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let loader = self.loader.bind(py);
        let mut guard = loader.try_borrow_mut().map_err(|_| {
            PyRuntimeError::new_err(
                "the loader is busy in another thread (one loader serves one consumer)",
            )
        })?;
        let this = &mut *guard;
        let cursor = &mut self.cursor;
        loop {
            let inner = &mut this.inner;
            let next = py.detach(|| inner.next_batch_within(cursor, Some(POLL)));
            match next {
                Next::TimedOut => py.check_signals()?,
                Next::End => return Ok(None),
                Next::Batch(Err(e)) => return Err(loader_error(e)),
                Next::Batch(Ok(batch)) => {
                    this.position = (cursor.epoch(), cursor.next_batch());
                    this.last_batch = Some(Instant::now());
                    return to_python(py, batch).map(Some);
                }
            }
        }
    }

    /// Batches left in this epoch.
    fn __len__(&self) -> usize {
        self.cursor.remaining()
    }

    /// The epoch this iterator walks.
    #[getter]
    fn epoch(&self) -> u64 {
        self.cursor.epoch()
    }

    /// The next batch it will deliver.
    #[getter]
    fn next_batch(&self) -> usize {
        self.cursor.next_batch()
    }

    fn __repr__(&self) -> String {
        format!(
            "<stoker.EpochIterator epoch {}, batch {} of {}>",
            self.cursor.epoch(),
            self.cursor.next_batch(),
            self.cursor.len()
        )
    }
}
