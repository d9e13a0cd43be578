//! `stoker-load` against a real S3 API on localhost (moto; see loader/tests/s3_support),
//! configured the standard way through AWS_* variables: pack to S3 (one packed file,
//! tar shards), bench and inspect from S3 with the digests of the local copies, and
//! clear failures.

use crate::s3_support;

use std::path::Path;
use std::process::{Command, Output};

use s3_support::Moto;
use stoker_loader::synthetic::{self, ShapesOptions};

fn run(moto: &Moto, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stoker-load"));
    c.args(args);
    for (k, v) in moto.env() {
        c.env(k, v);
    }
    c.output().expect("run stoker-load")
}

fn ok(moto: &Moto, args: &[&str]) -> String {
    let out = run(moto, args);
    assert!(
        out.status.success(),
        "stoker-load {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn digest(moto: &Moto, data: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(&ok(
        moto,
        &[
            "bench",
            data,
            "--digest",
            "--json",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--io-depth",
            "16",
            "--shuffle-buffer",
            "8",
        ],
    ))
    .unwrap();
    v["digest"].as_str().unwrap().to_string()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn pack_bench_and_inspect_through_s3() {
    let Some(moto) = Moto::start("pack_bench_and_inspect_through_s3") else {
        return;
    };
    moto.create_bucket("cli");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("folder");
    let opts = ShapesOptions {
        count: 40,
        size: 16,
        classes: 3,
        seed: 1,
    };
    synthetic::shapes(&folder, &opts, |_, _| {}).unwrap();
    let shards = dir.path().join("shards");
    ok(
        &moto,
        &[
            "pack",
            p(&folder),
            p(&shards),
            "--format",
            "tar",
            "--shard-size",
            "12K",
        ],
    );
    let out = ok(
        &moto,
        &[
            "pack",
            p(&folder),
            "s3://cli/shards",
            "--format",
            "tar",
            "--shard-size",
            "12K",
        ],
    );
    assert!(out.contains("shards: "), "{out}");
    // A second pack into a prefix that holds shards is refused before it uploads
    // anything: the finished pack reads as it did (its size here, its digest below;
    // 10K shards would add a tar's end to each of many more shards).
    let bytes = |moto: &Moto| {
        let v: serde_json::Value =
            serde_json::from_str(&ok(moto, &["inspect", "s3://cli/shards", "--json"])).unwrap();
        v["bytes"].as_u64().unwrap()
    };
    let before = bytes(&moto);
    let again = run(
        &moto,
        &[
            "pack",
            p(&folder),
            "s3://cli/shards",
            "--format",
            "tar",
            "--shard-size",
            "10K",
        ],
    );
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success(),
        "a second pack into s3://cli/shards"
    );
    assert!(err.contains("holds .tar files already"), "{err}");
    assert_eq!(bytes(&moto), before, "the finished pack was changed");
    ok(&moto, &["pack", p(&folder), "s3://cli/data.pack"]);
    ok(&moto, &["upload", p(&folder), "s3://cli/folder"]);

    let local = digest(&moto, p(&shards));
    assert_eq!(digest(&moto, "s3://cli/shards"), local);
    let cache = dir.path().join("cache");
    let out = ok(
        &moto,
        &[
            "bench",
            "s3://cli/shards",
            "--digest",
            "--json",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--shuffle-buffer",
            "8",
            "--cache",
            p(&cache),
            "--cache-size",
            "64M",
            "--mode",
            "sync",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["digest"].as_str().unwrap(), local, "sync with a cache");
    assert!(
        std::fs::read_dir(&cache).unwrap().count() > 1,
        "the cache holds shards"
    );

    let plain = |data: &str| {
        let v: serde_json::Value = serde_json::from_str(&ok(
            &moto,
            &[
                "bench",
                data,
                "--digest",
                "--json",
                "--no-shuffle",
                "--batch-size",
                "8",
            ],
        ))
        .unwrap();
        v["digest"].as_str().unwrap().to_string()
    };
    let want = plain(p(&folder));
    assert_eq!(plain("s3://cli/data.pack"), want);
    assert_eq!(plain("s3://cli/folder"), want);
    assert_eq!(plain("s3://cli/shards"), want);

    let v: serde_json::Value =
        serde_json::from_str(&ok(&moto, &["inspect", "s3://cli/data.pack", "--json"])).unwrap();
    assert_eq!(v["samples"], 40);
    assert_eq!(v["format"], "packed");

    for (args, needle) in [
        (
            vec!["bench", "s3://nobucket/x.pack"],
            "s3://nobucket/x.pack",
        ),
        (vec!["inspect", "s3://cli/none/"], "s3://cli/none/"),
        (vec!["bench", "ftp://host/x"], "unsupported scheme"),
        (
            vec![
                "pack",
                p(&folder),
                "s3://cli/shards2",
                "--format",
                "tar",
                "--shard-size",
                "1K",
            ],
            "--shard-size",
        ),
    ] {
        let out = run(&moto, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
