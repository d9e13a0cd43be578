//! How a loader is configured ([`LoaderConfig`], [`Mode`], [`OnError`]), and the checks
//! that refuse an absurd setting with an error naming it before anything is allocated.

use serde::{Deserialize, Serialize};
use stoker_augment::Pipeline;

use crate::sampler::{Sampler, ShardPolicy, DEFAULT_SHUFFLE_BUFFER};
use crate::system::physical_memory;
use crate::{LoaderError, ParseSettingError, Setting, SettingError};

/// Synchronous (inline) or asynchronous (prefetching) reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Each batch is read, decoded and collated on the caller's thread when asked for.
    Sync,
    /// Worker threads prepare batches ahead of the caller, up to `prefetch` ready.
    Async,
}

impl std::str::FromStr for Mode {
    type Err = ParseSettingError;
    fn from_str(s: &str) -> Result<Self, ParseSettingError> {
        match s {
            "sync" => Ok(Mode::Sync),
            "async" => Ok(Mode::Async),
            _ => Err(ParseSettingError::Mode(s.to_string())),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
        })
    }
}

/// What to do with a sample that cannot be read or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// End the epoch with an error naming the sample.
    Fail,
    /// Leave the sample out of its batch and count it.
    Skip,
}

impl std::str::FromStr for OnError {
    type Err = ParseSettingError;
    fn from_str(s: &str) -> Result<Self, ParseSettingError> {
        match s {
            "fail" => Ok(OnError::Fail),
            "skip" => Ok(OnError::Skip),
            _ => Err(ParseSettingError::OnError(s.to_string())),
        }
    }
}

/// The decode threads of async mode: a fixed count, or `auto` (written so in flags
/// and Python), a count chosen within a CPU budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// Exactly this many decode threads, 1..=[`MAX_WORKERS`] (sync mode runs none
    /// and accepts 0).
    Fixed(usize),
    /// Between 1 and `budget` decode threads, the count chosen during the first
    /// epoch from how long the consumer waits (see `pipeline::tune`). The batches are
    /// the same bytes whatever it chooses.
    Auto {
        /// The most threads, 1..=[`MAX_WORKERS`]; `None`:
        /// [`LoaderConfig::default_cpu_budget`].
        budget: Option<usize>,
    },
}

impl Workers {
    /// `auto` within the default budget ([`LoaderConfig::default_cpu_budget`]).
    pub const AUTO: Workers = Workers::Auto { budget: None };

    /// `auto` within `budget` threads; a fixed count as it is.
    pub fn with_budget(self, budget: usize) -> Workers {
        match self {
            Workers::Fixed(n) => Workers::Fixed(n),
            Workers::Auto { .. } => Workers::Auto {
                budget: Some(budget),
            },
        }
    }

    /// `auto`'s budget (the default one where none is given); `None` for a fixed
    /// count.
    pub fn budget(self) -> Option<usize> {
        match self {
            Workers::Fixed(_) => None,
            Workers::Auto { budget } => {
                Some(budget.unwrap_or_else(LoaderConfig::default_cpu_budget))
            }
        }
    }

    /// The fewest decode threads this runs: the fixed count, or 1 for `auto`.
    pub fn min(self) -> usize {
        match self {
            Workers::Fixed(n) => n,
            Workers::Auto { .. } => 1,
        }
    }

    /// The most decode threads this may run: the fixed count, or `auto`'s budget.
    pub fn max(self) -> usize {
        self.budget().unwrap_or(self.min())
    }
}

impl std::str::FromStr for Workers {
    type Err = ParseSettingError;
    /// A whole number from 1 to [`MAX_WORKERS`], or `auto` (any case) within the
    /// default budget.
    fn from_str(s: &str) -> Result<Self, ParseSettingError> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Workers::AUTO);
        }
        match s.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(Workers::Fixed(n)),
            _ => Err(ParseSettingError::Workers {
                text: s.to_string(),
                max: MAX_WORKERS,
            }),
        }
    }
}

impl std::fmt::Display for Workers {
    /// The count, or `auto` (without its budget), as [`FromStr`](std::str::FromStr)
    /// reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Workers::Fixed(n) => write!(f, "{n}"),
            Workers::Auto { .. } => f.write_str("auto"),
        }
    }
}

