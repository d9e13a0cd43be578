//! The CPU backend: GEMM through `gemm-f32` (AVX-512 where the CPU has it), everything
//! else element-wise or per channel on rayon. One file per concern, each op's forward
//! and backward together: `gemm`, `conv` (im2col, col2im), `conv_blocks` (a whole
//! convolution, by blocks of images whose columns stay in cache), `winograd` (the 3x3,
//! stride-1, pad-1 convolutions, as Winograd F(2x2, 3x3)), `norm` (batch norm, data
//! normalisation), `pool`, `bn_pool` (batch norm + ReLU + max pool, fused),
//! `elementwise` (fill, add, bias + activation, ReLU), `loss` (softmax cross-entropy,
//! hard or soft, and sigmoid BCE),
//! `optim` (SGD, AdamW); each implements its concern's trait of ops. This file holds
//! the buffers and their [`Buffers`] impl.
//!
//! Determinism: work is split into fixed chunks (never by thread count) and every
//! reduction runs sequentially inside one chunk, so results are bit-identical across runs
//! and thread counts. `gemm-f32` partitions only the output, never the `k` sum; a
//! GEMM with a long `k` and a small output (a convolution's weight gradient) is split
//! here into a fixed number of `k` slabs whose partial products are added in slab order.

mod bn_pool;
mod conv;
mod conv_blocks;
mod elementwise;
mod gemm;
mod loss;
mod norm;
mod optim;
mod pool;
mod winograd;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{BResult, Backend, BackendError, Buffers, Elem, In, Out};

/// Element-wise ops work in chunks of this many elements: big enough to amortise rayon,
/// small enough to balance two to sixteen cores.
const CHUNK: usize = 1 << 14;

/// A host buffer. The second field accounts for its bytes in the backend's
/// [`CpuBackend::live_bytes`] while it lives (empty for buffers made with `From`).
#[derive(Debug, Clone, Default)]
pub struct CpuBuf<T>(
    pub Vec<T>,
    // Kept for its `Drop`, which gives the bytes back to the ledger.
    #[allow(dead_code)] LedgerEntry,
);

impl<T> From<Vec<T>> for CpuBuf<T> {
    fn from(v: Vec<T>) -> Self {
        CpuBuf(v, LedgerEntry::default())
    }
}

/// The bytes held by one backend's live buffers (shared by its clones), and the most
/// it may hold.
#[derive(Debug)]
struct Ledger {
    live: AtomicUsize,
    limit: usize,
}

/// A buffer's entry in its backend's [`Ledger`]: released when the buffer drops,
/// counted again when it is cloned.
#[derive(Debug, Default)]
struct LedgerEntry(Option<(Arc<Ledger>, usize)>);

impl Clone for LedgerEntry {
    fn clone(&self) -> Self {
        if let Some((ledger, bytes)) = &self.0 {
            ledger.live.fetch_add(*bytes, Ordering::Relaxed);
        }
        LedgerEntry(self.0.clone())
    }
}

impl Drop for LedgerEntry {
    fn drop(&mut self) {
        if let Some((ledger, bytes)) = &self.0 {
            ledger.live.fetch_sub(*bytes, Ordering::Relaxed);
        }
    }
}

/// The CPU backend. Cloning is cheap and shares the allocation counter and the memory
/// limit.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    allocs: Arc<AtomicUsize>,
    ledger: Arc<Ledger>,
    /// Partial products of split-`k` GEMMs, kept between calls.
    slabs: Arc<Mutex<Vec<f32>>>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::with_memory_limit(default_memory_limit())
    }
}

/// Three quarters of physical memory (unbounded where the system does not say): the
/// model's activations grow with the batch, and a batch size too large for the machine
/// must be an error at the first allocation over it, not the kernel's OOM killer once
/// the pages are touched. The rest is left to the loader's buffers and the system.
fn default_memory_limit() -> usize {
    stoker_loader::system::physical_memory().map_or(usize::MAX, |m| m / 4 * 3)
}

impl CpuBackend {
    /// A backend whose buffers may hold up to three quarters of physical memory.
    pub fn new() -> Self {
        Self::default()
    }
    /// A backend whose live buffers may hold at most `bytes`; an allocation beyond it
    /// is [`BackendError::Alloc`].
    pub fn with_memory_limit(bytes: usize) -> Self {
        Self {
            allocs: Arc::default(),
            ledger: Arc::new(Ledger {
                live: AtomicUsize::new(0),
                limit: bytes,
            }),
            slabs: Arc::default(),
        }
    }
    /// Buffers allocated so far through this backend (and its clones): lets tests check
    /// that a training step allocates nothing.
    pub fn alloc_count(&self) -> usize {
        self.allocs.load(Ordering::Relaxed)
    }
    /// Bytes held by this backend's live buffers.
    pub fn live_bytes(&self) -> usize {
        self.ledger.live.load(Ordering::Relaxed)
    }
    /// The most its live buffers may hold, in bytes.
    pub fn memory_limit(&self) -> usize {
        self.ledger.limit
    }

