//! One epoch through the loader, sync vs async, on in-memory JPEGs (no disk):
//! `cargo bench -p stoker-benches --bench loader`. The per-image cost of the
//! pipeline's own machinery shows as the gap to the `per_image` bench.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use stoker_augment::Pipeline;
use stoker_benches::MemorySource;
use stoker_loader::{Loader, LoaderConfig, Mode, Source};

fn epoch_bench(c: &mut Criterion) {
    let src: Arc<dyn Source> = Arc::new(MemorySource::jpegs(128, 320, 240));
    let mut g = c.benchmark_group("epoch_128_jpeg_320x240_rrc224_flip");
    g.throughput(Throughput::Elements(128));
    g.sample_size(10);
    for (name, mode, workers) in [
        ("sync", Mode::Sync, 1),
        ("async_w1", Mode::Async, 1),
        ("async_w2", Mode::Async, 2),
    ] {
        let cfg = LoaderConfig {
            batch_size: 32,
            mode,
            workers: stoker_loader::Workers::Fixed(workers),
            transform: Pipeline::parse("rrc:224,flip").expect("spec"),
            ..LoaderConfig::default()
        };
        let mut loader = Loader::new(src.clone(), cfg).expect("loader");
        let mut e = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                e += 1;
                let mut n = 0;
                for batch in loader.epoch(e) {
                    n += batch.expect("batch").len();
                }
                n
            })
        });
    }
    g.finish();
}

criterion_group!(benches, epoch_bench);
criterion_main!(benches);
