//! End-to-end model tests: training drives the loss down, runs are bit-reproducible,
//! checkpoints round-trip exactly and reject the wrong model or a damaged file, and a
//! step allocates no buffers.

use std::collections::BTreeMap;

use stoker_trainer::backend::{Buffers, Out};
use stoker_trainer::checkpoint::{self, CheckpointError};
use stoker_trainer::model::Target;
use stoker_trainer::rng::Rng;
use stoker_trainer::{
    CpuBackend, Model, ModelConfig, ModelError, ModelKind, Optimizer, OptimizerKind,
};

/// A separable problem: class k brightens quadrant k (of channel k % c) on a noisy
/// background. Returns u8 NHWC images and labels.
fn batch(
    rng: &mut Rng,
    n: usize,
    (h, w, c): (usize, usize, usize),
    classes: usize,
) -> (Vec<u8>, Vec<u32>) {
    let mut img = vec![0u8; n * h * w * c];
    let mut labels = vec![0u32; n];
    for i in 0..n {
        let k = (rng.next_u64() % classes as u64) as usize;
        labels[i] = k as u32;
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    let q = (y >= h / 2) as usize * 2 + (x >= w / 2) as usize;
                    let on = q == k % 4 && ch == k % c;
                    let base = if on { 170.0 } else { 70.0 };
                    let v = base + 40.0 * rng.normal();
                    img[((i * h + y) * w + x) * c + ch] = v.clamp(0.0, 255.0) as u8;
                }
            }
        }
    }
    (img, labels)
}

fn train(
    kind: ModelKind,
    input: (usize, usize, usize),
    opt: OptimizerKind,
    lr: f32,
    steps: usize,
    n: usize,
) -> (Vec<f32>, f32, f32) {
    let b = CpuBackend::new();
    let mut m = Model::new(&b, ModelConfig::new(kind, input, 4, n).seed(7)).unwrap();
    let mut o = Optimizer::new(&m, opt).unwrap();
    let mut rng = Rng::new(1);
    let (mut first, mut last) = (0.0, 0.0);
    let window = 10;
    for s in 0..steps {
        let (x, y) = batch(&mut rng, n, input, 4);
        m.forward_backward(&x, &y, n).unwrap();
        o.step(&mut m, lr).unwrap();
        if (s + 1) % window == 0 {
            let st = m.take_train_stats().unwrap();
            assert_eq!(st.samples, (window * n) as u64);
            if s + 1 == window {
                first = st.loss;
            }
            last = st.loss;
        }
    }
    (m.params_to_host().unwrap(), first, last)
}

#[test]
fn mlp_learns_a_separable_problem() {
    let (_, first, last) = train(
        ModelKind::Mlp,
        (8, 8, 1),
        OptimizerKind::sgd(0.9, 1e-4),
        0.02,
        200,
        32,
    );
    assert!(first > 0.5, "first {first}");
    assert!(last < 0.1 * first, "loss {first} -> {last}");
}

#[test]
fn convnet_learns_a_separable_problem() {
    let (_, first, last) = train(
        ModelKind::Convnet,
        (12, 12, 3),
        OptimizerKind::adamw(1e-4),
        3e-3,
        150,
        16,
    );
    assert!(last < 0.3 * first, "loss {first} -> {last}");
}

#[test]
fn resnet_learns_a_separable_problem() {
    let (_, first, last) = train(
        ModelKind::Resnet,
        (8, 8, 3),
        OptimizerKind::sgd(0.9, 1e-4),
        0.05,
        60,
        16,
    );
    assert!(last < 0.5 * first, "loss {first} -> {last}");
}

#[test]
fn same_seed_gives_bit_identical_weights() {
    for kind in ModelKind::ALL {
        let run = || train(kind, (8, 8, 3), OptimizerKind::adamw(1e-2), 1e-3, 10, 8).0;
        let (a, b) = (run(), run());
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{kind} diverged"
        );
    }
    let b = CpuBackend::new();
    let p = |seed| {
        Model::new(
            &b,
            ModelConfig::new(ModelKind::Convnet, (8, 8, 3), 4, 2).seed(seed),
        )
        .unwrap()
        .params_to_host()
        .unwrap()
    };
    assert_ne!(p(1), p(2));
}

