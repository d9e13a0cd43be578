//! Errors keep their causes: a caller matches on the stage that failed and on the error
//! under it (through `std::error::Error::source`), and the messages read as they did.

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
