//! `stoker-train --data s3://...` against a real S3 API on localhost (moto; see
//! loader/tests/s3_support): training and validation data read from a bucket,
//! configured through the AWS_* variables.

use crate::s3_support;

use std::process::Command;

use s3_support::Moto;
use stoker_loader::source::{self, tar};
use stoker_loader::storage;
use stoker_loader::synthetic::{self, ShapesOptions};

#[test]
fn trains_from_tar_shards_and_a_packed_file_in_s3() {
    let Some(moto) = Moto::start("trains_from_tar_shards_and_a_packed_file_in_s3") else {
        return;
    };
    moto.create_bucket("train");
    let o = moto.options();
    let dir = tempfile::tempdir().unwrap();
    for (name, count, seed) in [("train", 32, 1), ("val", 8, 2)] {
        let opts = ShapesOptions {
            count,
            size: 16,
            classes: 4,
            seed,
        };
        synthetic::shapes(&dir.path().join(name), &opts, |_, _| {}).unwrap();
    }
    let train = source::open(dir.path().join("train"), source::Split::Train).unwrap();
    let shards = dir.path().join("shards");
    tar::pack_tar(train.as_ref(), &shards, 16 << 10, |_, _| {}).unwrap();
    storage::upload_dir(&shards, "s3://train/shards", &o, 8).unwrap();
    let val = source::open(dir.path().join("val"), source::Split::Train).unwrap();
    let pack = dir.path().join("val.pack");
    source::packed::pack_source(val.as_ref(), &pack, |_, _| {}).unwrap();
    storage::upload_file(&pack, "s3://train/val.pack", &o).unwrap();

    let mut c = Command::new(env!("CARGO_BIN_EXE_stoker-train"));
    c.args([
        "--data",
        "s3://train/shards",
        "--val",
        "s3://train/val.pack",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--json",
        "--cache",
        dir.path().join("cache").to_str().unwrap(),
    ])
    .env("STOKER_CACHE", dir.path());
    for (k, v) in moto.env() {
        c.env(k, v);
    }
    let out = c.output().expect("run stoker-train");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("data: s3://train/shards (tar, 32 images"),
        "{err}"
    );
    assert!(
        err.contains("validation: s3://train/val.pack (packed, 8 images)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["epochs"], 1);
    assert!(v["val_accuracy"].is_number(), "{v}");
}
