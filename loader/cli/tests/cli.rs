//! End-to-end runs of the `stoker-load` binary: the command forms other tools rely on,
//! digests that agree across modes and between a folder and its packed file, and
//! clear errors for bad input.

use std::path::Path;

use crate::util::{failing, path, stoker_load};

fn ok(args: &[&str]) -> String {
    let out = stoker_load(args);
    assert!(
        out.status.success(),
        "stoker-load {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("bench --json prints one JSON object")
}

#[test]
fn gen_pack_inspect_bench_agree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = tmp.path().join("shapes");
    let packed = tmp.path().join("shapes.stk");
    ok(&[
        "gen",
        "shapes",
        path(&folder),
        "--count",
        "60",
        "--size",
        "32",
        "--classes",
        "4",
        "--seed",
        "3",
    ]);
    ok(&["pack", path(&folder), path(&packed)]);
    let inspect = ok(&["inspect", path(&packed)]);
    assert!(
        inspect.contains("60 samples") && inspect.contains("4 classes"),
        "{inspect}"
    );

    let bench_with = |data: &Path, mode: &str, workers: &str, extra: &[&str]| {
        let mut args = vec![
            "bench",
            path(data),
            "--mode",
            mode,
            "--workers",
            workers,
            "--batch-size",
            "16",
            "--transform",
            "rrc:24,flip",
            "--epochs",
            "2",
            "--seed",
            "9",
            "--digest",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&args)
    };
    let bench = |data: &Path, mode: &str, workers: &str| bench_with(data, mode, workers, &[]);
    let reference = bench(&folder, "sync", "1");
    for key in [
        "images_per_sec",
        "epoch_seconds",
        "wait_seconds",
        "samples",
        "skipped",
        "peak_buffer_bytes",
        "mode",
        "workers",
    ] {
        assert!(reference.get(key).is_some(), "bench --json lacks {key}");
    }
    assert_eq!(reference["samples"], 120);
    for (data, mode, workers) in [
        (&folder, "async", "1"),
        (&folder, "async", "2"),
        (&packed, "sync", "1"),
        (&packed, "async", "2"),
    ] {
        let r = bench(data, mode, workers);
        if data == &packed {
            let mapped = bench_with(data, mode, workers, &["--mmap"]);
            assert_eq!(mapped["digest"], reference["digest"], "--mmap {mode}");
        }
        assert_eq!(
            r["digest"],
            reference["digest"],
            "{} {mode} {workers}",
            data.display()
        );
    }
}

/// `--decoded-cache`: the same digest, and the cache's numbers in `--json` and in the
/// table's text.
#[test]
fn bench_decoded_cache_keeps_the_digest_and_reports_its_numbers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = tmp.path().join("shapes");
    ok(&[
        "gen",
        "shapes",
        path(&folder),
        "--count",
        "24",
        "--size",
        "32",
    ]);
    let bench = |mode: &str, extra: &[&str]| {
        let mut args = vec![
            "bench",
            path(&folder),
            "--mode",
            mode,
            "--batch-size",
            "8",
            "--transform",
            "crop:24:pad=4,flip",
            "--epochs",
            "3",
            "--digest",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&args)
    };
    let reference = bench("sync", &[]);
    assert!(reference.get("decoded_cache").is_none());
    for mode in ["sync", "async"] {
        let r = bench(mode, &["--decoded-cache", "auto"]);
        assert_eq!(r["digest"], reference["digest"], "{mode}");
        let c = &r["decoded_cache"];
        let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
        assert_eq!(n("hits") + n("misses"), 72, "{c}");
        assert!(n("hits") >= 24, "{c}");
        assert!(n("held_bytes") >= 24 * 32 * 32 * 3, "{c}");
        assert!(n("capacity_bytes") >= n("held_bytes"), "{c}");
        assert_eq!((n("windowed"), n("no_room")), (0, 0), "{c}");
    }
    let text = ok(&[
        "bench",
        path(&folder),
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--decoded-cache",
        "64M",
        "--mode",
        "sync",
    ]);
    assert!(text.contains("decoded cache: 24 hits, 24 misses"), "{text}");
}

