//! The losses, over logits `[classes, n]`: softmax cross-entropy against hard labels,
//! and the row losses against a target row per sample (softmax cross-entropy against
//! soft targets, sigmoid + binary cross-entropy). Each writes its two statistics to the
//! device and, if asked, the gradient of the mean loss; nothing is copied to the host.

use super::{BResult, Buffers, In, Out};

/// The losses.
pub trait LossOps: Buffers {
    /// Softmax + cross-entropy against hard labels. Overwrites `stats[0..2]` with (sum
    /// of losses, number of correct argmax predictions); if `dlogits` is given, writes
    /// the gradient of the *mean* loss.
    fn softmax_xent(&self, op: SoftmaxXentArgs<'_, Self>) -> BResult<()>;
    /// A loss against targets `[classes, n]`, as [`RowLoss`] says. Overwrites
    /// `stats[0..2]` with (sum of the samples' losses, samples the logits get right);
    /// if `dlogits` is given, writes the gradient of `stats[0] / n`.
    fn row_loss(&self, op: RowLossArgs<'_, Self>) -> BResult<()>;
}

/// The logits and outputs every loss shares.
pub struct LossIo<'a, B: Buffers + ?Sized> {
    /// The logits, `[classes, n]`.
    pub logits: In<'a, B>,
    /// Classes (rows of `logits`).
    pub classes: usize,
    /// Samples (columns of `logits`).
    pub n: usize,
    /// The gradient of the mean loss, `[classes, n]` (overwritten), if wanted.
    pub dlogits: Option<Out<'a, B>>,
    /// `[loss sum, samples right]` (overwritten).
    pub stats: Out<'a, B>,
}

/// Arguments of [`LossOps::softmax_xent`].
pub struct SoftmaxXentArgs<'a, B: Buffers + ?Sized> {
    /// Logits and outputs.
    pub io: LossIo<'a, B>,
    /// One class per sample, each below `classes` (else [`BackendError::Label`]).
    ///
    /// [`BackendError::Label`]: super::BackendError::Label
    pub labels: In<'a, B, u32>,
}

/// Which loss [`LossOps::row_loss`] computes, for logits `z` and targets `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowLoss {
    /// Softmax + cross-entropy against soft targets (MixUp/CutMix weights, label
    /// smoothing): the loss of sample j is `sum_k t[k, j] * -log softmax(z)[k, j]`; a
    /// sample is right when its logits' argmax is its targets' argmax. The gradient is
    /// `(softmax * sum_k t[k, j] - t) / n`.
    SoftmaxXent,
    /// Sigmoid + binary cross-entropy against k-hot targets (multi-label tags, 0 or 1;
    /// any value in [0, 1] works): every logit is its own yes/no question. A sample's
    /// loss is averaged over its classes, so that `stats[0] / n` is PyTorch's
    /// `BCEWithLogitsLoss()` (mean over all `n * classes` terms); a sample is right
    /// when its every prediction `z > 0` matches its target `t > 0.5`. The gradient is
    /// `(sigmoid(z) - t) / (n * classes)`.
    SigmoidBce,
}

/// Arguments of [`LossOps::row_loss`].
pub struct RowLossArgs<'a, B: Buffers + ?Sized> {
    /// The loss.
    pub loss: RowLoss,
    /// Logits and outputs.
    pub io: LossIo<'a, B>,
    /// The targets, `[classes, n]`.
    pub targets: In<'a, B>,
}

impl RowLoss {
    /// The loss's name in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RowLoss::SoftmaxXent => "softmax_xent_soft",
            RowLoss::SigmoidBce => "sigmoid_bce",
        }
    }
}
