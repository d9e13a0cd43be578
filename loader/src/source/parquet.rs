//! Parquet files (the Hugging Face Hub's layout) as an indexed source: the index comes
//! from the footers (row groups and their row counts) and the label column, read once
//! at open; a sample is read from its row group's image (and text) column chunks,
//! decoded once and cached while workers use it, under a memory bound
//! ([`ROW_GROUP_CACHE_BYTES`]). Row groups are shards, so the shard-aware sampler, the
//! shuffle buffer and resume work as they do for tar shards.
//!
//! Columns (`docs/parquet.md`): `image` is the `datasets` Image struct `{bytes, path}`
//! or plain binary; `label` an integer column, whose class names come from the
//! `huggingface` schema metadata (a ClassLabel feature) when present, else are the
//! numbers 0 to the largest; `text` (optional) a string column.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;

use super::{RecordKind, Source, SourceError};
use crate::sample::{Annotation, Field, Fields, MAX_CLASSES};

/// The most bytes of decoded row groups kept at once (beyond those workers still
/// hold): a row group of 1,000 photos of 100 kB is 100 MB.
pub const ROW_GROUP_CACHE_BYTES: usize = 512 << 20;

/// Which columns hold what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetColumns {
    pub image: String,
    /// `None`: no class (the column is used when present under its default name).
    pub label: Option<String>,
    pub text: Option<String>,
}

impl Default for ParquetColumns {
    fn default() -> Self {
        ParquetColumns {
            image: "image".into(),
            label: Some("label".into()),
            text: None,
        }
    }
}

/// A file read by positioned reads. parquet's own reader for `File` seeks a cloned
/// descriptor, whose offset every clone shares: two workers decoding two row groups of
/// one file at once would read each other's bytes.
#[derive(Clone)]
struct Pread(Arc<File>);

/// A reader from a position of a [`Pread`] file.
struct PreadAt {
    file: Arc<File>,
    pos: u64,
}

impl std::io::Read for PreadAt {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl parquet::file::reader::Length for Pread {
    fn len(&self) -> u64 {
        self.0.metadata().map_or(0, |m| m.len())
    }
}

impl parquet::file::reader::ChunkReader for Pread {
    type T = std::io::BufReader<PreadAt>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(std::io::BufReader::new(PreadAt {
            file: self.0.clone(),
            pos: start,
        }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; length];
        self.0.read_exact_at(&mut buf, start)?;
        Ok(buf.into())
    }
}

/// One file: its reader metadata and the root columns read for images (and text).
struct ParquetFile {
    path: PathBuf,
    file: Pread,
    meta: ArrowReaderMetadata,
    image_col: usize,
    text_col: Option<usize>,
}

/// A decoded row group: its image and text columns.
struct Group {
    images: ArrayRef,
    text: Option<ArrayRef>,
    bytes: usize,
}

type Slot = Arc<OnceLock<Result<Arc<Group>, String>>>;

/// Row groups decoded recently, least recently used first out past the bound.
#[derive(Default)]
struct Cache {
    slots: HashMap<(u32, u32), Slot>,
    /// Keys in order of use, oldest first.
    order: Vec<(u32, u32)>,
    bytes: usize,
}

/// A data set of Parquet files.
pub struct ParquetSource {
    what: String,
    files: Vec<ParquetFile>,
    /// Per sample: (file, row group, row within it).
    rows: Vec<(u32, u32, u32)>,
    /// Sample ranges of each row group, in order (the shards).
    ranges: Vec<Range<usize>>,
    labels: Vec<u32>,
    classes: Vec<String>,
    fields: Fields,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for ParquetSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetSource")
            .field("what", &self.what)
            .field("files", &self.files.len())
            .field("samples", &self.rows.len())
            .finish()
    }
}

/// True for a file name that is a Parquet file.
pub fn is_parquet_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".parquet")
}

/// The Parquet files of a folder, sorted (none: not a folder of Parquet files).
pub fn parquet_files_in(dir: &Path) -> Result<Option<Vec<PathBuf>>, SourceError> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| SourceError::io(dir, e))? {
        let e = e.map_err(|e| SourceError::io(dir, e))?;
        let p = e.path();
        if p.is_file() && is_parquet_name(&e.file_name().to_string_lossy()) {
            out.push(p);
        }
    }
    out.sort();
    Ok((!out.is_empty()).then_some(out))
}

