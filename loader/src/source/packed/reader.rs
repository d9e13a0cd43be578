//! Reading a packed file: open and check it whole, then hand out records by index.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::format::{
    decode_classes, layout_name, raw_len, Entry, FieldTable, Header, SampleRecord, ShapedRecord,
    ENTRY_LEN, HEADER_LEN, SHAPE_LEN,
};
use crate::sample::{Annotation, Field, Fields, KeypointSchema, MaskData};
use crate::source::{read_at, RecordKind, Source, SourceError};

/// What opening a file checked: its header, index, class names and fields.
type Checked = (Header, Vec<u8>, Vec<String>, Option<SampleFields>);

/// What a version 2 file's records carry beyond image and class.
#[derive(Debug)]
struct SampleFields {
    fields: Fields,
    schema: KeypointSchema,
}

/// Where record bytes come from.
enum Records {
    /// Positioned reads with length checks: a file that shrinks while open gives an
    /// error naming the record, never a fault.
    File(File),
    /// A read-only memory map: no system call per record, but a file truncated while
    /// mapped kills the process with SIGBUS. Only for files known not to change.
    Map(Mmap),
    /// Ranged GETs of a remote object (see `crate::storage`).
    #[cfg(feature = "remote")]
    Remote(crate::storage::Object),
}

/// A packed file opened for random access. The header, index and class table are
/// checked whole at open and kept in memory (24 bytes per record); record bytes are
/// read on demand with positioned reads ([`open`](Self::open)) or through a memory
/// map ([`open_mapped`](Self::open_mapped)).
pub struct PackedReader {
    path: PathBuf,
    records: Records,
    header: Header,
    index: Vec<u8>,
    classes: Vec<String>,
    /// Version 2 files: each record is a [`SampleRecord`] with these fields.
    fields: Option<SampleFields>,
}

impl std::fmt::Debug for PackedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedReader")
            .field("path", &self.path)
            .field("records", &self.header.count)
            .field("layout", &self.header.layout)
            .field("classes", &self.classes)
            .field("mapped", &matches!(self.records, Records::Map(_)))
            .field("remote", &self.is_remote())
            .finish()
    }
}

