//! The `stoker-train` binary on tiny generated data: training with a JSON report and a
//! plot, the reader comparison, the device choice, and clean failures on bad folders,
//! devices and checkpoints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::shapes;
use stoker_trainer::backend::cuda;
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
    // The multi-label metrics stay out of a classification report.
    for key in ["val_map", "val_f1_micro", "val_f1_macro", "target"] {
        assert!(v.get(key).is_none(), "{key} in {v}");
    }
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
}

/// The demo on the CPU runs as it always did: no decoded cache (the CUDA demo keeps
/// one, `cuda_cli.rs`).
#[test]
fn the_cpu_demo_keeps_no_decoded_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let out = stoker_train(
        &["--device", "cpu", "--max-steps", "1", "--model", "mlp"],
        tmp.path(),
    );
    let all =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("training: "), "{all}");
    assert!(!all.contains("decoded cache"), "{all}");
}

/// The multi-label demo trains with SGD at lr 1.0 unless told otherwise (at 0.1 its
/// mean-over-classes loss learns too slowly for the default epochs); data of one's own
/// keeps SGD's 0.1, and --lr and AdamW's default win over the demo's.
#[test]
fn the_multi_label_demo_has_its_own_sgd_learning_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let lr_line = |args: &[&str]| {
        let mut all = vec!["--target", "labels", "--max-steps", "1", "--model", "mlp"];
        all.extend_from_slice(args);
        let out = stoker_train(&all, tmp.path());
        // The run's header may go to either stream; look in both.
        let err = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{err}");
        err.lines()
            .find(|l| l.trim_start().starts_with("training"))
            .unwrap_or_else(|| panic!("no training line: {err}"))
            .to_string()
    };
    assert!(lr_line(&[]).contains(" sgd lr 1 "), "{}", lr_line(&[]));
    assert!(lr_line(&["--lr", "0.3"]).contains(" sgd lr 0.3 "));
    let adamw = lr_line(&["--optimizer", "adamw"]);
    assert!(adamw.contains(" adamw lr 0.003 "), "{adamw}");
    let dir = tmp.path().join("own");
    let opts = stoker_loader::synthetic::ScenesOptions {
        count: 8,
        width: 16,
        height: 16,
        max_shapes: 2,
        classes: 3,
        seed: 1,
    };
    stoker_loader::synthetic::scenes(&dir, &opts, |_, _| {}).expect("generate scenes");
    let own = dir.join("train.jsonl");
    let line = lr_line(&["--data", own.to_str().unwrap(), "--batch-size", "4"]);
    assert!(line.contains(" sgd lr 0.1 "), "{line}");
}

/// A multi-label run reports mean average precision and micro and macro F1 beside the
/// exact-match ratio: in the epoch lines, the closing line and `--json` (the last
/// epoch's and each epoch's).
#[test]
fn a_multi_label_run_reports_map_and_f1() {
    let tmp = tempfile::tempdir().unwrap();
    let scenes = |name: &str, count: usize, seed: u64| {
        let dir = tmp.path().join(name);
        let opts = stoker_loader::synthetic::ScenesOptions {
            count,
            width: 16,
            height: 16,
            max_shapes: 3,
            classes: 4,
            seed,
        };
        stoker_loader::synthetic::scenes(&dir, &opts, |_, _| {}).expect("generate scenes");
        dir.join("train.jsonl")
    };
    let (train, val) = (scenes("train", 24, 1), scenes("val", 12, 2));
    let args = |json: bool| {
        let mut a = vec![
            "--data",
            train.to_str().unwrap(),
            "--val",
            val.to_str().unwrap(),
            "--target",
            "labels",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--model",
            "mlp",
        ];
        if json {
            a.push("--json");
        }
        a
    };
    let out = stoker_train(&args(true), tmp.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["target"], "labels", "{v}");
    let unit = |x: &serde_json::Value| x.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x));
    for key in ["val_map", "val_f1_micro", "val_f1_macro"] {
        assert!(unit(&v[key]), "{key} in {v}");
        let epochs = v["per_epoch"].as_array().unwrap();
        assert_eq!(epochs.len(), 2);
        assert!(epochs.iter().all(|e| unit(&e[key])), "{key} per epoch: {v}");
        assert_eq!(epochs[1][key], v[key], "{key}: the last epoch's");
    }
    // The epoch lines go to stderr when stdout carries JSON.
    assert!(
        err.contains("val exact-match") && err.contains("mAP 0."),
        "{err}"
    );
    assert!(
        err.contains("F1 micro 0.") || err.contains("F1 micro 1."),
        "{err}"
    );

    let out = stoker_train(&args(false), tmp.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("final:") && last.contains(", val mAP ") && last.contains(", F1 micro "),
        "{text}"
    );
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
            fails_with(&cuda, &why.to_string());
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
            let line = format!(
                "device: cpu (auto: no usable CUDA device: {why}), precision f32 (JPEG decoder: {})",
                stoker_augment::decoder()
            );
            assert!(err.lines().any(|l| l == line), "no '{line}' in: {err}");
            assert_eq!(device, "cpu");
            assert_eq!(v["precision"], "f32");
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

