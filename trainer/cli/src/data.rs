//! Opening the training and validation data and building their loaders, with the
//! checks that turn a wrong folder into a clear message before any training starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use stoker_augment::Pipeline;
use stoker_loader::cli_args::ReadArgs;
use stoker_loader::pipeline::first_image_size;
use stoker_loader::spec::{AugmentSpec, DataSpec, LoaderSpec, OrderSpec, OutputSpec, ReadingSpec};
use stoker_loader::{
    source, DecodedCacheSize, Field, Fields, Loader, Mix, Mode, ShardPolicy, Source, Workers,
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
    /// The training loader's decoded cache where the data's recipe has its own (a demo
    /// set: `--decoded-cache`, else on CUDA room for the whole set); `None`:
    /// `--decoded-cache` as given.
    pub decoded_cache: Option<DecodedCacheSize>,
}

/// Loader settings shared by the training and validation loaders.
pub struct Reading {
    /// This process's shard of every epoch (0 of 1 in a single process).
    pub rank: usize,
    pub world_size: usize,
    pub mode: Mode,
    pub batch_size: usize,
    pub workers: Workers,
    /// Threads `workers = auto` may use.
    pub cpu_budget: usize,
    pub prefetch: usize,
    pub seed: u64,
    pub epochs: u64,
    /// --on-error, --io-depth, --max-pixels, --decoded-cache, --shuffle-buffer. The
    /// decoded cache is the training loader's (the validation loader keeps none, so
    /// that `auto` is not counted twice against the memory bound).
    pub read: ReadArgs,
    /// MixUp/CutMix of the training batches (never of the validation ones).
    pub mixup: Option<Mix>,
}

fn open(path: &Path, what: &str, options: &source::OpenOptions) -> anyhow::Result<Arc<dyn Source>> {
    let src = source::open_with(path, options).map_err(|e| {
        // A source's errors name its files; a setting's (the split) does not.
        let named = match &e {
            source::SourceError::Setting(_) => format!(" {}", path.display()),
            _ => String::new(),
        };
        anyhow::Error::new(e).context(format!("opening the {what} data{named}"))
    })?;
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
    /// Opens the training data (`data`'s sets, mixed when there are several) and the
    /// validation data: `val_path` when given, else the test split of an MNIST or
    /// CIFAR-10 folder, else none. The validation data is opened with the first
    /// training set's options, for its held-out part (the Hub's validation split,
    /// whatever `--split` the training data reads).
    pub fn open(
        data: &DataSpec,
        val_path: Option<&Path>,
        transform: Pipeline,
        val_transform: Option<Pipeline>,
        target: TargetArg,
    ) -> anyhow::Result<Data> {
        let Some(first) = data.sources.first() else {
            bail!("no training data");
        };
        let sources = data
            .sources
            .iter()
            .map(|s| open(&s.path, "training", &s.options))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let train = data.mix(sources).context("mixing the training data")?;
        let train_path = first.path.clone();
        let held_out = source::OpenOptions {
            split: source::Split::Test,
            ..first.options.clone()
        };
        let (val, val_path) = match val_path {
            Some(p) => (
                Some(open(p, "validation", &held_out)?),
                Some(p.to_path_buf()),
            ),
            None if matches!(train.format(), "mnist" | "cifar10") => {
                // These formats hold their own test split; use it when it is there.
                match source::open_with(&train_path, &held_out) {
                    Ok(s) if !s.is_empty() => (Some(s), Some(train_path.clone())),
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
            ("training", Some(train_path.as_path()), Some(&train)),
            ("validation", val_path.as_deref(), val.as_ref()),
        ] {
            if let (Some(p), Some(s)) = (path, src) {
                check_target(target, resolved, what, p, s.fields())?;
            }
        }
        Ok(Data {
            train_path,
            val_path,
            train,
            val,
            transform,
            val_transform,
            target: resolved,
            sgd_lr: None,
            decoded_cache: None,
        })
    }

    /// The training loader's settings, in the loader's parts.
    fn spec(&self, r: &Reading) -> LoaderSpec {
        LoaderSpec {
            data: DataSpec::default(),
            reading: ReadingSpec {
                mode: r.mode,
                workers: r.workers.with_budget(r.cpu_budget),
                prefetch: r.prefetch,
                io_depth: r.read.io_depth,
                on_error: r.read.on_error,
                max_pixels: r.read.max_pixels,
                decoded_cache: self.decoded_cache.or(r.read.decoded_cache),
                // Nothing to prefetch past the last epoch.
                last_epoch: Some(r.epochs.saturating_sub(1)),
                ..ReadingSpec::default()
            },
            augment: AugmentSpec {
                transform: self.transform.clone(),
                mixup: r.mixup,
            },
            order: OrderSpec {
                seed: r.seed,
                shuffle: true,
                rank: r.rank,
                world_size: r.world_size,
                // Ranks must take the same number of steps: pad the shards to equal
                // length (a few samples are seen twice per epoch when the ranks do not
                // divide it).
                shard_policy: ShardPolicy::Pad,
                shuffle_buffer: r.read.shuffle_buffer,
            },
            output: OutputSpec {
                batch_size: r.batch_size,
                // Multi-label: the tags and nothing else a rich source may carry
                // (boxes, masks, captions are not read). Classification keeps the
                // source's fields as it always did.
                fields: (self.target == Target::Labels)
                    .then(|| Fields::of(&[Field::Image, Field::Labels])),
                ..OutputSpec::default()
            },
        }
    }

    /// The training loader and, when there is validation data, its loader; checks that
    /// both deliver images of one shape.
    pub fn loaders(&self, r: &Reading) -> anyhow::Result<(Loader, Option<Loader>)> {
        let spec = self.spec(r);
        let train = spec
            .build_on(self.train.clone())
            .with_context(|| format!("reading {}", self.train_path.display()))?;
        let Some(src) = &self.val else {
            return Ok((train, None));
        };
        let mut val_spec = LoaderSpec {
            reading: ReadingSpec {
                last_epoch: Some(0),
                decoded_cache: None,
                ..spec.reading.clone()
            },
            augment: AugmentSpec {
                transform: Pipeline::identity(),
                mixup: None,
            },
            order: OrderSpec {
                shuffle: false,
                // Each validation sample once, whatever the rank count: the ranks'
                // sums are added up.
                shard_policy: ShardPolicy::Exact,
                ..spec.order.clone()
            },
            ..spec.clone()
        };
        let (h, w, c) = train.image_shape();
        val_spec.augment.transform = match &self.val_transform {
            Some(t) => t.clone(),
            None => {
                // The validation images' size, from their first one as the loader
                // learns it, so that the loader is built once with the transform
                // that fits.
                let (vw, vh, _) = first_image_size(src.as_ref(), &val_spec.config())
                    .context("reading the validation data")?;
                if (vh, vw) == (h, w) {
                    Pipeline::identity()
                } else {
                    // The usual evaluation transform: shorter side to the training
                    // size, then the centre.
                    Pipeline::parse(&format!("resize:{},center:{w}x{h}", h.max(w)))
                        .context("validation transform")?
                }
            }
        };
        let v = val_spec
            .build_on(src.clone())
            .context("reading the validation data")?;
        if v.image_shape() != train.image_shape() {
            let (vh, vw, vc) = v.image_shape();
            bail!(
                "training images come out {h}x{w}x{c} (after '{}'), validation images \
                 {vh}x{vw}x{vc}: give a --val-transform that makes them {w}x{h}, \
                 e.g. 'resize:{h},center:{h}'",
                self.transform,
            );
        }
        Ok((train, Some(v)))
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
