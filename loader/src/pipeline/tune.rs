//! `workers = auto`: choosing how many decode workers to run from what the consumer
//! waits, under a CPU budget, and how many reads to keep in flight from the measured
//! read latency and decode time.
//!
//! The pipeline starts with the whole budget: a loader-bound run (the case this crate
//! exists for) is then at full speed from its first batch, where climbing from one
//! worker cost a few percent of a two-epoch benchmark. Every window of batches the
//! consumer takes, the tuner looks at the share of the window's time the consumer
//! waited for data: under [`WAIT_LOW`], with the prefetch queue full at every ask, the
//! workers are ahead of the consumer and it removes one (never below one), giving the
//! CPU back to the training step; over [`WAIT_HIGH`] it adds one back (up to the
//! budget).
//!
//! Reads: in a window where the consumer waited, the read depth the workers need is
//! worked out from the stage rates (Little's law): `workers` workers each decoding a
//! sample in `D` seconds take `workers / D` samples a second, so reads of latency `L`
//! must have `workers * L / D` in flight, plus one per worker as slack. When that is
//! more than the current io_depth, io_depth rises to it, at most doubling a window and
//! never past [`MAX_AUTO_IO_DEPTH`] or the samples the buffer pool's batches hold. A
//! raise must pay: when the next window's batches do not come [`RAISE_PAYS`] times
//! faster, the reads are limited by something else (a saturated store queues
//! requests, so the latency measured grows with the depth and the rule alone would
//! climb to the cap) and io_depth rises no more. It never falls: a read in flight
//! costs no CPU, and the cap bounds the bytes the reads hold. On local files the need is a few reads and the configured depth stays; on a
//! store with tens of milliseconds per GET it is tens. prefetch stays as configured: it
//! sets the memory bound, which auto does not change.
//!
//! After the first epoch both are frozen. Changing the number of workers never changes a
//! batch's bytes: every sample's randomness is seeded by (seed, epoch, index) and
//! batches are collated in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::metrics::Counters;

/// Wait share above which a worker is added.
pub const WAIT_HIGH: f64 = 0.05;
/// Wait share below which (with a full queue) a worker is removed.
pub const WAIT_LOW: f64 = 0.01;
/// Batches per decision.
pub const WINDOW: usize = 4;
/// The most reads auto keeps in flight (a configured io_depth above it is kept).
pub const MAX_AUTO_IO_DEPTH: usize = 256;
/// A raise of io_depth must bring batches at least this much faster for another.
pub const RAISE_PAYS: f64 = 1.05;

/// One decision of the tuner, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoChange {
    /// Batches delivered when it was made.
    pub batch: u64,
    /// Decode workers chosen from then on.
    pub workers: usize,
    /// Reads in flight chosen from then on.
    pub io_depth: usize,
    /// The consumer's wait share over the window that led to it.
    pub wait_share: f64,
}

/// What the tuner chose, shared by the loader (for reports) and its pipelines (which
/// start from it after a restart).
#[derive(Debug)]
pub struct AutoState {
    /// Decode threads the loader may use.
    pub budget: usize,
    target: AtomicUsize,
    io_depth: AtomicUsize,
    /// The most reads in flight auto may choose.
    io_cap: usize,
    /// io_depth rises no more: the last raise did not pay.
    io_settled: AtomicBool,
    frozen: AtomicBool,
    log: Mutex<Vec<AutoChange>>,
}

impl AutoState {
    /// `io_depth`: the configured read depth, where auto starts; `io_cap`: the most
    /// reads that can be in flight at once (the samples of the batches the buffer pool
    /// holds), past which a deeper queue buys nothing.
    pub fn new(budget: usize, io_depth: usize, io_cap: usize) -> AutoState {
        let budget = budget.max(1);
        let io_depth = io_depth.max(1);
        AutoState {
            budget,
            target: AtomicUsize::new(budget),
            io_depth: AtomicUsize::new(io_depth),
            io_cap: io_cap.min(MAX_AUTO_IO_DEPTH).max(io_depth),
            io_settled: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        }
    }

