//! The training loop end to end on tiny generated data: exact resume mid-epoch, plots,
//! and the `stoker-train` binary on good and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stoker_augment::Pipeline;
use stoker_loader::gen::{self, ShapesOptions};
use stoker_loader::{source, Loader, LoaderConfig, Mode};
use stoker_trainer::backend::cuda;
use stoker_trainer::train::{History, Stop, TrainConfig, Trainer};
use stoker_trainer::{
    report, CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Schedule,
};

fn shapes(dir: &Path, count: usize, seed: u64) -> PathBuf {
    let opts = ShapesOptions {
        count,
        size: 16,
        classes: 4,
        seed,
    };
    gen::shapes(dir, &opts, |_, _| {}).expect("generate shapes");
    dir.to_path_buf()
}

/// A trainer over `train` (and `val`), built from scratch as a new process would.
fn trainer(
    train: &Path,
    val: &Path,
    mode: Mode,
    max_steps: Option<u64>,
    checkpoint: Option<PathBuf>,
    log_every: u64,
) -> Trainer<CpuBackend> {
    let cfg = LoaderConfig {
        batch_size: 8,
        mode,
        workers: 2,
        prefetch: 2,
        seed: 7,
        transform: Pipeline::parse("crop:16:pad=2,flip").unwrap(),
        ..LoaderConfig::default()
    };
    let train_loader = Loader::new(source::open(train, true).unwrap(), cfg.clone()).unwrap();
    let val_loader = Loader::new(
        source::open(val, false).unwrap(),
        LoaderConfig {
            shuffle: false,
            transform: Pipeline::identity(),
            ..cfg
        },
    )
    .unwrap();
    let b = CpuBackend::new();
    let model = Model::new(
        &b,
        ModelConfig::new(ModelKind::Convnet, train_loader.image_shape(), 4, 8).seed(3),
    )
    .unwrap();
    let opt = Optimizer::new(&model, OptimizerKind::sgd(0.9, 5e-4)).unwrap();
    let per_epoch = train_loader.batches_per_epoch() as u64;
    let cfg = TrainConfig {
        epochs: 3,
        schedule: Schedule::new(0.05, 3, 3 * per_epoch),
        log_every,
        max_steps,
        checkpoint,
    };
    Trainer::new(model, opt, train_loader, Some(val_loader), cfg)
}

fn losses(h: &History) -> Vec<(u64, u32)> {
    h.log.iter().map(|p| (p.step, p.loss.to_bits())).collect()
}

#[test]
fn resume_mid_epoch_reproduces_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 64, 1);
    let val = shapes(&tmp.path().join("val"), 16, 2);
    // Every step logged; and every 5th, so that the checkpoint (after step 12) falls
    // inside a logging window and must carry its partial sums.
    for log_every in [1, 5] {
        resume_case(
            &train,
            &val,
            &tmp.path().join(format!("half{log_every}")),
            log_every,
        );
    }
}

fn resume_case(train: &Path, val: &Path, ckpt: &Path, log_every: u64) {
    let (train, val, ckpt) = (train.to_path_buf(), val.to_path_buf(), ckpt.to_path_buf());

    // Straight: 3 epochs of 8 steps, async reading.
    let mut straight = trainer(&train, &val, Mode::Async, None, None, log_every);
    assert_eq!(straight.run(&mut ()).unwrap(), Stop::Finished);
    let n = straight.pos.step;
    assert_eq!(n, 24);

    // Half (12 steps: the middle of epoch 2) with sync reading, checkpoint, then a new
    // trainer, loader, model and optimizer that resume and finish, async again.
    let mut first = trainer(
        &train,
        &val,
        Mode::Sync,
        Some(n / 2),
        Some(ckpt.clone()),
        log_every,
    );
    assert_eq!(first.run(&mut ()).unwrap(), Stop::MaxSteps);
    let state = first.pos.loader.unwrap();
    assert_eq!((state.epoch, state.next_batch), (1, 4));
    let mut second = trainer(&train, &val, Mode::Async, None, None, log_every);
    assert!(!second.load(&ckpt).unwrap(), "same schedule");
    assert_eq!(second.pos.step, n / 2);
    assert_eq!(second.run(&mut ()).unwrap(), Stop::Finished);

    let mut resumed = losses(&first.history);
    resumed.extend(losses(&second.history));
    assert_eq!(resumed.len(), straight.history.log.len());
    assert_eq!(resumed, losses(&straight.history), "per-step losses");
    // Epoch records: epoch 1 came from the first run through the checkpoint.
    assert_eq!(second.history.epochs, {
        let mut e = straight.history.epochs.clone();
        for (a, b) in e.iter_mut().zip(&second.history.epochs) {
            // Wall times differ between runs; everything else must not.
            a.train_seconds = b.train_seconds;
            a.wait_seconds = b.wait_seconds;
            a.eval_seconds = b.eval_seconds;
        }
        e
    });
    let w1 = straight.model.params_to_host().unwrap();
    let w2 = second.model.params_to_host().unwrap();
    assert!(
        w1.iter().zip(&w2).all(|(a, b)| a.to_bits() == b.to_bits()),
        "final weights differ"
    );
    assert_eq!(straight.opt.steps(), second.opt.steps());
    // Evaluation uses the batch-norm running statistics: they came back exactly too.
    assert_eq!(straight.evaluate().unwrap(), second.evaluate().unwrap());
}

