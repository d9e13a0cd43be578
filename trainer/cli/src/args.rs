//! The command line of `stoker-train`: every flag, its default and its check.

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Parser, ValueEnum};
use stoker_loader::cli_args::{count, MixtureArgs, OpenArgs, ReadArgs};
use stoker_loader::config::{MAX_PREFETCH, MAX_WORKERS};
use stoker_loader::{Mode, Workers};
use stoker_trainer::{DevicePref, ModelKind, OptimizerKind, ParseDeviceError, Precision};

use crate::cluster::Engine;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Opt {
    Sgd,
    Adamw,
}

/// What to learn from each sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetArg {
    /// `labels` when the data has multi-label tags and no class, else `class`.
    Auto,
    /// One class per sample: softmax cross-entropy, top-1 accuracy.
    Class,
    /// The set of tags in `labels`: sigmoid + binary cross-entropy; exact-match ratio,
    /// mean average precision and F1.
    Labels,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    Mlp,
    Convnet,
    Resnet,
}

#[derive(Parser, Debug)]
#[command(
    name = "stoker-train",
    version,
    about = "Train a small model with the stoker loader and show how long the step waits for data.",
    long_about = "Train a small model with the stoker loader and show how long the step waits \
                  for data.\n\nWith no --data: make the demo set (10 classes of shapes, 32x32 \
                  px, 10000 training and 2000 validation images) in the stoker cache folder \
                  ($STOKER_CACHE, else $XDG_CACHE_HOME/stoker, else ~/.cache/stoker) if it is \
                  missing, and train the convnet on it. With --target labels and no --data: \
                  the multi-label demo instead (scenes of 1 to 4 shapes, 32x32 px, each \
                  image tagged with the shapes it shows), with SGD at lr 1.0 unless --lr \
                  says otherwise."
)]
pub struct Args {
    /// Training data: an image folder (one sub-folder per class), a packed file, tar
    /// shards (a folder of them or a pattern like train-{000000..000127}.tar), MNIST /
    /// CIFAR-10 files, or any of these behind a URL (s3://, gs://, az://, http(s)://,
    /// file://). Default: the demo set.
    /// Give it again to mix several data sets (with --weights and --stop).
    #[arg(long)]
    pub data: Vec<PathBuf>,
    // Mixing several --data sets: --weights, --stop, --epoch-batches.
    #[command(flatten)]
    pub mixing: MixtureArgs,
    /// Validation data (default: the demo's, or the test split of MNIST / CIFAR-10).
    #[arg(long)]
    pub val: Option<PathBuf>,
    // How the data sets are opened (the same flags as stoker-load's): COCO's
    // --images, --masks, Parquet's columns, --split, --mmap, --cache.
    #[command(flatten)]
    pub open: OpenArgs,
    // How samples are read: --on-error, --io-depth, --max-pixels, --decoded-cache
    // (of the training set), --shuffle-buffer.
    #[command(flatten)]
    pub read: ReadArgs,
    /// Training augmentation, e.g. 'rrc:32,flip' (default: the demo's for the demo
    /// set, none otherwise).
    #[arg(long)]
    pub transform: Option<String>,
    /// MixUp on every training batch, with this Beta alpha (e.g. 0.2): images blended
    /// with their neighbour in the batch, soft labels for the loss.
    #[arg(long, value_parser = parse_alpha)]
    pub mixup: Option<f64>,
    /// CutMix on every training batch, with this Beta alpha (e.g. 1.0).
    #[arg(long, value_parser = parse_alpha)]
    pub cutmix: Option<f64>,
    /// With both --mixup and --cutmix: the chance that a batch uses CutMix (default 0.5).
    #[arg(long, value_parser = parse_probability)]
    pub mix_prob: Option<f64>,
    /// What to train on: `class` (one per sample, softmax cross-entropy), `labels`
    /// (multi-label tags, sigmoid + binary cross-entropy, reported as the exact-match
    /// ratio, mAP and micro/macro F1), or `auto`: `labels` when the data has tags and
    /// no class.
    #[arg(long, value_enum, default_value_t = TargetArg::Auto)]
    pub target: TargetArg,
    /// Label smoothing of the training loss (0 to below 1; e.g. 0.1).
    #[arg(long, default_value_t = 0.0, value_parser = parse_smoothing)]
    pub label_smoothing: f32,
    /// Validation transform (default: none, or resize + centre crop to the training
    /// size when the images differ).
    #[arg(long)]
    pub val_transform: Option<String>,
    #[arg(long, value_enum, default_value_t = Arch::Convnet)]
    pub model: Arch,
    #[arg(long, default_value_t = 6, value_parser = count::<1, 1_000_000, u64>)]
    pub epochs: u64,
    #[arg(long, default_value_t = 128, value_parser = count::<1, 65_536, usize>)]
    pub batch_size: usize,
    /// Peak learning rate (default: 0.1 for sgd, 1.0 for sgd on the multi-label demo,
    /// 0.003 for adamw), reached after a warm-up and followed by a cosine decay.
    #[arg(long, value_parser = parse_lr)]
    pub lr: Option<f32>,
    #[arg(long, value_enum, default_value_t = Opt::Sgd)]
    pub optimizer: Opt,
    #[arg(long, default_value_t = 5e-4, value_parser = parse_weight_decay)]
    pub weight_decay: f32,
    /// sync: the step waits while its batch is read and decoded; async: batches are
    /// prepared by worker threads ahead of the step (double-buffered).
    #[arg(long, alias = "mode", default_value_t = Mode::Async)]
    pub reader: Mode,
    /// Decode and augment threads (async reader): a number, or `auto` to choose during
    /// the first epoch from how long the step waits for data, under --cpu-budget.
    #[arg(long, default_value_t = Workers::AUTO)]
    pub workers: Workers,
    /// Threads `--workers auto` may use (default: every core but one, left to the
    /// training step and to the thread that drives the GPU).
    #[arg(long, value_parser = count::<1, { MAX_WORKERS as u64 }, usize>)]
    pub cpu_budget: Option<usize>,
    /// Batches prepared ahead (async reader).
    #[arg(long, default_value_t = 2, value_parser = count::<1, { MAX_PREFETCH as u64 }, usize>)]
    pub prefetch: usize,
    /// auto (CUDA device 0 when usable, else the CPU, saying why), cpu, cuda or cuda:N
    /// (an error when that device is not usable). With several ranks, auto and cuda
    /// mean the device numbered by the rank on its machine (LOCAL_RANK).
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    pub device: String,
    /// The step's arithmetic: f32, or bf16 autocast (bf16 operands for the
    /// convolutions and matrix products, f32 accumulation, f32 weights, optimizer,
    /// loss and batch norm). bf16 needs a CUDA device; the CPU trains in f32.
    #[arg(long, default_value_t = Precision::F32, value_parser = parse_precision())]
    pub precision: Precision,
    /// Seeds the weights, the shuffle and the augmentation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Read the loss back every this many steps (each read waits for the device).
    #[arg(long, default_value_t = 20, value_parser = count::<1, 1_000_000_000, u64>)]
    pub log_every: u64,
    /// Stop after this many steps in total (a checkpoint, if asked for, is written).
    #[arg(long, value_parser = count::<1, { u64::MAX }, u64>)]
    pub max_steps: Option<u64>,
    /// Write a checkpoint (safetensors: model, optimizer and loader state) after every
    /// epoch and at the end.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Continue the run a checkpoint stopped, exactly where it stopped.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Print one JSON object at the end (progress lines go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Draw the training curves and the data wait per step into FILE (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Train twice, once with each reader, and compare them side by side.
    #[arg(long)]
    pub compare_readers: bool,
    /// This process's rank in a data-parallel run (default: from mpirun's
    /// OMPI_COMM_WORLD_RANK, or RANK; must agree with them). Launch the ranks with
    /// mpirun; each trains on its shard of every epoch with batch --batch-size.
    #[arg(long, requires = "world_size", value_parser = count::<0, 65_535, usize>)]
    pub rank: Option<usize>,
    /// Number of processes in a data-parallel run (default: OMPI_COMM_WORLD_SIZE, or
    /// WORLD_SIZE, else 1).
    #[arg(long, requires = "rank", value_parser = count::<1, 65_536, usize>)]
    pub world_size: Option<usize>,
    /// What averages the gradients across ranks.
    #[arg(long, value_enum, default_value_t = Engine::Auto)]
    pub collective: Engine,
    /// Seconds a rank waits in a gradient exchange for the others before it gives up
    /// and ends the job (a rank that died or hangs).
    #[arg(long, default_value_t = stoker_trainer::collective::DEFAULT_TIMEOUT.as_secs_f64(), value_parser = parse_timeout)]
    pub collective_timeout: f64,
    /// Set when this process is not rank 0: it prints only errors.
    #[arg(skip)]
    pub quiet: bool,
}

