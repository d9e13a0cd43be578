//! A model: its layers, its flat parameter / gradient / state buffers, and every
//! activation buffer, all planned once for a maximum batch and reused by every step.
//!
//! A step is `forward_backward` (datanorm -> layers -> fused softmax + cross-entropy ->
//! layers in reverse) followed by the optimizer's fused update. The loss and accuracy
//! stay on the device: each step adds its (loss sum, correct count) into an
//! accumulator there, and the host reads it only when asked (`take_train_stats`), so a
//! loop that logs every N steps synchronises every N steps.

pub mod convnet;
pub mod mlp;
pub mod multilabel;
pub mod resnet;

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use crate::backend::{Backend, Buffers, DataLayout, FillArgs, In, MapArgs, Out};
use crate::error::{config, ModelError, Result};
use crate::label_metrics::{LabelMetrics, LabelScores};
use crate::layer::{
    Builder, DataNorm, Layer, ModelBuffers, Shape, SigmoidBce, SoftmaxCrossEntropy,
};
use crate::param::{ParamInfo, Registry};
use crate::tensor::Tensor;
pub use multilabel::Target;

/// The models this crate builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// Two hidden layers (256, 128) with ReLU: MNIST-size inputs.
    Mlp,
    /// Three conv3x3-BN-ReLU-maxpool blocks (32, 64, 128 channels), global average
    /// pool, linear: 32-64 px images.
    Convnet,
    /// A small ResNet: stem conv (32) + three basic blocks (32, 64, 128; strides 1, 2,
    /// 2), global average pool, linear: 32-64 px images.
    Resnet,
}

impl ModelKind {
    /// Every kind.
    pub const ALL: [ModelKind; 3] = [ModelKind::Mlp, ModelKind::Convnet, ModelKind::Resnet];

    /// The name `FromStr`, `Display` and checkpoints use: `mlp`, `convnet` or `resnet`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Convnet => "convnet",
            ModelKind::Resnet => "resnet",
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ModelKind {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| config(s, "unknown model kind (expected mlp, convnet or resnet)"))
    }
}

/// Everything that fixes a model's shape and initial weights.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The architecture.
    pub kind: ModelKind,
    /// Input images as (height, width, channels), u8 NHWC.
    pub input: (usize, usize, usize),
    /// Classes the model tells apart: logits per sample (at least 2).
    pub classes: usize,
    /// Largest batch a call may pass; buffers are planned for it.
    pub max_batch: usize,
    /// Seeds weight initialisation.
    pub seed: u64,
    /// Per-channel normalisation, in units of the [0, 1] pixel range.
    pub mean: Vec<f32>,
    /// Per-channel standard deviation, in the same units (positive).
    pub std: Vec<f32>,
    /// Label smoothing of the training loss: targets become `(1 - e) * target + e /
    /// classes` (0 keeps the hard-label loss).
    pub label_smoothing: f32,
    /// What the model learns: one class per sample (softmax cross-entropy, the
    /// default) or a set of tags (sigmoid + binary cross-entropy).
    pub target: Target,
}

impl ModelConfig {
    /// Defaults: seed 0, mean 0.5 and std 0.25 on every channel.
    pub fn new(
        kind: ModelKind,
        input: (usize, usize, usize),
        classes: usize,
        max_batch: usize,
    ) -> Self {
        Self {
            kind,
            input,
            classes,
            max_batch,
            seed: 0,
            mean: vec![0.5; input.2],
            std: vec![0.25; input.2],
            label_smoothing: 0.0,
            target: Target::Class,
        }
    }

    /// The same config learning `target`.
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// The same config with label smoothing `e`, in [0, 1).
    pub fn label_smoothing(mut self, e: f32) -> Self {
        self.label_smoothing = e;
        self
    }

    /// The same config with initial weights drawn from `seed`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same config normalising by `mean` and `std`, one value per channel.
    pub fn normalize(mut self, mean: &[f32], std: &[f32]) -> Self {
        self.mean = mean.to_vec();
        self.std = std.to_vec();
        self
    }
}

