//! End-to-end tests of the pipeline engine on in-memory sources: determinism across
//! modes and worker counts, resume, bounded memory, error policy, panics, shutdown.

use crate::engine_support;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use engine_support::RawSource;
use stoker_augment::Pipeline;
use stoker_loader::{
    Cursor, Digest, Loader, LoaderConfig, LoaderError, Mode, Next, OnError, Setting, Source,
};

fn config(mode: Mode, workers: usize, spec: &str) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        prefetch: 2,
        io_depth: 4,
        seed: 42,
        transform: Pipeline::parse(spec).expect("spec"),
        ..LoaderConfig::default()
    }
}

/// Digest of each batch of `epochs`, so a mismatch says which batch.
fn digests(src: Arc<dyn Source>, cfg: LoaderConfig, epochs: u64) -> Vec<String> {
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            let b = b.expect("batch");
            let mut d = Digest::new();
            d.update(&b);
            out.push(d.hex());
        }
    }
    out
}

#[test]
fn batches_are_identical_across_modes_and_workers() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(45, 16));
    let spec = "rrc:8,flip";
    let reference = digests(src.clone(), config(Mode::Sync, 1, spec), 2);
    assert_eq!(reference.len(), 2 * 6);
    for workers in [1, 2, 3] {
        let got = digests(src.clone(), config(Mode::Async, workers, spec), 2);
        assert_eq!(
            got, reference,
            "async with {workers} workers differs from sync"
        );
    }
    // The augmentation really is random: another seed gives other bytes.
    let other = digests(
        src,
        LoaderConfig {
            seed: 43,
            ..config(Mode::Sync, 1, spec)
        },
        1,
    );
    assert_ne!(other[..], reference[..6]);
}

#[test]
fn identity_transform_delivers_source_pixels_in_plan_order() {
    let raw = Arc::new(RawSource::new(20, 4));
    let src: Arc<dyn Source> = raw.clone();
    let mut loader = Loader::new(src, config(Mode::Async, 2, "")).expect("loader");
    let mut seen = Vec::new();
    for b in loader.epoch(3) {
        let b = b.expect("batch");
        for (i, &index) in b.indices.iter().enumerate() {
            assert_eq!(b.image(i), &raw.pixels(index)[..], "sample {index}");
            assert_eq!(b.labels[i], (index % 3) as u32);
        }
        seen.extend(b.indices.iter().copied());
    }
    let sampler = loader.config().sampler();
    assert_eq!(seen, sampler.indices(20, 3));
}

#[test]
fn resume_yields_the_rest_of_an_uninterrupted_epoch() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(50, 12));
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = config(mode, 2, "rrc:6,flip");
        let full = digests(src.clone(), cfg.clone(), 2);
        // Stop after 3 batches of epoch 1, save the state, resume in a new loader.
        let mut first = Loader::new(src.clone(), cfg.clone()).expect("loader");
        let mut got: Vec<String> = Vec::new();
        for b in first.epoch(0) {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            got.push(d.hex());
        }
        let mut ep = first.epoch(1);
        for _ in 0..3 {
            let mut d = Digest::new();
            d.update(&ep.next().expect("some").expect("batch"));
            got.push(d.hex());
        }
        let state = ep.state();
        assert_eq!((state.epoch, state.next_batch), (1, 3));
        drop(first);
        let json = state.to_json();
        let restored = stoker_loader::LoaderState::from_json(&json).expect("json");
        let mut second = Loader::new(src.clone(), cfg.clone()).expect("loader");
        for b in second.resume(&restored).expect("resume") {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            got.push(d.hex());
        }
        assert_eq!(got, full, "{mode} resume differs");
        // Another batch size takes over the rest of the epoch: the samples the first
        // three batches did not take, each once (docs/loader-engine.md, elastic resume).
        let mut other = Loader::new(
            src.clone(),
            LoaderConfig {
                batch_size: 5,
                ..cfg.clone()
            },
        )
        .expect("loader");
        let mut rest: Vec<usize> = other
            .resume(&restored)
            .expect("taken over")
            .flat_map(|b| b.expect("batch").indices)
            .collect();
        let mut plain = Loader::new(src.clone(), cfg).expect("loader");
        let mut want = plain.start_epoch(1).indices()[3 * 8..].to_vec();
        rest.sort_unstable();
        want.sort_unstable();
        assert_eq!(rest, want);
    }
}

