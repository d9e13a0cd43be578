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
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;

use super::{RecordKind, Source, SourceError, Why};
use crate::report::printable;
use crate::sample::{Annotation, Field, Fields, MaskData, MAX_CLASSES};

mod backing;
mod cells;
mod fields;
#[cfg(feature = "remote")]
mod remote;

use backing::{chunk_ranges, read_column, Backing, Pread};
use cells::{image_cell, int_values, is_image_type, text_value, ImageCell};

pub use fields::BoxFormat;
use fields::{ColumnPath, Kind};

/// The most bytes of decoded row groups kept at once (beyond those workers still
/// hold): a row group of 1,000 photos of 100 kB is 100 MB.
pub const ROW_GROUP_CACHE_BYTES: usize = 512 << 20;

/// The label column's name by default, which a set without classes may lack.
const DEFAULT_LABEL: &str = "label";

/// Which columns hold what. The field columns are dotted paths into struct columns
/// (`objects.bbox`), as the `datasets` library stores a `Sequence` of dicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetColumns {
    /// The image column: the `datasets` Image struct `{bytes, path}` or plain binary
    /// (default `image`). Empty: no image column, for text only (the token loader).
    pub image: String,
    /// `None`: no class. The default name, `label`, is used when the files have such
    /// a column; any other name must be a column of every file.
    pub label: Option<String>,
    /// The caption column, a string column (default: none).
    pub text: Option<String>,
    /// Boxes: `list<list<number>>`, four numbers each in `box_format`.
    pub boxes: Option<String>,
    /// How each box's four numbers are ordered (default [`BoxFormat::Xyxy`]).
    pub box_format: BoxFormat,
    /// One class number per box: `list<integer>` (each box's class 0 without it).
    pub box_classes: Option<String>,
    /// Multi-label tags: `list<integer>`.
    pub labels: Option<String>,
    /// Segmentation masks: PNG images as the image column holds images.
    pub mask: Option<String>,
}

impl Default for ParquetColumns {
    fn default() -> Self {
        ParquetColumns {
            image: "image".into(),
            label: Some(DEFAULT_LABEL.into()),
            text: None,
            boxes: None,
            box_format: BoxFormat::Xyxy,
            box_classes: None,
            labels: None,
            mask: None,
        }
    }
}

/// The field columns of one file, resolved against its schema.
#[derive(Clone, Debug, Default)]
struct FieldColumns {
    boxes: Option<ColumnPath>,
    box_classes: Option<ColumnPath>,
    labels: Option<ColumnPath>,
    mask: Option<ColumnPath>,
}

impl FieldColumns {
    fn resolve(schema: &arrow_schema::Schema, c: &ParquetColumns) -> Result<Self, String> {
        let get = |name: &Option<String>, kind| {
            name.as_deref()
                .map(|n| ColumnPath::resolve(schema, n, kind))
                .transpose()
        };
        let out = FieldColumns {
            boxes: get(&c.boxes, Kind::Boxes)?,
            box_classes: get(&c.box_classes, Kind::Ints)?,
            labels: get(&c.labels, Kind::Ints)?,
            mask: get(&c.mask, Kind::Mask)?,
        };
        if out.box_classes.is_some() && out.boxes.is_none() {
            return Err("box classes without a boxes column (give boxes_column=)".into());
        }
        Ok(out)
    }

    fn all(&self) -> impl Iterator<Item = &ColumnPath> {
        [&self.boxes, &self.box_classes, &self.labels, &self.mask]
            .into_iter()
            .flatten()
    }
}

/// One file: its reader metadata and the root columns read for images (and text and
/// fields).
struct ParquetFile {
    file: Backing,
    meta: ArrowReaderMetadata,
    /// `None` for text only (an empty image column name).
    image_col: Option<usize>,
    text_col: Option<usize>,
    fields: FieldColumns,
}