#[test]
fn a_step_allocates_no_buffers_and_accepts_smaller_batches() {
    let b = CpuBackend::new();
    let input = (10, 10, 3);
    let mut m = Model::new(&b, ModelConfig::new(ModelKind::Resnet, input, 4, 8)).unwrap();
    let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 0.0)).unwrap();
    let before = b.alloc_count();
    let mut rng = Rng::new(3);
    for n in [8, 5, 8, 1] {
        let (x, y) = batch(&mut rng, n, input, 4);
        m.forward_backward(&x, &y, n).unwrap();
        o.step(&mut m, 0.01).unwrap();
        m.evaluate(&x, &y, n).unwrap();
        assert_eq!(m.last_step_stats().unwrap().samples, n as u64);
    }
    assert_eq!(m.take_train_stats().unwrap().samples, 22);
    let ev = m.take_eval_stats().unwrap();
    assert_eq!(ev.samples, 22);
    assert!(ev.loss.is_finite() && (0.0..=1.0).contains(&ev.accuracy));
    assert_eq!(b.alloc_count(), before, "a step allocated device buffers");
}

#[test]
fn bad_batches_are_errors() {
    let b = CpuBackend::new();
    let mut m = Model::new(&b, ModelConfig::new(ModelKind::Mlp, (4, 4, 1), 3, 4)).unwrap();
    let img = vec![0u8; 16 * 5];
    assert!(matches!(
        m.forward_backward(&img, &[0; 5], 5),
        Err(ModelError::BatchTooLarge { n: 5, max: 4 })
    ));
    assert!(matches!(
        m.forward_backward(&img[..16 * 2 - 1], &[0; 2], 2),
        Err(ModelError::InputLen { .. })
    ));
    assert!(matches!(
        m.forward_backward(&img[..32], &[0; 3], 2),
        Err(ModelError::InputLen { .. })
    ));
    assert!(matches!(
        m.forward_backward(&img[..32], &[0, 3], 2),
        Err(ModelError::Label {
            index: 1,
            label: 3,
            classes: 3
        })
    ));
    assert!(matches!(
        m.evaluate(&[], &[], 0),
        Err(ModelError::EmptyBatch)
    ));
    assert!(Model::new(&b, ModelConfig::new(ModelKind::Convnet, (0, 4, 1), 3, 4)).is_err());
    assert!(Model::new(
        &b,
        ModelConfig::new(ModelKind::Convnet, (4, 4, 2), 3, 4).normalize(&[0.5], &[0.2])
    )
    .is_err());
    assert!("transformer".parse::<ModelKind>().is_err());
    assert_eq!("resnet".parse::<ModelKind>().unwrap(), ModelKind::Resnet);
}