    /// Workers the pipeline should run now.
    pub fn workers(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    /// The most reads auto may put in flight.
    pub fn io_cap(&self) -> usize {
        self.io_cap
    }

    /// Reads the read stage should keep in flight now.
    pub fn io_depth(&self) -> usize {
        self.io_depth.load(Ordering::Relaxed)
    }

    fn settle_io(&self) {
        self.io_settled.store(true, Ordering::Relaxed);
    }

    /// Whether io_depth has stopped rising (a raise did not pay).
    pub fn io_settled(&self) -> bool {
        self.io_settled.load(Ordering::Relaxed)
    }

    /// Whether the choice is final (after the first epoch): the tuner changes nothing.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// Makes the current choice final; the pipeline calls it at the end of the first
    /// epoch.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::Relaxed);
    }

    /// Every change made so far.
    pub fn changes(&self) -> Vec<AutoChange> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn set(&self, workers: usize, io_depth: usize, batch: u64, wait_share: f64) {
        self.target.store(workers, Ordering::Relaxed);
        self.io_depth.store(io_depth, Ordering::Relaxed);
        if let Ok(mut log) = self.log.lock() {
            log.push(AutoChange {
                batch,
                workers,
                io_depth,
                wait_share,
            });
        }
    }
}

/// The consumer side's measurements over the current window.
#[derive(Debug)]
pub(crate) struct Tuner {
    window_start: Instant,
    waited: Duration,
    batches: usize,
    queue_always_full: bool,
    delivered: u64,
    /// The stage counters when the window began.
    stages: Stages,
    /// Batches a second in the window that raised io_depth, until the next window
    /// says whether the raise paid.
    raised_at_rate: Option<f64>,
}

/// Busy time and counts of the read and decode stages, as totals.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stages {
    pub read_ns: u64,
    pub reads: u64,
    pub work_ns: u64,
    pub decodes: u64,
}

impl Stages {
    pub fn of(c: &Counters) -> Stages {
        Stages {
            read_ns: c.read_ns.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            work_ns: c.work_ns.load(Ordering::Relaxed),
            decodes: c.decodes.load(Ordering::Relaxed),
        }
    }

    /// Mean read latency and mean decode time (seconds) since `earlier`; `None` until
    /// both stages have finished something in between.
    fn means_since(&self, earlier: &Stages) -> Option<(f64, f64)> {
        let reads = self.reads.checked_sub(earlier.reads).filter(|&n| n > 0)?;
        let decodes = self
            .decodes
            .checked_sub(earlier.decodes)
            .filter(|&n| n > 0)?;
        let read_ns = self.read_ns.saturating_sub(earlier.read_ns) as f64;
        let work_ns = self.work_ns.saturating_sub(earlier.work_ns) as f64;
        Some((
            read_ns * 1e-9 / reads as f64,
            work_ns * 1e-9 / decodes as f64,
        ))
    }
}

impl Tuner {
    pub fn new(counters: &Counters) -> Tuner {
        Tuner::starting(counters, Instant::now())
    }

    /// A tuner whose first window starts at `now`.
    fn starting(counters: &Counters, now: Instant) -> Tuner {
        Tuner {
            window_start: now,
            waited: Duration::ZERO,
            batches: 0,
            queue_always_full: true,
            delivered: 0,
            stages: Stages::of(counters),
            raised_at_rate: None,
        }
    }

    /// Record one batch taken after waiting `wait`, the queue holding `queued` of
    /// `prefetch` when asked, the stages' totals now being `counters`; returns the new
    /// worker count when it changes (a new io_depth is in `state` for the read stage).
    pub fn on_batch(
        &mut self,
        state: &AutoState,
        counters: &Counters,
        wait: Duration,
        queued: usize,
        prefetch: usize,
    ) -> Option<usize> {
        self.on_batch_at(state, counters, wait, queued, prefetch, Instant::now())
    }