#[test]
fn memory_stays_bounded_over_ten_epochs() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(64, 8));
    let cfg = config(Mode::Async, 2, "flip");
    let mut loader = Loader::new(src, cfg).expect("loader");
    let bound = loader.memory_bound_bytes();
    assert_eq!(bound, (2 + 2 + 1) * 8 * 8 * 8 * 3);
    for e in 0..10 {
        let n: usize = loader.epoch(e).map(|b| b.expect("batch").len()).sum();
        assert_eq!(n, 64);
    }
    assert!(loader.peak_buffer_bytes() <= bound);
    assert!(loader.buffers_allocated() <= 5);
    assert_eq!(loader.pool_grown(), 0);
    // Consecutive epochs ran on one pipeline: no restart, no refill pause.
    assert_eq!(loader.pipeline_starts(), 1);
    assert!(loader.metrics().samples >= 640);
}

#[test]
fn a_consumer_that_keeps_every_batch_does_not_hang() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(100, 4));
    let mut loader = Loader::new(src, config(Mode::Async, 2, "")).expect("loader");
    let all: Vec<_> = loader.epoch(0).collect::<Result<_, _>>().expect("epoch");
    assert_eq!(all.len(), 13);
    assert!(
        loader.pool_grown() > 0,
        "the pool had to grow to avoid a deadlock"
    );
}

#[test]
fn a_bad_sample_fails_with_its_name_or_is_skipped_and_counted() {
    let source = |fail: Vec<usize>| {
        let mut raw = RawSource::new(30, 4);
        raw.fail = fail;
        Arc::new(raw)
    };
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = LoaderConfig {
            shuffle: false,
            ..config(mode, 2, "")
        };
        let src: Arc<dyn Source> = source(vec![12, 17]);
        let mut loader = Loader::new(src, cfg.clone()).expect("loader");
        let results: Vec<_> = loader.epoch(0).collect();
        assert!(results[0].is_ok());
        let err = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .expect("an error");
        let msg = err.to_string();
        assert!(
            msg.contains("mem record 12") && msg.contains("injected failure"),
            "{msg}"
        );
        assert_eq!(results.len(), 2, "the epoch ends at the error");

        // A bad first sample: under `fail` the loader cannot start (and says why);
        // under `skip` it sizes batches from the next sample and leaves it out.
        let raw = source(vec![0, 12, 17]);
        let src: Arc<dyn Source> = raw.clone();
        let err = Loader::new(src.clone(), cfg.clone())
            .err()
            .expect("an error");
        assert!(err.to_string().contains("mem record 0"), "{err}");
        let mut loader = Loader::new(
            src,
            LoaderConfig {
                on_error: OnError::Skip,
                ..cfg
            },
        )
        .expect("loader");
        let mut seen = Vec::new();
        for b in loader.epoch(0) {
            let b = b.expect("skip policy yields batches");
            for (i, &index) in b.indices.iter().enumerate() {
                assert_eq!(b.image(i), &raw.pixels(index)[..]);
            }
            seen.extend(b.indices);
        }
        let expected: Vec<usize> = (1..30).filter(|i| *i != 12 && *i != 17).collect();
        assert_eq!(seen, expected, "{mode}");
        assert_eq!(loader.metrics().skipped, 3);
    }
}

