//! WebDataset tar shards as an indexed source.
//!
//! Opening a tar data set builds an index of its samples (shard, key, byte range of
//! the image member, label), so samples are then read by positioned reads (local) or
//! ranged GETs (remote), like packed records: `--on-error skip`, retries and io_depth
//! apply per sample, and the order is the sampler's (shard order shuffled per epoch,
//! then a bounded shuffle buffer; see [`Sampler`](crate::Sampler)), computed up front,
//! so sync and async modes, any worker count and a mid-epoch resume all agree.
//!
//! Local shards are indexed by reading their 512-byte headers; remote shards by the
//! sidecar index `SHARD.tar.idx` that `stoker-load pack --format tar` writes, or, when
//! there is none, by streaming each shard once (said on stderr, and kept in the cache
//! folder when one is given). The layout is in `docs/remote-data.md`.
//!
//! Samples may carry more than image and label (`docs/samples.md`): a caption
//! (`KEY.txt`), fields in `KEY.json` (multi-label tags, boxes, keypoints, `meta`) and a
//! mask (`KEY.mask.png` or `KEY.seg.png`). Their members' ranges are in the index; a
//! sample's members are consecutive, so one read of their span serves them all.
//!
//! One concern per file: `pattern.rs` (brace patterns), `index.rs` (the index of one
//! shard: scanning headers, the sidecar format), `members.rs` (fields from a sample's
//! members), `writer.rs` (packing any source into shards) and, with the `remote`
//! feature, `remote.rs` (loading remote indexes).

mod index;
mod manifest;
mod members;
mod netpbm;
mod pattern;
#[cfg(feature = "remote")]
mod remote;
mod writer;

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use index::{
    parse_cls, parse_json_label, split_key, FieldIndex, Member, ShardIndex, IMAGE_EXTS,
    INDEX_FORMAT, INDEX_SUFFIX, INDEX_VERSION, INDEX_VERSION_FIELDS, MASK_EXTS, NO_LABEL, TEXT_EXT,
};
#[cfg(feature = "remote")]
pub use manifest::check_remote as check_remote_manifest;
pub use manifest::{check_local as check_manifest, Manifest, ShardEntry, MANIFEST_NAME};
pub use pattern::{expand, is_pattern};
pub(crate) use writer::grey_png;
pub use writer::{pack_tar, pack_tar_with, TarPackStats, SHARD_PREFIX};

use super::{read_at, ReadFuture, RecordKind, Source, SourceError, MAX_CLASSES};
use crate::sample::{Annotation, Field, Fields, KeypointSchema};

/// Without a class table, the class list is numbered from the labels seen (0 to the
/// largest): it may hold at most this many numbers per distinct label seen (or
/// [`MAX_CLASSES`], whichever is less; a list up to 65536 long is always allowed), so a
/// stray huge label cannot make it grow without bound.
pub const CLASSES_PER_LABEL_SEEN: usize = 64;

/// Where a shard's bytes are.
enum ShardData {
    Local(File),
    #[cfg(feature = "remote")]
    Remote {
        object: crate::storage::Object,
        cache: Option<Arc<crate::storage::Cache>>,
    },
}

struct Shard {
    /// The shard's path or URL, for messages.
    name: String,
    data: ShardData,
    /// A local shard's size and modification time when it was indexed: a shard
    /// rewritten in place since then would pair the index's labels with other bytes.
    stamp: Option<(u64, Option<std::time::SystemTime>)>,
}

pub(crate) use crate::report::printable;

/// A file's size and modification time.
fn stamp_of(meta: &std::fs::Metadata) -> (u64, Option<std::time::SystemTime>) {
    (meta.len(), meta.modified().ok())
}

struct Sample {
    shard: u32,
    offset: u64,
    len: u64,
    label: u32,
}

/// A data set of WebDataset tar shards, local or remote, read through its index.
pub struct TarSource {
    what: String,
    shards: Vec<Shard>,
    ranges: Vec<Range<usize>>,
    samples: Vec<Sample>,
    keys: Vec<String>,
    classes: Vec<String>,
    /// Each sample's members with fields (empty: a shard of images and labels only).
    members: Vec<Vec<Member>>,
    fields: Fields,
    schema: KeypointSchema,
}

