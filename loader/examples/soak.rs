//! Memory over many epochs (a benchmark, not a test): runs the loader for EPOCHS
//! epochs over DATA and prints, after each epoch, the process's resident memory now
//! and at its peak, so that one can see the peak stop growing after the first epoch.
//! `scripts/soak.sh` makes a folder with a few very large images and runs this.
//!
//! `cargo run --release -p stoker-loader --example soak -- DATA [EPOCHS] [SPEC] [MODE]`

use stoker_augment::Pipeline;
use stoker_loader::{source, Loader, LoaderConfig, Mode};

/// `VmRSS` and `VmHWM` of this process in bytes (Linux).
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    stoker_loader::malloc::release_large_blocks();
    let args: Vec<String> = std::env::args().collect();
    let Some(data) = args.get(1) else {
        eprintln!("usage: soak DATA [EPOCHS] [SPEC] [sync|async]");
        std::process::exit(2);
    };
    let epochs: u64 = args.get(2).map_or(Ok(50), |s| s.parse())?;
    let spec = args.get(3).map_or("rrc:224,flip", String::as_str);
    let mode: Mode = args.get(4).map_or(Ok(Mode::Async), |s| s.parse())?;
    let src = source::open(data, source::Split::Train)?;
    let cfg = LoaderConfig {
        batch_size: 64,
        mode,
        workers: stoker_loader::Workers::Fixed(2),
        transform: Pipeline::parse(spec)?,
        last_epoch: Some(epochs.saturating_sub(1)),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, cfg)?;
    println!("epoch samples seconds rss_mb peak_rss_mb buffers_mb");
    for e in 0..epochs {
        let t0 = std::time::Instant::now();
        let mut n = 0;
        for b in loader.epoch(e) {
            n += b?.len();
        }
        let (now, peak) = rss();
        println!(
            "{e} {n} {:.2} {:.1} {:.1} {:.1}",
            t0.elapsed().as_secs_f64(),
            now as f64 / 1e6,
            peak as f64 / 1e6,
            loader.peak_buffer_bytes() as f64 / 1e6
        );
    }
    Ok(())
}