#[test]
fn skip_never_yields_a_batch_of_zero_samples() {
    // Batches of 8 in order: batch 1 (samples 8..16) is bad throughout, and so is the
    // last batch (24..30).
    let mut raw = RawSource::new(30, 4);
    raw.fail = (8..16).chain(24..30).collect();
    let raw = Arc::new(raw);
    let mut want = None;
    for (mode, workers) in [(Mode::Sync, 0), (Mode::Async, 1), (Mode::Async, 3)] {
        let cfg = LoaderConfig {
            shuffle: false,
            on_error: OnError::Skip,
            ..config(mode, workers, "")
        };
        let mut loader = Loader::new(raw.clone(), cfg).expect("loader");
        let mut got = Vec::new();
        let mut epoch = loader.epoch(0);
        let mut states = Vec::new();
        while let Some(b) = epoch.next() {
            let b = b.expect("batch");
            assert!(!b.indices.is_empty(), "{mode}: a batch of zero samples");
            got.push((b.step, b.indices.clone()));
            states.push(epoch.state().next_batch);
        }
        // The next batch of the plan comes in the empty one's place; the epoch ends
        // without the empty last batch.
        assert_eq!(
            got,
            [(0, (0..8).collect::<Vec<_>>()), (2, (16..24).collect())],
            "{mode}"
        );
        assert_eq!(
            states,
            [1, 3],
            "{mode}: the state moves past the skipped batch"
        );
        assert_eq!(loader.metrics().skipped, 14, "{mode}");
        assert_eq!(loader.metrics().batches, 2, "{mode}");
        // Resuming after the first batch gives the same rest, in every mode.
        let state = loader.state_at(0, 1);
        let rest: Vec<_> = loader
            .resume(&state)
            .unwrap()
            .map(|b| b.unwrap().step)
            .collect();
        assert_eq!(rest, [2], "{mode}");
        match &want {
            None => want = Some(got),
            Some(w) => assert_eq!(&got, w, "{mode}"),
        }
    }
}

#[test]
fn a_state_from_another_data_set_of_the_same_size_is_refused() {
    let cfg = config(Mode::Sync, 0, "");
    let a: Arc<dyn Source> = Arc::new(RawSource::new(30, 4));
    let mut other = RawSource::new(30, 4);
    other.label_offset = 1;
    let b: Arc<dyn Source> = Arc::new(other);
    let la = Loader::new(a.clone(), cfg.clone()).expect("loader");
    let mut lb = Loader::new(b, cfg.clone()).expect("loader");
    let state = la.state_at(0, 1);
    assert_eq!(state.samples, 30);
    let e = lb.resume(&state).err().expect("refused").to_string();
    assert!(e.contains("another data set"), "{e}");
    // The same data again (another loader, say after a restart) resumes, as does a
    // state saved before states carried a fingerprint.
    let mut again = Loader::new(a, cfg).expect("loader");
    assert!(again.resume(&state).is_ok());
    let old = stoker_loader::LoaderState {
        fingerprint: None,
        ..state.clone()
    };
    assert!(lb.resume(&old).is_ok());
    let json = state.to_json();
    assert!(json.contains("fingerprint"), "{json}");
    assert_eq!(stoker_loader::LoaderState::from_json(&json).unwrap(), state);
}

#[test]
fn a_panic_in_the_pipeline_ends_the_epoch_with_an_error() {
    for mode in [Mode::Sync, Mode::Async] {
        let mut raw = RawSource::new(40, 4);
        raw.panic = vec![9];
        let src: Arc<dyn Source> = Arc::new(raw);
        let cfg = LoaderConfig {
            shuffle: false,
            on_error: OnError::Skip,
            ..config(mode, 2, "")
        };
        let mut loader = Loader::new(src, cfg).expect("loader");
        let t0 = Instant::now();
        let results: Vec<_> = loader.epoch(0).collect();
        assert!(t0.elapsed() < Duration::from_secs(20));
        let err = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .expect("error");
        assert!(
            matches!(err, LoaderError::Panic { .. }) && err.to_string().contains("injected panic"),
            "{mode}: {err}"
        );
        // The next epoch starts a fresh pipeline and fails the same way, not hangs.
        let again: Vec<_> = loader.epoch(1).collect();
        assert!(again.iter().any(|r| r.is_err()));
    }
}