#[test]
fn checkpoint_round_trip_is_bit_exact_and_resumes_identically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let b = CpuBackend::new();
    let input = (8, 8, 3);
    let cfg = ModelConfig::new(ModelKind::Convnet, input, 4, 8).seed(5);
    let mut m = Model::new(&b, cfg.clone()).unwrap();
    let mut o = Optimizer::new(&m, OptimizerKind::adamw(1e-2)).unwrap();
    let mut rng = Rng::new(9);
    for _ in 0..3 {
        let (x, y) = batch(&mut rng, 8, input, 4);
        m.forward_backward(&x, &y, 8).unwrap();
        o.step(&mut m, 1e-3).unwrap();
    }
    let extra = BTreeMap::from([("loader".to_string(), "{\"epoch\":1}".to_string())]);
    checkpoint::save(&path, &m, &o, &extra).unwrap();
    let meta = checkpoint::read_metadata(&path).unwrap();
    assert_eq!(
        meta.get("stoker.model.kind").map(String::as_str),
        Some("convnet")
    );

    let mut m2 = Model::new(&b, cfg.clone().seed(99)).unwrap();
    let mut o2 = Optimizer::new(&m2, OptimizerKind::adamw(1e-2)).unwrap();
    assert_eq!(checkpoint::load(&path, &mut m2, &mut o2).unwrap(), extra);
    assert_eq!(o2.steps(), 3);
    let bits = |m: &Model<CpuBackend>| {
        m.params_to_host()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&m), bits(&m2));
    // Optimizer state and running statistics came back too: the next step agrees.
    let (x, y) = batch(&mut rng, 8, input, 4);
    for (m, o) in [(&mut m, &mut o), (&mut m2, &mut o2)] {
        m.forward_backward(&x, &y, 8).unwrap();
        o.step(m, 1e-3).unwrap();
        m.evaluate(&x, &y, 8).unwrap();
    }
    assert_eq!(bits(&m), bits(&m2));
    assert_eq!(m.take_eval_stats().unwrap(), m2.take_eval_stats().unwrap());

    // Another model, other classes, another optimizer: typed errors, nothing changed.
    let mut mlp = Model::new(&b, ModelConfig::new(ModelKind::Mlp, input, 4, 8)).unwrap();
    let mut omlp = Optimizer::new(&mlp, OptimizerKind::adamw(1e-2)).unwrap();
    let before = bits(&mlp);
    assert!(matches!(
        checkpoint::load(&path, &mut mlp, &mut omlp),
        Err(CheckpointError::Mismatch { .. })
    ));
    assert_eq!(bits(&mlp), before);
    let mut m5 = Model::new(&b, ModelConfig::new(ModelKind::Convnet, input, 5, 8)).unwrap();
    let mut o5 = Optimizer::new(&m5, OptimizerKind::adamw(1e-2)).unwrap();
    assert!(matches!(
        checkpoint::load(&path, &mut m5, &mut o5),
        Err(CheckpointError::Mismatch { .. })
    ));
    let mut osgd = Optimizer::new(&m2, OptimizerKind::sgd(0.9, 0.0)).unwrap();
    assert!(matches!(
        checkpoint::load(&path, &mut m2, &mut osgd),
        Err(CheckpointError::Mismatch { .. })
    ));

    // Damaged files.
    let bytes = std::fs::read(&path).unwrap();
    let bad = dir.path().join("bad.safetensors");
    for damaged in [
        bytes[..bytes.len() / 2].to_vec(),
        b"not a checkpoint".to_vec(),
        vec![],
    ] {
        std::fs::write(&bad, &damaged).unwrap();
        assert!(
            matches!(
                checkpoint::load(&bad, &mut m2, &mut o2),
                Err(CheckpointError::Format { .. })
            ),
            "{} bytes",
            damaged.len()
        );
    }
    assert!(matches!(
        checkpoint::load(&dir.path().join("missing"), &mut m2, &mut o2),
        Err(CheckpointError::Io { .. })
    ));
    // A step count that is not a number (the digits overwritten in place, so that the
    // header keeps its length): the number parser's error is the source.
    let key = b"\"stoker.optimizer.steps\":\"";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    let mut forged = bytes.clone();
    for b in forged[at..].iter_mut().take_while(|b| b.is_ascii_digit()) {
        *b = b'x';
    }
    std::fs::write(&bad, &forged).unwrap();
    let err = checkpoint::load(&bad, &mut m2, &mut o2).unwrap_err();
    assert!(matches!(err, CheckpointError::Metadata { .. }), "{err}");
    let cause = std::error::Error::source(&err).expect("the parser's error is kept");
    assert!(cause.is::<std::num::ParseIntError>(), "{cause}");
    let reserved = BTreeMap::from([("stoker.model.kind".to_string(), "x".to_string())]);
    assert!(matches!(
        checkpoint::save(&bad, &m, &o, &reserved),
        Err(CheckpointError::ReservedKey(_))
    ));
}

