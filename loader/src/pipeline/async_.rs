//! Async mode: a tokio read stage, a pool of decode workers writing into batch slots,
//! an in-order collator and a bounded prefetch queue, each on its own thread(s).
//!
//! The read stage keeps io_depth reads in flight through
//! [`Source::read_async`](crate::Source::read_async): local sources read on tokio's blocking pool, remote
//! ones issue their requests on the storage runtime, so io_depth GETs wait on the
//! network without holding io_depth threads.
//!
//! Shutdown: dropping [`Running`] raises a flag, wakes the read stage (a watch
//! channel) and drops the prefetch queue's receiver; every stage then sees a closed
//! channel or the flag and returns, and the drop joins them all. Memory is bounded by
//! the buffer pool: the read stage cannot start a batch without a free buffer.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stoker_augment::retain::Retention;
use stoker_augment::Scratch;

use super::cache::Decoded;
use super::fields::FieldScratch;
use super::work::{Input, ReadSample};
use super::{tune, LoaderConfig, OnError, Shared};
use crate::metrics::add_time;
use crate::pool::{Pool, PooledBuf};
use crate::source::RecordKind;
use crate::{Batch, LoaderError};

/// A batch being filled by several workers at once.
struct InProgress {
    seq: u64,
    epoch: u64,
    step: usize,
    indices: Vec<usize>,
    /// Base of the buffer held in `buf`; each worker writes only its own slot.
    ptr: *mut u8,
    /// Length of that buffer: every slot written must lie inside it.
    len: usize,
    slot: usize,
    /// Bytes of one mask, and where the masks start (after every image slot).
    mask: usize,
    masks_at: usize,
    buf: Mutex<Option<PooledBuf>>,
    remaining: AtomicUsize,
    errors: Mutex<Vec<(usize, LoaderError)>>,
    /// The samples' fields, for a loader with fields.
    outs: Mutex<Vec<(usize, crate::sample::SampleFields)>>,
    /// A sample failed under `on_error = fail`: the batch is that error whatever the
    /// others hold, so the rest are neither read nor decoded (a dead store would
    /// otherwise cost a request's worst case per round of io_depth reads).
    failed: AtomicBool,
}

// SAFETY: `ptr` points into the heap buffer owned by `buf`, which is not touched
// (moved, freed or read) until `remaining` reaches zero. Until then each position is
// written by exactly one worker (the read stage sends each (batch, position) once),
// so writes never alias; the AcqRel decrement orders them before the collator's read.
unsafe impl Send for InProgress {}
unsafe impl Sync for InProgress {}

impl InProgress {
    /// # Safety
    /// Only one caller per `pos`, and only before the last `remaining` decrement.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot_mut(&self, pos: usize) -> &mut [u8] {
        // A wrong size anywhere upstream must stop here, not write past the buffer.
        let end = pos.checked_add(1).and_then(|n| n.checked_mul(self.slot));
        assert!(
            end.is_some_and(|end| end <= self.len),
            "batch slot {pos} of {} bytes lies outside the {}-byte buffer",
            self.slot,
            self.len
        );
        std::slice::from_raw_parts_mut(self.ptr.add(pos * self.slot), self.slot)
    }

    /// The mask slot of `pos` (empty without masks).
    ///
    /// # Safety
    /// As for [`slot_mut`](Self::slot_mut).
    #[allow(clippy::mut_from_ref)]
    unsafe fn mask_mut(&self, pos: usize) -> &mut [u8] {
        let start = pos
            .checked_mul(self.mask)
            .and_then(|n| n.checked_add(self.masks_at));
        let end = start.and_then(|s| s.checked_add(self.mask));
        assert!(
            end.is_some_and(|end| end <= self.len),
            "mask slot {pos} of {} bytes lies outside the {}-byte buffer",
            self.mask,
            self.len
        );
        std::slice::from_raw_parts_mut(self.ptr.add(self.masks_at + pos * self.mask), self.mask)
    }
}