/// The class names of `column` in the `huggingface` schema metadata (a ClassLabel).
fn hf_class_names(hf: Option<&String>, column: &str) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(hf?).ok()?;
    let feature = v.get("info")?.get("features")?.get(column)?;
    let names = feature.get("names")?.as_array()?;
    names.iter().map(|n| n.as_str().map(String::from)).collect()
}

/// The values of an integer column (null: `None`).
fn int_values(a: &dyn Array) -> Result<Vec<Option<i64>>, String> {
    macro_rules! ints {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .iter()
                .map(|v| v.map(|x| x as i64))
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => a
            .as_primitive::<UInt64Type>()
            .iter()
            .map(|v| v.map(|x| i64::try_from(x).unwrap_or(i64::MAX)))
            .collect(),
        other => return Err(format!("is {other}, not an integer column")),
    })
}

/// The bytes of row `row` of an image column: the Image struct's `bytes`, or binary.
fn image_bytes(col: &ArrayRef, row: usize) -> Result<&[u8], String> {
    if col.is_null(row) {
        return Err("the image cell is null".into());
    }
    let data: &dyn Array = match col.data_type() {
        DataType::Struct(_) => col
            .as_struct()
            .column_by_name("bytes")
            .ok_or("the image struct has no \"bytes\" field")?
            .as_ref(),
        _ => col.as_ref(),
    };
    if data.is_null(row) {
        return Err("the image's bytes are null (an image by path is not read yet)".into());
    }
    match data.data_type() {
        DataType::Binary => Ok(data.as_binary::<i32>().value(row)),
        DataType::LargeBinary => Ok(data.as_binary::<i64>().value(row)),
        DataType::BinaryView => Ok(data.as_binary_view().value(row)),
        other => Err(format!("the image column holds {other}, not image bytes")),
    }
}

/// Whether `t` can hold images: binary, or a struct with binary `bytes`.
fn is_image_type(t: &DataType) -> bool {
    match t {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => true,
        DataType::Struct(fields) => fields.iter().any(|f| {
            f.name() == "bytes" && is_image_type(f.data_type()) && !f.data_type().is_nested()
        }),
        _ => false,
    }
}

