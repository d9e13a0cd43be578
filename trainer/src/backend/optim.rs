//! Optimizer steps: one fused SGD or AdamW pass over a flat parameter buffer, its
//! gradient and the optimizer's state.

use super::{BResult, Buffers, In, Out};

/// The optimizers' update passes.
pub trait OptimOps: Buffers {
    /// One fused SGD pass over a flat buffer; elements `0..decay_len` get weight decay.
    fn sgd_step(&self, op: SgdStepArgs<'_, Self>) -> BResult<()>;
    /// One fused AdamW pass over a flat buffer; elements `0..decay_len` get weight decay.
    fn adamw_step(&self, op: AdamWStepArgs<'_, Self>) -> BResult<()>;
}

/// The flat parameter buffer every optimizer step updates, and its gradient.
pub struct FlatParams<'a, B: Buffers + ?Sized> {
    /// The parameters, updated in place.
    pub params: Out<'a, B>,
    /// Their gradient.
    pub grads: In<'a, B>,
    /// Elements updated.
    pub len: usize,
    /// The first `decay_len` elements get weight decay.
    pub decay_len: usize,
}

/// Arguments of [`OptimOps::sgd_step`].
pub struct SgdStepArgs<'a, B: Buffers + ?Sized> {
    /// The parameters and their gradient.
    pub flat: FlatParams<'a, B>,
    /// The momentum buffer, updated in place.
    pub momentum: Out<'a, B>,
    /// The step's hyper-parameters.
    pub h: SgdStep,
}

/// Arguments of [`OptimOps::adamw_step`].
pub struct AdamWStepArgs<'a, B: Buffers + ?Sized> {
    /// The parameters and their gradient.
    pub flat: FlatParams<'a, B>,
    /// The first moment, updated in place.
    pub m: Out<'a, B>,
    /// The second moment, updated in place.
    pub v: Out<'a, B>,
    /// The step's hyper-parameters.
    pub h: AdamWStep,
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
