//! CIFAR-10 binary batches. The input holds two files: a little-endian u32 length,
//! `batches.meta.txt` (class names; a length of 0 writes no such file), then
//! `data_batch_1.bin`. They are opened the two ways a user does: the batch file
//! (`source::open`) and the folder (`Cifar10::open_dir`).
//!
//! Checked for every batch that opens: both ways agree on the samples and classes;
//! every label is a class; every record reads as 32x32x3 pixels.

use stoker_loader::source::{self, Cifar10};
use stoker_loader::Source;

use crate::mnist::read_all;
use crate::scratch::Scratch;
use crate::{split_prefixed, Outcome};

pub const META_NAME: &str = "batches.meta.txt";
pub const BATCH_NAME: &str = "data_batch_1.bin";

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let Some((meta, batch)) = split_prefixed(data) else {
        return Outcome::Skipped("shorter than the 4-byte length prefix".into());
    };
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(o) => return o,
    };
    if !meta.is_empty() {
        if let Err(o) = scratch.write(META_NAME, meta) {
            return o;
        }
    }
    let batch_path = match scratch.write(BATCH_NAME, batch) {
        Ok(p) => p,
        Err(o) => return o,
    };
    // `source::open` sniffs a packed magic before it looks at the name.
    let by_file = source::open(&batch_path, source::Split::Train);
    let by_dir = Cifar10::open_dir(scratch.path(), true);
    let src = match (by_file, by_dir) {
        (Ok(src), Ok(dir)) => {
            assert_eq!(src.format(), "cifar10");
            assert_eq!(src.len(), dir.len(), "file and folder disagree");
            assert_eq!(src.classes(), dir.classes(), "file and folder disagree");
            src
        }
        (Ok(src), Err(_)) => {
            // Another format, fuzzed by its own harness.
            assert_ne!(src.format(), "cifar10", "the file opens, the folder not");
            return Outcome::Accepted;
        }
        (Err(e), Ok(_)) => panic!("the folder opens, the file not: {e}"),
        (Err(e), Err(_)) => return Outcome::rejected(e),
    };
    read_all(src.as_ref());
    Outcome::Accepted
}
