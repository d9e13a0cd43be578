//! Parquet files laid out as the Hugging Face `datasets` library writes them (an Image
//! struct `{bytes, path}`, a ClassLabel in the `huggingface` schema metadata), written
//! here by the parquet crate's writer with several row groups, snappy and zstd: the
//! samples, labels and batches equal those of the image folder they were made from,
//! resume works in the middle of a row group, and bad files are errors naming them.

#[cfg(feature = "remote")]
use crate::s3_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use stoker_augment::Pipeline;
use stoker_loader::source::{self, OpenOptions, ParquetColumns};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{Digest, Loader, LoaderConfig, Mode, Source};

const CLASSES: [&str; 3] = ["circle", "square", "triangle"];

fn folder(dir: &Path) -> Arc<dyn Source> {
    let root = dir.join("shapes");
    let opts = ShapesOptions {
        count: 30,
        size: 24,
        classes: 3,
        seed: 4,
    };
    synthetic::shapes(&root, &opts, |_, _| {}).unwrap();
    source::open(&root, source::Split::Train).unwrap()
}

/// How a test file holds its images.
#[derive(Clone, Copy)]
enum Images {
    /// In the Image struct's `bytes` (as `datasets` writes them).
    Embedded,
    /// As files beside the Parquet file, named in the struct's `path` (bytes null).
    StructPath,
    /// As files beside the Parquet file, named in a plain string column.
    StringPath,
}

/// Rows `range` of `src` as a `datasets`-style Parquet file at `out`.
fn write(src: &dyn Source, range: std::ops::Range<usize>, out: &Path, zstd: bool) {
    write_as(src, range, out, zstd, Images::Embedded, &CLASSES)
}

