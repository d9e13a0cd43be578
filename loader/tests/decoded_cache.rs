//! The decoded cache end to end: batches are the same bytes with and without it, in
//! both modes, for any number of workers, over several epochs, whether it holds the
//! whole set or only part; resume stays exact; a JPEG decoded through a libjpeg-turbo
//! crop window is not kept; and a size beyond the memory bound is refused.

use std::path::Path;
use std::sync::Arc;

use stoker_augment::Pipeline;
use stoker_loader::source::{open_with, OpenOptions};
use stoker_loader::{
    DecodedCacheSize, Digest, Loader, LoaderConfig, Metrics, Mode, Source, Workers,
};

const SAMPLES: usize = 20;
const EPOCHS: u64 = 3;

/// An image folder of `SAMPLES` 48x40 images in two classes, as PNG or JPEG, each
/// with pixels of its own (so a sample served from the wrong slot shows).
fn write_folder(dir: &Path, ext: &str) -> std::path::PathBuf {
    write_sized(dir, ext, 48, 40)
}

fn write_sized(dir: &Path, ext: &str, w: u32, h: u32) -> std::path::PathBuf {
    let root = dir.join(format!("{ext}{w}"));
    for i in 0..SAMPLES {
        let class = root.join(format!("class{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            let v = (x * 5 + y * 3 + i as u32 * 17) as u8;
            image::Rgb([v, v.wrapping_mul(3) ^ (i as u8), (x * y) as u8])
        });
        img.save(class.join(format!("{i:03}.{ext}"))).unwrap();
    }
    root
}

fn open(path: &Path) -> Arc<dyn Source> {
    open_with(path, &OpenOptions::default()).expect("open")
}

fn config(mode: Mode, workers: usize, spec: &str, cache: Option<DecodedCacheSize>) -> LoaderConfig {
    LoaderConfig {
        batch_size: 6,
        mode,
        workers: Workers::Fixed(workers),
        io_depth: 4,
        seed: 11,
        transform: Pipeline::parse(spec).expect("spec"),
        decoded_cache: cache,
        // Nothing read past the epochs run, so that the counts add up.
        last_epoch: Some(EPOCHS - 1),
        ..LoaderConfig::default()
    }
}

/// Each batch's digest over `EPOCHS` epochs, and the loader's metrics after them.
fn run(src: Arc<dyn Source>, cfg: LoaderConfig) -> (Vec<String>, Metrics) {
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut out = Vec::new();
    for e in 0..EPOCHS {
        for b in loader.epoch(e) {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            out.push(d.hex());
        }
    }
    (out, loader.metrics())
}

/// What one decoded 48x40x3 sample costs in the cache, read from a loader that kept
/// exactly one.
fn entry_bytes(path: &Path, spec: &str) -> u64 {
    let cfg = LoaderConfig {
        batch_size: 1,
        shuffle: false,
        ..config(Mode::Sync, 0, spec, Some(DecodedCacheSize::Auto))
    };
    let mut loader = Loader::new(open(path), cfg).unwrap();
    loader.epoch(0).next().unwrap().unwrap();
    loader.metrics().decoded_cache_bytes
}

