//! The memory of a map's batch arrays, reused from batch to batch: `Loader(map=fn)`
//! collates what `fn` returns into arrays whose memory comes from here, and goes back
//! here when the array and every view of it are gone (as the loader's own batch
//! buffers do, `batch.rs`).
//!
//! Why: a float32 batch of 64 images of 224x224x3 is 38.5 MB, above the size malloc
//! serves from its heap, so a fresh array per batch was fresh pages per batch, each
//! faulted in and zeroed by the kernel; that cost about as much as the copy into them.

use std::sync::{Arc, Mutex, PoisonError};

use numpy::ndarray::ArrayViewMut1;
use numpy::PyArray1;
use pyo3::prelude::*;

/// Idle blocks kept per loader: the batch being mapped, the one mapped ahead and the
/// one the caller holds come back in turn; more would only hold memory.
const KEEP: usize = 4;

/// One loader's idle blocks (`_stoker.MapBuffers`): `take(nbytes)` gives a u8 array
/// of that many bytes, of a block reused when one of that size is idle.
#[pyclass(module = "stoker", name = "MapBuffers", frozen)]
#[derive(Default)]
pub struct MapBuffers {
    idle: Arc<Mutex<Vec<Box<[u64]>>>>,
}

/// The owner of one block (the `base` of the arrays that view it): gives the block
/// back to its [`MapBuffers`] when dropped.
#[pyclass(module = "stoker", name = "MapBuffer", frozen)]
pub struct MapBuffer {
    /// u64 words, so that every numpy dtype up to 8 bytes wide is aligned in it.
    block: Mutex<Box<[u64]>>,
    idle: Arc<Mutex<Vec<Box<[u64]>>>>,
}

impl Drop for MapBuffer {
    fn drop(&mut self) {
        let block = std::mem::take(self.block.get_mut().unwrap_or_else(PoisonError::into_inner));
        if block.is_empty() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() == KEEP {
            // The oldest goes: a size no longer asked for leaves in turn.
            idle.remove(0);
        }
        idle.push(block);
    }
}

#[pymethods]
impl MapBuffers {
    #[new]
    pub fn new() -> Self {
        Self::default()
    }

    /// A uint8 array of `nbytes` bytes (contents undefined) whose base owns its
    /// memory: an idle block of that size if there is one, else a new one.
    fn take<'py>(&self, py: Python<'py>, nbytes: usize) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let words = nbytes.div_ceil(8);
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            idle.iter()
                .position(|b| b.len() == words)
                .map(|i| idle.remove(i))
        };
        let block = match reused {
            Some(b) => b,
            // calloc: pages are only touched (faulted in) as the samples are copied.
            None => vec![0u64; words].into_boxed_slice(),
        };
        let owner = Bound::new(
            py,
            MapBuffer {
                block: Mutex::new(block),
                idle: Arc::clone(&self.idle),
            },
        )?;
        let (ptr, len) = {
            let mut block = owner
                .get()
                .block
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (block.as_mut_ptr().cast::<u8>(), block.len() * 8)
        };
        // SAFETY: `ptr` points to `len >= nbytes` bytes of the boxed block, which does
        // not move while `owner` lives (only its Drop takes it out), and numpy keeps
        // `owner` as the array's base for as long as the array or any view of it
        // exists. The block is in no idle list while it is lent, so no other array
        // is given it until this one is gone.
        debug_assert!(nbytes <= len);
        let view = unsafe { ArrayViewMut1::from_shape_ptr(nbytes, ptr) };
        let array = unsafe { PyArray1::borrow_from_array(&view, owner.into_any()) };
        Ok(array)
    }

    /// Idle blocks held (for the tests).
    fn __len__(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