#[test]
fn dropping_a_loader_mid_epoch_stops_every_thread() {
    let raw = Arc::new(RawSource::new(10_000, 16));
    let src: Arc<dyn Source> = raw.clone();
    let mut loader = Loader::new(src.clone(), config(Mode::Async, 3, "flip")).expect("loader");
    {
        let mut ep = loader.epoch(0);
        ep.next().expect("some").expect("batch");
    }
    assert!(loader.threads() >= 5);
    let t0 = Instant::now();
    drop(loader);
    assert!(t0.elapsed() < Duration::from_secs(10), "drop took too long");
    // Every pipeline thread held a reference to the source; all are gone, so nothing
    // can read after the drop (no need to watch for reads a while).
    drop(src);
    assert_eq!(Arc::strong_count(&raw), 1);
    let reads = raw.reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(reads < 10_000, "the pipeline stopped early, not at the end");
}

#[test]
fn bad_configurations_are_errors() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(10, 4));
    let bad = [
        LoaderConfig {
            batch_size: 0,
            ..LoaderConfig::default()
        },
        LoaderConfig {
            workers: stoker_loader::Workers::Fixed(0),
            ..LoaderConfig::default()
        },
        LoaderConfig {
            rank: 2,
            world_size: 2,
            ..LoaderConfig::default()
        },
        LoaderConfig {
            batch_size: 11,
            drop_last: true,
            ..LoaderConfig::default()
        },
        LoaderConfig {
            channels: Some(2),
            ..LoaderConfig::default()
        },
    ];
    // Each error names the setting to change, as a value the front ends spell.
    let named = [
        Setting::BatchSize,
        Setting::Workers,
        Setting::Rank,
        Setting::DropLast,
        Setting::Channels,
    ];
    for (cfg, want) in bad.into_iter().zip(named) {
        match Loader::new(src.clone(), cfg) {
            Err(LoaderError::Setting(e)) => assert_eq!(e.setting, want, "{e}"),
            Err(e) => panic!("{want}: another error: {e}"),
            Ok(_) => panic!("{want}: accepted"),
        }
    }
}

#[test]
fn distributed_ranks_split_each_epoch() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(37, 4));
    let mut all = Vec::new();
    for rank in 0..3 {
        let cfg = LoaderConfig {
            rank,
            world_size: 3,
            shard_policy: stoker_loader::ShardPolicy::Drop,
            ..config(Mode::Async, 1, "")
        };
        let mut loader = Loader::new(src.clone(), cfg).expect("loader");
        for b in loader.epoch(2) {
            all.extend(b.expect("batch").indices);
        }
    }
    assert_eq!(all.len(), 36);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 36, "ranks overlap");
}

/// Exact shards (for evaluation) visit every sample once, and a rank past the end of a
/// small data set gets an empty epoch in either mode instead of an error.
#[test]
fn exact_shards_visit_each_sample_once_and_may_be_empty() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(3, 4));
    for mode in [Mode::Sync, Mode::Async] {
        let mut all = Vec::new();
        for rank in 0..5 {
            let cfg = LoaderConfig {
                rank,
                world_size: 5,
                shard_policy: stoker_loader::ShardPolicy::Exact,
                last_epoch: Some(0),
                ..config(mode, 1, "")
            };
            let mut loader = Loader::new(src.clone(), cfg).expect("loader");
            let got: Vec<usize> = loader
                .epoch(0)
                .flat_map(|b| b.expect("batch").indices)
                .collect();
            assert_eq!(got.len(), usize::from(rank < 3), "{mode} rank {rank}");
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2], "{mode}");
    }
}

