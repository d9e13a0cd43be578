//! Writing a packed file record by record, and packing any source into one.

use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::format::{
    encode_classes, layout_name, raw_len, Entry, FieldTable, Header, SampleRecord, HEADER_LEN,
    MAX_CLASS_NAME, VERSION, VERSION_FIELDS,
};
use crate::sample::{Annotation, Field, MaskData};
use crate::source::{RecordKind, Source, SourceError};

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
    /// Version 2: the fields the records carry (see [`PackedWriter::create_with_fields`]).
    fields: Option<FieldTable>,
    index: Vec<u8>,
    count: u64,
    pos: u64,
    record_bytes: u64,
    /// Set once the file has its final name: until then a drop removes it.
    renamed: bool,
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
        Self::create_any(out, layout, classes, None)
    }

    /// Start a version 2 pack to `out`, whose records carry the fields of `table` as
    /// well (appended with [`append_sample`](Self::append_sample)); without a class in
    /// them, `classes` may be empty.
    pub fn create_with_fields(
        out: &Path,
        classes: &[String],
        table: FieldTable,
    ) -> Result<Self, SourceError> {
        Self::create_any(out, RecordKind::Encoded, classes, Some(table))
    }

    fn create_any(
        out: &Path,
        layout: RecordKind,
        classes: &[String],
        fields: Option<FieldTable>,
    ) -> Result<Self, SourceError> {
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
        crate::durable::check_output(out).map_err(|e| SourceError::io(out, e))?;
        // What a killed earlier pack to `out` left (a full disk would fail again).
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = out.file_name().unwrap_or_default().to_string_lossy();
        crate::durable::remove_stale_temps(parent, &[&format!("{name}.tmp-")]);
        let tmp = temp_path(out);
        let file = File::create(&tmp).map_err(|e| SourceError::io(&tmp, e))?;
        let mut w = PackedWriter {
            out: out.to_path_buf(),
            tmp,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            layout,
            classes: classes.to_vec(),
            fields,
            index: Vec::new(),
            count: 0,
            pos: 0,
            record_bytes: 0,
            renamed: false,
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

    /// Append one record with its fields (a version 2 pack): the encoded image, the
    /// fields' JSON object and the mask's PNG bytes (empty: none).
    pub fn append_sample(
        &mut self,
        image: &[u8],
        json: &[u8],
        mask: &[u8],
        label: u32,
    ) -> Result<(), SourceError> {
        let what = || format!("{} record {}", self.out.display(), self.count);
        if self.fields.is_none() {
            return Err(SourceError::record(
                what(),
                "a sample with fields needs a pack made by create_with_fields",
            ));
        }
        let mut bytes = Vec::with_capacity(image.len() + json.len() + mask.len() + 8);
        SampleRecord { image, json, mask }
            .encode(&mut bytes)
            .map_err(|reason| SourceError::record(what(), reason))?;
        self.push(&bytes, label)
    }

    /// Append one record.
    pub fn append(&mut self, bytes: &[u8], label: u32) -> Result<(), SourceError> {
        if self.fields.is_some() {
            return Err(SourceError::record(
                format!("{} record {}", self.out.display(), self.count),
                "a pack with fields takes samples (append_sample)",
            ));
        }
        self.push(bytes, label)
    }

    fn push(&mut self, bytes: &[u8], label: u32) -> Result<(), SourceError> {
        let what = || format!("{} record {}", self.out.display(), self.count);
        // Without classes (a version 2 file of captions or masks) labels are all 0.
        let unlabelled = self.classes.is_empty() && self.fields.is_some() && label == 0;
        if label as usize >= self.classes.len() && !unlabelled {
            return Err(SourceError::record(
                what(),
                format!("label {label} but only {} classes", self.classes.len()),
            ));
        }
        if let Some(want) = raw_len(self.layout) {
            if bytes.len() as u64 != want {
                return Err(SourceError::record(
                    what(),
                    format!(
                        "{} bytes, the raw layout {} needs {want}",
                        bytes.len(),
                        layout_name(self.layout)
                    ),
                ));
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

    /// Whether no record has been appended yet.
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
        let (version, fields_offset, fields_len, fields_crc) = match &self.fields {
            None => (VERSION, 0, 0, 0),
            Some(t) => {
                let table = serde_json::to_vec(t).map_err(|e| {
                    SourceError::format(&self.out, format!("field table: {e}")).caused_by(e)
                })?;
                let at = self.pos;
                self.write_bytes(&table)?;
                (
                    VERSION_FIELDS,
                    at,
                    table.len() as u64,
                    crc32fast::hash(&table),
                )
            }
        };
        let header = Header {
            version,
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
            fields_offset,
            fields_len,
            fields_crc,
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
        self.renamed = true;
        crate::durable::sync_parent(&self.out).map_err(|e| SourceError::io(&self.out, e))?;
        Ok(PackStats {
            records: self.count as usize,
            record_bytes: self.record_bytes,
            file_bytes,
        })
    }
}

impl Drop for PackedWriter {
    fn drop(&mut self) {
        // Not renamed means `finish` never completed (an error at any step, a full
        // disk, a failed rename): discard the partial pack. A failed removal leaves
        // only a `.tmp-PID` name, never `OUT`, and the next pack removes it.
        drop(self.file.take());
        if !self.renamed {
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
    let fields = src.fields();
    if !fields.is_classification() {
        return pack_fields(src, out, progress);
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
            return Err(SourceError::record(
                src.describe(i),
                format!(
                    "record layout {} differs from the first record's {}; a packed file \
                     holds one layout",
                    layout_name(kind),
                    layout_name(layout)
                ),
            ));
        }
        writer.append(&buf, src.label(i)).map_err(|e| match e {
            SourceError::Record { reason, .. } => SourceError::record(src.describe(i), reason),
            other => other,
        })?;
        progress(i + 1, total);
    }
    writer.finish()
}

/// [`pack_source`] for a source with fields beyond image and class: a version 2 file.
fn pack_fields(
    src: &dyn Source,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<PackStats, SourceError> {
    let fields = src.fields();
    let schema = src.keypoint_schema();
    let table = FieldTable {
        fields: fields.iter().map(|f| f.name().to_string()).collect(),
        keypoint_names: schema.map(|s| s.names.clone()).unwrap_or_default(),
    };
    let k = schema.map_or(0, |s| s.len());
    let mut writer = PackedWriter::create_with_fields(out, src.classes(), table)?;
    let (mut buf, mut ann) = (Vec::new(), Annotation::default());
    let total = src.len();
    for i in 0..total {
        let record = |reason: String| SourceError::record(src.describe(i), reason);
        if src.read_sample(i, fields, &mut buf, &mut ann)? != RecordKind::Encoded {
            return Err(record(
                "raw pixels with fields: a packed file with fields holds encoded images".into(),
            ));
        }
        let mask = match ann.mask.take() {
            None => Vec::new(),
            Some(MaskData::Png(bytes)) => bytes,
            Some(MaskData::Raw {
                width,
                height,
                data,
            }) => crate::source::tar::grey_png(width, height, &data)
                .map_err(|w| w.record(src.describe(i)))?,
        };
        let json = crate::source::manifest::fields_json(None, &ann, k)
            .map_err(|w| w.record(src.describe(i)))?;
        let label = if fields.contains(Field::Class) {
            src.label(i)
        } else {
            0
        };
        writer
            .append_sample(&buf, &json, &mask, label)
            .map_err(|e| match e {
                SourceError::Record { reason, .. } => record(reason),
                other => other,
            })?;
        progress(i + 1, total);
    }
    writer.finish()
}