/// Rows `range` of `src` into the Parquet file `out`, images as `how` says, the label's
/// ClassLabel names `classes` in the schema metadata.
fn write_as(
    src: &dyn Source,
    range: std::ops::Range<usize>,
    out: &Path,
    zstd: bool,
    how: Images,
    classes: &[&str],
) {
    let (mut images, mut labels, mut text) = (Vec::new(), Vec::new(), Vec::new());
    let mut buf = Vec::new();
    let mut names = Vec::new();
    for i in range {
        src.read(i, &mut buf).unwrap();
        images.push(buf.clone());
        labels.push(i64::from(src.label(i)));
        text.push(format!("sample {i}"));
        names.push(format!("imgs/{i}.jpg"));
    }
    if !matches!(how, Images::Embedded) {
        let dir = out.parent().unwrap();
        std::fs::create_dir_all(dir.join("imgs")).unwrap();
        for (name, bytes) in names.iter().zip(&images) {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let bytes: ArrayRef = match how {
        Images::Embedded => Arc::new(BinaryArray::from_iter_values(images.iter())),
        _ => Arc::new(BinaryArray::from(vec![None::<&[u8]>; images.len()])),
    };
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(names.iter()));
    let image: ArrayRef = match how {
        Images::StringPath => paths,
        _ => Arc::new(StructArray::from(vec![
            (Arc::new(Field::new("bytes", DataType::Binary, true)), bytes),
            (Arc::new(Field::new("path", DataType::Utf8, true)), paths),
        ])),
    };
    let hf = serde_json::json!({"info": {"features": {
        "image": {"_type": "Image"},
        "label": {"names": classes, "_type": "ClassLabel"},
        "text": {"dtype": "string", "_type": "Value"}}}});
    let schema = Schema::new(vec![
        Field::new("image", image.data_type().clone(), true),
        Field::new("label", DataType::Int64, true),
        Field::new("text", DataType::Utf8, true),
    ])
    .with_metadata([("huggingface", hf.to_string())]);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![
            image,
            Arc::new(Int64Array::from(labels)),
            Arc::new(StringArray::from(text)),
        ],
    )
    .unwrap();
    let codec = if zstd {
        Compression::ZSTD(ZstdLevel::default())
    } else {
        Compression::SNAPPY
    };
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(7))
        .set_compression(codec)
        .build();
    let file = std::fs::File::create(out).unwrap();
    let mut w = ArrowWriter::try_new(file, Arc::new(schema), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn digests(src: Arc<dyn Source>, cfg: LoaderConfig) -> Vec<String> {
    let mut loader = Loader::new(src, cfg).unwrap();
    let mut out = Vec::new();
    for e in 0..2 {
        for b in loader.epoch(e) {
            let mut d = Digest::new();
            d.update(&b.unwrap());
            out.push(d.hex());
        }
    }
    out
}

fn cfg(shuffle: bool, mode: Mode) -> LoaderConfig {
    LoaderConfig {
        batch_size: 4,
        shuffle,
        mode,
        workers: stoker_loader::Workers::Fixed(2),
        seed: 5,
        shuffle_buffer: 6,
        transform: Pipeline::parse("rrc:16,flip").unwrap(),
        ..LoaderConfig::default()
    }
}

fn shards(dir: &Path, src: &dyn Source) -> PathBuf {
    let out = dir.join("data");
    std::fs::create_dir_all(&out).unwrap();
    write(src, 0..17, &out.join("train-00000-of-00002.parquet"), false);
    write(src, 17..30, &out.join("train-00001-of-00002.parquet"), true);
    out
}

#[test]
fn parquet_shards_read_as_the_folder_they_were_made_from() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let pq = source::open(&data, source::Split::Train).unwrap();
    assert_eq!(pq.format(), "parquet");
    assert_eq!(pq.len(), 30);
    assert_eq!(pq.classes(), CLASSES, "class names from the HF metadata");
    // 17 rows in groups of 7 (7, 7, 3), then 13 (7, 6): five row groups, five shards.
    let ranges = pq.shards().unwrap().to_vec();
    assert_eq!(ranges, [0..7, 7..14, 14..17, 17..24, 24..30]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..30 {
        src.read(i, &mut a).unwrap();
        pq.read(i, &mut b).unwrap();
        assert_eq!(a, b, "image {i}");
        assert_eq!(src.label(i), pq.label(i), "label {i}");
    }
    // In order, the batches are the folder's byte for byte.
    for mode in [Mode::Sync, Mode::Async] {
        assert_eq!(
            digests(pq.clone(), cfg(false, mode)),
            digests(src.clone(), cfg(false, mode)),
            "{mode}"
        );
    }
    // Shuffled by row group: the same in both modes.
    let want = digests(pq.clone(), cfg(true, Mode::Sync));
    assert_eq!(digests(pq.clone(), cfg(true, Mode::Async)), want);

    // Resume in the middle of a row group: the rest of the epoch, exactly.
    let mut loader = Loader::new(pq.clone(), cfg(true, Mode::Async)).unwrap();
    let mut ep = loader.epoch(0);
    let mut straight = Vec::new();
    for _ in 0..3 {
        let mut d = Digest::new();
        d.update(&ep.next().unwrap().unwrap());
        straight.push(d.hex());
    }
    let state = ep.state();
    drop(ep);
    let mut again = Loader::new(pq.clone(), cfg(true, Mode::Async)).unwrap();
    let rest: Vec<String> = again
        .resume(&state)
        .unwrap()
        .map(|b| {
            let mut d = Digest::new();
            d.update(&b.unwrap());
            d.hex()
        })
        .collect();
    assert_eq!([straight, rest].concat(), want[..want.len() / 2]);
}

#[test]
fn the_text_column_is_a_caption_field() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let opts = OpenOptions {
        parquet: ParquetColumns {
            text: Some("text".into()),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    let pq = source::open_with(&data, &opts).unwrap();
    let mut loader = Loader::new(pq, cfg(false, Mode::Sync)).unwrap();
    let b = loader.epoch(0).next().unwrap().unwrap();
    let f = b.fields.expect("fields");
    assert_eq!(f.text, ["sample 0", "sample 1", "sample 2", "sample 3"]);
}

#[test]
fn bad_parquet_input_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let err = |p: &Path, o: &OpenOptions| match source::open_with(p, o) {
        Ok(_) => panic!("{} opened", p.display()),
        Err(e) => e.to_string(),
    };
    // A missing column, named with the ones there are.
    let o = OpenOptions {
        parquet: ParquetColumns {
            image: "img".into(),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    let e = err(&data, &o);
    assert!(e.contains("train-00000-of-00002.parquet"), "{e}");
    assert!(
        e.contains("no image column 'img'") && e.contains("image, label, text"),
        "{e}"
    );
    // A column of the wrong type.
    let o = OpenOptions {
        parquet: ParquetColumns {
            image: "label".into(),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    assert!(err(&data, &o).contains("not images"));
    // A label column named by the caller must be there: a typo would leave the set
    // without classes. (The default name may be missing: a set without classes.)
    let o = OpenOptions {
        parquet: ParquetColumns {
            label: Some("lable".into()),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    let e = err(&data, &o);
    assert!(
        e.contains("train-00000-of-00002.parquet")
            && e.contains("no label column 'lable'")
            && e.contains("image, label, text"),
        "{e}"
    );
    // Two files whose ClassLabel names differ: label 0 would mean two classes.
    let mixed = dir.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    write(src.as_ref(), 0..10, &mixed.join("a.parquet"), false);
    let other = ["square", "circle", "triangle"];
    write_as(
        src.as_ref(),
        10..20,
        &mixed.join("b.parquet"),
        false,
        Images::Embedded,
        &other,
    );
    let e = err(&mixed, &OpenOptions::default());
    assert!(
        e.contains("b.parquet")
            && e.contains("class names for 'label' (square, circle, triangle) differ")
            && e.contains("a.parquet (circle, square, triangle)"),
        "{e}"
    );
    // Not Parquet, and a truncated footer.
    let junk = dir.path().join("junk.parquet");
    std::fs::write(&junk, b"this is not parquet at all").unwrap();
    let e = err(&junk, &OpenOptions::default());
    assert!(
        e.contains("junk.parquet") && e.contains("not a readable Parquet file"),
        "{e}"
    );
    let whole = std::fs::read(data.join("train-00000-of-00002.parquet")).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &whole[..whole.len() - 10]).unwrap();
    let e = err(&cut, &OpenOptions::default());
    assert!(
        e.contains("cut.parquet") && e.contains("not a readable Parquet file"),
        "{e}"
    );
}

#[test]
fn row_groups_read_by_several_threads_at_once_give_their_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let want: Vec<Vec<u8>> = (0..30)
        .map(|i| {
            let mut b = Vec::new();
            src.read(i, &mut b).unwrap();
            b
        })
        .collect();
    // Fresh sources, so that the row groups are decoded while others are: four
    // threads, each starting in another row group.
    for _ in 0..5 {
        let pq = source::open(&data, source::Split::Train).unwrap();
        std::thread::scope(|s| {
            for t in 0..4usize {
                let (pq, want) = (&pq, &want);
                s.spawn(move || {
                    let mut b = Vec::new();
                    for k in 0..30 {
                        let i = (k + t * 7) % 30;
                        pq.read(i, &mut b).unwrap();
                        assert_eq!(&b, &want[i], "sample {i} in thread {t}");
                    }
                });
            }
        });
    }
}

/// A Hub repository on disk: `data/train-0000{0,1}-of-00002.parquet` (rows 0..17 and
/// 17..30) and `data/test-00000-of-00001.parquet` (rows 0..5), with a README.
fn hub_repo(dir: &Path, src: &dyn Source) -> PathBuf {
    let root = dir.join("repo");
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(root.join("README.md"), "---\nlicense: mit\n---\n").unwrap();
    write(
        src,
        0..17,
        &data.join("train-00000-of-00002.parquet"),
        false,
    );
    write(
        src,
        17..30,
        &data.join("train-00001-of-00002.parquet"),
        true,
    );
    write(src, 0..5, &data.join("test-00000-of-00001.parquet"), false);
    root
}

#[test]
fn the_hub_layout_globs_and_braces_pick_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let root = hub_repo(dir.path(), src.as_ref());
    let want = digests(src.clone(), cfg(false, Mode::Sync));
    let split = |s: Option<&str>, train: bool| OpenOptions {
        split: match (s, train) {
            (Some(name), _) => source::Split::named(name),
            (None, true) => source::Split::Train,
            (None, false) => source::Split::Test,
        },
        ..OpenOptions::default()
    };
    // The repository's root: the train split by default, test for evaluation or by name.
    let train = source::open_with(&root, &split(None, true)).unwrap();
    assert_eq!(train.len(), 30);
    assert_eq!(digests(train, cfg(false, Mode::Sync)), want);
    for o in [split(None, false), split(Some("test"), true)] {
        let test = source::open_with(&root, &o).unwrap();
        assert_eq!(test.len(), 5);
        assert_eq!(
            test.describe(4),
            format!(
                "{} row group 0 row 4",
                root.join("data/test-00000-of-00001.parquet").display()
            )
        );
    }
    let e = source::open_with(&root, &split(Some("validation"), true))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("no Parquet file of split 'validation'") && e.contains("test, train"),
        "{e}"
    );
    // A glob and a brace pattern over the train files.
    for pattern in [
        "data/train-*.parquet",
        "data/train-0000?-of-00002.parquet",
        "data/train-{00000..00001}-of-00002.parquet",
    ] {
        let p = root.join(pattern);
        let pq = source::open(&p, source::Split::Train).unwrap();
        assert_eq!(pq.format(), "parquet", "{pattern}");
        assert_eq!(digests(pq, cfg(false, Mode::Sync)), want, "{pattern}");
    }
    let e = source::open(root.join("data/val-*.parquet"), source::Split::Train)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no file matches"), "{e}");

    // {config}/{split}/*.parquet, as the Hub's Parquet conversion writes it; two
    // configurations in one split are refused, one folder of them read.
    let conv = dir.path().join("converted");
    for (config, part) in [("default", 0..30), ("other", 0..4)] {
        let d = conv.join(config).join("train");
        std::fs::create_dir_all(&d).unwrap();
        write(src.as_ref(), part, &d.join("0000.parquet"), false);
    }
    let e = source::open(&conv, source::Split::Train)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("several configurations (default, other)"), "{e}");
    let one = source::open(conv.join("default"), source::Split::Train).unwrap();
    assert_eq!(digests(one, cfg(false, Mode::Sync)), want);
}

#[test]
fn images_by_path_are_read_beside_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let want = digests(src.clone(), cfg(false, Mode::Async));
    for (name, how) in [
        ("struct", Images::StructPath),
        ("string", Images::StringPath),
    ] {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        write_as(
            src.as_ref(),
            0..30,
            &d.join("train.parquet"),
            false,
            how,
            &CLASSES,
        );
        let pq = source::open(&d, source::Split::Train).unwrap();
        assert_eq!(digests(pq.clone(), cfg(false, Mode::Async)), want, "{name}");
        // A file that is gone: an error of that row, naming the path.
        std::fs::remove_file(d.join("imgs/12.jpg")).unwrap();
        let mut buf = Vec::new();
        let e = source::open(&d, source::Split::Train)
            .unwrap()
            .read(12, &mut buf)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("train.parquet row group 1 row 5") && e.contains("imgs/12.jpg"),
            "{name}: {e}"
        );
    }
}