#[test]
fn the_last_epoch_is_delivered_whole_and_nothing_runs_after_it() {
    let raw = Arc::new(RawSource::new(200, 8));
    let src: Arc<dyn Source> = raw.clone();
    for _ in 0..20 {
        let cfg = LoaderConfig {
            last_epoch: Some(1),
            ..config(Mode::Async, 2, "flip")
        };
        let mut loader = Loader::new(src.clone(), cfg).expect("loader");
        for e in 0..2 {
            let n: usize = loader.epoch(e).map(|b| b.expect("batch").len()).sum();
            assert_eq!(n, 200, "epoch {e}");
        }
        // The read stage stopped after epoch 1: no batch of epoch 2 is made (one
        // more read is the loader's look at sample 0 for the image size).
        let reads = raw.reads.swap(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(reads, 401);
    }
}

/// The digests of the rest of `cursor`'s epoch, each batch awaited at most a minute:
/// a pipeline that stops short fails the test instead of hanging it.
fn rest_within_a_minute(loader: &mut Loader, cursor: &mut Cursor) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        match loader.next_batch_within(cursor, Some(Duration::from_secs(60))) {
            Next::Batch(b) => {
                let mut d = Digest::new();
                d.update(&b.expect("batch"));
                out.push(d.hex());
            }
            Next::End => return out,
            Next::TimedOut => panic!(
                "batch {} of epoch {} did not come within a minute",
                cursor.position(),
                cursor.epoch()
            ),
        }
    }
}

#[test]
fn epoch_u64_max_is_read_whole_in_async_mode_as_in_sync() {
    let raw = Arc::new(RawSource::new(20, 4));
    let src: Arc<dyn Source> = raw.clone();
    let mut sync = Loader::new(src.clone(), config(Mode::Sync, 0, "flip")).expect("loader");
    let mut c = sync.start_epoch(u64::MAX);
    let want = rest_within_a_minute(&mut sync, &mut c);
    assert_eq!(want.len(), 3);
    let state = sync.state_at(u64::MAX, 1);

    raw.reads.store(0, std::sync::atomic::Ordering::Relaxed);
    let mut loader = Loader::new(src.clone(), config(Mode::Async, 2, "flip")).expect("loader");
    let mut c = loader.start_epoch(u64::MAX);
    assert_eq!(rest_within_a_minute(&mut loader, &mut c), want);
    // No epoch follows it, so the read stage stopped at its end: the one read more
    // than its 20 is the loader's look at sample 0 for the image size.
    assert_eq!(raw.reads.load(std::sync::atomic::Ordering::Relaxed), 21);
    // Another epoch starts a pipeline again.
    let mut c = loader.start_epoch(0);
    assert_eq!(rest_within_a_minute(&mut loader, &mut c).len(), 3);

    // A state in that epoch resumes the rest of it.
    let mut resumed = Loader::new(src, config(Mode::Async, 2, "flip")).expect("loader");
    let mut c = resumed.resume_cursor(&state).expect("resume");
    assert_eq!(rest_within_a_minute(&mut resumed, &mut c), want[1..]);
}

/// Which batches a [`GatedSource`] may read, and how many of its reads wait now.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    moved: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Batches `0..n` may be read (counting on across epochs); `None`: every read
    /// passes uncounted (the loader's look at sample 0 before the test starts, and
    /// the drop at its end).
    open: Option<usize>,
    /// Reads of each sample so far: the n-th is in epoch n.
    reads: Vec<usize>,
    /// Reads waiting at the gate now.
    waiting: usize,
}

impl Gate {
    fn open_to(&self, batches: usize) {
        self.state.lock().unwrap().open = Some(batches);
        self.moved.notify_all();
    }

    fn open_all(&self) {
        // Also after a read panicked holding the lock: this runs in a failing test's
        // unwinding, where a second panic would abort the whole binary.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.open = None;
        drop(s);
        self.moved.notify_all();
    }

    /// Waits until `n` reads wait at the gate, failing after a minute (a timeout, not
    /// a measurement: without the reads the test would hang).
    fn await_waiting(&self, n: usize) {
        let s = self.state.lock().unwrap();
        let (s, timeout) = self
            .moved
            .wait_timeout_while(s, Duration::from_secs(60), |s| s.waiting < n)
            .unwrap();
        // Fail with the lock released: a poisoned lock would make every read the
        // guard then wakes panic too, burying this message.
        let waiting = s.waiting;
        drop(s);
        assert!(
            !timeout.timed_out(),
            "{waiting} reads waiting at the gate after a minute, not {n}"
        );
    }
}

