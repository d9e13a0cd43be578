//! One typed description of a loader ([`LoaderSpec`]), grouped by part: the data, how
//! it is read, the augmentation, the order and the output. Front ends (the two command
//! lines; Python) fill one in and [`build`](LoaderSpec::build) it; every check is the
//! library's, made once, and a setting that cannot work is a [`SettingError`] naming
//! the field.

use std::path::PathBuf;
use std::sync::Arc;

use stoker_augment::Pipeline;

use crate::config::{DecodedCacheSize, LoaderConfig, Mode, OnError, Workers};
use crate::mixture::MixtureError;
use crate::sampler::{ShardPolicy, DEFAULT_SHUFFLE_BUFFER};
use crate::source::{OpenOptions, Source, SourceError};
use crate::{Fields, Loader, LoaderError, Mix, Setting, SettingError, Stop};

/// A loader, described: [`build`](Self::build) opens the data and makes it.
#[derive(Clone, Debug, Default)]
pub struct LoaderSpec {
    /// What to read.
    pub data: DataSpec,
    /// How it is read.
    pub reading: ReadingSpec,
    /// What each sample and batch goes through.
    pub augment: AugmentSpec,
    /// In which order, and which share of it this process reads.
    pub order: OrderSpec,
    /// What a batch holds.
    pub output: OutputSpec,
}

/// The data sets, each with the options it is opened with, and how several are mixed.
#[derive(Clone, Debug, Default)]
pub struct DataSpec {
    /// The data sets; more than one (or any mixing setting) makes a
    /// [`Mixture`](crate::Mixture).
    pub sources: Vec<SourceSpec>,
    /// One weight per data set (default: equal).
    pub weights: Option<Vec<f64>>,
    /// When a mixed epoch ends (default: all_exhausted).
    pub stop: Option<Stop>,
    /// A never-ending mixture's batches per epoch on each rank.
    pub epoch_batches: Option<usize>,
}

/// One data set: a path or URL and how it is opened.
#[derive(Clone, Debug)]
pub struct SourceSpec {
    /// A path or URL, as [`open_with`](crate::source::open_with) takes it.
    pub path: PathBuf,
    /// The split, the cache, Parquet's columns, the files beside an annotation file.
    pub options: OpenOptions,
}

/// How samples are read and decoded.
#[derive(Clone, Debug)]
pub struct ReadingSpec {
    /// On the caller's thread or ahead of it.
    pub mode: Mode,
    /// Decode threads (async mode).
    pub workers: Workers,
    /// Batches kept ready ahead (async mode).
    pub prefetch: usize,
    /// Reads in flight (async mode).
    pub io_depth: usize,
    /// What a sample that cannot be read or decoded does.
    pub on_error: OnError,
    /// The most pixels an image may have.
    pub max_pixels: usize,
    /// The memory bound of the batch buffers (`None`: half of the memory).
    pub max_buffer_bytes: Option<usize>,
    /// The decoded cache's bound (`None`: no cache).
    pub decoded_cache: Option<DecodedCacheSize>,
    /// Stop preparing batches after this epoch.
    pub last_epoch: Option<u64>,
    /// Stream a Chrome trace of the stages to this file.
    pub trace: Option<PathBuf>,
}

/// What the samples and batches go through.
#[derive(Clone, Debug, Default)]
pub struct AugmentSpec {
    /// The transforms of each decoded image.
    pub transform: Pipeline,
    /// MixUp/CutMix on each finished batch.
    pub mixup: Option<Mix>,
}

/// The order of an epoch's samples, and this process's share of it.
#[derive(Clone, Debug)]
pub struct OrderSpec {
    /// Seeds the shuffle and every sample's augmentation.
    pub seed: u64,
    /// A new order each epoch (else source order).
    pub shuffle: bool,
    /// This process's rank, in `0..world`.
    pub rank: usize,
    /// The processes that share the data.
    pub world_size: usize,
    /// How the ranks' shards are made equal.
    pub shard_policy: ShardPolicy,
    /// Samples in the shuffle buffer of a sharded source.
    pub shuffle_buffer: usize,
}

/// What a batch holds.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// Samples per batch.
    pub batch_size: usize,
    /// Leave out an epoch's short last batch.
    pub drop_last: bool,
    /// The fields batches carry (`None`: the source's).
    pub fields: Option<Fields>,
    /// Channels per image (`None`: 3, or a raw record's own count).
    pub channels: Option<usize>,
    /// The most instances kept per sample.
    pub max_instances: Option<usize>,
    /// The least visible share of a box that keeps it.
    pub min_box_visibility: f32,
}