fn text_value(col: &ArrayRef, row: usize) -> Option<String> {
    if col.is_null(row) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 => Some(col.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Some(col.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => Some(col.as_string_view().value(row).to_string()),
        _ => None,
    }
}

impl ParquetSource {
    /// Opens `paths` (one or more Parquet files, in order) with `columns`; `what` names
    /// the data set in messages.
    pub fn open(
        paths: &[PathBuf],
        columns: &ParquetColumns,
        what: &str,
    ) -> Result<ParquetSource, SourceError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut rows = Vec::new();
        let mut ranges = Vec::new();
        let mut raw_labels: Vec<Option<i64>> = Vec::new();
        let mut hf_names = None;
        let mut has_label = None::<bool>;
        for (fi, path) in paths.iter().enumerate() {
            let bad = |r: String| SourceError::format(path, r);
            let file = Pread(Arc::new(super::open_regular(path)?));
            let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
                .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
            let schema = meta.schema().clone();
            let col = |name: &str| schema.index_of(name).ok();
            let names = || {
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let image_col = col(&columns.image).ok_or_else(|| {
                bad(format!(
                    "no image column '{}' (the columns: {}; pick one with image_column=)",
                    columns.image,
                    names()
                ))
            })?;
            if !is_image_type(schema.field(image_col).data_type()) {
                return Err(bad(format!(
                    "column '{}' is {}, not images (binary, or the datasets Image struct \
                     {{bytes, path}})",
                    columns.image,
                    schema.field(image_col).data_type()
                )));
            }
            let text_col = match &columns.text {
                None => None,
                Some(t) => {
                    let i = col(t).ok_or_else(|| {
                        bad(format!("no text column '{t}' (the columns: {})", names()))
                    })?;
                    if !matches!(
                        schema.field(i).data_type(),
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                    ) {
                        return Err(bad(format!(
                            "column '{t}' is {}, not text",
                            schema.field(i).data_type()
                        )));
                    }
                    Some(i)
                }
            };
            let label_col = columns
                .label
                .as_deref()
                .and_then(|l| col(l).map(|i| (l, i)));
            match (has_label, label_col.is_some()) {
                (Some(a), b) if a != b => {
                    return Err(bad("some files have the label column and others not".into()))
                }
                _ => has_label = Some(label_col.is_some()),
            }
            if let Some((name, _)) = label_col {
                if hf_names.is_none() {
                    hf_names = hf_class_names(schema.metadata().get("huggingface"), name);
                }
            }
            let md = meta.metadata().clone();
            let labels = match label_col {
                None => None,
                Some((name, i)) => {
                    let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), [i]);
                    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                        file.clone(),
                        meta.clone(),
                    )
                    .with_projection(mask)
                    .build()
                    .map_err(|e| bad(format!("reading column '{name}': {e}")))?;
                    let mut v = Vec::new();
                    for b in reader {
                        let b = b.map_err(|e| bad(format!("reading column '{name}': {e}")))?;
                        v.extend(
                            int_values(b.column(0).as_ref())
                                .map_err(|r| bad(format!("column '{name}' {r}")))?,
                        );
                    }
                    Some(v)
                }
            };
            let mut at = 0usize;
            for (g, rg) in md.row_groups().iter().enumerate() {
                let n = usize::try_from(rg.num_rows()).unwrap_or(0);
                let start = rows.len();
                for r in 0..n {
                    rows.push((fi as u32, g as u32, r as u32));
                }
                if let Some(l) = &labels {
                    raw_labels.extend(l.get(at..at + n).into_iter().flatten().copied());
                }
                at += n;
                // An empty row group is no shard (the sampler takes no empty ones).
                if n > 0 {
                    ranges.push(start..rows.len());
                }
            }
            if labels.as_ref().is_some_and(|l| l.len() != at) {
                return Err(bad("the label column's length is not the row count".into()));
            }
            files.push(ParquetFile {
                path: path.clone(),
                file,
                meta,
                image_col,
                text_col,
            });
        }
        if rows.is_empty() {
            return Err(SourceError::format(Path::new(what), "no rows"));
        }
        // Labels: the class list, then each row's (a null or negative label names the
        // row).
        let mut labels = Vec::with_capacity(raw_labels.len());
        let mut classes = hf_names.unwrap_or_default();
        if has_label == Some(true) {
            let mut max = 0i64;
            for (i, l) in raw_labels.iter().enumerate() {
                let (fi, g, r) = rows[i];
                let at = || {
                    format!(
                        "{} row group {g} row {r}",
                        files[fi as usize].path.display()
                    )
                };
                let v = l.ok_or_else(|| SourceError::Record {
                    what: at(),
                    reason: "the label is null".into(),
                })?;
                if v < 0 || v as u64 >= MAX_CLASSES as u64 {
                    return Err(SourceError::Record {
                        what: at(),
                        reason: format!("label {v} is not a class number below {MAX_CLASSES}"),
                    });
                }
                max = max.max(v);
                labels.push(v as u32);
            }
            if classes.is_empty() {
                classes = (0..=max).map(|c| c.to_string()).collect();
            } else if max as usize >= classes.len() {
                return Err(SourceError::format(
                    Path::new(what),
                    format!(
                        "a label is {max}, but the metadata names {} classes",
                        classes.len()
                    ),
                ));
            }
        } else {
            labels = vec![0; rows.len()];
        }
        let mut fields = Fields::of(&[Field::Image]);
        if has_label == Some(true) {
            fields = fields.with(Field::Class);
        }
        if columns.text.is_some() {
            fields = fields.with(Field::Text);
        }
        Ok(ParquetSource {
            what: what.to_string(),
            files,
            rows,
            ranges,
            labels,
            classes,
            fields,
            cache: Mutex::new(Cache::default()),
        })
    }

    fn locate(&self, index: usize) -> Result<(u32, u32, u32), SourceError> {
        self.rows
            .get(index)
            .copied()
            .ok_or_else(|| SourceError::Record {
                what: format!("{} sample {index}", self.what),
                reason: format!("index out of range (the files hold {})", self.rows.len()),
            })
    }

    /// Row group `g` of file `f`, decoded (once, whoever asks first).
    fn group(&self, f: u32, g: u32) -> Result<Arc<Group>, String> {
        let slot = {
            let mut c = self
                .cache
                .lock()
                .map_err(|_| "the row group cache is poisoned")?;
            let slot = c.slots.entry((f, g)).or_default().clone();
            c.order.retain(|k| *k != (f, g));
            c.order.push((f, g));
            slot
        };
        let mut fresh = false;
        let out = slot
            .get_or_init(|| {
                fresh = true;
                self.decode(f, g).map(Arc::new)
            })
            .clone();
        match &out {
            Ok(group) if fresh => {
                let mut c = self
                    .cache
                    .lock()
                    .map_err(|_| "the row group cache is poisoned")?;
                c.bytes += group.bytes;
                // The oldest out past the bound (a worker still reading one keeps it
                // alive through its Arc until it is done).
                while c.bytes > ROW_GROUP_CACHE_BYTES && c.order.len() > 1 {
                    let old = c.order.remove(0);
                    if let Some(Some(Ok(g))) = c.slots.remove(&old).map(|s| s.get().cloned()) {
                        c.bytes = c.bytes.saturating_sub(g.bytes);
                    }
                }
            }
            // A failed decode is not kept: the next read of the group tries again.
            Err(_) if fresh => {
                if let Ok(mut c) = self.cache.lock() {
                    c.slots.remove(&(f, g));
                    c.order.retain(|k| *k != (f, g));
                }
            }
            _ => {}
        }
        out
    }

    fn decode(&self, f: u32, g: u32) -> Result<Group, String> {
        let pf = &self.files[f as usize];
        let md = pf.meta.metadata();
        let rows = usize::try_from(md.row_group(g as usize).num_rows()).unwrap_or(0);
        let mut roots = vec![pf.image_col];
        roots.extend(pf.text_col);
        let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), roots);
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(pf.file.clone(), pf.meta.clone())
                .with_projection(mask)
                .with_row_groups(vec![g as usize])
                .with_batch_size(rows.max(1))
                .build()
                .map_err(|e| e.to_string())?;
        let batches: Vec<RecordBatch> = reader
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        // The batch size is the group's row count: one batch, else the rows would be
        // mis-indexed.
        let [batch] = <[RecordBatch; 1]>::try_from(batches)
            .map_err(|b| format!("the row group came as {} batches, not one", b.len()))?;
        let images = batch.column(0).clone();
        let text = pf.text_col.map(|_| batch.column(1).clone());
        let bytes =
            images.get_array_memory_size() + text.as_ref().map_or(0, |t| t.get_array_memory_size());
        Ok(Group {
            images,
            text,
            bytes,
        })
    }
}