/// One sample read and waiting to be decoded.
struct WorkItem {
    job: Arc<InProgress>,
    pos: usize,
    read: Result<RecordKind, LoaderError>,
    bytes: Vec<u8>,
    /// The sample's fields beyond image and class (empty for classification).
    ann: crate::Annotation,
    /// Not read because the batch had failed already: only counted as done.
    unread: bool,
    /// Found in the decoded cache, so not read (`read` is then `Ok` and unused).
    cached: Option<Arc<Decoded>>,
}

/// What the prefetch queue carries: a batch (or its error) and where it belongs.
struct Ready {
    epoch: u64,
    step: usize,
    batch: Result<Batch, LoaderError>,
}

/// The decode workers: the channel ends a new one needs, and one handle per worker
/// id (a worker whose id reaches the target count exits after its current sample).
struct Workers {
    shared: Arc<Shared>,
    work_rx: flume::Receiver<WorkItem>,
    recycle_tx: flume::Sender<Vec<u8>>,
    done_tx: crossbeam_channel::Sender<Arc<InProgress>>,
    stop: Arc<AtomicBool>,
    target: Arc<AtomicUsize>,
    handles: Vec<Option<JoinHandle<()>>>,
}

impl Workers {
    /// Runs workers `0..n`: starts the missing ones, and lowers the target so that
    /// those at or past `n` exit. Returns how many are alive (a thread the system
    /// refuses to start is left out).
    fn scale_to(&mut self, n: usize) -> usize {
        self.target.store(n, Ordering::SeqCst);
        for id in 0..n {
            if id >= self.handles.len() {
                self.handles.push(None);
            }
            let alive = self.handles[id].as_ref().is_some_and(|h| !h.is_finished());
            if alive {
                continue;
            }
            if let Some(old) = self.handles[id].take() {
                let _ = old.join();
            }
            let (shared, rx, rtx, dtx, stop, target) = (
                self.shared.clone(),
                self.work_rx.clone(),
                self.recycle_tx.clone(),
                self.done_tx.clone(),
                self.stop.clone(),
                self.target.clone(),
            );
            self.handles[id] = spawn(&format!("stoker-worker-{id}"), move || {
                worker(&shared, rx, rtx, dtx, &stop, id, &target)
            })
            .ok();
        }
        self.alive()
    }

    fn alive(&self) -> usize {
        self.handles
            .iter()
            .flatten()
            .filter(|h| !h.is_finished())
            .count()
    }

    /// Drops this side's channel ends (so the stages see them close) and joins every
    /// worker.
    fn stop(self) {
        let Workers {
            work_rx,
            recycle_tx,
            done_tx,
            handles,
            ..
        } = self;
        drop((work_rx, recycle_tx, done_tx));
        for h in handles.into_iter().flatten() {
            let _ = h.join();
        }
    }
}

/// A running async pipeline.
pub(crate) struct Running {
    ready_rx: Option<crossbeam_channel::Receiver<Ready>>,
    shutdown: Arc<AtomicBool>,
    wake_tx: tokio::sync::watch::Sender<bool>,
    handles: Vec<JoinHandle<()>>,
    workers: Option<Workers>,
    tuner: tune::Tuner,
    prefetch: usize,
    /// The (epoch, batch) delivered next; `None` once epoch `u64::MAX`, after which
    /// there is no epoch, was delivered whole.
    next_expected: Option<(u64, usize)>,
    /// When the wait for the next batch began, if it was cut short by a deadline.
    wait_started: Option<Instant>,
    /// Batches ready in the queue when the consumer asked for the current one.
    queued_at_ask: usize,
    shared: Arc<Shared>,
    pool: Pool,
    /// The process whose threads these are (see `Drop`).
    pid: u32,
    /// Why the read or collate stage stopped for good, if it did. Their channels stay
    /// open (the workers keep a sender to spawn more), so the consumer would otherwise
    /// wait for ever for a batch that cannot come.
    fatal: Fatal,
}

