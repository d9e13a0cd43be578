//! The iterator over one epoch's batches. It waits for each batch with the GIL
//! released, in slices of [`POLL`], checking for signals in between, so Ctrl-C
//! raises KeyboardInterrupt within about that long even while the loader is stuck.
//!
//! A signal that arrives while a batch is being made, mapped, collated or turned into
//! arrays is handled before the batch is handed over: when its handler raises
//! (Ctrl-C), the batch, already in Python objects (or, interrupted in the collation,
//! its mapped samples), is kept for the next call, so an interrupted `next(it)` loses
//! nothing and the position (`state_dict`) moves only when a batch reaches Python.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use stoker_loader::{Cursor, Mode, Next};

use crate::batch::{to_map_input, to_python};
use crate::errors::{busy, loader_error, LoaderError};
use crate::handle::PyLoader;
use crate::map::{InFlight, MapOutcome, MapPool};
use crate::signals::POLL;

/// The batches of one epoch of a `stoker.Loader`, as (images, labels) pairs, or as
/// dicts with `image`, `label` and `soft_labels` when MixUp/CutMix is on.
#[pyclass(module = "stoker", name = "EpochIterator")]
pub struct EpochIter {
    loader: Py<PyLoader>,
    cursor: Cursor,
    /// The batch, ready for Python, that a signal handler kept from being returned:
    /// the next call returns it.
    held: Option<Py<PyAny>>,
    /// With `map=`: the batches handed to the map threads, in order, the first the
    /// one the next call returns (an interrupt while waiting for it leaves it here).
    mapping: VecDeque<Ahead>,
}

/// Batches mapped ahead of the one being waited for, in async mode: the map threads
/// work on the next batch while the caller's step runs, as the decode workers do.
const MAP_AHEAD: usize = 1;

/// One place in the queue of batches being mapped.
enum Ahead {
    /// A batch with the map threads, and the position after it.
    Batch(InFlight, (u64, usize)),
    /// A mapped batch, ready for Python, waiting to be handed over (a signal handler
    /// raised first), and the position after it.
    Ready(Py<PyAny>, (u64, usize)),
    /// The loader failed on the batch at this place.
    Failed(PyErr),
    /// The epoch ended at this place.
    End((u64, usize)),
}

impl EpochIter {
    pub fn new(loader: Py<PyLoader>, cursor: Cursor) -> Self {
        EpochIter {
            loader,
            cursor,
            held: None,
            mapping: VecDeque::new(),
        }
    }

