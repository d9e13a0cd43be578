//! User steps end to end: a step that adds fields (a fixed-size array, a ragged one
//! drawn from its own rng) and remaps classes; its output is the same in both modes,
//! for any worker count and on resume; its errors follow on_error; and a loader
//! without steps is untouched.

use std::sync::Arc;

use stoker_augment::{Pipeline, SampleRng};
use stoker_loader::step::{step_rng, BatchArray};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{
    source, Array, ArrayData, Batch, Digest, Loader, LoaderConfig, LoaderError, Mode, OnError,
    SampleError, Source, StepError, StepSample, UserStep,
};

fn data() -> (tempfile::TempDir, Arc<dyn Source>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ShapesOptions {
        count: 40,
        size: 32,
        classes: 4,
        seed: 3,
    };
    synthetic::shapes(dir.path(), &opts, |_, _| {}).expect("shapes");
    let src = source::open(dir.path(), source::Split::Train).expect("open");
    (dir, src)
}

/// Adds `mean` (the image's mean pixel, f32 scalar) and `draws` (1 to 3 i64 values
/// from the step's rng: ragged), and moves every class up by 10.
fn adding_step(s: &mut StepSample<'_>, rng: &mut SampleRng) -> Result<(), StepError> {
    let mean = s.image.iter().map(|&p| f64::from(p)).sum::<f64>() / s.image.len() as f64;
    s.insert(
        "mean",
        Array::scalar(ArrayData::F32(vec![mean as f32])).ok_or("scalar")?,
    );
    let n = 1 + rng.below(3) as usize;
    let draws: Vec<i64> = (0..n).map(|_| rng.below(1000) as i64).collect();
    s.insert(
        "draws",
        Array::new(vec![n], ArrayData::I64(draws)).ok_or("draws")?,
    );
    s.label += 10;
    Ok(())
}

fn config(mode: Mode, workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        seed: 5,
        transform: Pipeline::parse("rrc:24,flip").expect("spec"),
        steps: vec![UserStep::new(adding_step)],
        ..LoaderConfig::default()
    }
}

fn extra<'a>(b: &'a Batch, name: &str) -> &'a BatchArray {
    let f = b.fields.as_ref().expect("a loader with steps has fields");
    &f.extra.iter().find(|(n, _)| n == name).expect(name).1
}

fn digest(loader: &mut Loader, epoch: u64) -> String {
    let mut d = Digest::new();
    for b in loader.epoch(epoch) {
        d.update(&b.expect("batch"));
    }
    d.hex()
}

#[test]
fn a_step_adds_fields_and_remaps_classes() {
    let (_dir, src) = data();
    let mut plain = Loader::new(
        src.clone(),
        LoaderConfig {
            steps: Vec::new(),
            ..config(Mode::Sync, 0)
        },
    )
    .expect("loader");
    let mut stepped = Loader::new(src, config(Mode::Sync, 0)).expect("loader");
    let plain: Vec<Batch> = plain.epoch(1).map(|b| b.expect("batch")).collect();
    let stepped: Vec<Batch> = stepped.epoch(1).map(|b| b.expect("batch")).collect();
    assert_eq!(plain.len(), stepped.len());
    for (p, s) in plain.iter().zip(&stepped) {
        // After the built-in transforms: the same pixels the plain loader gives.
        assert_eq!(&p.images[..], &s.images[..]);
        assert!(p.fields.is_none(), "no step: the classification path");
        let want: Vec<u32> = p.labels.iter().map(|l| l + 10).collect();
        assert_eq!(s.labels, want);
        let mean = extra(s, "mean");
        assert_eq!(mean.array.shape, vec![s.len()]);
        assert_eq!(mean.count, None);
        let ArrayData::F32(means) = &mean.array.data else {
            panic!("mean is {:?}", mean.array.data.dtype())
        };
        for (i, m) in means.iter().enumerate() {
            let img = s.image(i);
            let want = img.iter().map(|&p| f64::from(p)).sum::<f64>() / img.len() as f64;
            assert!(
                (f64::from(*m) - want).abs() < 1e-3,
                "sample {i}: {m} vs {want}"
            );
        }
        // The draws come from the step's stream of (seed, epoch, index).
        let draws = extra(s, "draws");
        let counts = draws.count.as_ref().expect("ragged: counts");
        let m = draws.array.shape[1];
        let ArrayData::I64(values) = &draws.array.data else {
            panic!("draws is {:?}", draws.array.data.dtype())
        };
        for (i, &index) in s.indices.iter().enumerate() {
            let mut rng = step_rng(5, 1, index as u64);
            let n = 1 + rng.below(3) as usize;
            assert_eq!(counts[i] as usize, n);
            let want: Vec<i64> = (0..n).map(|_| rng.below(1000) as i64).collect();
            assert_eq!(&values[i * m..i * m + n], &want[..]);
            assert!(values[i * m + n..(i + 1) * m].iter().all(|&v| v == 0));
        }
    }
    assert!(
        stepped.iter().any(|b| extra(b, "draws").array.shape[1] > 1),
        "some batch pads"
    );
}