/// bf16 runs on CUDA only: asked for on the CPU, or on `auto` without a usable GPU, it
/// is refused before any data is touched, with exit 2 (a usage error) and one line that
/// names the flag and, for auto, that it fell back to the CPU. An unknown precision is
/// clap's refusal, listing the values.
#[test]
fn precision_bf16_is_refused_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 16, 1);
    let run_with = |device: &str, precision: &str, more: &[&str]| {
        let mut args = vec![
            "--data",
            train.to_str().unwrap(),
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--model",
            "mlp",
            "--device",
            device,
            "--precision",
            precision,
        ];
        args.extend(more);
        stoker_train(&args, tmp.path())
    };
    let run = |device: &str, precision: &str| run_with(device, precision, &["--json"]);
    let refused = "error: --precision bf16 needs a CUDA device; the CPU trains in f32";
    let out = run("cpu", "bf16");
    fails_with(&out, &format!("{refused} (--device cpu)"));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing trained, nothing reported");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
    // The CPU run in f32 (the default, spelled out) reports its precision.
    let out = run("cpu", "f32");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["precision"], "f32");
    assert!(
        err.contains("device: cpu (as asked), precision f32"),
        "{err}"
    );
    // Without --json the closing line names it beside the device.
    let out = run_with("cpu", "f32", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("mlp on cpu (f32),"), "{text}");
    let out = run("cpu", "fp16");
    fails_with(&out, "fp16");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("f32") && err.contains("bf16"), "{err}");
    match cuda::probe() {
        Err(why) => {
            let out = run("auto", "bf16");
            fails_with(
                &out,
                &format!(
                    "{refused} (--device auto fell back to the CPU: cpu (auto: no usable \
                     CUDA device: {why}))"
                ),
            );
            assert_eq!(out.status.code(), Some(2));
        }
        Ok(info) => eprintln!("a GPU is here ({info}): auto takes it, bf16 is not refused"),
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

/// A checkpoint taken after 3 steps of batch 8 resumes with batch 5 (24 samples is no
/// whole number of steps of 5): the rest of the epoch is divided again and the run
/// finishes; and a mixture of two data sets trains and resumes the same way.
#[test]
fn a_checkpoint_resumes_with_another_batch_at_any_step() {
    let tmp = tempfile::tempdir().unwrap();
    let a = shapes(&tmp.path().join("a"), 40, 1);
    let b = shapes(&tmp.path().join("b"), 24, 2);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for (data, total) in [
        (vec!["--data", a], 40),
        (
            vec![
                "--data",
                a,
                "--data",
                b,
                "--weights",
                "7,3",
                "--stop",
                "all_exhausted",
            ],
            64,
        ),
    ] {
        let ckpt = tmp.path().join("mid.safetensors");
        let _ = std::fs::remove_file(&ckpt);
        let mut args = data.clone();
        args.extend([
            "--model",
            "mlp",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--max-steps",
            "3",
        ]);
        args.extend(["--checkpoint", ckpt.to_str().unwrap()]);
        let out = stoker_train(&args, tmp.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut args = data.clone();
        args.extend([
            "--model",
            "mlp",
            "--epochs",
            "1",
            "--batch-size",
            "5",
            "--json",
        ]);
        args.extend(["--resume", ckpt.to_str().unwrap()]);
        let out = stoker_train(&args, tmp.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("resumed from"), "{err}");
        // The rest of the epoch, each sample once: all but the 3 x 8 before the
        // checkpoint.
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
        assert_eq!(doc["images"], total - 24, "{doc}");
    }
}

/// Data without a class per sample (boxes only) cannot train a classifier: `--target
/// class`, and `auto` which takes it, are errors naming the fields the data has,
/// where every sample would otherwise train as class 0 at a perfect accuracy.
#[test]
fn a_classifier_is_not_trained_on_data_without_classes() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shapes(&tmp.path().join("data"), 8, 1);
    let mut images = walk(&data);
    images.sort();
    let lines: Vec<String> = images
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let rel = p.strip_prefix(&data).unwrap().to_str().unwrap();
            let class = ["cat", "dog"][i % 2];
            serde_json::json!({"image": rel, "boxes": [[1, 1, 8, 8]], "box_labels": [class]})
                .to_string()
        })
        .collect();
    let manifest = data.join("boxes.jsonl");
    std::fs::write(&manifest, lines.join("\n")).unwrap();
    for target in [&["--target", "class"][..], &["--target", "auto"], &[]] {
        let mut args = vec![
            "--data",
            manifest.to_str().unwrap(),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--model",
            "mlp",
        ];
        args.extend_from_slice(target);
        let out = stoker_train(&args, tmp.path());
        fails_with(&out, "has no class per sample");
        fails_with(&out, "boxes.jsonl");
        fails_with(&out, "has no field 'label' (it has: image,boxes)");
    }
}
