//! The CUDA backend: GEMM through cuBLAS, every other op a kernel from `kernels/*.cu`,
//! all enqueued on one stream.
//!
//! CUDA is found at run time (cudarc loads `libcuda`, `libnvrtc` and `libcublas` with
//! `dlopen`), so this module builds everywhere and [`probe()`] says, without panicking,
//! whether a usable device is there. Semantics follow the CPU backend op for op: the
//! same layouts, the same GEMM conventions, results in the same places. Element-wise
//! kernels are compiled without FMA contraction (`--fmad=false`) so they round as the
//! CPU does; reductions use a fixed order (no floating-point atomics), so every op is
//! deterministic, as the `Backend` contract asks. GEMMs differ from the CPU's in
//! summation order only, hence the tolerances of the parity tests.
//!
//! Nothing here synchronises except `download` and `synchronize`. One consequence: a
//! label out of range inside `softmax_xent` is recorded on the device and reported by
//! the next `download` or `synchronize`, not by the call itself.
//!
//! Files: `probe` (is CUDA usable, what device), `buffer` (device buffers and checked
//! addresses), `kernels` (the kernel table: one declaration per kernel, with the struct
//! of its parameters; compiling the program, or reading it from the PTX cache,
//! `ptx_cache`), `launch` (an op's context: its views checked into addresses, its
//! kernels launched, its name in every error), `error` (the typed [`CudaError`]), this
//! file (the backend: context, stream, cuBLAS, scratch, and its [`Buffers`] impl), and
//! one file per concern of ops, as on the CPU, each implementing its concern's trait:
//! `gemm`, `conv` (im2col, col2im, and a whole convolution: on cuDNN, `cudnn`, when it
//! is there, else as chunks of im2col + cuBLAS + col2im), `norm`, `pool`, `bn_pool`
//! (batch norm + ReLU + max pool, as a sequence of the `norm` and `pool` kernels),
//! `elementwise`, `loss`, `optim`.

mod bn_pool;
mod buffer;
mod cast;
mod conv;
pub mod cudnn;
mod elementwise;
pub mod error;
mod gemm;
pub mod kernels;
mod launch;
mod loss;
mod norm;
mod optim;
mod pool;
pub mod probe;
pub mod ptx_cache;

use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{
    sys as drv_sys, CudaContext, CudaModule, CudaSlice, CudaStream, LaunchConfig,
};

pub use buffer::CudaBuf;
pub use cudnn::{ConvChoice, ConvConfig, ConvEngine, CudnnLayout, CONV_ENV, LAYOUT_ENV};
pub use error::CudaError;
pub use kernels::{compile_kernels, kernel_source, DATANORM_MAX_CHANNELS};
pub use probe::{probe, probe_ordinal, DeviceInfo};

use super::{BResult, Backend, BackendError, Buffers, Elem, In, Out};
use crate::precision::Precision;
use buffer::{as_bytes, as_bytes_mut, device_addr, op_err, DevPtr};
use kernels::Kernels;

/// Threads per block of the reduction kernels (`RED_THREADS` in `common.cuh`).
const RED_THREADS: u32 = 256;
/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;

/// Shared state of a backend and its clones.
struct Inner {
    /// cuDNN, when it runs the convolutions. First, so that its handle is destroyed
    /// while the context and stream it uses still live.
    cudnn: Option<cudnn::Cudnn>,
    /// What runs the convolutions, and why not cuDNN when it does not.
    conv_engine: ConvEngine,
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    _module: Arc<CudaModule>,
    /// Blocks for a grid-stride launch: enough to fill every multiprocessor.
    max_blocks: u32,
    /// Scratch for partial sums (batch norm, loss rows). Locked while the kernels that
    /// use it are enqueued; stream order then keeps uses from overlapping.
    scratch: Mutex<Option<CudaSlice<u8>>>,
    /// The bf16 copies of a GEMM's operands under bf16 autocast (`gemm.rs`).
    bf16_scratch: Mutex<Option<CudaBuf<u16>>>,
    /// A label out of range seen by `softmax_xent`: 0, or the complement of
    /// `(row << 32) | label` (see `kernels/softmax_xent.cu`).
    bad_label: Mutex<CudaSlice<u8>>,
    /// Classes of the last `softmax_xent`, for the message of a deferred label error.
    xent_classes: AtomicUsize,
    allocs: AtomicUsize,
    /// The step's arithmetic: f32, or bf16 autocast (see `crate::precision`).
    precision: Precision,
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

/// `Err` mapper: a CUDA failure inside backend op `op`.
fn cuda_err(op: &'static str) -> impl Fn(CudaError) -> BackendError {
    move |source| BackendError::Cuda { op, source }
}

/// `Err` mapper: driver call `call` failed inside backend op `op`.
fn driver_err(
    op: &'static str,
    call: &'static str,
) -> impl Fn(cudarc::driver::DriverError) -> BackendError {
    move |source| BackendError::Cuda {
        op,
        source: CudaError::Driver { call, source },
    }
}

impl CudaBackend {
    /// Opens device `ordinal`: context, stream, cuBLAS handle, and the kernels for its
    /// architecture (compute_90 on Hopper), from the PTX cache or compiled by NVRTC. An
    /// error, never a panic, when CUDA is missing or unusable.
    pub fn new(ordinal: usize) -> Result<Self, BackendError> {
        Self::with_precision(ordinal, Precision::F32)
    }

