//! The compute seam: every operation the layers need, over buffers that a backend owns.
//!
//! A backend owns its memory: a buffer is an opaque `Buffers::Buf<T>` (a `Vec` on the
//! CPU, a device allocation on a GPU), and operations address it through [`In`] and
//! [`Out`], a buffer plus an element offset. Lengths come from each operation's
//! dimensions, so the same call maps onto a pointer-plus-offset kernel launch on CUDA.
//!
//! Operations are coarse on purpose (one call per layer step: a whole GEMM, a whole
//! batch norm), so a GPU backend launches few kernels per step and never synchronises
//! except in `download`.
//!
//! Layout convention, shared by every op: activations are channel-major, `[C, N, H, W]`
//! (a fully connected activation is `[F, N]`), with `N` the actual batch size of the call.
//! Every per-channel reduction then runs over one contiguous row, and a convolution over
//! a chunk of images is a single GEMM.
//!
//! [`Backend`] is [`Buffers`] (allocation and copies, here) plus one trait of ops per
//! concern, each in its file with its geometry types: `elementwise`, `gemm`, `conv`
//! (im2col and whole convolutions), `norm`, `pool`, `bn_pool`, `loss`, `optim`. Every op
//! takes one argument struct (`conv_forward` takes a [`ConvForwardArgs`]), so its
//! argument list is written once; `cpu/` and `cuda/` implement each concern's trait in
//! the file of the same name.

mod bn_pool;
mod conv;
pub mod cpu;
pub mod cuda;
mod elementwise;
mod gemm;
mod loss;
mod norm;
mod optim;
mod pool;

pub use bn_pool::*;
pub use conv::*;
pub use cpu::CpuBackend;
pub use cuda::CudaBackend;
pub use elementwise::*;
pub use gemm::*;
pub use loss::*;
pub use norm::*;
pub use optim::*;
pub use pool::*;

/// Element types a buffer can hold. Sealed: backends implement exactly these. `u16`
/// holds bf16 bit patterns (the operands of bf16 autocast, `crate::precision`).
pub trait Elem: Copy + Default + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed {}
impl Elem for f32 {}
impl Elem for u8 {}
impl Elem for u16 {}
impl Elem for u32 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
    impl Sealed for u16 {}
    impl Sealed for u32 {}
}

/// What a backend operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A buffer could not be allocated: the system refused it, or (on the CPU) it would
    /// take the live buffers past the backend's memory limit.
    #[error("{device}: cannot allocate {bytes} bytes: {reason}")]
    Alloc {
        /// The device that refused, e.g. `cpu`.
        device: String,
        /// Size of the refused allocation (`usize::MAX` when the size itself overflows).
        bytes: usize,
        /// Why, in words.
        reason: String,
    },
    /// An operation cannot run as called: a buffer shorter than its shapes need,
    /// lengths that do not match, sizes beyond one kernel launch, a layout the backend
    /// lacks, or a lock poisoned by an earlier panic.
    #[error("{op}: {reason}")]
    Op {
        /// The operation (or caller), e.g. `im2col`.
        op: &'static str,
        /// What was wrong, in words.
        reason: String,
    },
    /// A CUDA call failed inside backend op `op`.
    #[error("{op}: {source}")]
    Cuda {
        /// The backend operation that made the call, e.g. `gemm`.
        op: &'static str,
        /// The CUDA library's error.
        source: cuda::CudaError,
    },
    /// The CUDA backend could not start on device `ordinal`.
    #[error("cuda init: cuda:{ordinal}: {source}")]
    CudaInit {
        /// The device asked for (`cuda:ordinal`).
        ordinal: usize,
        /// Why it could not start.
        source: cuda::CudaError,
    },
    /// A hard label is not below the class count in `softmax_xent` (the CUDA backend
    /// records it on the device and reports it at the next `download` or `synchronize`).
    #[error("label {label} of sample {row} is out of range for {classes} classes")]
    Label {
        /// Index of the sample within the batch.
        row: usize,
        /// The offending label.
        label: u32,
        /// Classes of the loss (labels must be `< classes`).
        classes: usize,
    },
}

