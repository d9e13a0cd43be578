//! The fixed set of batch buffers that bounds the loader's memory.
//!
//! Buffers circulate: the pipeline takes a free one, fills it, hands it to the
//! consumer inside a [`Batch`](crate::Batch), and the batch's drop returns it. The pool
//! allocates lazily up to its capacity and then only reuses, so steady state allocates
//! nothing. The one exception keeps the "never a hang" promise: if the consumer holds
//! every buffer (say it collects a whole epoch into a Vec) and asks for more, the pool
//! grows by one rather than deadlock, and counts it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A batch buffer on its way back to the pool when dropped.
pub struct PooledBuf {
    data: Vec<u8>,
    home: Option<Arc<PoolInner>>,
}

struct PoolInner {
    free_tx: flume::Sender<Vec<u8>>,
    free_rx: flume::Receiver<Vec<u8>>,
    buf_bytes: usize,
    capacity: usize,
    allocated: AtomicUsize,
    held_by_consumer: AtomicUsize,
    peak_allocated: AtomicUsize,
    grown: AtomicUsize,
    /// The process the pool was made in: a forked child must not touch the free
    /// list, whose lock a thread of the parent may have held at the fork.
    pid: u32,
}

/// A shared handle to the pool.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl Pool {
    /// A pool of at most `capacity` buffers of `buf_bytes` each.
    pub fn new(capacity: usize, buf_bytes: usize) -> Pool {
        let (free_tx, free_rx) = flume::unbounded();
        Pool {
            inner: Arc::new(PoolInner {
                free_tx,
                free_rx,
                buf_bytes,
                capacity: capacity.max(1),
                allocated: AtomicUsize::new(0),
                held_by_consumer: AtomicUsize::new(0),
                peak_allocated: AtomicUsize::new(0),
                grown: AtomicUsize::new(0),
                pid: std::process::id(),
            }),
        }
    }

    /// Size of each buffer, in bytes.
    pub fn buf_bytes(&self) -> usize {
        self.inner.buf_bytes
    }

    /// The most buffers the pool allocates before it has to grow (at least 1).
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Buffers allocated so far (never more than capacity plus growth).
    pub fn allocated(&self) -> usize {
        self.inner.allocated.load(Ordering::Relaxed)
    }

    /// The most bytes the pool has held at once.
    pub fn peak_bytes(&self) -> usize {
        self.inner.peak_allocated.load(Ordering::Relaxed) * self.inner.buf_bytes
    }

    /// How many times the pool grew past its capacity because the consumer held
    /// every buffer.
    pub fn grown(&self) -> usize {
        self.inner.grown.load(Ordering::Relaxed)
    }

    fn allocate(&self) -> PooledBuf {
        let n = self.inner.allocated.fetch_add(1, Ordering::Relaxed) + 1;
        self.inner.peak_allocated.fetch_max(n, Ordering::Relaxed);
        self.wrap(vec![0; self.inner.buf_bytes])
    }

    fn wrap(&self, data: Vec<u8>) -> PooledBuf {
        PooledBuf {
            data,
            home: Some(self.inner.clone()),
        }
    }

    /// A free buffer if one is ready or may still be allocated; `None` if the
    /// caller must wait.
    pub fn try_acquire(&self) -> Option<PooledBuf> {
        if let Ok(data) = self.inner.free_rx.try_recv() {
            return Some(self.wrap(data));
        }
        // Claim an allocation slot without racing past capacity.
        let inner = &self.inner;
        let mut cur = inner.allocated.load(Ordering::Relaxed);
        while cur < inner.capacity {
            match inner.allocated.compare_exchange(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    inner.peak_allocated.fetch_max(cur + 1, Ordering::Relaxed);
                    return Some(self.wrap(vec![0; inner.buf_bytes]));
                }
                Err(now) => cur = now,
            }
        }
        None
    }

    /// A buffer, waiting (async) for one to come back if all are in use.
    pub async fn acquire_async(&self) -> PooledBuf {
        if let Some(b) = self.try_acquire() {
            return b;
        }
        match self.inner.free_rx.recv_async().await {
            Ok(data) => self.wrap(data),
            // Unreachable while we hold `inner` (it owns a sender), but allocate
            // rather than panic.
            Err(_) => self.allocate(),
        }
    }

    /// A buffer for a caller that cannot wait on anyone else (sync mode): reuses a
    /// free one, or allocates (counted as growth once past capacity).
    pub fn acquire_now(&self) -> PooledBuf {
        if let Some(b) = self.try_acquire() {
            return b;
        }
        self.inner.grown.fetch_add(1, Ordering::Relaxed);
        self.allocate()
    }

    /// Called by a consumer about to wait for a batch: if it holds every buffer,
    /// nothing can ever arrive, so add one.
    pub fn grow_if_starved(&self) {
        let inner = &self.inner;
        if inner.held_by_consumer.load(Ordering::Acquire) >= inner.allocated.load(Ordering::Acquire)
            && inner.allocated.load(Ordering::Acquire) >= inner.capacity
        {
            inner.grown.fetch_add(1, Ordering::Relaxed);
            let buf = self.allocate();
            // Route it through the free list so a waiting producer wakes up.
            buf.release();
        }
    }

    /// Marks a buffer as handed to the consumer.
    pub(crate) fn mark_consumer(buf: &mut PooledBuf) {
        if let Some(home) = &buf.home {
            home.held_by_consumer.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Buffers currently held by the consumer.
    pub fn held_by_consumer(&self) -> usize {
        self.inner.held_by_consumer.load(Ordering::Relaxed)
    }
}

impl PooledBuf {
    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }

    /// The buffer's bytes, to write into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Return the buffer to its pool now.
    pub fn release(mut self) {
        self.give_back();
    }

    fn give_back(&mut self) {
        if let Some(home) = self.home.take() {
            let data = std::mem::take(&mut self.data);
            if home.pid != std::process::id() {
                // A batch of the parent dropped in a forked child: the child's loader
                // has a pool of its own; free the memory.
                return;
            }
            // A send only fails when the pool is gone, and then the memory is freed.
            let _ = home.free_tx.send(data);
        }
    }

    /// Undo [`Pool::mark_consumer`] (the batch was dropped by the consumer).
    pub(crate) fn unmark_consumer(&self) {
        if let Some(home) = &self.home {
            home.held_by_consumer.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl std::fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBuf")
            .field("bytes", &self.data.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_instead_of_allocating() {
        let pool = Pool::new(2, 16);
        for _ in 0..100 {
            let a = pool.try_acquire().expect("free");
            let b = pool.try_acquire().expect("free");
            assert!(pool.try_acquire().is_none(), "capacity is 2");
            drop(a);
            drop(b);
        }
        assert_eq!(pool.allocated(), 2);
        assert_eq!(pool.peak_bytes(), 32);
        assert_eq!(pool.grown(), 0);
    }

    #[test]
    fn grows_only_when_the_consumer_holds_everything() {
        let pool = Pool::new(1, 4);
        let mut held = pool.try_acquire().expect("free");
        pool.grow_if_starved();
        assert_eq!(pool.grown(), 0, "the buffer is not the consumer's yet");
        Pool::mark_consumer(&mut held);
        pool.grow_if_starved();
        assert_eq!(pool.grown(), 1);
        assert!(pool.try_acquire().is_some());
        held.unmark_consumer();
    }
}
