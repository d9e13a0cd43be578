//! Parquet files laid out as the Hugging Face `datasets` library writes them (an Image
//! struct `{bytes, path}`, a ClassLabel in the `huggingface` schema metadata), written
//! here by the parquet crate's writer with several row groups, snappy and zstd: the
//! samples, labels and batches equal those of the image folder they were made from,
//! resume works in the middle of a row group, and bad files are errors naming them.

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
use stoker_loader::gen::{self, ShapesOptions};
use stoker_loader::source::{self, OpenOptions, ParquetColumns};
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
    gen::shapes(&root, &opts, |_, _| {}).unwrap();
    source::open(&root, true).unwrap()
}

/// Rows `range` of `src` as a `datasets`-style Parquet file at `out`.
fn write(src: &dyn Source, range: std::ops::Range<usize>, out: &Path, zstd: bool) {
    let (mut images, mut labels, mut text) = (Vec::new(), Vec::new(), Vec::new());
    let mut buf = Vec::new();
    for i in range {
        src.read(i, &mut buf).unwrap();
        images.push(buf.clone());
        labels.push(i64::from(src.label(i)));
        text.push(format!("sample {i}"));
    }
    let bytes: ArrayRef = Arc::new(BinaryArray::from_iter_values(images.iter()));
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..images.len()).map(|i| format!("{i}.jpg")),
    ));
    let image = StructArray::from(vec![
        (Arc::new(Field::new("bytes", DataType::Binary, true)), bytes),
        (Arc::new(Field::new("path", DataType::Utf8, true)), paths),
    ]);
    let hf = serde_json::json!({"info": {"features": {
        "image": {"_type": "Image"},
        "label": {"names": CLASSES, "_type": "ClassLabel"},
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
            Arc::new(image),
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
        workers: 2,
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
    let pq = source::open(&data, true).unwrap();
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
        let pq = source::open(&data, true).unwrap();
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

#[test]
fn row_groups_resume_on_another_rank_count_delivering_each_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = folder(dir.path());
    let pq = source::open(&shards(dir.path(), src.as_ref()), true).unwrap();
    let run = |world: usize, take: Option<usize>, state: Option<&stoker_loader::LoaderState>| {
        let mut got = Vec::new();
        let mut saved = None;
        for rank in 0..world {
            let c = LoaderConfig {
                rank,
                world,
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
        let (mut want, _) = run(w, None, None);
        let (first, state) = run(w, Some(take), None);
        let (rest, _) = run(w2, None, Some(&state));
        let mut union = [first.clone(), rest.clone()].concat();
        union.sort_unstable();
        union.dedup();
        want.sort_unstable();
        want.dedup();
        assert_eq!(union, want, "{w} -> {w2}: every sample of the epoch");
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