    /// [`CudaBackend::new`] with the step's arithmetic: `Precision::Bf16` runs the
    /// convolutions and GEMMs on bf16 operands with f32 accumulation (autocast). The
    /// convolution engine is what `STOKER_CONV` asks for (see [`ConvChoice`]), cuDNN's
    /// layout what `STOKER_CUDNN_LAYOUT` does ([`CudnnLayout`]); a value they do not
    /// take is an error.
    pub fn with_precision(ordinal: usize, precision: Precision) -> Result<Self, BackendError> {
        let conv =
            ConvConfig::from_env().map_err(|source| BackendError::CudaInit { ordinal, source })?;
        Self::with_conv(ordinal, precision, conv)
    }

    /// [`CudaBackend::with_precision`] with the convolution settings given rather than
    /// read from the environment.
    pub fn with_conv(
        ordinal: usize,
        precision: Precision,
        conv: ConvConfig,
    ) -> Result<Self, BackendError> {
        let init = |source| BackendError::CudaInit { ordinal, source };
        let info = probe_ordinal(ordinal).map_err(init)?;
        // A second guard: a panic inside cudarc (a symbol missing from an older
        // driver, say) becomes an error value too.
        catch_unwind(AssertUnwindSafe(|| {
            Self::build(ordinal, info, precision, conv)
        }))
        .unwrap_or_else(|p| {
            Err(CudaError::Panicked {
                what: "cuda init",
                message: p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic caught".into()),
            })
        })
        .map_err(init)
    }