impl std::fmt::Debug for TarSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TarSource")
            .field("what", &self.what)
            .field("shards", &self.shards.len())
            .field("samples", &self.samples.len())
            .field("classes", &self.classes.len())
            .finish()
    }
}

/// The end-of-archive marker (two zero blocks) must follow the last member, or the
/// shard was cut short between two members.
fn check_end(end_of_members: u64, tar_bytes: u64) -> Result<(), String> {
    if end_of_members.saturating_add(1024) > tar_bytes {
        return Err(format!(
            "truncated: the end-of-archive marker is missing (the members end at byte \
             {end_of_members}, the shard has {tar_bytes} bytes)"
        ));
    }
    Ok(())
}

/// True for a file name that is a tar shard.
pub fn is_tar_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".tar")
}

/// The `.tar` files directly in `dir`, sorted; `None` when it holds none (or is not a
/// folder of shards: it has sub-folders, as an image folder does).
pub fn shards_in(dir: &Path) -> Result<Option<Vec<PathBuf>>, SourceError> {
    let mut tars = Vec::new();
    let mut subdirs = 0usize;
    for entry in std::fs::read_dir(dir).map_err(|e| SourceError::io(dir, e))? {
        let entry = entry.map_err(|e| SourceError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            subdirs += 1;
        } else if is_tar_name(&name) {
            tars.push(path);
        }
    }
    if tars.is_empty() || subdirs > 0 {
        return Ok(None);
    }
    tars.sort();
    Ok(Some(tars))
}

/// The sidecar index beside a local shard, if one is there and describes this shard:
/// its class names and keypoint names are kept (the headers have neither).
fn sidecar(path: &Path, tar_bytes: u64) -> Option<ShardIndex> {
    let mut side = path.as_os_str().to_os_string();
    side.push(INDEX_SUFFIX);
    std::fs::read(PathBuf::from(side))
        .ok()
        .and_then(|b| ShardIndex::parse(&b, tar_bytes).ok())
}

/// Indexes one local shard by its headers (seeking past the data).
fn scan_local(path: &Path) -> Result<(File, ShardIndex), SourceError> {
    let file = super::open_regular(path).map_err(|e| match e {
        SourceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            SourceError::format(path, "no such shard")
        }
        e => e,
    })?;
    let len = file.metadata().map_err(|e| SourceError::io(path, e))?.len();
    let mut archive = ::tar::Archive::new(&file);
    let entries = archive
        .entries_with_seek()
        .map_err(|e| SourceError::io(path, e))?;
    let (samples, mut extra, end) = index::scan(entries, Some(len)).map_err(|w| w.format(path))?;
    check_end(end, len).map_err(|r| SourceError::format(path, r))?;
    let side = sidecar(path, len);
    let classes = side.as_ref().map(|s| s.classes.clone()).unwrap_or_default();
    if let Some(s) = side {
        extra.keypoint_names = s.extra.keypoint_names;
    }
    Ok((
        file,
        ShardIndex::new(len, classes, samples).with_fields(extra),
    ))
}

impl TarSource {
    /// Opens local shards, indexing each by its headers. `what` names the data set in
    /// messages (the folder or pattern given).
    pub fn open_local(paths: &[PathBuf], what: &str) -> Result<TarSource, SourceError> {
        let mut shards = Vec::with_capacity(paths.len());
        for p in paths {
            let (file, idx) = scan_local(p)?;
            let stamp = file.metadata().ok().map(|m| stamp_of(&m));
            shards.push((
                Shard {
                    name: printable(&p.display().to_string()),
                    data: ShardData::Local(file),
                    stamp,
                },
                idx,
            ));
        }
        Self::assemble(what, shards)
    }

