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

use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{RecordKind, Source, SourceError};

/// The first eight bytes of every packed file.
pub const MAGIC: [u8; 8] = *b"STKPACK1";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 128;
/// Size of one index entry in bytes: offset u64, length u64, label u32, crc32 u32.
pub const ENTRY_LEN: usize = 24;

const LAYOUT_ENCODED: u32 = 0;
const LAYOUT_RAW: u32 = 1;
/// Bytes 0..HEADER_CRC_AT are covered by the header checksum stored at HEADER_CRC_AT.
const HEADER_CRC_AT: usize = HEADER_LEN - 4;
/// A class name longer than this is taken as damage, not a name.
const MAX_CLASS_NAME: usize = 4096;

/// Bytes in one raw record of `layout`; `None` for encoded records or a size that
/// does not fit in a u64.
fn raw_len(layout: RecordKind) -> Option<u64> {
    match layout {
        RecordKind::Encoded => None,
        RecordKind::Raw {
            width,
            height,
            channels,
        } => u64::from(width)
            .checked_mul(u64::from(height))?
            .checked_mul(u64::from(channels)),
    }
}

/// `encoded` or `WxHxC`, for messages.
pub fn layout_name(layout: RecordKind) -> String {
    match layout {
        RecordKind::Encoded => "encoded".into(),
        RecordKind::Raw {
            width,
            height,
            channels,
        } => format!("{width}x{height}x{channels}"),
    }
}

/// The decoded fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    count: u64,
    layout: RecordKind,
    num_classes: u32,
    data_offset: u64,
    data_len: u64,
    classes_offset: u64,
    classes_len: u64,
    classes_crc: u32,
    index_offset: u64,
    index_crc: u32,
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Little-endian u32 at `at`; `None` past the end of `b`.
fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, VERSION);
        put_u32(&mut b, 12, HEADER_LEN as u32);
        put_u64(&mut b, 16, self.count);
        let (layout, w, h, c) = match self.layout {
            RecordKind::Encoded => (LAYOUT_ENCODED, 0, 0, 0),
            RecordKind::Raw {
                width,
                height,
                channels,
            } => (LAYOUT_RAW, width, height, u32::from(channels)),
        };
        put_u32(&mut b, 24, layout);
        put_u32(&mut b, 28, w);
        put_u32(&mut b, 32, h);
        put_u32(&mut b, 36, c);
        put_u32(&mut b, 40, self.num_classes);
        put_u32(&mut b, 44, self.classes_crc);
        put_u64(&mut b, 48, self.data_offset);
        put_u64(&mut b, 56, self.data_len);
        put_u64(&mut b, 64, self.classes_offset);
        put_u64(&mut b, 72, self.classes_len);
        put_u64(&mut b, 80, self.index_offset);
        put_u32(&mut b, 88, self.index_crc);
        // 92..124 reserved, zero.
        let crc = crc32fast::hash(&b[..HEADER_CRC_AT]);
        put_u32(&mut b, HEADER_CRC_AT, crc);
        b
    }

    /// Parse and check the header of a file of `file_len` bytes whose first bytes are
    /// `b`. Errors are reasons, to be prefixed with the file name.
    fn decode(b: &[u8], file_len: u64) -> Result<Header, String> {
        if b.is_empty() {
            return Err("empty file".into());
        }
        let head = &b[..b.len().min(MAGIC.len())];
        if head != &MAGIC[..head.len()] {
            return Err(format!(
                "bad magic {:?} (a packed file starts with {:?})",
                String::from_utf8_lossy(head),
                String::from_utf8_lossy(&MAGIC)
            ));
        }
        if b.len() < HEADER_LEN {
            return Err(format!(
                "truncated: header needs {HEADER_LEN} bytes, file has {file_len}"
            ));
        }
        let u32_at = |at| get_u32(b, at).unwrap_or(0);
        let u64_at = |at| get_u64(b, at).unwrap_or(0);
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "unsupported version {version} (this build reads version {VERSION})"
            ));
        }
        let stored = u32_at(HEADER_CRC_AT);
        let computed = crc32fast::hash(&b[..HEADER_CRC_AT]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let header_len = u32_at(12);
        if header_len as usize != HEADER_LEN {
            return Err(format!(
                "header length field is {header_len}, version {VERSION} uses {HEADER_LEN}"
            ));
        }
        let layout = match u32_at(24) {
            LAYOUT_ENCODED => RecordKind::Encoded,
            LAYOUT_RAW => {
                let (width, height, channels) = (u32_at(28), u32_at(32), u32_at(36));
                let channels = u8::try_from(channels)
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| format!("raw layout has {channels} channels"))?;
                if width == 0 || height == 0 {
                    return Err(format!("raw layout has zero size {width}x{height}"));
                }
                let layout = RecordKind::Raw {
                    width,
                    height,
                    channels,
                };
                if raw_len(layout).is_none() {
                    return Err(format!(
                        "raw layout {width}x{height}x{channels} is too large"
                    ));
                }
                layout
            }
            other => return Err(format!("unknown record layout {other}")),
        };
        let h = Header {
            count: u64_at(16),
            layout,
            num_classes: u32_at(40),
            classes_crc: u32_at(44),
            data_offset: u64_at(48),
            data_len: u64_at(56),
            classes_offset: u64_at(64),
            classes_len: u64_at(72),
            index_offset: u64_at(80),
            index_crc: u32_at(88),
        };
        if b[92..HEADER_CRC_AT].iter().any(|&x| x != 0) {
            return Err("reserved header bytes are not zero".into());
        }
        if h.num_classes == 0 {
            return Err("header lists no classes".into());
        }
        let region = |name: &str, offset: u64, len: u64| -> Result<(), String> {
            let end = offset
                .checked_add(len)
                .ok_or_else(|| format!("{name} offset {offset} + length {len} overflows"))?;
            if offset < HEADER_LEN as u64 {
                return Err(format!("{name} at byte {offset} overlaps the header"));
            }
            if end > file_len {
                return Err(format!(
                    "truncated: {name} needs {end} bytes, file has {file_len}"
                ));
            }
            Ok(())
        };
        let index_len = h
            .count
            .checked_mul(ENTRY_LEN as u64)
            .ok_or_else(|| format!("record count {} is impossibly large", h.count))?;
        region("index", h.index_offset, index_len)?;
        region("class table", h.classes_offset, h.classes_len)?;
        region("record data", h.data_offset, h.data_len)?;
        if usize::try_from(h.count).is_err() {
            return Err(format!("record count {} does not fit in memory", h.count));
        }
        Ok(h)
    }
}