/// A size in bytes: a whole number with an optional suffix K, M, G or T (powers of
/// 1024; `KB`, `KiB`, ... mean the same), as flags and Python arguments write it.
pub fn parse_size(s: &str) -> Result<u64, ParseSettingError> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let bad = || ParseSettingError::Size(s.to_string());
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| ParseSettingError::SizeOverflow(s.to_string()))
}

/// The bound of the decoded cache (see [`LoaderConfig::decoded_cache`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodedCacheSize {
    /// At most this many bytes, at least 1; with the batch buffers, within
    /// [`LoaderConfig::buffer_limit`].
    Bytes(u64),
    /// What the memory bound leaves once the batch buffers are counted.
    Auto,
}

impl std::str::FromStr for DecodedCacheSize {
    type Err = ParseSettingError;
    /// `auto` (any case), or a size of at least one byte ([`parse_size`]).
    fn from_str(s: &str) -> Result<Self, ParseSettingError> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(DecodedCacheSize::Auto);
        }
        match parse_size(s) {
            Ok(0) => Err(ParseSettingError::DecodedCache(s.to_string())),
            Ok(n) => Ok(DecodedCacheSize::Bytes(n)),
            Err(ParseSettingError::Size(_)) => Err(ParseSettingError::DecodedCache(s.to_string())),
            Err(e) => Err(e),
        }
    }
}

impl std::fmt::Display for DecodedCacheSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodedCacheSize::Bytes(n) => write!(f, "{n}"),
            DecodedCacheSize::Auto => f.write_str("auto"),
        }
    }
}

/// How to load. `Default` gives async reading with two workers.
#[derive(Clone, Debug)]
pub struct LoaderConfig {
    /// Samples per batch, 1..=[`MAX_BATCH_SIZE`] (default 64); an epoch's last batch
    /// may be shorter unless `drop_last` is set.
    pub batch_size: usize,
    /// Whether batches are made on the caller's thread or ahead of it by workers
    /// (default [`Mode::Async`]).
    pub mode: Mode,
    /// Decode+augment threads (async mode): a fixed count (default 2), or
    /// [`Workers::Auto`], a count chosen within a CPU budget.
    pub workers: Workers,
    /// Batches kept ready ahead of the consumer (async mode).
    pub prefetch: usize,
    /// Reads in flight (async mode).
    pub io_depth: usize,
    /// Seeds the shuffle and every sample's augmentation.
    pub seed: u64,
    /// Visit the samples in a new order each epoch, seeded by (seed, epoch)
    /// (default true); otherwise in source order.
    pub shuffle: bool,
    /// Leave out an epoch's last batch when it would be short (default false).
    pub drop_last: bool,
    /// This process's shard: its rank, in `0..world` (default 0).
    pub rank: usize,
    /// Number of processes that share the data, 1..=[`MAX_WORLD`] (default 1).
    pub world_size: usize,
    /// How the ranks' shards are made equal in length (default [`ShardPolicy::Pad`]).
    pub shard_policy: ShardPolicy,
    /// Samples in the shuffle buffer of a sharded source (tar shards); 1 reads each
    /// shard in order. See [`Sampler`].
    pub shuffle_buffer: usize,
    /// The transforms each decoded image goes through (default: none, the image as
    /// decoded).
    pub transform: Pipeline,
    /// Channels per image: `None` means 3 for encoded images and the record's own
    /// count for raw ones.
    pub channels: Option<usize>,
    /// What a sample that cannot be read or decoded does (default [`OnError::Fail`]).
    pub on_error: OnError,
    /// Stop preparing batches after this epoch (async mode prefetches into the next
    /// epoch otherwise).
    pub last_epoch: Option<u64>,
    /// Stream a Chrome trace of the stages to this file.
    pub trace: Option<std::path::PathBuf>,
    /// Images with more pixels are refused from their header, naming the file
    /// (default [`stoker_augment::DEFAULT_MAX_PIXELS`], 64 megapixels).
    pub max_pixels: usize,
    /// The most memory the batch buffers may take together (pool capacity times batch
    /// bytes); `None` means half of the memory this process may use ([`physical_memory`]: the
    /// least of MemTotal, cgroup limits and RLIMIT_AS; 16 GiB where none is known).
    pub max_buffer_bytes: Option<usize>,
    /// MixUp and/or CutMix on each finished batch, with soft labels (see
    /// [`crate::mixup`]); `None` leaves batches as they are.
    pub mixup: Option<crate::Mix>,
    /// The fields batches carry (see [`crate::sample`]): `None` means every field the
    /// source has but the instance masks (`masks`), which come only when listed. A
    /// field left out is not read at all.
    pub fields: Option<crate::Fields>,
    /// A box is dropped when less than this share of its area is left inside the
    /// output after the transforms (0: kept while any area is left).
    pub min_box_visibility: f32,
    /// The most boxes (and keypoint instances) kept per sample; `None`: all, or
    /// [`DEFAULT_MASK_INSTANCES`](crate::sample::DEFAULT_MASK_INSTANCES) when batches
    /// carry instance masks (each takes room in the batch buffer).
    pub max_instances: Option<usize>,
    /// The caller's own per-sample steps, run in order by the workers after the
    /// built-in transforms (see [`crate::step`]); with any, batches carry fields
    /// ([`crate::Batch::fields`]) even for a classification source.
    pub steps: Vec<crate::step::UserStep>,
    /// Keep each sample's decoded image (and its fields) after its first decode, up
    /// to this many bytes, so later epochs skip its read and decode and run only the
    /// transforms; counted with the batch buffers in [`buffer_limit`](Self::buffer_limit).
    /// `None` (default): no cache. Batches are the same bytes either way.
    pub decoded_cache: Option<DecodedCacheSize>,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            batch_size: 64,
            mode: Mode::Async,
            workers: Workers::Fixed(2),
            prefetch: 2,
            io_depth: 8,
            seed: 0,
            shuffle: true,
            drop_last: false,
            rank: 0,
            world_size: 1,
            shard_policy: ShardPolicy::Pad,
            shuffle_buffer: DEFAULT_SHUFFLE_BUFFER,
            transform: Pipeline::identity(),
            channels: None,
            on_error: OnError::Fail,
            last_epoch: None,
            trace: None,
            max_pixels: stoker_augment::DEFAULT_MAX_PIXELS,
            max_buffer_bytes: None,
            mixup: None,
            fields: None,
            min_box_visibility: 0.0,
            max_instances: None,
            steps: Vec::new(),
            decoded_cache: None,
        }
    }
}