/// Opens the gate when dropped: the loader's drop joins its reads, and one waiting
/// for a batch the test will not ask for any more would hold it forever.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open_all();
    }
}

/// A source in plan order (no shuffle) whose reads of batch `b` wait until the test
/// opens it: a read takes as long as the events it waits for, so which stage is
/// slow follows from the order of events, with no timer.
struct GatedSource {
    inner: RawSource,
    batch_size: usize,
    gate: Arc<Gate>,
}

impl GatedSource {
    fn new(n: usize, side: usize, batch_size: usize) -> (Arc<GatedSource>, Arc<Gate>) {
        let gate = Arc::new(Gate::default());
        gate.state.lock().unwrap().reads = vec![0; n];
        let src = GatedSource {
            inner: RawSource::new(n, side),
            batch_size,
            gate: gate.clone(),
        };
        (Arc::new(src), gate)
    }
}

impl Source for GatedSource {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn classes(&self) -> &[String] {
        self.inner.classes()
    }
    fn label(&self, index: usize) -> u32 {
        self.inner.label(index)
    }
    fn describe(&self, index: usize) -> String {
        self.inner.describe(index)
    }
    fn read(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
    ) -> Result<stoker_loader::RecordKind, stoker_loader::SourceError> {
        let gate = &self.gate;
        let mut s = gate.state.lock().unwrap();
        if s.open.is_some() {
            let epoch = s.reads[index];
            s.reads[index] += 1;
            let batch = epoch * self.len().div_ceil(self.batch_size) + index / self.batch_size;
            let shut = |s: &mut GateState| s.open.is_some_and(|open| batch >= open);
            if shut(&mut s) {
                s.waiting += 1;
                gate.moved.notify_all();
                s = gate.moved.wait_while(s, shut).unwrap();
                s.waiting -= 1;
            }
        }
        drop(s);
        self.inner.read(index, buf)
    }
    fn format(&self) -> &'static str {
        "gated memory"
    }
}

#[test]
fn auto_workers_keep_the_budget_while_the_consumer_waits_and_keep_the_bytes() {
    let spec = "rrc:8,flip";
    let mut cfg = config(Mode::Async, 1, spec);
    cfg.shuffle = false;
    cfg.last_epoch = Some(1);
    let reference = digests(
        Arc::new(RawSource::new(96, 16)),
        LoaderConfig {
            mode: Mode::Sync,
            ..cfg.clone()
        },
        2,
    );
    // Each batch is read only once the consumer asks for it. The consumer then waits
    // for every batch and finds the queue empty at every ask, so the tuner never
    // gives a worker back; the reads started before an ask last until it (the whole
    // trip of the batch before through decode, collation and the consumer), where a
    // decode of 16x16 pixels takes microseconds. The tuner must put more reads in
    // flight than the one configured, and the read stage must keep them in flight.
    // (The first raise, to 2, follows from any wait: the depth counts a read of slack
    // per worker. How far the depth follows the latency is the unit tests' part.)
    let (src, gate) = GatedSource::new(96, 16, 8);
    cfg.io_depth = 1;
    cfg.workers = stoker_loader::Workers::Auto { budget: Some(3) };
    let mut loader = Loader::new(src, cfg).unwrap();
    let _open = OpenOnDrop(gate.clone());
    assert_eq!(loader.memory_bound_bytes(), (2 + 3 + 1) * 8 * 8 * 8 * 3);
    gate.open_to(0);
    let per_epoch = loader.batches_per_epoch();
    let mut depth = 1;
    let mut got = Vec::new();
    for e in 0..2 {
        let mut cursor = loader.start_epoch(e);
        for step in 0..per_epoch {
            if e == 1 && step > 0 {
                // The depth is final: that many reads of the batch about to be asked
                // for (at most its 8) wait at the gate. Not for the first batch, whose
                // reads may have started at the depth before.
                gate.await_waiting(depth.min(8));
            }
            gate.open_to(e as usize * per_epoch + step + 1);
            let b = loader.next_batch(&mut cursor).expect("a batch").unwrap();
            let mut d = Digest::new();
            d.update(&b);
            got.push(d.hex());
        }
        assert!(loader.next_batch(&mut cursor).is_none());
        depth = loader.auto_workers().unwrap().io_depth();
    }
    assert_eq!(
        got, reference,
        "auto gives the same bytes as any fixed count"
    );
    let auto = loader.auto_workers().expect("auto is on");
    assert_eq!(auto.budget, 3);
    assert!(auto.is_frozen(), "frozen after the first epoch");
    assert_eq!(
        auto.workers(),
        3,
        "the queue was never full: {:?}",
        auto.changes()
    );
    // The depth doubles a window while that pays (three windows in the first epoch of
    // 12 batches: up to 8).
    let depths: Vec<usize> = auto.changes().iter().map(|c| c.io_depth).collect();
    assert!(auto.io_depth() >= 2, "{:?}", auto.changes());
    assert!(depths.windows(2).all(|d| d[0] <= d[1] && d[1] <= 2 * d[0]));
}

