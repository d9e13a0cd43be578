//! The packed format: one file holding a whole data set (records, labels, class names),
//! read through a memory map.
//!
//! The layout is specified in `docs/packed-format.md`. In short, all little-endian:
//!
//! ```text
//! header (128 bytes) | record bytes | class names | index (24 bytes per record)
//! ```
//!
//! The writer streams records without knowing their number in advance, so the index
//! and class table follow the records and the header, which points at both, is written
//! last. [`PackedReader::open`] checks everything a later read depends on (magic,
//! version, header checksum, that every region and every record lies inside the file,
//! labels, class table, index checksum) before it hands out a single byte, so a damaged
//! file is an error at open, never an out-of-bounds read. Record checksums are checked
//! on each read.
//!
//! One concern per file: `format.rs` (the byte layout: header, index entries, class
//! table), `reader.rs` (opening and checking a file, reading records) and `writer.rs`
//! (writing a file record by record, and packing any source).

mod format;
mod reader;
mod writer;

pub use format::{
    layout_name, ShapedRecord, ENTRY_LEN, HEADER_LEN, MAGIC, SHAPE_LEN, VERSION, VERSION_SHAPED,
};
pub use reader::PackedReader;
pub use writer::{pack_source, pack_source_with, temp_path, PackStats, PackedWriter};

/// True when `bytes` (a file's first bytes) start like a packed file.
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}
