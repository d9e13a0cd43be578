//! The CUDA backend: GEMM through cuBLAS, every other op a kernel from `kernels/*.cu`
//! compiled by NVRTC when the backend is created, all enqueued on one stream.
//!
//! CUDA is found at run time (cudarc loads `libcuda`, `libnvrtc` and `libcublas` with
//! `dlopen`), so this module builds everywhere and [`probe`] says, without panicking,
//! whether a usable device is there. Semantics follow `cpu.rs` op for op: the same
//! layouts, the same GEMM conventions, results in the same places. Element-wise kernels
//! are compiled without FMA contraction (`--fmad=false`) so they round as the CPU does;
//! reductions use a fixed order (no floating-point atomics), so every op is
//! deterministic, as the `Backend` contract asks. GEMMs differ from the CPU's in
//! summation order only, hence the tolerances of the parity tests.
//!
//! Nothing here synchronises except `download` and `synchronize`. One consequence: a
//! label out of range inside `softmax_xent` is recorded on the device and reported by
//! the next `download` or `synchronize`, not by the call itself.

use std::any::type_name;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{
    sys as drv_sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

use super::{
    AdamWStep, BResult, Backend, BackendError, BnGeom, ConvGeom, DataLayout, Elem, Gemm, In, Out,
    PoolGeom, SgdStep,
};

/// What [`probe`] found: enough to say which device a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    /// Devices the driver sees.
    pub count: usize,
    pub name: String,
    /// (major, minor), e.g. (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
    pub total_mem: usize,
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ma, mi) = self.compute_capability;
        write!(
            f,
            "cuda:{} ({}, sm_{}{}, {:.0} GiB)",
            self.ordinal,
            self.name,
            ma,
            mi,
            self.total_mem as f64 / (1u64 << 30) as f64
        )
    }
}

/// Checks the three shared libraries the backend needs, before any cudarc call that
/// would load them lazily (and panic if they are missing).
fn libraries_present() -> Result<(), String> {
    // SAFETY: each probe only tries `dlopen` on candidate names and closes what it opens;
    // no symbol is resolved or called.
    let (drv, rtc, blas) = unsafe {
        (
            drv_sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            blas_sys::is_culib_present(),
        )
    };
    let missing: Vec<&str> = [
        (drv, "libcuda (the NVIDIA driver)"),
        (rtc, "libnvrtc (CUDA runtime compiler)"),
        (blas, "libcublas"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, name)| *name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{} not found", missing.join(", ")))
    }
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an old driver, say)
/// into an error message.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("{what}: CUDA library failed: {msg}"))
        }
    }
}

/// Whether CUDA device 0 is usable, and what it is. Never panics: a missing driver or
/// library, no device, or a failing driver all come back as `Err` with the reason.
pub fn probe() -> Result<DeviceInfo, String> {
    probe_ordinal(0)
}

/// As [`probe`], for device `ordinal`.
pub fn probe_ordinal(ordinal: usize) -> Result<DeviceInfo, String> {
    libraries_present()?;
    guarded("probe", || {
        let count = CudaContext::device_count().map_err(|e| format!("cuInit: {e}"))?;
        let count = usize::try_from(count).unwrap_or(0);
        if count == 0 {
            return Err("the driver sees no CUDA device".into());
        }
        if ordinal >= count {
            return Err(format!("no device {ordinal} ({count} present)"));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("cuda:{ordinal}: {e}"))?;
        info_of(&ctx, count)
    })
}

fn info_of(ctx: &Arc<CudaContext>, count: usize) -> Result<DeviceInfo, String> {
    let e = |e: cudarc::driver::DriverError| e.to_string();
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        count,
        name: ctx.name().map_err(e)?,
        compute_capability: ctx.compute_capability().map_err(e)?,
        total_mem: ctx.total_mem().map_err(e)?,
    })
}

/// A device buffer of `T`: bytes plus a type. `repr(transparent)` over the byte slice,
/// so a `&CudaSlice<u8>` that another crate owns (the loader's uploaded batch) can be
/// viewed as a `&CudaBuf<u8>` or `&CudaBuf<u32>` without a copy: see
/// [`CudaBuf::view`].
#[repr(transparent)]
pub struct CudaBuf<T> {
    raw: CudaSlice<u8>,
    _t: PhantomData<T>,
}

impl<T: Elem> CudaBuf<T> {
    /// Views device bytes as a buffer of `T`; `None` unless the byte length is a
    /// multiple of `T`'s size (device allocations are 256-byte aligned).
    pub fn view(raw: &CudaSlice<u8>) -> Option<&CudaBuf<T>> {
        if raw.len().checked_rem(std::mem::size_of::<T>()) != Some(0) {
            return None;
        }
        // SAFETY: CudaBuf<T> is repr(transparent) over CudaSlice<u8> (PhantomData is a
        // zero-sized field), so the two references have the same layout; the length
        // check above keeps `len()` exact.
        Some(unsafe { &*(raw as *const CudaSlice<u8> as *const CudaBuf<T>) })
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.raw.len() / std::mem::size_of::<T>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying device bytes.
    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.raw
    }

