//! `stoker-load bench DATA`: images/s, MB/s, consumer wait and per-stage busy time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use stoker_augment::Pipeline;
use stoker_loader::cli_args::{self, ReadArgs};
use stoker_loader::spec::{DataSpec, LoaderSpec, SourceSpec};
use stoker_loader::{source, Digest, LoaderConfig, Mode, Workers};

use crate::args;
use crate::data::DataArgs;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// An image folder, a packed file, tar shards (a .tar, a folder of them, or a
    /// pattern like train-{000000..000127}.tar), an MNIST/CIFAR set, or any of these
    /// behind a URL (s3://, gs://, az://, http(s)://, file://).
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub mixture: DataSets,
    #[command(flatten)]
    pub source: DataArgs,
    #[command(flatten)]
    pub read: ReadArgs,
    #[arg(long, default_value = "async")]
    pub mode: Mode,
    /// Decode threads: a number, or `auto` to choose during the first epoch from how
    /// long the consumer waits, under --cpu-budget.
    #[arg(long, default_value_t = Workers::Fixed(2))]
    pub workers: Workers,
    /// Threads `--workers auto` may use (default: every core; no training step runs
    /// here, and --compute-ms only sleeps).
    #[arg(long, value_parser = args::cpu_budget)]
    pub cpu_budget: Option<usize>,
    #[arg(long, default_value_t = 2, value_parser = args::prefetch)]
    pub prefetch: usize,
    #[arg(long, default_value_t = 64, value_parser = args::batch_size)]
    pub batch_size: usize,
    /// Transform spec, e.g. `rrc:224,flip` or `resize:256,center:224`.
    #[arg(long, default_value = "")]
    pub transform: String,
    #[arg(long, default_value_t = 1, value_parser = args::epochs)]
    pub epochs: u64,
    /// Sleep this long per batch, to imitate a training step.
    #[arg(long, default_value_t = 0.0, value_parser = args::millis)]
    pub compute_ms: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Visit samples in order instead of shuffled.
    #[arg(long)]
    pub no_shuffle: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Tokens/s of the token loader instead of images/s: the tokenizer.json that
    /// encodes DATA's texts (Parquet, JSON lines, text files; docs/tokens.md).
    #[arg(long, value_name = "TOKENIZER")]
    pub tokens: Option<PathBuf>,
    /// With --tokens: tokens each window predicts.
    #[arg(long, default_value_t = 1024, value_parser = args::seq_len)]
    pub seq_len: usize,
    /// Add a hash of every batch's images and labels, to compare runs.
    #[arg(long)]
    pub digest: bool,
    /// Write a Chrome trace (open in Perfetto) of the stages.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// The fields to load, e.g. `image,boxes,masks` (default: every field the data has
    /// but the instance masks, `masks`, which come only when listed).
    #[arg(long, value_parser = args::fields)]
    pub fields: Option<stoker_loader::Fields>,
}

/// Several data sets mixed by weight (`--data A --data B --weights 7,3`).
#[derive(clap::Args, Clone, Default)]
pub struct DataSets {
    /// A data set to mix (repeat the flag: one per data set; with DATA, it comes
    /// first).
    #[arg(long = "data", value_name = "DATA")]
    pub more_data: Vec<PathBuf>,
    #[command(flatten)]
    pub mixing: cli_args::MixtureArgs,
}

impl DataSets {
    /// `data` (the positional data set, if any) and the `--data` ones, each opened
    /// with `options`, as the data part of a loader's spec.
    pub fn spec(
        &self,
        data: Option<&std::path::Path>,
        options: &source::OpenOptions,
    ) -> anyhow::Result<DataSpec> {
        let sources: Vec<SourceSpec> = data
            .into_iter()
            .chain(self.more_data.iter().map(|p| p.as_path()))
            .map(|p| SourceSpec {
                path: p.to_path_buf(),
                options: options.clone(),
            })
            .collect();
        if sources.is_empty() {
            anyhow::bail!("no data: give DATA or --data (once per data set to mix)");
        }
        Ok(DataSpec {
            sources,
            weights: self.mixing.weights.clone().map(|w| w.0),
            stop: self.mixing.stop,
            epoch_batches: self.mixing.epoch_batches(),
        })
    }

