//! `stoker-train`: train a small model on a folder of images (or MNIST / CIFAR-10 /
//! packed files), reading with the stoker loader in sync or async mode, and show how
//! much of the time the step waited for data. With no `--data` it makes a demo set of
//! shapes in the cache folder and trains on it.

mod cluster;
mod data;
mod demo;

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use stoker_loader::Mode;
use stoker_trainer::report::{self, CompareRow, Console, RunInfo};
use stoker_trainer::train::Observer;
use stoker_trainer::train::{History, Stop, TrainConfig, Trainer};
use stoker_trainer::{
    feed, select_device, Backend, BatchFeed, Collective, CpuBackend, CudaBackend, DevicePref,
    HostFeed, Launch, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Schedule,
    SelectedDevice,
};

use cluster::{Cluster, Engine};
use data::{Data, Reading};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Opt {
    Sgd,
    Adamw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Arch {
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
                  missing, and train the convnet on it."
)]
struct Args {
    /// Training data: an image folder (one sub-folder per class), a packed file, or
    /// MNIST / CIFAR-10 files. Default: the demo set.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Validation data (default: the demo's, or the test split of MNIST / CIFAR-10).
    #[arg(long)]
    val: Option<PathBuf>,
    /// Training augmentation, e.g. 'rrc:32,flip' (default: the demo's for the demo
    /// set, none otherwise).
    #[arg(long)]
    transform: Option<String>,
    /// Validation transform (default: none, or resize + centre crop to the training
    /// size when the images differ).
    #[arg(long)]
    val_transform: Option<String>,
    #[arg(long, value_enum, default_value_t = Arch::Convnet)]
    model: Arch,
    #[arg(long, default_value_t = 6)]
    epochs: u64,
    #[arg(long, default_value_t = 128)]
    batch_size: usize,
    /// Peak learning rate (default: 0.1 for sgd, 0.003 for adamw), reached after a
    /// warm-up and followed by a cosine decay.
    #[arg(long)]
    lr: Option<f32>,
    #[arg(long, value_enum, default_value_t = Opt::Sgd)]
    optimizer: Opt,
    #[arg(long, default_value_t = 5e-4)]
    weight_decay: f32,
    /// sync: the step waits while its batch is read and decoded; async: batches are
    /// prepared by worker threads ahead of the step (double-buffered).
    #[arg(long, default_value_t = Mode::Async)]
    reader: Mode,
    /// Decode and augment threads (async reader).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Batches prepared ahead (async reader).
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// auto (CUDA device 0 when usable, else the CPU, saying why), cpu, cuda or cuda:N
    /// (an error when that device is not usable). With several ranks, auto and cuda
    /// mean the device numbered by the rank on its machine (LOCAL_RANK).
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    device: String,
    /// Seeds the weights, the shuffle and the augmentation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Read the loss back every this many steps (each read waits for the device).
    #[arg(long, default_value_t = 20)]
    log_every: u64,
    /// Stop after this many steps in total (a checkpoint, if asked for, is written).
    #[arg(long)]
    max_steps: Option<u64>,
    /// Write a checkpoint (safetensors: model, optimizer and loader state) after every
    /// epoch and at the end.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Continue the run a checkpoint stopped, exactly where it stopped.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Print one JSON object at the end (progress lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Draw the training curves and the data wait per step into FILE (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Train twice, once with each reader, and compare them side by side.
    #[arg(long)]
    compare_readers: bool,
    /// This process's rank in a data-parallel run (default: from mpirun's
    /// OMPI_COMM_WORLD_RANK, or RANK; must agree with them). Launch the ranks with
    /// mpirun; each trains on its shard of every epoch with batch --batch-size.
    #[arg(long, requires = "world_size")]
    rank: Option<usize>,
    /// Number of processes in a data-parallel run (default: OMPI_COMM_WORLD_SIZE, or
    /// WORLD_SIZE, else 1).
    #[arg(long, requires = "rank")]
    world_size: Option<usize>,
    /// What averages the gradients across ranks.
    #[arg(long, value_enum, default_value_t = Engine::Auto)]
    collective: Engine,
    /// Seconds a rank waits in a gradient exchange for the others before it gives up
    /// and ends the job (a rank that died or hangs).
    #[arg(long, default_value_t = stoker_trainer::collective::DEFAULT_TIMEOUT.as_secs_f64(), value_parser = parse_timeout)]
    collective_timeout: f64,
    /// Set when this process is not rank 0: it prints only errors.
    #[arg(skip)]
    quiet: bool,
}

