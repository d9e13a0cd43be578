//! The convolutions on cuDNN. Our activations are channel-major `[C, N, H, W]`; by
//! default cuDNN gets packed NCHW copies in its workspace (made and undone by the
//! `swap01_*` kernels of `kernels/cast.cu`, which also cast to and from bf16 on the
//! way), because its fast algorithms are written for packed layouts; with
//! `STOKER_CUDNN_LAYOUT=strided` it reads and writes ours in place, described with
//! strides (in bf16 through cast copies of the same layout). See docs/trainer.md,
//! "Convolutions on CUDA". Weights `[cout, c, kh, kw]` are KCRS already and are read in
//! place in f32 (cast to a bf16 copy in bf16 mode). Every output is overwritten (beta
//! 0), as `ConvOps` asks. The input's copy is made into the layer's scratch (which
//! `conv_scratch` sizes for it), so that the backward of a training forward reads it
//! again instead of copying x a second time (`ConvBackwardArgs::reuse`); the other
//! copies and cuDNN's workspace share one buffer of the backend.

use std::ffi::c_void;

use cudarc::cudnn::result;
use cudarc::driver::CudaSlice;

use super::plan::{Plan, PlanKey};
use super::{CudnnLayout, Handle, State};
use crate::backend::cuda::buffer::{op_err, DevPtr};
use crate::backend::cuda::kernels::Swap01;
use crate::backend::cuda::launch::OpCx;
use crate::backend::cuda::{cuda_err, driver_err, CudaBackend, CudaError};
use crate::backend::{BResult, BackendError, ConvBackwardArgs, ConvForwardArgs, ConvGeom};
use crate::precision::Precision;

/// Alignment of each region of the workspace (cuDNN wants 16 bytes at least; 256 keeps
/// every region on its own cache lines).
const ALIGN: usize = 256;

/// Offsets of regions of `sizes` bytes, each aligned, and the bytes they take in all.
fn carve<const K: usize>(sizes: [usize; K]) -> ([usize; K], usize) {
    let mut offsets = [0; K];
    let mut end = 0;
    for (o, s) in offsets.iter_mut().zip(sizes) {
        *o = end;
        end += s.next_multiple_of(ALIGN);
    }
    (offsets, end)
}

/// Which `swap01_*` kernel: the element types on each side.
#[derive(Clone, Copy)]
enum Cast {
    /// f32 to f32.
    None,
    /// f32 to bf16 (round to nearest even).
    ToBf16,
    /// bf16 to f32 (exact).
    FromBf16,
}

/// Elements `[a, b, p]` to be written `[b, a, p]`.
type Swap = (usize, usize, usize);

/// The cuDNN state, locked, and the layout the backend asked for.
struct Locked<'a> {
    layout: CudnnLayout,
    state: std::sync::MutexGuard<'a, State>,
}

