//! A lifetime-free position in an epoch, and the loader calls that advance it.
//!
//! [`Epoch`](super::Epoch) borrows the loader for as long as it lives, which suits a
//! Rust `for` loop but not a caller that must keep the position in an object of its
//! own (a Python iterator) or must not block forever (a caller that checks for Ctrl-C
//! every few milliseconds). A [`Cursor`] is that position on its own; the loader
//! advances it with [`Loader::next_batch`] or, with a time limit,
//! [`Loader::next_batch_within`]. `Epoch` is a cursor plus the borrow.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{async_, Loader, Mode, Shared};
use crate::epoch_plan::Plan;
use crate::state::LoaderState;
use crate::{Batch, LoaderError};

/// Where one epoch stands: the next batch to deliver, and whether it ended in an error.
#[derive(Clone, Debug)]
pub struct Cursor {
    plan: Arc<Plan>,
    next: usize,
    failed: bool,
    /// The loader the cursor was made by (its shared state's address): a cursor given
    /// to another loader would read that loader's source with this one's plan.
    owner: usize,
}

impl Cursor {
    /// The epoch this cursor walks through.
    pub fn epoch(&self) -> u64 {
        self.plan.epoch
    }

    /// Where the cursor stands in its epoch: the index of the first batch not yet
    /// delivered (what [`Loader::next_batch`] delivers next).
    pub fn position(&self) -> usize {
        self.next
    }

    /// Batches in the whole epoch.
    pub fn len(&self) -> usize {
        self.plan.len()
    }

    /// Whether the epoch has no batches at all.
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    /// True once every batch was delivered or a batch failed.
    pub fn is_done(&self) -> bool {
        self.failed || self.next >= self.plan.len()
    }

    /// The samples of the cursor's whole epoch on this rank, batch after batch (the
    /// source's indices).
    pub fn indices(&self) -> &[usize] {
        self.plan.indices()
    }

    /// The samples of batch `b` of the cursor's epoch.
    pub fn batch_indices(&self, b: usize) -> &[usize] {
        self.plan.batch(b)
    }

    /// Batches left to deliver.
    pub fn remaining(&self) -> usize {
        if self.failed {
            0
        } else {
            self.plan.len().saturating_sub(self.next)
        }
    }
}

/// What [`Loader::next_batch_within`] found.
#[derive(Debug)]
pub enum Next {
    /// The next batch, or the error that ends the epoch.
    Batch(Result<Batch, LoaderError>),
    /// The epoch has no more batches (or ended in an error already).
    End,
    /// No batch came within the time limit; the cursor has not moved, so asking again
    /// waits for the same batch.
    TimedOut,
}

fn owner_id(shared: &Arc<Shared>) -> usize {
    Arc::as_ptr(shared) as usize
}

impl Loader {
    /// A cursor at the first batch of `epoch`. In async mode the pipeline starts
    /// preparing it now (or goes on, if it is already heading there).
    pub fn start_epoch(&mut self, epoch: u64) -> Cursor {
        if self.shared.forget_resumed(epoch) {
            // A pipeline may be making the resumed plan's batches of this epoch.
            self.running = None;
        }
        self.cursor_at(epoch, 0)
    }

    /// A cursor at the batch `state` stopped at: the rest of its epoch.
    pub fn resume_cursor(&mut self, state: &LoaderState) -> Result<Cursor, LoaderError> {
        let mine = self.plain_state(state.epoch, 0);
        let (plan, step, special) = self.shared.resume_plan(state, &mine)?;
        if self.shared.set_resumed(special.then(|| plan.clone())) {
            // The running pipeline may be making another plan of this epoch.
            self.running = None;
        }
        Ok(self.cursor_with(plan, step))
    }

    pub(super) fn cursor_at(&mut self, epoch: u64, step: usize) -> Cursor {
        let plan = self.shared.plan(epoch);
        self.cursor_with(plan, step)
    }

    fn cursor_with(&mut self, plan: Arc<Plan>, step: usize) -> Cursor {
        // A pipeline that cannot start says so at the first batch, which tries again.
        let _ = self.ensure_running(plan.epoch, step);
        Cursor {
            plan,
            next: step,
            failed: false,
            owner: owner_id(&self.shared),
        }
    }

    /// In async mode, a pipeline whose next batch is (epoch, step): the running one
    /// if it is headed there, else a new one (an error when the system refuses its
    /// threads).
    fn ensure_running(&mut self, epoch: u64, step: usize) -> Result<(), LoaderError> {
        self.after_fork();
        if self.config.mode != Mode::Async {
            return Ok(());
        }
        if matches!(&self.running, Some(r) if r.next_expected() == Some((epoch, step))) {
            return Ok(());
        }
        // Stop the old pipeline first so its threads do not compete.
        self.running = None;
        self.starts += 1;
        self.running = Some(async_::Running::start(
            self.shared.clone(),
            self.pool.clone(),
            &self.config,
            epoch,
            step,
        )?);
        Ok(())
    }