/// Loss and accuracy over some samples, read back from the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Mean cross-entropy per sample (for [`Target::Labels`], the binary cross-entropy
    /// averaged over every sample and class, as PyTorch's `BCEWithLogitsLoss()`).
    pub loss: f32,
    /// Fraction of samples whose argmax matched the label (for [`Target::Labels`]:
    /// whose every tag was predicted right at threshold 0.5, the exact-match ratio).
    pub accuracy: f32,
    /// Samples the sums cover.
    pub samples: u64,
    /// For an evaluation of a [`Target::Labels`] model: mean average precision and F1
    /// over the same samples (`None` for classification and for training steps).
    pub labels: Option<LabelMetrics>,
}

impl Stats {
    fn from_sums(sums: [f32; 2], samples: u64) -> Self {
        let d = samples.max(1) as f32;
        Self {
            loss: sums[0] / d,
            accuracy: sums[1] / d,
            samples,
            labels: None,
        }
    }
}

/// Which loss a step runs against which targets: the hard labels, the staged soft
/// targets (softmax cross-entropy either way), or the staged k-hot tags (sigmoid BCE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepLoss {
    Hard,
    Soft,
    KHot,
}

impl StepLoss {
    fn hard_or_soft(soft: bool) -> Self {
        if soft {
            StepLoss::Soft
        } else {
            StepLoss::Hard
        }
    }
}

/// A batch already on the device: u8 NHWC images and labels.
type DeviceBatch<'a, B> = (&'a <B as Buffers>::Buf<u8>, &'a <B as Buffers>::Buf<u32>);

/// A network over backend `B`.
pub struct Model<B: Backend + 'static> {
    backend: B,
    cfg: ModelConfig,
    pub(crate) reg: Registry,
    pub(crate) state_reg: Registry,
    pub(crate) params: Tensor<B>,
    pub(crate) grads: Tensor<B>,
    pub(crate) state: Tensor<B>,
    datanorm: DataNorm,
    layers: Vec<Box<dyn Layer<B>>>,
    /// `acts[0]` is the datanorm output, `acts[i + 1]` the output of `layers[i]`.
    acts: Vec<Tensor<B>>,
    /// Gradients of `acts` (index 0 unused: nothing needs the input's gradient).
    dacts: Vec<Tensor<B>>,
    loss: SoftmaxCrossEntropy,
    bce: SigmoidBce,
    images: B::Buf<u8>,
    labels: B::Buf<u32>,
    /// Soft targets `[classes, n]` for a mixed batch or label smoothing (allocated at
    /// the first such step), and their host copy.
    targets: Option<Tensor<B>>,
    host_targets: Vec<f32>,
    /// [loss sum, correct] of the last training step.
    step_stats: Tensor<B>,
    eval_step: Tensor<B>,
    /// Running sums since the last `take_*_stats`.
    train_acc: Tensor<B>,
    eval_acc: Tensor<B>,
    train_samples: u64,
    eval_samples: u64,
    /// A multi-label model's evaluation logits and tags since the last take: mean
    /// average precision ranks all of them at once. Empty for classification.
    eval_scores: LabelScores,
    host_logits: Vec<f32>,
    last_n: usize,
}

/// Zeroes a `[loss sum, correct]` pair of running sums.
fn zero_sums<B: Backend>(b: &B, sums: &mut Tensor<B>) -> crate::backend::BResult<()> {
    b.fill(FillArgs {
        dst: sums.view_mut(),
        len: 2,
        value: 0.0,
    })
}