#[test]
fn auto_workers_step_down_to_one_for_a_slow_consumer() {
    // A consumer that asks for a batch only once the prefetch queue is full finds it
    // full at every ask and never waits: the tuner gives back a worker a window until
    // one is left (32 batches, eight windows: enough for three steps down). The gate
    // lets the pipeline make no more than the queue holds, so that at an ask nothing
    // else runs and the time between asks is the making of a batch: with batches
    // finished behind a full queue, taking one wakes the collator inside the timed
    // wait and the first asks come microseconds apart: wait shares near the 1%
    // threshold and now and then past 5% (seen without the gate; with it, 0.1% at
    // most). Samples of 32x32 pixels make a batch's making long next to the take,
    // which keeps the share far under 1% on a fast machine too.
    let (src, gate) = GatedSource::new(256, 32, 8);
    let mut cfg = config(Mode::Async, 1, "");
    cfg.shuffle = false;
    cfg.workers = stoker_loader::Workers::Auto { budget: Some(4) };
    let prefetch = cfg.prefetch;
    let mut loader = Loader::new(src, cfg).unwrap();
    let _open = OpenOnDrop(gate.clone());
    gate.open_to(prefetch);
    let mut cursor = loader.start_epoch(0);
    let t0 = Instant::now();
    for step in 0..cursor.len() {
        while loader.batches_ready() < prefetch {
            // A bound on a hang, not a measurement.
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the queue never filled"
            );
            std::thread::yield_now();
        }
        loader.next_batch(&mut cursor).expect("a batch").unwrap();
        gate.open_to(step + 1 + prefetch);
    }
    let auto = loader.auto_workers().unwrap();
    assert_eq!(auto.workers(), 1, "{:?}", auto.changes());
    let steps: Vec<usize> = auto.changes().iter().map(|c| c.workers).collect();
    assert_eq!(steps, [3, 2, 1], "one worker fewer at a time, nothing else");
}

#[test]
fn a_panic_in_the_read_stage_is_an_error_not_a_wait_for_ever() {
    let e = engine_support::within_a_minute(|| {
        // Making a plan asks for the shards: a bug there stopped the read stage's
        // thread while the others kept their channels open, and the consumer waited
        // for ever.
        let mut raw = RawSource::new(20, 4);
        raw.panic_on_thread = Some("stoker-read");
        let src = Arc::new(raw);
        let mut loader = Loader::new(src, config(Mode::Async, 2, "")).expect("loader");
        let e = loader.epoch(0).find_map(|b| b.err()).expect("an error");
        e.to_string()
    });
    assert!(
        e.contains("while running the read stage") && e.contains("a bug on stoker-read"),
        "{e}"
    );
}