#[test]
fn compute_ms_is_charged_to_the_consumer_and_a_trace_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = tmp.path().join("shapes");
    let trace = tmp.path().join("trace.json");
    ok(&[
        "gen",
        "shapes",
        path(&folder),
        "--count",
        "32",
        "--size",
        "32",
    ]);
    let r = json(&[
        "bench",
        path(&folder),
        "--batch-size",
        "8",
        "--compute-ms",
        "5",
        "--json",
        "--trace",
        path(&trace),
    ]);
    // Four batches at 5 ms each, at least.
    assert!(r["compute_seconds"].as_f64().expect("number") >= 0.02);
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).expect("trace file")).expect("trace JSON");
    let names: Vec<&str> = t["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for stage in ["read", "decode", "wait", "compute"] {
        assert!(names.contains(&stage), "trace lacks {stage} spans");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("nope");
    let err = failing(&["bench", path(&missing)]);
    assert!(err.contains("nope"), "{err}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let err = failing(&["inspect", path(&empty)]);
    assert!(err.contains("empty"), "{err}");

    let folder = tmp.path().join("shapes");
    ok(&[
        "gen",
        "shapes",
        path(&folder),
        "--count",
        "20",
        "--size",
        "32",
        "--classes",
        "2",
    ]);
    // A zero-byte JPEG and a truncated one: fail names the file, skip counts them.
    let class = std::fs::read_dir(&folder)
        .expect("ls")
        .next()
        .expect("a class")
        .expect("entry")
        .path();
    std::fs::write(class.join("zero.jpg"), b"").expect("write");
    let some = std::fs::read_dir(&class)
        .expect("ls")
        .find_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "jpg" && p.file_name()? != "zero.jpg").then_some(p)
        })
        .expect("a jpeg");
    let bytes = std::fs::read(&some).expect("read");
    std::fs::write(class.join("half.jpg"), &bytes[..bytes.len() / 2]).expect("write");
    let err = failing(&["bench", path(&folder), "--batch-size", "4", "--no-shuffle"]);
    assert!(
        err.contains("half.jpg") || err.contains("zero.jpg"),
        "{err}"
    );
    let r = json(&[
        "bench",
        path(&folder),
        "--batch-size",
        "4",
        "--on-error",
        "skip",
        "--json",
    ]);
    assert_eq!(r["skipped"], 2);
    assert_eq!(r["samples"], 20);
    let err = failing(&["inspect", path(&folder)]);
    assert!(err.contains("2 of 22 records"), "{err}");

    // A damaged packed file.
    let packed = tmp.path().join("p.stk");
    std::fs::remove_file(class.join("zero.jpg")).expect("rm");
    std::fs::remove_file(class.join("half.jpg")).expect("rm");
    ok(&["pack", path(&folder), path(&packed)]);
    let mut data = std::fs::read(&packed).expect("read");
    data.truncate(data.len() - 10);
    std::fs::write(&packed, &data).expect("write");
    let err = failing(&["bench", path(&packed)]);
    assert!(err.contains("p.stk"), "{err}");

    // Wrong arguments.
    let err = failing(&["bench", path(&folder), "--transform", "rcc:224"]);
    assert!(err.contains("rcc"), "{err}");
    let err = failing(&["bench", path(&folder), "--mode", "fast"]);
    assert!(err.contains("fast"), "{err}");
    let err = failing(&["bench", path(&folder), "--batch-size", "0"]);
    assert!(err.contains("--batch-size"), "{err}");
}

#[test]
fn scenes_inspect_their_fields_and_show_draws_a_grid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("scenes");
    ok(&[
        "gen",
        "scenes",
        path(&dir),
        "--count",
        "12",
        "--width",
        "48",
        "--height",
        "40",
        "--max-shapes",
        "3",
        "--seed",
        "5",
    ]);
    let manifest = dir.join("train.jsonl");
    let doc = json(&["inspect", path(&manifest), "--json"]);
    assert_eq!(doc["format"], "manifest");
    let fields = &doc["fields"];
    for f in ["image", "labels", "text", "boxes", "mask", "keypoints"] {
        assert_eq!(fields[f]["samples"], 12, "{f}: {fields}");
    }
    let boxes = fields["boxes"]["count"].as_u64().unwrap();
    assert!((12..=36).contains(&boxes), "1 to 3 shapes each: {boxes}");
    assert_eq!(
        fields["keypoints"]["count"].as_u64(),
        Some(boxes),
        "one instance per shape"
    );
    let grid = tmp.path().join("grid.png");
    let out = ok(&[
        "show",
        path(&manifest),
        "--transform",
        "rrc:64,flip",
        "--out",
        path(&grid),
        "--count",
        "4",
    ]);
    assert!(out.contains("4 samples of 64x64"), "{out}");
    let img = image::open(&grid).expect("a PNG").to_rgb8();
    // Two by two cells of 64 px scaled by 2 (to 128), a caption line each, 4 px apart.
    assert_eq!(img.dimensions(), (2 * 128 + 3 * 4, 2 * (128 + 16) + 3 * 4));
    // A bad spec is an error naming it.
    let err = failing(&[
        "show",
        path(&manifest),
        "--transform",
        "rrc",
        "--out",
        path(&grid),
    ]);
    assert!(err.contains("'rrc' needs a size"), "{err}");
}

