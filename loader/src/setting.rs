//! The error of the loader's settings written as text (flags, Python arguments).
//!
//! A leaf module: the settings' modules use it, and it names none of them, so that
//! the values a message lists (the most workers, the fields' names) travel in the
//! variant.

/// A setting written as text (a flag, a Python argument) that names none of the
/// setting's values: the error of the loader's `FromStr` impls ([`Mode`](crate::Mode),
/// [`OnError`](crate::OnError), [`Workers`](crate::Workers), [`Field`](crate::Field),
/// [`Fields`](crate::Fields), [`Stop`](crate::Stop),
/// [`BoxFormat`](crate::source::BoxFormat), [`DecodedCacheSize`](crate::DecodedCacheSize),
/// [`Encoding`](crate::source::Encoding) and [`parse_size`](crate::config::parse_size)).
/// Each variant keeps the text as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseSettingError {
    /// Not `sync` or `async`.
    #[error("unknown mode '{0}' (expected sync or async)")]
    Mode(String),
    /// Not `fail` or `skip`.
    #[error("unknown error policy '{0}' (expected fail or skip)")]
    OnError(String),
    /// Neither `auto` nor a whole number in range.
    #[error("'{text}' is neither 'auto' nor a whole number from 1 to {max}")]
    Workers {
        /// The text as given.
        text: String,
        /// The most workers (`config::MAX_WORKERS`).
        max: usize,
    },
    /// Not a field's name (nor one of its other spellings); the name as read
    /// (trimmed, in lower case).
    #[error("unknown field '{name}' (known: {})", known.join(", "))]
    Field {
        /// The name as read.
        name: String,
        /// The fields' names, for the message.
        known: Vec<&'static str>,
    },
    /// Not `first_exhausted`, `all_exhausted` or `never`; the rule as read (trimmed).
    #[error("stop must be first_exhausted, all_exhausted or never, not {0:?}")]
    Stop(String),
    /// Not `xyxy` or `xywh`.
    #[error("box format '{0}': give xyxy or xywh")]
    BoxFormat(String),
    /// Not a size: a whole number of bytes with an optional K, M, G or T.
    #[error("'{0}' is not a size (a whole number with an optional K, M, G or T, e.g. 256M)")]
    Size(String),
    /// A size of more bytes than 64 bits count.
    #[error("{0} is out of range")]
    SizeOverflow(String),
    /// Not `auto` nor a size of at least one byte.
    #[error("'{0}' is neither 'auto' nor a size of at least 1 byte (e.g. 256M, 8G)")]
    DecodedCache(String),
    /// Not one of pack's image encodings.
    #[error("unknown encoding '{0}' (expected keep, raw, png or jpeg:Q with Q from 1 to 100)")]
    Encoding(String),
    /// `jpeg:Q` with a quality that is not a whole number from 1 to 100.
    #[error("JPEG quality '{0}' is not a whole number from 1 to 100 (as in jpeg:90)")]
    JpegQuality(String),
    /// A longest side of 0: no image fits it.
    #[error("max side must be at least 1 pixel, not {0}")]
    MaxSide(u64),
}

/// One of the loader's settings, named as the field of its configuration that holds
/// it. An error about a setting carries this value, not a spelling: each front end
/// maps it to its own (`argument 'batch_size'` in Python, `--batch-size` on a
/// command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// Samples per batch.
    BatchSize,
    /// Sync or async reading.
    Mode,
    /// The decode threads (a count, or `auto`).
    Workers,
    /// `auto` workers' CPU budget.
    CpuBudget,
    /// Batches kept ready ahead.
    Prefetch,
    /// Reads in flight.
    IoDepth,
    /// Leave out a short last batch.
    DropLast,
    /// This process's rank.
    Rank,
    /// The number of processes sharing the data.
    WorldSize,
    /// How the ranks' shards are made equal.
    ShardPolicy,
    /// The shuffle buffer of a sharded source.
    ShuffleBuffer,
    /// The transforms.
    Transform,
    /// Channels per image.
    Channels,
    /// The trace file.
    Trace,
    /// The most pixels an image may have.
    MaxPixels,
    /// The memory bound of the batch buffers.
    MaxBufferBytes,
    /// MixUp/CutMix on finished batches.
    Mixup,
    /// The fields batches carry.
    Fields,
    /// The least visible share of a box that keeps it.
    MinBoxVisibility,
    /// The most instances kept per sample.
    MaxInstances,
    /// The caller's per-sample steps.
    Steps,
    /// The decoded cache's size.
    DecodedCache,
    /// A never-ending mixture's batches per epoch on each rank.
    EpochBatches,
    /// A mixture's weights, one per data set.
    Weights,
    /// The part of a data set to read (a Parquet split by name, MNIST's test files).
    Split,
}

impl Setting {
    /// Every setting, for a front end's check that it spells each one.
    pub const ALL: [Setting; 25] = [
        Setting::BatchSize,
        Setting::Mode,
        Setting::Workers,
        Setting::CpuBudget,
        Setting::Prefetch,
        Setting::IoDepth,
        Setting::DropLast,
        Setting::Rank,
        Setting::WorldSize,
        Setting::ShardPolicy,
        Setting::ShuffleBuffer,
        Setting::Transform,
        Setting::Channels,
        Setting::Trace,
        Setting::MaxPixels,
        Setting::MaxBufferBytes,
        Setting::Mixup,
        Setting::Fields,
        Setting::MinBoxVisibility,
        Setting::MaxInstances,
        Setting::Steps,
        Setting::DecodedCache,
        Setting::EpochBatches,
        Setting::Weights,
        Setting::Split,
    ];

    /// The setting's name: its field's name in the loader's configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Setting::BatchSize => "batch_size",
            Setting::Mode => "mode",
            Setting::Workers => "workers",
            Setting::CpuBudget => "cpu_budget",
            Setting::Prefetch => "prefetch",
            Setting::IoDepth => "io_depth",
            Setting::DropLast => "drop_last",
            Setting::Rank => "rank",
            Setting::WorldSize => "world_size",
            Setting::ShardPolicy => "shard_policy",
            Setting::ShuffleBuffer => "shuffle_buffer",
            Setting::Transform => "transform",
            Setting::Channels => "channels",
            Setting::Trace => "trace",
            Setting::MaxPixels => "max_pixels",
            Setting::MaxBufferBytes => "max_buffer_bytes",
            Setting::Mixup => "mixup",
            Setting::Fields => "fields",
            Setting::MinBoxVisibility => "min_box_visibility",
            Setting::MaxInstances => "max_instances",
            Setting::Steps => "steps",
            Setting::DecodedCache => "decoded_cache",
            Setting::EpochBatches => "epoch_batches",
            Setting::Weights => "weights",
            Setting::Split => "split",
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A setting that cannot work, alone or with the data: which one, and why. The
/// message leaves the setting's spelling to [`Setting`]'s front-end mapping; its
/// `Display` uses the field's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct SettingError {
    /// The setting at fault (where two clash, the one to change).
    pub setting: Setting,
    /// What is wrong with it, and what would work.
    pub problem: String,
}

impl SettingError {
    /// `setting` cannot work because of `problem`.
    pub fn new(setting: Setting, problem: impl Into<String>) -> Self {
        SettingError {
            setting,
            problem: problem.into(),
        }
    }
}