/// A stage's fatal error, for the consumer.
type Fatal = Arc<Mutex<Option<LoaderError>>>;

/// How often a wait for a batch looks at [`Running::fatal`].
const FATAL_CHECK: Duration = Duration::from_millis(100);

/// Runs a stage's body; a panic in it (a bug) becomes its fatal error.
fn guarded(stage: &str, fatal: &Fatal, body: impl FnOnce() -> Result<(), LoaderError>) {
    let err = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(p) => LoaderError::from_panic(format!("running the {stage} stage"), p),
    };
    if let Ok(mut f) = fatal.lock() {
        f.get_or_insert(err);
    }
}

impl Running {
    pub fn start(
        shared: Arc<Shared>,
        pool: Pool,
        cfg: &LoaderConfig,
        epoch: u64,
        step: usize,
    ) -> Result<Running, LoaderError> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let (wake_tx, wake_rx) = tokio::sync::watch::channel(false);
        let max_workers = cfg.max_workers();
        let (work_tx, work_rx) = flume::bounded::<WorkItem>(cfg.io_depth + 2 * max_workers);
        let (recycle_tx, recycle_rx) = flume::bounded::<Vec<u8>>(cfg.io_depth + 3 * max_workers);
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Arc<InProgress>>();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<Ready>(cfg.prefetch);
        let mut handles = Vec::new();
        let mut refused = None;
        let fatal = Fatal::default();

