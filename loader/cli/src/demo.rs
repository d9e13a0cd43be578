//! `stoker-load demo`: make a demo set if missing, then show side by side what
//! synchronous reading costs against asynchronous, double-buffered reading when a
//! training step takes about as long as preparing its batch.

use std::path::PathBuf;

use anyhow::Context;
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::Mode;

use crate::args;
use crate::bench::{self, Report};

#[derive(clap::Args)]
pub struct Args {
    /// Where the demo set lives (default: the stoker cache folder).
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, default_value_t = 2000, value_parser = args::image_count)]
    count: usize,
    #[arg(long, default_value_t = 128, value_parser = args::image_size)]
    size: u32,
    #[arg(long, default_value = "rrc:96,flip")]
    transform: String,
    #[arg(long, default_value_t = 64, value_parser = args::batch_size)]
    batch_size: usize,
    #[arg(long, default_value_t = 2, value_parser = args::workers)]
    workers: usize,
    /// Simulated step time; by default, the measured sync data time per batch.
    #[arg(long, value_parser = args::millis)]
    compute_ms: Option<f64>,
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    // Refuse a bad spec before making or reading anything.
    stoker_augment::Pipeline::parse(&a.transform)?;
    let dir = a.data.clone().unwrap_or_else(|| {
        stoker_loader::system::cache_dir().join(format!("shapes-{}-{}", a.size, a.count))
    });
    if !dir.exists() {
        eprintln!(
            "making the demo set: {} shapes of {}px in {}",
            a.count,
            a.size,
            dir.display()
        );
        let bar = crate::progress_bar(a.count as u64, "gen");
        synthetic::shapes(
            &dir,
            &ShapesOptions {
                count: a.count,
                size: a.size,
                classes: 10,
                seed: 0,
            },
            |done, _| bar.set_position(done as u64),
        )
        .with_context(|| format!("generating the demo set in {}", dir.display()))?;
        bar.finish_and_clear();
    } else {
        eprintln!("using the demo set in {}", dir.display());
    }
    // The bench's own flags and defaults, so that the demo reads as `bench` does.
    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: bench::Args,
    }
    let dir_arg = dir.display().to_string();
    let workers = a.workers.to_string();
    let batch = a.batch_size.to_string();
    let base = <Bench as clap::Parser>::try_parse_from([
        "bench",
        dir_arg.as_str(),
        "--mode",
        "sync",
        "--workers",
        &workers,
        "--batch-size",
        &batch,
        "--transform",
        &a.transform,
        "--digest",
    ])?
    .args;
    let run = |mode: Mode, compute_ms: f64| -> anyhow::Result<Report> {
        bench::measure(&bench::Args {
            mode,
            compute_ms,
            ..base.clone()
        })
    };
    // Warm the page cache so the first run is not charged for cold reads.
    run(Mode::Async, 0.0)?;
    let sync_data = run(Mode::Sync, 0.0)?;
    let async_data = run(Mode::Async, 0.0)?;
    let batches = sync_data.samples.div_ceil(a.batch_size as u64).max(1) as f64;
    let compute_ms = a
        .compute_ms
        .unwrap_or(1e3 * sync_data.wall_seconds / batches);
    let sync_step = run(Mode::Sync, compute_ms)?;
    let async_step = run(Mode::Async, compute_ms)?;
    let compute_only = compute_ms * batches / 1e3;
    let ideal = async_data.epoch_seconds.max(compute_only);
    if a.json {
        let doc = serde_json::json!({
            "compute_ms": compute_ms,
            "compute_only_seconds": compute_only,
            "ideal_async_seconds": ideal,
            "sync_data_only": sync_data,
            "async_data_only": async_data,
            "sync_with_compute": sync_step,
            "async_with_compute": async_step,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "\nOne epoch of {} images, transform '{}', batch {}, {} async workers, simulated step {:.1} ms\n",
        sync_data.samples, a.transform, a.batch_size, a.workers, compute_ms
    );
    bench::print_table(&[
        ("sync data", &sync_data),
        ("async data", &async_data),
        ("sync+step", &sync_step),
        ("async+step", &async_step),
    ]);
    println!(
        "\nsync + step: {:.2} s (data {:.2} s + compute {:.2} s = {:.2} s)",
        sync_step.epoch_seconds,
        sync_data.epoch_seconds,
        compute_only,
        sync_data.epoch_seconds + compute_only
    );
    println!(
        "async + step: {:.2} s (max(data {:.2} s, compute {:.2} s) = {:.2} s; {:+.0}%)",
        async_step.epoch_seconds,
        async_data.epoch_seconds,
        compute_only,
        ideal,
        100.0 * (async_step.epoch_seconds / ideal - 1.0)
    );
    println!(
        "async reading saves {:.0}% of the epoch; the step waited for data {:.0}% of the time (sync: {:.0}%)",
        100.0 * (1.0 - async_step.epoch_seconds / sync_step.epoch_seconds),
        100.0 * async_step.wait_share,
        100.0 * sync_step.wait_share
    );
    let same = sync_data.digest == async_data.digest && sync_step.digest == async_step.digest;
    println!(
        "batches identical in both modes: {} (digest {})",
        if same { "yes" } else { "NO" },
        sync_data.digest.as_deref().unwrap_or("?")
    );
    if !same {
        anyhow::bail!("sync and async runs delivered different batches");
    }
    Ok(())
}