    /// The underlying device bytes, for writing (e.g. by a collective engine).
    pub fn bytes_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.raw
    }
}

impl<T> std::fmt::Debug for CudaBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuf<{}>({} bytes)", type_name::<T>(), self.raw.len())
    }
}

/// Every kernel of `kernels/`, loaded once.
struct Kernels {
    fill_f32: CudaFunction,
    add_f32: CudaFunction,
    add_act: CudaFunction,
    relu_forward: CudaFunction,
    relu_backward: CudaFunction,
    bias_act_forward: CudaFunction,
    relu_mask: CudaFunction,
    bias_act_backward_rows: CudaFunction,
    maxpool_forward: CudaFunction,
    maxpool_backward: CudaFunction,
    avgpool_forward: CudaFunction,
    avgpool_backward: CudaFunction,
    im2col: CudaFunction,
    col2im: CudaFunction,
    bn_partial_stats: CudaFunction,
    bn_finalize_stats: CudaFunction,
    bn_apply: CudaFunction,
    bn_partial_grads: CudaFunction,
    bn_finalize_grads: CudaFunction,
    bn_apply_grads: CudaFunction,
    datanorm_cm: CudaFunction,
    datanorm_fm: CudaFunction,
    xent_rows: CudaFunction,
    xent_sum: CudaFunction,
    sgd_step: CudaFunction,
    adamw_step: CudaFunction,
}

/// The kernel sources, in the order they are concatenated into one program. `#line`
/// markers make NVRTC's errors name the file and line.
const SOURCES: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../kernels/common.cuh")),
    ("elementwise.cu", include_str!("../kernels/elementwise.cu")),
    ("bias_act.cu", include_str!("../kernels/bias_act.cu")),
    ("pool.cu", include_str!("../kernels/pool.cu")),
    ("im2col.cu", include_str!("../kernels/im2col.cu")),
    ("batchnorm.cu", include_str!("../kernels/batchnorm.cu")),
    ("datanorm.cu", include_str!("../kernels/datanorm.cu")),
    (
        "softmax_xent.cu",
        include_str!("../kernels/softmax_xent.cu"),
    ),
    ("optim.cu", include_str!("../kernels/optim.cu")),
];

/// The whole kernel program as NVRTC compiles it.
pub fn kernel_source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s += &format!("#line 1 \"{name}\"\n{text}\n");
    }
    s
}

/// Compiles the kernel program for a device of compute capability `cc` to PTX. Needs
/// only `libnvrtc` (no GPU), so a machine with the library can check the kernels build.
pub fn compile_kernels(cc: (i32, i32)) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only tries `dlopen`; nothing is resolved or called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("libnvrtc (CUDA runtime compiler) not found".into());
    }
    let (ma, mi) = cc;
    // Hopper gets compute_90 (not 90a: no kernel here needs wgmma); any other device
    // its own architecture. No FMA contraction: element-wise results then round as
    // the CPU's do.
    let opts = CompileOptions {
        fmad: Some(false),
        options: vec![
            format!("--gpu-architecture=compute_{ma}{mi}"),
            "--std=c++17".into(),
        ],
        name: Some("stoker_kernels.cu".into()),
        ..Default::default()
    };
    guarded("NVRTC", || {
        compile_ptx_with_opts(kernel_source(), opts).map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                format!("NVRTC: {}", log.to_string_lossy())
            }
            other => format!("NVRTC: {other}"),
        })
    })
}

/// Channels `datanorm` takes by value (see `kernels/datanorm.cu`).
pub const DATANORM_MAX_CHANNELS: usize = 16;
/// Threads per block of the reduction kernels (`RED_THREADS` in `common.cuh`).
const RED_THREADS: u32 = 256;
/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;
/// Elements of one batch-norm partial sum: fixed, so the reduction order depends only
/// on the shape, never on the device.
const BN_CHUNK: usize = 8192;

/// Shared state of a backend and its clones.
struct Inner {
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    _module: Arc<CudaModule>,
    /// Blocks for a grid-stride launch: enough to fill every multiprocessor.
    max_blocks: u32,
    /// Scratch for partial sums (batch norm, loss rows). Locked while the kernels that
    /// use it are enqueued; stream order then keeps uses from overlapping.
    scratch: Mutex<Option<CudaSlice<u8>>>,
    /// A label out of range seen by `softmax_xent`: 0, or the complement of
    /// `(row << 32) | label` (see `kernels/softmax_xent.cu`).
    bad_label: Mutex<CudaSlice<u8>>,
    /// Classes of the last `softmax_xent`, for the message of a deferred label error.
    xent_classes: AtomicUsize,
    allocs: AtomicUsize,
}

/// The CUDA backend. Cloning is cheap and shares the context, stream and kernels.
#[derive(Clone)]
pub struct CudaBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({})", self.inner.info)
    }
}

fn init_err(ordinal: usize, reason: impl std::fmt::Display) -> BackendError {
    BackendError::Op {
        op: "cuda init",
        reason: format!("cuda:{ordinal}: {reason}"),
    }
}

