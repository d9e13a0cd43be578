//! `Loader(map=fn, map_threads=N)`: the caller's Python function over every sample of
//! a batch, on N threads of the loader's own (outside the decode workers).
//!
//! The consumer's thread hands a batch to the threads ([`MapPool::submit`]), possibly
//! ahead of asking for it, and waits for it ([`MapPool::finish`]) with the GIL
//! released, checking for signals every [`POLL`](crate::signals::POLL), so Ctrl-C stops
//! the wait promptly and leaves the batch in flight. The threads take the GIL (or, on
//! a free-threaded Python, attach) once a batch, to run `stoker._map.run` (`fn` itself
//! and the building of its arguments) on the samples they take. A batch dropped in
//! flight leaves its samples not yet started unrun. Dropping the pool stops and joins
//! the threads, and so does the interpreter's exit ([`stop_map_threads`], an `atexit`
//! hook), for the loaders still alive then.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::LoaderError;
use crate::map_buffers::MapBuffers;
use crate::signals::POLL;

/// A batch to map, as one thread sees it: the samples of `batch` (`indices[pos]` the
/// source index of position `pos`), taken one at a time from `next`, which every
/// thread on the batch shares. A thread takes the GIL once a batch, not once a sample, and
/// the threads still share the samples out one by one, so a slow sample holds up no
/// more than itself.
struct Job {
    batch: Py<PyDict>,
    /// The batch's arrays that the threads copy outputs into, by key
    /// (`stoker._map.place`): a dict made here, as no Python code may run on the
    /// consumer's thread between taking a batch and handing it over (a Ctrl-C landing
    /// there would lose the batch).
    rows: Py<PyDict>,
    indices: Arc<[usize]>,
    next: Arc<AtomicUsize>,
    epoch: u64,
    reply: Sender<(usize, PyResult<Py<PyAny>>)>,
    /// Raised when the consumer dropped this batch ([`InFlight`]): skip the rest.
    abandoned: Arc<AtomicBool>,
}

/// The map threads of one loader.
pub struct MapPool {
    threads: Arc<Threads>,
    skip: bool,
}

/// What stops a pool's threads: shared with [`LIVE`], so that the interpreter's exit
/// can stop them while their loader is still alive.
struct Threads {
    /// The process that started the threads: a forked child has this memory but not
    /// the threads (fork copies only the calling thread).
    pid: u32,
    stop: Arc<AtomicBool>,
    jobs: Mutex<Option<Sender<Job>>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl Threads {
    /// An error unless the threads run in this process.
    fn check_process(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(LoaderError::new_err(
                "this loader's map threads stayed in the process it was forked from: make \
                 the map loader in this process",
            ));
        }
        Ok(())
    }

    /// Stops the threads (jobs still queued are dropped unrun) and joins them; once.
    /// Call with the GIL released: a thread finishing a call of `fn` needs it.
    fn stop_and_join(self: &Arc<Self>) {
        self.stop.store(true, Ordering::SeqCst);
        if self.check_process().is_err() {
            // Joining would wait for threads this process does not have, and the
            // channel's other ends live in their stacks: leak all of it (memory only),
            // never to be dropped. Not even the locks are taken: a parent thread may
            // have held one at the fork, and no thread here would ever let it go.
            std::mem::forget(Arc::clone(self));
            return;
        }
        drop(
            self.jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let handles =
            std::mem::take(&mut *self.handles.lock().unwrap_or_else(PoisonError::into_inner));
        for h in handles {
            let _ = h.join();
        }
    }
}

/// Every pool not yet dropped. A thread that asks for the GIL once the interpreter is
/// finalizing is ended by Python mid-call (`pthread_exit`, which crashes when it
/// unwinds Rust frames), and a loader alive at exit is only dropped then, if at all.
static LIVE: Mutex<Vec<Weak<Threads>>> = Mutex::new(Vec::new());

/// Set by [`stop_map_threads`]: a pool made after it (by an `atexit` handler that runs
/// later, or a daemon thread) would run into the finalization it guards against.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Stops and joins the map threads of every loader still alive: `stoker` registers it
/// with `atexit`, which runs before the interpreter starts finalizing.
#[pyfunction]
pub fn stop_map_threads(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    let live: Vec<Arc<Threads>> =
        std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner))
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
    py.detach(move || {
        for t in live {
            t.stop_and_join();
        }
    });
}