/// A decoded row group: its image, text and field columns.
struct Group {
    images: Option<ArrayRef>,
    text: Option<ArrayRef>,
    boxes: Option<ArrayRef>,
    box_classes: Option<ArrayRef>,
    labels: Option<ArrayRef>,
    mask: Option<ArrayRef>,
    bytes: usize,
}

/// A row group's decode, once: the group, or the reason it failed (the error under
/// the reason goes to the reader that decoded, see [`ParquetSource::group`]).
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
    box_format: BoxFormat,
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

/// A class list in a message: its first names, and how many there are.
fn preview(names: &[String]) -> String {
    const SHOWN: usize = 4;
    let head = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>();
    if names.len() > SHOWN {
        format!("{}, ... {} in all", head.join(", "), names.len())
    } else {
        head.join(", ")
    }
}

/// The class names of `column` in the `huggingface` schema metadata (a ClassLabel).
fn hf_class_names(hf: Option<&String>, column: &str) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(hf?).ok()?;
    let feature = v.get("info")?.get("features")?.get(column)?;
    let names = feature.get("names")?.as_array()?;
    names.iter().map(|n| n.as_str().map(String::from)).collect()
}

/// How many bytes at the end of a file are read first for its footer: most footers fit,
/// and a remote file's then costs one GET.
const FOOTER_GUESS: u64 = 64 << 10;

impl ParquetSource {
    /// Opens `paths` (one or more Parquet files, in order) with `columns`; `what` names
    /// the data set in messages.
    pub fn open(
        paths: &[PathBuf],
        columns: &ParquetColumns,
        what: &str,
    ) -> Result<ParquetSource, SourceError> {
        let files = paths
            .iter()
            .map(|p| {
                Ok(Backing::Local(
                    p.clone(),
                    Pread(Arc::new(super::open_regular(p)?)),
                ))
            })
            .collect::<Result<Vec<_>, SourceError>>()?;
        Self::open_files(files, columns, what)
    }

    /// Opens remote Parquet files (objects listed or HEADed already), read by ranged
    /// GETs: the footers at open, then each row group's column chunks when a sample of
    /// it is first read.
    #[cfg(feature = "remote")]
    pub fn open_remote(
        objects: Vec<crate::storage::Object>,
        columns: &ParquetColumns,
        what: &str,
    ) -> Result<ParquetSource, SourceError> {
        let files = objects
            .into_iter()
            .map(|o| Backing::Remote(remote::Chunks::new(o)))
            .collect();
        Self::open_files(files, columns, what)
    }