/// The defaults of each part are [`LoaderConfig::default`]'s, so that a spec and a
/// configuration left at their defaults describe the same loader.
impl Default for ReadingSpec {
    fn default() -> Self {
        LoaderSpec::from_config(DataSpec::default(), &LoaderConfig::default()).reading
    }
}

impl Default for OrderSpec {
    fn default() -> Self {
        OrderSpec {
            seed: 0,
            shuffle: true,
            rank: 0,
            world_size: 1,
            shard_policy: ShardPolicy::Pad,
            shuffle_buffer: DEFAULT_SHUFFLE_BUFFER,
        }
    }
}

impl Default for OutputSpec {
    fn default() -> Self {
        LoaderSpec::from_config(DataSpec::default(), &LoaderConfig::default()).output
    }
}

/// Why a [`LoaderSpec`] cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// No data set was given.
    #[error("no data: give at least one data set")]
    NoData,
    /// A data set cannot be opened.
    #[error("opening {}: {source}", path.display())]
    Open {
        /// The data set as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: SourceError,
    },
    /// The data sets cannot be mixed (a setting of the mixture is a
    /// [`Loader`](SpecError::Loader) error naming it).
    #[error("mixing the data sets: {0}")]
    Mixture(#[source] MixtureError),
    /// A setting that cannot work, or the loader's own error.
    #[error(transparent)]
    Loader(#[from] LoaderError),
}

impl SpecError {
    /// The setting at fault, if one is.
    pub fn setting(&self) -> Option<Setting> {
        match self {
            SpecError::Loader(e) => e.setting(),
            SpecError::Open {
                source: SourceError::Setting(e),
                ..
            } => Some(e.setting),
            _ => None,
        }
    }
}

impl LoaderSpec {
    /// `cfg` split into its parts, with `data`.
    pub fn from_config(data: DataSpec, cfg: &LoaderConfig) -> LoaderSpec {
        LoaderSpec {
            data,
            reading: ReadingSpec {
                mode: cfg.mode,
                workers: cfg.workers,
                prefetch: cfg.prefetch,
                io_depth: cfg.io_depth,
                on_error: cfg.on_error,
                max_pixels: cfg.max_pixels,
                max_buffer_bytes: cfg.max_buffer_bytes,
                decoded_cache: cfg.decoded_cache,
                last_epoch: cfg.last_epoch,
                trace: cfg.trace.clone(),
            },
            augment: AugmentSpec {
                transform: cfg.transform.clone(),
                mixup: cfg.mixup,
            },
            order: OrderSpec {
                seed: cfg.seed,
                shuffle: cfg.shuffle,
                rank: cfg.rank,
                world_size: cfg.world_size,
                shard_policy: cfg.shard_policy,
                shuffle_buffer: cfg.shuffle_buffer,
            },
            output: OutputSpec {
                batch_size: cfg.batch_size,
                drop_last: cfg.drop_last,
                fields: cfg.fields,
                channels: cfg.channels,
                max_instances: cfg.max_instances,
                min_box_visibility: cfg.min_box_visibility,
            },
        }
    }

    /// The engine's configuration of the reading, augmentation, order and output
    /// parts (the per-sample steps of [`LoaderConfig::steps`] are code, not settings:
    /// set them on the configuration).
    pub fn config(&self) -> LoaderConfig {
        let (r, a, o, out) = (&self.reading, &self.augment, &self.order, &self.output);
        LoaderConfig {
            batch_size: out.batch_size,
            mode: r.mode,
            workers: r.workers,
            prefetch: r.prefetch,
            io_depth: r.io_depth,
            seed: o.seed,
            shuffle: o.shuffle,
            drop_last: out.drop_last,
            rank: o.rank,
            world_size: o.world_size,
            shard_policy: o.shard_policy,
            shuffle_buffer: o.shuffle_buffer,
            transform: a.transform.clone(),
            channels: out.channels,
            on_error: r.on_error,
            last_epoch: r.last_epoch,
            trace: r.trace.clone(),
            max_pixels: r.max_pixels,
            max_buffer_bytes: r.max_buffer_bytes,
            mixup: a.mixup,
            fields: out.fields,
            min_box_visibility: out.min_box_visibility,
            max_instances: out.max_instances,
            steps: Vec::new(),
            decoded_cache: r.decoded_cache,
        }
    }

    /// Checks every setting that needs no data: the configuration's
    /// ([`LoaderConfig::validate`]) and the mixture's ([`DataSpec::validate`]), so
    /// that a typo costs nothing.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.config().validate()?;
        self.data.validate()
    }

    /// The data opened (and mixed): the source a loader of this spec reads.
    pub fn open(&self) -> Result<Arc<dyn Source>, SpecError> {
        let sources = self
            .data
            .sources
            .iter()
            .map(|s| {
                crate::source::open_with(&s.path, &s.options).map_err(|source| SpecError::Open {
                    path: s.path.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.data.mix(sources)
    }

    /// Checks the settings, opens the data and makes the loader.
    pub fn build(&self) -> Result<Loader, SpecError> {
        self.validate()?;
        let source = self.open()?;
        Ok(self.build_on(source)?)
    }

    /// The loader of this spec's settings over `source`, opened already (one source
    /// read by several loaders, as training and validation may share one).
    pub fn build_on(&self, source: Arc<dyn Source>) -> Result<Loader, LoaderError> {
        Loader::new(source, self.config())
    }
}

impl DataSpec {
    /// Whether the data is a mixture: several data sets, or any mixing setting.
    pub fn mixes(&self) -> bool {
        self.sources.len() > 1
            || self.weights.is_some()
            || self.stop.is_some()
            || self.epoch_batches.is_some()
    }

    /// The mixture's settings, with their defaults (equal weights, all_exhausted).
    fn mixture(&self) -> crate::MixtureSpec {
        crate::MixtureSpec {
            weights: self
                .weights
                .clone()
                .unwrap_or_else(|| vec![1.0; self.sources.len()]),
            stop: self.stop.unwrap_or(Stop::AllExhausted),
            epoch_batches: self.epoch_batches,
        }
    }

    /// Checks that there is data, and the mixture's settings: the weights against
    /// the data sets, the stop rule against `epoch_batches`.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.sources.is_empty() {
            return Err(SpecError::NoData);
        }
        if self.mixes() {
            self.mixture()
                .validate(self.sources.len())
                .map_err(mixture_error)?;
        }
        Ok(())
    }

    /// `sources` (opened from [`sources`](Self::sources), in order) as one: the one
    /// source as it is, or their mixture.
    pub fn mix(&self, sources: Vec<Arc<dyn Source>>) -> Result<Arc<dyn Source>, SpecError> {
        if sources.is_empty() {
            return Err(SpecError::NoData);
        }
        crate::mixture::combine(sources, self.weights.clone(), self.stop, self.epoch_batches)
            .map_err(mixture_error)
    }
}

/// A mixture's error: a [`SettingError`] naming the weights or the batches per epoch
/// where one of those is at fault.
fn mixture_error(e: MixtureError) -> SpecError {
    let setting = match e {
        MixtureError::WeightCount { .. }
        | MixtureError::BadWeight { .. }
        | MixtureError::AllZero => Setting::Weights,
        MixtureError::NeedsEpochBatches | MixtureError::EpochBatchesWithoutNever => {
            Setting::EpochBatches
        }
        e => return SpecError::Mixture(e),
    };
    SpecError::Loader(SettingError::new(setting, e.to_string()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_at_its_defaults_is_the_default_configuration() {
        let spec = LoaderSpec::default();
        let (a, b) = (spec.config(), LoaderConfig::default());
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    /// The error `spec` is refused with (a `Loader` has no `Debug` for `unwrap_err`).
    fn refused(spec: &LoaderSpec) -> SpecError {
        match spec.build() {
            Ok(_) => panic!("built"),
            Err(e) => e,
        }
    }

    #[test]
    fn bad_settings_name_their_field_before_any_data_is_opened() {
        let data = |n: usize| DataSpec {
            sources: (0..n)
                .map(|i| SourceSpec {
                    path: format!("/nonexistent/{i}").into(),
                    options: OpenOptions::default(),
                })
                .collect(),
            ..DataSpec::default()
        };
        let mut spec = LoaderSpec {
            data: data(1),
            ..LoaderSpec::default()
        };
        spec.output.batch_size = 0;
        assert_eq!(refused(&spec).setting(), Some(Setting::BatchSize));
        spec.output.batch_size = 4;
        spec.data = DataSpec {
            weights: Some(vec![1.0, -1.0]),
            ..data(2)
        };
        assert_eq!(refused(&spec).setting(), Some(Setting::Weights));
        spec.data = DataSpec {
            weights: Some(vec![1.0]),
            ..data(2)
        };
        assert_eq!(refused(&spec).setting(), Some(Setting::Weights));
        spec.data = DataSpec {
            stop: Some(Stop::Never),
            ..data(2)
        };
        let e = refused(&spec);
        assert_eq!(e.setting(), Some(Setting::EpochBatches), "{e}");
        // The settings pass: now the data is opened, and its error names the path.
        spec.data = data(1);
        let e = refused(&spec);
        assert!(matches!(e, SpecError::Open { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/0"), "{e}");
        spec.data = DataSpec::default();
        assert!(matches!(refused(&spec), SpecError::NoData));
    }
}