#[test]
fn step_output_is_the_same_in_every_mode_worker_count_and_on_resume() {
    let (_dir, src) = data();
    let mut sync = Loader::new(src.clone(), config(Mode::Sync, 0)).expect("loader");
    let want = digest(&mut sync, 2);
    for workers in [1, 2, 4] {
        let mut l = Loader::new(src.clone(), config(Mode::Async, workers)).expect("loader");
        assert_eq!(digest(&mut l, 2), want, "async, {workers} workers");
    }
    // Another epoch draws other numbers.
    assert_ne!(digest(&mut sync, 3), want);
    // Resume after two batches: the rest is what a straight run gives.
    let mut l = Loader::new(src.clone(), config(Mode::Async, 2)).expect("loader");
    let straight: Vec<Batch> = l.epoch(2).map(|b| b.expect("batch")).collect();
    let state = {
        let mut e = l.epoch(2);
        e.next().expect("first").expect("batch");
        e.next().expect("second").expect("batch");
        e.state()
    };
    let mut fresh = Loader::new(src, config(Mode::Async, 3)).expect("loader");
    let rest: Vec<Batch> = fresh
        .resume(&state)
        .expect("resume")
        .map(|b| b.expect("batch"))
        .collect();
    assert_eq!(rest.len(), straight.len() - 2);
    for (a, b) in rest.iter().zip(&straight[2..]) {
        let (mut da, mut db) = (Digest::new(), Digest::new());
        da.update(a);
        db.update(b);
        assert_eq!(da.hex(), db.hex());
    }
}

/// Fails on samples whose index is a multiple of 7.
fn failing_step(s: &mut StepSample<'_>, _: &mut SampleRng) -> Result<(), StepError> {
    if s.index.is_multiple_of(7) {
        return Err(format!("index {} is a multiple of 7", s.index).into());
    }
    Ok(())
}

#[test]
fn step_errors_follow_on_error() {
    let (_dir, src) = data();
    let cfg = |on_error, mode| LoaderConfig {
        on_error,
        steps: vec![UserStep::new(failing_step)],
        ..config(mode, 2)
    };
    for mode in [Mode::Sync, Mode::Async] {
        let mut l = Loader::new(src.clone(), cfg(OnError::Fail, mode)).expect("loader");
        let err = l.epoch(0).find_map(|b| b.err()).expect("a sample fails");
        match &err {
            LoaderError::Sample {
                index,
                what,
                source,
            } => {
                assert_eq!(index % 7, 0, "{err}");
                assert!(!what.is_empty());
                assert!(matches!(source, SampleError::Step { .. }), "{err}");
                let reason = source.to_string();
                assert!(reason.contains("step 'user step'"), "{err}");
                assert!(reason.contains("multiple of 7"), "{err}");
            }
            other => panic!("{mode}: {other}"),
        }
        let mut l = Loader::new(src.clone(), cfg(OnError::Skip, mode)).expect("loader");
        let mut seen = Vec::new();
        let mut skipped = 0;
        for b in l.epoch(0) {
            let b = b.expect("skip: no error");
            skipped += b.skipped;
            seen.extend(b.indices.iter().copied());
        }
        let bad = (0..src.len()).filter(|i| i % 7 == 0).count();
        assert_eq!(skipped, bad, "{mode}");
        assert_eq!(seen.len(), src.len() - bad);
        assert!(seen.iter().all(|i| i % 7 != 0));
    }
}

#[test]
fn steps_that_disagree_across_samples_fail_the_batch() {
    let (_dir, src) = data();
    let odd = |s: &mut StepSample<'_>, _: &mut SampleRng| -> Result<(), StepError> {
        let data = if s.index.is_multiple_of(2) {
            ArrayData::U8(vec![1])
        } else {
            ArrayData::F32(vec![1.0])
        };
        s.insert("x", Array::new(vec![1], data).ok_or("x")?);
        Ok(())
    };
    let mut l = Loader::new(
        src,
        LoaderConfig {
            on_error: OnError::Skip,
            steps: vec![UserStep::new(odd)],
            ..config(Mode::Sync, 0)
        },
    )
    .expect("loader");
    let err = l
        .epoch(0)
        .next()
        .expect("a batch")
        .expect_err("mixed types");
    assert!(err.to_string().contains("added array 'x'"), "{err}");
}

#[test]
fn a_step_may_change_pixels_in_place() {
    let (_dir, src) = data();
    let invert = |s: &mut StepSample<'_>, _: &mut SampleRng| -> Result<(), StepError> {
        s.image.iter_mut().for_each(|p| *p = 255 - *p);
        Ok(())
    };
    let cfg = |steps| LoaderConfig {
        steps,
        ..config(Mode::Async, 2)
    };
    let mut plain = Loader::new(src.clone(), cfg(Vec::new())).expect("loader");
    let mut inv = Loader::new(src, cfg(vec![UserStep::new(invert)])).expect("loader");
    for (p, i) in plain.epoch(0).zip(inv.epoch(0)) {
        let (p, i) = (p.expect("batch"), i.expect("batch"));
        assert!(p
            .images
            .iter()
            .zip(i.images.iter())
            .all(|(a, b)| *a == 255 - *b));
        assert_eq!(p.labels, i.labels, "no remap");
        assert!(i.fields.as_ref().expect("fields").extra.is_empty());
    }
}

#[test]
fn steps_and_mixing_are_refused_together() {
    let (_dir, src) = data();
    let cfg = LoaderConfig {
        mixup: Some(stoker_loader::Mix::new(Some(0.2), None, None).expect("mix")),
        ..config(Mode::Sync, 0)
    };
    let err = Loader::new(src, cfg).err().expect("refused");
    assert!(err.to_string().contains("user steps"), "{err}");
}