    fn open_files(
        backings: Vec<Backing>,
        columns: &ParquetColumns,
        what: &str,
    ) -> Result<ParquetSource, SourceError> {
        let mut files = Vec::with_capacity(backings.len());
        let mut rows = Vec::new();
        let mut ranges = Vec::new();
        let mut raw_labels: Vec<Option<i64>> = Vec::new();
        // The label's ClassLabel names, and the file they came from.
        let mut hf_names: Option<(Vec<String>, String)> = None;
        let mut has_label = None::<bool>;
        // Names of the classes of the boxes and tags, from the metadata, and the
        // largest class number in those columns (read at open only without names).
        let mut field_names: Option<Vec<String>> = None;
        let mut field_max: Option<i64> = None;
        for (fi, file) in backings.into_iter().enumerate() {
            let bad = |r: String| file.error(r);
            // The footer: the file's last bytes, one GET for a remote file.
            let size = parquet::file::reader::Length::len(&file);
            let tail = file
                .with_ranges(std::slice::from_ref(
                    &(size.saturating_sub(FOOTER_GUESS)..size),
                ))
                .map_err(|w| file.error(w.reword(|r| format!("reading the footer: {r}"))))?;
            let meta = ArrowReaderMetadata::load(&tail, ArrowReaderOptions::new())
                .map_err(|e| bad(format!("not a readable Parquet file: {e}")).caused_by(e))?;
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
            let image_col = if columns.image.is_empty() {
                None
            } else {
                let image_col = col(&columns.image).ok_or_else(|| {
                    bad(format!(
                        "no image column '{}' (the columns: {}; pick one with image_column=)",
                        columns.image,
                        names()
                    ))
                })?;
                if !is_image_type(schema.field(image_col).data_type()) {
                    return Err(bad(format!(
                        "column '{}' is {}, not images (binary, a string path, or the datasets \
                         Image struct {{bytes, path}})",
                        columns.image,
                        schema.field(image_col).data_type()
                    )));
                }
                Some(image_col)
            };
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
            let field_cols = FieldColumns::resolve(&schema, columns).map_err(bad)?;
            let hf = schema.metadata().get("huggingface");
            for c in [&field_cols.box_classes, &field_cols.labels]
                .into_iter()
                .flatten()
            {
                match fields::hf_names(hf, &c.text) {
                    Some(n) if field_names.is_none() => field_names = Some(n),
                    Some(_) => {}
                    None => {
                        for b in read_column(&file, &meta, c.root).map_err(|w| {
                            file.error(w.reword(|r| format!("reading column '{}': {r}", c.text)))
                        })? {
                            let col = c.pick(&b).map_err(&bad)?;
                            for row in 0..col.len() {
                                let v = fields::classes(&col, row)
                                    .map_err(|r| bad(format!("column '{}': {r}", c.text)))?;
                                if let Some(&m) = v.iter().max() {
                                    field_max = Some(field_max.unwrap_or(0).max(i64::from(m)));
                                }
                            }
                        }
                    }
                }
            }
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
            if let (None, Some(l)) = (label_col, columns.label.as_deref()) {
                // A typo in a name the caller chose would leave the set without classes.
                if l != DEFAULT_LABEL {
                    return Err(bad(format!(
                        "no label column '{l}' (the columns: {})",
                        names()
                    )));
                }
            }
            if let Some((name, _)) = label_col {
                // Each file's ClassLabel names, which must agree: a file with other
                // names (or another order) would have its labels read as the wrong classes.
                let mine = hf_class_names(schema.metadata().get("huggingface"), name);
                match (&hf_names, mine) {
                    (None, Some(n)) => hf_names = Some((n, file.name())),
                    (Some((first, from)), Some(n)) if *first != n => {
                        return Err(bad(format!(
                            "its class names for '{name}' ({}) differ from those of {from} \
                             ({}): the files' labels would mean other classes",
                            preview(&n),
                            preview(first)
                        )));
                    }
                    _ => {}
                }
            }
            let md = meta.metadata().clone();
            let labels = match label_col {
                None => None,
                Some((name, i)) => {
                    let mut v = Vec::new();
                    for b in read_column(&file, &meta, i).map_err(|w| {
                        file.error(w.reword(|r| format!("reading column '{name}': {r}")))
                    })? {
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
                file,
                meta,
                image_col,
                text_col,
                fields: field_cols,
            });
        }
        if rows.is_empty() {
            return Err(SourceError::format(Path::new(what), "no rows"));
        }
        // Labels: the class list, then each row's (a null or negative label names the
        // row).
        let mut labels = Vec::with_capacity(raw_labels.len());
        let mut classes = hf_names.map(|(n, _)| n).unwrap_or_default();
        if has_label == Some(true) {
            let mut max = 0i64;
            for (i, l) in raw_labels.iter().enumerate() {
                let (fi, g, r) = rows[i];
                let at = || format!("{} row group {g} row {r}", files[fi as usize].file.name());
                let v = l.ok_or_else(|| SourceError::record(at(), "the label is null"))?;
                if v < 0 || v as u64 >= MAX_CLASSES as u64 {
                    return Err(SourceError::record(
                        at(),
                        format!("label {v} is not a class number below {MAX_CLASSES}"),
                    ));
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
            // Without a class column the classes are those of the boxes and tags.
            classes = match (field_names, field_max) {
                (Some(n), _) => n,
                (None, Some(m)) => (0..=m).map(|c| c.to_string()).collect(),
                (None, None) => vec!["object".to_string()],
            };
        }
        let mut fields = if columns.image.is_empty() {
            Fields::of(&[])
        } else {
            Fields::of(&[Field::Image])
        };
        let f0 = &files[0].fields;
        if f0.boxes.is_some() {
            fields = fields.with(Field::Boxes);
        }
        if f0.labels.is_some() {
            fields = fields.with(Field::Labels);
        }
        if f0.mask.is_some() {
            fields = fields.with(Field::Mask);
        }
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
            box_format: columns.box_format,
            cache: Mutex::new(Cache::default()),
        })
    }

    /// Reads sample `index`'s image bytes into `buf`; returns its row group (decoded
    /// once, for the fields read beside the image) and its row.
    fn read_image(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(Arc<Group>, u32, usize), SourceError> {
        buf.clear();
        let (f, g, r) = self.locate(index)?;
        let err = |reason: String| SourceError::record(self.describe(index), reason);
        let group = self.group(f, g).map_err(|w| {
            w.reword(|r| format!("reading the row group: {r}"))
                .record(self.describe(index))
        })?;
        let Some(images) = &group.images else {
            // Text only: the row group is what the caller reads from.
            return Ok((group, f, r as usize));
        };
        match image_cell(images, r as usize).map_err(err)? {
            ImageCell::Bytes(bytes) => buf.extend_from_slice(bytes),
            ImageCell::Path(p) => self.files[f as usize]
                .file
                .read_beside(p, buf)
                .map_err(|w| {
                    // The path is the file's: its control characters are escaped.
                    w.reword(|r| printable(&format!("the image file '{p}': {r}")))
                        .record(self.describe(index))
                })?,
        }
        if buf.is_empty() {
            return Err(err("the image's bytes are empty".into()));
        }
        Ok((group, f, r as usize))
    }

    fn locate(&self, index: usize) -> Result<(u32, u32, u32), SourceError> {
        self.rows.get(index).copied().ok_or_else(|| {
            SourceError::record(
                format!("{} sample {index}", self.what),
                format!("index out of range (the files hold {})", self.rows.len()),
            )
        })
    }

    /// Row group `g` of file `f`, decoded (once, whoever asks first).
    fn group(&self, f: u32, g: u32) -> Result<Arc<Group>, Why> {
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
        // The error under a failed decode cannot be cloned for readers waiting on the
        // same slot: they get its words, the reader that decoded gets it too.
        let mut cause = None;
        let out = slot
            .get_or_init(|| {
                fresh = true;
                self.decode(f, g).map(Arc::new).map_err(|w| {
                    cause = w.cause;
                    w.reason
                })
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
        out.map_err(|reason| Why { reason, cause })
    }

    fn decode(&self, f: u32, g: u32) -> Result<Group, Why> {
        let pf = &self.files[f as usize];
        let md = pf.meta.metadata();
        let rows = usize::try_from(md.row_group(g as usize).num_rows()).unwrap_or(0);
        let mut roots: Vec<usize> = pf.image_col.into_iter().collect();
        roots.extend(pf.text_col);
        roots.extend(pf.fields.all().map(|c| c.root));
        roots.sort_unstable();
        roots.dedup();
        let at_hand = pf
            .file
            .with_ranges(&chunk_ranges(md, &roots, [g as usize].into_iter()))?;
        let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), roots);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(at_hand, pf.meta.clone())
            .with_projection(mask)
            .with_row_groups(vec![g as usize])
            .with_batch_size(rows.max(1))
            .build()
            .map_err(Why::of)?;
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(Why::of)?;
        // The batch size is the group's row count: one batch, else the rows would be
        // mis-indexed.
        let [batch] = <[RecordBatch; 1]>::try_from(batches)
            .map_err(|b| format!("the row group came as {} batches, not one", b.len()))?;
        // By name: the batch holds the projected columns in the schema's order.
        let schema = pf.meta.schema();
        let by_root = |i: usize| {
            batch
                .column_by_name(schema.field(i).name())
                .cloned()
                .ok_or_else(|| format!("the row group lacks column '{}'", schema.field(i).name()))
        };
        let pick = |c: &Option<ColumnPath>| c.as_ref().map(|c| c.pick(&batch)).transpose();
        let images = pf.image_col.map(by_root).transpose()?;
        let text = pf.text_col.map(by_root).transpose()?;
        let bytes = batch.get_array_memory_size();
        Ok(Group {
            images,
            text,
            boxes: pick(&pf.fields.boxes)?,
            box_classes: pick(&pf.fields.box_classes)?,
            labels: pick(&pf.fields.labels)?,
            mask: pick(&pf.fields.mask)?,
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
                self.files[f as usize].file.name()
            ),
            None => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        self.read_image(index, buf).map(|_| RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "parquet"
    }

    fn shards(&self) -> Option<&[Range<usize>]> {
        Some(&self.ranges)
    }

    fn layout(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(first) = self.files.first() {
            out.push("schema:".to_string());
            for f in first.meta.schema().fields() {
                out.push(format!("  {}: {}", f.name(), f.data_type()));
            }
        }
        for pf in &self.files {
            let md = pf.meta.metadata();
            let groups = md.row_groups();
            out.push(format!(
                "{}: {} rows in {} row groups",
                pf.file.name(),
                md.file_metadata().num_rows(),
                groups.len()
            ));
            for (g, rg) in groups.iter().enumerate() {
                let codec = rg
                    .columns()
                    .first()
                    .map_or("-".to_string(), |c| c.compression().to_string());
                out.push(format!(
                    "  row group {g}: {} rows, {} bytes ({} compressed, {codec})",
                    rg.num_rows(),
                    rg.total_byte_size(),
                    rg.compressed_size()
                ));
            }
        }
        out
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
        // One look at the row group serves the image and the fields.
        let (group, f, row) = self.read_image(index, buf)?;
        let kind = RecordKind::Encoded;
        let wants = |f| wanted.contains(f) && self.fields.contains(f);
        let err = |reason: String| SourceError::record(self.describe(index), reason);
        let pf = &self.files[f as usize];
        if wants(Field::Text) {
            ann.text = group.text.as_ref().and_then(|t| text_value(t, row));
            if ann.text.is_none() {
                return Err(err("the text cell is null".into()));
            }
        }
        if let (true, Some(col)) = (wants(Field::Boxes), &group.boxes) {
            let name = pf.fields.boxes.as_ref().map_or("", |c| c.text.as_str());
            ann.boxes = fields::boxes(col, row, self.box_format)
                .map_err(|r| err(format!("column '{name}': {r}")))?;
            ann.box_labels = match &group.box_classes {
                Some(c) => fields::classes(c, row).map_err(|r| err(format!("box classes: {r}")))?,
                None => vec![0; ann.boxes.len()],
            };
            if ann.box_labels.len() != ann.boxes.len() {
                return Err(err(format!(
                    "{} boxes but {} box classes",
                    ann.boxes.len(),
                    ann.box_labels.len()
                )));
            }
        }
        if let (true, Some(col)) = (wants(Field::Labels), &group.labels) {
            ann.labels = fields::classes(col, row).map_err(|r| err(format!("tags: {r}")))?;
        }
        if let (true, Some(col)) = (wants(Field::Mask), &group.mask) {
            let mut png = Vec::new();
            match image_cell(col, row).map_err(|r| err(format!("mask: {r}")))? {
                ImageCell::Bytes(b) => png.extend_from_slice(b),
                ImageCell::Path(p) => pf.file.read_beside(p, &mut png).map_err(|w| {
                    w.reword(|r| printable(&format!("the mask file '{p}': {r}")))
                        .record(self.describe(index))
                })?,
            }
            ann.mask = Some(MaskData::Png(png));
        }
        Ok(kind)
    }
}
