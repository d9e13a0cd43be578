//! The CPU backend: GEMM through `gemm-f32` (AVX-512 where the CPU has it), everything
//! else element-wise or per channel on rayon. One file per concern, each op's forward
//! and backward together: `gemm`, `conv` (im2col, col2im), `conv_blocks` (a whole
//! convolution, by blocks of images whose columns stay in cache), `norm` (batch norm, data
//! normalisation), `pool`, `bn_pool` (batch norm + ReLU + max pool, fused),
//! `elementwise` (fill, add, bias + activation, ReLU), `loss` (softmax cross-entropy, sigmoid BCE),
//! `optim` (SGD, AdamW). This file holds the buffers and the [`Backend`] impl, which
//! hands each op to its file.
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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    AdamWStep, BResult, Backend, BackendError, BnGeom, BnPoolGeom, ColLayout, ConvGeom, DataLayout,
    Elem, Gemm, In, Out, PoolGeom, SgdStep,
};

/// Element-wise ops work in chunks of this many elements: big enough to amortise rayon,
/// small enough to balance two to sixteen cores.
const CHUNK: usize = 1 << 14;

/// A host buffer. The second field accounts for its bytes in the backend's
/// [`CpuBackend::live_bytes`] while it lives (empty for buffers made with `From`).
#[derive(Debug, Clone, Default)]
pub struct CpuBuf<T>(
    pub Vec<T>,
    // Kept for its `Drop`, which gives the bytes back to the ledger.
    #[allow(dead_code)] Held,
);