#[test]
fn resume_rejects_another_loader_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 32, 1);
    let val = shapes(&tmp.path().join("val"), 8, 2);
    let ckpt = tmp.path().join("c.safetensors");
    let mut t = trainer(&train, &val, Mode::Sync, Some(2), Some(ckpt.clone()), 1);
    t.run(&mut ()).unwrap();
    // Same model, other data set size: the loader state does not fit.
    let other = shapes(&tmp.path().join("other"), 40, 5);
    let mut t2 = trainer(&other, &val, Mode::Sync, None, None, 1);
    // Refused when loading, before anything of the trainer is changed.
    let err = t2.load(&ckpt).unwrap_err().to_string();
    assert!(
        err.contains("trained on 32 samples, this data has 40"),
        "{err}"
    );
    assert_eq!(t2.pos.step, 0);
}

#[test]
fn plots_are_written_as_svg_and_png() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 32, 1);
    let val = shapes(&tmp.path().join("val"), 8, 2);
    let mut t = trainer(&train, &val, Mode::Async, Some(6), None, 1);
    t.run(&mut ()).unwrap();
    let h = t.history.clone();
    let svg = tmp.path().join("curves.svg");
    report::plot(&svg, &[("sync", &h), ("async", &h)]).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg"), "{}", &text[..text.len().min(200)]);
    assert!(text.contains("training loss") && text.contains("data wait"));
    // One polyline per curve at least: loss (2 runs), wait and compute (2 runs each).
    assert!(text.matches("<polyline").count() >= 6, "too few curves");
    let png = tmp.path().join("curves.png");
    report::plot(&png, &[("async", &h)]).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"));
    let bad = report::plot(&tmp.path().join("curves.pdf"), &[("async", &h)]);
    assert!(bad.unwrap_err().to_string().contains(".svg or .png"));
}

// ---- the binary ----

fn stoker_train(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoker-train"))
        .args(args)
        // Never touch the user's cache, should a test forget --data.
        .env("STOKER_CACHE", cache)
        .output()
        .expect("run stoker-train")
}

/// Asserts a clean failure: non-zero exit, no panic, and `needle` in the message.
fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should fail; stderr: {err}");
    assert!(!err.contains("panicked"), "panicked: {err}");
    assert!(
        err.contains(needle),
        "expected '{needle}' in the message: {err}"
    );
}

#[test]
fn binary_trains_and_reports_json_and_plot() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 32, 1);
    let val = shapes(&tmp.path().join("val"), 8, 2);
    let plot = tmp.path().join("run.svg");
    let out = stoker_train(
        &[
            "--data",
            train.to_str().unwrap(),
            "--val",
            val.to_str().unwrap(),
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--log-every",
            "2",
            "--json",
            "--plot",
            plot.to_str().unwrap(),
        ],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("device: "), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    for key in [
        "val_accuracy",
        "train_loss",
        "images_per_sec",
        "data_wait_share",
        "data_wait_covers",
        "epochs",
        "device",
        "reader",
    ] {
        assert!(!v[key].is_null(), "no {key} in {v}");
    }
    assert_eq!(v["epochs"], 1);
    assert_eq!(v["reader"], "async");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
}

#[test]
fn binary_compare_readers_prints_both() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 16, 1);
    let out = stoker_train(
        &[
            "--data",
            train.to_str().unwrap(),
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--model",
            "mlp",
            "--compare-readers",
        ],
        tmp.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("images/s") && text.contains("data wait"),
        "{text}"
    );
    assert!(
        text.contains("\nsync ") && text.contains("\nasync "),
        "{text}"
    );
    assert!(text.contains("trained identically: yes"), "{text}");
}