/// A fingerprint of the settings every rank of a run must share (see `run`).
fn settings_fingerprint(a: &Args) -> u64 {
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
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

fn parse_device(s: &str) -> Result<String, String> {
    DevicePref::from_str(s).map(|_| s.to_string())
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

impl Args {
    /// A progress line: to stdout, or stderr when stdout carries JSON; rank 0 only.
    fn say(&self, s: &str) {
        if self.quiet {
        } else if self.json {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    }
}

fn main() {
    let mut args = Args::parse();
    let cluster = match Launch::detect(args.rank, args.world_size)
        .map_err(anyhow::Error::from)
        .and_then(|l| Cluster::join(l, Duration::from_secs_f64(args.collective_timeout)))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    };
    args.quiet = !cluster.is_leader();
    if let Err(e) = run(args, &cluster) {
        let msg = format!("{e:#}");
        let who = format!("rank {} of {}: ", cluster.rank(), cluster.world());
        // Errors of the collective engine name the rank already.
        if cluster.world() > 1 && !msg.contains(&who) {
            eprintln!("error: {who}{msg}");
        } else {
            eprintln!("error: {msg}");
        }
        // The other ranks may be waiting for this one in a gradient exchange.
        cluster.abort(1);
        std::process::exit(1);
    }
}

fn run(a: Args, cluster: &Cluster) -> anyhow::Result<()> {
    if a.compare_readers && (a.resume.is_some() || a.checkpoint.is_some()) {
        bail!("--compare-readers runs from scratch: it takes no --checkpoint or --resume");
    }
    if a.epochs == 0 || a.batch_size == 0 || a.log_every == 0 {
        bail!("--epochs, --batch-size and --log-every must be at least 1");
    }
    let say = |s: &str| a.say(s);
    if cluster.world() > 1 {
        say(&format!(
            "data-parallel: {} ranks (from {}), each with batches of {} ({} per step in all)",
            cluster.world(),
            cluster.launch.from,
            a.batch_size,
            a.batch_size * cluster.world()
        ));
    }
    // The device first: a bad --device should fail before any data is generated.
    let pref = match a.device.as_str() {
        // One GPU per rank on each machine.
        "cuda" | "gpu" if cluster.world() > 1 => DevicePref::Cuda(cluster.launch.local_rank),
        s => DevicePref::from_str(s).map_err(anyhow::Error::msg)?,
    };
    let local = (cluster.world() > 1).then_some(cluster.launch.local_rank);
    let device = open_device(pref, local, &say)?;
    // `auto` may fall back to the CPU on one machine only; the ranks would then pick
    // different engines and stop matching each other's calls.
    cluster.check_same(
        "the device kind (0: cpu, 1: cuda)",
        matches!(device, Device::Cuda(_)) as u64,
    )?;
    // Settings that change what the ranks do together (how many runs, whether they
    // resume) or the weights they must keep equal (the optimizer); the data, model and
    // batch are compared once the trainer is built.
    cluster.check_same(
        "the training settings (--model, --optimizer, --lr, --weight-decay, --transform, \
         --compare-readers, --resume given or not)",
        settings_fingerprint(&a),
    )?;

    let data = match &a.data {
        Some(dir) => Data::open(
            dir,
            a.val.as_deref(),
            a.transform.as_deref().unwrap_or("none"),
            a.val_transform.as_deref(),
        )?,
        None => {
            // One process per machine makes the demo set; the others wait, then find it.
            if cluster.launch.local_rank == 0 {
                demo::ensure()?;
            }
            cluster.barrier()?;
            let (train, val) = demo::ensure()?;
            Data::open(
                &train,
                Some(a.val.as_deref().unwrap_or(&val)),
                a.transform.as_deref().unwrap_or(demo::TRANSFORM),
                a.val_transform.as_deref(),
            )?
        }
    };
    say(&format!(
        "data: {} ({}, {} images, {} classes), transform '{}'",
        data.train_path.display(),
        data.train.format(),
        data.train.len(),
        data.train.classes().len(),
        data.transform
    ));
    match (&data.val, &data.val_path) {
        (Some(v), Some(p)) => say(&format!(
            "validation: {} ({}, {} images)",
            p.display(),
            v.format(),
            v.len()
        )),
        _ => say("validation: none (give --val DIR to measure accuracy on held-out data)"),
    }

    // The one place the device decides anything: which backend, and how batches reach it.
    match &device {
        Device::Cpu(b) => {
            let coll = cluster.host_collective::<CpuBackend>(a.collective)?;
            train_and_report(&a, &data, b, "cpu".into(), coll, &|_, _, _| {
                Ok(Box::new(HostFeed::new()) as Box<dyn BatchFeed<CpuBackend>>)
            })
        }
        Device::Cuda(b) => {
            let info = b.info();
            let label = format!("cuda:{} ({})", info.ordinal, info.name);
            let coll = cluster.cuda_collective(a.collective, b)?;
            train_and_report(&a, &data, b, label, coll, &|mode, shape, max_batch| {
                Ok(feed::cuda_feed(b, mode, shape, max_batch)?)
            })
        }
    }
}

/// The backend a run trains on.
enum Device {
    Cpu(CpuBackend),
    Cuda(CudaBackend),
}

/// Resolves `--device` and opens the backend, printing which device and why. `auto`
/// falls back to the CPU (with the reason) whenever CUDA is missing or fails to start;
/// an explicit `cuda` that cannot be met is an error. In a data-parallel run `auto`
/// takes the GPU numbered `local_rank`.
fn open_device(
    pref: DevicePref,
    local_rank: Option<usize>,
    say: &dyn Fn(&str),
) -> anyhow::Result<Device> {
    let mut selected = select_device(pref).map_err(anyhow::Error::msg)?;
    if let (DevicePref::Auto, SelectedDevice::Cuda { .. }, Some(local)) =
        (pref, &selected, local_rank)
    {
        selected = select_device(DevicePref::Cuda(local)).map_err(anyhow::Error::msg)?;
    }
    match selected {
        SelectedDevice::Cpu { reason } => {
            say(&reason);
            Ok(Device::Cpu(CpuBackend::new()))
        }
        SelectedDevice::Cuda { info, reason } => match CudaBackend::new(info.ordinal) {
            Ok(b) => {
                say(&reason);
                Ok(Device::Cuda(b))
            }
            Err(e) if pref == DevicePref::Auto => {
                say(&format!(
                    "device: cpu (auto: {info} is present but cannot be used: {e})"
                ));
                Ok(Device::Cpu(CpuBackend::new()))
            }
            Err(e) => bail!("--device {pref}: {e}"),
        },
    }
}

/// Makes the batch feed of one run: (reader mode, image shape, largest batch) -> feed.
type MakeFeed<'a, B> =
    dyn Fn(Mode, (usize, usize, usize), usize) -> anyhow::Result<Box<dyn BatchFeed<B>>> + 'a;

/// Trains once (or once per reader with `--compare-readers`) on `backend` and prints
/// the report.
fn train_and_report<B: Backend + Clone + 'static>(
    a: &Args,
    data: &Data,
    backend: &B,
    device: String,
    coll: Option<Rc<dyn Collective<B>>>,
    make_feed: &MakeFeed<'_, B>,
) -> anyhow::Result<()> {
    let say = |s: &str| a.say(s);
    if a.compare_readers {
        let mut runs = Vec::new();
        for mode in [Mode::Sync, Mode::Async] {
            say(&format!("\n== {mode} reader =="));
            let (history, info) =
                train_once(backend, a, data, &device, coll.clone(), make_feed, mode)?;
            runs.push((mode.to_string(), history, info));
        }
        if a.quiet {
            return Ok(());
        }
        let rows: Vec<CompareRow<'_>> = runs
            .iter()
            .map(|(name, h, info)| CompareRow {
                reader: name,
                wall_seconds: info.wall_seconds,
                history: h,
            })
            .collect();
        let table = report::compare_table(&rows);
        let (sync, asyn) = (&runs[0].2, &runs[1].2);
        let saved = 1.0 - asyn.wall_seconds / sync.wall_seconds.max(1e-9);
        // The same batches in the same order: both runs must end with the same loss.
        let same = runs[0].1.epochs.last().map(|e| e.train_loss)
            == runs[1].1.epochs.last().map(|e| e.train_loss);
        if a.json {
            let doc = serde_json::json!({
                "sync": report::summary_json(&runs[0].2, &runs[0].1),
                "async": report::summary_json(&runs[1].2, &runs[1].1),
                "async_saves_share_of_wall_time": saved,
                "same_training": same,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            println!("\n{table}");
            let wait = |h: &History| 100.0 * stoker_trainer::train::Totals::of(h).wait_share();
            let caveat = if device == "cpu" {
                " (on a CPU the async workers share the cores with the step, so small \
                 differences are noise)"
            } else {
                ""
            };
            println!(
                "the step waited for data {:.1}% of the training time with the sync reader, {:.1}% \
                 with the async one; async wall time {:+.0}% against sync{caveat}; both \
                 runs trained identically: {}\ndata wait: {}",
                wait(&runs[0].1),
                wait(&runs[1].1),
                -100.0 * saved,
                if same { "yes" } else { "NO" },
                runs[1].2.wait_covers
            );
        }
        if let Some(path) = &a.plot {
            let series: Vec<(&str, &History)> =
                runs.iter().map(|(n, h, _)| (n.as_str(), h)).collect();
            report::plot(path, &series)?;
            say(&format!("plot: {}", path.display()));
        }
        return Ok(());
    }

    let (history, info) = train_once(backend, a, data, &device, coll, make_feed, a.reader)?;
    if a.quiet {
        return Ok(());
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::summary_json(&info, &history))?
        );
    } else {
        println!("{}", report::summary_text(&info, &history));
    }
    if let Some(path) = &a.plot {
        report::plot(path, &[(a.reader.to_string().as_str(), &history)])?;
        say(&format!("plot: {}", path.display()));
    }
    Ok(())
}

/// One training run with reader `mode`: builds loaders, model and optimizer from the
/// arguments, resumes when asked, trains, and returns what happened.
fn train_once<B: Backend + Clone + 'static>(
    backend: &B,
    a: &Args,
    data: &Data,
    device: &str,
    coll: Option<Rc<dyn Collective<B>>>,
    make_feed: &MakeFeed<'_, B>,
    mode: Mode,
) -> anyhow::Result<(History, RunInfo)> {
    let (rank, world) = coll.as_ref().map_or((0, 1), |c| (c.rank(), c.world()));
    let engine = coll.as_ref().map_or("local", |c| c.engine());
    let reading = Reading {
        rank,
        world,
        mode,
        batch_size: a.batch_size,
        workers: a.workers,
        prefetch: a.prefetch,
        seed: a.seed,
        epochs: a.epochs,
    };
    let (train, val) = data.loaders(&reading)?;
    let kind = match a.model {
        Arch::Mlp => ModelKind::Mlp,
        Arch::Convnet => ModelKind::Convnet,
        Arch::Resnet => ModelKind::Resnet,
    };
    let input = train.image_shape();
    let classes = data.train.classes().len();
    let model = Model::new(
        backend,
        ModelConfig::new(kind, input, classes, a.batch_size).seed(a.seed),
    )
    .context("building the model")?;
    let (opt_kind, lr) = match a.optimizer {
        Opt::Sgd => (OptimizerKind::sgd(0.9, a.weight_decay), a.lr.unwrap_or(0.1)),
        Opt::Adamw => (OptimizerKind::adamw(a.weight_decay), a.lr.unwrap_or(3e-3)),
    };
    let opt = Optimizer::new(&model, opt_kind)?;
    let per_epoch = train.batches_per_epoch() as u64;
    let total = per_epoch * a.epochs;
    // Warm up over half an epoch (at most a tenth of the run), then cosine to zero.
    let warmup = (per_epoch / 2).min(total / 10).max(1);
    let cfg = TrainConfig {
        epochs: a.epochs,
        schedule: Schedule::new(lr, warmup, total),
        log_every: a.log_every,
        max_steps: a.max_steps,
        checkpoint: a.checkpoint.clone(),
    };
    let say = |s: &str| a.say(s);
    say(&format!(
        "model: {kind}, {} parameters, input {}x{}x{}, {classes} classes, on {}",
        model.param_count(),
        input.0,
        input.1,
        input.2,
        backend.name()
    ));
    let reader = match mode {
        Mode::Sync => "sync (read and decode on the training thread)".to_string(),
        Mode::Async => format!(
            "async ({} worker(s), {} batches prefetched)",
            a.workers, a.prefetch
        ),
    };
    say(&format!(
        "training: {} epochs x {per_epoch} steps of {} images, {} lr {lr} (warm-up {warmup} steps, cosine), reader {reader}",
        a.epochs,
        a.batch_size,
        opt_kind.name()
    ));
    let feed = make_feed(mode, input, a.batch_size).context("setting up the batch feed")?;
    let mut trainer = Trainer::new(model, opt, train, val, cfg).with_feed(feed);
    if let Some(c) = coll {
        trainer = trainer
            .with_collective(c)
            .context("joining the other ranks")?;
    }
    if device != "cpu" {
        say(&format!("data wait: {}", trainer.wait_covers()));
    }
    if let Some(path) = &a.resume {
        let changed = resume(&mut trainer, path)?;
        say(&format!(
            "resumed from {}: step {}, epoch {}, batch {}",
            path.display(),
            trainer.pos.step,
            trainer.pos.epoch + 1,
            trainer.pos.loader.map_or(0, |s| s.next_batch)
        ));
        if changed {
            say("note: the learning-rate schedule differs from the checkpoint's (other --epochs, --lr, --batch-size or number of ranks?): the run goes on with this one");
        }
        if trainer.pos.epoch >= a.epochs {
            say(&format!(
                "the checkpoint has finished all {} epochs: nothing to train",
                a.epochs
            ));
        }
    }

    let tag = if a.compare_readers {
        format!("[{mode}] ")
    } else {
        String::new()
    };
    let mut console = Console::new(a.epochs, a.json, &tag);
    let obs: &mut dyn Observer = if a.quiet { &mut () } else { &mut console };
    let t = Instant::now();
    let stop = trainer.run(obs)?;
    let wall_seconds = t.elapsed().as_secs_f64();
    if stop == Stop::MaxSteps {
        say(&format!(
            "stopped after {} steps (--max-steps)",
            trainer.pos.step
        ));
    }
    if let Some(path) = &a.checkpoint {
        say(&format!("checkpoint: {}", path.display()));
    }
    let info = RunInfo {
        rank,
        world_size: world,
        collective: engine.to_string(),
        model: kind.to_string(),
        device: device.to_string(),
        wait_covers: trainer.wait_covers().to_string(),
        reader: mode.to_string(),
        batch_size: a.batch_size,
        workers: a.workers,
        train_data: data.train_path.display().to_string(),
        val_data: data.val_path.as_ref().map(|p| p.display().to_string()),
        wall_seconds,
    };
    Ok((trainer.history, info))
}

fn resume<B: Backend + Clone + 'static>(
    trainer: &mut Trainer<B>,
    path: &Path,
) -> anyhow::Result<bool> {
    trainer
        .load(path)
        .with_context(|| format!("cannot resume from {}", path.display()))
}