        let reader = ReadStage {
            shared: shared.clone(),
            pool: pool.clone(),
            // After a restart, auto's choice so far.
            io_depth: shared.auto.as_ref().map_or(cfg.io_depth, |a| a.io_depth()),
            last_epoch: cfg.last_epoch,
            work_tx,
            recycle_rx,
            wake_rx,
        };
        let read_fatal = fatal.clone();
        match spawn("stoker-read", move || {
            guarded("read", &read_fatal, || reader.run(epoch, step))
        }) {
            Ok(h) => handles.push(h),
            Err(e) => refused = Some(e),
        }
        let mut workers = Workers {
            shared: shared.clone(),
            work_rx,
            recycle_tx,
            done_tx,
            stop: shutdown.clone(),
            target: Arc::new(AtomicUsize::new(0)),
            handles: Vec::new(),
        };
        if workers.scale_to(
            shared
                .auto
                .as_ref()
                .map_or(cfg.workers.min(), |a| a.workers()),
        ) == 0
        {
            refused.get_or_insert_with(|| {
                LoaderError::Stopped("cannot start any decode worker thread".into())
            });
        }
        let collator_shared = shared.clone();
        let collate_fatal = fatal.clone();
        match spawn("stoker-collate", move || {
            guarded("collate", &collate_fatal, || {
                collate(&collator_shared, done_rx, &ready_tx);
                Ok(())
            });
            // Closed only now, so that the consumer finds a panic's error in `fatal`
            // when it sees the channel close.
            drop(ready_tx);
        }) {
            Ok(h) => handles.push(h),
            Err(e) => refused = Some(e),
        }
        let running = Running {
            ready_rx: Some(ready_rx),
            shutdown,
            wake_tx,
            handles,
            workers: Some(workers),
            tuner: tune::Tuner::new(&shared.counters),
            prefetch: cfg.prefetch,
            next_expected: Some((epoch, step)),
            wait_started: None,
            queued_at_ask: 0,
            shared,
            pool,
            pid: std::process::id(),
            fatal,
        };
        // Dropping it stops whatever did start.
        match refused {
            Some(e) => Err(e),
            None => Ok(running),
        }
    }

    /// The (epoch, batch) this pipeline will deliver next, if any.
    pub fn next_expected(&self) -> Option<(u64, usize)> {
        self.next_expected
    }

    /// Batches in the prefetch queue now.
    pub fn batches_ready(&self) -> usize {
        self.ready_rx.as_ref().map_or(0, |rx| rx.len())
    }

    pub fn threads(&self) -> usize {
        self.handles.iter().filter(|h| !h.is_finished()).count()
            + self.workers.as_ref().map_or(0, Workers::alive)
    }

    /// Waits for the next batch, which must be (epoch, step) of an epoch of
    /// `epoch_len` batches; `None` if `deadline` passed first (ask again to go on
    /// waiting for the same batch).
    pub fn next_batch(
        &mut self,
        epoch: u64,
        step: usize,
        epoch_len: usize,
        deadline: Option<Instant>,
    ) -> Option<Result<Batch, LoaderError>> {
        let Some(rx) = &self.ready_rx else {
            return Some(Err(LoaderError::Stopped(
                "the pipeline was shut down".into(),
            )));
        };
        let counters = &self.shared.counters;
        // A wait cut into several by a deadline is still one wait: count the queue
        // and check for starvation once, and trace it as one span.
        let t0 = match self.wait_started {
            Some(t) => t,
            None => {
                self.queued_at_ask = rx.len();
                counters
                    .queue_len_sum
                    .fetch_add(rx.len() as u64, Ordering::Relaxed);
                counters.queue_len_samples.fetch_add(1, Ordering::Relaxed);
                // Holding every buffer would starve the producer forever.
                self.pool.grow_if_starved();
                Instant::now()
            }
        };
        let t1 = Instant::now();
        let got = loop {
            // Batches queued before a stage failed still come first.
            let check = Instant::now() + FATAL_CHECK;
            let fatal = || self.fatal.lock().ok().and_then(|mut f| f.take());
            match rx.recv_deadline(deadline.map_or(check, |d| d.min(check))) {
                Ok(r) => break Ok(r),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break Err(fatal()),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if let Some(e) = fatal() {
                        break Err(Some(e));
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        add_time(&counters.wait_ns, t1.elapsed());
                        self.wait_started = Some(t0);
                        return None;
                    }
                }
            }
        };
        add_time(&counters.wait_ns, t1.elapsed());
        self.wait_started = None;
        if let Some(tr) = &self.shared.trace {
            tr.span("wait", t0, Some(serde_json::json!({ "step": step })));
        }
        let ready = match got {
            Ok(ready) => ready,
            Err(Some(e)) => return Some(Err(e)),
            Err(None) => {
                return Some(Err(LoaderError::Stopped(
                    "a pipeline thread exited without reporting an error".into(),
                )))
            }
        };
        if (ready.epoch, ready.step) != (epoch, step) {
            return Some(Err(LoaderError::Stopped(format!(
                "expected epoch {epoch} batch {step}, got epoch {} batch {}",
                ready.epoch, ready.step
            ))));
        }
        self.next_expected = if step + 1 < epoch_len {
            Some((epoch, step + 1))
        } else {
            epoch.checked_add(1).map(|e| (e, 0))
        };
        if let Some(auto) = self.shared.auto.clone() {
            let wait = t0.elapsed();
            if let Some(n) = self.tuner.on_batch(
                &auto,
                &self.shared.counters,
                wait,
                self.queued_at_ask,
                self.prefetch,
            ) {
                if let Some(w) = self.workers.as_mut() {
                    w.scale_to(n);
                }
            }
            if step + 1 >= epoch_len {
                // One epoch is enough to see the stage rates; a fixed count from here
                // on keeps later epochs' timing comparable.
                auto.freeze();
            }
        }
        Some(ready.batch)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // A forked child holds a copy of this pipeline but none of its threads:
            // joining them would wait forever, and the channels' locks may have been
            // held by them at the fork. Leak all of it (memory only, in the child).
            std::mem::forget(self.ready_rx.take());
            std::mem::forget(self.workers.take());
            std::mem::forget(std::mem::take(&mut self.handles));
            let (fresh, _) = tokio::sync::watch::channel(true);
            std::mem::forget(std::mem::replace(&mut self.wake_tx, fresh));
            return;
        }
        self.shutdown.store(true, Ordering::SeqCst);
        let _ = self.wake_tx.send(true);
        // Batches still queued go back to the pool as the receiver drops them.
        self.ready_rx = None;
        if let Some(w) = self.workers.take() {
            w.stop();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A pipeline thread; the system may refuse one (a thread or memory limit), which is
/// an error for the consumer, not a panic.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, LoaderError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|source| LoaderError::Spawn {
            name: name.to_string(),
            source,
        })
}