#[test]
fn binary_rejects_missing_empty_and_classless_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    fails_with(
        &stoker_train(&["--data", missing.to_str().unwrap()], tmp.path()),
        "no such",
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails_with(
        &stoker_train(&["--data", empty.to_str().unwrap()], tmp.path()),
        "empty folder",
    );
    // Images at the top level but no class sub-folders.
    let flat = tmp.path().join("flat");
    shapes(&tmp.path().join("src"), 4, 1);
    std::fs::create_dir(&flat).unwrap();
    for e in walk(&tmp.path().join("src")) {
        std::fs::copy(&e, flat.join(e.file_name().unwrap())).unwrap();
    }
    fails_with(
        &stoker_train(&["--data", flat.to_str().unwrap()], tmp.path()),
        "no class sub-folders",
    );
    // One class only.
    let one = tmp.path().join("one");
    std::fs::create_dir_all(one.join("cats")).unwrap();
    for e in walk(&tmp.path().join("src")) {
        std::fs::copy(&e, one.join("cats").join(e.file_name().unwrap())).unwrap();
    }
    fails_with(
        &stoker_train(&["--data", one.to_str().unwrap()], tmp.path()),
        "at least 2",
    );
    // The device is opened before the data: without a GPU `--device cuda` fails on it,
    // with one it gets as far as the data.
    let cuda = stoker_train(
        &["--data", one.to_str().unwrap(), "--device", "cuda"],
        tmp.path(),
    );
    match cuda::probe() {
        Err(why) => {
            fails_with(&cuda, "--device cuda:0: no usable CUDA device");
            fails_with(&cuda, &why);
        }
        Ok(_) => fails_with(&cuda, "at least 2"),
    }
    fails_with(
        &stoker_train(
            &["--data", one.to_str().unwrap(), "--device", "tpu"],
            tmp.path(),
        ),
        "expected auto, cpu, cuda or cuda:N",
    );
}

/// `--device auto` says which device it took and why; without a usable GPU that is the
/// CPU, with the probe's reason on the same line, and training goes on.
#[test]
fn device_auto_falls_back_to_the_cpu_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 16, 1);
    let out = stoker_train(
        &[
            "--data",
            train.to_str().unwrap(),
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--model",
            "mlp",
            "--device",
            "auto",
            "--json",
        ],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let device = v["device"].as_str().unwrap_or_default().to_string();
    let covers = v["data_wait_covers"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match cuda::probe() {
        Err(why) => {
            let line = format!("device: cpu (auto: no usable CUDA device: {why})");
            assert!(err.lines().any(|l| l == line), "no '{line}' in: {err}");
            assert_eq!(device, "cpu");
            assert_eq!(covers, "time blocked in the loader's next()");
        }
        Ok(info) => {
            eprintln!("a GPU is here ({info}): auto must have taken it");
            assert!(err.contains("(auto: CUDA is usable)"), "{err}");
            assert_eq!(device, format!("cuda:0 ({})", info.name));
            assert!(covers.contains("pinned memory"), "{covers}");
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn binary_rejects_bad_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 16, 1);
    let data = train.to_str().unwrap();
    let ckpt = tmp.path().join("mlp.safetensors");
    let out = stoker_train(
        &[
            "--data",
            data,
            "--model",
            "mlp",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--checkpoint",
            ckpt.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same run resumes (nothing left to train) ...
    let again = ["--data", data, "--model", "mlp", "--epochs", "1"];
    let resume = [again.as_slice(), &["--batch-size", "8", "--resume"]].concat();
    let mut args = resume.clone();
    args.push(ckpt.to_str().unwrap());
    let out = stoker_train(&args, tmp.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... another model does not.
    let out = stoker_train(
        &[
            "--data",
            data,
            "--model",
            "convnet",
            "--batch-size",
            "8",
            "--resume",
            ckpt.to_str().unwrap(),
        ],
        tmp.path(),
    );
    fails_with(&out, "checkpoint is for stoker.model.kind=mlp");
    // A damaged file.
    let corrupt = tmp.path().join("corrupt.safetensors");
    let mut bytes = std::fs::read(&ckpt).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&corrupt, &bytes).unwrap();
    args.pop();
    args.push(corrupt.to_str().unwrap());
    fails_with(
        &stoker_train(&args, tmp.path()),
        "not a valid safetensors file",
    );
    // Not a checkpoint at all.
    std::fs::write(&corrupt, b"hello").unwrap();
    fails_with(&stoker_train(&args, tmp.path()), "cannot resume");
    // Missing.
    args.pop();
    let gone = tmp.path().join("gone.safetensors");
    args.push(gone.to_str().unwrap());
    fails_with(&stoker_train(&args, tmp.path()), "gone.safetensors");
}