impl CudaBackend {
    /// `conv_forward` on cuDNN; `Ok(false)`, having touched nothing, when this backend
    /// or this shape runs on im2col.
    pub(in crate::backend::cuda) fn cudnn_forward(
        &self,
        op: &ConvForwardArgs<'_, Self>,
    ) -> BResult<bool> {
        let cx = self.op("conv_forward");
        let (g, cout) = (op.geom, op.cout);
        let Some(mut st) = self.cudnn_state(&cx, &g, cout)? else {
            return Ok(false);
        };
        let prec = self.precision();
        let (xl, yl, wl, ohw) = lens(&g, cout);
        let x = cx.read(op.x, xl, "input")?;
        let w = cx.read(op.w, wl, "weights")?;
        let y = cx.write(&op.y, yl, "output")?;
        let layout = st.layout;
        let State {
            plans,
            work,
            handle,
        } = &mut *st.state;
        // Planning queries cuDNN, which works in the thread's current context.
        self.bind(&cx)?;
        let Some(plan) = plan(plans, handle, &g, cout, prec, layout) else {
            return Ok(false);
        };
        let es = elem_size(prec);
        let bf16 = prec == Precision::Bf16;
        // Whether the activations go through the workspace (packed, or cast to bf16).
        let copies = plan.layout == CudnnLayout::Packed || bf16;
        let act = |len: usize| if copies { len * es } else { 0 };
        let wbytes = if bf16 { wl * es } else { 0 };
        // The input's copy, if any, goes to the layer's scratch, where the backward
        // finds it.
        let xkeep = cx.write(&op.scratch, scratch_elems(act(xl)), "scratch")?;
        let ([o_yp, o_wp, o_ws], total) = carve([act(yl), wbytes, plan.fwd.workspace]);
        let base = grow(self, &cx, work, total)?;
        let ws = base.add(o_ws);
        let (to, from) = casts(prec);
        let xs = (g.c, g.n, g.h * g.w);
        let xp = self.give_to_cudnn(&cx, plan.layout, to, x, xkeep, xs)?;
        let yp = if copies { base.add(o_yp) } else { y };
        let wc = if bf16 {
            let wp = base.add(o_wp);
            self.swap(&cx, Cast::ToBf16, w, wp, (1, 1, wl))?;
            wp
        } else {
            w
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        plan.conv
            .set_math(plan.fwd.math)
            .map_err(cuda_err(cx.name))?;
        // SAFETY: live handle and descriptors of this shape; `xp`, `wc` and `yp` are
        // the operands as the descriptors describe them (regions carved above, or the
        // checked buffers themselves in the strided f32 case), `ws` has the
        // algorithm's workspace; f32 scalars, as cuDNN wants for float and bf16 data.
        let r = unsafe {
            result::convolution_forward(
                handle.0,
                scalar(&alpha),
                plan.x.0,
                xp.raw() as *const c_void,
                plan.w.0,
                wc.raw() as *const c_void,
                plan.conv.0,
                plan.fwd.algo,
                ws.raw() as *mut c_void,
                plan.fwd.workspace,
                scalar(&beta),
                plan.y.0,
                yp.raw() as *mut c_void,
            )
        };
        if let Err(e) = r {
            return give_up(plans, &g, cout, prec, "cudnnConvolutionForward", e);
        }
        self.take_from_cudnn(&cx, plan.layout, from, yp, y, (g.n, cout, ohw))?;
        Ok(true)
    }

    /// `conv_backward` on cuDNN; `Ok(false)`, having touched nothing, when this backend
    /// or this shape runs on im2col. With `reuse`, the input's copy the forward left in
    /// the scratch is read as it is.
    pub(in crate::backend::cuda) fn cudnn_backward(
        &self,
        op: &ConvBackwardArgs<'_, Self>,
    ) -> BResult<bool> {
        let cx = self.op("conv_backward");
        let (g, cout) = (op.geom, op.cout);
        let Some(mut st) = self.cudnn_state(&cx, &g, cout)? else {
            return Ok(false);
        };
        let prec = self.precision();
        let (xl, yl, wl, ohw) = lens(&g, cout);
        let x = cx.read(op.x, xl, "input")?;
        let w = cx.read(op.w, wl, "weights")?;
        let dy = cx.read(op.dy, yl, "output gradient")?;
        let dw = cx.write(&op.dw, wl, "weight gradient")?;
        let dx = match &op.dx {
            Some(d) => Some(cx.write(d, xl, "input gradient")?),
            None => None,
        };
        let layout = st.layout;
        let State {
            plans,
            work,
            handle,
        } = &mut *st.state;
        // Planning queries cuDNN, which works in the thread's current context.
        self.bind(&cx)?;
        let Some(plan) = plan(plans, handle, &g, cout, prec, layout) else {
            return Ok(false);
        };
        let es = elem_size(prec);
        let bf16 = prec == Precision::Bf16;
        // Whether the activations go through the workspace (packed, or cast to bf16).
        let copies = plan.layout == CudnnLayout::Packed || bf16;
        let act = |len: usize| if copies { len * es } else { 0 };
        let wbytes = if bf16 { wl * es } else { 0 };
        let dxbytes = if dx.is_some() { act(xl) } else { 0 };
        let wsbytes = plan.bwd_filter.workspace.max(if dx.is_some() {
            plan.bwd_data.workspace
        } else {
            0
        });
        let xkeep = cx.write(&op.scratch, scratch_elems(act(xl)), "scratch")?;
        let ([o_dyp, o_dxp, o_wp, o_dwp, o_ws], total) =
            carve([act(yl), dxbytes, wbytes, wbytes, wsbytes]);
        let base = grow(self, &cx, work, total)?;
        let ws = base.add(o_ws);
        let (to, from) = casts(prec);
        let xs = (g.c, g.n, g.h * g.w);
        // The forward of this batch made the same copy into the same scratch (same
        // shape, same plan) when it was a training forward.
        let xp = if op.reuse && copies {
            xkeep
        } else {
            self.give_to_cudnn(&cx, plan.layout, to, x, xkeep, xs)?
        };
        let dys = (cout, g.n, ohw);
        let dyp = self.give_to_cudnn(&cx, plan.layout, to, dy, base.add(o_dyp), dys)?;
        let (alpha, beta) = (1.0f32, 0.0f32);

        // The weight gradient: straight into `dw` in f32, through a bf16 copy in bf16.
        let dwc = if bf16 { base.add(o_dwp) } else { dw };
        plan.conv
            .set_math(plan.bwd_filter.math)
            .map_err(cuda_err(cx.name))?;
        // SAFETY: as in the forward: live handle and descriptors, operands as
        // described in carved regions or the checked buffers (`dw` in f32), the
        // algorithm's workspace at `ws`.
        let r = unsafe {
            result::convolution_backward_filter(
                handle.0,
                scalar(&alpha),
                plan.x.0,
                xp.raw() as *const c_void,
                plan.y.0,
                dyp.raw() as *const c_void,
                plan.conv.0,
                plan.bwd_filter.algo,
                ws.raw() as *mut c_void,
                plan.bwd_filter.workspace,
                scalar(&beta),
                plan.w.0,
                dwc.raw() as *mut c_void,
            )
        };
        if let Err(e) = r {
            return give_up(plans, &g, cout, prec, "cudnnConvolutionBackwardFilter", e);
        }
        if bf16 {
            self.swap(&cx, Cast::FromBf16, dwc, dw, (1, 1, wl))?;
        }

        if let Some(dx) = dx {
            let wc = if bf16 {
                let wp = base.add(o_wp);
                self.swap(&cx, Cast::ToBf16, w, wp, (1, 1, wl))?;
                wp
            } else {
                w
            };
            let dxp = if copies { base.add(o_dxp) } else { dx };
            plan.conv
                .set_math(plan.bwd_data.math)
                .map_err(cuda_err(cx.name))?;
            // SAFETY: as above.
            let r = unsafe {
                result::convolution_backward_data(
                    handle.0,
                    scalar(&alpha),
                    plan.w.0,
                    wc.raw() as *const c_void,
                    plan.y.0,
                    dyp.raw() as *const c_void,
                    plan.conv.0,
                    plan.bwd_data.algo,
                    ws.raw() as *mut c_void,
                    plan.bwd_data.workspace,
                    scalar(&beta),
                    plan.x.0,
                    dxp.raw() as *mut c_void,
                )
            };
            if let Err(e) = r {
                return give_up(plans, &g, cout, prec, "cudnnConvolutionBackwardData", e);
            }
            self.take_from_cudnn(&cx, plan.layout, from, dxp, dx, (g.n, g.c, g.h * g.w))?;
        }
        Ok(true)
    }

    /// The cuDNN state, locked, when cuDNN may run this convolution: not without cuDNN,
    /// nor for an empty batch or output (which cuDNN's descriptors refuse and im2col
    /// does as nothing).
    fn cudnn_state(&self, cx: &OpCx<'_>, g: &ConvGeom, cout: usize) -> BResult<Option<Locked<'_>>> {
        let Some(cudnn) = self.inner.cudnn.as_ref() else {
            return Ok(None);
        };
        if g.n == 0 || cout == 0 || g.c == 0 || g.out_h() == 0 || g.out_w() == 0 {
            return Ok(None);
        }
        let state = cudnn
            .state
            .lock()
            .map_err(|_| cx.err("cuDNN state lock poisoned by an earlier panic"))?;
        Ok(Some(Locked {
            layout: cudnn.layout,
            state,
        }))
    }

    /// Gives our `src`, `[a, b, p]`, to cuDNN: returns the address cuDNN reads, `src`
    /// itself (strided, f32), a cast copy in the same layout at `dst` (strided, bf16)
    /// or the packed `[b, a, p]` copy at `dst`.
    fn give_to_cudnn(
        &self,
        cx: &OpCx<'_>,
        layout: CudnnLayout,
        cast: Cast,
        src: DevPtr,
        dst: DevPtr,
        s: Swap,
    ) -> BResult<DevPtr> {
        match (layout, cast) {
            (CudnnLayout::Strided, Cast::None) => return Ok(src),
            (CudnnLayout::Strided, _) => self.swap(cx, cast, src, dst, (1, 1, s.0 * s.1 * s.2))?,
            (CudnnLayout::Packed, _) => self.swap(cx, cast, src, dst, s)?,
        }
        Ok(dst)
    }

    /// Brings a result cuDNN wrote at `src` into our `dst`: nothing to do when it wrote
    /// `dst` itself (strided, f32), a widening copy (strided, bf16), or cuDNN's packed
    /// `[a, b, p]` turned back into our `[b, a, p]`.
    fn take_from_cudnn(
        &self,
        cx: &OpCx<'_>,
        layout: CudnnLayout,
        cast: Cast,
        src: DevPtr,
        dst: DevPtr,
        s: Swap,
    ) -> BResult<()> {
        match (layout, cast) {
            (CudnnLayout::Strided, Cast::None) => Ok(()),
            (CudnnLayout::Strided, _) => self.swap(cx, cast, src, dst, (1, 1, s.0 * s.1 * s.2)),
            (CudnnLayout::Packed, _) => self.swap(cx, cast, src, dst, s),
        }
    }

    /// Makes the backend's context current on this thread, as cuDNN's calls need.
    fn bind(&self, cx: &OpCx<'_>) -> BResult<()> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(driver_err(cx.name, "cuCtxSetCurrent"))
    }

    /// Enqueues the `swap01_*` kernel of `cast`: `src` read as `[a, b, p]`, `dst`
    /// written as `[b, a, p]`.
    fn swap(&self, cx: &OpCx<'_>, cast: Cast, src: DevPtr, dst: DevPtr, s: Swap) -> BResult<()> {
        let (a, b, p) = s;
        let n = a * b * p;
        if n == 0 {
            return Ok(());
        }
        let k = self.kernels();
        let kernel = match cast {
            Cast::None => &k.swap01_f32,
            Cast::ToBf16 => &k.swap01_f32_bf16,
            Cast::FromBf16 => &k.swap01_bf16_f32,
        };
        let params = Swap01 {
            src,
            dst,
            a: a as u64,
            b: b as u64,
            p: p as u64,
        };
        cx.launch(kernel, cx.grid(n), params)
    }
}

/// Elements of the input, the output and the weights, and output pixels per image.
fn lens(g: &ConvGeom, cout: usize) -> (usize, usize, usize, usize) {
    let ohw = g.out_h() * g.out_w();
    (g.input_len(), cout * g.n * ohw, cout * g.col_rows(), ohw)
}

/// f32 elements of scratch that hold `bytes`.
fn scratch_elems(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// Bytes of one cuDNN operand element.
fn elem_size(p: Precision) -> usize {
    match p {
        Precision::F32 => 4,
        Precision::Bf16 => 2,
    }
}

/// The casts into cuDNN's operands and out of its results.
fn casts(p: Precision) -> (Cast, Cast) {
    match p {
        Precision::F32 => (Cast::None, Cast::None),
        Precision::Bf16 => (Cast::ToBf16, Cast::FromBf16),
    }
}

fn scalar(v: &f32) -> *const c_void {
    v as *const f32 as *const c_void
}

/// A cuDNN call that failed although its plan said it would run (the heuristics' status
/// is no promise: PyTorch tries the next algorithm there). The shape runs on im2col
/// from now on, said once and listed in `fallbacks`; `Ok(false)` hands this call to the
/// im2col path, which overwrites every output the failed call may have touched. The
/// backward's im2col path rebuilds its columns on the cuDNN engine (`conv.rs`), so a
/// forward that ran on cuDNN leaves nothing it could misread.
fn give_up(
    plans: &mut std::collections::HashMap<PlanKey, Result<Plan, String>>,
    g: &ConvGeom,
    cout: usize,
    prec: Precision,
    call: &'static str,
    e: result::CudnnError,
) -> BResult<bool> {
    let why = format!("{call} failed: {e:?}");
    eprintln!(
        "stoker: convolution {}x{}x{} -> {cout} channels, kernel {}x{} stride {} pad {}, \
         batch {}, {prec}: im2col + cuBLAS from now on ({why})",
        g.c, g.h, g.w, g.kh, g.kw, g.stride, g.pad, g.n
    );
    plans.insert(PlanKey::new(g, cout, prec), Err(why));
    Ok(false)
}

/// The plan of this shape, made at its first call; `None` when it runs on im2col. A
/// shape cuDNN cannot run in the strided layout is planned packed. Either fallback is
/// said once, when the plan is first made.
fn plan<'s>(
    plans: &'s mut std::collections::HashMap<PlanKey, Result<Plan, String>>,
    handle: &Handle,
    g: &ConvGeom,
    cout: usize,
    prec: Precision,
    layout: CudnnLayout,
) -> Option<&'s Plan> {
    let key = PlanKey::new(g, cout, prec);
    let entry = plans.entry(key).or_insert_with(|| {
        let make = |layout| {
            Plan::new(handle.0, g, cout, prec, layout).unwrap_or_else(|e| Err(e.to_string()))
        };
        let what = format!(
            "stoker: convolution {}x{}x{} -> {cout} channels, kernel {}x{} stride {} pad {}, \
             batch {}, {prec}",
            g.c, g.h, g.w, g.kh, g.kw, g.stride, g.pad, g.n
        );
        let mut made = make(layout);
        if let (Err(why), CudnnLayout::Strided) = (&made, layout) {
            eprintln!("{what}: packed copies, not strided ({why})");
            made = make(CudnnLayout::Packed);
        }
        if let Err(why) = &made {
            eprintln!("{what}: im2col + cuBLAS, not cuDNN ({why})");
        }
        made
    });
    entry.as_ref().ok()
}

/// The workspace's address, grown first to at least `bytes` (to a multiple of 2 MiB, so
/// that a slowly growing batch does not reallocate at every step). The old buffer is
/// freed in stream order, after the work already enqueued on it.
fn grow(
    b: &CudaBackend,
    cx: &OpCx<'_>,
    work: &mut Option<CudaSlice<u8>>,
    bytes: usize,
) -> BResult<DevPtr> {
    let bytes = bytes.max(1);
    if work.as_ref().is_none_or(|w| w.len() < bytes) {
        let size = bytes.next_multiple_of(2 << 20);
        *work = None;
        let fresh = b
            .stream()
            .alloc_zeros::<u8>(size)
            .map_err(|source| BackendError::Cuda {
                op: cx.name,
                source: CudaError::Alloc {
                    bytes: size,
                    source,
                },
            })?;
        *work = Some(fresh);
    }
    let w = work
        .as_ref()
        .ok_or_else(|| op_err(cx.name, "cuDNN workspace missing"))?;
    Ok(DevPtr::of(w, b.stream()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_and_do_not_overlap() {
        let (o, total) = carve([10, 0, 300, 256, 1]);
        assert_eq!(o, [0, 256, 256, 768, 1024]);
        assert_eq!(total, 1280);
        for (i, off) in o.iter().enumerate() {
            assert_eq!(off % ALIGN, 0, "region {i}");
        }
        let g = ConvGeom {
            c: 3,
            n: 2,
            h: 5,
            w: 4,
            kh: 3,
            kw: 3,
            stride: 2,
            pad: 1,
            col: crate::backend::ColLayout::TapMajor,
        };
        // out 3 x 2: y 7 * 2 * 6, w 7 * 3 * 9.
        assert_eq!(lens(&g, 7), (3 * 2 * 20, 84, 189, 6));
    }
}
