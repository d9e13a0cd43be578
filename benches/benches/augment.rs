//! Decode per format and size, each transform alone, each augmentation op on a
//! 224x224 RGB photo (`ops_224`, the figures `peers/ops_compare.sh` sets beside
//! PIL's), and the whole `rrc:224,flip` per image:
//! `cargo bench -p stoker-benches --bench augment`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use stoker_augment::{decode, Image, Pipeline, SampleRng, Scratch};
use stoker_benches::{photo_jpeg, photo_png};

fn decode_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    for (w, h) in [(64, 64), (256, 256), (500, 375)] {
        for (fmt, bytes) in [("jpeg", photo_jpeg(w, h, 1)), ("png", photo_png(w, h, 1))] {
            g.throughput(Throughput::Elements(1));
            let mut out = Image::default();
            g.bench_with_input(
                BenchmarkId::new(fmt, format!("{w}x{h}")),
                &bytes,
                |b, bytes| b.iter(|| decode::decode_into(bytes, 3, &mut out).expect("decode")),
            );
        }
    }
    g.finish();
}

fn transform_bench(c: &mut Criterion) {
    let jpeg = photo_jpeg(500, 375, 2);
    let img = decode::decode(&jpeg, 3).expect("decode");
    let mut g = c.benchmark_group("transform_500x375");
    g.throughput(Throughput::Elements(1));
    for spec in [
        "resize:256",
        "center:224",
        "rrc:224",
        "flip:p=1",
        "crop:224:pad=4",
        "jitter:0.4:h=0.1",
        "gray",
        "erase:p=1",
        "cutout:64",
    ] {
        let p = Pipeline::parse(spec).expect("spec");
        let (ow, oh) = p.output_size(img.width, img.height);
        let mut out = vec![0u8; ow * oh * 3];
        let mut scratch = Scratch::default();
        let mut i = 0u64;
        g.bench_function(spec, |b| {
            b.iter(|| {
                i += 1;
                let mut rng = SampleRng::new(0, 0, i);
                p.run_image(img.view(), &mut rng, &mut scratch, &mut out)
                    .expect("transform")
            })
        });
    }
    g.finish();
}

/// The ops of `peers/ops_compare.sh`, by the name both sides print: (name, spec).
/// Keep the list in step with `OPS` in `peers/pil_ops.py`.
const OPS_224: &[(&str, &str)] = &[
    ("copy", "flip:p=0"),
    ("flip", "flip:p=1"),
    ("posterize", "posterize:4"),
    ("solarize", "solarize:128"),
    ("invert", "invert"),
    ("equalize", "equalize"),
    ("autocontrast", "autocontrast"),
    ("brightness", "brightness:1.5"),
    ("contrast", "contrast:1.5"),
    ("color", "color:1.5"),
    ("sharpness", "sharpness:1.5"),
    ("rotate", "rotate:30"),
    ("affine", "affine:deg=10:tx=3:ty=-2:shear=15"),
    ("blur", "blur:5:sigma=1.5"),
    ("jitter", "jitter:0.4"),
    ("hue", "jitter:0:h=0.1"),
    ("gray", "gray"),
    ("randaugment", "randaugment:n=2:m=9"),
    ("trivialaugment", "trivialaugment"),
];

/// Each op alone on a 224x224 RGB photo, the image already decoded: the time of
/// `run_image`, which includes copying the input into the output (the `copy` row).
fn ops_bench(c: &mut Criterion) {
    let img = decode::decode(&photo_jpeg(224, 224, 4), 3).expect("decode");
    let mut g = c.benchmark_group("ops_224");
    g.throughput(Throughput::Elements(1));
    for &(name, spec) in OPS_224 {
        let p = Pipeline::parse(spec).expect("spec");
        let mut out = vec![0u8; img.data.len()];
        let mut scratch = Scratch::default();
        let mut i = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let mut rng = SampleRng::new(0, 0, i);
                p.run_image(img.view(), &mut rng, &mut scratch, &mut out)
                    .expect("transform")
            })
        });
    }
    g.finish();
}

fn full_bench(c: &mut Criterion) {
    let jpeg = photo_jpeg(500, 375, 3);
    let mut g = c.benchmark_group("per_image");
    g.throughput(Throughput::Elements(1));
    for spec in ["rrc:224,flip", "resize:256,center:224"] {
        let p = Pipeline::parse(spec).expect("spec");
        let mut out = vec![0u8; 224 * 224 * 3];
        let mut scratch = Scratch::default();
        let mut i = 0u64;
        g.bench_function(format!("jpeg_500x375_{spec}"), |b| {
            b.iter(|| {
                i += 1;
                let mut rng = SampleRng::new(0, 0, i);
                p.run_encoded(&jpeg, 3, &mut rng, &mut scratch, &mut out)
                    .expect("pipeline")
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    decode_bench,
    transform_bench,
    ops_bench,
    full_bench
);
criterion_main!(benches);
