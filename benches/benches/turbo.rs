//! The `turbo` feature side by side with the zune-jpeg full decode, per image:
//! `cargo bench -p stoker-benches --features turbo --bench turbo`.
//! (Both paths are in the one binary: `Scratch::set_turbo` picks.)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use stoker_augment::{decode, Image, Pipeline, SampleRng, Scratch};
use stoker_benches::photo_jpeg;

fn turbo_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("turbo");
    g.throughput(Throughput::Elements(1));
    for (w, h) in [(500, 375), (1600, 1200)] {
        let jpeg = photo_jpeg(w, h, 5);
        let mut img = Image::default();
        g.bench_with_input(
            BenchmarkId::new("decode_zune", format!("{w}x{h}")),
            &jpeg,
            |b, j| b.iter(|| decode::decode_into_zune(j, 3, &mut img).expect("decode")),
        );
        g.bench_with_input(
            BenchmarkId::new("decode_turbo", format!("{w}x{h}")),
            &jpeg,
            |b, j| b.iter(|| decode::decode_into(j, 3, &mut img).expect("decode")),
        );
        for spec in ["rrc:224,flip", "rrc:112,flip"] {
            let p = Pipeline::parse(spec).expect("spec");
            let (ow, oh) = p.output_size(w, h);
            let mut out = vec![0u8; ow * oh * 3];
            for (name, on) in [("zune", false), ("turbo", true)] {
                let mut scratch = Scratch::default();
                scratch.set_turbo(on);
                let mut i = 0u64;
                let id = BenchmarkId::new(format!("{spec}_{name}"), format!("{w}x{h}"));
                g.bench_function(id, |b| {
                    b.iter(|| {
                        i += 1;
                        let mut rng = SampleRng::new(0, 0, i);
                        p.run_encoded(&jpeg, 3, &mut rng, &mut scratch, &mut out)
                            .expect("pipeline")
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, turbo_bench);
criterion_main!(benches);