#[test]
fn shape_mismatch_under_the_same_kind_is_a_typed_error() {
    // Same kind, input and classes (so the metadata matches) but a forged tensor of
    // the wrong shape, written with the safetensors crate directly.
    use safetensors::{serialize, Dtype, View};
    use std::borrow::Cow;
    struct T(Vec<usize>, Vec<u8>);
    impl View for &T {
        fn dtype(&self) -> Dtype {
            Dtype::F32
        }
        fn shape(&self) -> &[usize] {
            &self.0
        }
        fn data(&self) -> Cow<'_, [u8]> {
            Cow::Borrowed(&self.1)
        }
        fn data_len(&self) -> usize {
            self.1.len()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let b = CpuBackend::new();
    let mut m = Model::new(&b, ModelConfig::new(ModelKind::Mlp, (4, 4, 1), 3, 2)).unwrap();
    let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 0.0)).unwrap();
    checkpoint::save(&path, &m, &o, &BTreeMap::new()).unwrap();
    let meta = checkpoint::read_metadata(&path).unwrap();
    let t = T(vec![2, 2], vec![0; 16]);
    let bytes = serialize([("param.fc1.weight", &t)], Some(meta.into_iter().collect())).unwrap();
    std::fs::write(&path, bytes).unwrap();
    match checkpoint::load(&path, &mut m, &mut o) {
        Err(CheckpointError::Shape {
            name,
            expected,
            found,
            ..
        }) => {
            assert_eq!(name, "param.fc1.weight");
            assert_eq!(expected, vec![256, 16]);
            assert_eq!(found, vec![2, 2]);
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
}

/// A checkpoint's tensors (name, shape, little-endian f32 bytes) and metadata, as the
/// safetensors crate reads them.
type Parts = (Vec<(String, Vec<usize>, Vec<u8>)>, BTreeMap<String, String>);

fn read_parts(path: &std::path::Path) -> Parts {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.shape().to_vec(), t.data().to_vec()))
        .collect();
    (tensors, checkpoint::read_metadata(path).unwrap())
}

/// Writes `parts` as a safetensors file, with the safetensors crate directly.
fn write_parts(path: &std::path::Path, (tensors, meta): &Parts) {
    use safetensors::{Dtype, View};
    use std::borrow::Cow;
    struct T<'a>(&'a [usize], &'a [u8]);
    impl View for &T<'_> {
        fn dtype(&self) -> Dtype {
            Dtype::F32
        }
        fn shape(&self) -> &[usize] {
            self.0
        }
        fn data(&self) -> Cow<'_, [u8]> {
            Cow::Borrowed(self.1)
        }
        fn data_len(&self) -> usize {
            self.1.len()
        }
    }
    let views: Vec<(String, T)> = tensors
        .iter()
        .map(|(n, s, d)| (n.clone(), T(s, d)))
        .collect();
    let meta = meta.clone().into_iter().collect();
    let bytes =
        safetensors::serialize(views.iter().map(|(n, t)| (n.as_str(), t)), Some(meta)).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_damaged_or_non_finite_checkpoint_is_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    let b = CpuBackend::new();
    let input = (8, 8, 3);
    let cfg = ModelConfig::new(ModelKind::Convnet, input, 4, 8).seed(5);
    let mut m = Model::new(&b, cfg.clone()).unwrap();
    let mut o = Optimizer::new(&m, OptimizerKind::adamw(1e-2)).unwrap();
    let mut rng = Rng::new(9);
    let (x, y) = batch(&mut rng, 8, input, 4);
    m.forward_backward(&x, &y, 8).unwrap();
    o.step(&mut m, 1e-3).unwrap();
    checkpoint::save(&path, &m, &o, &BTreeMap::new()).unwrap();
    let parts = read_parts(&path);
    // Every tensor has its sum, 16 hex digits.
    for (name, _, _) in &parts.0 {
        let sum = &parts.1[&format!("stoker.xxh3.{name}")];
        assert!(
            sum.len() == 16 && sum.chars().all(|c| c.is_ascii_hexdigit()),
            "{sum}"
        );
    }
    let bits = |m: &Model<CpuBackend>| {
        m.params_to_host()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let fresh = || {
        let m = Model::new(&b, cfg.clone().seed(99)).unwrap();
        let o = Optimizer::new(&m, OptimizerKind::adamw(1e-2)).unwrap();
        (m, o)
    };
    let (mut m2, mut o2) = fresh();
    let before = bits(&m2);
    let bad = dir.path().join("bad.safetensors");

    // One bit flipped in the file, in place: the lowest mantissa bit of a weight,
    // so that the value stays a finite number and only the sum can tell.
    let name = "param.conv1.weight";
    let st_bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(st_bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&st_bytes[8..8 + header_len]).unwrap();
    let start = header[name]["data_offsets"][0].as_u64().unwrap() as usize;
    let mut flipped = st_bytes.clone();
    flipped[8 + header_len + start + 4 * 5] ^= 1;
    std::fs::write(&bad, &flipped).unwrap();
    let err = checkpoint::load(&bad, &mut m2, &mut o2).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Checksum { name: n, .. } if n == name),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("bad.safetensors")
            && msg.contains("tensor `param.conv1.weight`")
            && msg.contains("the file is damaged"),
        "{msg}"
    );
    assert_eq!(bits(&m2), before, "nothing changed");

    // NaN with a sum that matches it (a run that diverged, or a forged file): refused.
    let mut nan = parts.clone();
    let slot = nan
        .0
        .iter_mut()
        .find(|t| t.0 == "optim.exp_avg_sq")
        .expect("adamw state");
    slot.2[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
    let sum = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&slot.2));
    nan.1.insert("stoker.xxh3.optim.exp_avg_sq".into(), sum);
    write_parts(&bad, &nan);
    match checkpoint::load(&bad, &mut m2, &mut o2) {
        Err(CheckpointError::NotFinite {
            name, index, value, ..
        }) => {
            assert_eq!((name.as_str(), index), ("optim.exp_avg_sq", 2));
            assert!(value.is_nan());
        }
        other => panic!("expected NotFinite, got {other:?}"),
    }
    assert_eq!(bits(&m2), before, "nothing changed");

    // A file whose header lost one tensor's sum while the others kept theirs.
    let mut stat = parts.0.iter().map(|t| t.0.clone());
    let stat = stat
        .rfind(|n| n.starts_with("state."))
        .expect("a statistic");
    let mut unsummed = parts.clone();
    unsummed.1.remove(&format!("stoker.xxh3.{stat}")).unwrap();
    write_parts(&bad, &unsummed);
    let err = checkpoint::load(&bad, &mut m2, &mut o2).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Checksum { name, .. } if *name == stat),
        "{err}"
    );
    assert!(err.to_string().contains("has no `stoker.xxh3."), "{err}");

    // A checkpoint from before the sums (none at all) loads as it did, bit-exact; its
    // values are still checked for NaN and infinity.
    let mut old = parts.clone();
    old.1.retain(|k, _| !k.starts_with("stoker.xxh3."));
    write_parts(&bad, &old);
    checkpoint::load(&bad, &mut m2, &mut o2).unwrap();
    assert_eq!(bits(&m2), bits(&m));
    let slot = old.0.iter_mut().find(|t| t.0 == name).unwrap();
    slot.2[..4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    write_parts(&bad, &old);
    let (mut m3, mut o3) = fresh();
    let err = checkpoint::load(&bad, &mut m3, &mut o3).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::NotFinite { name: n, index: 0, .. } if n == name),
        "{err}"
    );
    assert!(err.to_string().contains("holds inf at element 0"), "{err}");
}

