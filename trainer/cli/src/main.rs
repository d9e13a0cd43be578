//! `stoker-train`: train a small model on a folder of images (or MNIST / CIFAR-10 /
//! packed files), reading with the stoker loader in sync or async mode, and show how
//! much of the time the step waited for data. With no `--data` it makes a demo set of
//! shapes in the cache folder and trains on it.

mod args;
mod cluster;
mod data;
mod demo;
mod plot;
mod report;
mod training;

use std::str::FromStr;
use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use stoker_trainer::model::Target;
use stoker_trainer::{
    feed, open_backend, BatchFeed, CpuBackend, Device, DevicePref, HostFeed, Launch,
};

use args::{Args, TargetArg};
use cluster::Cluster;
use data::Data;
use training::train_and_report;

fn main() {
    stoker_loader::malloc::release_large_blocks();
    let mut args = Args::parse();
    let cluster = match Launch::detect(args.rank, args.world_size)
        .map_err(anyhow::Error::from)
        .and_then(|l| Cluster::join(l, Duration::from_secs_f64(args.collective_timeout)))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            std::process::exit(1);
        }
    };
    args.quiet = !cluster.is_leader();
    if let Err(e) = run(args, &cluster) {
        let msg = one_line(&e);
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

/// `e` and its causes on one line (`stoker_loader::report::one_line`).
fn one_line(e: &anyhow::Error) -> String {
    stoker_loader::report::one_line(e.as_ref())
}

/// What can be checked from the flags alone, before any device, data or demo set is
/// touched: a typo costs nothing.
fn check_early(a: &Args) -> anyhow::Result<()> {
    for (flag, spec) in [
        ("--transform", &a.transform),
        ("--val-transform", &a.val_transform),
    ] {
        if let Some(spec) = spec {
            stoker_augment::Pipeline::parse(spec).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        }
    }
    if let Some(path) = &a.plot {
        plot::check_path(path)?;
    }
    for p in &a.data {
        if p.as_os_str().is_empty() {
            bail!("--data: an empty path");
        }
    }
    for (flag, path) in [("--val", &a.val), ("--resume", &a.resume)] {
        if let Some(p) = path {
            if p.as_os_str().is_empty() {
                bail!("{flag}: an empty path");
            }
        }
    }
    if let Some(p) = &a.checkpoint {
        if p.file_name().is_none() {
            bail!("--checkpoint {}: not a file name", p.display());
        }
    }
    Ok(())
}

fn run(a: Args, cluster: &Cluster) -> anyhow::Result<()> {
    if a.compare_readers && (a.resume.is_some() || a.checkpoint.is_some()) {
        bail!("--compare-readers runs from scratch: it takes no --checkpoint or --resume");
    }
    check_early(&a)?;
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
        s => DevicePref::from_str(s)?,
    };
    let local = (cluster.world() > 1).then_some(cluster.launch.local_rank);
    let opened = open_backend(pref, local)?;
    say(&format!(
        "{} (JPEG decoder: {})",
        opened.reason,
        stoker_augment::decoder()
    ));
    let device = opened.device;
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
        args::settings_fingerprint(&a),
    )?;

    let open_options = stoker_loader::source::OpenOptions {
        cache: a.cache.clone(),
        ..Default::default()
    };
    let mixing = data::Mixing {
        more: a.data.iter().skip(1).cloned().collect(),
        weights: a.weights.clone().map(|w| w.0),
        stop: a.stop,
        steps: a.steps,
    };
    if a.data.is_empty() && (mixing.weights.is_some() || mixing.stop.is_some()) {
        bail!("--weights and --stop mix the --data sets: give them with --data");
    }
    let data = match a.data.first() {
        Some(dir) => Data::open(
            dir,
            a.val.as_deref(),
            a.transform.as_deref().unwrap_or("none"),
            a.val_transform.as_deref(),
            a.target,
            &open_options,
            &mixing,
        )?,
        None => {
            // `--target labels` asks for tags: the multi-label demo has them.
            let (ensure, transform): (fn() -> anyhow::Result<_>, _) = match a.target {
                TargetArg::Labels => (demo::ensure_scenes, demo::SCENES_TRANSFORM),
                _ => (demo::ensure, demo::TRANSFORM),
            };
            // One process per machine makes the demo set; the others wait, then find it.
            if cluster.launch.local_rank == 0 {
                ensure()?;
            }
            cluster.barrier()?;
            let (train, val) = ensure()?;
            let mut data = Data::open(
                &train,
                Some(a.val.as_deref().unwrap_or(&val)),
                a.transform.as_deref().unwrap_or(transform),
                a.val_transform.as_deref(),
                a.target,
                &open_options,
                &data::Mixing::default(),
            )?;
            if a.target == TargetArg::Labels {
                data.sgd_lr = Some(demo::SCENES_SGD_LR);
            }
            data
        }
    };
    say(&format!(
        "data: {} ({}, {} images, {} classes{}), transform '{}'",
        data.train_path.display(),
        data.train.format(),
        data.train.len(),
        data.train.classes().len(),
        match data.target {
            Target::Labels => ", multi-label tags",
            Target::Class => "",
        },
        data.transform
    ));
    if data.target == Target::Labels && a.label_smoothing != 0.0 {
        bail!("--label-smoothing applies to class targets; multi-label training has none");
    }
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