impl<B: Backend + Clone + 'static> Model<B> {
    /// Builds the model, plans every buffer for `cfg.max_batch`, and initialises the
    /// weights from `cfg.seed`.
    pub fn new(backend: &B, cfg: ModelConfig) -> Result<Self> {
        let (h, w, c) = cfg.input;
        let what = cfg.kind.as_str();
        if h == 0 || w == 0 || c == 0 || cfg.classes < 2 || cfg.max_batch == 0 {
            return Err(config(
                what,
                format!(
                    "input {:?}, {} classes, max batch {}: all must be positive (classes at least 2)",
                    cfg.input, cfg.classes, cfg.max_batch
                ),
            ));
        }
        if cfg.classes > u32::MAX as usize {
            return Err(config(what, "too many classes"));
        }
        if !(0.0..1.0).contains(&cfg.label_smoothing) {
            return Err(config(
                what,
                format!(
                    "label smoothing must be within 0..1 (1 excluded), got {}",
                    cfg.label_smoothing
                ),
            ));
        }
        if cfg.label_smoothing != 0.0 && cfg.target == Target::Labels {
            // The k-hot BCE loss has no class distribution to smooth.
            return Err(config(
                what,
                "label smoothing applies to class targets, not multi-label tags",
            ));
        }
        let layout = match cfg.kind {
            ModelKind::Mlp => DataLayout::FeatureMajor,
            ModelKind::Convnet | ModelKind::Resnet => DataLayout::ChannelMajor,
        };
        let datanorm = DataNorm::new(cfg.input, &cfg.mean, &cfg.std, layout)?;
        let mut bld = Builder::new(backend, cfg.max_batch);
        let input = datanorm.out_shape();
        let layers = match cfg.kind {
            ModelKind::Mlp => mlp::build(&mut bld, input, cfg.classes)?,
            ModelKind::Convnet => convnet::build(&mut bld, input, cfg.classes)?,
            ModelKind::Resnet => resnet::build(&mut bld, input, cfg.classes)?,
        };
        bld.params.finish();
        bld.state.finish();
        let Builder {
            params: reg,
            state: state_reg,
            ..
        } = bld;
        let last = layers.last().map(|l| l.out_shape()).unwrap_or(input);
        if last != Shape::vector(cfg.classes) {
            return Err(config(
                what,
                format!("head produces {last:?}, not {} logits", cfg.classes),
            ));
        }

        let b = backend;
        let nmax = cfg.max_batch;
        let act = |s: Shape| Tensor::zeros(b, &[s.c, nmax, s.h, s.w]);
        let mut acts = vec![act(input)?];
        let mut dacts = vec![Tensor::zeros(b, &[0])?];
        for l in &layers {
            acts.push(act(l.out_shape())?);
            dacts.push(act(l.out_shape())?);
        }
        let params = Tensor::from_slice(b, &[reg.total()], &reg.init_values(cfg.seed))?;
        let grads = Tensor::zeros(b, &[reg.total()])?;
        let state = Tensor::from_slice(b, &[state_reg.total()], &state_reg.init_values(cfg.seed))?;
        Ok(Self {
            backend: backend.clone(),
            loss: SoftmaxCrossEntropy::new(cfg.classes),
            bce: SigmoidBce::new(cfg.classes),
            images: b.alloc(nmax * h * w * c)?,
            labels: b.alloc(nmax)?,
            targets: None,
            host_targets: Vec::new(),
            step_stats: Tensor::zeros(b, &[2])?,
            eval_step: Tensor::zeros(b, &[2])?,
            train_acc: Tensor::zeros(b, &[2])?,
            eval_acc: Tensor::zeros(b, &[2])?,
            train_samples: 0,
            eval_samples: 0,
            eval_scores: LabelScores::new(cfg.classes),
            host_logits: Vec::new(),
            last_n: 0,
            cfg,
            reg,
            state_reg,
            params,
            grads,
            state,
            datanorm,
            layers,
            acts,
            dacts,
        })
    }

    /// The config the model was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The architecture.
    pub fn kind(&self) -> ModelKind {
        self.cfg.kind
    }

    /// The backend the model runs on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Number of trained parameters.
    pub fn param_count(&self) -> usize {
        self.reg.total()
    }

    /// Name, shape and offset of every trained parameter.
    pub fn params_info(&self) -> &[ParamInfo] {
        self.reg.entries()
    }

    /// Name, shape and offset of every state entry (batch norm running statistics).
    pub fn state_info(&self) -> &[ParamInfo] {
        self.state_reg.entries()
    }

    /// The flat parameter buffer copied to the host (waits for the device).
    pub fn params_to_host(&self) -> Result<Vec<f32>> {
        Ok(self.params.to_vec(&self.backend)?)
    }

    /// The flat state buffer (batch-norm running statistics), copied to the host.
    pub fn state_to_host(&self) -> Result<Vec<f32>> {
        Ok(self.state.to_vec(&self.backend)?)
    }

    /// The flat gradient buffer of the last step, copied to the host.
    pub fn grads_to_host(&self) -> Result<Vec<f32>> {
        Ok(self.grads.to_vec(&self.backend)?)
    }

    /// One line per layer: name and per-sample output shape; then the parameter count.
    pub fn summary(&self) -> String {
        let mut s = format!("{} on {}\n", self.cfg.kind, self.backend.name());
        let d = self.datanorm.out_shape();
        s += &format!("  datanorm  -> {}x{}x{}\n", d.c, d.h, d.w);
        for l in &self.layers {
            let o = l.out_shape();
            s += &format!("  {:<9} -> {}x{}x{}\n", l.name(), o.c, o.h, o.w);
        }
        s += &format!("  {} parameters", self.param_count());
        s
    }

    fn check_batch(&self, n: usize) -> Result<()> {
        self.check_batch_for(n, Target::Class)
    }

    /// `check_batch` for a call that trains or evaluates on `target`: a model built
    /// for the other kind refuses it rather than run the wrong loss.
    fn check_batch_for(&self, n: usize, target: Target) -> Result<()> {
        if self.cfg.target != target {
            return Err(ModelError::WrongTarget {
                model: self.cfg.target.as_str(),
                given: target.as_str(),
            });
        }
        if n == 0 {
            return Err(ModelError::EmptyBatch);
        }
        if n > self.cfg.max_batch {
            return Err(ModelError::BatchTooLarge {
                n,
                max: self.cfg.max_batch,
            });
        }
        Ok(())
    }

    /// Checks a host batch and copies it into the model's own input buffers.
    fn upload_batch(&mut self, images: &[u8], labels: &[u32], n: usize) -> Result<()> {
        self.check_batch(n)?;
        let (h, w, c) = self.cfg.input;
        if images.len() != n * h * w * c {
            return Err(ModelError::InputLen {
                what: "images (n * h * w * c bytes)",
                expected: n * h * w * c,
                got: images.len(),
            });
        }
        if labels.len() != n {
            return Err(ModelError::InputLen {
                what: "labels",
                expected: n,
                got: labels.len(),
            });
        }
        if let Some((index, &label)) = labels
            .iter()
            .enumerate()
            .find(|(_, &l)| l as usize >= self.cfg.classes)
        {
            return Err(ModelError::Label {
                index,
                label,
                classes: self.cfg.classes,
            });
        }
        self.backend.upload(images, Out::new(&mut self.images))?;
        self.backend.upload(labels, Out::new(&mut self.labels))?;
        Ok(())
    }

    /// One training forward and backward on a host batch: u8 NHWC `images`
    /// (`n * h * w * c` bytes) and `labels`. Leaves the gradients in the model's gradient buffer and
    /// the loss on the device.
    pub fn forward_backward(&mut self, images: &[u8], labels: &[u32], n: usize) -> Result<()> {
        self.forward_backward_mixed(images, labels, None, n)
    }

    /// `forward_backward` with a mixed batch's soft labels (float32 `(n, classes)`
    /// row-major, e.g. MixUp/CutMix from the loader), or `None`; label smoothing applies
    /// to either. Without both, this is the hard-label step.
    pub fn forward_backward_mixed(
        &mut self,
        images: &[u8],
        labels: &[u32],
        soft: Option<&[f32]>,
        n: usize,
    ) -> Result<()> {
        self.upload_batch(images, labels, n)?;
        let soft = self.stage_targets(labels, soft, n)?;
        self.run(None, n, true, None, StepLoss::hard_or_soft(soft))
    }

    /// `forward_backward_on` with the batch's host labels and soft labels, for the
    /// soft-target loss (the device labels serve the hard one).
    pub fn forward_backward_on_mixed(
        &mut self,
        images: &B::Buf<u8>,
        labels: &B::Buf<u32>,
        host_labels: &[u32],
        soft: Option<&[f32]>,
        n: usize,
    ) -> Result<()> {
        self.check_batch(n)?;
        let soft = self.stage_targets(host_labels, soft, n)?;
        self.run(
            Some((images, labels)),
            n,
            true,
            None,
            StepLoss::hard_or_soft(soft),
        )
    }

    /// Builds and uploads the soft targets when the step needs them (soft labels given
    /// or label smoothing on); `false` means the hard-label loss.
    fn stage_targets(&mut self, labels: &[u32], soft: Option<&[f32]>, n: usize) -> Result<bool> {
        let e = self.cfg.label_smoothing;
        if soft.is_none() && e == 0.0 {
            return Ok(false);
        }
        let k = self.cfg.classes;
        if labels.len() != n {
            return Err(ModelError::InputLen {
                what: "labels",
                expected: n,
                got: labels.len(),
            });
        }
        if let Some(s) = soft {
            if s.len() != n * k {
                return Err(ModelError::InputLen {
                    what: "soft labels (n * classes)",
                    expected: n * k,
                    got: s.len(),
                });
            }
        }
        let t = &mut self.host_targets;
        t.clear();
        t.resize(k * n, e / k as f32);
        for j in 0..n {
            match soft {
                Some(s) => {
                    for (c, &w) in s[j * k..(j + 1) * k].iter().enumerate() {
                        t[c * n + j] += (1.0 - e) * w;
                    }
                }
                None => {
                    let l = labels[j] as usize;
                    if l >= k {
                        return Err(ModelError::Label {
                            index: j,
                            label: labels[j],
                            classes: k,
                        });
                    }
                    t[l * n + j] += 1.0 - e;
                }
            }
        }
        if self.targets.is_none() {
            self.targets = Some(Tensor::zeros(&self.backend, &[k * self.cfg.max_batch])?);
        }
        if let Some(dev) = self.targets.as_mut() {
            self.backend.upload(&self.host_targets, dev.view_mut())?;
        }
        Ok(true)
    }

    /// As `forward_backward`, for a batch already on the device (e.g. uploaded by the
    /// loader). Labels out of range are reported by the backend. A model with label
    /// smoothing needs the host labels to build its targets: it refuses this call and
    /// takes `forward_backward_on_mixed`, rather than train on unsmoothed labels.
    pub fn forward_backward_on(
        &mut self,
        images: &B::Buf<u8>,
        labels: &B::Buf<u32>,
        n: usize,
    ) -> Result<()> {
        self.check_batch(n)?;
        if self.cfg.label_smoothing != 0.0 {
            return Err(config(
                "training step",
                "label smoothing builds its targets from the host labels: call \
                 forward_backward_on_mixed with them",
            ));
        }
        self.run(Some((images, labels)), n, true, None, StepLoss::Hard)
    }

    /// An eval-mode forward (running batch-norm statistics, no gradients); the loss and
    /// accuracy accumulate for `take_eval_stats`.
    pub fn evaluate(&mut self, images: &[u8], labels: &[u32], n: usize) -> Result<()> {
        self.upload_batch(images, labels, n)?;
        self.run(None, n, false, None, StepLoss::Hard)
    }

    /// As `evaluate`, for a batch already on the device.
    pub fn evaluate_on(
        &mut self,
        images: &B::Buf<u8>,
        labels: &B::Buf<u32>,
        n: usize,
    ) -> Result<()> {
        self.check_batch(n)?;
        self.run(Some((images, labels)), n, false, None, StepLoss::Hard)
    }

    /// A training step like `forward_backward` that also times each layer's forward and
    /// backward (synchronising after each, so it is slower than a plain step): returns
    /// (layer name, forward seconds, backward seconds), with datanorm first and the loss
    /// last.
    pub fn profile_step(
        &mut self,
        images: &[u8],
        labels: &[u32],
        n: usize,
    ) -> Result<Vec<(String, f64, f64)>> {
        self.upload_batch(images, labels, n)?;
        let soft = self.stage_targets(labels, None, n)?;
        let mut prof = Vec::new();
        self.run(None, n, true, Some(&mut prof), StepLoss::hard_or_soft(soft))?;
        Ok(prof)
    }

    fn run(
        &mut self,
        ext: Option<DeviceBatch<'_, B>>,
        n: usize,
        train: bool,
        prof: Option<&mut Vec<(String, f64, f64)>>,
        step_loss: StepLoss,
    ) -> Result<()> {
        let Self {
            backend: b,
            reg,
            state_reg,
            params,
            grads,
            state,
            datanorm,
            layers,
            acts,
            dacts,
            loss,
            bce,
            images,
            labels,
            targets,
            step_stats,
            eval_step,
            train_acc,
            eval_acc,
            host_targets,
            eval_scores,
            host_logits,
            ..
        } = self;
        let (img, lab) = match ext {
            Some((i, l)) => (In::new(i), In::new(l)),
            None => (In::new(&*images), In::new(&*labels)),
        };
        let mut bufs = ModelBuffers {
            backend: &*b,
            reg: &*reg,
            params: params.buf(),
            grads: grads.buf_mut(),
            state_reg: &*state_reg,
            state: state.buf_mut(),
        };
        // Seconds since `t`, after the device has caught up; only when profiling.
        let lap = |t: &mut Instant, on: bool| -> Result<f64> {
            if !on {
                return Ok(0.0);
            }
            b.synchronize()?;
            let dt = t.elapsed().as_secs_f64();
            *t = Instant::now();
            Ok(dt)
        };
        let on = prof.is_some();
        let mut t = Instant::now();
        let mut fwd = Vec::new();
        datanorm.forward(&*b, img, n, &mut acts[0])?;
        let dn = lap(&mut t, on)?;
        for (i, layer) in layers.iter_mut().enumerate() {
            let (lo, hi) = acts.split_at_mut(i + 1);
            layer.forward(&mut bufs, &lo[i], &mut hi[0], n, train)?;
            if on {
                fwd.push(lap(&mut t, on)?);
            }
        }
        let top = layers.len();
        // The k-hot targets of a multi-label step; staged by its caller.
        let k_hot = match step_loss {
            StepLoss::KHot => Some(targets.as_ref().ok_or(ModelError::NoTags)?),
            _ => None,
        };
        if !train {
            match k_hot {
                Some(t) => {
                    bce.forward_backward(&*b, &acts[top], t.view(), n, None, eval_step.view_mut())?;
                    // The metrics that rank samples need every logit: one download per
                    // evaluation batch (the host already holds the tags it staged).
                    host_logits.resize(bce.classes * n, 0.0);
                    b.download(acts[top].view(), host_logits)?;
                    eval_scores.push_class_major(host_logits, host_targets, n);
                }
                None => {
                    loss.forward_backward(&*b, &acts[top], lab, n, None, eval_step.view_mut())?
                }
            }
            b.add(MapArgs {
                x: eval_step.view(),
                y: eval_acc.view_mut(),
                len: 2,
            })?;
            self.eval_samples += n as u64;
            return Ok(());
        }
        let soft = step_loss == StepLoss::Soft;
        match (k_hot, targets.as_ref().filter(|_| soft)) {
            (Some(tags), _) => bce.forward_backward(
                &*b,
                &acts[top],
                tags.view(),
                n,
                Some(&mut dacts[top]),
                step_stats.view_mut(),
            )?,
            (None, Some(t)) => loss.forward_backward_soft(
                &*b,
                &acts[top],
                t.view(),
                n,
                Some(&mut dacts[top]),
                step_stats.view_mut(),
            )?,
            (None, None) => loss.forward_backward(
                &*b,
                &acts[top],
                lab,
                n,
                Some(&mut dacts[top]),
                step_stats.view_mut(),
            )?,
        }
        b.add(MapArgs {
            x: step_stats.view(),
            y: train_acc.view_mut(),
            len: 2,
        })?;
        let loss_s = lap(&mut t, on)?;
        let mut bwd = vec![0.0; layers.len()];
        for (i, layer) in layers.iter_mut().enumerate().rev() {
            let (lo, hi) = dacts.split_at_mut(i + 1);
            let dx = if i == 0 { None } else { Some(&mut lo[i]) };
            layer.backward(&mut bufs, &acts[i], &acts[i + 1], &mut hi[0], dx, n)?;
            bwd[i] = lap(&mut t, on)?;
        }
        if let Some(p) = prof {
            p.push(("datanorm".into(), dn, 0.0));
            for ((l, f), bw) in layers.iter().zip(fwd).zip(bwd) {
                p.push((l.name().to_string(), f, bw));
            }
            p.push(("softmax_xent".into(), loss_s, 0.0));
        }
        self.train_samples += n as u64;
        self.last_n = n;
        Ok(())
    }

    fn read_sums(&self, t: &Tensor<B>) -> Result<[f32; 2]> {
        let mut s = [0.0f32; 2];
        self.backend.download(t.view(), &mut s)?;
        Ok(s)
    }

    /// Loss and accuracy of the last training step (waits for the device).
    pub fn last_step_stats(&self) -> Result<Stats> {
        Ok(Stats::from_sums(
            self.read_sums(&self.step_stats)?,
            self.last_n as u64,
        ))
    }

    /// Mean loss and accuracy over the training steps since the last call; resets them.
    pub fn take_train_stats(&mut self) -> Result<Stats> {
        let s = Stats::from_sums(self.read_sums(&self.train_acc)?, self.train_samples);
        zero_sums(&self.backend, &mut self.train_acc)?;
        self.train_samples = 0;
        Ok(s)
    }

    /// The running training sums not yet taken (`[loss sum, correct]`, samples), read
    /// without resetting them: a checkpoint stores them so that a resumed run's next
    /// `take_train_stats` is bit-identical to the uninterrupted run's.
    pub fn train_accumulator(&self) -> Result<([f32; 2], u64)> {
        Ok((self.read_sums(&self.train_acc)?, self.train_samples))
    }

    /// Restores sums saved by [`Model::train_accumulator`].
    pub fn set_train_accumulator(&mut self, sums: [f32; 2], samples: u64) -> Result<()> {
        self.backend.upload(&sums, self.train_acc.view_mut())?;
        self.train_samples = samples;
        Ok(())
    }

    /// Mean loss and accuracy over the `evaluate` calls since the last call, and for
    /// a multi-label model the metrics of the scores not taken by
    /// [`Model::take_eval_scores`]; resets them.
    pub fn take_eval_stats(&mut self) -> Result<Stats> {
        let mut s = Stats::from_sums(self.read_sums(&self.eval_acc)?, self.eval_samples);
        zero_sums(&self.backend, &mut self.eval_acc)?;
        self.eval_samples = 0;
        s.labels = self
            .take_eval_scores()
            .filter(|scores| !scores.is_empty())
            .map(|scores| scores.metrics());
        Ok(s)
    }

    /// A multi-label model's evaluation logits and tags since the last take (`None`
    /// for classification); resets them. A data-parallel run gathers every rank's
    /// before computing the metrics.
    pub fn take_eval_scores(&mut self) -> Option<LabelScores> {
        if self.cfg.target != Target::Labels {
            return None;
        }
        let empty = LabelScores::new(self.cfg.classes);
        Some(std::mem::replace(&mut self.eval_scores, empty))
    }
}
