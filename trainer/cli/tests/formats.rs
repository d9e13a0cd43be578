//! stoker-train on the data formats the shared data flags open (the flags of
//! `stoker-load bench`, defined once): a Parquet file with its own column names, a COCO
//! file with `--images`, and a setting the library refuses, spelled as its flag.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use stoker_loader::source;

use crate::util::shapes;

fn stoker_train(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoker-train"))
        .args(args)
        .env("STOKER_CACHE", cache)
        .output()
        .expect("run stoker-train")
}

/// The images and classes of a shapes folder as a Parquet file laid out as the
/// `datasets` library writes one (the Image struct of bytes and path, an int64
/// ClassLabel with its names in the schema's metadata), with the columns named `img`
/// and `y`.
fn parquet_img_y(folder: &Path, out: &Path) {
    let src = source::open(folder, source::Split::Train).expect("open shapes");
    let (mut images, mut labels, mut names) = (Vec::new(), Vec::new(), Vec::new());
    let mut buf = Vec::new();
    for i in 0..src.len() {
        src.read(i, &mut buf).expect("read");
        images.push(buf.clone());
        labels.push(i64::from(src.label(i)));
        names.push(format!("{i}.png"));
    }
    let bytes: ArrayRef = Arc::new(BinaryArray::from_iter_values(images.iter()));
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(names.iter()));
    let img: ArrayRef = Arc::new(StructArray::from(vec![
        (Arc::new(Field::new("bytes", DataType::Binary, true)), bytes),
        (Arc::new(Field::new("path", DataType::Utf8, true)), paths),
    ]));
    let hf = serde_json::json!({"info": {"features": {
        "img": {"_type": "Image"},
        "y": {"names": src.classes(), "_type": "ClassLabel"}}}});
    let schema = Schema::new(vec![
        Field::new("img", img.data_type().clone(), true),
        Field::new("y", DataType::Int64, true),
    ])
    .with_metadata([("huggingface", hf.to_string())]);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![img, Arc::new(Int64Array::from(labels))],
    )
    .expect("batch");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(16))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let file = std::fs::File::create(out).expect("create");
    let mut w = ArrowWriter::try_new(file, Arc::new(schema), Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

#[test]
fn trains_on_parquet_with_its_own_column_names() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = shapes(&tmp.path().join("shapes"), 32, 1);
    let file = tmp.path().join("train.parquet");
    parquet_img_y(&folder, &file);
    let f = file.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--data",
            f,
            "--val",
            f,
            "--model",
            "mlp",
            "--device",
            "cpu",
            "--epochs",
            "1",
            // One epoch of 4 steps: a whole epoch, so that it reports its loss.
            "--batch-size",
            "8",
            "--json",
        ];
        args.extend_from_slice(extra);
        stoker_train(&args, tmp.path())
    };
    let out = run(&["--image-column", "img", "--label-column", "y"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("(parquet, 32 images, 4 classes)"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let loss = v["train_loss"].as_f64().expect("train_loss");
    assert!(loss.is_finite() && loss > 0.0, "{v}");
    assert!(v["val_accuracy"].as_f64().is_some(), "{v}");
    // The columns are the flags' doing: the default names are not in this file.
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert!(
        err.contains("train.parquet") && err.contains("image"),
        "{err}"
    );
}

#[test]
fn reads_a_coco_file_with_images() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = shapes(&tmp.path().join("shapes"), 8, 1);
    let src = source::open(&folder, source::Split::Train).expect("open shapes");
    // Each image's file beside the annotation file, as COCO lays them out.
    let images = tmp.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let mut buf = Vec::new();
    let (mut entries, mut anns) = (Vec::new(), Vec::new());
    for i in 0..src.len() {
        src.read(i, &mut buf).expect("read");
        let name = format!("{i:012}.png");
        std::fs::write(images.join(&name), &buf).unwrap();
        entries
            .push(serde_json::json!({"id": i + 1, "file_name": name, "width": 16, "height": 16}));
        anns.push(
            serde_json::json!({"id": i + 1, "image_id": i + 1, "category_id": 1,
            "bbox": [2.0, 2.0, 8.0, 8.0], "area": 64.0, "iscrowd": 0}),
        );
    }
    let coco = serde_json::json!({"images": entries, "annotations": anns,
        "categories": [{"id": 1, "name": "shape", "supercategory": "shape"}]});
    let file = tmp.path().join("instances.json");
    std::fs::write(&file, serde_json::to_string(&coco).unwrap()).unwrap();
    let out = stoker_train(
        &[
            "--data",
            file.to_str().unwrap(),
            "--images",
            images.to_str().unwrap(),
            "--model",
            "mlp",
            "--device",
            "cpu",
            "--epochs",
            "1",
            "--max-steps",
            "1",
        ],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // The file is read (its boxes, its one category); a classifier needs a class per
    // sample and two classes at least, which detection data does not give: a clean
    // refusal that names the file, not an unknown flag.
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(err.contains("instances.json"), "{err}");
}

#[test]
fn a_setting_the_library_refuses_is_spelled_as_its_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = shapes(&tmp.path().join("shapes"), 16, 1);
    let out = stoker_train(
        &[
            "--data",
            folder.to_str().unwrap(),
            "--model",
            "mlp",
            "--device",
            "cpu",
            "--epochs",
            "1",
            "--decoded-cache",
            "1024T",
        ],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("error: reading ") && err.contains("--decoded-cache: 1125899906842624 bytes"),
        "{err}"
    );
    // The mixture's weights: the library's check, before any data is read.
    let out = stoker_train(
        &["--data", folder.to_str().unwrap(), "--weights", "1,2"],
        tmp.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: --weights: 2 weights for 1 sources"),
        "{err}"
    );
}