#[test]
fn the_layout_lists_the_schema_and_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let lines = source::open(&data, source::Split::Train).unwrap().layout();
    let text = lines.join("\n");
    assert!(text.contains("  label: Int64"), "{text}");
    assert!(
        text.contains("train-00001-of-00002.parquet: 13 rows in 2 row groups"),
        "{text}"
    );
    assert!(text.contains("  row group 1: 6 rows"), "{text}");
    assert!(text.contains("ZSTD"), "{text}");
    // Sources with nothing to add say nothing.
    assert!(src.layout().is_empty());
}

/// The same files from S3 (moto): a Hub repository under a prefix, one file, a glob,
/// and images by path; the digests equal the local ones.
#[cfg(feature = "remote")]
#[test]
fn parquet_from_s3_reads_as_locally() {
    let Some(moto) = s3_support::Moto::start("parquet_from_s3_reads_as_locally") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("hub");
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let root = hub_repo(dir.path(), src.as_ref());
    let by_path = dir.path().join("bypath");
    std::fs::create_dir_all(&by_path).unwrap();
    write_as(
        src.as_ref(),
        0..30,
        &by_path.join("train.parquet"),
        true,
        Images::StructPath,
        &CLASSES,
    );
    stoker_loader::storage::upload_dir(&root, "s3://hub/repo/", &o, 8).unwrap();
    stoker_loader::storage::upload_dir(&by_path, "s3://hub/bypath/", &o, 8).unwrap();
    let remote = |url: &str, split: Option<&str>| {
        let opts = OpenOptions {
            remote: o.clone(),
            split: split.map_or(source::Split::Train, source::Split::named),
            ..OpenOptions::default()
        };
        source::open_with(Path::new(url), &opts).unwrap_or_else(|e| panic!("{url}: {e}"))
    };
    let local = source::open(&root, source::Split::Train).unwrap();
    let local_by_path = source::open(&by_path, source::Split::Train).unwrap();
    for mode in [Mode::Sync, Mode::Async] {
        for (url, local) in [
            ("s3://hub/repo/", &local),
            ("s3://hub/repo/data/train-*.parquet", &local),
            ("s3://hub/bypath/", &local_by_path),
        ] {
            let got = remote(url, None);
            assert_eq!(got.format(), "parquet");
            assert_eq!(got.classes(), CLASSES, "{url}");
            let want = digests(local.clone(), cfg(true, mode));
            assert_eq!(digests(got, cfg(true, mode)), want, "{url} {mode}");
        }
    }
    let one = remote("s3://hub/repo/data/test-00000-of-00001.parquet", None);
    assert_eq!(one.len(), 5);
    assert_eq!(remote("s3://hub/repo", Some("test")).len(), 5);
    let mut buf = Vec::new();
    let e = one.read(7, &mut buf).unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    // A damaged remote file: an error naming its URL.
    let whole = std::fs::read(root.join("data/test-00000-of-00001.parquet")).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &whole[..whole.len() - 10]).unwrap();
    stoker_loader::storage::upload_file(&cut, "s3://hub/cut.parquet", &o).unwrap();
    let opts = OpenOptions {
        remote: o.clone(),
        ..OpenOptions::default()
    };
    let e = source::open_with(Path::new("s3://hub/cut.parquet"), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("s3://hub/cut.parquet") && e.contains("not a readable Parquet file"),
        "{e}"
    );
}