impl LoaderConfig {
    /// The sampler these settings describe (shuffle, seed, rank, world, shard policy
    /// and shuffle buffer).
    pub fn sampler(&self) -> Sampler {
        Sampler {
            shuffle: self.shuffle,
            seed: self.seed,
            rank: self.rank,
            world_size: self.world_size,
            shard_policy: self.shard_policy,
            shuffle_buffer: self.shuffle_buffer,
        }
    }
}

/// The largest batch size accepted.
pub const MAX_BATCH_SIZE: usize = 1 << 20;
/// The most decode workers accepted.
pub const MAX_WORKERS: usize = 1024;
/// The most batches kept ready ahead accepted.
pub const MAX_PREFETCH: usize = 1024;
/// The most reads in flight accepted.
pub const MAX_IO_DEPTH: usize = 4096;
/// The largest world size accepted.
pub const MAX_WORLD: usize = 1 << 20;
/// The largest shuffle buffer accepted (samples).
pub const MAX_SHUFFLE_BUFFER: usize = 1 << 24;

/// An error about the setting `name`.
pub(crate) fn setting(name: Setting, reason: String) -> LoaderError {
    SettingError::new(name, reason).into()
}

fn in_range(name: Setting, value: usize, lo: usize, hi: usize) -> Result<(), LoaderError> {
    if value < lo || value > hi {
        return Err(setting(
            name,
            format!("{value} is out of range (expected {lo} to {hi})"),
        ));
    }
    Ok(())
}

