//! Reading a packed file: open and check it whole, then hand out records by index.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::format::{decode_classes, layout_name, raw_len, Entry, Header, ENTRY_LEN, HEADER_LEN};
use crate::source::{RecordKind, Source, SourceError};

/// A packed file opened for random access through a read-only memory map.
pub struct PackedReader {
    path: PathBuf,
    map: Mmap,
    header: Header,
    classes: Vec<String>,
}

impl std::fmt::Debug for PackedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedReader")
            .field("path", &self.path)
            .field("records", &self.header.count)
            .field("layout", &self.header.layout)
            .field("classes", &self.classes)
            .finish()
    }
}

impl PackedReader {
    /// Map `path` and check it whole (see the module docs). Every damage found is a
    /// [`SourceError::Format`] naming the file and what is wrong.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let file = File::open(path).map_err(|e| SourceError::io(path, e))?;
        let file_len = file.metadata().map_err(|e| SourceError::io(path, e))?.len();
        if file_len == 0 {
            return Err(SourceError::format(path, "empty file"));
        }
        // SAFETY: the map is read-only and every access below is bounds-checked against
        // its length. Like every mmap reader we assume nobody truncates the file while it
        // is open (that would fault, not corrupt): packs are written once, under a
        // temporary name, and renamed whole.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| SourceError::io(path, e))?;
        let bad = |reason: String| SourceError::format(path, reason);
        let header_bytes = &map[..map.len().min(HEADER_LEN)];
        let header = Header::decode(header_bytes, map.len() as u64).map_err(bad)?;
        // Header::decode checked that every region lies inside the file, so the slices
        // below are in bounds; `get` keeps that true even if a check is ever dropped.
        let slice = |offset: u64, len: u64, what: &str| {
            let start = usize::try_from(offset).ok();
            let end = usize::try_from(offset.saturating_add(len)).ok();
            start
                .zip(end)
                .and_then(|(s, e)| map.get(s..e))
                .ok_or_else(|| bad(format!("{what} lies outside the file")))
        };
        let count = header.count as usize;
        let index = slice(header.index_offset, (count * ENTRY_LEN) as u64, "index")?;
        let data_end = header.data_offset + header.data_len;
        for (i, raw) in index.chunks_exact(ENTRY_LEN).enumerate() {
            let e = Entry::decode(raw).ok_or_else(|| bad(format!("record {i}: short entry")))?;
            let end = e.offset.saturating_add(e.len);
            if end > map.len() as u64 {
                return Err(bad(format!(
                    "record {i} extends past end of file (offset {}, length {}, file has {} bytes)",
                    e.offset,
                    e.len,
                    map.len()
                )));
            }
            if e.offset < header.data_offset || end > data_end {
                return Err(bad(format!(
                    "record {i} (bytes {}..{end}) lies outside the record data (bytes {}..{data_end})",
                    e.offset, header.data_offset
                )));
            }
            if e.label >= header.num_classes {
                return Err(bad(format!(
                    "record {i} has label {}, but the file lists {} classes",
                    e.label, header.num_classes
                )));
            }
            if let Some(want) = raw_len(header.layout) {
                if e.len != want {
                    return Err(bad(format!(
                        "record {i} has {} bytes, the raw layout {} needs {want}",
                        e.len,
                        layout_name(header.layout)
                    )));
                }
            }
        }
        let computed = crc32fast::hash(index);
        if computed != header.index_crc {
            return Err(bad(format!(
                "index checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.index_crc
            )));
        }
        let table = slice(header.classes_offset, header.classes_len, "class table")?;
        let computed = crc32fast::hash(table);
        if computed != header.classes_crc {
            return Err(bad(format!(
                "class table checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.classes_crc
            )));
        }
        let classes = decode_classes(table, header.num_classes).map_err(bad)?;
        Ok(PackedReader {
            path: path.to_path_buf(),
            map,
            header,
            classes,
        })
    }

    /// The file this reader maps.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record layout shared by every record of the file.
    pub fn layout(&self) -> RecordKind {
        self.header.layout
    }

    /// Sum of all records' lengths.
    pub fn record_bytes(&self) -> u64 {
        (0..self.len())
            .filter_map(|i| self.entry(i))
            .map(|e| e.len)
            .sum()
    }

    fn entry(&self, index: usize) -> Option<Entry> {
        if index >= self.len() {
            return None;
        }
        let at = (self.header.index_offset as usize).checked_add(index * ENTRY_LEN)?;
        Entry::decode(self.map.get(at..at.checked_add(ENTRY_LEN)?)?)
    }

    fn record_error(&self, index: usize, reason: String) -> SourceError {
        SourceError::Record {
            what: self.describe(index),
            reason,
        }
    }
}

impl Source for PackedReader {
    fn len(&self) -> usize {
        self.header.count as usize
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        match self.entry(index) {
            Some(e) => e.label,
            None => panic!(
                "{}: label of record {index} asked, the file holds {}",
                self.path.display(),
                self.len()
            ),
        }
    }

    fn describe(&self, index: usize) -> String {
        format!("{} record {index}", self.path.display())
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let e = self.entry(index).ok_or_else(|| {
            self.record_error(
                index,
                format!("index out of range (the file holds {})", self.len()),
            )
        })?;
        // Checked at open; checked again so that no index entry can ever slice past the end.
        let bytes = usize::try_from(e.offset)
            .ok()
            .zip(usize::try_from(e.offset.saturating_add(e.len)).ok())
            .and_then(|(s, end)| self.map.get(s..end))
            .ok_or_else(|| self.record_error(index, "extends past end of file".into()))?;
        let computed = crc32fast::hash(bytes);
        if computed != e.crc {
            return Err(self.record_error(
                index,
                format!(
                    "checksum mismatch (stored {:#010x}, computed {computed:#010x}): the file is damaged",
                    e.crc
                ),
            ));
        }
        buf.extend_from_slice(bytes);
        Ok(self.header.layout)
    }

    fn format(&self) -> &'static str {
        "packed"
    }
}