    fn assemble(what: &str, shards: Vec<(Shard, ShardIndex)>) -> Result<TarSource, SourceError> {
        let bad = |reason: String| SourceError::format(PathBuf::from(what), reason);
        if shards.is_empty() {
            return Err(bad("no .tar shards".into()));
        }
        if u32::try_from(shards.len()).is_err() {
            return Err(bad(format!("{} shards are too many", shards.len())));
        }
        let mut out = TarSource {
            what: what.to_string(),
            shards: Vec::with_capacity(shards.len()),
            ranges: Vec::with_capacity(shards.len()),
            samples: Vec::new(),
            keys: Vec::new(),
            classes: Vec::new(),
            members: Vec::new(),
            fields: Fields::NONE,
            schema: KeypointSchema::default(),
        };
        let with_fields = shards.iter().any(|(_, idx)| !idx.extra.is_empty());
        let mut max_label = None::<u32>;
        let mut unlabelled = 0usize;
        let mut k = None::<usize>;
        // One bit per possible label (128 KiB): which labels were seen.
        let mut seen = vec![0u64; MAX_CLASSES / 64];
        for (i, (shard, idx)) in shards.into_iter().enumerate() {
            if out.classes.is_empty() && !idx.classes.is_empty() {
                if idx.classes.len() > MAX_CLASSES {
                    return Err(bad(format!(
                        "{}: the index lists {} classes, more than the {MAX_CLASSES} a data \
                         set may have",
                        shard.name,
                        idx.classes.len()
                    )));
                }
                out.classes = idx.classes.clone();
            }
            let start = out.samples.len();
            let extra = idx.extra;
            if with_fields {
                for name in &extra.fields {
                    let f = name.parse::<Field>().map_err(|e| {
                        let e_text = printable(&e.to_string());
                        bad(format!("{}: the index's fields: {e_text}", shard.name)).caused_by(e)
                    })?;
                    out.fields = out.fields.with(f);
                }
                if let Some(c) = extra.max_class {
                    max_label = Some(max_label.map_or(c, |m| m.max(c)));
                    seen[(c as usize).min(MAX_CLASSES - 1) / 64] |= 1 << (c % 64);
                }
                if let Some(n) = extra.keypoints {
                    if k.is_some_and(|k| k != n) {
                        return Err(bad(format!(
                            "{}: keypoint instances of {n} points, other shards have {}",
                            shard.name,
                            k.unwrap_or(0)
                        )));
                    }
                    k = Some(n);
                    if out.schema.is_empty() && extra.keypoint_names.len() == n {
                        out.schema = KeypointSchema::from_names(extra.keypoint_names.clone());
                    }
                }
                let mut members = extra.members;
                members.resize(idx.samples.len(), Vec::new());
                out.members.extend(members);
            }
            for (key, offset, len, label) in idx.samples {
                if label == NO_LABEL && with_fields {
                    unlabelled += 1;
                    out.samples.push(Sample {
                        shard: i as u32,
                        offset,
                        len,
                        label: 0,
                    });
                    out.keys.push(key);
                    continue;
                }
                if label as usize >= MAX_CLASSES {
                    return Err(bad(format!(
                        "{} sample {}: label {label} is out of bounds (labels are class \
                         numbers below {MAX_CLASSES})",
                        shard.name,
                        printable(&key)
                    )));
                }
                seen[label as usize / 64] |= 1 << (label % 64);
                max_label = Some(max_label.map_or(label, |m| m.max(label)));
                out.samples.push(Sample {
                    shard: i as u32,
                    offset,
                    len,
                    label,
                });
                out.keys.push(key);
            }
            out.ranges.push(start..out.samples.len());
            out.shards.push(shard);
        }
        if out.samples.is_empty() {
            return Err(bad(format!(
                "{} shard(s) but no samples (an image member and a label per key)",
                out.shards.len()
            )));
        }
        if with_fields {
            out.finish_fields(unlabelled, k, &bad)?;
        }
        let Some(max_label) = max_label else {
            // Samples without labels and without class numbers (captions, masks).
            return Ok(out);
        };
        let needed = max_label as usize + 1;
        if out.classes.is_empty() {
            let distinct: usize = seen.iter().map(|w| w.count_ones() as usize).sum();
            let bound = (distinct * CLASSES_PER_LABEL_SEEN).clamp(1 << 16, MAX_CLASSES);
            if needed > bound {
                return Err(bad(format!(
                    "a sample has label {max_label}, but only {distinct} distinct labels were seen: \
                     numbering the classes 0 to {max_label} would make {needed} classes, more \
                     than {bound} (labels must be class numbers counted from 0; give class \
                     names in the shards' .tar.idx to go beyond)"
                )));
            }
            out.classes = (0..needed).map(|l| l.to_string()).collect();
        } else if out.classes.len() < needed {
            return Err(bad(format!(
                "a sample has label {max_label}, but the index lists {} classes",
                out.classes.len()
            )));
        }
        Ok(out)
    }