    /// [`on_batch`](Self::on_batch) at time `now` (tests give their own clock, so
    /// that a loaded machine's late wake-ups cannot change a decision).
    fn on_batch_at(
        &mut self,
        state: &AutoState,
        counters: &Counters,
        wait: Duration,
        queued: usize,
        prefetch: usize,
        now: Instant,
    ) -> Option<usize> {
        self.delivered += 1;
        if state.is_frozen() {
            return None;
        }
        self.waited += wait;
        self.batches += 1;
        self.queue_always_full &= queued >= prefetch;
        if self.batches < WINDOW {
            return None;
        }
        let elapsed = now
            .saturating_duration_since(self.window_start)
            .as_secs_f64();
        // The share of the window spent waiting, and batches a second.
        let (share, rate) = if elapsed > 0.0 {
            (
                self.waited.as_secs_f64() / elapsed,
                self.batches as f64 / elapsed,
            )
        } else {
            (0.0, 0.0)
        };
        let full = self.queue_always_full;
        let stages = Stages::of(counters);
        let means = stages.means_since(&self.stages);
        let raised_at_rate = self.raised_at_rate;
        *self = Tuner {
            delivered: self.delivered,
            ..Tuner::starting(counters, now)
        };
        // A raise that did not make batches come faster means the reads' own limit
        // (a saturated store, a slow disk) is reached: the latency measured then is
        // queueing, and following it would only climb to the cap.
        if raised_at_rate.is_some_and(|before| rate < before * RAISE_PAYS) {
            state.settle_io();
        }
        let now = state.workers();
        let next = decide(now, state.budget, share, full);
        let depth = state.io_depth();
        let next_depth = match means {
            Some((read, decode)) if share > WAIT_HIGH && !state.io_settled() => {
                read_depth(next, read, decode)
                    .min(depth.saturating_mul(2))
                    .clamp(depth, state.io_cap)
            }
            _ => depth,
        };
        if next_depth > depth {
            self.raised_at_rate = Some(rate);
        }
        if next == now && next_depth == depth {
            return None;
        }
        state.set(next, next_depth, self.delivered, share);
        (next != now).then_some(next)
    }
}

/// Reads to keep in flight so that `workers` workers, each decoding a sample in
/// `decode` seconds, never wait for reads of `read` seconds: the rate they take times
/// the latency, plus one read per worker of slack.
pub fn read_depth(workers: usize, read: f64, decode: f64) -> usize {
    let workers = workers.max(1);
    // A decode too fast to time leaves the depth to the cap; `as` saturates.
    let in_flight = (workers as f64 * read / decode.max(1e-6)).ceil() as usize;
    in_flight.saturating_add(workers)
}