/// The read stage: walks the plan epoch after epoch, takes a free buffer for each
/// batch, and reads its samples with `io_depth` reads in flight (more when
/// `workers = auto` raises it).
struct ReadStage {
    shared: Arc<Shared>,
    pool: Pool,
    io_depth: usize,
    last_epoch: Option<u64>,
    work_tx: flume::Sender<WorkItem>,
    recycle_rx: flume::Receiver<Vec<u8>>,
    wake_rx: tokio::sync::watch::Receiver<bool>,
}

impl ReadStage {
    fn run(self, epoch: u64, step: usize) -> Result<(), LoaderError> {
        let counter = AtomicUsize::new(0);
        // Local sources read on the blocking pool, one thread per read in flight.
        let most = self
            .shared
            .auto
            .as_ref()
            .map_or(self.io_depth, |a| a.io_cap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(most)
            .thread_name_fn(move || {
                format!("stoker-io-{}", counter.fetch_add(1, Ordering::Relaxed))
            })
            .build();
        let rt = rt.map_err(|e| {
            LoaderError::Stopped(format!("cannot start the read stage's runtime: {e}"))
        })?;
        rt.block_on(self.dispatch(epoch, step));
        Ok(())
    }

    async fn dispatch(mut self, mut epoch: u64, mut step: usize) {
        let sem = Arc::new(tokio::sync::Semaphore::new(self.io_depth));
        // Permits handed to the semaphore so far: io_depth, and what auto added.
        let mut granted = self.io_depth;
        let mut seq = 0u64;
        let slot = self.shared.slot_bytes();
        let pool = self.pool.clone();
        loop {
            if self.last_epoch.is_some_and(|last| epoch > last) {
                self.finish_reads(&sem, granted).await;
                return;
            }
            let plan = self.shared.plan(epoch);
            while step < plan.len() {
                let Some(mut buf) = self.wait(pool.acquire_async()).await else {
                    return;
                };
                let indices = plan.batch(step).to_vec();
                let n = indices.len();
                let job = Arc::new(InProgress {
                    seq,
                    epoch,
                    step,
                    ptr: buf.as_mut_slice().as_mut_ptr(),
                    len: buf.as_slice().len(),
                    slot,
                    mask: self.shared.mask_bytes(),
                    masks_at: self.shared.masks_offset(),
                    buf: Mutex::new(Some(buf)),
                    remaining: AtomicUsize::new(n),
                    errors: Mutex::new(Vec::new()),
                    outs: Mutex::new(Vec::new()),
                    failed: AtomicBool::new(false),
                    indices,
                });
                for pos in 0..n {
                    if job.failed.load(Ordering::Relaxed) {
                        if !self.skip_read(&job, pos).await {
                            return;
                        }
                        continue;
                    }
                    // A cached sample needs no read, so no read permit either.
                    if let Some(d) = self.shared.lookup(job.indices[pos]) {
                        if !self.send_cached(&job, pos, d).await {
                            return;
                        }
                        continue;
                    }
                    if let Some(auto) = &self.shared.auto {
                        let want = auto.io_depth();
                        if want > granted {
                            sem.add_permits(want - granted);
                            granted = want;
                        }
                    }
                    let Some(Ok(permit)) = self.wait(sem.clone().acquire_owned()).await else {
                        return;
                    };
                    // The wait for a permit is where an earlier read's failure shows.
                    if job.failed.load(Ordering::Relaxed) {
                        drop(permit);
                        if !self.skip_read(&job, pos).await {
                            return;
                        }
                        continue;
                    }
                    let bytes = self.recycle_rx.try_recv().unwrap_or_default();
                    let (job, shared, tx) =
                        (job.clone(), self.shared.clone(), self.work_tx.clone());
                    tokio::spawn(async move {
                        let index = job.indices[pos];
                        let ann = crate::Annotation::default();
                        let (read, bytes, ann) = shared.read_async(index, bytes, ann).await;
                        if read.is_err() && shared.on_error == OnError::Fail {
                            job.failed.store(true, Ordering::Relaxed);
                        }
                        // Fails only when the workers are gone (shutdown).
                        let _ = tx
                            .send_async(WorkItem {
                                job,
                                pos,
                                read,
                                bytes,
                                ann,
                                unread: false,
                                cached: None,
                            })
                            .await;
                        // Held until the sample is handed on, so that holding every
                        // permit means no read is in flight.
                        drop(permit);
                    });
                }
                seq += 1;
                step += 1;
            }
            // Epochs are numbered up to u64::MAX: after that one there is none to
            // prepare, and the consumer gets every batch of it.
            let Some(next) = epoch.checked_add(1) else {
                self.finish_reads(&sem, granted).await;
                return;
            };
            epoch = next;
            step = 0;
        }
    }

    /// Waits until the reads in flight have handed on their samples (each holds one of
    /// the `granted` permits), or shutdown: returning drops the runtime, which would
    /// cancel them and leave their batches unfinished.
    async fn finish_reads(&mut self, sem: &tokio::sync::Semaphore, granted: usize) {
        let all = u32::try_from(granted).unwrap_or(u32::MAX);
        let _ = self.wait(sem.acquire_many(all)).await;
    }

    /// Hands on position `pos` of a batch that failed already, unread (so that the
    /// batch completes as soon as its reads in flight do); false on shutdown.
    async fn skip_read(&mut self, job: &Arc<InProgress>, pos: usize) -> bool {
        let tx = self.work_tx.clone();
        let item = WorkItem {
            job: job.clone(),
            pos,
            read: Err(LoaderError::Stopped("not read".into())),
            bytes: Vec::new(),
            ann: crate::Annotation::default(),
            unread: true,
            cached: None,
        };
        matches!(self.wait(tx.send_async(item)).await, Some(Ok(())))
    }

    /// Hands on position `pos` of a batch with its sample from the decoded cache;
    /// false on shutdown.
    async fn send_cached(&mut self, job: &Arc<InProgress>, pos: usize, d: Arc<Decoded>) -> bool {
        let tx = self.work_tx.clone();
        let item = WorkItem {
            job: job.clone(),
            pos,
            read: Ok(RecordKind::Encoded),
            bytes: self.recycle_rx.try_recv().unwrap_or_default(),
            ann: crate::Annotation::default(),
            unread: false,
            cached: Some(d),
        };
        matches!(self.wait(tx.send_async(item)).await, Some(Ok(())))
    }

    /// Runs `fut` unless shutdown is signalled first.
    async fn wait<T>(&mut self, fut: impl std::future::Future<Output = T>) -> Option<T> {
        if *self.wake_rx.borrow() {
            return None;
        }
        tokio::select! {
            v = fut => Some(v),
            _ = self.wake_rx.changed() => None,
        }
    }
}

fn worker(
    shared: &Shared,
    rx: flume::Receiver<WorkItem>,
    recycle: flume::Sender<Vec<u8>>,
    done: crossbeam_channel::Sender<Arc<InProgress>>,
    stop: &AtomicBool,
    id: usize,
    target: &AtomicUsize,
) {
    let mut scratch = Scratch::default();
    let mut fields = FieldScratch::default();
    // Read buffers circulate between the read stage and the workers; one that held an
    // outlier is shrunk before it goes back (see stoker_augment::retain).
    let mut retention = Retention::default();
    while let Ok(item) = rx.recv() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let WorkItem {
            job,
            pos,
            read,
            bytes,
            ann,
            unread,
            cached,
        } = item;
        let index = job.indices[pos];
        // A batch that failed already under `fail` is that error: nothing to decode,
        // and nothing more to record (its first error is recorded).
        let doomed = shared.on_error == OnError::Fail && job.failed.load(Ordering::Relaxed);
        let res = if unread || (doomed && read.is_ok()) {
            Ok(())
        } else {
            read.and_then(|kind| {
                let input = match &cached {
                    Some(d) => Input::Cached(d),
                    None => Input::Read {
                        kind,
                        bytes: &bytes,
                        ann: &ann,
                    },
                };
                let sample = ReadSample {
                    epoch: job.epoch,
                    index,
                    input,
                };
                // SAFETY: this worker is the only one given (job, pos). The bounds
                // assert's panic becomes an error ending the epoch, not a lost worker.
                let place = |p| LoaderError::from_panic("placing a sample in its batch".into(), p);
                let slot = catch_unwind(AssertUnwindSafe(|| unsafe { job.slot_mut(pos) }))
                    .map_err(place)?;
                if shared.fields.is_none() {
                    return shared.decode(&sample, &mut scratch, slot);
                }
                // SAFETY: as above, for the mask plane.
                let mask = catch_unwind(AssertUnwindSafe(|| unsafe { job.mask_mut(pos) }))
                    .map_err(place)?;
                let out = shared.decode_sample(sample, &mut scratch, &mut fields, slot, mask)?;
                if let Ok(mut outs) = job.outs.lock() {
                    outs.push((pos, out));
                }
                Ok(())
            })
        };
        if let Err(e) = res {
            if shared.on_error == OnError::Fail {
                job.failed.store(true, Ordering::Relaxed);
            }
            if let Ok(mut errs) = job.errors.lock() {
                errs.push((pos, e));
            }
        }
        let mut bytes = bytes;
        retention.note(bytes.len());
        retention.trim(&mut bytes);
        let _ = recycle.try_send(bytes);
        if job.remaining.fetch_sub(1, Ordering::AcqRel) == 1 && done.send(job).is_err() {
            return;
        }
        // Scaled down (workers = auto): leave between samples, so nothing is lost.
        if id >= target.load(Ordering::SeqCst) {
            return;
        }
    }
}

