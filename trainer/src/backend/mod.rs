//! The compute seam: every operation the layers need, over buffers that a backend owns.
//!
//! A backend owns its memory: a buffer is an opaque `Backend::Buf<T>` (a `Vec` on the CPU,
//! a device allocation on a GPU), and operations address it through [`In`] and [`Out`], a
//! buffer plus an element offset. Lengths come from each operation's dimensions, so the
//! same call maps onto a pointer-plus-offset kernel launch on CUDA.
//!
//! Operations are coarse on purpose (one call per layer step: a whole GEMM, a whole
//! batch norm), so a GPU backend launches few kernels per step and never synchronises
//! except in `download`.
//!
//! Layout convention, shared by every op: activations are channel-major, `[C, N, H, W]`
//! (a fully connected activation is `[F, N]`), with `N` the actual batch size of the call.
//! Every per-channel reduction then runs over one contiguous row, and a convolution over
//! a chunk of images is a single GEMM.

pub mod cpu;
pub mod cuda;

pub use cpu::CpuBackend;
pub use cuda::CudaBackend;

/// Element types a buffer can hold. Sealed: backends implement exactly these.
pub trait Elem: Copy + Default + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed {}
impl Elem for f32 {}
impl Elem for u8 {}
impl Elem for u32 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
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
pub struct In<'a, B: Backend + ?Sized, T: Elem = f32> {
    /// The buffer read from.
    pub buf: &'a B::Buf<T>,
    /// Index of the view's first element in `buf`.
    pub off: usize,
}

// Manual impls: deriving would wrongly require `B: Clone`.
impl<B: Backend + ?Sized, T: Elem> Clone for In<'_, B, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized, T: Elem> Copy for In<'_, B, T> {}

impl<'a, B: Backend + ?Sized, T: Elem> In<'a, B, T> {
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
pub struct Out<'a, B: Backend + ?Sized, T: Elem = f32> {
    /// The buffer written to.
    pub buf: &'a mut B::Buf<T>,
    /// Index of the view's first element in `buf`.
    pub off: usize,
}

impl<'a, B: Backend + ?Sized, T: Elem> Out<'a, B, T> {
    /// A view of `buf` from its first element.
    pub fn new(buf: &'a mut B::Buf<T>) -> Self {
        Self { buf, off: 0 }
    }
    /// A view of `buf` from element `off` on.
    pub fn at(buf: &'a mut B::Buf<T>, off: usize) -> Self {
        Self { buf, off }
    }
}

/// A row-major GEMM: `C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C`.
///
/// `op(X)` is `X` or its transpose; `lda`, `ldb`, `ldc` are the row strides of the
/// matrices as stored (so a transposed `A` is stored `[k, m]` with stride `lda`).
/// `beta == 0` means `C` is overwritten and may hold anything (even NaN) before.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    /// `op(A)` is `A` transposed: `A` is stored `[k, m]`.
    pub ta: bool,
    /// `op(B)` is `B` transposed: `B` is stored `[n, k]`.
    pub tb: bool,
    /// Rows of `C` and of `op(A)`.
    pub m: usize,
    /// Columns of `C` and of `op(B)`.
    pub n: usize,
    /// Length of the summed dimension: columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product `op(A) * op(B)`.
    pub alpha: f32,
    /// Scale of the old `C` added to the product; 0 overwrites `C`.
    pub beta: f32,
    /// Row stride of `A` as stored, in elements.
    pub lda: usize,
    /// Row stride of `B` as stored, in elements.
    pub ldb: usize,
    /// Row stride of `C`, in elements.
    pub ldc: usize,
}

impl Gemm {
    /// Densely packed operands: strides follow from the shapes and transposes.
    pub fn dense(ta: bool, tb: bool, m: usize, n: usize, k: usize) -> Self {
        Self {
            ta,
            tb,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            lda: if ta { m } else { k },
            ldb: if tb { k } else { n },
            ldc: n,
        }
    }
    /// The same GEMM with `beta` instead (1 accumulates into `C`).
    pub fn beta(mut self, beta: f32) -> Self {
        self.beta = beta;
        self
    }
}

