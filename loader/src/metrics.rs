//! Where the time goes: per-stage busy time, consumer wait, bytes, queue occupancy.
//!
//! Stages add to shared atomic counters as they work; a [`Metrics`] is a snapshot of
//! them, and the difference of two snapshots covers the span between.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

/// Running totals, shared by all stages of one loader.
#[derive(Default, Debug)]
pub struct Counters {
    /// Samples delivered in batches.
    pub samples: AtomicU64,
    /// Samples left out under `on_error = skip`.
    pub skipped: AtomicU64,
    /// Batches delivered to the consumer.
    pub batches: AtomicU64,
    /// Bytes of sample data read from the source.
    pub bytes_read: AtomicU64,
    /// Time spent reading sample bytes, in nanoseconds summed over threads.
    pub read_ns: AtomicU64,
    /// Reads timed in `read_ns` (for a mean read latency).
    pub reads: AtomicU64,
    /// Time spent decoding and augmenting, in nanoseconds summed over threads.
    pub work_ns: AtomicU64,
    /// Samples timed in `work_ns` (for a mean decode time).
    pub decodes: AtomicU64,
    /// Time spent ordering finished batches and compacting skipped samples, in
    /// nanoseconds.
    pub collate_ns: AtomicU64,
    /// Time the consumer waited for a batch, in nanoseconds.
    pub wait_ns: AtomicU64,
    /// Sum of the ready batches counted each time the consumer asked (async mode).
    pub queue_len_sum: AtomicU64,
    /// Number of times the ready batches were counted, the divisor of `queue_len_sum`.
    pub queue_len_samples: AtomicU64,
    /// Samples found in the decoded cache (neither read nor decoded).
    pub decoded_cache_hits: AtomicU64,
    /// Samples looked up in the decoded cache and not found (read and decoded).
    pub decoded_cache_misses: AtomicU64,
    /// Samples decoded through a libjpeg-turbo crop window, which the cache does not
    /// keep (a whole decode would give other bytes).
    pub decoded_cache_windowed: AtomicU64,
    /// Samples decoded (not found in the cache) that it had no room left for.
    pub decoded_cache_no_room: AtomicU64,
}

pub(crate) fn add_time(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(d.as_nanos() as u64, Relaxed);
}

/// A snapshot of the counters. Times are seconds summed over threads, so busy time
/// can exceed wall time when a stage runs on several threads.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Metrics {
    /// Samples delivered in batches.
    pub samples: u64,
    /// Samples skipped under `on_error = skip`.
    pub skipped: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Bytes of sample data read from the source.
    pub bytes_read: u64,
    /// Time spent reading sample bytes from the source.
    pub read_seconds: f64,
    /// Time spent decoding and augmenting (in sync mode, on the consumer's thread).
    pub decode_seconds: f64,
    /// Time spent ordering finished batches and compacting skipped samples.
    pub collate_seconds: f64,
    /// Time the consumer waited for a batch (in sync mode: all of the data time).
    pub wait_seconds: f64,
    /// Average number of ready batches in the prefetch queue when the consumer asked.
    pub mean_queue_len: f64,
    /// Samples taken from the decoded cache, neither read nor decoded (0 without one).
    pub decoded_cache_hits: u64,
    /// Samples the decoded cache did not hold, read and decoded (0 without one).
    pub decoded_cache_misses: u64,
    /// Of the misses, those decoded through a libjpeg-turbo crop window (an `rrc` or
    /// `resize` first step on a JPEG), which the cache does not keep.
    pub decoded_cache_windowed: u64,
    /// Of the misses, those the cache had no room left for (once it is full, every
    /// miss).
    pub decoded_cache_no_room: u64,
    /// Bytes the decoded cache holds now (pixels and fields).
    pub decoded_cache_bytes: u64,
}

impl Counters {
    /// The totals so far, with times in seconds.
    pub fn snapshot(&self) -> Metrics {
        let s = |c: &AtomicU64| c.load(Relaxed) as f64 * 1e-9;
        let qn = self.queue_len_samples.load(Relaxed);
        Metrics {
            samples: self.samples.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            batches: self.batches.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            read_seconds: s(&self.read_ns),
            decode_seconds: s(&self.work_ns),
            collate_seconds: s(&self.collate_ns),
            wait_seconds: s(&self.wait_ns),
            mean_queue_len: if qn == 0 {
                0.0
            } else {
                self.queue_len_sum.load(Relaxed) as f64 / qn as f64
            },
            decoded_cache_hits: self.decoded_cache_hits.load(Relaxed),
            decoded_cache_misses: self.decoded_cache_misses.load(Relaxed),
            decoded_cache_windowed: self.decoded_cache_windowed.load(Relaxed),
            decoded_cache_no_room: self.decoded_cache_no_room.load(Relaxed),
            // Held by the cache itself: the loader fills it in.
            decoded_cache_bytes: 0,
        }
    }
}

impl Metrics {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Metrics) -> Metrics {
        Metrics {
            samples: self.samples - earlier.samples,
            skipped: self.skipped - earlier.skipped,
            batches: self.batches - earlier.batches,
            bytes_read: self.bytes_read - earlier.bytes_read,
            read_seconds: self.read_seconds - earlier.read_seconds,
            decode_seconds: self.decode_seconds - earlier.decode_seconds,
            collate_seconds: self.collate_seconds - earlier.collate_seconds,
            wait_seconds: self.wait_seconds - earlier.wait_seconds,
            // An average over the whole run; not meaningfully differenced.
            mean_queue_len: self.mean_queue_len,
            decoded_cache_hits: self.decoded_cache_hits - earlier.decoded_cache_hits,
            decoded_cache_misses: self.decoded_cache_misses - earlier.decoded_cache_misses,
            decoded_cache_windowed: self.decoded_cache_windowed - earlier.decoded_cache_windowed,
            decoded_cache_no_room: self.decoded_cache_no_room - earlier.decoded_cache_no_room,
            // What it holds now, as the queue's mean: a level, not a count.
            decoded_cache_bytes: self.decoded_cache_bytes,
        }
    }
}