    /// Counts `bytes` against the limit, or says why not.
    fn reserve(&self, bytes: usize) -> Result<(), String> {
        let limit = self.ledger.limit;
        self.ledger
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                live.checked_add(bytes).filter(|&total| total <= limit)
            })
            .map(|_| ())
            .map_err(|live| {
                format!(
                    "the CPU backend's buffers would hold {} MiB, more than its limit of {} MiB \
                     (three quarters of physical memory by default); a smaller batch size needs less",
                    live.saturating_add(bytes) >> 20,
                    limit >> 20
                )
            })
    }
}

/// `len` zeros, from the allocator's zeroed memory: a large buffer costs no time and
/// no resident memory until its pages are first written, and a failed allocation is
/// an error, not an abort.
fn zeroed<T: Elem>(len: usize) -> Result<Vec<T>, String> {
    let layout = std::alloc::Layout::array::<T>(len).map_err(|e| e.to_string())?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: `layout` has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(format!("the system refused {} bytes", layout.size()));
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `[T; len]`, so
    // length and capacity are `len`; `Elem` is sealed to f32, u8 and u32, for which
    // all-zero bytes are a valid value (their default).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

fn out_of_bounds(op: &'static str, what: &str, need: usize, have: usize) -> BackendError {
    BackendError::Op {
        op,
        reason: format!("{what} needs elements up to {need}, buffer holds {have}"),
    }
}

/// The `len` elements an op reads from `x` on, or an error naming the op.
fn read_slice<'a, T: Elem>(
    x: In<'a, CpuBackend, T>,
    len: usize,
    op: &'static str,
) -> BResult<&'a [T]> {
    let have = x.buf.0.len();
    x.buf
        .0
        .get(x.off..x.off + len)
        .ok_or_else(|| out_of_bounds(op, "input", x.off + len, have))
}

/// The `len` elements an op writes from `x` on, or an error naming the op.
fn write_slice<'a, T: Elem>(
    x: Out<'a, CpuBackend, T>,
    len: usize,
    op: &'static str,
) -> BResult<&'a mut [T]> {
    let have = x.buf.0.len();
    let off = x.off;
    x.buf
        .0
        .get_mut(off..off + len)
        .ok_or_else(|| out_of_bounds(op, "output", off + len, have))
}

impl Buffers for CpuBackend {
    type Buf<T: Elem> = CpuBuf<T>;

    fn name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn alloc<T: Elem>(&self, len: usize) -> BResult<CpuBuf<T>> {
        let err = |bytes, reason| BackendError::Alloc {
            device: "cpu".into(),
            bytes,
            reason,
        };
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            err(
                usize::MAX,
                format!("{len} elements overflow the address space"),
            )
        })?;
        self.reserve(bytes).map_err(|why| err(bytes, why))?;
        // From here the ledger counts `bytes`: `entry` gives them back if we fail.
        let entry = LedgerEntry(Some((self.ledger.clone(), bytes)));
        let v = zeroed::<T>(len).map_err(|why| err(bytes, why))?;
        self.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(CpuBuf(v, entry))
    }

    fn buf_len<T: Elem>(&self, buf: &CpuBuf<T>) -> usize {
        buf.0.len()
    }

    fn upload<T: Elem>(&self, src: &[T], dst: Out<'_, Self, T>) -> BResult<()> {
        write_slice(dst, src.len(), "upload")?.copy_from_slice(src);
        Ok(())
    }

    fn download<T: Elem>(&self, src: In<'_, Self, T>, dst: &mut [T]) -> BResult<()> {
        dst.copy_from_slice(read_slice(src, dst.len(), "download")?);
        Ok(())
    }

    fn synchronize(&self) -> BResult<()> {
        Ok(())
    }
}

impl Backend for CpuBackend {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_count_against_the_memory_limit_while_they_live() {
        let b = CpuBackend::with_memory_limit(1000);
        let a = b.alloc::<f32>(200).unwrap();
        assert_eq!(b.live_bytes(), 800);
        assert!(a.0.iter().all(|&v| v == 0.0));
        let e = b.alloc::<u8>(201).unwrap_err().to_string();
        assert!(e.contains("more than its limit"), "{e}");
        assert_eq!(b.live_bytes(), 800, "a refused allocation holds nothing");
        let c = a.clone();
        assert_eq!(b.live_bytes(), 1600);
        drop((a, c));
        assert_eq!(b.live_bytes(), 0);
        assert_eq!(b.alloc::<u8>(1000).unwrap().0.len(), 1000);
        assert!(
            b.alloc::<u32>(usize::MAX / 2).is_err(),
            "overflow is an error"
        );
    }
}