/// How an im2col matrix is laid out. With `K = c * kh * kw` kernel taps and `P` output
/// pixels (images x rows x columns), it is `[K, P]` or its transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColLayout {
    /// `[K, P]`: one row per kernel tap, so a row of the forward GEMM's output is a
    /// channel of the activation (what the CUDA backend uses).
    TapMajor,
    /// `[P, K]`: one row per output pixel. The CPU's choice: its weight-gradient GEMM
    /// `dy[cout, P] x col[P, K]` then reads both operands along their rows, which is
    /// about three times faster there than `[K, P]` read transposed.
    PixelMajor,
}

/// Geometry of a 2-D convolution over a channel-major batch `[c, n, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// Input channels.
    pub c: usize,
    /// Images in the whole batch (the row stride of the activation is `n * h * w`).
    pub n: usize,
    /// Input height, in pixels.
    pub h: usize,
    /// Input width, in pixels.
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Step between neighbouring output pixels, in input pixels (both axes).
    pub stride: usize,
    /// Zeros added on every side of the input, in pixels (both axes).
    pub pad: usize,
    /// Layout of the im2col matrix that `im2col` writes and `col2im` reads.
    pub col: ColLayout,
}

impl ConvGeom {
    /// Output height, `(h + 2 * pad - kh) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.h + 2 * self.pad - self.kh) / self.stride + 1
    }
    /// Output width, `(w + 2 * pad - kw) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.w + 2 * self.pad - self.kw) / self.stride + 1
    }
    /// Rows of the im2col matrix: one per (input channel, kernel row, kernel column).
    pub fn col_rows(&self) -> usize {
        self.c * self.kh * self.kw
    }
}

/// Geometry of a max pooling over `planes` independent `h x w` planes (no padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeom {
    /// Planes pooled, each on its own (channels x images of a `[c, n, h, w]` batch).
    pub planes: usize,
    /// Plane height, in pixels.
    pub h: usize,
    /// Plane width, in pixels.
    pub w: usize,
    /// Side of the square window (`k x k`).
    pub k: usize,
    /// Step between neighbouring windows, in pixels (both axes).
    pub stride: usize,
}

impl PoolGeom {
    /// Output height, `(h - k) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.h - self.k) / self.stride + 1
    }
    /// Output width, `(w - k) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.w - self.k) / self.stride + 1
    }
}

/// Geometry and settings of a batch norm over `[c, n, hw]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BnGeom {
    /// Channels, each normalised on its own.
    pub c: usize,
    /// Images in the call.
    pub n: usize,
    /// Pixels per image and channel (`h * w`).
    pub hw: usize,
    /// Added to the variance before its square root.
    pub eps: f32,
    /// Weight of the new batch statistic in the running average (PyTorch's `momentum`).
    pub momentum: f32,
    /// Apply ReLU to the output (fused; its backward masks by the output).
    pub relu: bool,
}

/// A batch norm, ReLU and 2x2 max pooling (stride 2) fused into one op, over `[c, n, h,
/// w]`; the pooled output is `[c, n, h / 2, w / 2]` (an odd last row or column is
/// dropped, as the plain max pool drops it). Batch-norm settings as in [`BnGeom`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BnPoolGeom {
    /// Channels.
    pub c: usize,
    /// Images in the call.
    pub n: usize,
    /// Input height, in pixels.
    pub h: usize,
    /// Input width, in pixels.
    pub w: usize,
    /// Added to the variance before its square root.
    pub eps: f32,
    /// Weight of the new batch statistic in the running average (PyTorch's `momentum`).
    pub momentum: f32,
}

impl BnPoolGeom {
    /// Pooled height, `h / 2`.
    pub fn out_h(&self) -> usize {
        self.h / 2
    }
    /// Pooled width, `w / 2`.
    pub fn out_w(&self) -> usize {
        self.w / 2
    }
    /// The batch norm (with its ReLU) on its own.
    pub fn bn(&self) -> BnGeom {
        BnGeom {
            c: self.c,
            n: self.n,
            hw: self.h * self.w,
            eps: self.eps,
            momentum: self.momentum,
            relu: true,
        }
    }
    /// The max pooling on its own.
    pub fn pool(&self) -> PoolGeom {
        PoolGeom {
            planes: self.c * self.n,
            h: self.h,
            w: self.w,
            k: 2,
            stride: 2,
        }
    }
}

