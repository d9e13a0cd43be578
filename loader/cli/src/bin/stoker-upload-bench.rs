//! stoker-upload-bench: host-to-device copy rates from pinned and from pageable memory,
//! the numbers behind the loader's pinned staging buffers. Needs a CUDA device; says
//! why and exits non-zero without one.

use anyhow::Context;
use clap::Parser;
use stoker_loader::upload::bench_upload;

/// Measure upload bandwidth, pinned vs pageable.
#[derive(Parser, Debug)]
#[command(name = "stoker-upload-bench")]
struct Args {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Bytes per copy (default: a 256 x 224 x 224 x 3 u8 batch, about 38.5 MB).
    #[arg(long, default_value_t = 256 * 224 * 224 * 3)]
    bytes: usize,
    /// Timed copies per kind.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let r = bench_upload(a.device, a.bytes, a.iters).context("upload bench")?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "upload of {} bytes x {} to cuda:{}",
            r.bytes, r.iters, a.device
        );
        println!("  pinned    {:>7.2} GB/s", r.pinned_gbps);
        println!("  pageable  {:>7.2} GB/s", r.pageable_gbps);
        println!(
            "  ratio     {:>7.2}x",
            r.pinned_gbps / r.pageable_gbps.max(1e-9)
        );
    }
    Ok(())
}