/// The rule, apart from the bookkeeping: more workers while the consumer waits, fewer
/// while they only fill a full queue.
pub fn decide(workers: usize, budget: usize, wait_share: f64, queue_full: bool) -> usize {
    if wait_share > WAIT_HIGH && workers < budget {
        workers + 1
    } else if wait_share < WAIT_LOW && queue_full && workers > 1 {
        workers - 1
    } else {
        workers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_climbs_to_the_budget_and_steps_back_when_ahead() {
        assert_eq!(decide(1, 4, 0.5, false), 2);
        assert_eq!(decide(4, 4, 0.5, false), 4, "never past the budget");
        assert_eq!(decide(3, 4, 0.02, false), 3, "between the thresholds: stay");
        assert_eq!(
            decide(3, 4, 0.0, true),
            2,
            "ahead of the consumer: give a core back"
        );
        assert_eq!(
            decide(3, 4, 0.0, false),
            3,
            "queue not full: the workers are needed"
        );
        assert_eq!(decide(1, 4, 0.0, true), 1, "never below one");
    }

    #[test]
    fn the_read_depth_follows_littles_law() {
        // 2 workers at 1 ms a sample take 2,000 samples/s; reads of 20 ms need 40 in
        // flight, plus 2 of slack.
        assert_eq!(read_depth(2, 0.020, 0.001), 42);
        // Page-cache reads of 30 us: one in flight each, plus slack.
        assert_eq!(read_depth(2, 0.000_03, 0.001), 3);
        assert_eq!(
            read_depth(1, 1.0, 0.0),
            1_000_001,
            "an untimed decode stays finite"
        );
    }

    #[test]
    fn io_depth_rises_while_the_consumer_waits_on_slow_reads_and_never_past_the_cap() {
        // Each window: reads of 20 ms, decodes of 1 ms (42 reads wanted in flight), and
        // batches `ms` apart, for which the consumer waited all that time (`waited`) or
        // found the queue full.
        // A clock of the test's own: batches `ms` apart exactly, however the machine
        // schedules this thread.
        let clock = std::cell::Cell::new(Instant::now());
        let window = |t: &mut Tuner, state: &AutoState, c: &Counters, ms: u64, waited: bool| {
            for _ in 0..WINDOW {
                c.reads.fetch_add(8, Ordering::Relaxed);
                c.read_ns.fetch_add(8 * 20_000_000, Ordering::Relaxed);
                c.decodes.fetch_add(8, Ordering::Relaxed);
                c.work_ns.fetch_add(8 * 1_000_000, Ordering::Relaxed);
                clock.set(clock.get() + Duration::from_millis(ms));
                let (wait, queued) = if waited {
                    (Duration::from_millis(ms), 0)
                } else {
                    (Duration::ZERO, 2)
                };
                t.on_batch_at(state, c, wait, queued, 2, clock.get());
            }
        };
        let counters = Counters::default();
        // Every raise pays (batches come twice as fast each window): doubling a window,
        // up to the cap.
        let state = AutoState::new(2, 4, 30);
        let mut t = Tuner::starting(&counters, clock.get());
        let mut depths = Vec::new();
        for ms in [40, 20, 10, 5] {
            window(&mut t, &state, &counters, ms, true);
            depths.push(state.io_depth());
        }
        assert_eq!(depths, [8, 16, 30, 30], "doubling, capped at 30");
        assert_eq!(state.workers(), 2, "already at the budget");
        assert!(!state.io_settled());
        // A raise that does not pay (batches come slower after it): no more raises.
        let state = AutoState::new(2, 4, 300);
        let mut t = Tuner::starting(&counters, clock.get());
        for ms in [5, 10, 10, 10] {
            window(&mut t, &state, &counters, ms, true);
        }
        assert_eq!(state.io_depth(), 8, "one raise, then settled");
        assert!(state.io_settled());
        // A consumer that never waits changes no depth, whatever the reads cost.
        let state = AutoState::new(2, 4, 300);
        let mut t = Tuner::starting(&counters, clock.get());
        window(&mut t, &state, &counters, 1, false);
        assert_eq!(state.io_depth(), 4);
        assert_eq!(
            AutoState::new(2, 300, 30).io_depth(),
            300,
            "a configured depth is kept"
        );
    }

    #[test]
    fn decisions_come_once_a_window_and_stop_when_frozen() {
        let state = AutoState::new(3, 8, 64);
        let counters = Counters::default();
        assert_eq!(state.workers(), 3, "starts with the whole budget");
        // The test's own clock: batches 6 ms apart, whatever the machine does.
        let mut now = Instant::now();
        let mut t = Tuner::starting(&counters, now);
        let mut changes = Vec::new();
        for _ in 0..3 * WINDOW {
            // The consumer never waits and the queue is full: workers are given back.
            now += Duration::from_millis(6);
            if let Some(n) = t.on_batch_at(&state, &counters, Duration::ZERO, 2, 2, now) {
                changes.push(n);
            }
        }
        assert_eq!(changes, [2, 1], "one a window, never below one");
        changes.clear();
        for _ in 0..3 * WINDOW {
            // The consumer waits for every batch: the tuner adds workers up to 3.
            now += Duration::from_millis(6);
            let wait = Duration::from_millis(5);
            if let Some(n) = t.on_batch_at(&state, &counters, wait, 0, 2, now) {
                changes.push(n);
            }
        }
        assert_eq!(changes, [2, 3]);
        assert_eq!(state.workers(), 3);
        assert_eq!(state.changes().len(), 4);
        state.freeze();
        for _ in 0..2 * WINDOW {
            now += Duration::from_millis(6);
            let next = t.on_batch_at(&state, &counters, Duration::ZERO, 2, 2, now);
            assert_eq!(next, None);
        }
        assert_eq!(state.workers(), 3);
    }
}