#[test]
fn weights_do_not_depend_on_the_thread_count() {
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                train(
                    ModelKind::Resnet,
                    (8, 8, 3),
                    OptimizerKind::sgd(0.9, 1e-4),
                    0.01,
                    10,
                    8,
                )
                .0
            })
    };
    let (one, three) = (run(1), run(3));
    assert!(one
        .iter()
        .zip(&three)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// The convnet at a size where every CPU path that could depend on threads is taken:
/// the fused batch norm + pool over several channels per thread, GEMMs big enough for
/// gemm-f32 to split across threads, and split-`k` weight gradients (conv1's `k` is
/// 32 images x 256 pixels = 8192). Weights, gradients and running statistics after a
/// few steps must be the same bits on 1, 2 and 3 threads.
#[test]
fn convnet_results_do_not_depend_on_the_thread_count() {
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let b = CpuBackend::new();
                let input = (16, 16, 3);
                let n = 32;
                let cfg = ModelConfig::new(ModelKind::Convnet, input, 4, n).seed(3);
                let mut m = Model::new(&b, cfg).unwrap();
                let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 5e-4)).unwrap();
                let mut rng = Rng::new(5);
                for _ in 0..3 {
                    let (x, y) = batch(&mut rng, n, input, 4);
                    m.forward_backward(&x, &y, n).unwrap();
                    o.step(&mut m, 0.05).unwrap();
                }
                let mut all = m.params_to_host().unwrap();
                all.extend(m.grads_to_host().unwrap());
                all.extend(m.state_to_host().unwrap());
                all.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            })
    };
    let one = run(1);
    for threads in [2, 3] {
        assert!(
            one == run(threads),
            "weights, gradients or running statistics differ on {threads} threads"
        );
    }
}