/// A detection set the way the `datasets` library stores one: `objects` a struct of
/// lists (`bbox` in COCO's xywh, `category` a ClassLabel sequence), plus tags and a
/// mask column: the fields read back as written, and bad boxes are errors of their row.
#[test]
fn field_columns_read_boxes_classes_tags_and_masks() {
    use arrow_array::builder::{Float32Builder, Int64Builder, ListBuilder};
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let n = 6;
    let mut images = Vec::new();
    let mut buf = Vec::new();
    for i in 0..n {
        src.read(i, &mut buf).unwrap();
        images.push(buf.clone());
    }
    // Row i: i % 3 boxes [i, 1, 4, 5] (xywh), class (i + k) % 2; tags [i % 2];
    // row 5's second box runs past the 24 px image.
    let mut bbox = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
    let mut category = ListBuilder::new(Int64Builder::new());
    let mut tags = ListBuilder::new(Int64Builder::new());
    for i in 0..n {
        for k in 0..i % 3 {
            let w = if i == 5 && k == 1 { 40.0 } else { 4.0 };
            bbox.values()
                .append_value([Some(i as f32), Some(1.0), Some(w), Some(5.0)]);
            category.values().append_value(((i + k) % 2) as i64);
        }
        bbox.append(true);
        category.append(true);
        tags.values().append_value((i % 2) as i64);
        tags.append(true);
    }
    let bbox: ArrayRef = Arc::new(bbox.finish());
    let category: ArrayRef = Arc::new(category.finish());
    let objects = StructArray::from(vec![
        (
            Arc::new(Field::new("bbox", bbox.data_type().clone(), true)),
            bbox,
        ),
        (
            Arc::new(Field::new("category", category.data_type().clone(), true)),
            category,
        ),
    ]);
    // A 24x24 mask PNG of class 1 everywhere.
    use image::ImageEncoder;
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&[1u8; 24 * 24], 24, 24, image::ExtendedColorType::L8)
        .unwrap();
    let masks: ArrayRef = Arc::new(BinaryArray::from_iter_values(std::iter::repeat_n(&png, n)));
    let tags: ArrayRef = Arc::new(tags.finish());
    let hf = serde_json::json!({"info": {"features": {
        "image": {"_type": "Image"},
        "objects": {"_type": "Sequence", "feature": {
            "bbox": {"_type": "Sequence", "feature": {"dtype": "float32"}},
            "category": {"_type": "ClassLabel", "names": ["cat", "dog"]}}}}}});
    let schema = Schema::new(vec![
        Field::new("objects", objects.data_type().clone(), true),
        Field::new("image", DataType::Binary, true),
        Field::new("tags", tags.data_type().clone(), true),
        Field::new("mask", DataType::Binary, true),
    ])
    .with_metadata([("huggingface", hf.to_string())]);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![
            Arc::new(objects),
            Arc::new(BinaryArray::from_iter_values(images.iter())),
            tags,
            masks,
        ],
    )
    .unwrap();
    let out = dir.path().join("det.parquet");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(4))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&out).unwrap(),
        Arc::new(schema),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();

    let opts = OpenOptions {
        parquet: ParquetColumns {
            boxes: Some("objects.bbox".into()),
            box_format: source::BoxFormat::Xywh,
            box_classes: Some("objects.category".into()),
            labels: Some("tags".into()),
            mask: Some("mask".into()),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    let pq = source::open_with(&out, &opts).unwrap();
    assert_eq!(pq.classes(), ["cat", "dog"], "names of the box classes");
    let f = pq.fields();
    for want in [
        stoker_loader::Field::Boxes,
        stoker_loader::Field::Labels,
        stoker_loader::Field::Mask,
    ] {
        assert!(f.contains(want), "{want:?}");
    }
    let mut ann = stoker_loader::Annotation::default();
    for (i, image) in images.iter().enumerate().take(5) {
        pq.read_sample(i, f, &mut buf, &mut ann).unwrap();
        assert_eq!(&buf, image, "image {i}");
        let want: Vec<[f32; 4]> = (0..i % 3)
            .map(|_| [i as f32, 1.0, i as f32 + 4.0, 6.0])
            .collect();
        assert_eq!(ann.boxes, want, "row {i}");
        let classes: Vec<u32> = (0..i % 3).map(|k| ((i + k) % 2) as u32).collect();
        assert_eq!(ann.box_labels, classes, "row {i}");
        assert_eq!(ann.labels, [(i % 2) as u32]);
        assert!(matches!(&ann.mask, Some(stoker_loader::sample::MaskData::Png(p)) if *p == png));
    }
    // Through the loader: boxes moved by a flip, as for any source.
    let c = LoaderConfig {
        batch_size: 5,
        shuffle: false,
        workers: stoker_loader::Workers::Fixed(1),
        transform: Pipeline::parse("flip:p=1").unwrap(),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(pq.clone(), c).unwrap();
    let b = loader.epoch(0).next().unwrap().unwrap();
    let bf = b.fields.expect("fields");
    assert_eq!(bf.boxes.count, [0, 1, 2, 0, 1]);
    // Row 1's box [1, 1, 5, 6] in a 24 px image, flipped: [19, 1, 23, 6], class dog.
    let (boxes, classes) = bf.boxes_of(1);
    assert_eq!(boxes, [[19.0, 1.0, 23.0, 6.0]]);
    assert_eq!(classes, [1]);
    assert_eq!(bf.labels[1], [1]);
    // Row 5's second box is 40 px wide: an error naming the row.
    let mut loader = Loader::new(
        pq,
        LoaderConfig {
            batch_size: 6,
            ..c_default()
        },
    )
    .unwrap();
    let e = loader.epoch(0).next().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("det.parquet row group 1 row 1") && e.contains("outside"),
        "{e}"
    );
    // A field column of the wrong type names it.
    let bad = OpenOptions {
        parquet: ParquetColumns {
            boxes: Some("tags".into()),
            ..ParquetColumns::default()
        },
        ..OpenOptions::default()
    };
    let e = source::open_with(&out, &bad).err().unwrap().to_string();
    assert!(
        e.contains("column 'tags'") && e.contains("not a list of boxes"),
        "{e}"
    );
}

fn c_default() -> LoaderConfig {
    LoaderConfig {
        shuffle: false,
        workers: stoker_loader::Workers::Fixed(1),
        ..LoaderConfig::default()
    }
}

#[test]
fn a_parquet_set_packs_to_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let data = shards(dir.path(), src.as_ref());
    let pq = source::open(&data, source::Split::Train).unwrap();
    let out = dir.path().join("from-parquet.pack");
    source::packed::pack_source(pq.as_ref(), &out, |_, _| {}).unwrap();
    let packed = source::open(&out, source::Split::Train).unwrap();
    assert_eq!(packed.classes(), CLASSES);
    assert_eq!(
        digests(packed, cfg(true, Mode::Async)),
        digests(src, cfg(true, Mode::Async))
    );
}
#[test]
fn row_groups_resume_on_another_rank_count_delivering_each_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let pq = source::open(shards(dir.path(), src.as_ref()), source::Split::Train).unwrap();
    let run = |world: usize, take: Option<usize>, state: Option<&stoker_loader::LoaderState>| {
        let mut got = Vec::new();
        let mut saved = None;
        for rank in 0..world {
            let c = LoaderConfig {
                rank,
                world_size: world,
                ..cfg(true, Mode::Async)
            };
            let mut l = Loader::new(pq.clone(), c).unwrap();
            let mut ep = match state {
                None => l.epoch(1),
                Some(s) => l
                    .resume(&stoker_loader::LoaderState::from_json(&s.to_json()).unwrap())
                    .unwrap(),
            };
            for _ in 0..take.unwrap_or(usize::MAX) {
                match ep.next() {
                    Some(b) => got.extend(b.unwrap().indices),
                    None => break,
                }
            }
            if rank == 0 {
                saved = Some(ep.state());
            }
        }
        (got, saved.unwrap())
    };
    for (w, w2, take) in [(2, 3, 2), (3, 1, 1)] {
        let (want, _) = run(w, None, None);
        let (first, state) = run(w, Some(take), None);
        let (rest, _) = run(w2, None, Some(&state));
        let mut union = [first.clone(), rest.clone()].concat();
        union.sort_unstable();
        union.dedup();
        assert_eq!(want.len(), 30usize.div_ceil(w) * w, "{w} ranks, padded");
        assert_eq!(
            union,
            (0..30).collect::<Vec<_>>(),
            "{w} -> {w2}: every sample of the epoch"
        );
        let mut after = rest.clone();
        after.sort_unstable();
        after.dedup();
        let again = rest.len() - after.len() + after.iter().filter(|i| first.contains(i)).count();
        assert!(
            again < w2,
            "{w} -> {w2}: {again} delivered again (padding is under {w2})"
        );
    }
}

