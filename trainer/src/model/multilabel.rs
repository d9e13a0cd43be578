//! Multi-label training: the model's steps against k-hot tags (each sample may have
//! any number of its classes) with sigmoid + binary cross-entropy, beside the
//! classification steps of `mod.rs`, which stay as they were.

use std::fmt;
use std::str::FromStr;

use super::{Model, StepLoss};
use crate::backend::{Backend, Out};
use crate::error::{config, ModelError, Result};
use crate::tensor::Tensor;

/// What a model learns from each sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Target {
    /// One class (softmax cross-entropy, accuracy of the argmax).
    #[default]
    Class,
    /// A set of classes, k-hot (sigmoid + binary cross-entropy, exact-match ratio at
    /// threshold 0.5).
    Labels,
}

impl Target {
    /// The name `FromStr`, `Display` and checkpoints use: `class` or `labels`.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Class => "class",
            Target::Labels => "labels",
        }
    }

    /// The name of the accuracy [`super::Stats`] reports for this target.
    pub fn metric(self) -> &'static str {
        match self {
            Target::Class => "accuracy",
            Target::Labels => "exact-match",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Target {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "class" => Ok(Target::Class),
            "labels" => Ok(Target::Labels),
            _ => Err(config(s, "unknown target (expected class or labels)")),
        }
    }
}

impl<B: Backend + Clone + 'static> Model<B> {
    /// One training forward and backward on a host batch with multi-label tags: u8
    /// NHWC `images` and `k_hot`, u8 `(n, classes)` row-major (non-zero: the sample
    /// has that class), as the loader's `BatchFields::labels_k_hot` gives them. The
    /// model must be built with [`Target::Labels`].
    pub fn forward_backward_labels(&mut self, images: &[u8], k_hot: &[u8], n: usize) -> Result<()> {
        self.upload_images(images, n)?;
        self.stage_k_hot(k_hot, n)?;
        self.run(None, n, true, None, StepLoss::KHot)
    }

    /// As `forward_backward_labels`, for images (and the loader's labels buffer, not
    /// read) already on the device; the tags come from the host.
    pub fn forward_backward_on_labels(
        &mut self,
        images: &B::Buf<u8>,
        labels: &B::Buf<u32>,
        k_hot: &[u8],
        n: usize,
    ) -> Result<()> {
        self.check_batch_for(n, Target::Labels)?;
        self.stage_k_hot(k_hot, n)?;
        self.run(Some((images, labels)), n, true, None, StepLoss::KHot)
    }

    /// An eval-mode forward against tags; loss and exact-match accumulate for
    /// `take_eval_stats`.
    pub fn evaluate_labels(&mut self, images: &[u8], k_hot: &[u8], n: usize) -> Result<()> {
        self.upload_images(images, n)?;
        self.stage_k_hot(k_hot, n)?;
        self.run(None, n, false, None, StepLoss::KHot)
    }

    /// As `evaluate_labels`, for images already on the device.
    pub fn evaluate_on_labels(
        &mut self,
        images: &B::Buf<u8>,
        labels: &B::Buf<u32>,
        k_hot: &[u8],
        n: usize,
    ) -> Result<()> {
        self.check_batch_for(n, Target::Labels)?;
        self.stage_k_hot(k_hot, n)?;
        self.run(Some((images, labels)), n, false, None, StepLoss::KHot)
    }

    fn upload_images(&mut self, images: &[u8], n: usize) -> Result<()> {
        self.check_batch_for(n, Target::Labels)?;
        let (h, w, c) = self.cfg.input;
        if images.len() != n * h * w * c {
            return Err(ModelError::InputLen {
                what: "images (n * h * w * c bytes)",
                expected: n * h * w * c,
                got: images.len(),
            });
        }
        self.backend.upload(images, Out::new(&mut self.images))?;
        Ok(())
    }

    /// Transposes the `(n, classes)` tags into the `[classes, n]` float targets the
    /// loss reads, and uploads them into the model's target buffer.
    fn stage_k_hot(&mut self, k_hot: &[u8], n: usize) -> Result<()> {
        let k = self.cfg.classes;
        if k_hot.len() != n * k {
            return Err(ModelError::InputLen {
                what: "k-hot labels (n * classes)",
                expected: n * k,
                got: k_hot.len(),
            });
        }
        let t = &mut self.host_targets;
        t.clear();
        t.resize(k * n, 0.0);
        for (j, row) in k_hot.chunks_exact(k).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                t[c * n + j] = f32::from(u8::from(v != 0));
            }
        }
        if self.targets.is_none() {
            self.targets = Some(Tensor::zeros(&self.backend, &[k * self.cfg.max_batch])?);
        }
        if let Some(dev) = self.targets.as_mut() {
            self.backend.upload(&self.host_targets, dev.view_mut())?;
        }
        Ok(())
    }
}
