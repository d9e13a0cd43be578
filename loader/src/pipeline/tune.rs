//! `workers = auto`: choosing how many decode workers to run from what the consumer
//! waits, under a CPU budget.
//!
//! The pipeline starts with the whole budget: a loader-bound run (the case this crate
//! exists for) is then at full speed from its first batch, where climbing from one
//! worker cost a few percent of a two-epoch benchmark. Every window of batches the
//! consumer takes, the tuner looks at the share of the window's time the consumer
//! waited for data: under [`WAIT_LOW`], with the prefetch queue full at every ask, the
//! workers are ahead of the consumer and it removes one (never below one), giving the
//! CPU back to the training step; over [`WAIT_HIGH`] it adds one back (up to the
//! budget). After the
//! first epoch the count is frozen. Changing the number of workers never changes a
//! batch's bytes: every sample's randomness is seeded by (seed, epoch, index) and
//! batches are collated in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Wait share above which a worker is added.
pub const WAIT_HIGH: f64 = 0.05;
/// Wait share below which (with a full queue) a worker is removed.
pub const WAIT_LOW: f64 = 0.01;
/// Batches per decision.
pub const WINDOW: usize = 4;

/// One decision of the tuner, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoChange {
    /// Batches delivered when it was made.
    pub batch: u64,
    pub workers: usize,
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
    frozen: AtomicBool,
    log: Mutex<Vec<AutoChange>>,
}

impl AutoState {
    pub fn new(budget: usize) -> AutoState {
        let budget = budget.max(1);
        AutoState {
            budget,
            target: AtomicUsize::new(budget),
            frozen: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        }
    }

    /// Workers the pipeline should run now.
    pub fn workers(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::Relaxed);
    }

    /// Every change made so far.
    pub fn changes(&self) -> Vec<AutoChange> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn set(&self, workers: usize, batch: u64, wait_share: f64) {
        self.target.store(workers, Ordering::Relaxed);
        if let Ok(mut log) = self.log.lock() {
            log.push(AutoChange {
                batch,
                workers,
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
}

impl Tuner {
    pub fn new() -> Tuner {
        Tuner {
            window_start: Instant::now(),
            waited: Duration::ZERO,
            batches: 0,
            queue_always_full: true,
            delivered: 0,
        }
    }

    /// Record one batch taken after waiting `wait`, the queue holding `queued` of
    /// `prefetch` when asked; returns the new worker count when it changes.
    pub fn on_batch(
        &mut self,
        state: &AutoState,
        wait: Duration,
        queued: usize,
        prefetch: usize,
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
        let elapsed = self.window_start.elapsed().as_secs_f64();
        let share = if elapsed > 0.0 {
            self.waited.as_secs_f64() / elapsed
        } else {
            0.0
        };
        let full = self.queue_always_full;
        *self = Tuner {
            delivered: self.delivered,
            ..Tuner::new()
        };
        let now = state.workers();
        let next = decide(now, state.budget, share, full);
        (next != now).then(|| {
            state.set(next, self.delivered, share);
            next
        })
    }
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
    fn decisions_come_once_a_window_and_stop_when_frozen() {
        let state = AutoState::new(3);
        assert_eq!(state.workers(), 3, "starts with the whole budget");
        let mut t = Tuner::new();
        let mut changes = Vec::new();
        for _ in 0..3 * WINDOW {
            // The consumer never waits and the queue is full: workers are given back.
            if let Some(n) = t.on_batch(&state, Duration::ZERO, 2, 2) {
                changes.push(n);
            }
        }
        assert_eq!(changes, [2, 1], "one a window, never below one");
        changes.clear();
        for _ in 0..3 * WINDOW {
            // The consumer waits for every batch: the tuner adds workers up to 3.
            std::thread::sleep(Duration::from_millis(1));
            if let Some(n) = t.on_batch(&state, Duration::from_millis(5), 0, 2) {
                changes.push(n);
            }
        }
        assert_eq!(changes, [2, 3]);
        assert_eq!(state.workers(), 3);
        assert_eq!(state.changes().len(), 4);
        state.freeze();
        for _ in 0..2 * WINDOW {
            assert_eq!(t.on_batch(&state, Duration::ZERO, 2, 2), None);
        }
        assert_eq!(state.workers(), 3);
    }
}
