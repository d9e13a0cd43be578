//! A bounded, growing set of reusable slots (the device buffers of Python's
//! `device="cuda"` batches), each free again only once every handle to it is gone.
//!
//! A slot is an `Arc<M>`: the set keeps one reference, and every array or exported
//! tensor made from the batch in it keeps another. The set reuses a slot only when its
//! count is back to one, so a batch is never overwritten while anything can still read
//! it; and the memory itself lives until the last handle goes, even after the set is
//! dropped. When every slot is held and the set is at its limit, `acquire` says so
//! rather than wait (the holder is the caller's own thread) or overwrite.

use std::sync::Arc;

/// Why no slot could be had.
#[derive(Debug, thiserror::Error)]
pub enum SlotsError<E> {
    /// Every slot still has handles, and there may be no more slots.
    #[error("all {held} device batches are still held (arrays or tensors made from them are alive); at most {held} may be held at once: drop the oldest before asking for the next")]
    AllHeld {
        /// Slots held (the limit).
        held: usize,
    },
    /// Making a new slot failed.
    #[error(transparent)]
    Alloc(E),
}

/// Up to `max` slots, made on demand (see the module docs).
pub struct Slots<M> {
    slots: Vec<Arc<M>>,
    max: usize,
}

impl<M> Slots<M> {
    /// An empty set that grows to at most `max` slots (at least one).
    pub fn new(max: usize) -> Self {
        Slots {
            slots: Vec::new(),
            max: max.max(1),
        }
    }

    /// The most slots.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Slots made so far.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether none were made yet.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Slots that still have handles outside the set.
    pub fn held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| Arc::strong_count(s) > 1)
            .count()
    }

    /// A free slot's index: the first free one, else a new one from `alloc` while
    /// there may be more, else [`SlotsError::AllHeld`]. The slot is the caller's to
    /// fill ([`Slots::get_mut`]) until it hands out a [`Slots::handle`].
    pub fn acquire<E>(
        &mut self,
        alloc: impl FnOnce() -> Result<M, E>,
    ) -> Result<usize, SlotsError<E>> {
        // A count seen at one cannot rise behind our back: only this set, borrowed
        // mutably here, can clone it. (Handles are dropped on any thread; that only
        // lowers counts.)
        if let Some(i) = self.slots.iter().position(|s| Arc::strong_count(s) == 1) {
            return Ok(i);
        }
        if self.slots.len() >= self.max {
            return Err(SlotsError::AllHeld {
                held: self.slots.len(),
            });
        }
        self.slots
            .push(Arc::new(alloc().map_err(SlotsError::Alloc)?));
        Ok(self.slots.len() - 1)
    }

    /// Slot `i`, to fill, while no handle to it is out.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut M> {
        self.slots.get_mut(i).and_then(Arc::get_mut)
    }

    /// Slot `i` itself, without mutable access: for what the caller tracks with
    /// interior mutability.
    pub fn get(&self, i: usize) -> Option<&M> {
        self.slots.get(i).map(|s| &**s)
    }

    /// A handle that keeps slot `i` from reuse while it lives.
    pub fn handle(&self, i: usize) -> Arc<M> {
        self.slots[i].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake allocation that counts how many were made and freed.
    struct Fake {
        id: usize,
        freed: Arc<AtomicUsize>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.freed.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn make(n: &mut usize, freed: &Arc<AtomicUsize>) -> impl FnOnce() -> Result<Fake, String> {
        *n += 1;
        let (id, freed) = (*n, freed.clone());
        move || Ok(Fake { id, freed })
    }

    #[test]
    fn a_slot_is_reused_only_once_every_handle_is_gone() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut made = 0;
        let mut s = Slots::new(3);
        let a = s.acquire(make(&mut made, &freed)).unwrap();
        let ha = s.handle(a);
        let ha2 = ha.clone(); // a second tensor of the same batch
        let b = s.acquire(make(&mut made, &freed)).unwrap();
        assert_ne!(a, b, "slot a is held");
        assert!(
            s.get_mut(b).is_some(),
            "a slot without handles may be filled"
        );
        let hb = s.handle(b);
        assert!(s.get_mut(b).is_none(), "not while a handle is out");
        drop(ha);
        let c = s.acquire(make(&mut made, &freed)).unwrap();
        assert_ne!(c, a, "one of slot a's handles still lives");
        let hc = s.handle(c);
        assert_eq!((s.len(), s.held()), (3, 3));
        drop(ha2);
        assert_eq!(s.held(), 2);
        // All made: the free one is taken without making another.
        assert_eq!(s.acquire(make(&mut made, &freed)).unwrap(), a);
        assert_eq!(s.get(a).unwrap().id, 1);
        assert_eq!(s.len(), 3);
        drop((hb, hc));
        assert_eq!(freed.load(Ordering::SeqCst), 0, "the set still holds them");
    }

    #[test]
    fn at_the_limit_every_slot_held_is_an_error_naming_the_count() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut made = 0;
        let mut s = Slots::new(2);
        let held: Vec<_> = (0..2)
            .map(|_| {
                let i = s.acquire(make(&mut made, &freed)).unwrap();
                s.handle(i)
            })
            .collect();
        let e = s.acquire(make(&mut made, &freed)).unwrap_err();
        assert!(matches!(e, SlotsError::AllHeld { held: 2 }));
        assert!(
            e.to_string()
                .contains("all 2 device batches are still held"),
            "{e}"
        );
        drop(held);
        assert!(s.acquire(make(&mut made, &freed)).is_ok());
    }

    #[test]
    fn memory_outlives_the_set_while_a_handle_lives_and_alloc_errors_pass_through() {
        let freed = Arc::new(AtomicUsize::new(0));
        let mut made = 0;
        let mut s = Slots::new(4);
        let i = s.acquire(make(&mut made, &freed)).unwrap();
        let h = s.handle(i);
        let e = s
            .acquire(|| Err::<Fake, _>("out of memory".to_string()))
            .unwrap_err();
        assert_eq!(e.to_string(), "out of memory");
        drop(s);
        assert_eq!(freed.load(Ordering::SeqCst), 0, "a tensor still reads it");
        drop(h);
        assert_eq!(freed.load(Ordering::SeqCst), 1);
    }
}
