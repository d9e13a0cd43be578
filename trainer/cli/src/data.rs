//! Opening the training and validation data and building their loaders, with the
//! checks that turn a wrong folder into a clear message before any training starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use stoker_augment::Pipeline;
use stoker_loader::{
    source, Field, Fields, Loader, LoaderConfig, Mix, Mode, ShardPolicy, Source, Workers,
};
use stoker_trainer::model::Target;

use crate::args::TargetArg;

/// The opened sources and the transforms that go with them.
pub struct Data {
    pub train_path: PathBuf,
    pub val_path: Option<PathBuf>,
    pub train: Arc<dyn Source>,
    pub val: Option<Arc<dyn Source>>,
    pub transform: Pipeline,
    /// None: no resizing when the images already match, else resize and centre-crop.
    pub val_transform: Option<Pipeline>,
    /// What the model learns: `--target`, with `auto` resolved from the data.
    pub target: Target,
    /// The peak SGD learning rate when `--lr` is not given, where the data's recipe
    /// has its own (the multi-label demo's); `None`: the optimizer's default.
    pub sgd_lr: Option<f32>,
}

/// More training data sets mixed with the first (`--data` again, `--weights`,
/// `--stop`, `--steps`); the default mixes nothing.
#[derive(Clone, Debug, Default)]
pub struct Mixing {
    pub more: Vec<PathBuf>,
    pub weights: Option<Vec<f64>>,
    pub stop: Option<stoker_loader::Stop>,
    pub steps: Option<usize>,
}

/// Loader settings shared by the training and validation loaders.
pub struct Reading {
    /// This process's shard of every epoch (0 of 1 in a single process).
    pub rank: usize,
    pub world: usize,
    pub mode: Mode,
    pub batch_size: usize,
    pub workers: Workers,
    /// Threads `workers = auto` may use.
    pub cpu_budget: usize,
    pub prefetch: usize,
    pub seed: u64,
    pub epochs: u64,
    /// The shuffle buffer of tar shards.
    pub shuffle_buffer: usize,
    /// MixUp/CutMix of the training batches (never of the validation ones).
    pub mix: Option<Mix>,
    /// The training loader's decoded cache (the validation loader keeps none, so that
    /// `auto` is not counted twice against the memory bound).
    pub decoded_cache: Option<stoker_loader::DecodedCacheSize>,
}

fn open(
    path: &Path,
    train: bool,
    what: &str,
    options: &source::OpenOptions,
) -> anyhow::Result<Arc<dyn Source>> {
    let options = source::OpenOptions {
        train,
        ..options.clone()
    };
    let src =
        source::open_with(path, &options).with_context(|| format!("opening the {what} data"))?;
    if src.is_empty() {
        bail!("{}: the {what} data holds no samples", path.display());
    }
    if src.classes().len() < 2 {
        bail!(
            "{}: the {what} data has {} class(es) ({}); training a classifier needs at least 2",
            path.display(),
            src.classes().len(),
            src.classes().join(", ")
        );
    }
    Ok(src)
}

impl Data {
    /// Opens `train` and the validation data: `val` when given, else the test split of
    /// an MNIST or CIFAR-10 folder, else none. `options` (cache, remote settings)
    /// apply to both.
    pub fn open(
        train_path: &Path,
        val_path: Option<&Path>,
        transform: &str,
        val_transform: Option<&str>,
        target: TargetArg,
        options: &source::OpenOptions,
        mixing: &Mixing,
    ) -> anyhow::Result<Data> {
        let mut sources = vec![open(train_path, true, "training", options)?];
        for p in &mixing.more {
            sources.push(open(p, true, "training", options)?);
        }
        let train = stoker_loader::mixture::combine(
            sources,
            mixing.weights.clone(),
            mixing.stop,
            mixing.steps,
        )
        .context("mixing the training data")?;
        let (val, val_path) = match val_path {
            Some(p) => (
                Some(open(p, false, "validation", options)?),
                Some(p.to_path_buf()),
            ),
            None if matches!(train.format(), "mnist" | "cifar10") => {
                // These formats hold their own test split; use it when it is there.
                match source::open(train_path, source::Split::Test) {
                    Ok(s) if !s.is_empty() => (Some(s), Some(train_path.to_path_buf())),
                    _ => (None, None),
                }
            }
            None => (None, None),
        };
        if let Some(v) = &val {
            if v.classes() != train.classes() {
                bail!(
                    "the validation data's classes ({}) differ from the training data's ({})",
                    v.classes().join(", "),
                    train.classes().join(", ")
                );
            }
        }
        let resolved = resolve_target(target, train.as_ref());
        for (what, path, src) in [
            ("training", Some(train_path), Some(&train)),
            ("validation", val_path.as_deref(), val.as_ref()),
        ] {
            if let (Some(p), Some(s)) = (path, src) {
                check_target(target, resolved, what, p, s.fields())?;
            }
        }
        let target = resolved;
        let transform = Pipeline::parse(transform).context("--transform")?;
        let val_transform = val_transform
            .map(|s| Pipeline::parse(s).context("--val-transform"))
            .transpose()?;
        Ok(Data {
            train_path: train_path.to_path_buf(),
            val_path,
            train,
            val,
            transform,
            val_transform,
            target,
            sgd_lr: None,
        })
    }