/// Parse the class table: `num_classes` times (u32 length, UTF-8 bytes), filling `table`.
fn decode_classes(table: &[u8], num_classes: u32) -> Result<Vec<String>, String> {
    let mut classes = Vec::new();
    let mut at = 0usize;
    for k in 0..num_classes {
        let len = get_u32(table, at).ok_or_else(|| format!("class table ends before class {k}"))?
            as usize;
        at += 4;
        if len > MAX_CLASS_NAME {
            return Err(format!("class {k} has a name of {len} bytes"));
        }
        let bytes = at
            .checked_add(len)
            .and_then(|end| table.get(at..end))
            .ok_or_else(|| format!("class table ends inside the name of class {k}"))?;
        let name =
            std::str::from_utf8(bytes).map_err(|_| format!("class {k}'s name is not UTF-8"))?;
        classes.push(name.to_owned());
        at += len;
    }
    if at != table.len() {
        return Err(format!(
            "class table has {} bytes after its {num_classes} names",
            table.len() - at
        ));
    }
    Ok(classes)
}

fn encode_classes(classes: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in classes {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c.as_bytes());
    }
    out
}

/// One index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    offset: u64,
    len: u64,
    label: u32,
    crc: u32,
}

impl Entry {
    fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        put_u64(&mut b, 0, self.offset);
        put_u64(&mut b, 8, self.len);
        put_u32(&mut b, 16, self.label);
        put_u32(&mut b, 20, self.crc);
        b
    }

    fn decode(b: &[u8]) -> Option<Entry> {
        Some(Entry {
            offset: get_u64(b, 0)?,
            len: get_u64(b, 8)?,
            label: get_u32(b, 16)?,
            crc: get_u32(b, 20)?,
        })
    }
}

/// What a finished pack wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackStats {
    /// Number of records.
    pub records: usize,
    /// Sum of the records' lengths.
    pub record_bytes: u64,
    /// Size of the whole file.
    pub file_bytes: u64,
}

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