impl PackedReader {
    /// Open `path` for positioned reads and check it whole (see the module docs).
    /// Every damage found is a [`SourceError::Format`] naming the file and what is
    /// wrong; a file that later shrinks under the reader gives record errors.
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let file = crate::source::open_regular(path)?;
        let file_len = file.metadata().map_err(|e| SourceError::io(path, e))?.len();
        let region = |offset: u64, len: u64, what: &str| -> Result<Vec<u8>, SourceError> {
            let n = usize::try_from(len)
                .map_err(|_| SourceError::format(path, format!("{what} is too large")))?;
            let mut buf = vec![0u8; n];
            match read_at(&file, &mut buf, offset) {
                Ok(true) => Ok(buf),
                Ok(false) => Err(SourceError::format(
                    path,
                    format!("{what} lies outside the file (it shrank while being opened?)"),
                )),
                Err(e) => Err(SourceError::io(path, e)),
            }
        };
        let (header, index, classes, fields) = Self::check(path, file_len, region)?;
        Ok(PackedReader {
            path: path.to_path_buf(),
            records: Records::File(file),
            header,
            index,
            classes,
            fields,
        })
    }

    /// Open `path` through a read-only memory map, checked as [`open`](Self::open)
    /// does. Faster per record on a warm page cache, but if the file is truncated while
    /// mapped, the next read of a lost page kills the process (SIGBUS): use it only
    /// for files nothing rewrites in place.
    pub fn open_mapped(path: &Path) -> Result<Self, SourceError> {
        let file = crate::source::open_regular(path)?;
        let file_len = file.metadata().map_err(|e| SourceError::io(path, e))?.len();
        if file_len == 0 {
            return Err(SourceError::format(path, "empty file"));
        }
        // SAFETY: the map is read-only and every access is bounds-checked against its
        // length; truncation by another process is the documented risk of this mode.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| SourceError::io(path, e))?;
        let region = |offset: u64, len: u64, what: &str| -> Result<Vec<u8>, SourceError> {
            let start = usize::try_from(offset).ok();
            let end = usize::try_from(offset.saturating_add(len)).ok();
            start
                .zip(end)
                .and_then(|(s, e)| map.get(s..e))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| SourceError::format(path, format!("{what} lies outside the file")))
        };
        let (header, index, classes, fields) = Self::check(path, map.len() as u64, region)?;
        Ok(PackedReader {
            path: path.to_path_buf(),
            records: Records::Map(map),
            header,
            index,
            classes,
            fields,
        })
    }

    /// Open the remote packed file `object`: its header, index and class table come
    /// by three ranged GETs and are checked as [`open`](Self::open) does; records are
    /// then read by ranged GETs. Messages name the object's URL.
    #[cfg(feature = "remote")]
    pub fn open_remote(object: crate::storage::Object) -> Result<Self, SourceError> {
        let url = object.url();
        let path = PathBuf::from(&url);
        let region = |offset: u64, len: u64, what: &str| -> Result<Vec<u8>, SourceError> {
            let end = offset
                .checked_add(len)
                .ok_or_else(|| SourceError::format(&path, format!("{what} is too large")))?;
            let obj = object.clone();
            let bytes = crate::storage::wait(async move { obj.get_range(offset..end).await })??;
            Ok(bytes.to_vec())
        };
        let (header, index, classes, fields) = Self::check(&path, object.size, region)?;
        Ok(PackedReader {
            path,
            records: Records::Remote(object),
            header,
            index,
            classes,
            fields,
        })
    }

    /// Reads and checks the header, index and class table through `region(offset,
    /// len, what)`.
    fn check(
        path: &Path,
        file_len: u64,
        region: impl Fn(u64, u64, &str) -> Result<Vec<u8>, SourceError>,
    ) -> Result<Checked, SourceError> {
        if file_len == 0 {
            return Err(SourceError::format(path, "empty file"));
        }
        let bad = |reason: String| SourceError::format(path, reason);
        let header_bytes = region(0, file_len.min(HEADER_LEN as u64), "header")?;
        let header = Header::decode(&header_bytes, file_len).map_err(bad)?;
        // Header::decode checked that every region lies inside the file, so the index
        // below is at most the file's size.
        let count = usize::try_from(header.count)
            .map_err(|_| bad(format!("{} records do not fit in memory", header.count)))?;
        let index_len = (count as u64)
            .checked_mul(ENTRY_LEN as u64)
            .ok_or_else(|| bad(format!("an index of {count} records overflows")))?;
        let index = region(header.index_offset, index_len, "index")?;
        let data_end = header.data_offset + header.data_len;
        for (i, raw) in index.chunks_exact(ENTRY_LEN).enumerate() {
            let e = Entry::decode(raw).ok_or_else(|| bad(format!("record {i}: short entry")))?;
            let end = e.offset.saturating_add(e.len);
            if end > file_len {
                return Err(bad(format!(
                    "record {i} extends past end of file (offset {}, length {}, file has {file_len} bytes)",
                    e.offset, e.len,
                )));
            }
            if e.offset < header.data_offset || end > data_end {
                return Err(bad(format!(
                    "record {i} (bytes {}..{end}) lies outside the record data (bytes {}..{data_end})",
                    e.offset, header.data_offset
                )));
            }
            if e.label >= header.num_classes && !(header.num_classes == 0 && e.label == 0) {
                return Err(bad(format!(
                    "record {i} has label {}, but the file lists {} classes",
                    e.label, header.num_classes
                )));
            }
            if header.shaped && !header.has_fields() && e.len < SHAPE_LEN as u64 {
                return Err(bad(format!(
                    "record {i} has {} bytes, shorter than the {SHAPE_LEN}-byte shape a raw \
                     record starts with",
                    e.len
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
        let computed = crc32fast::hash(&index);
        if computed != header.index_crc {
            return Err(bad(format!(
                "index checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.index_crc
            )));
        }
        let table = region(header.classes_offset, header.classes_len, "class table")?;
        let computed = crc32fast::hash(&table);
        if computed != header.classes_crc {
            return Err(bad(format!(
                "class table checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                header.classes_crc
            )));
        }
        let classes = decode_classes(&table, header.num_classes).map_err(bad)?;
        let fields = if header.has_fields() {
            let table = region(header.fields_offset, header.fields_len, "field table")?;
            let computed = crc32fast::hash(&table);
            if computed != header.fields_crc {
                return Err(bad(format!(
                    "field table checksum mismatch (stored {:#010x}, computed {computed:#010x})",
                    header.fields_crc
                )));
            }
            let t: FieldTable = serde_json::from_slice(&table)
                .map_err(|e| bad(format!("field table: {e}")).caused_by(e))?;
            let mut fields = Fields::NONE;
            for name in &t.fields {
                let f = name.parse::<Field>().map_err(|e| {
                    // The name is the file's: its control characters are escaped.
                    let text = crate::report::printable(&e.to_string());
                    bad(format!("field table: {text}")).caused_by(e)
                })?;
                fields = fields.with(f);
            }
            if header.num_classes == 0 && fields.contains(Field::Class) {
                return Err(bad(
                    "the records have classes but the file lists none".into()
                ));
            }
            Some(SampleFields {
                fields: fields.with(Field::Image),
                schema: KeypointSchema::from_names(t.keypoint_names),
            })
        } else {
            None
        };
        Ok((header, index, classes, fields))
    }

    /// The file this reader reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record layout shared by every record of the file ([`RecordKind::Encoded`]
    /// for a version 3 file, whose records each say their shape: see
    /// [`is_shaped`](Self::is_shaped)).
    pub fn layout(&self) -> RecordKind {
        self.header.layout
    }

    /// Whether each record is raw pixels after its own shape (a version 3 file).
    pub fn is_shaped(&self) -> bool {
        self.header.shaped
    }

    /// The format version of the file (1, 2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Sum of all records' lengths.
    pub fn record_bytes(&self) -> u64 {
        (0..self.len())
            .filter_map(|i| self.entry(i))
            .map(|e| e.len)
            .sum()
    }

    /// Whether record bytes come through a memory map.
    pub fn is_mapped(&self) -> bool {
        matches!(self.records, Records::Map(_))
    }

    /// Whether records come by ranged GETs from a remote object.
    pub fn is_remote(&self) -> bool {
        #[cfg(feature = "remote")]
        if matches!(self.records, Records::Remote(_)) {
            return true;
        }
        false
    }

    /// The entry of record `index` and its length as a buffer size.
    fn located(&self, index: usize) -> Result<(Entry, usize), SourceError> {
        let e = self.entry(index).ok_or_else(|| {
            self.record_error(
                index,
                format!("index out of range (the file holds {})", self.len()),
            )
        })?;
        let len = usize::try_from(e.len).map_err(|_| {
            self.record_error(
                index,
                format!(
                    "bytes {}..{} are too large",
                    e.offset,
                    e.offset.saturating_add(e.len)
                ),
            )
        })?;
        Ok((e, len))
    }

    /// Checks the record's CRC-32 once its bytes are in `buf`.
    fn verified(
        &self,
        index: usize,
        e: &Entry,
        buf: &mut Vec<u8>,
    ) -> Result<RecordKind, SourceError> {
        let computed = crc32fast::hash(buf);
        if computed != e.crc {
            buf.clear();
            return Err(self.record_error(
                index,
                format!(
                    "checksum mismatch (stored {:#010x}, computed {computed:#010x}): the file is damaged",
                    e.crc
                ),
            ));
        }
        Ok(self.header.layout)
    }

    fn entry(&self, index: usize) -> Option<Entry> {
        let at = index.checked_mul(ENTRY_LEN)?;
        Entry::decode(self.index.get(at..at.checked_add(ENTRY_LEN)?)?)
    }

    fn record_error(&self, index: usize, reason: String) -> SourceError {
        SourceError::record(self.describe(index), reason)
    }

    /// Reads and checks record `index` whole (for a version 2 file, the sample record).
    fn read_record(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let (e, len) = self.located(index)?;
        let what = || format!("bytes {}..{}", e.offset, e.offset.saturating_add(e.len));
        match &self.records {
            Records::File(file) => {
                buf.resize(len, 0);
                match read_at(file, buf, e.offset) {
                    Ok(true) => {}
                    Ok(false) => {
                        buf.clear();
                        return Err(self.record_error(
                            index,
                            format!(
                                "the file ends before {} (it was truncated or replaced after it \
                                 was opened)",
                                what()
                            ),
                        ));
                    }
                    Err(err) => {
                        buf.clear();
                        return Err(self
                            .record_error(index, format!("reading {}: {err}", what()))
                            .caused_by(err));
                    }
                }
            }
            Records::Map(map) => {
                // Checked at open; checked again so that no entry can slice past the end.
                let bytes = usize::try_from(e.offset)
                    .ok()
                    .zip(usize::try_from(e.offset.saturating_add(e.len)).ok())
                    .and_then(|(s, end)| map.get(s..end))
                    .ok_or_else(|| self.record_error(index, "extends past end of file".into()))?;
                buf.extend_from_slice(bytes);
            }
            #[cfg(feature = "remote")]
            Records::Remote(obj) => {
                let obj = obj.clone();
                let mut owned = std::mem::take(buf);
                let (r, owned) = crate::storage::wait(async move {
                    let r = crate::storage::read_into(
                        &obj,
                        None,
                        e.offset..e.offset + e.len,
                        &mut owned,
                    )
                    .await;
                    (r, owned)
                })?;
                *buf = owned;
                r?;
            }
        }
        self.verified(index, &e, buf)
    }

    /// Leaves only the image of the record in `buf` (of a version 2 or 3 file's
    /// sample record; in a version 3 file its pixels, after the shape) and returns
    /// its kind.
    fn image_only(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        if self.fields.is_some() {
            let n = SampleRecord::decode(buf)
                .map_err(|r| self.record_error(index, r))?
                .image
                .len();
            buf.drain(..4);
            buf.truncate(n);
        }
        if !self.header.shaped {
            return Ok(self.header.layout);
        }
        let kind = ShapedRecord::decode(buf).map_err(|r| self.record_error(index, r))?;
        buf.drain(..SHAPE_LEN);
        Ok(kind)
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
        self.read_record(index, buf)?;
        self.image_only(index, buf)
    }

    fn fields(&self) -> Fields {
        self.fields
            .as_ref()
            .map_or(Fields::CLASSIFICATION, |f| f.fields)
    }

    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        self.fields
            .as_ref()
            .map(|f| &f.schema)
            .filter(|s| !s.is_empty())
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        ann.clear();
        let Some(f) = &self.fields else {
            return self.read(index, buf);
        };
        self.read_record(index, buf)?;
        let rec = SampleRecord::decode(buf).map_err(|r| self.record_error(index, r))?;
        let mut k = None;
        let (_, mut a, _) = crate::source::manifest::parse_fields_json(rec.json, &mut k)
            .map_err(|w| w.record(self.describe(index)))?;
        if wanted.contains(Field::Masks) && f.fields.contains(Field::Masks) {
            a.masks = crate::source::manifest::instance_masks_json(rec.json)
                .map_err(|w| w.record(self.describe(index)))?;
        }
        let want = |x: Field| wanted.contains(x) && f.fields.contains(x);
        ann.take_wanted(a, wanted.intersect(f.fields));
        if want(Field::Text) && ann.text.is_none() {
            return Err(self.record_error(index, "no caption (other records have one)".into()));
        }
        if want(Field::Mask) {
            if rec.mask.is_empty() {
                return Err(self.record_error(index, "no mask (other records have one)".into()));
            }
            ann.mask = Some(MaskData::Png(rec.mask.to_vec()));
        }
        self.image_only(index, buf)
    }

    fn read_async(
        self: std::sync::Arc<Self>,
        index: usize,
        buf: Vec<u8>,
    ) -> crate::source::ReadFuture {
        #[cfg(feature = "remote")]
        if let Records::Remote(obj) = &self.records {
            let obj = obj.clone();
            return Box::pin(async move {
                let (e, _) = match self.located(index) {
                    Ok(x) => x,
                    Err(err) => return (Err(err), buf),
                };
                let mut buf = buf;
                let task = crate::storage::spawn(async move {
                    let r =
                        crate::storage::read_into(&obj, None, e.offset..e.offset + e.len, &mut buf)
                            .await;
                    (r, buf)
                });
                match task.await {
                    Ok((Ok(()), mut buf)) => {
                        let out = self
                            .verified(index, &e, &mut buf)
                            .and_then(|_| self.image_only(index, &mut buf));
                        (out, buf)
                    }
                    Ok((Err(err), buf)) => (Err(err.into()), buf),
                    Err(err) => (Err(err.into()), Vec::new()),
                }
            });
        }
        crate::source::read_blocking(self, index, buf)
    }

    fn format(&self) -> &'static str {
        "packed"
    }

    fn layout(&self) -> Vec<String> {
        let records = if self.header.shaped {
            "raw u8 pixels, a shape per record".to_string()
        } else {
            match self.header.layout {
                RecordKind::Encoded => "encoded images (JPEG, PNG)".to_string(),
                raw => format!("raw u8 pixels, {} each", layout_name(raw)),
            }
        };
        vec![format!(
            "  packed version {}: {records}",
            self.header.version
        )]
    }
}