/// Column-major run lengths (COCO's RLE) of the `[x0, x1) x [y0, y1)` rectangle of a
/// `w` x `h` image.
fn rect_runs(w: u32, h: u32, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> Vec<u32> {
    let mut counts = Vec::new();
    let (mut cur, mut run) = (false, 0);
    for x in 0..w {
        for y in 0..h {
            let inside = (x0..x1).contains(&x) && (y0..y1).contains(&y);
            if inside != cur {
                counts.push(run);
                (cur, run) = (inside, 0);
            }
            run += 1;
        }
    }
    counts.push(run);
    counts
}

#[test]
fn show_draws_each_instance_mask_in_its_own_colour_and_inspect_counts_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    // A grey image with two objects of one class, side by side.
    image::RgbImage::from_pixel(40, 20, image::Rgb([128, 128, 128]))
        .save(d.join("a.png"))
        .unwrap();
    let line = serde_json::json!({
        "image": "a.png",
        "boxes": [[0, 0, 20, 20], [20, 0, 40, 20]],
        "box_labels": ["dog", "dog"],
        "masks": [
            {"size": [20, 40], "counts": rect_runs(40, 20, (2, 10), (2, 18))},
            {"size": [20, 40], "counts": rect_runs(40, 20, (30, 38), (2, 18))},
        ],
    });
    let manifest = d.join("inst.jsonl");
    std::fs::write(&manifest, format!("{line}\n")).unwrap();
    let doc = json(&["inspect", path(&manifest), "--json"]);
    assert_eq!(doc["fields"]["masks"]["count"], 2, "{doc}");
    let grid = d.join("grid.png");
    let out = ok(&[
        "show",
        path(&manifest),
        "--out",
        path(&grid),
        "--count",
        "1",
    ]);
    assert!(out.contains("masks"), "{out}");
    let img = image::open(&grid).expect("a PNG").to_rgb8();
    // One 40x20 cell scaled by 4, 4 px in: sample the middle of each instance and
    // the gap between them.
    let at = |x: u32, y: u32| *img.get_pixel(4 + x * 4 + 2, 4 + y * 4 + 2);
    let (first, second, gap) = (at(6, 12), at(34, 12), at(15, 12));
    assert_eq!(gap, image::Rgb([128, 128, 128]), "no instance there");
    assert_ne!(first, gap, "the first instance is tinted");
    assert_ne!(second, gap, "the second instance is tinted");
    assert_ne!(first, second, "each instance has a colour of its own");
    // --fields asks for them by name.
    let out = ok(&[
        "bench",
        path(&manifest),
        "--fields",
        "image,boxes,masks",
        "--batch-size",
        "1",
    ]);
    assert!(!out.is_empty());
}

#[test]
fn bench_mixes_data_sets_by_weight() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (dir, count, seed) in [(&a, "40", "1"), (&b, "24", "2")] {
        ok(&[
            "gen",
            "shapes",
            path(dir),
            "--count",
            count,
            "--size",
            "16",
            "--seed",
            seed,
        ]);
    }
    let bench = |mode: &str, workers: &str, extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--data",
            path(&a),
            "--data",
            path(&b),
            "--mode",
            mode,
            "--workers",
            workers,
            "--batch-size",
            "8",
            "--transform",
            "rrc:12,flip",
            "--digest",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&args)
    };
    let mix = ["--weights", "7,3", "--stop", "all_exhausted"];
    let want = bench("sync", "1", &mix);
    assert_eq!(want["samples"], 64, "all_exhausted: every sample of both");
    for workers in ["1", "2", "4"] {
        assert_eq!(bench("async", workers, &mix)["digest"], want["digest"]);
    }
    // Other weights, or the first data set running out, give other batches.
    assert_ne!(
        bench("sync", "1", &["--weights", "3,7"])["digest"],
        want["digest"]
    );
    let first = bench(
        "sync",
        "1",
        &["--weights", "7,3", "--stop", "first_exhausted"],
    );
    assert!(first["samples"].as_u64().unwrap() < 64, "{first}");
    let never = bench(
        "sync",
        "1",
        &[
            "--weights",
            "1,1",
            "--stop",
            "never",
            "--epoch-batches",
            "5",
        ],
    );
    assert_eq!(never["samples"], 40);
    // The old spelling still works for this release, with a note on stderr.
    let mut args = vec!["bench", "--data", path(&a), "--data", path(&b), "--json"];
    args.extend(["--batch-size", "8", "--stop", "never", "--steps", "5"]);
    let out = stoker_load(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(old["samples"], 40);
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("--steps is deprecated") && note.contains("--epoch-batches"),
        "{note}"
    );
    // Refused before reading: a weight count other than the data count.
    let err = failing(&[
        "bench",
        "--data",
        path(&a),
        "--data",
        path(&b),
        "--weights",
        "1,2,3",
    ]);
    // The library's check, the setting spelled as its flag.
    assert!(err.contains("--weights: 3 weights for 2 sources"), "{err}");
    let err = failing(&[
        "bench",
        "--data",
        path(&a),
        "--data",
        path(&b),
        "--weights=1,-1",
    ]);
    assert!(err.contains("--weights: weight 1 (-1)"), "{err}");
    let err = failing(&["bench", "--data", path(&a), "--stop", "never"]);
    assert!(
        err.contains("--epoch-batches: stop=never needs epoch_batches"),
        "{err}"
    );
}