impl Source for ParquetSource {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        self.labels.get(index).copied().unwrap_or(0)
    }

    fn describe(&self, index: usize) -> String {
        match self.rows.get(index) {
            Some(&(f, g, r)) => format!(
                "{} row group {g} row {r}",
                self.files[f as usize].path.display()
            ),
            None => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let (f, g, r) = self.locate(index)?;
        let err = |reason: String| SourceError::Record {
            what: self.describe(index),
            reason,
        };
        let group = self
            .group(f, g)
            .map_err(|r| err(format!("reading the row group: {r}")))?;
        let bytes = image_bytes(&group.images, r as usize).map_err(err)?;
        if bytes.is_empty() {
            return Err(err("the image's bytes are empty".into()));
        }
        buf.extend_from_slice(bytes);
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "parquet"
    }

    fn shards(&self) -> Option<&[Range<usize>]> {
        Some(&self.ranges)
    }

    fn fields(&self) -> Fields {
        self.fields
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        ann.clear();
        let kind = self.read(index, buf)?;
        if wanted.contains(Field::Text) {
            let (f, g, r) = self.locate(index)?;
            let group = self.group(f, g).map_err(|reason| SourceError::Record {
                what: self.describe(index),
                reason,
            })?;
            ann.text = group.text.as_ref().and_then(|t| text_value(t, r as usize));
            if ann.text.is_none() {
                return Err(SourceError::Record {
                    what: self.describe(index),
                    reason: "the text cell is null".into(),
                });
            }
        }
        Ok(kind)
    }
}
