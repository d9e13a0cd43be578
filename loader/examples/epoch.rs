//! The loader in a few lines: make a small data set, then iterate two epochs of
//! augmented u8 batches. Run with `cargo run --release -p stoker-loader --example epoch`.

use std::sync::Arc;

use stoker_augment::Pipeline;
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{source, Loader, LoaderConfig, Mode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("stoker-example-{}", std::process::id()));
    let opts = ShapesOptions {
        count: 256,
        size: 64,
        classes: 10,
        seed: 0,
    };
    synthetic::shapes(&dir, &opts, |_, _| {})?;

    let src: Arc<dyn source::Source> = source::open(&dir, source::Split::Train)?;
    let config = LoaderConfig {
        batch_size: 32,
        mode: Mode::Async,
        workers: stoker_loader::Workers::Fixed(2),
        prefetch: 2,
        seed: 7,
        transform: Pipeline::parse("rrc:48,flip")?,
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, config)?;
    for epoch in 0..2 {
        let mut samples = 0;
        for batch in loader.epoch(epoch) {
            let b = batch?;
            let [n, h, w, c] = b.shape();
            assert_eq!(b.images.len(), n * h * w * c);
            samples += n;
        }
        let m = loader.metrics();
        println!(
            "epoch {epoch}: {samples} samples; so far decode {:.3} s, consumer wait {:.3} s",
            m.decode_seconds, m.wait_seconds
        );
    }
    println!(
        "batch buffers: peak {:.1} MB of a {:.1} MB bound",
        loader.peak_buffer_bytes() as f64 / 1e6,
        loader.memory_bound_bytes() as f64 / 1e6
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