/// A Parquet file whose footer is whole and whose row group is damaged: `inspect`
/// names each bad row once (the row's location is in the source's error already).
#[test]
fn inspect_names_a_damaged_parquet_row_once() {
    use arrow_array::{ArrayRef, BinaryArray, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;

    let tmp = tempfile::tempdir().expect("tempdir");
    let folder = tmp.path().join("shapes");
    ok(&[
        "gen",
        "shapes",
        path(&folder),
        "--count",
        "4",
        "--size",
        "16",
    ]);
    let mut images = Vec::new();
    for class in std::fs::read_dir(&folder).expect("ls") {
        for f in std::fs::read_dir(class.expect("class").path()).expect("ls") {
            images.push(std::fs::read(f.expect("file").path()).expect("read"));
        }
    }
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values(images.iter()));
    let schema = Arc::new(Schema::new(vec![Field::new(
        "image",
        DataType::Binary,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![column]).expect("batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut bytes = Vec::new();
    let mut w = ArrowWriter::try_new(&mut bytes, schema, Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    // The first compressed page loses its zstd frame's magic number.
    let at = bytes
        .windows(4)
        .position(|w| w == [0x28, 0xb5, 0x2f, 0xfd])
        .expect("a zstd frame");
    bytes[at..at + 4].fill(0);
    let file = tmp.path().join("damaged.parquet");
    std::fs::write(&file, &bytes).expect("write");

    let out = stoker_load(&["inspect", path(&file)]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("row group 0 row"))
        .collect();
    assert_eq!(rows.len(), images.len(), "{text}");
    for line in rows {
        assert_eq!(line.matches("damaged.parquet").count(), 1, "{line}");
        assert_eq!(line.matches("row group 0 row").count(), 1, "{line}");
        assert!(line.contains("reading the row group: "), "{line}");
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&stoker_load(&["inspect", path(&file), "--json"]).stdout)
            .expect("inspect --json prints its JSON before failing");
    let bad = doc["bad"].as_array().expect("a list of bad records");
    assert_eq!(bad.len(), images.len(), "{doc}");
    for b in bad {
        let b = b.as_str().expect("a message");
        assert_eq!(b.matches("damaged.parquet").count(), 1, "{b}");
    }
}

/// `bench --tokens`: tokens/s of the token loader over JSON lines, with a WordLevel
/// tokenizer.json; the JSON's counts are those of the packing rule (docs/tokens.md).
#[test]
fn bench_tokens_counts_the_packed_windows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tok = tmp.path().join("tokenizer.json");
    let mut vocab = serde_json::Map::new();
    vocab.insert("<|endoftext|>".into(), 0.into());
    vocab.insert("<unk>".into(), 1.into());
    for i in 0..10 {
        vocab.insert(format!("w{i}"), (i + 2).into());
    }
    let spec = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    std::fs::write(&tok, spec.to_string()).unwrap();
    // 30 documents of 9 words: 300 tokens with their EOS.
    let docs = tmp.path().join("docs.jsonl");
    let line = serde_json::json!({"text": "w1 w2 w3 w4 w5 w6 w7 w8 w9"}).to_string();
    std::fs::write(&docs, format!("{line}\n").repeat(30)).unwrap();
    for mode in ["sync", "async"] {
        let r = json(&[
            "bench",
            path(&docs),
            "--tokens",
            path(&tok),
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--mode",
            mode,
            "--json",
        ]);
        // (300 - 1) / 16 = 18 windows: 4 whole batches an epoch.
        assert_eq!(r["batches"], 8, "{r}");
        assert_eq!(r["tokens"], 8 * 4 * 16, "{r}");
        assert_eq!(r["documents"], 30, "{r}");
        assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let text = ok(&[
        "bench",
        path(&docs),
        "--tokens",
        path(&tok),
        "--seq-len",
        "16",
    ]);
    assert!(text.contains("tokens/s"), "{text}");
}