    /// The training loader and, when there is validation data, its loader; checks that
    /// both deliver images of one shape.
    pub fn loaders(&self, r: &Reading) -> anyhow::Result<(Loader, Option<Loader>)> {
        let cfg = LoaderConfig {
            batch_size: r.batch_size,
            mode: r.mode,
            workers: r.workers.with_budget(r.cpu_budget),
            prefetch: r.prefetch,
            seed: r.seed,
            shuffle: true,
            shuffle_buffer: r.shuffle_buffer,
            transform: self.transform.clone(),
            // Nothing to prefetch past the last epoch.
            last_epoch: Some(r.epochs.saturating_sub(1)),
            // Ranks must take the same number of steps: pad the shards to equal length
            // (a few samples are seen twice per epoch when the ranks do not divide it).
            rank: r.rank,
            world: r.world,
            shard_policy: ShardPolicy::Pad,
            mix: r.mix,
            // Multi-label: the tags and nothing else a rich source may carry (boxes,
            // masks, captions are not read). Classification keeps the source's fields
            // as it always did.
            fields: (self.target == Target::Labels)
                .then(|| Fields::of(&[Field::Image, Field::Labels])),
            decoded_cache: r.decoded_cache,
            ..LoaderConfig::default()
        };
        let train = Loader::new(self.train.clone(), cfg.clone())
            .with_context(|| format!("reading {}", self.train_path.display()))?;
        let val = match &self.val {
            Some(src) => {
                let make = |transform: Pipeline| {
                    Loader::new(
                        src.clone(),
                        LoaderConfig {
                            shuffle: false,
                            transform,
                            last_epoch: Some(0),
                            // Each validation sample once, whatever the rank count: the
                            // ranks' sums are added up.
                            shard_policy: ShardPolicy::Exact,
                            mix: None,
                            decoded_cache: None,
                            ..cfg.clone()
                        },
                    )
                    .context("reading the validation data")
                };
                let (h, w, c) = train.image_shape();
                let mut v = make(self.val_transform.clone().unwrap_or_default())?;
                if v.image_shape() != train.image_shape() && self.val_transform.is_none() {
                    // The usual evaluation transform: shorter side to the training size,
                    // then the centre.
                    let spec = format!("resize:{},center:{w}x{h}", h.max(w));
                    v = make(Pipeline::parse(&spec).context("validation transform")?)?;
                }
                if v.image_shape() != train.image_shape() {
                    let (vh, vw, vc) = v.image_shape();
                    bail!(
                        "training images come out {h}x{w}x{c} (after '{}'), validation images \
                         {vh}x{vw}x{vc}: give a --val-transform that makes them {w}x{h}, \
                         e.g. 'resize:{h},center:{h}'",
                        self.transform,
                    );
                }
                Some(v)
            }
            None => None,
        };
        Ok((train, val))
    }
}

/// The data must hold what the target learns from: tags for `labels`, a class per
/// sample for `class` (without one every sample would train as class 0, and report a
/// perfect accuracy). The message names the fields the data has instead, as the
/// loader's own refusals (`fields=`, MixUp) do.
fn check_target(
    arg: TargetArg,
    target: Target,
    what: &str,
    path: &Path,
    fields: Fields,
) -> anyhow::Result<()> {
    let flag = match arg {
        TargetArg::Auto => "--target auto",
        TargetArg::Class => "--target class",
        TargetArg::Labels => "--target labels",
    };
    match target {
        Target::Labels if !fields.contains(Field::Labels) => bail!(
            "{flag}: the {what} data {} has no multi-label tags (no `labels` field; it has: \
             {fields})",
            path.display(),
        ),
        Target::Class if !fields.contains(Field::Class) => bail!(
            "{flag} trains a classifier, and the {what} data {} has no class per sample: the \
             data set has no field 'label' (it has: {fields}){}",
            path.display(),
            if fields.contains(Field::Labels) {
                "; train on its tags with --target labels"
            } else {
                ""
            }
        ),
        _ => Ok(()),
    }
}

/// `--target auto` is `labels` for data with multi-label tags and no class (a
/// manifest of tags, the scenes generator), else `class`, as before tags existed.
fn resolve_target(arg: TargetArg, train: &dyn Source) -> Target {
    let f = train.fields();
    match arg {
        TargetArg::Class => Target::Class,
        TargetArg::Labels => Target::Labels,
        TargetArg::Auto if f.contains(Field::Labels) && !f.contains(Field::Class) => Target::Labels,
        TargetArg::Auto => Target::Class,
    }
}
