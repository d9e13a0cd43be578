//! Packed files: the input is the whole file, opened with `PackedReader::open`, then
//! every record and label is read.
//!
//! The header, the index and the class table each carry a CRC-32, and each record
//! one in its index entry, so a mutated file almost always stops at the first
//! checksum. Each input is therefore opened twice: as it is, and with every checksum
//! it covers recomputed (the fields as the format puts them, docs/packed-format.md),
//! which lets mutations reach the checks behind the checksums.
//!
//! Checked for every file that opens: each label is below the number of classes;
//! each record reads as the file's layout (raw records with exactly their size; in a
//! version 3 file each raw record has a shape of its own); reading one past the end is
//! an error.

use stoker_loader::source::packed::{ENTRY_LEN, HEADER_LEN, MAGIC};
use stoker_loader::source::PackedReader;
use stoker_loader::{RecordKind, Source};

use crate::scratch::Scratch;
use crate::Outcome;

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(o) => return o,
    };
    let as_is = open_and_read(&scratch, "as-is.pack", data);
    let fixed = fix_checksums(data);
    if fixed.as_deref().is_none_or(|f| f == data) {
        return as_is;
    }
    let with_sums = open_and_read(
        &scratch,
        "checksums-fixed.pack",
        fixed.as_deref().unwrap_or(data),
    );
    match (as_is, with_sums) {
        (Outcome::Accepted, _) | (_, Outcome::Accepted) => Outcome::Accepted,
        (Outcome::Rejected(_), Outcome::Rejected(e)) => Outcome::Rejected(e),
        (other, _) => other,
    }
}

fn open_and_read(scratch: &Scratch, name: &str, bytes: &[u8]) -> Outcome {
    let path = match scratch.write(name, bytes) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let reader = match PackedReader::open(&path) {
        Ok(r) => r,
        Err(e) => return Outcome::rejected(e),
    };
    let classes = reader.classes().len();
    let layout = reader.layout();
    let mut buf = Vec::new();
    let mut total = 0u64;
    for i in 0..reader.len() {
        let label = reader.label(i);
        assert!(
            (label as usize) < classes,
            "record {i}: label {label} with {classes} classes"
        );
        // A record whose checksum fails is an error to report, not a reason to stop.
        if let Ok(kind) = reader.read(i, &mut buf) {
            if reader.is_shaped() {
                assert!(
                    matches!(kind, RecordKind::Raw { .. }),
                    "record {i} of a shaped file read as {kind:?}"
                );
            } else {
                assert_eq!(kind, layout, "record {i} read as another layout");
            }
            if let RecordKind::Raw {
                width,
                height,
                channels,
            } = kind
            {
                let want = width as usize * height as usize * channels as usize;
                assert_eq!(buf.len(), want, "raw record {i} has the wrong size");
            }
            total += buf.len() as u64;
        }
    }
    assert!(
        reader.read(reader.len(), &mut buf).is_err(),
        "reading past the last record succeeded"
    );
    assert!(reader.record_bytes() >= total);
    Outcome::Accepted
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn region(b: &[u8], offset: u64, len: u64) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= b.len()).then_some(start..end)
}

/// `data` with the record, index, class-table and header checksums recomputed, where
/// the header is whole and the regions it names lie inside the input; `None` for an
/// input too short or without the magic.
pub fn fix_checksums(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < HEADER_LEN || !data.starts_with(&MAGIC) {
        return None;
    }
    let mut b = data.to_vec();
    let count = u64_at(&b, 16)?;
    let (classes_offset, classes_len) = (u64_at(&b, 64)?, u64_at(&b, 72)?);
    let index_offset = u64_at(&b, 80)?;
    let index = count
        .checked_mul(ENTRY_LEN as u64)
        .and_then(|len| region(&b, index_offset, len));
    if let Some(index) = index {
        for at in index.clone().step_by(ENTRY_LEN) {
            let (offset, len) = (u64_at(&b, at)?, u64_at(&b, at + 8)?);
            if let Some(record) = region(&b, offset, len) {
                let crc = crc32fast::hash(&b[record]);
                b[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&b[index]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
    }
    if let Some(table) = region(&b, classes_offset, classes_len) {
        let crc = crc32fast::hash(&b[table]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&b[..HEADER_LEN - 4]);
    b[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Some(b)
}