    fn build(
        ordinal: usize,
        info: DeviceInfo,
        precision: Precision,
        conv: ConvConfig,
    ) -> Result<Self, CudaError> {
        let ctx = CudaContext::new(ordinal).map_err(CudaError::driver("cuCtxCreate"))?;
        // SAFETY: called before this context allocates anything. Every op runs on the
        // one stream below, so cudarc's per-buffer events (which would record and wait
        // on every launch) buy nothing; the loader's uploader orders its copy stream
        // with explicit events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(CudaError::driver("cuStreamCreate"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|source| CudaError::Blas {
            call: "cublasCreate",
            source,
        })?;
        // Plain FP32 GEMMs (no TF32): CPU parity is worth more than the speed here.
        // SAFETY: the handle is live (owned by `blas`) and the mode a valid enum value.
        unsafe {
            blas_sys::cublasSetMathMode(
                *blas.handle(),
                blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
            .result()
            .map_err(|source| CudaError::Blas {
                call: "cublasSetMathMode",
                source,
            })?;
        }
        let (conv_engine, cudnn) = cudnn::open(conv, |handle| {
            // SAFETY: a live handle and this backend's live stream, which outlives the
            // handle (`Inner` drops `cudnn` first).
            unsafe { cudarc::cudnn::result::set_stream(handle, stream.cu_stream() as *mut _) }
                .map_err(|source| CudaError::Cudnn {
                    call: "cudnnSetStream",
                    source,
                })
        })?;
        let (kernels, module) =
            kernels::load_kernels(&ctx, info.compute_capability, &ptx_cache::default_dir())?;
        let sms = ctx
            .attribute(drv_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(CudaError::driver("cuDeviceGetAttribute"))?;
        let bad_label = stream
            .alloc_zeros::<u8>(8)
            .map_err(|source| CudaError::Alloc { bytes: 8, source })?;
        Ok(Self {
            inner: Arc::new(Inner {
                cudnn,
                conv_engine,
                info,
                max_blocks: (sms.max(1) as u32) * 16,
                ctx,
                stream,
                blas,
                kernels,
                _module: module,
                scratch: Mutex::new(None),
                bf16_scratch: Mutex::new(None),
                bad_label: Mutex::new(bad_label),
                xent_classes: AtomicUsize::new(0),
                allocs: AtomicUsize::new(0),
                precision,
            }),
        })
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The step's arithmetic this backend was opened with.
    pub fn precision(&self) -> Precision {
        self.inner.precision
    }

    /// What runs the convolutions: cuDNN (and its version), or im2col + cuBLAS and why.
    pub fn conv_engine(&self) -> &ConvEngine {
        &self.inner.conv_engine
    }

    /// The convolution shapes seen so far that run on im2col although cuDNN is open
    /// (no qualifying algorithm), each with the reason; empty without cuDNN.
    pub fn cudnn_fallbacks(&self) -> Vec<String> {
        self.inner
            .cudnn
            .as_ref()
            .map(|c| c.fallbacks())
            .unwrap_or_default()
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

    fn kernels(&self) -> &Kernels {
        &self.inner.kernels
    }

    fn blas(&self) -> &CudaBlas {
        &self.inner.blas
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
    fn with_scratch<R>(&self, bytes: usize, f: impl FnOnce(DevPtr) -> BResult<R>) -> BResult<R> {
        let mut scratch = self
            .inner
            .scratch
            .lock()
            .map_err(|_| op_err("scratch", "lock poisoned by an earlier panic"))?;
        if scratch.as_ref().is_none_or(|s| s.len() < bytes) {
            // Round up so a slowly growing batch does not reallocate at every step.
            let size = bytes.next_power_of_two().max(4096);
            let fresh = self
                .inner
                .stream
                .alloc_zeros::<u8>(size)
                .map_err(|source| BackendError::Cuda {
                    op: "scratch",
                    source: CudaError::Alloc {
                        bytes: size,
                        source,
                    },
                })?;
            *scratch = Some(fresh);
        }
        let s = scratch
            .as_ref()
            .ok_or_else(|| op_err("scratch", "missing"))?;
        f(DevPtr::of(s, &self.inner.stream))
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
            .map_err(driver_err("download", "cuMemcpyDtoHAsync"))?;
        let v = u64::from_le_bytes(v);
        if v == 0 {
            return Ok(());
        }
        self.inner
            .stream
            .memset_zeros(&mut *flag)
            .map_err(driver_err("download", "cuMemsetD8Async"))?;
        let code = !v;
        Err(BackendError::Label {
            row: (code >> 32) as usize,
            label: code as u32,
            classes: self.inner.xent_classes.load(Ordering::Relaxed),
        })
    }
}

impl Buffers for CudaBackend {
    type Buf<T: Elem> = CudaBuf<T>;

    fn name(&self) -> String {
        self.inner.info.to_string()
    }

    fn alloc<T: Elem>(&self, len: usize) -> BResult<CudaBuf<T>> {
        let bytes = len * std::mem::size_of::<T>();
        let alloc_err = |source| BackendError::Cuda {
            op: "alloc",
            source: CudaError::Alloc { bytes, source },
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
        device_addr(s, dst.buf, dst.off, src.len(), "upload", "destination")?;
        let bytes = as_bytes(src);
        let start = dst.off * std::mem::size_of::<T>();
        let mut view = dst.buf.raw.slice_mut(start..start + bytes.len());
        // A pageable source: the driver copies it to a staging buffer before returning,
        // so `src` may change as soon as this returns.
        s.memcpy_htod(bytes, &mut view)
            .map_err(driver_err("upload", "cuMemcpyHtoDAsync"))
    }

    fn download<T: Elem>(&self, src: In<'_, Self, T>, dst: &mut [T]) -> BResult<()> {
        let s = &self.inner.stream;
        if !dst.is_empty() {
            device_addr(s, src.buf, src.off, dst.len(), "download", "source")?;
            let start = src.off * std::mem::size_of::<T>();
            let bytes = as_bytes_mut(dst);
            let view = src.buf.raw.slice(start..start + bytes.len());
            // Into pageable memory the copy returns only once complete.
            s.memcpy_dtoh(&view, bytes)
                .map_err(driver_err("download", "cuMemcpyDtoHAsync"))?;
        }
        s.synchronize()
            .map_err(driver_err("download", "cuStreamSynchronize"))?;
        self.check_labels()
    }

    fn synchronize(&self) -> BResult<()> {
        self.inner
            .stream
            .synchronize()
            .map_err(driver_err("synchronize", "cuStreamSynchronize"))?;
        self.check_labels()
    }
}

impl Backend for CudaBackend {}