/// What became of a wait for a batch's map.
pub enum MapOutcome {
    Done(Mapped),
    /// A signal handler raised (Ctrl-C) while waiting or collating: the batch is still
    /// being mapped, or its samples are back and kept, and may be waited for again.
    Interrupted(PyErr),
}

/// A batch handed to the map threads ([`MapPool::submit`]), and what has come back
/// of it. Dropping it tells the threads to leave its remaining samples unrun.
pub struct InFlight {
    batch: Py<PyDict>,
    rows: Py<PyDict>,
    indices: Vec<usize>,
    replies: Receiver<(usize, PyResult<Py<PyAny>>)>,
    outs: Vec<Option<PyResult<Py<PyAny>>>>,
    got: usize,
    abandoned: Arc<AtomicBool>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }
}

/// How one batch fared: the mapped batch (`None` when every sample was skipped) and
/// how many samples were skipped.
pub struct Mapped {
    pub batch: Option<Py<PyAny>>,
    pub skipped: usize,
}

impl MapPool {
    /// Starts `threads` threads running `func`; samples are seeded from `seed`. With
    /// `skip`, a sample whose call raises is left out and counted.
    pub fn new(
        py: Python<'_>,
        func: Py<PyAny>,
        threads: usize,
        seed: u64,
        skip: bool,
    ) -> PyResult<MapPool> {
        if EXITING.load(Ordering::SeqCst) {
            return Err(LoaderError::new_err(
                "Python is exiting: no map threads can be started now",
            ));
        }
        let run: Py<PyAny> = py.import("stoker._map")?.getattr("run")?.unbind();
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let pool = MapPool {
            threads: Arc::new(Threads {
                pid: std::process::id(),
                stop: Arc::new(AtomicBool::new(false)),
                jobs: Mutex::new(Some(tx)),
                handles: Mutex::new(Vec::with_capacity(threads)),
            }),
            skip,
        };
        // The memory of the mapped batches' arrays, reused from batch to batch.
        let buffers = Py::new(py, MapBuffers::new())?;
        {
            let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
            live.retain(|t| t.strong_count() > 0);
            live.push(Arc::downgrade(&pool.threads));
        }
        for id in 0..threads {
            let (rx, stop) = (rx.clone(), pool.threads.stop.clone());
            let (run, func) = (run.clone_ref(py), func.clone_ref(py));
            let buffers = buffers.clone_ref(py);
            let spawned = std::thread::Builder::new()
                .name(format!("stoker-map-{id}"))
                .spawn(move || map_thread(&rx, &stop, [run, func, buffers.into_any()], seed));
            match spawned {
                Ok(h) => pool.handles().push(h),
                Err(e) => {
                    // The threads already started need the GIL to end.
                    py.detach(move || drop(pool));
                    return Err(LoaderError::new_err(format!(
                        "cannot start map thread {id}: {e}"
                    )));
                }
            }
        }
        Ok(pool)
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.threads
            .handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Map threads running.
    pub fn threads(&self) -> usize {
        self.handles().iter().filter(|h| !h.is_finished()).count()
    }

    /// Hands every sample of `batch` (a loader batch as a dict; `indices` the source
    /// index of each sample) to the threads, which start on it once the batches
    /// handed over before it are taken. [`finish`](Self::finish) collects it.
    pub fn submit(
        &self,
        batch: Bound<'_, PyDict>,
        indices: Vec<usize>,
        epoch: u64,
    ) -> PyResult<InFlight> {
        self.threads.check_process()?;
        let rows = PyDict::new(batch.py()).unbind();
        let jobs = self
            .threads
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let jobs = jobs
            .as_ref()
            .ok_or_else(|| LoaderError::new_err("the map threads were stopped"))?;
        let n = indices.len();
        let (reply, replies) = crossbeam_channel::bounded(n);
        let abandoned = Arc::new(AtomicBool::new(false));
        let shared: Arc<[usize]> = indices.as_slice().into();
        let next = Arc::new(AtomicUsize::new(0));
        for _ in 0..self.handles().len().min(n) {
            let job = Job {
                batch: batch.clone().unbind(),
                rows: rows.clone_ref(batch.py()),
                indices: shared.clone(),
                next: next.clone(),
                epoch,
                reply: reply.clone(),
                abandoned: abandoned.clone(),
            };
            if jobs.send(job).is_err() {
                return Err(LoaderError::new_err("the map threads stopped"));
            }
        }
        Ok(InFlight {
            batch: batch.unbind(),
            rows,
            outs: (0..n).map(|_| None).collect(),
            indices,
            got: 0,
            replies,
            abandoned,
        })
    }

    /// Waits for the samples of `job` and collates them. `describe` names a sample
    /// for errors. A call that raised an `Exception` is a `stoker.LoaderError` naming
    /// the sample with the Python traceback (its cause the exception itself), or, with
    /// `skip`, leaves the sample out; any other `BaseException` is raised as it is. An
    /// interrupt while waiting or collating is raised at once and leaves `job` in
    /// flight, its results kept: finish it again to go on.
    pub fn finish(
        &self,
        py: Python<'_>,
        job: &mut InFlight,
        describe: &dyn Fn(usize) -> String,
    ) -> PyResult<MapOutcome> {
        // In a forked child no thread would ever answer: an error, not a wait for ever.
        self.threads.check_process()?;
        let n = job.indices.len();
        while job.got < n {
            let replies = &job.replies;
            match py.detach(|| replies.recv_timeout(POLL)) {
                Ok((pos, out)) => {
                    job.outs[pos] = Some(out);
                    job.got += 1;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        return Ok(MapOutcome::Interrupted(e));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(LoaderError::new_err(
                        "a map thread exited without a result (the loader is being dropped?)",
                    ))
                }
            }
        }
        // The results stay in `job` until the batch is collated: Ctrl-C lands in the
        // collation (Python code, where the interpreter runs signal handlers), and the
        // next call collates them again instead of losing the batch.
        let (indices, batch) = (&job.indices, job.batch.bind(py));
        let mut kept = Vec::with_capacity(n);
        let mut kept_indices = Vec::with_capacity(n);
        let mut skipped = 0;
        for (pos, out) in job.outs.iter().enumerate() {
            match out {
                Some(Ok(o)) => {
                    kept.push(o.clone_ref(py));
                    kept_indices.push(indices[pos]);
                }
                // KeyboardInterrupt, SystemExit: not something wrong with the sample,
                // so neither skipped nor wrapped, but raised as they are.
                Some(Err(e)) if !e.is_instance_of::<PyException>(py) => return Err(e.clone_ref(py)),
                Some(Err(_)) if self.skip => skipped += 1,
                Some(Err(e)) => {
                    return Err(sample_error(py, indices[pos], describe, e.clone_ref(py)))
                }
                None => return Err(LoaderError::new_err("a map result went missing")),
            }
        }
        if kept.is_empty() {
            return Ok(MapOutcome::Done(Mapped {
                batch: None,
                skipped,
            }));
        }
        let module = py.import("stoker._map");
        let collated = module.as_ref().map_err(|e| e.clone_ref(py)).and_then(|m| {
            m.getattr("collate")?.call1((
                PyList::new(py, &kept)?,
                PyList::new(py, &kept_indices)?,
                batch,
                skipped == 0,
                job.rows.bind(py),
            ))
        });
        match collated {
            Ok(b) => Ok(MapOutcome::Done(Mapped {
                batch: Some(b.unbind()),
                skipped,
            })),
            // A signal handler raised (Ctrl-C) during the collation: the batch is kept.
            Err(e) if !e.is_instance_of::<PyException>(py) => Ok(MapOutcome::Interrupted(e)),
            Err(e) => Err(collate_error(py, module.ok().as_ref(), e, describe)),
        }
    }
}

/// A `stoker.LoaderError` for map outputs that cannot be collated: naming the sample
/// (its index and what the source describes it as) that `stoker._map.MapOutputError`
/// names, the collation's own message, and that error as the cause.
fn collate_error(
    py: Python<'_>,
    module: Option<&Bound<'_, PyModule>>,
    e: PyErr,
    describe: &dyn Fn(usize) -> String,
) -> PyErr {
    let value = e.value(py);
    let ours = module
        .and_then(|m| m.getattr("MapOutputError").ok())
        .is_some_and(|t| value.is_instance(&t).unwrap_or(false));
    let index = ours
        .then(|| value.getattr("index").ok()?.extract::<usize>().ok())
        .flatten();
    let msg = value.str().map(|s| s.to_string()).unwrap_or_default();
    let text = match index {
        Some(i) => format!(
            "sample {i} ({}): map output cannot be collated into a batch: {msg}",
            describe(i)
        ),
        // Not the collation's own check (a bug in it, or out of memory): its class,
        // as its message alone may be empty.
        None => format!(
            "map output cannot be collated into a batch: {}: {msg}",
            e.get_type(py)
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ),
    };
    let err = LoaderError::new_err(text);
    err.set_cause(py, Some(e));
    err
}

/// A `stoker.LoaderError` for a call of `fn` that raised on sample `index`.
fn sample_error(
    py: Python<'_>,
    index: usize,
    describe: &dyn Fn(usize) -> String,
    e: PyErr,
) -> PyErr {
    // Before Python 3.12 the traceback travels beside the exception, not on it: put
    // it on, for the message and for the cause the user catches.
    if let Some(tb) = e.traceback(py) {
        let _ = e.value(py).setattr("__traceback__", tb);
    }
    let tb = py
        .import("stoker._map")
        .and_then(|m| m.getattr("describe")?.call1((e.value(py),)))
        .and_then(|s| s.extract::<String>())
        .unwrap_or_else(|_| e.to_string());
    let err = LoaderError::new_err(format!(
        "sample {index} ({}): map raised {tb}",
        describe(index)
    ));
    err.set_cause(py, Some(e));
    err
}

/// `python`: `stoker._map.run`, the map function and the loader's `MapBuffers`.
fn map_thread(rx: &Receiver<Job>, stop: &AtomicBool, python: [Py<PyAny>; 3], seed: u64) {
    let [run, func, buffers] = python;
    while let Ok(job) = rx.recv() {
        // Every Python object is used and released with the thread attached.
        Python::attach(|py| {
            let Job {
                batch,
                rows,
                indices,
                next,
                epoch,
                reply,
                abandoned,
            } = job;
            loop {
                let pos = next.fetch_add(1, Ordering::Relaxed);
                let Some(&index) = indices.get(pos) else {
                    break;
                };
                if stop.load(Ordering::SeqCst) || abandoned.load(Ordering::SeqCst) {
                    break;
                }
                let words = rng_words(seed, epoch, index);
                let out = run
                    .bind(py)
                    .call1((
                        func.bind(py),
                        batch.bind(py),
                        pos,
                        words,
                        rows.bind(py),
                        buffers.bind(py),
                    ))
                    .map(Bound::unbind);
                // The consumer may have gone (an interrupt): the result is dropped here.
                if let Err(back) = reply.send((pos, out)) {
                    drop(back);
                }
            }
            drop(batch);
            drop(rows);
        });
    }
    Python::attach(|py| {
        drop(run);
        drop(func);
        drop(buffers);
        let _ = py;
    });
}

/// The four words that seed sample `index`'s numpy generator: the start of its step
/// stream, the one a Rust step gets (`stoker_loader::step::step_rng`).
fn rng_words(seed: u64, epoch: u64, index: usize) -> [u64; 4] {
    let mut rng = stoker_loader::step::step_rng(seed, epoch, index as u64);
    [
        rng.next_u64(),
        rng.next_u64(),
        rng.next_u64(),
        rng.next_u64(),
    ]
}

/// The `numpy.random.Generator` a map gets for sample `index` of `epoch` under
/// `seed`: to redo one sample's draws outside the loader.
#[pyfunction]
pub fn map_rng<'py>(
    py: Python<'py>,
    seed: u64,
    epoch: u64,
    index: usize,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("stoker._map")?
        .getattr("rng_of")?
        .call1((rng_words(seed, epoch, index),))
}

impl Drop for MapPool {
    /// Stops and joins the threads. Call with the GIL released: a thread finishing a
    /// call of `fn` needs it.
    fn drop(&mut self) {
        self.threads.stop_and_join();
    }
}