#[test]
fn uneven_row_groups_give_each_sample_once_per_epoch_on_any_rank_count() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let pq = source::open(shards(dir.path(), src.as_ref()), source::Split::Train).unwrap();
    // Row groups of 7, 7, 3, 7 and 6: whole groups dealt to ranks gave some samples
    // twice in an epoch and none to others.
    for world in [2, 3, 4] {
        for (seed, epoch) in [(5, 0), (5, 1), (8, 3)] {
            let mut got = Vec::new();
            for rank in 0..world {
                let c = LoaderConfig {
                    rank,
                    world_size: world,
                    seed,
                    ..cfg(true, Mode::Sync)
                };
                let mut l = Loader::new(pq.clone(), c).unwrap();
                for b in l.epoch(epoch) {
                    got.extend(b.unwrap().indices);
                }
            }
            let mut n = [0usize; 30];
            for &i in &got {
                n[i] += 1;
            }
            let why = format!("{world} ranks, seed {seed}, epoch {epoch}");
            assert!(n.iter().all(|&k| k >= 1), "{why}: {n:?}");
            // Beyond every sample, only Pad's repeats: ceil(30 / world) on each rank.
            assert_eq!(
                got.len() - 30,
                30usize.div_ceil(world) * world - 30,
                "{why}"
            );
        }
    }
}
