//! Errors keep their causes: a caller matches on the stage that failed and on the error
//! under it (through `std::error::Error::source`), and the messages read as they did.
//! Sources keep the parser's or reader's error under the ones they make of it (a tar
//! index, manifest or member, a Parquet row group, a manifest line); a FIFO a manifest
//! names is an error, not a wait.

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::tar::tar_bytes;
use stoker_augment::{AugmentError, SampleRng};
use stoker_loader::source::{self, OpenOptions, Split};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{
    Loader, LoaderConfig, LoaderError, Mode, SampleError, Source, SourceError, StepError,
    StepSample, UserStep,
};

/// Twelve shapes in a folder, opened.
fn shapes(dir: &Path) -> Arc<dyn Source> {
    let opts = ShapesOptions {
        count: 12,
        size: 16,
        classes: 2,
        seed: 1,
    };
    synthetic::shapes(dir, &opts, |_, _| {}).expect("shapes");
    source::open(dir, Split::Train).expect("open")
}

fn sync_in_order() -> LoaderConfig {
    LoaderConfig {
        batch_size: 4,
        mode: Mode::Sync,
        shuffle: false,
        ..LoaderConfig::default()
    }
}

/// The first error of epoch 0.
fn first_error(src: Arc<dyn Source>, cfg: LoaderConfig) -> LoaderError {
    let mut loader = Loader::new(src, cfg).expect("loader");
    let out = loader.epoch(0).find_map(Result::err);
    out.expect("an error")
}

#[test]
fn a_damaged_image_is_a_decode_error_with_the_decoders_error_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path());
    let path = PathBuf::from(src.describe(5));
    // A JPEG start, garbage, and a JPEG end: complete, and rejected by the decoder.
    let mut bytes = vec![0xff, 0xd8, 0xff, 0xc0, 0x00, 0x02];
    bytes.extend_from_slice(&[0x55; 64]);
    bytes.extend_from_slice(&[0xff, 0xd9]);
    std::fs::write(&path, bytes).unwrap();

    let err = first_error(src, sync_in_order());
    assert!(
        matches!(
            &err,
            LoaderError::Sample {
                index: 5,
                source: SampleError::Decode(AugmentError::Jpeg {
                    source: Some(_),
                    ..
                }),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.sample_index(), Some(5));
    let decode = err.decode_error().expect("a decode error");
    // The message is the sample's name and the decoder's words, as it always read.
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "sample 5 ({}): corrupt JPEG data: ",
            path.display()
        )),
        "{msg}"
    );
    assert!(
        msg.ends_with(&decode.source().unwrap().to_string()),
        "{msg}"
    );
    // The same through `source()`: the stage, then the decoder's error, then its own.
    let stage = err.source().unwrap().downcast_ref::<SampleError>().unwrap();
    assert!(matches!(stage, SampleError::Decode(_)));
    let augment = stage.source().unwrap().downcast_ref::<AugmentError>();
    assert!(matches!(augment, Some(AugmentError::Jpeg { .. })));
    assert!(
        augment.unwrap().source().is_some(),
        "zune-jpeg's error is kept"
    );
}

#[test]
fn a_vanished_file_is_a_read_error_with_the_io_error_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path());
    let path = PathBuf::from(src.describe(6));
    std::fs::remove_file(&path).unwrap();

    let err = first_error(src, sync_in_order());
    let read = err.source_error().expect("a read error");
    assert_eq!(read.path(), Some(path.as_path()));
    let io = err
        .source()
        .and_then(|s| s.source())
        .and_then(|s| s.downcast_ref::<SourceError>())
        .and_then(|s| s.source())
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the I/O error under the source error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    // The sample names the file once: the reason is the I/O error's text.
    assert_eq!(
        err.to_string(),
        format!("sample 6 ({}): {io}", path.display())
    );
}

/// A step's own error type, to find again under the loader's.
#[derive(Debug, thiserror::Error)]
#[error("sample {0} is not wanted")]
struct Unwanted(usize);