    fn borrow<'py>(slf: &Bound<'py, Self>) -> PyResult<PyRef<'py, Self>> {
        slf.try_borrow().map_err(|_| busy("this epoch iterator"))
    }

    /// Batches taken from the loader and not yet handed to Python.
    fn undelivered(&self) -> usize {
        usize::from(self.held.is_some())
            + self
                .mapping
                .iter()
                .filter(|a| matches!(a, Ahead::Batch(..) | Ahead::Ready(..)))
                .count()
    }

    /// The loader's next batch, waited for in slices of [`POLL`] (`wait`), or only if
    /// it is made already (`!wait`: `None` when it is not).
    fn fetch(&mut self, py: Python<'_>, this: &mut PyLoader, wait: bool) -> PyResult<Option<Next>> {
        let slice = if wait { POLL } else { Duration::ZERO };
        loop {
            let (inner, cursor) = (&mut this.inner, &mut self.cursor);
            match py.detach(|| inner.next_batch_within(cursor, Some(slice))) {
                Next::TimedOut if wait => py.check_signals()?,
                Next::TimedOut => return Ok(None),
                next => return Ok(Some(next)),
            }
        }
    }

    /// Takes the loader's next batch into the queue of batches being mapped, handing
    /// it to the map threads: waiting for it (`wait`), or only if it is made already.
    /// False when nothing was taken (not made yet, or the queue ends the epoch). A
    /// batch that cannot be handed over becomes the failure at its place, so a batch
    /// taken is never lost.
    fn take_next(
        &mut self,
        py: Python<'_>,
        this: &mut PyLoader,
        pool: &MapPool,
        wait: bool,
    ) -> PyResult<bool> {
        if matches!(self.mapping.back(), Some(Ahead::Failed(_) | Ahead::End(_))) {
            return Ok(false);
        }
        let Some(next) = self.fetch(py, this, wait)? else {
            return Ok(false);
        };
        let after = (self.cursor.epoch(), self.cursor.position());
        self.mapping.push_back(match next {
            Next::Batch(Ok(batch)) => {
                let classes = this.inner.source().classes().len();
                let (indices, epoch) = (batch.indices.clone(), batch.epoch);
                match to_map_input(py, batch, classes)
                    .and_then(|dict| pool.submit(dict, indices, epoch))
                {
                    Ok(job) => Ahead::Batch(job, after),
                    Err(e) => Ahead::Failed(e),
                }
            }
            Next::Batch(Err(e)) => Ahead::Failed(loader_error(e)),
            Next::End | Next::TimedOut => Ahead::End(after),
        });
        Ok(true)
    }

    /// In async mode, hands the batches the loader has already made to the map
    /// threads until `limit` are queued; never waits. (A sync loader would make the
    /// batch on this thread, in the caller's time: there the map runs when the batch
    /// is asked for.)
    fn run_ahead(&mut self, py: Python<'_>, this: &mut PyLoader, pool: &MapPool, limit: usize) {
        if this.inner.config().mode != Mode::Async {
            return;
        }
        // Without waiting, taking a batch cannot fail (no signal check).
        while self.mapping.len() < limit
            && matches!(self.take_next(py, this, pool, false), Ok(true))
        {}
    }

    /// The next mapped batch: the first of the queue, once its samples are back.
    fn next_mapped<'py>(
        &mut self,
        py: Python<'py>,
        this: &mut PyLoader,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(pool) = this.map.take() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a mapped batch was asked of a loader without a map",
            ));
        };
        // The pool is put back whatever happens (it is taken to borrow `this` freely).
        let out = self.next_mapped_with(py, this, &pool);
        this.map = Some(pool);
        out
    }

    /// Hands the mapped batch at the front of the queue to Python, unless a signal
    /// handler raises first (then it stays there for the next call).
    fn hand_over_mapped<'py>(
        &mut self,
        py: Python<'py>,
        this: &mut PyLoader,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        py.check_signals()?;
        let Some(Ahead::Ready(b, _)) = self.mapping.front() else {
            return Err(LoaderError::new_err("no mapped batch to hand over"));
        };
        // Converted as it is handed over (`device`, `dtype`, ...); where that fails
        // (every device slot held) the batch stays at the front for the next call.
        let out = this.output.finish(b.bind(py).clone())?;
        match self.mapping.pop_front() {
            Some(Ahead::Ready(_, after)) => {
                this.position = after;
                this.last_batch = Some(Instant::now());
                Ok(Some(out))
            }
            _ => Err(LoaderError::new_err("no mapped batch to hand over")),
        }
    }

    fn next_mapped_with<'py>(
        &mut self,
        py: Python<'py>,
        this: &mut PyLoader,
        pool: &MapPool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            if self.mapping.is_empty() {
                self.take_next(py, this, pool, true)?;
            }
            self.run_ahead(py, this, pool, 1 + MAP_AHEAD);
            let src = this.inner.source().clone();
            let describe = move |i: usize| src.describe(i);
            let (outcome, after) = match self.mapping.front_mut() {
                None => return Err(LoaderError::new_err("no batch to map")),
                Some(Ahead::End(after)) => {
                    // Left in place: every later call ends too.
                    this.position = *after;
                    return Ok(None);
                }
                Some(Ahead::Failed(_)) => match self.mapping.pop_front() {
                    Some(Ahead::Failed(e)) => return Err(e),
                    _ => unreachable!("the front was a failure"),
                },
                Some(Ahead::Ready(..)) => return self.hand_over_mapped(py, this),
                Some(Ahead::Batch(job, after)) => (pool.finish(py, job, &describe), *after),
            };
            let mapped = match outcome {
                Ok(MapOutcome::Interrupted(e)) => return Err(e),
                Ok(MapOutcome::Done(mapped)) => mapped,
                Err(e) => {
                    self.mapping.pop_front();
                    return Err(e);
                }
            };
            this.map_skipped += mapped.skipped;
            if let Some(b) = mapped.batch {
                // Kept at the front until it reaches Python; the next batch starts
                // mapping while the caller works on this one.
                if let Some(front) = self.mapping.front_mut() {
                    *front = Ahead::Ready(b, after);
                }
                self.run_ahead(py, this, pool, 1 + MAP_AHEAD);
                return self.hand_over_mapped(py, this);
            }
            self.mapping.pop_front();
            this.position = after;
            // Every sample skipped: on to the next batch, as the loader does.
        }
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
        if this.map.is_some() {
            return me.next_mapped(py, this);
        }
        let batch = match me.held.take() {
            Some(b) => b.into_bound(py),
            None => match me.fetch(py, this, true)? {
                Some(Next::Batch(Ok(batch))) => {
                    to_python(py, batch, this.inner.source().classes().len())?
                }
                Some(Next::Batch(Err(e))) => return Err(loader_error(e)),
                _ => {
                    // Batches whose samples were all skipped may end the epoch.
                    this.position = (me.cursor.epoch(), me.cursor.position());
                    return Ok(None);
                }
            },
        };
        // Converted here (`device`, `dtype`, ...), leaving `batch` as it was: where the
        // conversion fails (every device slot held), or a handler raises, the batch
        // is kept for the next call, which converts it again.
        let out = match this.output.finish(batch.clone()) {
            Ok(out) => out,
            Err(e) => {
                me.held = Some(batch.unbind());
                return Err(e);
            }
        };
        // Handlers of signals that came while the batch was made or turned into arrays
        // run here, before it is handed over; Python would otherwise run them right
        // after this call and drop the batch it returned. (One that comes after this
        // check still can: that window is this function's last few instructions.)
        if let Err(e) = py.check_signals() {
            me.held = Some(batch.unbind());
            return Err(e);
        }
        this.position = (me.cursor.epoch(), me.cursor.position());
        this.last_batch = Some(Instant::now());
        Ok(Some(out))
    }

    /// Batches left in this epoch (at most: under on_error="skip", a batch whose
    /// samples were all skipped is left out).
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let me = Self::borrow(slf)?;
        Ok(me.cursor.remaining() + me.undelivered())
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
        Ok(me.cursor.position() - me.undelivered())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        match Self::borrow(slf) {
            Ok(me) => format!(
                "<stoker.EpochIterator epoch {}, batch {} of {}>",
                me.cursor.epoch(),
                me.cursor.position() - me.undelivered(),
                me.cursor.len()
            ),
            Err(_) => "<stoker.EpochIterator (in use by another thread)>".into(),
        }
    }
}
