//! A global allocator that refuses any single allocation above [`MAX_ALLOC`], so that
//! an absurd allocation by code under test shows up at once as Rust's "memory
//! allocation of N bytes failed" abort (a crash to AFL, a failed replay test) instead
//! of swapping, an OOM kill, or passing unnoticed on a machine with memory to spare.
//! Code that handles failure (`try_reserve`) sees an ordinary error.
//!
//! The harnesses keep honest inputs far below it: images of at most 4 megapixels,
//! inputs of at most a megabyte.

use std::alloc::{GlobalAlloc, Layout, System};

/// 1 GiB: more than 30 times what any harness needs for an input it accepts.
pub const MAX_ALLOC: usize = 1 << 30;

/// Install with `#[global_allocator] static A: CappedAlloc = CappedAlloc;`.
pub struct CappedAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged, except requests
// above the cap, which get the null pointer that reports failure.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOC {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_above_the_cap_and_serves_below() {
        let a = CappedAlloc;
        let big = Layout::from_size_align(MAX_ALLOC + 1, 8).expect("layout");
        // SAFETY: a null result is not used; a non-null one is freed with its layout.
        unsafe {
            assert!(a.alloc(big).is_null());
            assert!(a.alloc_zeroed(big).is_null());
            let small = Layout::from_size_align(64, 8).expect("layout");
            let p = a.alloc(small);
            assert!(!p.is_null());
            assert!(a.realloc(p, small, MAX_ALLOC + 1).is_null());
            a.dealloc(p, small);
        }
    }
}