#[test]
fn a_steps_error_is_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path());
    let step = |s: &mut StepSample<'_>, _: &mut SampleRng| -> Result<(), StepError> {
        match s.index {
            7 => Err(Unwanted(7).into()),
            _ => Ok(()),
        }
    };
    let cfg = LoaderConfig {
        steps: vec![UserStep::new(step)],
        ..sync_in_order()
    };
    let err = first_error(src, cfg);
    let LoaderError::Sample {
        index: 7,
        source: SampleError::Step { name, source },
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(name, "user step");
    assert!(matches!(
        source.downcast_ref::<Unwanted>(),
        Some(Unwanted(7))
    ));
    assert!(
        err.to_string()
            .ends_with("): step 'user step': sample 7 is not wanted"),
        "{err}"
    );
}

#[test]
fn a_source_that_cannot_be_parsed_keeps_the_parsers_error() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("instances.json");
    std::fs::write(&json, b"{ not json").unwrap();
    let options = OpenOptions {
        images: Some(dir.path().display().to_string()),
        ..OpenOptions::default()
    };
    let err = source::open_with(&json, &options).err().expect("an error");
    assert_eq!(err.path(), Some(json.as_path()));
    let SourceError::Format {
        source: Some(cause),
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    let parse = cause
        .downcast_ref::<serde_json::Error>()
        .expect("serde_json's error");
    assert!(parse.is_syntax());
    assert!(
        err.to_string().ends_with(&parse.to_string()),
        "the message still ends with the parser's: {err}"
    );
}

#[test]
fn an_unusable_trace_file_is_a_configuration_error_with_the_io_error_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(&dir.path().join("data"));
    let trace = dir.path().join("no/such/folder/trace.json");
    let cfg = LoaderConfig {
        trace: Some(trace.clone()),
        ..sync_in_order()
    };
    let err = Loader::new(src, cfg).err().expect("an error");
    let LoaderError::Trace { path, source } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(path, &trace);
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(
        err.to_string(),
        format!(
            "invalid loader configuration: trace: cannot create {}: {source}",
            trace.display()
        )
    );
}

/// The error under `err`, as a `T`.
fn cause<T: std::error::Error + 'static>(err: &SourceError) -> &T {
    err.source()
        .and_then(|c| c.downcast_ref::<T>())
        .unwrap_or_else(|| panic!("no {} under {err:?}", std::any::type_name::<T>()))
}

/// `err`'s message ends with the words of the error under it, as it always did.
fn ends_with_its_cause(err: &SourceError, cause: &dyn std::error::Error) {
    let msg = err.to_string();
    assert!(msg.ends_with(&cause.to_string()), "{msg}");
}

#[test]
fn a_tar_manifest_or_member_that_is_not_json_keeps_the_parsers_error() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(&dir.path().join("data"));
    let shards = dir.path().join("shards");
    source::tar::pack_tar(src.as_ref(), &shards, 1 << 20, |_, _| {}).unwrap();
    let manifest = shards.join(source::tar::MANIFEST_NAME);
    std::fs::write(&manifest, b"{ not json").unwrap();
    let err = source::open(&shards, Split::Train).err().expect("an error");
    assert_eq!(err.path(), Some(manifest.as_path()));
    let parse = cause::<serde_json::Error>(&err);
    assert!(parse.is_syntax());
    assert!(
        err.to_string().contains(": not a shard manifest: "),
        "{err}"
    );
    ends_with_its_cause(&err, parse);

    // A shard from another writer whose json member is not JSON.
    let png = std::fs::read(src.describe(0)).unwrap();
    let shard = dir.path().join("other.tar");
    std::fs::write(
        &shard,
        tar_bytes(&[("a.png", &png), ("a.json", b"{ not json")]),
    )
    .unwrap();
    let err = source::open(&shard, Split::Train).err().expect("an error");
    assert_eq!(err.path(), Some(shard.as_path()));
    let parse = cause::<serde_json::Error>(&err);
    assert!(
        err.to_string().starts_with(&format!(
            "{}: member a.json: json member: ",
            shard.display()
        )),
        "{err}"
    );
    ends_with_its_cause(&err, parse);
}