/// A fingerprint of the settings every rank of a run must share (see `run`).
pub fn settings_fingerprint(a: &Args) -> u64 {
    let text = format!(
        "{:?} {:?} {:?} {} {:?} {:?} {} {}",
        a.model,
        a.optimizer,
        a.lr.map(f32::to_bits),
        a.weight_decay.to_bits(),
        a.transform,
        a.val_transform,
        a.compare_readers,
        a.resume.is_some()
    );
    // Appended only when set, so that runs without them keep their fingerprint.
    let plain =
        a.mixup.is_none() && a.cutmix.is_none() && a.mix_prob.is_none() && a.label_smoothing == 0.0;
    // Likewise the precision: ranks in different arithmetic would drift apart.
    let text = match a.precision {
        Precision::F32 => text,
        p => format!("{text} precision={p}"),
    };
    // Likewise the target: auto resolves from the data, which the ranks compare.
    let text = match a.target {
        TargetArg::Auto => text,
        t => format!("{text} target={t:?}"),
    };
    let text = if plain {
        text
    } else {
        format!(
            "{text} {:?} {:?} {:?} {}",
            a.mixup,
            a.cutmix,
            a.mix_prob,
            a.label_smoothing.to_bits()
        )
    };
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// `--precision`'s values, listed by `--help` from the library's own list.
fn parse_precision() -> impl clap::builder::TypedValueParser<Value = Precision> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Precision::ALL.map(Precision::as_str))
        .try_map(|s| s.parse::<Precision>())
}