fn check_identity(path: &Path, spec: &str) {
    let (reference, plain) = run(open(path), config(Mode::Sync, 0, spec, None));
    assert_eq!(reference.len(), EPOCHS as usize * SAMPLES.div_ceil(6));
    assert_eq!(
        (plain.decoded_cache_hits, plain.decoded_cache_misses),
        (0, 0)
    );
    let each = entry_bytes(path, spec);
    assert!(each >= 48 * 40 * 3, "{each}");
    let half = DecodedCacheSize::Bytes(each * SAMPLES as u64 / 2);
    for (mode, workers) in [(Mode::Sync, 0), (Mode::Async, 1), (Mode::Async, 2)] {
        for (size, name) in [(DecodedCacheSize::Auto, "all"), (half, "half")] {
            let what = format!("{} {mode} x{workers}, cache {name}", path.display());
            let (got, m) = run(open(path), config(mode, workers, spec, Some(size)));
            assert_eq!(got, reference, "{what}");
            let looked = EPOCHS * SAMPLES as u64;
            assert_eq!(
                m.decoded_cache_hits + m.decoded_cache_misses,
                looked,
                "{what}"
            );
            assert_eq!(m.samples, looked, "{what}");
            assert_eq!(m.decoded_cache_windowed, 0, "{what}");
            if name == "all" {
                assert_eq!(m.decoded_cache_bytes, each * SAMPLES as u64, "{what}");
                assert_eq!(m.decoded_cache_no_room, 0, "{what}");
                // Async mode may look a sample up for the next epoch before its first
                // decode is kept; sync mode never does. Epoch 2 is all hits in both
                // (see a_cache_hit_skips_the_read).
                if mode == Mode::Sync {
                    assert_eq!(m.decoded_cache_misses, SAMPLES as u64, "{what}");
                } else {
                    assert!(m.decoded_cache_hits >= SAMPLES as u64, "{what}: {m:?}");
                }
            } else {
                assert_eq!(m.decoded_cache_bytes, each * (SAMPLES as u64 / 2), "{what}");
                assert!(m.decoded_cache_no_room > 0, "{what}: {m:?}");
                assert!(m.decoded_cache_hits > 0, "{what}: {m:?}");
                // The samples not kept are read again every epoch.
                assert!(
                    m.decoded_cache_misses >= SAMPLES as u64 * 2,
                    "{what}: {m:?}"
                );
            }
        }
    }
}

#[test]
fn png_batches_are_the_same_bytes_with_and_without_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    check_identity(&write_folder(dir.path(), "png"), "crop:32:pad=4,flip");
}

#[test]
fn jpeg_batches_are_the_same_bytes_with_and_without_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_folder(dir.path(), "jpg");
    check_identity(&path, "crop:32:pad=4,flip");
    // An rrc first step on a PNG has no window path: kept as any other.
    let png = write_folder(dir.path(), "png");
    check_identity(&png, "rrc:32:scale=0.3-1,flip");
}

#[test]
fn a_cache_hit_skips_the_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_folder(dir.path(), "png");
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = config(mode, 2, "flip", Some(DecodedCacheSize::Auto));
        let mut loader = Loader::new(open(&path), cfg).unwrap();
        for e in 0..2 {
            for b in loader.epoch(e) {
                b.unwrap();
            }
        }
        let first = loader.metrics();
        for b in loader.epoch(2) {
            b.unwrap();
        }
        let second = loader.metrics().since(&first);
        // Async mode reads ahead, by at most the pool's 5 batches (more than an
        // epoch's 4): epoch 2 is looked up only once every batch of epoch 0 was
        // delivered, so every sample is kept by then, and a hit reads nothing.
        assert_eq!(second.decoded_cache_misses, 0, "{mode}: {second:?}");
        assert_eq!(second.bytes_read, 0, "{mode}: {second:?}");
        assert_eq!(second.samples, SAMPLES as u64, "{mode}");
    }
}

#[test]
fn resume_is_exact_with_a_warm_or_a_cold_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_folder(dir.path(), "jpg");
    let spec = "crop:32:pad=4,flip";
    let (reference, _) = run(open(&path), config(Mode::Sync, 0, spec, None));
    let per_epoch = SAMPLES.div_ceil(6);
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = || config(mode, 2, spec, Some(DecodedCacheSize::Auto));
        let mut loader = Loader::new(open(&path), cfg()).unwrap();
        for b in loader.epoch(0) {
            b.unwrap();
        }
        let mut epoch = loader.epoch(1);
        epoch.next().unwrap().unwrap();
        let state = epoch.state();
        drop(epoch);
        let digest = |b: Result<stoker_loader::Batch, _>| {
            let mut d = Digest::new();
            d.update(&b.unwrap());
            d.hex()
        };
        let warm: Vec<String> = loader.resume(&state).unwrap().map(digest).collect();
        assert_eq!(warm, reference[per_epoch + 1..2 * per_epoch], "{mode} warm");
        let mut cold = Loader::new(open(&path), cfg()).unwrap();
        let rest: Vec<String> = cold.resume(&state).unwrap().map(digest).collect();
        assert_eq!(rest, warm, "{mode} cold");
    }
}