impl<T> From<Vec<T>> for CpuBuf<T> {
    fn from(v: Vec<T>) -> Self {
        CpuBuf(v, Held::default())
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
struct Held(Option<(Arc<Ledger>, usize)>);

impl Clone for Held {
    fn clone(&self) -> Self {
        if let Some((ledger, bytes)) = &self.0 {
            ledger.live.fetch_add(*bytes, Ordering::Relaxed);
        }
        Held(self.0.clone())
    }
}

impl Drop for Held {
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

impl Backend for CpuBackend {
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
        // From here the ledger counts `bytes`: `held` gives them back if we fail.
        let held = Held(Some((self.ledger.clone(), bytes)));
        let v = zeroed::<T>(len).map_err(|why| err(bytes, why))?;
        self.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(CpuBuf(v, held))
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

    fn im2col_budget(&self) -> usize {
        // 16 MiB of f32: GEMM panels stay warm in cache, and a chunk still holds enough
        // columns for the GEMM's threads to split.
        4 << 20
    }

    fn col_layout(&self) -> ColLayout {
        ColLayout::PixelMajor
    }

    fn fill(&self, dst: Out<'_, Self>, len: usize, value: f32) -> BResult<()> {
        elementwise::fill(dst, len, value)
    }

    fn add(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        elementwise::add(x, y, len)
    }

    fn add_act(
        &self,
        a: In<'_, Self>,
        b: In<'_, Self>,
        y: Out<'_, Self>,
        len: usize,
        relu: bool,
    ) -> BResult<()> {
        elementwise::add_act(a, b, y, len, relu)
    }

    fn gemm(&self, spec: Gemm, a: In<'_, Self>, b: In<'_, Self>, c: Out<'_, Self>) -> BResult<()> {
        gemm::gemm(&self.slabs, spec, a, b, c)
    }

    fn im2col(
        &self,
        x: In<'_, Self>,
        geom: ConvGeom,
        n0: usize,
        nc: usize,
        col: Out<'_, Self>,
    ) -> BResult<()> {
        conv::im2col(x, geom, n0, nc, col)
    }

    fn col2im(
        &self,
        col: In<'_, Self>,
        geom: ConvGeom,
        n0: usize,
        nc: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        conv::col2im(col, geom, n0, nc, dx)
    }

    fn conv_scratch(&self, geom: ConvGeom, cout: usize) -> usize {
        conv_blocks::scratch_len(geom, cout)
    }

    fn conv_forward(
        &self,
        x: In<'_, Self>,
        w: In<'_, Self>,
        geom: ConvGeom,
        cout: usize,
        y: Out<'_, Self>,
        scratch: Out<'_, Self>,
    ) -> BResult<()> {
        conv_blocks::forward(x, w, geom, cout, y, scratch)
    }

    fn conv_backward(
        &self,
        x: In<'_, Self>,
        w: In<'_, Self>,
        dy: In<'_, Self>,
        geom: ConvGeom,
        cout: usize,
        dw: Out<'_, Self>,
        dx: Option<Out<'_, Self>>,
        scratch: Out<'_, Self>,
        _reuse: bool,
    ) -> BResult<()> {
        conv_blocks::backward(x, w, dy, geom, cout, dw, dx, scratch)
    }

    fn bias_act_forward(
        &self,
        y: Out<'_, Self>,
        bias: Option<In<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()> {
        elementwise::bias_act_forward(y, bias, rows, cols, relu)
    }

    fn bias_act_backward(
        &self,
        y: In<'_, Self>,
        dy: Out<'_, Self>,
        dbias: Option<Out<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()> {
        elementwise::bias_act_backward(y, dy, dbias, rows, cols, relu)
    }

    fn relu_forward(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        elementwise::relu_forward(x, y, len)
    }

    fn relu_backward(
        &self,
        y: In<'_, Self>,
        dy: In<'_, Self>,
        dx: Out<'_, Self>,
        len: usize,
    ) -> BResult<()> {
        elementwise::relu_backward(y, dy, dx, len)
    }

    fn maxpool_forward(
        &self,
        x: In<'_, Self>,
        geom: PoolGeom,
        y: Out<'_, Self>,
        argmax: Out<'_, Self, u32>,
    ) -> BResult<()> {
        pool::maxpool_forward(x, geom, y, argmax)
    }

    fn maxpool_backward(
        &self,
        dy: In<'_, Self>,
        argmax: In<'_, Self, u32>,
        geom: PoolGeom,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        pool::maxpool_backward(dy, argmax, geom, dx)
    }

    fn avgpool_forward(
        &self,
        x: In<'_, Self>,
        planes: usize,
        hw: usize,
        y: Out<'_, Self>,
    ) -> BResult<()> {
        pool::avgpool_forward(x, planes, hw, y)
    }

    fn avgpool_backward(
        &self,
        dy: In<'_, Self>,
        planes: usize,
        hw: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        pool::avgpool_backward(dy, planes, hw, dx)
    }

    fn batchnorm_forward(
        &self,
        x: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        running: Out<'_, Self>,
        saved: Out<'_, Self>,
        y: Out<'_, Self>,
        bn: BnGeom,
        train: bool,
    ) -> BResult<()> {
        norm::batchnorm_forward(x, gamma_beta, running, saved, y, bn, train)
    }

    fn batchnorm_backward(
        &self,
        x: In<'_, Self>,
        y: In<'_, Self>,
        dy: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        saved: In<'_, Self>,
        dgamma_beta: Out<'_, Self>,
        dx: Out<'_, Self>,
        bn: BnGeom,
    ) -> BResult<()> {
        norm::batchnorm_backward(x, y, dy, gamma_beta, saved, dgamma_beta, dx, bn)
    }

    fn bn_relu_pool_scratch(&self, _g: BnPoolGeom) -> usize {
        0
    }

    fn bn_relu_pool_forward(
        &self,
        x: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        running: Out<'_, Self>,
        saved: Out<'_, Self>,
        y: Out<'_, Self>,
        winners: Out<'_, Self, u32>,
        _scratch: Out<'_, Self>,
        g: BnPoolGeom,
        train: bool,
    ) -> BResult<()> {
        bn_pool::forward(x, gamma_beta, running, saved, y, winners, g, train)
    }

    fn bn_relu_pool_backward(
        &self,
        x: In<'_, Self>,
        dy: In<'_, Self>,
        winners: In<'_, Self, u32>,
        gamma_beta: In<'_, Self>,
        saved: In<'_, Self>,
        dgamma_beta: Out<'_, Self>,
        dx: Out<'_, Self>,
        _scratch: Out<'_, Self>,
        g: BnPoolGeom,
    ) -> BResult<()> {
        bn_pool::backward(x, dy, winners, gamma_beta, saved, dgamma_beta, dx, g)
    }

    fn datanorm(
        &self,
        x: In<'_, Self, u8>,
        n: usize,
        h: usize,
        w: usize,
        mean: &[f32],
        std: &[f32],
        layout: DataLayout,
        y: Out<'_, Self>,
    ) -> BResult<()> {
        norm::datanorm(x, n, h, w, mean, std, layout, y)
    }

    fn softmax_xent(
        &self,
        logits: In<'_, Self>,
        labels: In<'_, Self, u32>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()> {
        loss::softmax_xent(logits, labels, classes, n, dlogits, stats)
    }

    fn softmax_xent_soft(
        &self,
        logits: In<'_, Self>,
        targets: In<'_, Self>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()> {
        loss::softmax_xent_soft(logits, targets, classes, n, dlogits, stats)
    }

    fn sigmoid_bce(
        &self,
        logits: In<'_, Self>,
        targets: In<'_, Self>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()> {
        loss::sigmoid_bce(logits, targets, classes, n, dlogits, stats)
    }

    fn sgd_step(
        &self,
        params: Out<'_, Self>,
        grads: In<'_, Self>,
        momentum: Out<'_, Self>,
        len: usize,
        decay_len: usize,
        h: SgdStep,
    ) -> BResult<()> {
        optim::sgd_step(params, grads, momentum, len, decay_len, h)
    }

    fn adamw_step(
        &self,
        params: Out<'_, Self>,
        grads: In<'_, Self>,
        m: Out<'_, Self>,
        v: Out<'_, Self>,
        len: usize,
        decay_len: usize,
        h: AdamWStep,
    ) -> BResult<()> {
        optim::adamw_step(params, grads, m, v, len, decay_len, h)
    }
}

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
