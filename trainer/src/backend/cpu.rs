//! The CPU backend: GEMM through `matrixmultiply` (its own threads), everything else
//! element-wise or per channel on rayon.
//!
//! Determinism: work is split into fixed chunks (never by thread count) and every
//! reduction runs sequentially inside one chunk, so results are bit-identical across runs
//! and thread counts. `matrixmultiply` partitions only the output, never the `k` sum; a
//! GEMM with a long `k` and a small output (a convolution's weight gradient) is split
//! here into a fixed number of `k` slabs whose partial products are added in slab order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use rayon::prelude::*;

use super::{
    AdamWStep, BResult, Backend, BackendError, BnGeom, ConvGeom, DataLayout, Elem, Gemm, In, Out,
    PoolGeom, SgdStep,
};

/// Element-wise ops work in chunks of this many elements: big enough to amortise rayon,
/// small enough to balance two to sixteen cores.
const CHUNK: usize = 1 << 14;

/// A host buffer.
#[derive(Debug, Clone, Default)]
pub struct CpuBuf<T>(pub Vec<T>);

/// The CPU backend. Cloning is cheap and shares the allocation counter.
#[derive(Debug, Clone, Default)]
pub struct CpuBackend {
    allocs: Arc<AtomicUsize>,
    /// Partial products of split-`k` GEMMs, kept between calls.
    slabs: Arc<Mutex<Vec<f32>>>,
}

/// A split-`k` GEMM computes this many partial products. Fixed, not the thread count:
/// the sum's order, and so the result, must not depend on the machine.
const K_SLABS: usize = 4;

/// Split `k` when each slab still has at least this many terms and the output is at most
/// `SPLIT_MAX_OUT` elements (so the partial products stay in cache and cheap to add).
const SPLIT_MIN_SLAB_K: usize = 2048;
const SPLIT_MAX_OUT: usize = 1 << 17;

/// One `matrixmultiply` call on raw strided operands (`C = alpha A B + beta C`).
///
/// matrixmultiply packs B on one thread and splits only a tall `m` (at least 96 rows)
/// across threads; for a short, wide product (a convolution: `cout` rows, images x
/// pixels columns) it packs the big operand serially. Computing the transpose
/// `C^T = B^T A^T` instead puts the wide side in `m`, so each thread packs its own part.
/// Every element is still one dot product in the same `k` order, so the result is the
/// same.
///
/// # Safety
/// The operands must hold every element the shapes and strides address.
#[allow(clippy::too_many_arguments)]
unsafe fn sgemm_raw(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: *const f32,
    (rsa, csa): (isize, isize),
    b: *const f32,
    (rsb, csb): (isize, isize),
    beta: f32,
    c: *mut f32,
    (rsc, csc): (isize, isize),
) {
    if m < 96 && n > m {
        matrixmultiply::sgemm(n, k, m, alpha, b, csb, rsb, a, csa, rsa, beta, c, csc, rsc);
    } else {
        matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc);
    }
}

/// A raw pointer that may cross to a rayon worker (the slabs it addresses are disjoint).
#[derive(Clone, Copy)]
struct SendPtr<T>(*const T);
// SAFETY: only used for read-only operands shared by the slab tasks.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }
    /// Buffers allocated so far through this backend (and its clones): lets tests check
    /// that a training step allocates nothing.
    pub fn alloc_count(&self) -> usize {
        self.allocs.load(Ordering::Relaxed)
    }
}

fn oob(op: &'static str, what: &str, need: usize, have: usize) -> BackendError {
    BackendError::Op {
        op,
        reason: format!("{what} needs elements up to {need}, buffer holds {have}"),
    }
}

fn rd<'a, T: Elem>(x: In<'a, CpuBackend, T>, len: usize, op: &'static str) -> BResult<&'a [T]> {
    let have = x.buf.0.len();
    x.buf
        .0
        .get(x.off..x.off + len)
        .ok_or_else(|| oob(op, "input", x.off + len, have))
}

fn wr<'a, T: Elem>(
    x: Out<'a, CpuBackend, T>,
    len: usize,
    op: &'static str,
) -> BResult<&'a mut [T]> {
    let have = x.buf.0.len();
    let off = x.off;
    x.buf
        .0
        .get_mut(off..off + len)
        .ok_or_else(|| oob(op, "output", off + len, have))
}

/// For a stride-1 convolution tap at column offset `kx`: the output columns
/// `lo..hi` whose input column `ox + kx - pad` lies inside `0..w` (`lo <= hi`).
fn valid_cols(ow: usize, w: usize, kx: usize, pad: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(kx).min(ow);
    let hi = (w + pad).saturating_sub(kx).min(ow).max(lo);
    (lo, hi)
}

