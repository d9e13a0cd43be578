//! MNIST IDX files. The input holds two files: a little-endian u32 length, the images
//! file (`train-images-idx3-ubyte`), then the labels file (`train-labels-idx1-ubyte`);
//! either may be gzipped. They are written side by side and opened the two ways a
//! user does: the images file (`source::open`, which sniffs the format and finds the
//! partner by name) and the folder (`Mnist::open_dir`).
//!
//! Checked for every pair that opens: both ways agree on the number of samples; every
//! label is a class; every record reads as raw pixels of the announced size.

use stoker_loader::source::{self, Mnist};
use stoker_loader::{RecordKind, Source};

use crate::scratch::Scratch;
use crate::{split_prefixed, Outcome};

pub const IMAGES_NAME: &str = "train-images-idx3-ubyte";
pub const LABELS_NAME: &str = "train-labels-idx1-ubyte";

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let Some((images, labels)) = split_prefixed(data) else {
        return Outcome::Skipped("shorter than the 4-byte length prefix".into());
    };
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(o) => return o,
    };
    let images_path = match scratch.write(IMAGES_NAME, images) {
        Ok(p) => p,
        Err(o) => return o,
    };
    if let Err(o) = scratch.write(LABELS_NAME, labels) {
        return o;
    }
    let by_file = source::open(&images_path, source::Split::Train);
    let by_dir = Mnist::open_dir(scratch.path(), true);
    // Both ways end in `Mnist::open` whenever the images file is IDX or gzip; the
    // file way alone may also find another format by its magic (a packed file).
    let src = match (by_file, by_dir) {
        (Ok(src), Ok(dir)) => {
            assert_eq!(src.format(), "mnist");
            assert_eq!(src.len(), dir.len(), "file and folder disagree");
            src
        }
        (Ok(src), Err(_)) => {
            // Another format, fuzzed by its own harness.
            assert_ne!(
                src.format(),
                "mnist",
                "the file opens as MNIST, the folder not"
            );
            return Outcome::Accepted;
        }
        (Err(e), Ok(_)) => panic!("the folder opens as MNIST, the file not: {e}"),
        (Err(e), Err(_)) => return Outcome::rejected(e),
    };
    read_all(src.as_ref());
    Outcome::Accepted
}

/// Read every record of `src` and check its label and shape.
pub(crate) fn read_all(src: &dyn Source) {
    let classes = src.classes().len();
    let mut buf = Vec::new();
    for i in 0..src.len() {
        let label = src.label(i);
        assert!((label as usize) < classes, "record {i}: label {label}");
        match src.read(i, &mut buf) {
            Ok(RecordKind::Raw {
                width,
                height,
                channels,
            }) => assert_eq!(
                buf.len(),
                width as usize * height as usize * channels as usize,
                "record {i} has the wrong size"
            ),
            Ok(RecordKind::Encoded) => {}
            Err(e) => panic!("record {i} of a source that opened does not read: {e}"),
        }
    }
    assert!(src.read(src.len(), &mut buf).is_err(), "read past the end");
}