fn parse_device(s: &str) -> Result<String, ParseDeviceError> {
    DevicePref::from_str(s).map(|_| s.to_string())
}

/// The longest collective deadline: a week. Longer is a typo, and would overflow
/// the deadline arithmetic.
const MAX_TIMEOUT_S: f64 = 7.0 * 86_400.0;

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= MAX_TIMEOUT_S => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from 0 (excluded) to {MAX_TIMEOUT_S}"
        )),
    }
}

/// A finite number in `lo..=hi` (`lo` itself excluded when `open_lo`).
fn number(s: &str, lo: f64, hi: f64, open_lo: bool) -> Result<f32, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    let above = if open_lo { v > lo } else { v >= lo };
    if !(above && v <= hi) {
        let low = if open_lo { "above" } else { "from" };
        return Err(format!("{s} is out of range (expected {low} {lo} to {hi})"));
    }
    Ok(v as f32)
}

fn parse_lr(s: &str) -> Result<f32, String> {
    number(s, 0.0, 100.0, true)
}

fn parse_weight_decay(s: &str) -> Result<f32, String> {
    number(s, 0.0, 1.0, false)
}

/// A Beta alpha for MixUp/CutMix: above 0, at most 1000.
fn parse_alpha(s: &str) -> Result<f64, String> {
    number(s, 0.0, 1000.0, true).map(f64::from)
}

fn parse_probability(s: &str) -> Result<f64, String> {
    number(s, 0.0, 1.0, false).map(f64::from)
}

/// Label smoothing in [0, 1).
fn parse_smoothing(s: &str) -> Result<f32, String> {
    let v = number(s, 0.0, 1.0, false)?;
    if v >= 1.0 {
        return Err(format!("{s} is out of range (expected from 0 to below 1)"));
    }
    Ok(v)
}

impl Opt {
    /// The update rule, with this run's weight decay.
    pub fn kind(self, weight_decay: f32) -> OptimizerKind {
        match self {
            Opt::Sgd => OptimizerKind::sgd(0.9, weight_decay),
            Opt::Adamw => OptimizerKind::adamw(weight_decay),
        }
    }
}

impl Arch {
    pub fn kind(self) -> ModelKind {
        match self {
            Arch::Mlp => ModelKind::Mlp,
            Arch::Convnet => ModelKind::Convnet,
            Arch::Resnet => ModelKind::Resnet,
        }
    }
}

impl Args {
    /// A progress line: to stdout, or stderr when stdout carries JSON; rank 0 only.
    pub fn say(&self, s: &str) {
        if self.quiet {
        } else if self.json {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    }
}