    /// The state after the batches `cursor` has delivered: resuming it yields the rest.
    pub fn cursor_state(&self, cursor: &Cursor) -> LoaderState {
        let base = self.plain_state(cursor.plan.epoch, cursor.next);
        self.shared.state_in(&cursor.plan, cursor.next, base)
    }

    /// The next batch of `cursor`'s epoch, waiting as long as it takes; `None` at the
    /// end of the epoch or after an error.
    pub fn next_batch(&mut self, cursor: &mut Cursor) -> Option<Result<Batch, LoaderError>> {
        match self.next_batch_within(cursor, None) {
            Next::Batch(b) => Some(b),
            Next::End => None,
            // Without a time limit the wait only ends with a batch or an error.
            Next::TimedOut => Some(Err(LoaderError::Stopped(
                "a wait without a time limit timed out".into(),
            ))),
        }
    }

    /// The next batch of `cursor`'s epoch, waiting at most `timeout` for the async
    /// pipeline (sync mode makes the batch on this thread and ignores the limit).
    ///
    /// Several cursors may be used on one loader: when the async pipeline is headed
    /// elsewhere (another cursor moved it), it is restarted at this cursor's batch.
    ///
    /// Under `on_error = skip`, a batch whose every sample was skipped is not handed
    /// out (a batch of zero samples breaks most training steps): its skips are counted
    /// and the next batch of the plan comes in its place, so the batches that follow
    /// are the same as ever; at the end of the epoch there is then simply one batch
    /// fewer.
    pub fn next_batch_within(&mut self, cursor: &mut Cursor, timeout: Option<Duration>) -> Next {
        loop {
            if let Some(next) = self.next_made(cursor, timeout) {
                return next;
            }
        }
    }