impl LoaderConfig {
    /// Checks every setting on its own (not yet against the data): ranges, the
    /// sampler, and that async mode has workers, prefetch and io_depth.
    pub fn validate(&self) -> Result<(), LoaderError> {
        in_range(Setting::BatchSize, self.batch_size, 1, MAX_BATCH_SIZE)?;
        let min = usize::from(self.mode == Mode::Async);
        match self.workers {
            Workers::Auto { budget: Some(b) } => in_range(Setting::CpuBudget, b, 1, MAX_WORKERS)?,
            Workers::Auto { budget: None } => {}
            Workers::Fixed(n) => in_range(Setting::Workers, n, min, MAX_WORKERS)?,
        }
        in_range(Setting::Prefetch, self.prefetch, min, MAX_PREFETCH)?;
        in_range(Setting::IoDepth, self.io_depth, min, MAX_IO_DEPTH)?;
        in_range(Setting::WorldSize, self.world_size, 1, MAX_WORLD)?;
        in_range(
            Setting::ShuffleBuffer,
            self.shuffle_buffer,
            1,
            MAX_SHUFFLE_BUFFER,
        )?;
        if let Some(c) = self.channels {
            if c != 1 && c != 3 {
                return Err(setting(
                    Setting::Channels,
                    format!("must be 1 or 3, not {c}"),
                ));
            }
        }
        if self.max_pixels == 0 {
            return Err(setting(Setting::MaxPixels, "must be at least 1".into()));
        }
        if self.max_buffer_bytes == Some(0) {
            return Err(setting(
                Setting::MaxBufferBytes,
                "must be at least 1".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_box_visibility) {
            return Err(setting(
                Setting::MinBoxVisibility,
                format!("must be within 0..1, got {}", self.min_box_visibility),
            ));
        }
        if self.max_instances == Some(0) {
            return Err(setting(Setting::MaxInstances, "must be at least 1".into()));
        }
        if self.decoded_cache == Some(DecodedCacheSize::Bytes(0)) {
            return Err(setting(
                Setting::DecodedCache,
                "must be at least 1 byte (leave it out for no cache)".into(),
            ));
        }
        Ok(self.sampler().validate()?)
    }

    /// Batch buffers the pool may hold: 1 in sync mode; in async mode the ready
    /// batches, one per worker being filled, and the consumer's.
    pub fn pool_capacity(&self) -> usize {
        match self.mode {
            Mode::Sync => 1,
            Mode::Async => self.prefetch + self.max_workers() + 1,
        }
    }

    /// The most decode threads this configuration may run: the fixed count, or
    /// `auto`'s budget.
    pub fn max_workers(&self) -> usize {
        self.workers.max()
    }

    /// A CPU budget for [`Workers::Auto`] while a training step runs on this machine:
    /// every core but one, which is left to the step (and, on a GPU, to the thread that
    /// launches its kernels); at least one.
    pub fn default_cpu_budget() -> usize {
        Self::cores().saturating_sub(1).max(1)
    }

    /// The cores this process may use.
    pub fn cores() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// The memory bound in force: `max_buffer_bytes`, or half of [`physical_memory`].
    pub fn buffer_limit(&self) -> usize {
        self.max_buffer_bytes
            .unwrap_or_else(|| physical_memory().map_or(16 << 30, |m| m / 2))
    }

    /// Bytes of one batch buffer for images of (height, width, channels), checked
    /// against overflow and against [`buffer_limit`](Self::buffer_limit) for the
    /// whole pool. The error names the settings and the limit.
    pub fn batch_bytes(&self, (h, w, c): (usize, usize, usize)) -> Result<usize, LoaderError> {
        let too_big = |what: String| {
            setting(
                Setting::BatchSize,
                format!(
                    "{what}: batches of {} images of {h}x{w}x{c} do not fit (lower \
                     batch_size, prefetch or workers, or raise max_buffer_bytes)",
                    self.batch_size
                ),
            )
        };
        let limit = self.buffer_limit();
        let slot = h
            .checked_mul(w)
            .and_then(|n| n.checked_mul(c))
            .ok_or_else(|| too_big("one image's size overflows".into()))?;
        let batch = slot
            .checked_mul(self.batch_size)
            .ok_or_else(|| too_big("one batch's size overflows".into()))?;
        let pool = batch
            .checked_mul(self.pool_capacity())
            .filter(|&total| total <= limit)
            .ok_or_else(|| {
                too_big(format!(
                    "{} buffers of {batch} bytes exceed the limit of {limit} bytes",
                    self.pool_capacity()
                ))
            })?;
        debug_assert!(pool >= batch);
        Ok(batch)
    }
}

impl LoaderConfig {
    /// The bytes the decoded cache may hold next to `pool_bytes` of batch buffers:
    /// `None` without a cache; an error naming both numbers when the asked size does
    /// not fit in [`buffer_limit`](Self::buffer_limit) beside the buffers.
    pub fn decoded_cache_bytes(&self, pool_bytes: usize) -> Result<Option<u64>, LoaderError> {
        let limit = self.buffer_limit();
        let left = limit.saturating_sub(pool_bytes) as u64;
        match self.decoded_cache {
            None => Ok(None),
            Some(DecodedCacheSize::Auto) => Ok(Some(left)),
            Some(DecodedCacheSize::Bytes(n)) if n <= left => Ok(Some(n)),
            Some(DecodedCacheSize::Bytes(n)) => Err(setting(
                Setting::DecodedCache,
                format!(
                    "{n} bytes do not fit in the memory bound of {limit} bytes beside the \
                     batch buffers' {pool_bytes} bytes ({left} bytes are left: lower \
                     decoded_cache or use auto, or raise max_buffer_bytes)"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_from_text_or_say_which_value_is_unknown() {
        use crate::{Field, Fields, Stop};
        assert_eq!("sync".parse(), Ok(Mode::Sync));
        assert_eq!("skip".parse(), Ok(OnError::Skip));
        assert_eq!(" Auto ".parse(), Ok(Workers::AUTO));
        assert_eq!("3".parse(), Ok(Workers::Fixed(3)));
        // Each error keeps the text as given, for a caller to match on, and says what
        // the setting takes, in the words it always used.
        let cases: [(ParseSettingError, ParseSettingError, &str); 6] = [
            (
                "fast".parse::<Mode>().unwrap_err(),
                ParseSettingError::Mode("fast".into()),
                "unknown mode 'fast' (expected sync or async)",
            ),
            (
                "retry".parse::<OnError>().unwrap_err(),
                ParseSettingError::OnError("retry".into()),
                "unknown error policy 'retry' (expected fail or skip)",
            ),
            (
                "0".parse::<Workers>().unwrap_err(),
                ParseSettingError::Workers {
                    text: "0".into(),
                    max: MAX_WORKERS,
                },
                "'0' is neither 'auto' nor a whole number from 1 to 1024",
            ),
            (
                " Shapes".parse::<Field>().unwrap_err(),
                ParseSettingError::Field {
                    name: "shapes".into(),
                    known: Field::ALL.iter().map(|f| f.name()).collect(),
                },
                "unknown field 'shapes' (known: image, label, labels, text, boxes, mask, \
                 keypoints, raw, masks)",
            ),
            (
                "image,boxs".parse::<Fields>().unwrap_err(),
                ParseSettingError::Field {
                    name: "boxs".into(),
                    known: Field::ALL.iter().map(|f| f.name()).collect(),
                },
                "unknown field 'boxs'",
            ),
            (
                "later".parse::<Stop>().unwrap_err(),
                ParseSettingError::Stop("later".into()),
                "stop must be first_exhausted, all_exhausted or never, not \"later\"",
            ),
        ];
        for (got, want, text) in cases {
            assert_eq!(got, want);
            assert!(got.to_string().starts_with(text), "{got}");
        }
    }

    #[test]
    fn workers_are_a_count_or_auto_within_a_budget() {
        assert_eq!(Workers::Fixed(3).max(), 3);
        assert_eq!(Workers::Fixed(3).with_budget(8), Workers::Fixed(3));
        let auto = Workers::AUTO.with_budget(8);
        assert_eq!(auto, Workers::Auto { budget: Some(8) });
        assert_eq!((auto.min(), auto.max()), (1, 8));
        assert_eq!(
            Workers::AUTO.budget(),
            Some(LoaderConfig::default_cpu_budget())
        );
        assert_eq!(auto.to_string().parse(), Ok(Workers::AUTO));
        let cfg = LoaderConfig {
            workers: auto,
            ..LoaderConfig::default()
        };
        assert_eq!(cfg.max_workers(), 8);
        assert_eq!(cfg.pool_capacity(), 2 + 8 + 1);
        let bad = LoaderConfig {
            workers: Workers::Auto { budget: Some(0) },
            ..LoaderConfig::default()
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(e.setting(), Some(Setting::CpuBudget), "{e}");
    }

    #[test]
    fn absurd_settings_name_themselves() {
        let cases: Vec<(LoaderConfig, &str)> = vec![
            (
                LoaderConfig {
                    batch_size: 0,
                    ..Default::default()
                },
                "batch_size",
            ),
            (
                LoaderConfig {
                    batch_size: 6_004_799_503_160_662,
                    ..Default::default()
                },
                "batch_size",
            ),
            (
                LoaderConfig {
                    workers: Workers::Fixed(0),
                    ..Default::default()
                },
                "workers",
            ),
            (
                LoaderConfig {
                    workers: Workers::Fixed(100_000_000),
                    ..Default::default()
                },
                "workers",
            ),
            (
                LoaderConfig {
                    prefetch: 100_000_000_000,
                    ..Default::default()
                },
                "prefetch",
            ),
            (
                LoaderConfig {
                    io_depth: 0,
                    ..Default::default()
                },
                "io_depth",
            ),
            (
                LoaderConfig {
                    io_depth: usize::MAX,
                    ..Default::default()
                },
                "io_depth",
            ),
            (
                LoaderConfig {
                    world_size: 0,
                    ..Default::default()
                },
                "world",
            ),
            (
                LoaderConfig {
                    shuffle_buffer: 0,
                    ..Default::default()
                },
                "shuffle_buffer",
            ),
            (
                LoaderConfig {
                    channels: Some(2),
                    ..Default::default()
                },
                "channels",
            ),
            (
                LoaderConfig {
                    max_pixels: 0,
                    ..Default::default()
                },
                "max_pixels",
            ),
        ];
        for (cfg, name) in cases {
            let e = cfg.validate().expect_err(name).to_string();
            assert!(e.contains(name), "{e}");
        }
        // Sync mode takes no workers.
        let sync = LoaderConfig {
            mode: Mode::Sync,
            workers: Workers::Fixed(0),
            prefetch: 0,
            ..Default::default()
        };
        sync.validate().unwrap();
    }

    #[test]
    fn decoded_cache_sizes_parse_and_must_fit_beside_the_buffers() {
        assert_eq!("256M".parse(), Ok(DecodedCacheSize::Bytes(256 << 20)));
        assert_eq!(" AUTO ".parse(), Ok(DecodedCacheSize::Auto));
        assert_eq!("4096".parse(), Ok(DecodedCacheSize::Bytes(4096)));
        for bad in ["", "0", "1.5G", "12X", "-1M", "M"] {
            let e = bad.parse::<DecodedCacheSize>().unwrap_err();
            assert_eq!(e, ParseSettingError::DecodedCache(bad.into()), "{bad}");
        }
        let e = "99999999T".parse::<DecodedCacheSize>().unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        let cfg = |size| LoaderConfig {
            max_buffer_bytes: Some(1 << 20),
            decoded_cache: size,
            ..Default::default()
        };
        assert_eq!(cfg(None).decoded_cache_bytes(1000).unwrap(), None);
        let auto = cfg(Some(DecodedCacheSize::Auto));
        assert_eq!(
            auto.decoded_cache_bytes(1000).unwrap(),
            Some((1 << 20) - 1000)
        );
        let fits = cfg(Some(DecodedCacheSize::Bytes((1 << 20) - 1000)));
        assert_eq!(
            fits.decoded_cache_bytes(1000).unwrap(),
            Some((1 << 20) - 1000)
        );
        let over = cfg(Some(DecodedCacheSize::Bytes(1 << 20)));
        let e = over.decoded_cache_bytes(1000).unwrap_err().to_string();
        assert!(
            e.contains("decoded_cache: 1048576 bytes")
                && e.contains("memory bound of 1048576 bytes")
                && e.contains("1000 bytes"),
            "{e}"
        );
        let zero = cfg(Some(DecodedCacheSize::Bytes(0)));
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("decoded_cache"));
    }

    #[test]
    fn batch_bytes_overflow_and_limit_are_errors() {
        let cfg = LoaderConfig {
            batch_size: 1 << 20,
            ..Default::default()
        };
        let e = cfg
            .batch_bytes((1 << 32, 1 << 32, 3))
            .unwrap_err()
            .to_string();
        assert!(e.contains("one image's size overflows"), "{e}");
        // 2^20 x (2^22 x 2^21 x 3) overflows 64 bits.
        let e = cfg
            .batch_bytes((1 << 22, 1 << 21, 3))
            .unwrap_err()
            .to_string();
        assert!(e.contains("one batch's size overflows"), "{e}");
        let cfg = LoaderConfig {
            batch_size: 64,
            max_buffer_bytes: Some(1 << 20),
            ..Default::default()
        };
        // 5 buffers (2 + 2 + 1) of 64 x 32 x 32 x 3 = 196,608 bytes: 983,040 fits.
        assert_eq!(cfg.batch_bytes((32, 32, 3)).unwrap(), 196_608);
        let e = cfg.batch_bytes((40, 32, 3)).unwrap_err().to_string();
        assert!(e.contains("exceed the limit of 1048576 bytes"), "{e}");
    }
}
