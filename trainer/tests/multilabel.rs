//! Multi-label training end to end on a tiny generated set: a JSON-lines manifest of
//! tagged images read by the loader, through the trainer's feed, into the sigmoid +
//! binary cross-entropy loss. The loss must fall and the validation exact-match ratio
//! must beat the best guess that ignores the image.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use stoker_loader::{source, Field, Fields, Loader, LoaderConfig, Mode};
use stoker_trainer::model::Target;
use stoker_trainer::train::{TrainConfig, TrainError, Trainer};
use stoker_trainer::{
    CpuBackend, FeedError, Model, ModelConfig, ModelError, ModelKind, Optimizer, OptimizerKind,
    Schedule,
};

const CLASSES: usize = 3;
const SIDE: u32 = 8;

/// A small xorshift: the test's own stream, independent of the crates under test.
struct Xs(u64);

impl Xs {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `count` images whose tag k is "channel k is bright" (any subset of the three, the
/// empty one included), with pixel noise; a manifest with a `classes` header. Returns
/// the manifest and each image's tag set as a bit mask.
fn tagged_set(dir: &Path, count: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut rng = Xs(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut lines = vec![r#"{"classes": ["red", "green", "blue"]}"#.to_string()];
    let mut masks = Vec::new();
    for i in 0..count {
        let mask = (rng.next() % 8) as u8;
        let img = image::RgbImage::from_fn(SIDE, SIDE, |_, _| {
            image::Rgb(std::array::from_fn(|k| {
                let base: i64 = if mask >> k & 1 == 1 { 190 } else { 60 };
                (base + (rng.next() % 61) as i64 - 30) as u8
            }))
        });
        img.save(dir.join(format!("img/{i}.png"))).unwrap();
        let tags: Vec<String> = (0..CLASSES)
            .filter(|k| mask >> k & 1 == 1)
            .map(|k| k.to_string())
            .collect();
        lines.push(format!(
            r#"{{"image": "img/{i}.png", "labels": [{}]}}"#,
            tags.join(", ")
        ));
        masks.push(mask);
    }
    let manifest = dir.join("train.jsonl");
    std::fs::write(&manifest, lines.join("\n") + "\n").unwrap();
    (manifest, masks)
}

fn loader(path: &Path, split: source::Split, fields: Fields) -> Loader {
    let cfg = LoaderConfig {
        batch_size: 16,
        mode: Mode::Sync,
        seed: 5,
        shuffle: split.is_train(),
        fields: Some(fields),
        ..LoaderConfig::default()
    };
    Loader::new(source::open(path, split).unwrap(), cfg).unwrap()
}

fn trainer(train: &Path, val: &Path, epochs: u64, fields: Fields) -> Trainer<CpuBackend> {
    let train = loader(train, source::Split::Train, fields);
    let val = loader(val, source::Split::Test, fields);
    let b = CpuBackend::new();
    let model = Model::new(
        &b,
        ModelConfig::new(ModelKind::Mlp, train.image_shape(), CLASSES, 16)
            .seed(1)
            .target(Target::Labels),
    )
    .unwrap();
    let opt = Optimizer::new(&model, OptimizerKind::adamw(0.0)).unwrap();
    let per_epoch = train.batches_per_epoch() as u64;
    let cfg = TrainConfig {
        epochs,
        schedule: Schedule::new(3e-3, 2, epochs * per_epoch),
        log_every: 1,
        max_steps: None,
        checkpoint: None,
    };
    Trainer::new(model, opt, train, Some(val), cfg)
}

#[test]
fn multi_label_training_lowers_the_loss_and_beats_chance() {
    let tmp = tempfile::tempdir().unwrap();
    let (train, _) = tagged_set(&tmp.path().join("train"), 128, 1);
    let (val, val_masks) = tagged_set(&tmp.path().join("val"), 64, 2);
    let fields = Fields::of(&[Field::Image, Field::Labels]);
    let mut t = trainer(&train, &val, 4, fields);
    t.run(&mut ()).unwrap();
    let log = &t.history.log;
    let (first, last) = (log.first().unwrap().loss, log.last().unwrap().loss);
    // Logits start near 0: the loss starts near ln 2 per term.
    assert!(
        (first - std::f32::consts::LN_2).abs() < 0.15,
        "first loss {first}"
    );
    assert!(last < 0.5 * first, "loss {first} -> {last}");
    // The best answer that ignores the image: the commonest tag set of the validation
    // data, right for that share of it.
    let mut counts: HashMap<u8, usize> = HashMap::new();
    for m in &val_masks {
        *counts.entry(*m).or_default() += 1;
    }
    let chance = *counts.values().max().unwrap() as f32 / val_masks.len() as f32;
    let val = t.history.epochs.last().unwrap().val.unwrap();
    assert_eq!(val.samples, 64);
    assert!(
        val.accuracy > chance + 0.3,
        "val exact-match {} vs chance {chance}",
        val.accuracy
    );
    eprintln!(
        "multi-label: loss {first:.4} -> {last:.4}, val loss {:.4}, val exact-match {:.3} \
         (chance {chance:.3})",
        val.loss, val.accuracy
    );
}

/// Average precision as the mean, over the positives, of the precision among the
/// samples scored at least as high as each: scikit-learn's step definition written
/// another way (ties counted at the end of their group, as its thresholds do).
fn ap_by_positives(scores: &[f32], positive: &[bool]) -> f64 {
    let pos: Vec<f32> = (0..scores.len())
        .filter(|&i| positive[i])
        .map(|i| scores[i])
        .collect();
    pos.iter()
        .map(|&s| {
            let above = scores.iter().filter(|&&x| x >= s).count();
            let pos_above = pos.iter().filter(|&&x| x >= s).count();
            pos_above as f64 / above as f64
        })
        .sum::<f64>()
        / pos.len() as f64
}

/// The validation mAP and F1 the trainer reports are those of the model's own logits
/// against the set's tags, recomputed here from the definitions; and a model that
/// learned the easy set ranks it almost perfectly.
#[test]
fn the_reported_map_and_f1_follow_from_the_logits_and_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let (train, _) = tagged_set(&tmp.path().join("train"), 128, 1);
    let (val, val_masks) = tagged_set(&tmp.path().join("val"), 64, 2);
    let fields = Fields::of(&[Field::Image, Field::Labels]);
    let mut t = trainer(&train, &val, 4, fields);
    t.run(&mut ()).unwrap();
    let reported = t.history.epochs.last().unwrap().val.unwrap().labels;
    let reported = reported.expect("a multi-label evaluation has label metrics");

    // The same weights through the public evaluation steps, scores taken directly.
    let mut v = loader(&val, source::Split::Test, fields);
    for batch in v.epoch(0) {
        let b = batch.unwrap();
        let tags = b.fields.as_ref().unwrap().labels_k_hot(CLASSES);
        t.model.evaluate_labels(&b.images, &tags, b.len()).unwrap();
    }
    let scores = t
        .model
        .take_eval_scores()
        .expect("a multi-label model keeps scores");
    assert_eq!(scores.len(), 64);
    // The tags the metrics see are the set's, in order.
    for (j, mask) in val_masks.iter().enumerate() {
        let row = &scores.tags()[j * CLASSES..(j + 1) * CLASSES];
        for (k, &tag) in row.iter().enumerate() {
            assert_eq!(tag, mask >> k & 1 == 1, "sample {j} class {k}");
        }
    }
    let (mut aps, mut tp, mut wrong, mut f1s) = (Vec::new(), 0, 0, Vec::new());
    for k in 0..CLASSES {
        let col: Vec<f32> = (0..64).map(|j| scores.logits()[j * CLASSES + k]).collect();
        let pos: Vec<bool> = (0..64).map(|j| scores.tags()[j * CLASSES + k]).collect();
        aps.push(ap_by_positives(&col, &pos));
        let said: Vec<bool> = col
            .iter()
            .map(|&z| 1.0 / (1.0 + (-z).exp()) > 0.5)
            .collect();
        let c_tp = (0..64).filter(|&j| said[j] && pos[j]).count();
        let c_wrong = (0..64).filter(|&j| said[j] != pos[j]).count();
        f1s.push(2.0 * c_tp as f64 / (2 * c_tp + c_wrong) as f64);
        tp += c_tp;
        wrong += c_wrong;
    }
    let map = aps.iter().sum::<f64>() / CLASSES as f64;
    let got = reported.map.unwrap();
    assert!((got - map).abs() < 1e-9, "reported mAP {got} vs {map}");
    let micro = 2.0 * tp as f64 / (2 * tp + wrong) as f64;
    assert!(
        (reported.f1_micro - micro).abs() < 1e-9,
        "{reported:?} vs {micro}"
    );
    let macro_ = f1s.iter().sum::<f64>() / CLASSES as f64;
    assert!(
        (reported.f1_macro - macro_).abs() < 1e-9,
        "{reported:?} vs {macro_}"
    );
    // Each tag is half the samples': a ranking that ignored the image would score
    // about 0.5.
    assert!(got > 0.95, "mAP {got}");
}

#[test]
fn a_multi_label_model_refuses_batches_without_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let (train, _) = tagged_set(&tmp.path().join("train"), 16, 3);
    // The tags not loaded: the batch has images only.
    let mut t = trainer(&train, &train, 1, Fields::of(&[Field::Image]));
    let err = t.run(&mut ()).unwrap_err();
    assert!(
        matches!(err, TrainError::Feed(FeedError::Model(ModelError::NoTags))),
        "{err}"
    );
}

#[test]
fn each_model_refuses_the_other_target() {
    let b = CpuBackend::new();
    let input = (4, 4, 1);
    let images = vec![0u8; 2 * 16];
    let mut class = Model::new(&b, ModelConfig::new(ModelKind::Mlp, input, 3, 2)).unwrap();
    let err = class
        .forward_backward_labels(&images, &[1, 0, 0, 0, 1, 1], 2)
        .unwrap_err();
    assert!(matches!(err, ModelError::WrongTarget { .. }), "{err}");
    let mut tags = Model::new(
        &b,
        ModelConfig::new(ModelKind::Mlp, input, 3, 2).target(Target::Labels),
    )
    .unwrap();
    let err = tags.forward_backward(&images, &[0, 1], 2).unwrap_err();
    assert!(matches!(err, ModelError::WrongTarget { .. }), "{err}");
    // And a k-hot matrix of the wrong size is an error, not a panic.
    let err = tags
        .forward_backward_labels(&images, &[1, 0, 0], 2)
        .unwrap_err();
    assert!(matches!(err, ModelError::InputLen { .. }), "{err}");
    tags.forward_backward_labels(&images, &[1, 0, 0, 0, 1, 1], 2)
        .unwrap();
}