fn drv(op: &'static str) -> impl Fn(cudarc::driver::DriverError) -> BackendError {
    move |e| BackendError::Op {
        op,
        reason: e.to_string(),
    }
}

impl CudaBackend {
    /// Opens device `ordinal`: context, stream, cuBLAS handle, and the kernels compiled
    /// for its architecture (compute_90 on Hopper). An error, never a panic, when CUDA
    /// is missing or unusable.
    pub fn new(ordinal: usize) -> Result<Self, BackendError> {
        let info = probe_ordinal(ordinal).map_err(|r| init_err(ordinal, r))?;
        // A second guard: a panic inside cudarc (a symbol missing from an older
        // driver, say) becomes an error value too.
        catch_unwind(AssertUnwindSafe(|| Self::build(ordinal, info))).unwrap_or_else(|_| {
            Err(init_err(
                ordinal,
                "the CUDA libraries failed (panic caught)",
            ))
        })
    }

    fn build(ordinal: usize, info: DeviceInfo) -> BResult<Self> {
        let ctx = CudaContext::new(ordinal).map_err(|e| init_err(ordinal, e))?;
        // SAFETY: called before this context allocates anything. Every op runs on the
        // one stream below, so cudarc's per-buffer events (which would record and wait
        // on every launch) buy nothing; the loader's uploader orders its copy stream
        // with explicit events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| init_err(ordinal, e))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| init_err(ordinal, e))?;
        // Plain FP32 GEMMs (no TF32): CPU parity is worth more than the speed here.
        // SAFETY: the handle is live (owned by `blas`) and the mode a valid enum value.
        unsafe {
            blas_sys::cublasSetMathMode(
                *blas.handle(),
                blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
            .result()
            .map_err(|e| init_err(ordinal, e))?;
        }
        let ptx = compile_kernels(info.compute_capability).map_err(|e| init_err(ordinal, e))?;
        let module = ctx.load_module(ptx).map_err(|e| init_err(ordinal, e))?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| init_err(ordinal, format!("kernel {name}: {e}")))
        };
        let k = Kernels {
            fill_f32: f("fill_f32")?,
            add_f32: f("add_f32")?,
            add_act: f("add_act")?,
            relu_forward: f("relu_forward")?,
            relu_backward: f("relu_backward")?,
            bias_act_forward: f("bias_act_forward")?,
            relu_mask: f("relu_mask")?,
            bias_act_backward_rows: f("bias_act_backward_rows")?,
            maxpool_forward: f("maxpool_forward")?,
            maxpool_backward: f("maxpool_backward")?,
            avgpool_forward: f("avgpool_forward")?,
            avgpool_backward: f("avgpool_backward")?,
            im2col: f("im2col")?,
            col2im: f("col2im")?,
            bn_partial_stats: f("bn_partial_stats")?,
            bn_finalize_stats: f("bn_finalize_stats")?,
            bn_apply: f("bn_apply")?,
            bn_partial_grads: f("bn_partial_grads")?,
            bn_finalize_grads: f("bn_finalize_grads")?,
            bn_apply_grads: f("bn_apply_grads")?,
            datanorm_cm: f("datanorm_cm")?,
            datanorm_fm: f("datanorm_fm")?,
            xent_rows: f("xent_rows")?,
            xent_sum: f("xent_sum")?,
            sgd_step: f("sgd_step")?,
            adamw_step: f("adamw_step")?,
        };
        let sms = ctx
            .attribute(drv_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| init_err(ordinal, e))?;
        let bad_label = stream
            .alloc_zeros::<u8>(8)
            .map_err(|e| init_err(ordinal, e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                info,
                max_blocks: (sms.max(1) as u32) * 16,
                ctx,
                stream,
                blas,
                k,
                _module: module,
                scratch: Mutex::new(None),
                bad_label: Mutex::new(bad_label),
                xent_classes: AtomicUsize::new(0),
                allocs: AtomicUsize::new(0),
            }),
        })
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The CUDA context (for the loader's uploader, which must share it).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The stream every op is enqueued on: a consumer of uploaded batches makes it wait
    /// on the upload's event, and records the event that frees the buffer on it.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// Buffers allocated so far through this backend and its clones.
    pub fn alloc_count(&self) -> usize {
        self.inner.allocs.load(Ordering::Relaxed)
    }

    /// Grid for a grid-stride loop over `n` elements.
    fn grid(&self, n: usize) -> LaunchConfig {
        let blocks = n
            .div_ceil(THREADS as usize)
            .clamp(1, self.inner.max_blocks as usize);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Runs `f` with a scratch area of at least `bytes` (grown, never shrunk), holding
    /// the lock while `f` enqueues the kernels that use it.
    fn with_scratch<R>(&self, bytes: usize, f: impl FnOnce(u64) -> BResult<R>) -> BResult<R> {
        let mut g = self
            .inner
            .scratch
            .lock()
            .map_err(|_| op_err("scratch", "lock poisoned by an earlier panic"))?;
        if g.as_ref().is_none_or(|s| s.len() < bytes) {
            // Round up so a slowly growing batch does not reallocate at every step.
            let size = bytes.next_power_of_two().max(4096);
            let fresh =
                self.inner
                    .stream
                    .alloc_zeros::<u8>(size)
                    .map_err(|e| BackendError::Alloc {
                        device: self.name(),
                        bytes: size,
                        reason: e.to_string(),
                    })?;
            *g = Some(fresh);
        }
        let s = g.as_ref().ok_or_else(|| op_err("scratch", "missing"))?;
        let (p, _rec) = s.device_ptr(&self.inner.stream);
        f(p)
    }

    /// Reports (and clears) a label out of range recorded by `softmax_xent`. Called
    /// after the stream has caught up.
    fn check_labels(&self) -> BResult<()> {
        let mut flag = self
            .inner
            .bad_label
            .lock()
            .map_err(|_| op_err("softmax_xent", "lock poisoned by an earlier panic"))?;
        let mut v = [0u8; 8];
        self.inner
            .stream
            .memcpy_dtoh(&*flag, &mut v[..])
            .map_err(drv("download"))?;
        let v = u64::from_le_bytes(v);
        if v == 0 {
            return Ok(());
        }
        self.inner
            .stream
            .memset_zeros(&mut *flag)
            .map_err(drv("download"))?;
        let code = !v;
        Err(BackendError::Label {
            row: (code >> 32) as usize,
            label: code as u32,
            classes: self.inner.xent_classes.load(Ordering::Relaxed),
        })
    }
}

fn op_err(op: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Op {
        op,
        reason: reason.into(),
    }
}

/// The device address of `len` elements of `buf` from element `off`, checked against
/// the buffer (a kernel must never run past an allocation).
fn addr<T: Elem>(
    stream: &CudaStream,
    buf: &CudaBuf<T>,
    off: usize,
    len: usize,
    op: &'static str,
    what: &str,
) -> BResult<u64> {
    let have = buf.len();
    let end = off.saturating_add(len);
    if end > have {
        return Err(op_err(
            op,
            format!("{what} needs elements up to {end}, buffer holds {have}"),
        ));
    }
    let (p, _rec) = buf.raw.device_ptr(stream);
    Ok(p + (off * std::mem::size_of::<T>()) as u64)
}

/// Reinterprets a slice of a buffer element type as bytes.
fn as_bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: every Elem (f32, u8, u32) is plain data with no padding, so its bytes are
    // initialised; the length covers exactly the slice.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; moreover every bit pattern is a valid f32, u8 or u32, so
    // any bytes written through the view leave valid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

/// Enqueues kernel `$f` with the listed arguments (each converted to a local that lives
/// until the launch).
macro_rules! launch {
    ($self:ident, $f:ident, $cfg:expr, $op:expr; $($a:expr),* $(,)?) => {{
        let mut lb = $self.inner.stream.launch_builder(&$self.inner.k.$f);
        $( let v = $a; lb.arg(&v); )*
        // SAFETY: the argument list matches the kernel's signature in kernels/ (u64
        // pointers and sizes, i32 flags, f32 values, in order), and every pointer was
        // bounds-checked by `addr` for the extent the kernel touches.
        unsafe { lb.launch($cfg) }.map(|_| ()).map_err(drv($op))
    }};
}

impl Backend for CudaBackend {
    type Buf<T: Elem> = CudaBuf<T>;

    fn name(&self) -> String {
        self.inner.info.to_string()
    }

    fn alloc<T: Elem>(&self, len: usize) -> BResult<CudaBuf<T>> {
        let bytes = len * std::mem::size_of::<T>();
        let alloc_err = |e: cudarc::driver::DriverError| BackendError::Alloc {
            device: self.name(),
            bytes,
            reason: e.to_string(),
        };
        let s = &self.inner.stream;
        let raw = if bytes == 0 {
            // The driver rejects zero-byte allocations: take one byte, and give the
            // slice a length of zero (it still frees the byte when dropped).
            let one = s.alloc_zeros::<u8>(1).map_err(alloc_err)?;
            let p = one.leak();
            // SAFETY: `p` is a live one-byte allocation of this stream that nothing else
            // owns (leaked just above); a zero-length slice never touches it.
            unsafe { s.upgrade_device_ptr::<u8>(p, 0) }
        } else {
            s.alloc_zeros::<u8>(bytes).map_err(alloc_err)?
        };
        self.inner.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(CudaBuf {
            raw,
            _t: PhantomData,
        })
    }

    fn buf_len<T: Elem>(&self, buf: &CudaBuf<T>) -> usize {
        buf.len()
    }

    fn upload<T: Elem>(&self, src: &[T], dst: Out<'_, Self, T>) -> BResult<()> {
        if src.is_empty() {
            return Ok(());
        }
        let s = &self.inner.stream;
        addr(s, dst.buf, dst.off, src.len(), "upload", "destination")?;
        let bytes = as_bytes(src);
        let start = dst.off * std::mem::size_of::<T>();
        let mut view = dst.buf.raw.slice_mut(start..start + bytes.len());
        // A pageable source: the driver copies it to a staging buffer before returning,
        // so `src` may change as soon as this returns.
        s.memcpy_htod(bytes, &mut view).map_err(drv("upload"))
    }

    fn download<T: Elem>(&self, src: In<'_, Self, T>, dst: &mut [T]) -> BResult<()> {
        let s = &self.inner.stream;
        if !dst.is_empty() {
            addr(s, src.buf, src.off, dst.len(), "download", "source")?;
            let start = src.off * std::mem::size_of::<T>();
            let bytes = as_bytes_mut(dst);
            let view = src.buf.raw.slice(start..start + bytes.len());
            // Into pageable memory the copy returns only once complete.
            s.memcpy_dtoh(&view, bytes).map_err(drv("download"))?;
        }
        s.synchronize().map_err(drv("download"))?;
        self.check_labels()
    }

    fn synchronize(&self) -> BResult<()> {
        self.inner
            .stream
            .synchronize()
            .map_err(drv("synchronize"))?;
        self.check_labels()
    }

    fn im2col_budget(&self) -> usize {
        // 64 MiB of f32 per conv layer: big enough that a chunk's GEMM fills the GPU,
        // small enough that a deep model's scratch stays under a GiB.
        16 << 20
    }

    fn fill(&self, dst: Out<'_, Self>, len: usize, value: f32) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let s = &self.inner.stream;
        let y = addr(s, dst.buf, dst.off, len, "fill", "output")?;
        launch!(self, fill_f32, self.grid(len), "fill"; y, len as u64, value)
    }

    fn add(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, len, "add", "input")?;
        let yp = addr(s, y.buf, y.off, len, "add", "output")?;
        launch!(self, add_f32, self.grid(len), "add"; xp, yp, len as u64)
    }

    fn add_act(
        &self,
        a: In<'_, Self>,
        b: In<'_, Self>,
        y: Out<'_, Self>,
        len: usize,
        relu: bool,
    ) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let s = &self.inner.stream;
        let ap = addr(s, a.buf, a.off, len, "add_act", "input")?;
        let bp = addr(s, b.buf, b.off, len, "add_act", "input")?;
        let yp = addr(s, y.buf, y.off, len, "add_act", "output")?;
        launch!(self, add_act, self.grid(len), "add_act"; ap, bp, yp, len as u64, relu as i32)
    }

    fn gemm(&self, g: Gemm, a: In<'_, Self>, b: In<'_, Self>, c: Out<'_, Self>) -> BResult<()> {
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        let extent = |rows: usize, cols: usize, ld: usize| (rows - 1) * ld + cols;
        let (ar, ac) = if g.ta { (g.k, g.m) } else { (g.m, g.k) };
        let (br, bc) = if g.tb { (g.n, g.k) } else { (g.k, g.n) };
        if ac > g.lda || bc > g.ldb || g.n > g.ldc {
            return Err(op_err(
                "gemm",
                format!("leading dimension too small: {g:?}"),
            ));
        }
        let big = [g.m, g.n, g.k, g.lda, g.ldb, g.ldc]
            .iter()
            .any(|&v| v > i32::MAX as usize);
        if big {
            return Err(op_err(
                "gemm",
                format!("dimension past i32 (cuBLAS): {g:?}"),
            ));
        }
        let s = &self.inner.stream;
        let cp = addr(s, c.buf, c.off, extent(g.m, g.n, g.ldc), "gemm", "C")?;
        // With k == 0 cuBLAS reads neither A nor B; any valid address will do.
        let (ap, bp) = if g.k == 0 {
            (cp, cp)
        } else {
            (
                addr(s, a.buf, a.off, extent(ar, ac, g.lda), "gemm", "A")?,
                addr(s, b.buf, b.off, extent(br, bc, g.ldb), "gemm", "B")?,
            )
        };
        // cuBLAS is column-major: the row-major C = op(A) op(B) is, read column-major,
        // C^T = op(B)^T op(A)^T, i.e. the same call with the operands swapped and
        // every matrix's row stride as its leading dimension.
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (alpha, beta) = (g.alpha, g.beta);
        // SAFETY: the handle is bound to this backend's stream; A, B and C were checked
        // above to hold the full extents their strides imply; alpha and beta are host
        // scalars (the handle's default pointer mode) that outlive the call.
        unsafe {
            cudarc::cublas::result::sgemm(
                *self.inner.blas.handle(),
                op(g.tb),
                op(g.ta),
                g.n as i32,
                g.m as i32,
                g.k as i32,
                &alpha,
                bp as *const f32,
                g.ldb as i32,
                ap as *const f32,
                g.lda as i32,
                &beta,
                cp as *mut f32,
                g.ldc as i32,
            )
        }
        .map_err(|e| op_err("gemm", e.to_string()))
    }

    fn im2col(
        &self,
        x: In<'_, Self>,
        g: ConvGeom,
        n0: usize,
        nc: usize,
        col: Out<'_, Self>,
    ) -> BResult<()> {
        if n0 + nc > g.n {
            return Err(op_err(
                "im2col",
                format!("images {n0}..{} of {}", n0 + nc, g.n),
            ));
        }
        let (oh, ow) = (g.out_h(), g.out_w());
        let total = g.col_rows() * nc * oh * ow;
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, g.c * g.n * g.h * g.w, "im2col", "input")?;
        let cp = addr(s, col.buf, col.off, total, "im2col", "output")?;
        if total == 0 {
            return Ok(());
        }
        launch!(self, im2col, self.grid(total), "im2col";
            xp, cp, g.c as i32, g.n as u64, g.h as i32, g.w as i32, g.kh as i32, g.kw as i32,
            g.stride as i32, g.pad as i32, oh as i32, ow as i32, n0 as u64, nc as u64)
    }

    fn col2im(
        &self,
        col: In<'_, Self>,
        g: ConvGeom,
        n0: usize,
        nc: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        if n0 + nc > g.n {
            return Err(op_err(
                "col2im",
                format!("images {n0}..{} of {}", n0 + nc, g.n),
            ));
        }
        let (oh, ow) = (g.out_h(), g.out_w());
        let s = &self.inner.stream;
        let cols = g.col_rows() * nc * oh * ow;
        let cp = addr(s, col.buf, col.off, cols, "col2im", "input")?;
        let dp = addr(s, dx.buf, dx.off, g.c * g.n * g.h * g.w, "col2im", "output")?;
        let total = g.c * nc * g.h * g.w;
        if total == 0 {
            return Ok(());
        }
        launch!(self, col2im, self.grid(total), "col2im";
            cp, dp, g.c as i32, g.n as u64, g.h as i32, g.w as i32, g.kh as i32, g.kw as i32,
            g.stride as i32, g.pad as i32, oh as i32, ow as i32, n0 as u64, nc as u64)
    }

    fn bias_act_forward(
        &self,
        y: Out<'_, Self>,
        bias: Option<In<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()> {
        let s = &self.inner.stream;
        let yp = addr(s, y.buf, y.off, rows * cols, "bias_act_forward", "output")?;
        let bp = match bias {
            Some(b) => Some(addr(s, b.buf, b.off, rows, "bias_act_forward", "bias")?),
            None => None,
        };
        if rows * cols == 0 {
            return Ok(());
        }
        launch!(self, bias_act_forward, self.grid(rows * cols), "bias_act_forward";
            yp, bp.unwrap_or(yp), bp.is_some() as i32, rows as u64, cols as u64, relu as i32)
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
        let s = &self.inner.stream;
        let n = rows * cols;
        let yp = addr(s, y.buf, y.off, n, "bias_act_backward", "output")?;
        let dp = addr(s, dy.buf, dy.off, n, "bias_act_backward", "gradient")?;
        match dbias {
            Some(db) => {
                let bp = addr(
                    s,
                    db.buf,
                    db.off,
                    rows,
                    "bias_act_backward",
                    "bias gradient",
                )?;
                if cols == 0 || rows == 0 {
                    // The CPU leaves dbias alone when there are no columns.
                    return Ok(());
                }
                let cfg = LaunchConfig {
                    grid_dim: (rows as u32, 1, 1),
                    block_dim: (RED_THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                if rows > u32::MAX as usize {
                    return Err(op_err("bias_act_backward", "too many rows"));
                }
                launch!(self, bias_act_backward_rows, cfg, "bias_act_backward";
                    yp, dp, bp, cols as u64, relu as i32)
            }
            None if relu && n > 0 => {
                launch!(self, relu_mask, self.grid(n), "bias_act_backward"; yp, dp, n as u64)
            }
            None => Ok(()),
        }
    }

    fn relu_forward(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, len, "relu_forward", "input")?;
        let yp = addr(s, y.buf, y.off, len, "relu_forward", "output")?;
        launch!(self, relu_forward, self.grid(len), "relu_forward"; xp, yp, len as u64)
    }

    fn relu_backward(
        &self,
        y: In<'_, Self>,
        dy: In<'_, Self>,
        dx: Out<'_, Self>,
        len: usize,
    ) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let s = &self.inner.stream;
        let yp = addr(s, y.buf, y.off, len, "relu_backward", "output")?;
        let dyp = addr(s, dy.buf, dy.off, len, "relu_backward", "gradient")?;
        let dxp = addr(s, dx.buf, dx.off, len, "relu_backward", "input gradient")?;
        launch!(self, relu_backward, self.grid(len), "relu_backward"; yp, dyp, dxp, len as u64)
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
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, g.planes * hw, "maxpool_forward", "input")?;
        let yp = addr(s, y.buf, y.off, g.planes * ohw, "maxpool_forward", "output")?;
        let ap = addr(
            s,
            argmax.buf,
            argmax.off,
            g.planes * ohw,
            "maxpool_forward",
            "argmax",
        )?;
        let total = g.planes * ohw;
        if total == 0 {
            return Ok(());
        }
        launch!(self, maxpool_forward, self.grid(total), "maxpool_forward";
            xp, yp, ap, g.planes as u64, g.h as i32, g.w as i32, g.k as i32, g.stride as i32,
            oh as i32, ow as i32)
    }

    fn maxpool_backward(
        &self,
        dy: In<'_, Self>,
        argmax: In<'_, Self, u32>,
        g: PoolGeom,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        let (oh, ow) = (g.out_h(), g.out_w());
        let (hw, ohw) = (g.h * g.w, oh * ow);
        let s = &self.inner.stream;
        let dyp = addr(
            s,
            dy.buf,
            dy.off,
            g.planes * ohw,
            "maxpool_backward",
            "gradient",
        )?;
        let ap = addr(
            s,
            argmax.buf,
            argmax.off,
            g.planes * ohw,
            "maxpool_backward",
            "argmax",
        )?;
        let dxp = addr(
            s,
            dx.buf,
            dx.off,
            g.planes * hw,
            "maxpool_backward",
            "input gradient",
        )?;
        let total = g.planes * hw;
        if total == 0 || ohw == 0 {
            return Ok(());
        }
        launch!(self, maxpool_backward, self.grid(total), "maxpool_backward";
            dyp, ap, dxp, g.planes as u64, g.h as i32, g.w as i32, g.k as i32, g.stride as i32,
            oh as i32, ow as i32)
    }

    fn avgpool_forward(
        &self,
        x: In<'_, Self>,
        planes: usize,
        hw: usize,
        y: Out<'_, Self>,
    ) -> BResult<()> {
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, planes * hw, "avgpool_forward", "input")?;
        let yp = addr(s, y.buf, y.off, planes, "avgpool_forward", "output")?;
        if hw == 0 || planes == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        launch!(self, avgpool_forward, self.grid(planes), "avgpool_forward";
            xp, yp, planes as u64, hw as u64, inv)
    }

    fn avgpool_backward(
        &self,
        dy: In<'_, Self>,
        planes: usize,
        hw: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()> {
        let s = &self.inner.stream;
        let dyp = addr(s, dy.buf, dy.off, planes, "avgpool_backward", "gradient")?;
        let dxp = addr(
            s,
            dx.buf,
            dx.off,
            planes * hw,
            "avgpool_backward",
            "input gradient",
        )?;
        if hw == 0 || planes == 0 {
            return Ok(());
        }
        let inv = 1.0 / hw as f32;
        launch!(self, avgpool_backward, self.grid(planes * hw), "avgpool_backward";
            dyp, dxp, planes as u64, hw as u64, inv)
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
        let op = "batchnorm_forward";
        let m = g.n * g.hw;
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, g.c * m, op, "input")?;
        let gp = addr(s, gamma_beta.buf, gamma_beta.off, 2 * g.c, op, "gamma_beta")?;
        let yp = addr(s, y.buf, y.off, g.c * m, op, "output")?;
        let rp = addr(s, running.buf, running.off, 2 * g.c, op, "running")?;
        if m == 0 || g.c == 0 {
            return Ok(());
        }
        let (c, m64) = (g.c as u64, m as u64);
        let apply = |sp: u64| {
            launch!(self, bn_apply, self.grid(g.c * m), op;
                xp, gp, sp, rp, yp, c, m64, g.eps, train as i32, g.relu as i32)
        };
        if !train {
            // `saved` is neither read nor written in eval mode; pass a valid address.
            return apply(rp);
        }
        let sp = addr(s, saved.buf, saved.off, 2 * g.c, op, "saved")?;
        let nchunks = m.div_ceil(BN_CHUNK);
        if g.c > u16::MAX as usize || nchunks > i32::MAX as usize {
            return Err(op_err(op, "too many channels or chunks for one launch"));
        }
        self.with_scratch(g.c * nchunks * 16, |part| {
            let cfg = LaunchConfig {
                grid_dim: (nchunks as u32, g.c as u32, 1),
                block_dim: (RED_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(self, bn_partial_stats, cfg, op; xp, part, m64, BN_CHUNK as u64)?;
            launch!(self, bn_finalize_stats, self.grid(g.c), op;
                xp, part, nchunks as u64, c, m64, g.eps, g.momentum, sp, rp)
        })?;
        apply(sp)
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
        let op = "batchnorm_backward";
        let m = g.n * g.hw;
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, g.c * m, op, "input")?;
        let dyp = addr(s, dy.buf, dy.off, g.c * m, op, "gradient")?;
        // `y` is read only with the fused ReLU; otherwise pass any valid address.
        let yp = if g.relu {
            addr(s, y.buf, y.off, g.c * m, op, "output")?
        } else {
            xp
        };
        let gp = addr(s, gamma_beta.buf, gamma_beta.off, 2 * g.c, op, "gamma_beta")?;
        let sp = addr(s, saved.buf, saved.off, 2 * g.c, op, "saved")?;
        let dgp = addr(
            s,
            dgamma_beta.buf,
            dgamma_beta.off,
            2 * g.c,
            op,
            "dgamma_beta",
        )?;
        let dxp = addr(s, dx.buf, dx.off, g.c * m, op, "input gradient")?;
        if m == 0 || g.c == 0 {
            return Ok(());
        }
        let nchunks = m.div_ceil(BN_CHUNK);
        if g.c > u16::MAX as usize || nchunks > i32::MAX as usize {
            return Err(op_err(op, "too many channels or chunks for one launch"));
        }
        let (c, m64, relu) = (g.c as u64, m as u64, g.relu as i32);
        self.with_scratch(g.c * nchunks * 16, |part| {
            let cfg = LaunchConfig {
                grid_dim: (nchunks as u32, g.c as u32, 1),
                block_dim: (RED_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(self, bn_partial_grads, cfg, op;
                xp, yp, dyp, sp, part, m64, BN_CHUNK as u64, relu)?;
            launch!(self, bn_finalize_grads, self.grid(g.c), op;
                part, nchunks as u64, c, sp, dgp)
        })?;
        launch!(self, bn_apply_grads, self.grid(g.c * m), op;
            xp, yp, dyp, gp, sp, dgp, dxp, c, m64, relu)
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
            return Err(op_err(
                "datanorm",
                format!("{} means and {} stds", c, std.len()),
            ));
        }
        if c > DATANORM_MAX_CHANNELS {
            return Err(op_err(
                "datanorm",
                format!("{c} channels; the CUDA kernel takes at most {DATANORM_MAX_CHANNELS}"),
            ));
        }
        let hw = h * w;
        let s = &self.inner.stream;
        let xp = addr(s, x.buf, x.off, n * hw * c, "datanorm", "input")?;
        let yp = addr(s, y.buf, y.off, n * hw * c, "datanorm", "output")?;
        if n == 0 || hw == 0 {
            return Ok(());
        }
        // The same per-channel constants as the CPU, computed the same way on the host.
        let mut t = [0f32; 2 * DATANORM_MAX_CHANNELS];
        for ch in 0..c {
            t[ch] = 1.0 / (255.0 * std[ch]);
            t[DATANORM_MAX_CHANNELS + ch] = -mean[ch] / std[ch];
        }
        let total = n * hw * c;
        match layout {
            DataLayout::ChannelMajor => launch!(self, datanorm_cm, self.grid(total), "datanorm";
                xp, yp, n as u64, hw as u64, c as i32, t),
            DataLayout::FeatureMajor => launch!(self, datanorm_fm, self.grid(total), "datanorm";
                xp, yp, n as u64, hw as u64, c as i32, t),
        }
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
        let op = "softmax_xent";
        let s = &self.inner.stream;
        let zp = addr(s, logits.buf, logits.off, classes * n, op, "logits")?;
        let lp = addr(s, labels.buf, labels.off, n, op, "labels")?;
        let sp = addr(s, stats.buf, stats.off, 2, op, "stats")?;
        let dz = match dlogits {
            Some(d) => Some(addr(s, d.buf, d.off, classes * n, op, "dlogits")?),
            None => None,
        };
        let inv_n = 1.0 / n.max(1) as f32;
        self.inner.xent_classes.store(classes, Ordering::Relaxed);
        let flag = self
            .inner
            .bad_label
            .lock()
            .map_err(|_| op_err(op, "lock poisoned by an earlier panic"))?;
        let (fp, _rec) = flag.device_ptr(s);
        self.with_scratch(n.max(1) * 8, |rows| {
            if n > 0 {
                launch!(self, xent_rows, self.grid(n), op;
                    zp, lp, classes as u64, n as u64, dz.unwrap_or(zp), dz.is_some() as i32,
                    inv_n, rows, fp)?;
            }
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (RED_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(self, xent_sum, one, op; rows, n as u64, sp)
        })
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
        let op = "sgd_step";
        let s = &self.inner.stream;
        let pp = addr(s, params.buf, params.off, len, op, "params")?;
        let gp = addr(s, grads.buf, grads.off, len, op, "grads")?;
        let bp = addr(s, momentum.buf, momentum.off, len, op, "momentum")?;
        if len == 0 {
            return Ok(());
        }
        launch!(self, sgd_step, self.grid(len), op;
            pp, gp, bp, len as u64, decay_len as u64, h.lr, h.momentum, h.weight_decay,
            h.nesterov as i32)
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
        let op = "adamw_step";
        let s = &self.inner.stream;
        let pp = addr(s, params.buf, params.off, len, op, "params")?;
        let gp = addr(s, grads.buf, grads.off, len, op, "grads")?;
        let mp = addr(s, m.buf, m.off, len, op, "m")?;
        let vp = addr(s, v.buf, v.off, len, op, "v")?;
        if len == 0 {
            return Ok(());
        }
        // The bias corrections as the CPU computes them (f32 powi on the host).
        let t = h.step.max(1) as i32;
        let c1 = 1.0 - h.beta1.powi(t);
        let c2 = 1.0 - h.beta2.powi(t);
        launch!(self, adamw_step, self.grid(len), op;
            pp, gp, mp, vp, len as u64, decay_len as u64, h.lr, h.beta1, h.beta2,
            1.0 - h.beta1, 1.0 - h.beta2, h.eps, h.weight_decay, c1, c2)
    }
}