/// A remote shard's sidecar index is read, not rebuilt: one that is not JSON is an
/// error about it (through a file:// URL, no network).
#[cfg(feature = "remote")]
#[test]
fn a_remote_shards_index_that_is_not_json_keeps_the_parsers_error() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(&dir.path().join("data"));
    let png = std::fs::read(src.describe(0)).unwrap();
    let shard = dir.path().join("s.tar");
    std::fs::write(&shard, tar_bytes(&[("k.png", &png), ("k.cls", b"0")])).unwrap();
    std::fs::write(dir.path().join("s.tar.idx"), b"{ not json").unwrap();
    let url = format!("file://{}", shard.display());
    let err = source::open(Path::new(&url), Split::Train)
        .err()
        .expect("an error");
    assert!(
        err.url().is_some_and(|u| u.ends_with("s.tar.idx")),
        "{err:?}"
    );
    let parse = cause::<serde_json::Error>(&err);
    assert!(err.to_string().contains(": not a shard index: "), "{err}");
    ends_with_its_cause(&err, parse);
}

#[test]
fn a_manifest_line_that_is_not_json_keeps_the_parsers_error_at_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = shapes(&data);
    let first = PathBuf::from(src.describe(0));
    let rel = first.strip_prefix(&data).unwrap().display().to_string();
    let path = data.join("m.jsonl");
    let good = serde_json::json!({"image": rel, "label": 0}).to_string();
    std::fs::write(&path, format!("{good}\n{{ not json\n")).unwrap();
    let manifest = source::open(&path, Split::Train).unwrap();
    let mut buf = Vec::new();
    manifest.read(0, &mut buf).unwrap();
    // The line is reported at each read of its sample, each time with the error.
    for _ in 0..2 {
        let err = manifest.read(1, &mut buf).unwrap_err();
        assert_eq!(
            err.record_name(),
            Some(format!("{} line 2", path.display()).as_str())
        );
        let parse = cause::<serde_json::Error>(&err);
        assert!(parse.is_syntax());
        assert_eq!(
            err.to_string(),
            format!("{} line 2: {parse}", path.display())
        );
    }
}

#[test]
fn a_damaged_parquet_row_group_keeps_the_readers_error() {
    use arrow_array::{ArrayRef, BinaryArray, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;

    let dir = tempfile::tempdir().unwrap();
    let src = shapes(&dir.path().join("data"));
    let mut images = Vec::new();
    for i in 0..4 {
        images.push(std::fs::read(src.describe(i)).unwrap());
    }
    let column: ArrayRef = Arc::new(BinaryArray::from_iter_values(images.iter()));
    let schema = Arc::new(Schema::new(vec![Field::new(
        "image",
        DataType::Binary,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut bytes = Vec::new();
    let mut w = ArrowWriter::try_new(&mut bytes, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    // The footer stays whole (the file opens); the first compressed page loses its
    // zstd frame's magic number, so decoding the row group fails.
    let magic = [0x28, 0xb5, 0x2f, 0xfd];
    let at = bytes
        .windows(4)
        .position(|w| w == magic)
        .expect("a zstd frame");
    bytes[at..at + 4].fill(0);
    let path = dir.path().join("damaged.parquet");
    std::fs::write(&path, &bytes).unwrap();

    let pq = source::open(&path, Split::Train).unwrap();
    let err = pq.read(0, &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "{} row group 0 row 0: reading the row group: ",
            path.display()
        )),
        "{err}"
    );
    let arrow = cause::<arrow_schema::ArrowError>(&err);
    ends_with_its_cause(&err, arrow);
}

/// A file an annotation names is opened as a regular file or not at all: a FIFO in a
/// manifest is an error naming it, where opening it would wait for a writer forever.
#[cfg(unix)]
#[test]
fn a_manifest_image_that_is_a_fifo_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = shapes(&data);
    let first = PathBuf::from(src.describe(0));
    let rel = first.strip_prefix(&data).unwrap().display().to_string();
    let made = std::process::Command::new("mkfifo")
        .arg(data.join("pipe.jpg"))
        .status();
    if !made.is_ok_and(|s| s.success()) {
        println!("SKIPPED: mkfifo is not available");
        return;
    }
    let path = data.join("m.jsonl");
    let lines = [
        serde_json::json!({"image": rel, "label": 0}).to_string(),
        serde_json::json!({"image": "pipe.jpg", "label": 0}).to_string(),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    let manifest = source::open(&path, Split::Train).unwrap();
    let mut buf = Vec::new();
    manifest.read(0, &mut buf).unwrap();
    let e = manifest.read(1, &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("pipe.jpg") && e.contains("a FIFO (named pipe), not a regular file"),
        "{e}"
    );
}