/// Lanes of the blocked sums below: wide enough for the compiler to vectorise, and a
/// fixed order, so results do not depend on threads.
const LANES: usize = 16;

/// `(sum u, sum v)` of `f(x[i], y[i], z[i]) = (u, v)` over three equal-length rows, in
/// f32 lanes folded into f64 every block: vectorised (no indexing, no branches in the
/// hot loop) and accurate for rows of millions of elements.
#[inline(always)]
fn blocked_sums(
    x: &[f32],
    y: &[f32],
    z: &[f32],
    f: impl Fn(f32, f32, f32) -> (f32, f32),
) -> (f64, f64) {
    const BLOCK: usize = 1024;
    let (mut s1, mut s2) = (0f64, 0f64);
    for ((xb, yb), zb) in x.chunks(BLOCK).zip(y.chunks(BLOCK)).zip(z.chunks(BLOCK)) {
        let (mut a, mut b) = ([0f32; LANES], [0f32; LANES]);
        let (xl, yl, zl) = (
            xb.chunks_exact(LANES),
            yb.chunks_exact(LANES),
            zb.chunks_exact(LANES),
        );
        let tail = xl
            .remainder()
            .iter()
            .zip(yl.remainder())
            .zip(zl.remainder());
        for ((xs, ys), zs) in xl.zip(yl).zip(zl) {
            for l in 0..LANES {
                let (u, v) = f(xs[l], ys[l], zs[l]);
                a[l] += u;
                b[l] += v;
            }
        }
        for ((&xv, &yv), &zv) in tail {
            let (u, v) = f(xv, yv, zv);
            a[0] += u;
            b[0] += v;
        }
        s1 += a.iter().map(|&v| v as f64).sum::<f64>();
        s2 += b.iter().map(|&v| v as f64).sum::<f64>();
    }
    (s1, s2)
}

impl Backend for CpuBackend {
    type Buf<T: Elem> = CpuBuf<T>;

    fn name(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn alloc<T: Elem>(&self, len: usize) -> BResult<CpuBuf<T>> {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|e| BackendError::Alloc {
            device: "cpu".into(),
            bytes: len * std::mem::size_of::<T>(),
            reason: e.to_string(),
        })?;
        v.resize(len, T::default());
        self.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(CpuBuf(v))
    }

    fn buf_len<T: Elem>(&self, buf: &CpuBuf<T>) -> usize {
        buf.0.len()
    }

    fn upload<T: Elem>(&self, src: &[T], dst: Out<'_, Self, T>) -> BResult<()> {
        wr(dst, src.len(), "upload")?.copy_from_slice(src);
        Ok(())
    }