fn collate(
    shared: &Shared,
    done: crossbeam_channel::Receiver<Arc<InProgress>>,
    ready: &crossbeam_channel::Sender<Ready>,
) {
    let mut pending = BTreeMap::new();
    let mut next = 0u64;
    while let Ok(job) = done.recv() {
        pending.insert(job.seq, job);
        while let Some(job) = pending.remove(&next) {
            let t0 = Instant::now();
            let out = catch_unwind(AssertUnwindSafe(|| finish_job(shared, &job)))
                .unwrap_or_else(|p| Err(LoaderError::from_panic("collating a batch".into(), p)));
            add_time(&shared.counters.collate_ns, t0.elapsed());
            if let Some(tr) = &shared.trace {
                tr.span("collate", t0, Some(serde_json::json!({ "step": job.step })));
            }
            let item = Ready {
                epoch: job.epoch,
                step: job.step,
                batch: out,
            };
            if ready.send(item).is_err() {
                return;
            }
            next += 1;
        }
    }
}

fn finish_job(shared: &Shared, job: &InProgress) -> Result<Batch, LoaderError> {
    let buf = job
        .buf
        .lock()
        .ok()
        .and_then(|mut b| b.take())
        .ok_or_else(|| LoaderError::Stopped("batch buffer missing".into()))?;
    let errors = job
        .errors
        .lock()
        .map(|mut e| std::mem::take(&mut *e))
        .unwrap_or_default();
    let outs = job
        .outs
        .lock()
        .map(|mut o| std::mem::take(&mut *o))
        .unwrap_or_default();
    shared.finish(buf, job.epoch, job.step, job.indices.clone(), errors, outs)
}