/// Shorthand for results of backend operations.
pub type BResult<T> = Result<T, BackendError>;

/// A read-only view of a backend buffer from element `off` on.
pub struct In<'a, B: Buffers + ?Sized, T: Elem = f32> {
    /// The buffer read from.
    pub buf: &'a B::Buf<T>,
    /// Index of the view's first element in `buf`.
    pub off: usize,
}

// Manual impls: deriving would wrongly require `B: Clone`.
impl<B: Buffers + ?Sized, T: Elem> Clone for In<'_, B, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Buffers + ?Sized, T: Elem> Copy for In<'_, B, T> {}

impl<'a, B: Buffers + ?Sized, T: Elem> In<'a, B, T> {
    /// A view of `buf` from its first element.
    pub fn new(buf: &'a B::Buf<T>) -> Self {
        Self { buf, off: 0 }
    }
    /// A view of `buf` from element `off` on.
    pub fn at(buf: &'a B::Buf<T>, off: usize) -> Self {
        Self { buf, off }
    }
    /// The same buffer, `extra` elements further on.
    pub fn skip(self, extra: usize) -> Self {
        Self {
            buf: self.buf,
            off: self.off + extra,
        }
    }
}

/// A writable view of a backend buffer from element `off` on.
pub struct Out<'a, B: Buffers + ?Sized, T: Elem = f32> {
    /// The buffer written to.
    pub buf: &'a mut B::Buf<T>,
    /// Index of the view's first element in `buf`.
    pub off: usize,
}

impl<'a, B: Buffers + ?Sized, T: Elem> Out<'a, B, T> {
    /// A view of `buf` from its first element.
    pub fn new(buf: &'a mut B::Buf<T>) -> Self {
        Self { buf, off: 0 }
    }
    /// A view of `buf` from element `off` on.
    pub fn at(buf: &'a mut B::Buf<T>, off: usize) -> Self {
        Self { buf, off }
    }
}

/// A backend's buffers: allocation, copies to and from the host, and waiting for the
/// device. Every op trait builds on it.
pub trait Buffers: Send + Sync {
    /// A buffer of `T` owned by this backend.
    type Buf<T: Elem>: Send + Sync;

    /// Human-readable device name, e.g. `cpu (2 threads)`.
    fn name(&self) -> String;

    /// A zero-filled buffer of `len` elements.
    fn alloc<T: Elem>(&self, len: usize) -> BResult<Self::Buf<T>>;
    /// Number of elements of `buf`.
    fn buf_len<T: Elem>(&self, buf: &Self::Buf<T>) -> usize;
    /// Copies `src` into `dst` from its offset on.
    fn upload<T: Elem>(&self, src: &[T], dst: Out<'_, Self, T>) -> BResult<()>;
    /// Copies `dst.len()` elements from `src` to the host; waits for pending work.
    fn download<T: Elem>(&self, src: In<'_, Self, T>, dst: &mut [T]) -> BResult<()>;
    /// Waits until all enqueued work is done (for timing).
    fn synchronize(&self) -> BResult<()>;
}

/// A compute backend: its buffers and every concern's ops. Every operation is enqueued
/// in order; only `download` (and `synchronize`) wait for the device.
///
/// Determinism contract: for the same inputs an operation gives bit-identical outputs on
/// every call (fixed work partitioning, fixed reduction order).
///
/// Code generic over `B: Backend` calls every op; code that names a backend type calls
/// the ops of the traits it imports (`use stoker_trainer::backend::*` brings them all).
/// A new concern is one more trait here, which each backend must then implement.
pub trait Backend:
    Buffers
    + ElementwiseOps
    + GemmOps
    + Im2colOps
    + ConvOps
    + NormOps
    + PoolOps
    + BnPoolOps
    + LossOps
    + OptimOps
{
}