    /// [`next_batch_within`](Self::next_batch_within) for one batch of the plan:
    /// `None` when it had no samples left (all skipped) and the cursor moved past it.
    fn next_made(&mut self, cursor: &mut Cursor, timeout: Option<Duration>) -> Option<Next> {
        if cursor.is_done() {
            return Some(Next::End);
        }
        if cursor.owner != owner_id(&self.shared) {
            cursor.failed = true;
            return Some(Next::Batch(Err(LoaderError::ForeignCursor)));
        }
        let (epoch, step, len) = (cursor.plan.epoch, cursor.next, cursor.plan.len());
        self.after_fork();
        let mut out = match self.config.mode {
            Mode::Sync => self
                .sync
                .next_batch(&self.shared, &self.pool, &cursor.plan, step),
            Mode::Async => {
                let started = self.ensure_running(epoch, step);
                let deadline = timeout.map(|t| Instant::now() + t);
                match self.running.as_mut().filter(|_| started.is_ok()) {
                    Some(r) => match r.next_batch(epoch, step, len, deadline) {
                        Some(b) => b,
                        None => return Some(Next::TimedOut),
                    },
                    None => Err(started
                        .err()
                        .unwrap_or_else(|| LoaderError::Stopped("no pipeline is running".into()))),
                }
            }
        };
        match &mut out {
            Ok(b) if b.indices.is_empty() => {
                // Every sample skipped: counted, and the next batch comes instead.
                let skipped = b.skipped as u64;
                self.shared.counters.skipped.fetch_add(skipped, Relaxed);
                cursor.next += 1;
                return None;
            }
            Ok(b) => {
                // Counted here, at delivery: the async pipeline may already be
                // working on the next epoch.
                b.deliver();
                let c = &self.shared.counters;
                c.samples.fetch_add(b.len() as u64, Relaxed);
                c.skipped.fetch_add(b.skipped as u64, Relaxed);
                c.batches.fetch_add(1, Relaxed);
                cursor.next += 1;
            }
            Err(_) => {
                // The pipeline's position is now unknown: the next epoch starts afresh.
                cursor.failed = true;
                self.running = None;
            }
        }
        Some(Next::Batch(out))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::source::{RecordKind, Source, SourceError};
    use crate::{Digest, LoaderConfig};

    /// 4x4 grey images whose pixels are their index; reads wait while `gate` is shut.
    struct Gated {
        n: usize,
        gate: Arc<AtomicBool>,
        classes: Vec<String>,
    }

    impl Source for Gated {
        fn len(&self) -> usize {
            self.n
        }
        fn classes(&self) -> &[String] {
            &self.classes
        }
        fn label(&self, index: usize) -> u32 {
            (index % 2) as u32
        }
        fn describe(&self, index: usize) -> String {
            format!("gated record {index}")
        }
        fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
            // Index 0 is read by Loader::new to learn the shape; let it through.
            while index != 0 && !self.gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            buf.clear();
            buf.resize(16, index as u8);
            Ok(RecordKind::Raw {
                width: 4,
                height: 4,
                channels: 1,
            })
        }
        fn format(&self) -> &'static str {
            "gated"
        }
    }

    fn loader(mode: Mode, open: bool) -> (Loader, Arc<AtomicBool>) {
        let gate = Arc::new(AtomicBool::new(open));
        let src = Gated {
            n: 10,
            gate: gate.clone(),
            classes: vec!["a".into(), "b".into()],
        };
        let cfg = LoaderConfig {
            batch_size: 3,
            mode,
            seed: 7,
            ..LoaderConfig::default()
        };
        (Loader::new(Arc::new(src), cfg).expect("loader"), gate)
    }

    fn digest_all(loader: &mut Loader, cursor: &mut Cursor) -> String {
        let mut d = Digest::new();
        while let Some(b) = loader.next_batch(cursor) {
            d.update(&b.expect("batch"));
        }
        d.hex()
    }

    #[test]
    fn a_cursor_delivers_what_an_epoch_does() {
        for mode in [Mode::Sync, Mode::Async] {
            let (mut a, _) = loader(mode, true);
            let mut d = Digest::new();
            for b in a.epoch(1) {
                d.update(&b.expect("batch"));
            }
            let (mut b, _) = loader(mode, true);
            let mut c = b.start_epoch(1);
            assert_eq!((c.epoch(), c.position(), c.len()), (1, 0, 4));
            assert_eq!(digest_all(&mut b, &mut c), d.hex(), "{mode}");
            assert!(c.is_done());
            assert!(matches!(b.next_batch_within(&mut c, None), Next::End));
        }
    }

    #[test]
    fn a_wait_with_a_limit_times_out_and_then_gets_the_same_batch() {
        let (mut l, gate) = loader(Mode::Async, false);
        let mut c = l.start_epoch(0);
        let t0 = Instant::now();
        assert!(matches!(
            l.next_batch_within(&mut c, Some(Duration::from_millis(30))),
            Next::TimedOut
        ));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(c.position(), 0, "a timeout does not move the cursor");
        gate.store(true, Ordering::SeqCst);
        let got = loop {
            match l.next_batch_within(&mut c, Some(Duration::from_millis(30))) {
                Next::TimedOut => continue,
                Next::Batch(b) => break b.expect("batch"),
                Next::End => panic!("epoch ended early"),
            }
        };
        assert_eq!((got.epoch, got.step), (0, 0));
        assert_eq!(l.metrics().batches, 1);
        assert_eq!(l.pipeline_starts(), 1);
    }

    #[test]
    fn interleaved_cursors_each_get_their_own_batches() {
        let (mut straight, _) = loader(Mode::Async, true);
        let mut c0 = straight.start_epoch(0);
        let e0 = digest_all(&mut straight, &mut c0);
        let mut c1 = straight.start_epoch(1);
        let e1 = digest_all(&mut straight, &mut c1);

        let (mut l, _) = loader(Mode::Async, true);
        let mut a = l.start_epoch(0);
        let mut b = l.start_epoch(1);
        let (mut da, mut db) = (Digest::new(), Digest::new());
        for _ in 0..4 {
            da.update(&l.next_batch(&mut a).expect("a").expect("batch"));
            db.update(&l.next_batch(&mut b).expect("b").expect("batch"));
        }
        assert_eq!((da.hex(), db.hex()), (e0, e1));
    }

    #[test]
    fn resume_cursor_yields_the_rest_and_checks_the_state() {
        let (mut l, _) = loader(Mode::Async, true);
        let mut c = l.start_epoch(2);
        l.next_batch(&mut c).expect("first").expect("batch");
        let state = l.cursor_state(&c);
        let rest = digest_all(&mut l, &mut c);
        let (mut m, _) = loader(Mode::Sync, true);
        let mut r = m.resume_cursor(&state).expect("resume");
        assert_eq!(r.remaining(), 3);
        assert_eq!(digest_all(&mut m, &mut r), rest);
        let past = LoaderState {
            next_batch: 5,
            ..state
        };
        assert!(matches!(
            m.resume_cursor(&past),
            Err(LoaderError::Resume(_))
        ));
    }

    #[test]
    fn a_cursor_from_another_loader_is_an_error() {
        let (mut a, _) = loader(Mode::Sync, true);
        let (mut b, _) = loader(Mode::Sync, true);
        let mut c = a.start_epoch(0);
        match b.next_batch(&mut c) {
            Some(Err(LoaderError::ForeignCursor)) => {}
            other => panic!("expected an error, got {other:?}"),
        }
        assert!(c.is_done());
    }
}