    fn download<T: Elem>(&self, src: In<'_, Self, T>, dst: &mut [T]) -> BResult<()> {
        dst.copy_from_slice(rd(src, dst.len(), "download")?);
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

    fn fill(&self, dst: Out<'_, Self>, len: usize, value: f32) -> BResult<()> {
        wr(dst, len, "fill")?
            .par_chunks_mut(CHUNK)
            .for_each(|c| c.fill(value));
        Ok(())
    }

    fn add(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        let x = rd(x, len, "add")?;
        let y = wr(y, len, "add")?;
        y.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, x)| *y += x));
        Ok(())
    }

    fn add_act(
        &self,
        a: In<'_, Self>,
        b: In<'_, Self>,
        y: Out<'_, Self>,
        len: usize,
        relu: bool,
    ) -> BResult<()> {
        let a = rd(a, len, "add_act")?;
        let b = rd(b, len, "add_act")?;
        let y = wr(y, len, "add_act")?;
        y.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(y, (a, b))| {
                for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
                    let s = a + b;
                    *y = if relu { s.max(0.0) } else { s };
                }
            });
        Ok(())
    }

    fn gemm(&self, g: Gemm, a: In<'_, Self>, b: In<'_, Self>, c: Out<'_, Self>) -> BResult<()> {
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        // Extent of each operand as stored, so the unsafe call below never reads or
        // writes outside the slices.
        let extent = |rows: usize, cols: usize, ld: usize| (rows - 1) * ld + cols;
        let (ar, ac) = if g.ta { (g.k, g.m) } else { (g.m, g.k) };
        let (br, bc) = if g.tb { (g.n, g.k) } else { (g.k, g.n) };
        if ac > g.lda || bc > g.ldb || g.n > g.ldc {
            return Err(BackendError::Op {
                op: "gemm",
                reason: format!("leading dimension too small: {g:?}"),
            });
        }
        let (a, b) = if g.k == 0 {
            (&[][..], &[][..])
        } else {
            (
                rd(a, extent(ar, ac, g.lda), "gemm")?,
                rd(b, extent(br, bc, g.ldb), "gemm")?,
            )
        };
        let c = wr(c, extent(g.m, g.n, g.ldc), "gemm")?;
        if g.k == 0 {
            for r in 0..g.m {
                for v in &mut c[r * g.ldc..r * g.ldc + g.n] {
                    *v = if g.beta == 0.0 { 0.0 } else { *v * g.beta };
                }
            }
            return Ok(());
        }
        let (rsa, csa) = if g.ta { (1, g.lda) } else { (g.lda, 1) };
        let (rsb, csb) = if g.tb { (1, g.ldb) } else { (g.ldb, 1) };
        let (sa, sb) = ((rsa as isize, csa as isize), (rsb as isize, csb as isize));
        let out = g.m * g.n;
        if g.k >= K_SLABS * SPLIT_MIN_SLAB_K && out <= SPLIT_MAX_OUT {
            // A long sum into a small output (the weight gradient of a convolution: k is
            // images x pixels): matrixmultiply would run it on about one core. The slabs
            // run in parallel, then are added in order into C.
            // The kept buffer, unless another GEMM holds it (one issued from inside a
            // rayon task): then a buffer of its own rather than waiting on the lock.
            let (mut held, mut own);
            let slabs: &mut Vec<f32> = match self.slabs.try_lock() {
                Ok(guard) => {
                    held = guard;
                    &mut held
                }
                Err(TryLockError::Poisoned(p)) => {
                    held = p.into_inner();
                    &mut held
                }
                Err(TryLockError::WouldBlock) => {
                    own = Vec::new();
                    &mut own
                }
            };
            if slabs.len() < K_SLABS * out {
                slabs.resize(K_SLABS * out, 0.0);
            }
            let per = g.k.div_ceil(K_SLABS);
            let (ap, bp) = (SendPtr(a.as_ptr()), SendPtr(b.as_ptr()));
            slabs[..K_SLABS * out]
                .par_chunks_mut(out)
                .enumerate()
                .for_each(|(i, part)| {
                    let k0 = (i * per).min(g.k);
                    let kc = per.min(g.k - k0);
                    let (ap, bp) = (ap, bp);
                    // SAFETY: slab i reads columns k0..k0+kc of A and rows k0..k0+kc of
                    // B, inside the extents checked above; it writes only its own part.
                    unsafe {
                        sgemm_raw(
                            g.m,
                            kc,
                            g.n,
                            1.0,
                            ap.0.offset(k0 as isize * sa.1),
                            sa,
                            bp.0.offset(k0 as isize * sb.0),
                            sb,
                            0.0,
                            part.as_mut_ptr(),
                            (g.n as isize, 1),
                        );
                    }
                });
            let parts = &slabs[..K_SLABS * out];
            for r in 0..g.m {
                let row = &mut c[r * g.ldc..r * g.ldc + g.n];
                for (j, v) in row.iter_mut().enumerate() {
                    let mut sum = 0.0f32;
                    for p in 0..K_SLABS {
                        sum += parts[p * out + r * g.n + j];
                    }
                    let prev = if g.beta == 0.0 { 0.0 } else { g.beta * *v };
                    *v = prev + g.alpha * sum;
                }
            }
            return Ok(());
        }
        // SAFETY: the extents of a, b and c were checked above for these strides.
        unsafe {
            sgemm_raw(
                g.m,
                g.k,
                g.n,
                g.alpha,
                a.as_ptr(),
                sa,
                b.as_ptr(),
                sb,
                g.beta,
                c.as_mut_ptr(),
                (g.ldc as isize, 1),
            );
        }
        Ok(())
    }

    fn im2col(
        &self,
        x: In<'_, Self>,
        g: ConvGeom,
        n0: usize,
        nc: usize,
        col: Out<'_, Self>,
    ) -> BResult<()> {
        let (oh, ow) = (g.out_h(), g.out_w());
        let hw = g.h * g.w;
        let row = nc * oh * ow;
        if n0 + nc > g.n {
            return Err(BackendError::Op {
                op: "im2col",
                reason: format!("images {n0}..{} of {}", n0 + nc, g.n),
            });
        }
        let x = rd(x, g.c * g.n * hw, "im2col")?;
        let col = wr(col, g.col_rows() * row, "im2col")?;
        if row == 0 {
            return Ok(());
        }
        col.par_chunks_mut(row).enumerate().for_each(|(r, dst)| {
            let ci = r / (g.kh * g.kw);
            let ky = (r / g.kw) % g.kh;
            let kx = r % g.kw;
            for ni in 0..nc {
                let plane = &x[(ci * g.n + n0 + ni) * hw..][..hw];
                let out = &mut dst[ni * oh * ow..][..oh * ow];
                for oy in 0..oh {
                    let seg = &mut out[oy * ow..][..ow];
                    let iy = (oy * g.stride + ky) as isize - g.pad as isize;
                    if iy < 0 || iy >= g.h as isize {
                        seg.fill(0.0);
                        continue;
                    }
                    let src = &plane[iy as usize * g.w..][..g.w];
                    if g.stride == 1 {
                        let (lo, hi) = valid_cols(ow, g.w, kx, g.pad);
                        seg[..lo].fill(0.0);
                        seg[lo..hi].copy_from_slice(&src[lo + kx - g.pad..hi + kx - g.pad]);
                        seg[hi..].fill(0.0);
                        continue;
                    }
                    for (ox, v) in seg.iter_mut().enumerate() {
                        let ix = (ox * g.stride + kx) as isize - g.pad as isize;
                        *v = if ix < 0 || ix >= g.w as isize {
                            0.0
                        } else {
                            src[ix as usize]
                        };
                    }
                }
            }
        });
        Ok(())
    }

    fn col2im(
        &self,
        col: In<'_, Self>,
        g: ConvGeom,
        n0: usize,
        nc: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        let (oh, ow) = (g.out_h(), g.out_w());
        let hw = g.h * g.w;
        let row = nc * oh * ow;
        if n0 + nc > g.n {
            return Err(BackendError::Op {
                op: "col2im",
                reason: format!("images {n0}..{} of {}", n0 + nc, g.n),
            });
        }
        let col = rd(col, g.col_rows() * row, "col2im")?;
        let dx = wr(dx, g.c * g.n * hw, "col2im")?;
        if hw == 0 {
            return Ok(());
        }
        // One task per input channel: it owns its planes, and sums its kernel taps in a
        // fixed order.
        dx.par_chunks_mut(g.n * hw)
            .enumerate()
            .for_each(|(ci, planes)| {
                let region = &mut planes[n0 * hw..(n0 + nc) * hw];
                region.fill(0.0);
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let r = (ci * g.kh + ky) * g.kw + kx;
                        let src = &col[r * row..][..row];
                        for ni in 0..nc {
                            let plane = &mut region[ni * hw..][..hw];
                            let s = &src[ni * oh * ow..][..oh * ow];
                            for oy in 0..oh {
                                let iy = (oy * g.stride + ky) as isize - g.pad as isize;
                                if iy < 0 || iy >= g.h as isize {
                                    continue;
                                }
                                let drow = &mut plane[iy as usize * g.w..][..g.w];
                                if g.stride == 1 {
                                    let (lo, hi) = valid_cols(ow, g.w, kx, g.pad);
                                    let d = &mut drow[lo + kx - g.pad..hi + kx - g.pad];
                                    for (d, v) in d.iter_mut().zip(&s[oy * ow + lo..oy * ow + hi]) {
                                        *d += v;
                                    }
                                    continue;
                                }
                                for ox in 0..ow {
                                    let ix = (ox * g.stride + kx) as isize - g.pad as isize;
                                    if ix >= 0 && ix < g.w as isize {
                                        drow[ix as usize] += s[oy * ow + ox];
                                    }
                                }
                            }
                        }
                    }
                }
            });
        Ok(())
    }

    fn bias_act_forward(
        &self,
        y: Out<'_, Self>,
        bias: Option<In<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()> {
        let y = wr(y, rows * cols, "bias_act_forward")?;
        let bias = match bias {
            Some(b) => Some(rd(b, rows, "bias_act_forward")?),
            None => None,
        };
        if cols == 0 {
            return Ok(());
        }
        y.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
            let b = bias.map_or(0.0, |b| b[r]);
            for v in row {
                let s = *v + b;
                *v = if relu { s.max(0.0) } else { s };
            }
        });
        Ok(())
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
        let y = rd(y, rows * cols, "bias_act_backward")?;
        let dy = wr(dy, rows * cols, "bias_act_backward")?;
        if cols == 0 {
            return Ok(());
        }
        let mask = |dy: &mut [f32], y: &[f32]| {
            if relu {
                for (d, y) in dy.iter_mut().zip(y) {
                    if *y <= 0.0 {
                        *d = 0.0;
                    }
                }
            }
        };
        match dbias {
            Some(db) => {
                let db = wr(db, rows, "bias_act_backward")?;
                dy.par_chunks_mut(cols)
                    .zip(y.par_chunks(cols))
                    .zip(db.par_iter_mut())
                    .for_each(|((dy, y), db)| {
                        mask(dy, y);
                        *db = dy.iter().map(|&v| v as f64).sum::<f64>() as f32;
                    });
            }
            None => dy
                .par_chunks_mut(cols)
                .zip(y.par_chunks(cols))
                .for_each(|(dy, y)| mask(dy, y)),
        }
        Ok(())
    }

    fn relu_forward(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        let x = rd(x, len, "relu_forward")?;
        let y = wr(y, len, "relu_forward")?;
        y.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, x)| *y = x.max(0.0)));
        Ok(())
    }

    fn relu_backward(
        &self,
        y: In<'_, Self>,
        dy: In<'_, Self>,
        dx: Out<'_, Self>,
        len: usize,
    ) -> BResult<()> {
        let y = rd(y, len, "relu_backward")?;
        let dy = rd(dy, len, "relu_backward")?;
        let dx = wr(dx, len, "relu_backward")?;
        dx.par_chunks_mut(CHUNK)
            .zip(y.par_chunks(CHUNK).zip(dy.par_chunks(CHUNK)))
            .for_each(|(dx, (y, dy))| {
                for ((dx, y), dy) in dx.iter_mut().zip(y).zip(dy) {
                    *dx = if *y > 0.0 { *dy } else { 0.0 };
                }
            });
        Ok(())
    }

    fn maxpool_forward(
        &self,
        x: In<'_, Self>,
        g: PoolGeom,
        y: Out<'_, Self>,
        argmax: Out<'_, Self, u32>,
    ) -> BResult<()> {
        let (oh, ow) = (g.out_h(), g.out_w());
        let (hw, ohw) = (g.h * g.w, oh * ow);
        let x = rd(x, g.planes * hw, "maxpool_forward")?;
        let y = wr(y, g.planes * ohw, "maxpool_forward")?;
        let am = wr(argmax, g.planes * ohw, "maxpool_forward")?;
        if ohw == 0 {
            return Ok(());
        }
        y.par_chunks_mut(ohw)
            .zip(am.par_chunks_mut(ohw))
            .enumerate()
            .for_each(|(p, (y, am))| {
                let plane = &x[p * hw..][..hw];
                if g.k == 2 && g.stride == 2 {
                    for oy in 0..oh {
                        let (r0, r1) = (2 * oy * g.w, (2 * oy + 1) * g.w);
                        for ox in 0..ow {
                            let i = [r0 + 2 * ox, r0 + 2 * ox + 1, r1 + 2 * ox, r1 + 2 * ox + 1];
                            // Selects, not branches: after a ReLU the winner is a coin flip,
                            // and mispredictions cost more than the loads.
                            let (mut best, mut at) = (plane[i[0]], i[0]);
                            for &j in &i[1..] {
                                let v = plane[j];
                                let win = v > best;
                                at = if win { j } else { at };
                                best = if win { v } else { best };
                            }
                            y[oy * ow + ox] = best;
                            am[oy * ow + ox] = at as u32;
                        }
                    }
                    return;
                }
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut best = f32::NEG_INFINITY;
                        let mut at = (oy * g.stride) * g.w + ox * g.stride;
                        for ky in 0..g.k {
                            for kx in 0..g.k {
                                let i = (oy * g.stride + ky) * g.w + ox * g.stride + kx;
                                // `>` keeps the first maximum; NaN never wins, as in max().
                                if plane[i] > best {
                                    best = plane[i];
                                    at = i;
                                }
                            }
                        }
                        y[oy * ow + ox] = best;
                        am[oy * ow + ox] = at as u32;
                    }
                }
            });
        Ok(())
    }

    fn maxpool_backward(
        &self,
        dy: In<'_, Self>,
        argmax: In<'_, Self, u32>,
        g: PoolGeom,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        let (hw, ohw) = (g.h * g.w, g.out_h() * g.out_w());
        let dy = rd(dy, g.planes * ohw, "maxpool_backward")?;
        let am = rd(argmax, g.planes * ohw, "maxpool_backward")?;
        let dx = wr(dx, g.planes * hw, "maxpool_backward")?;
        if hw == 0 || ohw == 0 {
            return Ok(());
        }
        dx.par_chunks_mut(hw)
            .zip(dy.par_chunks(ohw).zip(am.par_chunks(ohw)))
            .for_each(|(dx, (dy, am))| {
                dx.fill(0.0);
                for (d, &i) in dy.iter().zip(am) {
                    if let Some(v) = dx.get_mut(i as usize) {
                        *v += d;
                    }
                }
            });
        Ok(())
    }

    fn avgpool_forward(
        &self,
        x: In<'_, Self>,
        planes: usize,
        hw: usize,
        y: Out<'_, Self>,
    ) -> BResult<()> {
        let x = rd(x, planes * hw, "avgpool_forward")?;
        let y = wr(y, planes, "avgpool_forward")?;
        if hw == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        y.par_iter_mut()
            .zip(x.par_chunks(hw))
            .for_each(|(y, x)| *y = x.iter().sum::<f32>() * inv);
        Ok(())
    }

    fn avgpool_backward(
        &self,
        dy: In<'_, Self>,
        planes: usize,
        hw: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        let dy = rd(dy, planes, "avgpool_backward")?;
        let dx = wr(dx, planes * hw, "avgpool_backward")?;
        if hw == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        dx.par_chunks_mut(hw)
            .zip(dy.par_iter())
            .for_each(|(dx, dy)| dx.fill(dy * inv));
        Ok(())
    }

    fn batchnorm_forward(
        &self,
        x: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        running: Out<'_, Self>,
        saved: Out<'_, Self>,
        y: Out<'_, Self>,
        g: BnGeom,
        train: bool,
    ) -> BResult<()> {
        let m = g.n * g.hw;
        let x = rd(x, g.c * m, "batchnorm_forward")?;
        let gb = rd(gamma_beta, 2 * g.c, "batchnorm_forward")?;
        let y = wr(y, g.c * m, "batchnorm_forward")?;
        let running = wr(running, 2 * g.c, "batchnorm_forward")?;
        if m == 0 {
            return Ok(());
        }
        let (gamma, beta) = gb.split_at(g.c);
        let (rmean, rvar) = running.split_at_mut(g.c);
        let act = |v: f32| if g.relu { v.max(0.0) } else { v };
        if !train {
            y.par_chunks_mut(m).enumerate().for_each(|(c, y)| {
                let scale = gamma[c] / (rvar[c] + g.eps).sqrt();
                let shift = beta[c] - rmean[c] * scale;
                for (y, x) in y.iter_mut().zip(&x[c * m..][..m]) {
                    *y = act(x * scale + shift);
                }
            });
            return Ok(());
        }
        let saved = wr(saved, 2 * g.c, "batchnorm_forward")?;
        let (smean, sinv) = saved.split_at_mut(g.c);
        y.par_chunks_mut(m)
            .zip(smean.par_iter_mut().zip(sinv.par_iter_mut()))
            .zip(rmean.par_iter_mut().zip(rvar.par_iter_mut()))
            .enumerate()
            .for_each(|(c, ((y, (sm, si)), (rm, rv)))| {
                let xs = &x[c * m..][..m];
                // Sums of x - x[0]: shifting by a sample keeps E[x^2] - E[x]^2 from
                // cancelling when the mean is large next to the spread.
                let k = xs[0];
                let (s, ss) = blocked_sums(xs, xs, xs, |x, _, _| {
                    let d = x - k;
                    (d, d * d)
                });
                let dm = s / m as f64;
                let mean = k as f64 + dm;
                let var = (ss / m as f64 - dm * dm).max(0.0);
                let inv = 1.0 / (var + g.eps as f64).sqrt();
                *sm = mean as f32;
                *si = inv as f32;
                let unbiased = if m > 1 {
                    var * m as f64 / (m - 1) as f64
                } else {
                    var
                };
                *rm = (1.0 - g.momentum) * *rm + g.momentum * mean as f32;
                *rv = (1.0 - g.momentum) * *rv + g.momentum * unbiased as f32;
                let scale = gamma[c] * inv as f32;
                let shift = beta[c] - mean as f32 * scale;
                for (y, x) in y.iter_mut().zip(xs) {
                    *y = act(x * scale + shift);
                }
            });
        Ok(())
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
        g: BnGeom,
    ) -> BResult<()> {
        let m = g.n * g.hw;
        let x = rd(x, g.c * m, "batchnorm_backward")?;
        let y = if g.relu {
            rd(y, g.c * m, "batchnorm_backward")?
        } else {
            &[][..]
        };
        let dy = rd(dy, g.c * m, "batchnorm_backward")?;
        let gb = rd(gamma_beta, 2 * g.c, "batchnorm_backward")?;
        let saved = rd(saved, 2 * g.c, "batchnorm_backward")?;
        let dgb = wr(dgamma_beta, 2 * g.c, "batchnorm_backward")?;
        let dx = wr(dx, g.c * m, "batchnorm_backward")?;
        if m == 0 {
            return Ok(());
        }
        let (dgamma, dbeta) = dgb.split_at_mut(g.c);
        let relu = g.relu;
        dx.par_chunks_mut(m)
            .zip(dgamma.par_iter_mut().zip(dbeta.par_iter_mut()))
            .enumerate()
            .for_each(|(c, (dx, (dg, db)))| {
                let (mean, inv, gamma) = (saved[c], saved[g.c + c], gb[c]);
                let xs = &x[c * m..][..m];
                let dys = &dy[c * m..][..m];
                let ys = if relu { &y[c * m..][..m] } else { &[][..] };
                let (sd, sdc) = if relu {
                    blocked_sums(xs, dys, ys, |x, dy, y| {
                        let di = if y <= 0.0 { 0.0 } else { dy };
                        (di, di * (x - mean))
                    })
                } else {
                    blocked_sums(xs, dys, xs, |x, dy, _| (dy, dy * (x - mean)))
                };
                let sdx = sdc * inv as f64;
                *dg = sdx as f32;
                *db = sd as f32;
                // dx = k (m d - sd - xhat sdx), expanded to a d + b x + c.
                let k = gamma * inv / m as f32;
                let (sd, sdx) = (sd as f32, sdx as f32);
                let a = k * m as f32;
                let bx = -k * inv * sdx;
                let c0 = k * (inv * sdx * mean - sd);
                if relu {
                    for ((o, &x), (&dy, &y)) in dx.iter_mut().zip(xs).zip(dys.iter().zip(ys)) {
                        let di = if y <= 0.0 { 0.0 } else { dy };
                        *o = a * di + bx * x + c0;
                    }
                } else {
                    for ((o, &x), &dy) in dx.iter_mut().zip(xs).zip(dys) {
                        *o = a * dy + bx * x + c0;
                    }
                }
            });
        Ok(())
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
        let c = mean.len();
        if std.len() != c || c == 0 {
            return Err(BackendError::Op {
                op: "datanorm",
                reason: format!("{} means and {} stds", c, std.len()),
            });
        }
        let hw = h * w;
        let x = rd(x, n * hw * c, "datanorm")?;
        let y = wr(y, n * hw * c, "datanorm")?;
        if n == 0 || hw == 0 {
            return Ok(());
        }
        let scale = |ch: usize| 1.0 / (255.0 * std[ch]);
        let shift = |ch: usize| -mean[ch] / std[ch];
        match layout {
            DataLayout::ChannelMajor => {
                y.par_chunks_mut(hw).enumerate().for_each(|(row, y)| {
                    let (ch, ni) = (row / n, row % n);
                    let (a, b) = (scale(ch), shift(ch));
                    let img = &x[ni * hw * c..][..hw * c];
                    for (p, y) in y.iter_mut().enumerate() {
                        *y = img[p * c + ch] as f32 * a + b;
                    }
                });
            }
            DataLayout::FeatureMajor => {
                let f = hw * c;
                y.par_chunks_mut(n).enumerate().for_each(|(fi, y)| {
                    let ch = fi % c;
                    let (a, b) = (scale(ch), shift(ch));
                    for (ni, y) in y.iter_mut().enumerate() {
                        *y = x[ni * f + fi] as f32 * a + b;
                    }
                });
            }
        }
        Ok(())
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
        let z = rd(logits, classes * n, "softmax_xent")?;
        let labels = rd(labels, n, "softmax_xent")?;
        let stats = wr(stats, 2, "softmax_xent")?;
        let mut dz = match dlogits {
            Some(d) => Some(wr(d, classes * n, "softmax_xent")?),
            None => None,
        };
        // Batches are small (n x classes); a sequential pass keeps the loss sum's order
        // fixed and costs nothing next to the GEMMs.
        let (mut loss, mut correct) = (0f64, 0u64);
        let inv_n = 1.0 / n.max(1) as f32;
        for (j, &label) in labels.iter().enumerate() {
            let t = label as usize;
            if t >= classes {
                return Err(BackendError::Label {
                    row: j,
                    label,
                    classes,
                });
            }
            let at = |k: usize| z[k * n + j];
            let (mut max, mut arg) = (f32::NEG_INFINITY, 0);
            for k in 0..classes {
                if at(k) > max {
                    max = at(k);
                    arg = k;
                }
            }
            let sum: f32 = (0..classes).map(|k| (at(k) - max).exp()).sum();
            loss += (sum.ln() + max - at(t)) as f64;
            correct += u64::from(arg == t);
            if let Some(dz) = dz.as_deref_mut() {
                for k in 0..classes {
                    let p = (at(k) - max).exp() / sum;
                    dz[k * n + j] = (p - if k == t { 1.0 } else { 0.0 }) * inv_n;
                }
            }
        }
        stats[0] = loss as f32;
        stats[1] = correct as f32;
        Ok(())
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
        let p = wr(params, len, "sgd_step")?;
        let g = rd(grads, len, "sgd_step")?;
        let b = wr(momentum, len, "sgd_step")?;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK).zip(b.par_chunks_mut(CHUNK)))
            .enumerate()
            .for_each(|(ci, (p, (g, b)))| {
                for (i, ((p, g), b)) in p.iter_mut().zip(g).zip(b.iter_mut()).enumerate() {
                    let wd = if ci * CHUNK + i < decay_len {
                        h.weight_decay
                    } else {
                        0.0
                    };
                    let d = g + wd * *p;
                    *b = h.momentum * *b + d;
                    let step = if h.nesterov { d + h.momentum * *b } else { *b };
                    *p -= h.lr * step;
                }
            });
        Ok(())
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
        let p = wr(params, len, "adamw_step")?;
        let g = rd(grads, len, "adamw_step")?;
        let m = wr(m, len, "adamw_step")?;
        let v = wr(v, len, "adamw_step")?;
        let t = h.step.max(1) as i32;
        let c1 = 1.0 - h.beta1.powi(t);
        let c2 = 1.0 - h.beta2.powi(t);
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
            .enumerate()
            .for_each(|(ci, ((p, g), (m, v)))| {
                for (i, (((p, g), m), v)) in p
                    .iter_mut()
                    .zip(g)
                    .zip(m.iter_mut())
                    .zip(v.iter_mut())
                    .enumerate()
                {
                    if ci * CHUNK + i < decay_len {
                        *p -= h.lr * h.weight_decay * *p;
                    }
                    *m = h.beta1 * *m + (1.0 - h.beta1) * g;
                    *v = h.beta2 * *v + (1.0 - h.beta2) * g * g;
                    let mhat = *m / c1;
                    let vhat = *v / c2;
                    *p -= h.lr * mhat / (vhat.sqrt() + h.eps);
                }
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// `gm` on the backend, and the same product in f64, for padded strides.
    fn both(gm: Gemm, seed: u64) -> (Vec<f32>, Vec<f64>) {
        let b = CpuBackend::new();
        let (ar, br) = (
            if gm.ta { gm.k } else { gm.m },
            if gm.tb { gm.n } else { gm.k },
        );
        let a = CpuBuf(values(seed, ar * gm.lda));
        let bb = CpuBuf(values(seed + 1, br * gm.ldb));
        let c0 = values(seed + 2, gm.m * gm.ldc);
        let mut c = CpuBuf(c0.clone());
        b.gemm(gm, In::new(&a), In::new(&bb), Out::new(&mut c))
            .unwrap();
        let at = |r: usize, k: usize| {
            if gm.ta {
                a.0[k * gm.lda + r]
            } else {
                a.0[r * gm.lda + k]
            }
        };
        let bt = |k: usize, j: usize| {
            if gm.tb {
                bb.0[j * gm.ldb + k]
            } else {
                bb.0[k * gm.ldb + j]
            }
        };
        let mut want = vec![0.0f64; gm.m * gm.n];
        for r in 0..gm.m {
            for j in 0..gm.n {
                let dot: f64 = (0..gm.k).map(|k| at(r, k) as f64 * bt(k, j) as f64).sum();
                want[r * gm.n + j] =
                    gm.alpha as f64 * dot + gm.beta as f64 * c0[r * gm.ldc + j] as f64;
            }
        }
        let got = (0..gm.m)
            .flat_map(|r| c.0[r * gm.ldc..r * gm.ldc + gm.n].to_vec())
            .collect();
        (got, want)
    }

    /// The split-`k` path (long k, small output) against an f64 reference, in every
    /// transpose, with padded strides, alpha and beta; and one plain product.
    #[test]
    fn split_k_gemm_matches_a_reference() {
        let k = K_SLABS * SPLIT_MIN_SLAB_K + 5;
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (m, n, k) in [(5, 7, k), (32, 27, k), (9, 4, 100)] {
                let mut gm = Gemm::dense(ta, tb, m, n, k).beta(0.5);
                gm.alpha = 0.75;
                gm.lda += 3;
                gm.ldb += 2;
                gm.ldc += 1;
                let (got, want) = both(gm, (m * 31 + n) as u64);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // Sums of k products of values below 1: rounding grows like sqrt(k).
                    let tol = 1e-6 * (k as f64).sqrt() * (1.0 + w.abs());
                    assert!(
                        (*g as f64 - w).abs() <= tol,
                        "ta={ta} tb={tb} {m}x{n}x{k}: element {i} is {g}, want {w}"
                    );
                }
            }
        }
    }

    /// The slabs run on however many threads there are; the sum's order is fixed.
    #[test]
    fn split_k_gemm_does_not_depend_on_the_thread_count() {
        let gm = Gemm::dense(false, true, 16, 9, K_SLABS * SPLIT_MIN_SLAB_K * 2 + 3);
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| both(gm, 7).0)
        };
        let (one, three) = (run(1), run(3));
        assert!(one
            .iter()
            .zip(&three)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