    /// The field set of a data set with more than images and labels, once every shard
    /// is in: a class when every sample has a label (some but not all is an error).
    fn finish_fields(
        &mut self,
        unlabelled: usize,
        k: Option<usize>,
        bad: &dyn Fn(String) -> SourceError,
    ) -> Result<(), SourceError> {
        self.fields = self.fields.with(Field::Image);
        match unlabelled {
            0 => self.fields = self.fields.with(Field::Class),
            n if n == self.samples.len() => {}
            n => {
                return Err(bad(format!(
                    "{n} of {} samples have no label (.cls, or a class in .json) and the \
                     others have one: give every sample a label, or none",
                    self.samples.len()
                )));
            }
        }
        if let Some(n) = k {
            if self.schema.len() != n {
                self.schema = KeypointSchema::from_names((0..n).map(|i| i.to_string()).collect());
            }
        }
        Ok(())
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The key of sample `index` (its members' common name).
    pub fn key(&self, index: usize) -> Option<&str> {
        self.keys.get(index).map(String::as_str)
    }

    fn sample(&self, index: usize) -> Result<(&Sample, &Shard), SourceError> {
        self.samples
            .get(index)
            .and_then(|s| Some((s, self.shards.get(s.shard as usize)?)))
            .ok_or_else(|| {
                SourceError::record(
                    format!("{} sample {index}", self.what),
                    format!(
                        "index out of range (the shards hold {})",
                        self.samples.len()
                    ),
                )
            })
    }

    /// The kind of the image member now in `buf`: the raw pixels of a binary PGM or
    /// PPM member (its header removed, its size checked against its shape), else an
    /// encoded image.
    fn image_kind(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        if !netpbm::is_netpbm(buf) {
            return Ok(RecordKind::Encoded);
        }
        let (kind, at) = netpbm::parse(buf).map_err(|r| self.record_error(index, r))?;
        buf.drain(..at);
        Ok(kind)
    }

    fn record_error(&self, index: usize, reason: String) -> SourceError {
        SourceError::record(self.describe(index), reason)
    }

    /// A remote sample's object, cache and byte range.
    #[cfg(feature = "remote")]
    fn remote_part(
        &self,
        index: usize,
    ) -> Option<(
        crate::storage::Object,
        Option<Arc<crate::storage::Cache>>,
        Range<u64>,
    )> {
        let (s, shard) = self.sample(index).ok()?;
        match &shard.data {
            ShardData::Remote { object, cache } => {
                Some((object.clone(), cache.clone(), s.offset..s.offset + s.len))
            }
            ShardData::Local(_) => None,
        }
    }

    /// Reads bytes `range` of sample `index`'s shard into `buf`.
    fn read_range(
        &self,
        index: usize,
        range: Range<u64>,
        buf: &mut Vec<u8>,
    ) -> Result<(), SourceError> {
        buf.clear();
        let (_, shard) = self.sample(index)?;
        let len = usize::try_from(range.end - range.start).map_err(|_| {
            self.record_error(
                index,
                format!("{} bytes are too many", range.end - range.start),
            )
        })?;
        match &shard.data {
            ShardData::Local(file) => {
                buf.resize(len, 0);
                match read_at(file, buf, range.start) {
                    Ok(true) => {}
                    Ok(false) => {
                        buf.clear();
                        return Err(self.record_error(
                            index,
                            format!(
                                "the shard ends before bytes {}..{} (it was truncated after it \
                                 was opened)",
                                range.start, range.end
                            ),
                        ));
                    }
                    Err(e) => {
                        buf.clear();
                        return Err(self
                            .record_error(index, format!("reading: {e}"))
                            .caused_by(e));
                    }
                }
                // After the read: a rewrite that began before it shows by now.
                let now = file.metadata().ok().map(|m| stamp_of(&m));
                if let (Some(then), Some(now)) = (shard.stamp, now) {
                    if now != then {
                        buf.clear();
                        return Err(self.record_error(
                            index,
                            format!(
                                "the shard changed since it was indexed ({} bytes then, {} \
                                 now, or a new modification time): open the data set again",
                                then.0, now.0
                            ),
                        ));
                    }
                }
            }
            #[cfg(feature = "remote")]
            ShardData::Remote { object, cache } => {
                let (object, cache) = (object.clone(), cache.clone());
                let mut owned = std::mem::take(buf);
                let (res, owned) = crate::storage::wait(async move {
                    let r = crate::storage::read_into(&object, cache.as_deref(), range, &mut owned)
                        .await;
                    (r, owned)
                })?;
                *buf = owned;
                res?;
            }
        }
        Ok(())
    }
}

impl Source for TarSource {
    fn len(&self) -> usize {
        self.samples.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        match self.samples.get(index) {
            Some(s) => s.label,
            None => panic!(
                "{}: label of sample {index} asked, the shards hold {}",
                self.what,
                self.samples.len()
            ),
        }
    }

    fn describe(&self, index: usize) -> String {
        match self.sample(index) {
            Ok((_, shard)) => format!("{} sample {}", shard.name, printable(&self.keys[index])),
            Err(_) => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        let (s, _) = self.sample(index)?;
        self.read_range(index, s.offset..s.offset + s.len, buf)?;
        if buf.is_empty() {
            return Err(self.record_error(index, "empty image member".into()));
        }
        self.image_kind(index, buf)
    }

    fn format(&self) -> &'static str {
        "tar"
    }

    fn fields(&self) -> Fields {
        if self.members.is_empty() {
            Fields::CLASSIFICATION
        } else {
            self.fields
        }
    }

    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        Some(&self.schema).filter(|s| !s.is_empty())
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        ann.clear();
        let members = self.members.get(index).map_or(&[][..], Vec::as_slice);
        let used: Vec<&Member> = members
            .iter()
            .filter(|m| members::wanted(&m.0, wanted))
            .collect();
        let kind = if used.is_empty() {
            self.read(index, buf)?
        } else {
            // The image and the members wanted lie in one span (a sample's members
            // are consecutive): one read, then each is cut out of it.
            let (s, _) = self.sample(index)?;
            let start = used.iter().map(|m| m.1).fold(s.offset, u64::min);
            let end = used
                .iter()
                .map(|m| m.1 + m.2)
                .fold(s.offset + s.len, u64::max);
            let mut span = Vec::new();
            self.read_range(index, start..end, &mut span)?;
            let cut = |off: u64, len: u64| &span[(off - start) as usize..][..len as usize];
            buf.clear();
            buf.extend_from_slice(cut(s.offset, s.len));
            if buf.is_empty() {
                return Err(self.record_error(index, "empty image member".into()));
            }
            for m in used {
                members::read_member(&m.0, cut(m.1, m.2), wanted, ann).map_err(|w| {
                    w.reword(|r| format!(".{} member: {r}", m.0))
                        .record(self.describe(index))
                })?;
            }
            self.image_kind(index, buf)?
        };
        let missing = members::missing(ann, wanted, self.fields);
        if let Some(what) = missing {
            return Err(self.record_error(index, what));
        }
        Ok(kind)
    }

    fn shards(&self) -> Option<&[Range<usize>]> {
        Some(&self.ranges)
    }

    fn read_async(self: Arc<Self>, index: usize, buf: Vec<u8>) -> ReadFuture {
        #[cfg(feature = "remote")]
        if let Some((object, cache, range)) = self.remote_part(index) {
            return Box::pin(async move {
                let mut buf = buf;
                let task = crate::storage::spawn(async move {
                    let r =
                        crate::storage::read_into(&object, cache.as_deref(), range, &mut buf).await;
                    (r, buf)
                });
                match task.await {
                    Ok((Ok(()), buf)) if buf.is_empty() => (
                        Err(self.record_error(index, "empty image member".into())),
                        buf,
                    ),
                    Ok((Ok(()), mut buf)) => {
                        let kind = self.image_kind(index, &mut buf);
                        (kind, buf)
                    }
                    Ok((Err(e), buf)) => (Err(e.into()), buf),
                    Err(e) => (Err(e.into()), Vec::new()),
                }
            });
        }
        super::read_blocking(self, index, buf)
    }
}