#[test]
fn soft_labels_and_label_smoothing_reach_the_gradient() {
    let b = CpuBackend::new();
    let (input, n, k) = ((8, 8, 3), 6, 4);
    let mut rng = Rng::new(5);
    let (x, y) = batch(&mut rng, n, input, k);
    let grads = |cfg: ModelConfig, soft: Option<&[f32]>| {
        let mut m = Model::new(&b, cfg).unwrap();
        m.forward_backward_mixed(&x, &y, soft, n).unwrap();
        let loss = m.last_step_stats().unwrap().loss;
        (m.grads_to_host().unwrap(), loss)
    };
    let cfg = || ModelConfig::new(ModelKind::Mlp, input, k, n).seed(3);
    let (hard, hard_loss) = grads(cfg(), None);
    // One-hot soft labels: the same step as the hard labels, to float rounding.
    let mut onehot = vec![0.0f32; n * k];
    for (i, &l) in y.iter().enumerate() {
        onehot[i * k + l as usize] = 1.0;
    }
    let (same, same_loss) = grads(cfg(), Some(&onehot));
    assert!((same_loss - hard_loss).abs() < 1e-5 * hard_loss.abs().max(1.0));
    for (a, h) in same.iter().zip(&hard) {
        assert!((a - h).abs() <= 1e-6 + 1e-5 * h.abs(), "{a} vs {h}");
    }
    // Mixed labels and smoothing each change the gradient.
    let mut mixed = vec![0.0f32; n * k];
    for i in 0..n {
        mixed[i * k + y[i] as usize] += 0.6;
        mixed[i * k + y[(i + n - 1) % n] as usize] += 0.4;
    }
    let (mix, _) = grads(cfg(), Some(&mixed));
    let (smooth, smooth_loss) = grads(cfg().label_smoothing(0.1), None);
    let moved = |g: &[f32]| g.iter().zip(&hard).any(|(a, h)| (a - h).abs() > 1e-4);
    assert!(moved(&mix) && moved(&smooth));
    // The loss is linear in the targets: smoothing by e is (1 - e) of the hard loss
    // plus e of the mean over classes of the loss with every label set to that class.
    let mean_k: f32 = (0..k as u32)
        .map(|c| {
            let mut m = Model::new(&b, cfg()).unwrap();
            m.forward_backward(&x, &vec![c; n], n).unwrap();
            m.last_step_stats().unwrap().loss
        })
        .sum::<f32>()
        / k as f32;
    let want = 0.9 * hard_loss + 0.1 * mean_k;
    assert!((smooth_loss - want).abs() < 1e-5, "{smooth_loss} vs {want}");
    // Wrong sizes and settings are errors, not panics.
    let mut m = Model::new(&b, cfg()).unwrap();
    assert!(m
        .forward_backward_mixed(&x, &y, Some(&mixed[1..]), n)
        .is_err());
    assert!(Model::new(&b, cfg().label_smoothing(1.0)).is_err());
    assert!(Model::new(&b, cfg().label_smoothing(f32::NAN)).is_err());
    let tags = cfg().label_smoothing(0.1).target(Target::Labels);
    assert!(
        Model::new(&b, tags).is_err(),
        "multi-label tags have no smoothing"
    );
    // A batch already on the device: smoothing needs the host labels, so the hard-label
    // call refuses rather than train unsmoothed, and the call with them smooths.
    let mut dx = b.alloc::<u8>(x.len()).unwrap();
    let mut dy = b.alloc::<u32>(n).unwrap();
    b.upload(&x, Out::new(&mut dx)).unwrap();
    b.upload(&y, Out::new(&mut dy)).unwrap();
    let mut m = Model::new(&b, cfg().label_smoothing(0.1)).unwrap();
    let err = m.forward_backward_on(&dx, &dy, n).unwrap_err();
    assert!(
        err.to_string().contains("forward_backward_on_mixed"),
        "{err}"
    );
    m.forward_backward_on_mixed(&dx, &dy, &y, None, n).unwrap();
    assert_eq!(m.grads_to_host().unwrap(), smooth);
}