    /// The data sets, for messages.
    pub fn describe(&self, data: Option<&std::path::Path>) -> String {
        data.into_iter()
            .chain(self.more_data.iter().map(|p| p.as_path()))
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// What `--workers auto` chose and when.
#[derive(Serialize, Clone, Debug)]
pub struct AutoReport {
    pub cpu_budget: usize,
    pub workers: usize,
    pub prefetch: usize,
    pub io_depth: usize,
    pub changes: Vec<stoker_loader::pipeline::tune::AutoChange>,
}

/// What the decoded cache did (`--decoded-cache`).
#[derive(Serialize, Clone, Debug)]
pub struct DecodedCacheReport {
    /// The most bytes it may hold.
    pub capacity_bytes: u64,
    /// Bytes it holds at the end of the run.
    pub held_bytes: u64,
    /// Samples taken from it (neither read nor decoded).
    pub hits: u64,
    /// Samples read and decoded.
    pub misses: u64,
    /// Of the misses, those decoded through a libjpeg-turbo crop window (not kept).
    pub windowed: u64,
    /// Of the misses, those it had no room left for.
    pub no_room: u64,
}

/// What a bench run measured. Field names are a contract (`--json`).
#[derive(Serialize, Clone, Debug)]
pub struct Report {
    /// The JPEG decoder of this build (`libjpeg-turbo 2.1.5` or `zune-jpeg`).
    pub decoder: String,
    pub mode: Mode,
    /// Decode threads at the end of the run (what auto chose, when it was on).
    pub workers: usize,
    /// What `--workers auto` did, when it was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoReport>,
    pub prefetch: usize,
    pub io_depth: usize,
    pub batch_size: usize,
    pub transform: String,
    pub epochs: u64,
    pub samples: u64,
    pub skipped: u64,
    pub wall_seconds: f64,
    pub epoch_seconds: f64,
    pub images_per_sec: f64,
    pub mb_per_sec: f64,
    pub wait_seconds: f64,
    pub wait_share: f64,
    pub compute_seconds: f64,
    pub read_seconds: f64,
    pub decode_seconds: f64,
    pub collate_seconds: f64,
    pub mean_queue_len: f64,
    pub peak_buffer_bytes: usize,
    pub memory_bound_bytes: usize,
    pub peak_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The decoded cache, when it was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoded_cache: Option<DecodedCacheReport>,
}

/// Runs the loader over `a.epochs` epochs and measures it.
pub fn measure(a: &Args) -> anyhow::Result<Report> {
    let data = a.mixture.spec(a.data.as_deref(), &a.source.options())?;
    let cfg = LoaderConfig {
        batch_size: a.batch_size,
        mode: a.mode,
        workers: a
            .workers
            .with_budget(a.cpu_budget.unwrap_or_else(LoaderConfig::cores)),
        prefetch: a.prefetch,
        io_depth: a.read.io_depth,
        seed: a.seed,
        shuffle: !a.no_shuffle,
        shuffle_buffer: a.read.shuffle_buffer,
        transform: Pipeline::parse(&a.transform)?,
        on_error: a.read.on_error,
        last_epoch: Some(a.epochs.saturating_sub(1)),
        trace: a.trace.clone(),
        max_pixels: a.read.max_pixels,
        fields: a.fields,
        decoded_cache: a.read.decoded_cache,
        ..LoaderConfig::default()
    };
    let mut loader = LoaderSpec::from_config(data, &cfg).build()?;
    let compute = Duration::from_secs_f64(a.compute_ms.max(0.0) / 1e3);
    let mut digest = a.digest.then(Digest::new);
    let bar = crate::progress_bar(
        loader.batches_per_epoch() as u64 * a.epochs,
        &a.mode.to_string(),
    );
    let t0 = Instant::now();
    let mut compute_total = Duration::ZERO;
    for e in 0..a.epochs {
        let mut epoch = loader.epoch(e);
        while let Some(b) = epoch.next() {
            let b = b.with_context(|| format!("epoch {e}"))?;
            if let Some(d) = digest.as_mut() {
                d.update(&b);
            }
            if !compute.is_zero() {
                let c0 = Instant::now();
                std::thread::sleep(compute);
                compute_total += c0.elapsed();
                if let Some(tr) = epoch.trace() {
                    tr.span("compute", c0, None);
                }
            }
            bar.inc(1);
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let m = loader.metrics();
    if let (Some(path), Some(tr)) = (&a.trace, loader.trace()) {
        tr.finish()
            .with_context(|| format!("writing trace {}", path.display()))?;
    }
    Ok(Report {
        decoder: stoker_augment::decoder(),
        mode: a.mode,
        workers: match (a.mode, loader.auto_workers()) {
            (Mode::Sync, _) => 0,
            (_, Some(auto)) => auto.workers(),
            (_, None) => loader.config().workers.min(),
        },
        auto: loader.auto_workers().map(|auto| AutoReport {
            cpu_budget: auto.budget,
            workers: auto.workers(),
            prefetch: a.prefetch,
            io_depth: auto.io_depth(),
            changes: auto.changes(),
        }),
        prefetch: a.prefetch,
        io_depth: match (a.mode, loader.auto_workers()) {
            (Mode::Async, Some(auto)) => auto.io_depth(),
            _ => a.read.io_depth,
        },
        batch_size: a.batch_size,
        transform: a.transform.clone(),
        epochs: a.epochs,
        samples: m.samples,
        skipped: m.skipped,
        wall_seconds: wall,
        epoch_seconds: wall / a.epochs.max(1) as f64,
        images_per_sec: m.samples as f64 / wall,
        mb_per_sec: m.bytes_read as f64 / 1e6 / wall,
        wait_seconds: m.wait_seconds,
        wait_share: m.wait_seconds / wall,
        compute_seconds: compute_total.as_secs_f64(),
        read_seconds: m.read_seconds,
        decode_seconds: m.decode_seconds,
        collate_seconds: m.collate_seconds,
        mean_queue_len: m.mean_queue_len,
        peak_buffer_bytes: loader.peak_buffer_bytes(),
        memory_bound_bytes: loader.memory_bound_bytes(),
        peak_rss_bytes: peak_rss(),
        digest: digest.map(|d| d.hex()),
        decoded_cache: loader
            .decoded_cache_capacity()
            .map(|capacity_bytes| DecodedCacheReport {
                capacity_bytes,
                held_bytes: m.decoded_cache_bytes,
                hits: m.decoded_cache_hits,
                misses: m.decoded_cache_misses,
                windowed: m.decoded_cache_windowed,
                no_room: m.decoded_cache_no_room,
            }),
    })
}

/// The process's peak resident set size (Linux only).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn print_table(rows: &[(&str, &Report)]) {
    println!(
        "{:<10} {:>9} {:>8} {:>9} {:>8} {:>7} {:>8} {:>9} {:>9} {:>7} {:>10}",
        "run",
        "images/s",
        "MB/s",
        "epoch s",
        "wait s",
        "wait%",
        "read s",
        "decode s",
        "collate s",
        "queue",
        "buffers MB"
    );
    for (name, r) in rows {
        println!(
            "{:<10} {:>9.1} {:>8.1} {:>9.3} {:>8.3} {:>6.1}% {:>8.3} {:>9.3} {:>9.3} {:>7.2} {:>10.1}",
            name,
            r.images_per_sec,
            r.mb_per_sec,
            r.epoch_seconds,
            r.wait_seconds,
            100.0 * r.wait_share,
            r.read_seconds,
            r.decode_seconds,
            r.collate_seconds,
            r.mean_queue_len,
            r.peak_buffer_bytes as f64 / 1e6,
        );
    }
}

/// The decoded cache's line, and why samples were not kept.
fn print_decoded_cache(c: &DecodedCacheReport) {
    println!(
        "decoded cache: {} hits, {} misses; holds {:.1} MB of {:.1} MB",
        c.hits,
        c.misses,
        c.held_bytes as f64 / 1e6,
        c.capacity_bytes as f64 / 1e6,
    );
    if c.windowed > 0 {
        println!(
            "  {} decodes not kept: their first step (rrc or resize) decoded only part of a \
             JPEG (libjpeg-turbo's crop window), which a kept whole decode would not give \
             byte for byte; to decode once, pack the images as raw pixels",
            c.windowed
        );
    }
    if c.no_room > 0 {
        println!(
            "  {} decodes not kept: the cache was full (first come first kept; a larger \
             --decoded-cache or --decoded-cache auto holds more)",
            c.no_room
        );
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if let Some(t) = &a.tokens {
        return crate::tokens::run(&a, t);
    }
    let r = measure(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "{}: mode {}, workers {}, batch {}, transform '{}', {} epoch(s), compute {} ms/batch, JPEG decoder {}",
        a.mixture.describe(a.data.as_deref()),
        r.mode,
        r.workers,
        r.batch_size,
        r.transform,
        r.epochs,
        a.compute_ms,
        r.decoder
    );
    print_table(&[(&r.mode.to_string(), &r)]);
    println!(
        "{} samples, {} skipped; consumer waited {:.1}% of the time; buffers bounded by {:.1} MB; peak RSS {}",
        r.samples,
        r.skipped,
        100.0 * r.wait_share,
        r.memory_bound_bytes as f64 / 1e6,
        r.peak_rss_bytes.map_or("?".into(), |b| format!("{:.1} MB", b as f64 / 1e6)),
    );
    if let Some(c) = &r.decoded_cache {
        print_decoded_cache(c);
    }
    if let Some(d) = &r.digest {
        println!("digest {d}");
    }
    if let Some(t) = &a.trace {
        println!(
            "trace written to {} (open it in Perfetto or chrome://tracing)",
            t.display()
        );
    }
    Ok(())
}