/// With libjpeg-turbo, an `rrc` (or `resize`) first step decodes a JPEG only in part,
/// at a scale: a whole decode kept for later epochs would give other bytes, so such a
/// sample is not kept, and says so in the metrics. Without it, the sample is kept.
/// The images are large enough for the 1/2..1/8 scaled decode.
#[test]
fn a_jpeg_decoded_through_a_crop_window_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_sized(dir.path(), "jpg", 320, 256);
    for spec in ["rrc:24:scale=0.2-1,flip", "resize:24,center:20"] {
        let (reference, _) = run(open(&path), config(Mode::Sync, 0, spec, None));
        for (mode, workers) in [(Mode::Sync, 0), (Mode::Async, 2)] {
            let cfg = config(mode, workers, spec, Some(DecodedCacheSize::Auto));
            let (got, m) = run(open(&path), cfg);
            assert_eq!(got, reference, "{spec} {mode}");
            if stoker_augment::TURBO {
                assert_eq!(m.decoded_cache_hits, 0, "{spec} {mode}: {m:?}");
                assert_eq!(m.decoded_cache_windowed, m.decoded_cache_misses, "{spec}");
                assert_eq!(m.decoded_cache_bytes, 0, "{spec} {mode}");
            } else {
                assert_eq!(m.decoded_cache_windowed, 0, "{spec} {mode}");
                assert!(m.decoded_cache_hits >= SAMPLES as u64, "{spec} {mode}");
            }
        }
    }
}

#[test]
fn raw_records_are_kept_too() {
    let dir = tempfile::tempdir().unwrap();
    stoker_loader::synthetic::write_mnist(dir.path(), 30, 3).unwrap();
    let spec = "crop:24:pad=2,flip";
    let (reference, _) = run(open(dir.path()), config(Mode::Sync, 0, spec, None));
    for (mode, workers) in [(Mode::Sync, 0), (Mode::Async, 2)] {
        let cfg = config(mode, workers, spec, Some(DecodedCacheSize::Auto));
        let (got, m) = run(open(dir.path()), cfg);
        assert_eq!(got, reference, "{mode}");
        assert!(m.decoded_cache_hits >= 30, "{mode}: {m:?}");
        assert!(m.decoded_cache_bytes >= 30 * 28 * 28, "{mode}: {m:?}");
    }
}

#[test]
fn the_cache_counts_in_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_folder(dir.path(), "png");
    let bound = 4 << 20;
    let cfg = |size| LoaderConfig {
        max_buffer_bytes: Some(bound),
        ..config(Mode::Async, 2, "crop:32", Some(size))
    };
    // 5 buffers of 6 x 32 x 32 x 3 bytes.
    let pool = 5 * 6 * 32 * 32 * 3;
    let loader = Loader::new(open(&path), cfg(DecodedCacheSize::Auto)).unwrap();
    assert_eq!(loader.decoded_cache_capacity(), Some((bound - pool) as u64));
    assert_eq!(loader.memory_bound_bytes(), bound);
    let fits = DecodedCacheSize::Bytes((bound - pool) as u64);
    assert!(Loader::new(open(&path), cfg(fits)).is_ok());
    let over = DecodedCacheSize::Bytes((bound - pool + 1) as u64);
    let e = Loader::new(open(&path), cfg(over))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains(&format!("decoded_cache: {} bytes", bound - pool + 1))
            && e.contains(&format!("memory bound of {bound} bytes"))
            && e.contains(&format!("{pool} bytes")),
        "{e}"
    );
    let none = Loader::new(open(&path), config(Mode::Async, 2, "crop:32", None)).unwrap();
    assert_eq!(none.decoded_cache_capacity(), None);
}
