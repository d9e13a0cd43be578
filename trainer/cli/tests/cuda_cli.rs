//! `stoker-train --device cuda` end to end. Without a usable GPU the test prints
//! `SKIPPED: no usable CUDA device (<reason>)` to stderr and passes (run with
//! `--nocapture` to see it).

#[path = "../../tests/util/mod.rs"]
mod util;

use std::path::PathBuf;
use std::process::Command;

use util::{gpu, shapes};
/// `stoker-train --device cuda --compare-readers` on a tiny set: the device in the
/// JSON, both readers trained identically. The binary is `$STOKER_TRAIN_BIN` when set
/// (the GPU bundle runs this test away from the build's target folder).
#[test]
fn stoker_train_runs_on_cuda_and_compares_readers() {
    let Some(g) = gpu("stoker-train --device cuda") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 24, 1);
    let bin = std::env::var_os("STOKER_TRAIN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stoker-train")));
    let out = Command::new(&bin)
        .args(["--data", train.to_str().unwrap()])
        .args(["--device", "cuda", "--compare-readers", "--json"])
        .args(["--epochs", "1", "--batch-size", "8", "--model", "mlp"])
        .env("STOKER_CACHE", tmp.path())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("device: cuda:0 ("), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let device = format!("cuda:0 ({})", g.info().name);
    for reader in ["sync", "async"] {
        assert_eq!(v[reader]["device"], device.as_str(), "{v}");
        assert_eq!(v[reader]["reader"], reader, "{v}");
    }
    assert_eq!(v["same_training"], true, "{v}");
    let covers = v["async"]["data_wait_covers"].as_str().unwrap_or_default();
    assert!(covers.contains("pinned memory"), "{covers}");
}

/// `stoker-train --device cuda --precision bf16` on a tiny set: it trains, says so on
/// the device line, and reports `"precision": "bf16"` (an f32 run of the same flags
/// reports `"f32"`).
#[test]
fn stoker_train_runs_bf16_on_cuda_and_reports_it() {
    if gpu("stoker-train --precision bf16").is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 24, 1);
    let bin = std::env::var_os("STOKER_TRAIN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stoker-train")));
    for precision in ["bf16", "f32"] {
        let out = Command::new(&bin)
            .args(["--data", train.to_str().unwrap()])
            .args(["--device", "cuda", "--precision", precision, "--json"])
            .args(["--epochs", "1", "--batch-size", "8", "--model", "convnet"])
            .env("STOKER_CACHE", tmp.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{precision}: {err}");
        assert!(err.contains(&format!(", precision {precision}")), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
        assert_eq!(v["precision"], precision, "{v}");
        let loss = v["train_loss"].as_f64().unwrap_or(f64::NAN);
        assert!(loss.is_finite(), "{precision}: train_loss {loss}: {v}");
    }
}

/// On CUDA the demo keeps its training set's decoded images (a 48 MiB cache) when
/// `--decoded-cache` is not given, and says so; given, the flag wins.
#[test]
fn the_demo_on_cuda_keeps_a_decoded_cache() {
    let Some(_g) = gpu("the demo on CUDA") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = std::env::var_os("STOKER_TRAIN_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stoker-train")));
    let run = |extra: &[&str]| {
        let out = Command::new(&bin)
            .args(["--device", "cuda", "--max-steps", "1", "--model", "mlp"])
            .args(extra)
            .env("STOKER_CACHE", tmp.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let all = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{all}");
        all
    };
    let header = run(&[]);
    assert!(header.contains("decoded cache: 48 MiB"), "{header}");
    let flagged = run(&["--decoded-cache", "16M"]);
    assert!(!flagged.contains("decoded cache: "), "{flagged}");
}