/// True when `bytes` (a file's first bytes) start like a packed file.
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Writes a packed file record by record.
///
/// Records go to `OUT.tmp-PID` beside `OUT`; [`finish`](Self::finish) writes the index
/// and the header and only then renames the file to `OUT`. A writer dropped before
/// `finish` (an error, a panic, Ctrl-C unwinding) removes its temporary file, and one
/// killed outright leaves only the `.tmp-PID` name, so a file named `OUT` is always whole.
pub struct PackedWriter {
    out: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
    layout: RecordKind,
    classes: Vec<String>,
    index: Vec<u8>,
    count: u64,
    pos: u64,
    record_bytes: u64,
}

impl std::fmt::Debug for PackedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWriter")
            .field("out", &self.out)
            .field("tmp", &self.tmp)
            .field("records", &self.count)
            .finish()
    }
}

/// The temporary name a pack to `out` is written under.
pub fn temp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    out.with_file_name(name)
}

impl PackedWriter {
    /// Start a pack to `out` whose records all have `layout` and whose labels index
    /// `classes`.
    pub fn create(out: &Path, layout: RecordKind, classes: &[String]) -> Result<Self, SourceError> {
        if out.file_name().is_none() {
            return Err(SourceError::format(out, "not a file name"));
        }
        if classes.is_empty() {
            return Err(SourceError::format(
                out,
                "a packed file needs at least one class",
            ));
        }
        if u32::try_from(classes.len()).is_err() {
            return Err(SourceError::format(out, "too many classes"));
        }
        if let Some(c) = classes.iter().find(|c| c.len() > MAX_CLASS_NAME) {
            return Err(SourceError::format(
                out,
                format!("class name of {} bytes is too long", c.len()),
            ));
        }
        if let RecordKind::Raw {
            width,
            height,
            channels,
        } = layout
        {
            if width == 0 || height == 0 || channels == 0 || raw_len(layout).is_none() {
                return Err(SourceError::format(
                    out,
                    format!("raw layout {width}x{height}x{channels} is not usable"),
                ));
            }
        }
        let tmp = temp_path(out);
        let file = File::create(&tmp).map_err(|e| SourceError::io(&tmp, e))?;
        let mut w = PackedWriter {
            out: out.to_path_buf(),
            tmp,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            layout,
            classes: classes.to_vec(),
            index: Vec::new(),
            count: 0,
            pos: 0,
            record_bytes: 0,
        };
        // A zeroed header until `finish`: a file left half-written has no magic.
        w.write_bytes(&[0u8; HEADER_LEN])?;
        Ok(w)
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), SourceError> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| SourceError::format(&self.out, "writer already finished"))?;
        file.write_all(bytes)
            .map_err(|e| SourceError::io(&self.tmp, e))?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Append one record.
    pub fn append(&mut self, bytes: &[u8], label: u32) -> Result<(), SourceError> {
        let what = || format!("{} record {}", self.out.display(), self.count);
        if label as usize >= self.classes.len() {
            return Err(SourceError::Record {
                what: what(),
                reason: format!("label {label} but only {} classes", self.classes.len()),
            });
        }
        if let Some(want) = raw_len(self.layout) {
            if bytes.len() as u64 != want {
                return Err(SourceError::Record {
                    what: what(),
                    reason: format!(
                        "{} bytes, the raw layout {} needs {want}",
                        bytes.len(),
                        layout_name(self.layout)
                    ),
                });
            }
        }
        let entry = Entry {
            offset: self.pos,
            len: bytes.len() as u64,
            label,
            crc: crc32fast::hash(bytes),
        };
        self.write_bytes(bytes)?;
        self.index.extend_from_slice(&entry.encode());
        self.count += 1;
        self.record_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Records appended so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Write the class table, the index and the header, flush to disk, and rename the
    /// temporary file to the final name.
    pub fn finish(mut self) -> Result<PackStats, SourceError> {
        let data_len = self.pos - HEADER_LEN as u64;
        let table = encode_classes(&self.classes);
        let classes_offset = self.pos;
        self.write_bytes(&table)?;
        let index_offset = self.pos;
        let index = std::mem::take(&mut self.index);
        self.write_bytes(&index)?;
        let header = Header {
            count: self.count,
            layout: self.layout,
            num_classes: self.classes.len() as u32,
            data_offset: HEADER_LEN as u64,
            data_len,
            classes_offset,
            classes_len: table.len() as u64,
            classes_crc: crc32fast::hash(&table),
            index_offset,
            index_crc: crc32fast::hash(&index),
        };
        let file_bytes = self.pos;
        let tmp = self.tmp.clone();
        let io = |e| SourceError::io(&tmp, e);
        let Some(writer) = self.file.take() else {
            return Err(SourceError::format(&self.out, "writer already finished"));
        };
        let mut file = writer.into_inner().map_err(|e| io(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&header.encode()).map_err(io)?;
        // Data before name: a crash after the rename must not expose a file whose
        // blocks never reached the disk.
        file.sync_all().map_err(io)?;
        drop(file);
        fs::rename(&self.tmp, &self.out).map_err(|e| SourceError::io(&self.out, e))?;
        Ok(PackStats {
            records: self.count as usize,
            record_bytes: self.record_bytes,
            file_bytes,
        })
    }
}

impl Drop for PackedWriter {
    fn drop(&mut self) {
        // Still holding the file means `finish` never completed: discard the partial
        // pack. A failed removal leaves only a `.tmp-PID` name, never `OUT`.
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Copy every record of `src`, in order, with its label and the class list, into a
/// packed file at `out`. `progress(done, total)` is called after each record.
///
/// All records must share one [`RecordKind`] (the first record's); raw records keep
/// their shape.
pub fn pack_source(
    src: &dyn Source,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<PackStats, SourceError> {
    let total = src.len();
    if total == 0 {
        return Err(SourceError::format(
            out,
            "nothing to pack: the source is empty",
        ));
    }
    let mut buf = Vec::new();
    let layout = src.read(0, &mut buf)?;
    let mut writer = PackedWriter::create(out, layout, src.classes())?;
    for i in 0..total {
        let kind = if i == 0 {
            layout
        } else {
            src.read(i, &mut buf)?
        };
        if kind != layout {
            return Err(SourceError::Record {
                what: src.describe(i),
                reason: format!(
                    "record layout {} differs from the first record's {}; a packed file \
                     holds one layout",
                    layout_name(kind),
                    layout_name(layout)
                ),
            });
        }
        writer.append(&buf, src.label(i)).map_err(|e| match e {
            SourceError::Record { reason, .. } => SourceError::Record {
                what: src.describe(i),
                reason,
            },
            other => other,
        })?;
        progress(i + 1, total);
    }
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            count: 3,
            layout: RecordKind::Raw {
                width: 28,
                height: 28,
                channels: 1,
            },
            num_classes: 10,
            data_offset: HEADER_LEN as u64,
            data_len: 3 * 784,
            classes_offset: 128 + 3 * 784,
            classes_len: 50,
            classes_crc: 7,
            index_offset: 128 + 3 * 784 + 50,
            index_crc: 9,
        };
        let b = h.encode();
        let len = h.index_offset + 3 * ENTRY_LEN as u64;
        assert_eq!(Header::decode(&b, len), Ok(h));
        // One byte short of the index.
        let err = Header::decode(&b, len - 1).unwrap_err();
        assert_eq!(
            err,
            format!("truncated: index needs {len} bytes, file has {}", len - 1)
        );
    }

    #[test]
    fn header_damage_is_named() {
        assert!(Header::decode(b"JUNKJUNK", 8)
            .unwrap_err()
            .starts_with("bad magic"));
        assert!(Header::decode(b"STK", 3)
            .unwrap_err()
            .starts_with("truncated: header"));
        let mut b = Header {
            count: 0,
            layout: RecordKind::Encoded,
            num_classes: 1,
            data_offset: 128,
            data_len: 0,
            classes_offset: 128,
            classes_len: 0,
            classes_crc: 0,
            index_offset: 128,
            index_crc: 0,
        }
        .encode();
        b[40] ^= 1;
        assert!(Header::decode(&b, 200)
            .unwrap_err()
            .starts_with("header checksum mismatch"));
        b[8] = 2;
        assert!(Header::decode(&b, 200)
            .unwrap_err()
            .starts_with("unsupported version 2"));
    }

    #[test]
    fn class_table_round_trip_and_damage() {
        let names = vec!["cat".to_string(), "dög".to_string(), String::new()];
        let t = encode_classes(&names);
        assert_eq!(decode_classes(&t, 3).unwrap(), names);
        assert!(decode_classes(&t, 4).is_err());
        assert!(decode_classes(&t, 2).is_err());
        assert!(decode_classes(&t[..t.len() - 1], 3).is_err());
    }
}
