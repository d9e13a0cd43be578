//! Normalisation: batch norm (training and eval forward, backward, with a fused
//! ReLU) and `datanorm`, u8 images to normalised f32 activations.

use super::{BResult, BackendError, Buffers, In, Out};

/// Batch norm and data normalisation.
pub trait NormOps: Buffers {
    /// Batch norm (then ReLU if `bn.relu`). `gamma_beta` is `[gamma(c), beta(c)]`,
    /// `running` is `[mean(c), var(c)]`. In training mode it normalises by the batch
    /// statistics, writes them to `saved` as `[mean(c), inv_std(c)]` and updates
    /// `running` (unbiased variance, as PyTorch); in eval mode it uses `running` and
    /// leaves `saved` alone.
    fn batchnorm_forward(&self, op: BatchNormForwardArgs<'_, Self>) -> BResult<()>;
    /// Backward of a training-mode batch norm: `dgamma_beta = [dgamma(c), dbeta(c)]`
    /// (overwritten), `dx` overwritten. `y` is read only when `bn.relu`.
    fn batchnorm_backward(&self, op: BatchNormBackwardArgs<'_, Self>) -> BResult<()>;
    /// u8 NHWC images `[n, h, w, c]` to normalised f32, `(x / 255 - mean[ch]) / std[ch]`.
    fn datanorm(&self, op: DataNormArgs<'_, Self>) -> BResult<()>;
}

/// What a batch norm's forward reads and updates besides its output, in the plain and
/// the fused op alike.
pub struct BnState<'a, B: Buffers + ?Sized> {
    /// The input, `[c, n, hw]`.
    pub x: In<'a, B>,
    /// `[gamma(c), beta(c)]`.
    pub gamma_beta: In<'a, B>,
    /// `[mean(c), var(c)]`, read in eval mode, updated in training mode.
    pub running: Out<'a, B>,
    /// `[mean(c), inv_std(c)]` of the batch, written in training mode.
    pub saved: Out<'a, B>,
    /// Training mode (batch statistics) rather than eval mode (running ones).
    pub train: bool,
}

/// What a batch norm's backward reads and writes besides the gradient that reaches it,
/// in the plain and the fused op alike.
pub struct BnGrads<'a, B: Buffers + ?Sized> {
    /// The forward's input.
    pub x: In<'a, B>,
    /// `[gamma(c), beta(c)]`.
    pub gamma_beta: In<'a, B>,
    /// The statistics the forward saved.
    pub saved: In<'a, B>,
    /// `[dgamma(c), dbeta(c)]` (overwritten).
    pub dgamma_beta: Out<'a, B>,
    /// The gradient of `x` (overwritten).
    pub dx: Out<'a, B>,
}

/// Arguments of [`NormOps::batchnorm_forward`].
pub struct BatchNormForwardArgs<'a, B: Buffers + ?Sized> {
    /// The input, parameters and statistics.
    pub state: BnState<'a, B>,
    /// The output, `[c, n, hw]` (overwritten).
    pub y: Out<'a, B>,
    /// The shape and settings.
    pub bn: BnGeom,
}

/// Arguments of [`NormOps::batchnorm_backward`].
pub struct BatchNormBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The input, parameters, statistics and the gradients written.
    pub grads: BnGrads<'a, B>,
    /// The forward's output (read only with the fused ReLU).
    pub y: In<'a, B>,
    /// The gradient of `y`.
    pub dy: In<'a, B>,
    /// The shape and settings.
    pub bn: BnGeom,
}

/// Arguments of [`NormOps::datanorm`].
pub struct DataNormArgs<'a, B: Buffers + ?Sized> {
    /// The images, u8 `[n, h, w, c]`.
    pub x: In<'a, B, u8>,
    /// Images.
    pub n: usize,
    /// Image height, in pixels.
    pub h: usize,
    /// Image width, in pixels.
    pub w: usize,
    /// One mean per channel (of `x / 255`).
    pub mean: &'a [f32],
    /// One standard deviation per channel.
    pub std: &'a [f32],
    /// How the output is laid out.
    pub layout: DataLayout,
    /// The normalised f32 output (overwritten).
    pub y: Out<'a, B>,
}

impl<B: Buffers + ?Sized> DataNormArgs<'_, B> {
    /// The channel count, or an error unless there are as many stds as means (and one
    /// at least).
    pub(crate) fn channels(&self) -> BResult<usize> {
        let c = self.mean.len();
        if self.std.len() != c || c == 0 {
            return Err(BackendError::Op {
                op: "datanorm",
                reason: format!("{} means and {} stds", c, self.std.len()),
            });
        }
        Ok(c)
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

/// How `datanorm` lays out its f32 output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataLayout {
    /// `[c, n, h, w]`: for convolutional models.
    ChannelMajor,
    /// `[h * w * c, n]`, feature index `(y * w + x) * c + ch`: for fully connected models.
    FeatureMajor,
}
