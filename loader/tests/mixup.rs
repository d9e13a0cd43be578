//! MixUp and CutMix through the loader: the same bytes and soft labels in every mode
//! and worker count, an exact resume, soft labels that say what each image holds, and
//! untouched batches when mixing is off.

use crate::engine_support;

use std::sync::Arc;

use engine_support::RawSource;
use stoker_augment::Pipeline;
use stoker_loader::{
    Digest, Field, Fields, Loader, LoaderConfig, LoaderError, Mix, Mode, OnError, Source,
};

fn config(mode: Mode, workers: usize, mix: &str) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        prefetch: 2,
        io_depth: 4,
        seed: 42,
        transform: Pipeline::parse("rrc:8,flip,randaugment").expect("spec"),
        mixup: Some(Mix::parse(mix).expect("mix")),
        ..LoaderConfig::default()
    }
}

/// Digest of each batch (pixels, labels and soft labels) of `epochs`.
fn digests(src: Arc<dyn Source>, cfg: LoaderConfig, epochs: u64) -> Vec<String> {
    let mixed = cfg.mixup.is_some();
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            let b = b.expect("batch");
            assert_eq!(b.soft_labels.is_some(), mixed, "soft labels iff mixed");
            let mut d = Digest::new();
            d.update(&b);
            out.push(d.hex());
        }
    }
    out
}

#[test]
fn mixed_batches_are_identical_in_every_mode_and_worker_count() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(45, 16));
    for mix in [
        "mixup:0.4",
        "cutmix:1.0",
        "mixup:0.8,cutmix:1.0,mix_prob:0.5",
    ] {
        let reference = digests(src.clone(), config(Mode::Sync, 1, mix), 2);
        assert_eq!(reference.len(), 2 * 6);
        for workers in [1, 2, 4] {
            let got = digests(src.clone(), config(Mode::Async, workers, mix), 2);
            assert_eq!(
                got, reference,
                "{mix}: async, {workers} workers, differs from sync"
            );
        }
        // Mixing changes the batches, and another seed mixes them otherwise.
        let plain = digests(
            src.clone(),
            LoaderConfig {
                mixup: None,
                ..config(Mode::Sync, 1, mix)
            },
            1,
        );
        assert_ne!(plain[..], reference[..6], "{mix}");
        let other = digests(
            src.clone(),
            LoaderConfig {
                seed: 43,
                ..config(Mode::Sync, 1, mix)
            },
            1,
        );
        assert_ne!(other[..], reference[..6], "{mix}");
    }
}

#[test]
fn resume_mid_epoch_gives_the_same_mixed_batches() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(50, 12));
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = config(mode, 2, "mixup:0.8,cutmix:1.0");
        let full = digests(src.clone(), cfg.clone(), 2);
        let mut first = Loader::new(src.clone(), cfg.clone()).expect("loader");
        let mut got = Vec::new();
        for b in first.epoch(0) {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            got.push(d.hex());
        }
        let mut ep = first.epoch(1);
        for _ in 0..3 {
            let mut d = Digest::new();
            d.update(&ep.next().expect("some").expect("batch"));
            got.push(d.hex());
        }
        let state = ep.state();
        drop(first);
        let mut second = Loader::new(src.clone(), cfg.clone()).expect("loader");
        for b in second.resume(&state).expect("resume") {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            got.push(d.hex());
        }
        assert_eq!(got, full, "{mode}: resume differs");
    }
}

/// With the identity transform the pixels of each mixed image can be checked against
/// the source: CutMix images are their own pixels outside one box and their
/// neighbour's inside it, and the soft label weighs the two by those pixel shares.
#[test]
fn soft_labels_are_the_pixel_shares() {
    let raw = Arc::new(RawSource::new(24, 10));
    let src: Arc<dyn Source> = raw.clone();
    let cfg = LoaderConfig {
        transform: Pipeline::identity(),
        shuffle: false,
        ..config(Mode::Sync, 1, "cutmix:1.0")
    };
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut boxes = 0;
    for b in loader.epoch(0) {
        let b = b.expect("batch");
        let n = b.len();
        let soft = b.soft_labels.as_ref().expect("soft labels");
        assert_eq!(soft.len(), n * 3, "(N, classes)");
        for i in 0..n {
            let own = raw.pixels(b.indices[i]);
            let prev = raw.pixels(b.indices[(i + n - 1) % n]);
            let got = b.image(i);
            let (mut kept, mut pasted) = (0usize, 0usize);
            for p in 0..100 {
                let px = &got[p * 3..p * 3 + 3];
                if px == &own[p * 3..p * 3 + 3] {
                    kept += 1;
                } else {
                    assert_eq!(px, &prev[p * 3..p * 3 + 3], "pixel {p} is neither image's");
                    pasted += 1;
                }
            }
            let row = b.soft_label(i).expect("row");
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "{row:?}");
            let (own_l, prev_l) = (b.labels[i] as usize, b.labels[(i + n - 1) % n] as usize);
            if own_l != prev_l {
                // Equal pixels in both images would count as kept: the pasted share is at
                // most what the label says, and (these images differ everywhere) equal.
                let share = row[prev_l] as f64;
                assert!(
                    (share - pasted as f64 / 100.0).abs() < 1e-6,
                    "{share} vs {pasted}/100"
                );
                assert!((row[own_l] as f64 - kept as f64 / 100.0).abs() < 1e-6);
            }
            boxes += usize::from(pasted > 0);
        }
    }
    assert!(boxes > 0, "some box was pasted");
}

#[test]
fn mixing_needs_classes_and_sane_labels() {
    let mut raw = RawSource::new(10, 4);
    raw.classes = vec!["only".into()];
    let e = Loader::new(Arc::new(raw), config(Mode::Sync, 1, "mixup:0.2"))
        .err()
        .expect("one class is refused")
        .to_string();
    assert!(e.contains("soft labels need at least 2 classes"), "{e}");
    // Labels at or past the class count (the source says 2 classes, labels go to 2).
    let mut raw = RawSource::new(10, 4);
    raw.classes = vec!["a".into(), "b".into()];
    let mut loader = Loader::new(
        Arc::new(raw),
        LoaderConfig {
            on_error: OnError::Fail,
            ..config(Mode::Sync, 1, "mixup:0.2")
        },
    )
    .expect("loader");
    let err = loader
        .epoch(0)
        .find_map(|b| b.err())
        .expect("a batch with label 2 fails");
    assert!(matches!(err, LoaderError::Sample { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("not below the data set's 2 classes"),
        "{err}"
    );
}

#[test]
fn mixing_a_set_without_a_class_per_sample_is_refused() {
    // Every label would be 0 and every soft label all on class 0.
    // Class names (of its boxes, say) but no class per sample.
    let mut src = RawSource::new(10, 4);
    src.fields = Some(Fields::of(&[Field::Image]));
    let e = Loader::new(Arc::new(src), config(Mode::Sync, 1, "cutmix:1.0"))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("mixup 'cutmix:1'") && e.contains("no class per sample (its fields: image)"),
        "{e}"
    );
}

#[test]
fn batches_without_mixing_carry_no_soft_labels() {
    let src: Arc<dyn Source> = Arc::new(RawSource::new(20, 8));
    let cfg = LoaderConfig {
        mixup: None,
        ..config(Mode::Async, 2, "mixup:1")
    };
    let mut loader = Loader::new(src, cfg).expect("loader");
    for b in loader.epoch(0) {
        assert!(b.expect("batch").soft_labels.is_none());
    }
}
