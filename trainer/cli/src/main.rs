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

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{CommandFactory, Parser};
use stoker_augment::Pipeline;
use stoker_loader::spec::{DataSpec, SourceSpec};
use stoker_loader::DecodedCacheSize;
use stoker_trainer::model::Target;
use stoker_trainer::{
    feed, open_backend_in, BatchFeed, CpuBackend, Device, DeviceError, DevicePref, HostFeed, Launch,
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
        let msg = flagged(&e);
        let who = format!("rank {} of {}: ", cluster.rank(), cluster.world());
        // Errors of the collective engine name the rank already.
        if cluster.world() > 1 && !msg.contains(&who) {
            eprintln!("error: {who}{msg}");
        } else {
            eprintln!("error: {msg}");
        }
        // Flags that can never run together exit 2, as clap's own refusals do.
        let code = match e.downcast_ref::<DeviceError>() {
            Some(d) if d.is_usage() => 2,
            _ => 1,
        };
        // The other ranks may be waiting for this one in a gradient exchange.
        cluster.abort(code);
        std::process::exit(code);
    }
}

/// `e` and its causes on one line (`stoker_loader::report::one_line`).
fn one_line(e: &anyhow::Error) -> String {
    stoker_loader::report::one_line(e.as_ref())
}

/// The transforms of a run, parsed once from the flags.
struct Transforms {
    /// `--transform` (`None`: the demo's for the demo set, none otherwise).
    train: Option<Pipeline>,
    /// `--val-transform`.
    val: Option<Pipeline>,
}

/// `e` on one line, a setting at fault spelled as its flag (`--batch-size`).
fn flagged(e: &anyhow::Error) -> String {
    stoker_loader::cli_args::spell_settings(&one_line(e), &Args::command(), e.as_ref())
}

/// What can be checked from the flags alone, before any device, data or demo set is
/// touched: a typo costs nothing. Returns the transforms, parsed.
fn check_early(a: &Args) -> anyhow::Result<Transforms> {
    let parse = |flag: &str, spec: &Option<String>| {
        spec.as_deref()
            .map(|s| Pipeline::parse(s).map_err(|e| anyhow::anyhow!("{flag}: {e}")))
            .transpose()
    };
    let transforms = Transforms {
        train: parse("--transform", &a.transform)?,
        val: parse("--val-transform", &a.val_transform)?,
    };
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
    if !a.data.is_empty() {
        // The mixture's weights and stop rule, by the library's check.
        data_spec(a, &a.data).validate()?;
    }
    Ok(transforms)
}

/// The training data sets of `paths`, each opened with the data flags, and how they
/// mix.
fn data_spec(a: &Args, paths: &[PathBuf]) -> DataSpec {
    DataSpec {
        sources: paths
            .iter()
            .map(|p| SourceSpec {
                path: p.clone(),
                options: a.open.options(true),
            })
            .collect(),
        weights: a.mixing.weights.clone().map(|w| w.0),
        stop: a.mixing.stop,
        epoch_batches: a.mixing.epoch_batches.or(a.mixing.old_steps),
    }
}

fn run(a: Args, cluster: &Cluster) -> anyhow::Result<()> {
    if a.compare_readers && (a.resume.is_some() || a.checkpoint.is_some()) {
        bail!("--compare-readers runs from scratch: it takes no --checkpoint or --resume");
    }
    let transforms = check_early(&a)?;
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
    let opened = open_backend_in(pref, local, a.precision)?;
    say(&format!(
        "{}, precision {} (JPEG decoder: {})",
        opened.reason,
        a.precision,
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
         --precision, --compare-readers, --resume given or not)",
        args::settings_fingerprint(&a),
    )?;

    if a.data.is_empty() && a.mixing.any() {
        bail!("--weights, --stop and --epoch-batches mix the --data sets: give them with --data");
    }
    let data = match a.data.first() {
        Some(_) => {
            // Said once, here, where the flag is read for the run.
            let mut spec = data_spec(&a, &a.data);
            spec.epoch_batches = a.mixing.epoch_batches();
            Data::open(
                &spec,
                a.val.as_deref(),
                transforms.train.unwrap_or_default(),
                transforms.val,
                a.target,
            )?
        }
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
            let transform = match transforms.train {
                Some(t) => t,
                None => Pipeline::parse(transform).context("the demo's transform")?,
            };
            let mut data = Data::open(
                &data_spec(&a, &[train]),
                Some(a.val.as_deref().unwrap_or(&val)),
                transform,
                transforms.val,
                a.target,
            )?;
            if a.target == TargetArg::Labels {
                data.sgd_lr = Some(demo::SCENES_SGD_LR);
            }
            let cuda = matches!(device, Device::Cuda(_));
            data.decoded_cache = demo::decoded_cache(a.read.decoded_cache, cuda);
            if let (None, Some(DecodedCacheSize::Bytes(b))) =
                (a.read.decoded_cache, data.decoded_cache)
            {
                say(&format!(
                    "decoded cache: {} MiB, the demo set decoded once (on CUDA, so that \
                     decoding does not hold a fast step back; --decoded-cache SIZE|auto \
                     changes it)",
                    b >> 20
                ));
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
            say(&format!("convolutions: {}", b.conv_engine()));
            let coll = cluster.cuda_collective(a.collective, b)?;
            train_and_report(&a, &data, b, label, coll, &|mode, shape, max_batch| {
                Ok(feed::cuda_feed(b, mode, shape, max_batch)?)
            })?;
            // Shapes cuDNN had no qualifying algorithm for ran on im2col: say which.
            for f in b.cudnn_fallbacks() {
                say(&format!("convolutions: on im2col: {f}"));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use stoker_loader::Setting;

    #[test]
    fn every_setting_the_trainer_has_a_flag_for_is_spelled_as_it() {
        // Settings stoker-train leaves at the library's defaults, or sets itself (the
        // shard policy, the fields of a multi-label target).
        let none = [
            Setting::DropLast,
            Setting::ShardPolicy,
            Setting::Channels,
            Setting::Trace,
            Setting::MaxBufferBytes,
            Setting::Fields,
            Setting::MinBoxVisibility,
            Setting::MaxInstances,
            Setting::Steps,
        ];
        let cmd = super::Args::command();
        // clap's own checks of the definition (unique names and groups), which a
        // flattened group of the same name as another fails.
        cmd.clone().debug_assert();
        for s in Setting::ALL {
            let flag = stoker_loader::cli_args::flag(&cmd, s);
            let want = match s {
                _ if none.contains(&s) => None,
                // The reader's mode: `--mode` is its alias.
                Setting::Mode => Some("--reader".to_string()),
                s => Some(format!("--{}", s.name().replace('_', "-"))),
            };
            assert_eq!(flag, want, "{s}");
        }
    }
}