/// How `datanorm` lays out its f32 output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataLayout {
    /// `[c, n, h, w]`: for convolutional models.
    ChannelMajor,
    /// `[h * w * c, n]`, feature index `(y * w + x) * c + ch`: for fully connected models.
    FeatureMajor,
}

/// Hyper-parameters of one SGD step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    /// Learning rate: the step is `lr` times the update direction.
    pub lr: f32,
    /// Momentum coefficient (0 for plain SGD): the buffer becomes `momentum * buf + d`,
    /// with `d` the gradient plus weight decay.
    pub momentum: f32,
    /// L2 penalty: `weight_decay * param` is added to the gradient of the decayed
    /// elements.
    pub weight_decay: f32,
    /// Nesterov momentum: step along `d + momentum * buf` instead of `buf`.
    pub nesterov: bool,
}

/// Hyper-parameters of one AdamW step; `step` counts from 1 (bias correction).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    /// Learning rate.
    pub lr: f32,
    /// Decay of the running mean of the gradient (first moment), in [0, 1).
    pub beta1: f32,
    /// Decay of the running mean of the squared gradient (second moment), in [0, 1).
    pub beta2: f32,
    /// Added to the square root of the corrected second moment, against division by 0.
    pub eps: f32,
    /// Decoupled weight decay: each decayed element first shrinks by
    /// `lr * weight_decay * param`.
    pub weight_decay: f32,
    /// Number of this step, from 1: the bias corrections are `1 - beta^step`.
    pub step: u64,
}

/// A compute backend. Every operation is enqueued in order; only `download` (and
/// `synchronize`) wait for the device.
///
/// Determinism contract: for the same inputs an operation gives bit-identical outputs on
/// every call (fixed work partitioning, fixed reduction order).
pub trait Backend: Send + Sync {
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
    /// How many f32 elements an im2col scratch buffer should hold at most: small on a
    /// CPU (cache), large on a GPU (fewer, bigger GEMMs).
    fn im2col_budget(&self) -> usize;
    /// The im2col layout this backend's GEMMs run fastest on; `im2col` and `col2im`
    /// support at least this one.
    fn col_layout(&self) -> ColLayout;

    /// `dst[..len] = value`.
    fn fill(&self, dst: Out<'_, Self>, len: usize, value: f32) -> BResult<()>;
    /// `y[..len] += x[..len]`.
    fn add(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()>;
    /// `y = a + b`, then ReLU if `relu` (the residual join).
    fn add_act(
        &self,
        a: In<'_, Self>,
        b: In<'_, Self>,
        y: Out<'_, Self>,
        len: usize,
        relu: bool,
    ) -> BResult<()>;

    /// See [`Gemm`].
    fn gemm(&self, spec: Gemm, a: In<'_, Self>, b: In<'_, Self>, c: Out<'_, Self>) -> BResult<()>;

    /// Writes the im2col matrix of images `n0..n0+nc` of `x`: `[c*kh*kw, nc*oh*ow]`, or
    /// its transpose, as `geom.col` says.
    fn im2col(
        &self,
        x: In<'_, Self>,
        geom: ConvGeom,
        n0: usize,
        nc: usize,
        col: Out<'_, Self>,
    ) -> BResult<()>;
    /// The adjoint of `im2col`: overwrites images `n0..n0+nc` of `dx` with the sums of
    /// their entries in `col`.
    fn col2im(
        &self,
        col: In<'_, Self>,
        geom: ConvGeom,
        n0: usize,
        nc: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()>;

    /// f32 elements of scratch that `conv_forward` and `conv_backward` need for a
    /// convolution of `geom` into `cout` channels, in calls of at most `geom.n` images.
    fn conv_scratch(&self, geom: ConvGeom, cout: usize) -> usize;
    /// A whole convolution, `y[cout, n, oh, ow] = w[cout, c, kh, kw] * x`, overwritten;
    /// `geom.col` must be this backend's `col_layout()`. How it is cut into im2col +
    /// GEMM steps is the backend's business.
    #[allow(clippy::too_many_arguments)]
    fn conv_forward(
        &self,
        x: In<'_, Self>,
        w: In<'_, Self>,
        geom: ConvGeom,
        cout: usize,
        y: Out<'_, Self>,
        scratch: Out<'_, Self>,
    ) -> BResult<()>;
    /// The convolution's backward from `dy`: overwrites `dw` and, if given, `dx`.
    /// `reuse` says the scratch still holds what the training `conv_forward` of this
    /// batch left in it, which a backend may use to skip work.
    #[allow(clippy::too_many_arguments)]
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
        reuse: bool,
    ) -> BResult<()>;

    /// In place on `y [rows, cols]`: `y = act(y + bias[row])`.
    fn bias_act_forward(
        &self,
        y: Out<'_, Self>,
        bias: Option<In<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()>;
    /// In place on `dy`: mask by `y > 0` if `relu`; then `dbias[row] = sum(dy[row])`.
    fn bias_act_backward(
        &self,
        y: In<'_, Self>,
        dy: Out<'_, Self>,
        dbias: Option<Out<'_, Self>>,
        rows: usize,
        cols: usize,
        relu: bool,
    ) -> BResult<()>;

    /// `y = max(x, 0)`.
    fn relu_forward(&self, x: In<'_, Self>, y: Out<'_, Self>, len: usize) -> BResult<()>;
    /// `dx = dy * (y > 0)`.
    fn relu_backward(
        &self,
        y: In<'_, Self>,
        dy: In<'_, Self>,
        dx: Out<'_, Self>,
        len: usize,
    ) -> BResult<()>;

    /// Max pooling; `argmax` records the winning index within each plane.
    fn maxpool_forward(
        &self,
        x: In<'_, Self>,
        geom: PoolGeom,
        y: Out<'_, Self>,
        argmax: Out<'_, Self, u32>,
    ) -> BResult<()>;
    /// Overwrites `dx` with `dy` routed to the recorded maxima.
    fn maxpool_backward(
        &self,
        dy: In<'_, Self>,
        argmax: In<'_, Self, u32>,
        geom: PoolGeom,
        dx: Out<'_, Self>,
    ) -> BResult<()>;

    /// `y[p] = mean(x[p, ..hw])` for each of `planes` planes.
    fn avgpool_forward(
        &self,
        x: In<'_, Self>,
        planes: usize,
        hw: usize,
        y: Out<'_, Self>,
    ) -> BResult<()>;
    /// `dx[p, i] = dy[p] / hw`.
    fn avgpool_backward(
        &self,
        dy: In<'_, Self>,
        planes: usize,
        hw: usize,
        dx: Out<'_, Self>,
    ) -> BResult<()>;

    /// Batch norm (then ReLU if `bn.relu`). `gamma_beta` is `[gamma(c), beta(c)]`,
    /// `running` is `[mean(c), var(c)]`. In training mode it normalises by the batch
    /// statistics, writes them to `saved` as `[mean(c), inv_std(c)]` and updates
    /// `running` (unbiased variance, as PyTorch); in eval mode it uses `running` and
    /// leaves `saved` alone.
    #[allow(clippy::too_many_arguments)]
    fn batchnorm_forward(
        &self,
        x: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        running: Out<'_, Self>,
        saved: Out<'_, Self>,
        y: Out<'_, Self>,
        bn: BnGeom,
        train: bool,
    ) -> BResult<()>;
    /// Backward of a training-mode batch norm: `dgamma_beta = [dgamma(c), dbeta(c)]`
    /// (overwritten), `dx` overwritten. `y` is read only when `bn.relu`.
    #[allow(clippy::too_many_arguments)]
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
    ) -> BResult<()>;

    /// f32 elements of scratch that `bn_relu_pool_*` need for `g` (0 if none). The
    /// caller keeps the scratch from a forward to the backward that follows it.
    fn bn_relu_pool_scratch(&self, g: BnPoolGeom) -> usize;
    /// Batch norm, ReLU and 2x2 max pooling in one op; the same outputs as
    /// `batchnorm_forward` (ReLU on) followed by `maxpool_forward`, without the full-size
    /// activation in between. `y` is the pooled output, `[c, n, h / 2, w / 2]`;
    /// `winners` (as many u32 as `y` has elements) records each window's winner in a
    /// format of the backend's own, for the backward. Statistics and `running` as in
    /// `batchnorm_forward`.
    #[allow(clippy::too_many_arguments)]
    fn bn_relu_pool_forward(
        &self,
        x: In<'_, Self>,
        gamma_beta: In<'_, Self>,
        running: Out<'_, Self>,
        saved: Out<'_, Self>,
        y: Out<'_, Self>,
        winners: Out<'_, Self, u32>,
        scratch: Out<'_, Self>,
        g: BnPoolGeom,
        train: bool,
    ) -> BResult<()>;
    /// Backward of a training-mode `bn_relu_pool_forward` of the same batch: from the
    /// pooled output's gradient `dy`, overwrites `dgamma_beta` and `dx`.
    #[allow(clippy::too_many_arguments)]
    fn bn_relu_pool_backward(
        &self,
        x: In<'_, Self>,
        dy: In<'_, Self>,
        winners: In<'_, Self, u32>,
        gamma_beta: In<'_, Self>,
        saved: In<'_, Self>,
        dgamma_beta: Out<'_, Self>,
        dx: Out<'_, Self>,
        scratch: Out<'_, Self>,
        g: BnPoolGeom,
    ) -> BResult<()>;

    /// u8 NHWC images `[n, h, w, c]` to normalised f32, `(x / 255 - mean[ch]) / std[ch]`.
    #[allow(clippy::too_many_arguments)]
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
    ) -> BResult<()>;

    /// Softmax + cross-entropy over logits `[classes, n]`. Overwrites `stats[0..2]` with
    /// (sum of losses, number of correct argmax predictions); if `dlogits` is given,
    /// writes the gradient of the *mean* loss. Nothing is copied to the host.
    fn softmax_xent(
        &self,
        logits: In<'_, Self>,
        labels: In<'_, Self, u32>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()>;

    /// Softmax + cross-entropy against soft targets `[classes, n]` (MixUp/CutMix
    /// weights, label smoothing): the loss of sample j is `sum_k t[k, j] * -log
    /// softmax(z)[k, j]`. Overwrites `stats[0..2]` with (sum of losses, number of
    /// samples whose logits' argmax is their targets' argmax); if `dlogits` is given,
    /// writes the gradient of the mean loss, `(softmax * sum_k t[k, j] - t) / n`.
    #[allow(clippy::too_many_arguments)]
    fn softmax_xent_soft(
        &self,
        logits: In<'_, Self>,
        targets: In<'_, Self>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()>;

    /// Sigmoid + binary cross-entropy against k-hot targets `[classes, n]` (multi-label
    /// tags, 0 or 1; any value in [0, 1] works): every logit is its own yes/no
    /// question. Overwrites `stats[0..2]` with (sum over samples of each sample's
    /// loss averaged over its classes, number of samples whose every prediction
    /// `z > 0` matches its target `t > 0.5`), so that `stats[0] / n` is PyTorch's
    /// `BCEWithLogitsLoss()` (mean over all `n * classes` terms). If `dlogits` is
    /// given, writes the gradient of that mean, `(sigmoid(z) - t) / (n * classes)`.
    #[allow(clippy::too_many_arguments)]
    fn sigmoid_bce(
        &self,
        logits: In<'_, Self>,
        targets: In<'_, Self>,
        classes: usize,
        n: usize,
        dlogits: Option<Out<'_, Self>>,
        stats: Out<'_, Self>,
    ) -> BResult<()>;

    /// One fused SGD pass over a flat buffer; elements `0..decay_len` get weight decay.
    #[allow(clippy::too_many_arguments)]
    fn sgd_step(
        &self,
        params: Out<'_, Self>,
        grads: In<'_, Self>,
        momentum: Out<'_, Self>,
        len: usize,
        decay_len: usize,
        h: SgdStep,
    ) -> BResult<()>;
    /// One fused AdamW pass over a flat buffer; elements `0..decay_len` get weight decay.
    #[allow(clippy::too_many_arguments)]
    fn adamw_step(
        &self,
        params: Out<'_, Self>,
        grads: In<'_, Self>,
        m: Out<'_, Self>,
        v: Out<'_, Self>,
        len: usize,
        decay_len: usize,
        h: AdamWStep,
    ) -> BResult<()>;
}
