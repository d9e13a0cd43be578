//! Packing any source into WebDataset tar shards: `KEY.jpg`/`KEY.png` and `KEY.cls`
//! per sample (and, for a source with more fields, `KEY.txt`, `KEY.json` and
//! `KEY.mask.png`; `docs/samples.md`), shards of at most a given size, each written under a temporary name,
//! flushed and renamed (so a shard name is always a whole shard), followed by its
//! sidecar index `SHARD.tar.idx`; after the last shard, the manifest `shards.json`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::index::{FieldIndex, IndexedSample, Member, ShardIndex, INDEX_SUFFIX, NO_LABEL};
use super::manifest::{Manifest, ShardEntry, MANIFEST_NAME};
use crate::sample::{Annotation, Field, MaskData};
use crate::source::{RecordKind, Source, SourceError, Why};

/// A writer that keeps the CRC-32 of what goes through it (for the manifest).
struct Crc<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Shards are named `shard-000000.tar`, `shard-000001.tar`, ...
pub const SHARD_PREFIX: &str = "shard-";
/// The most shards one pack writes.
const MAX_SHARDS: usize = 1_000_000;

/// What a finished tar pack wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TarPackStats {
    /// Samples written, over all shards.
    pub records: usize,
    /// Shard files written.
    pub shards: usize,
    /// Sum of the shards' sizes.
    pub bytes: u64,
}

fn padded(len: u64) -> u64 {
    len.div_ceil(512) * 512
}

/// An image's bytes as a tar member: JPEG and PNG files as they are, raw pixels
/// encoded as PNG (lossless, so they decode to the same pixels).
fn encoded(
    kind: RecordKind,
    bytes: &[u8],
    what: &str,
) -> Result<(Vec<u8>, &'static str), SourceError> {
    let bad = |reason: String| SourceError::record(what.to_string(), reason);
    match kind {
        RecordKind::Encoded if bytes.starts_with(&[0xff, 0xd8, 0xff]) => {
            Ok((bytes.to_vec(), "jpg"))
        }
        RecordKind::Encoded if bytes.starts_with(b"\x89PNG") => Ok((bytes.to_vec(), "png")),
        RecordKind::Encoded => Err(bad(
            "neither JPEG nor PNG: cannot name its tar member".into()
        )),
        RecordKind::Raw {
            width,
            height,
            channels,
        } => {
            use image::ImageEncoder;
            let color = match channels {
                1 => image::ExtendedColorType::L8,
                2 => image::ExtendedColorType::La8,
                3 => image::ExtendedColorType::Rgb8,
                4 => image::ExtendedColorType::Rgba8,
                c => return Err(bad(format!("{c} channels cannot be stored as PNG"))),
            };
            let mut out = Vec::new();
            image::codecs::png::PngEncoder::new(&mut out)
                .write_image(bytes, width, height, color)
                .map_err(|e| {
                    bad(format!("encoding {width}x{height}x{channels} as PNG: {e}")).caused_by(e)
                })?;
            Ok((out, "png"))
        }
    }
}

/// One shard being written.
struct ShardWriter {
    path: PathBuf,
    tmp: PathBuf,
    builder: Option<::tar::Builder<BufWriter<Crc<File>>>>,
    pos: u64,
    samples: Vec<IndexedSample>,
    /// Each sample's members with fields (for a source with more than image and class).
    members: Vec<Vec<Member>>,
    /// Set once the shard has its final name: until then a drop removes it.
    renamed: bool,
}

impl ShardWriter {
    fn create(path: PathBuf) -> Result<Self, SourceError> {
        let tmp = crate::durable::temp_name(&path);
        let file = File::create(&tmp).map_err(|e| SourceError::io(&tmp, e))?;
        let file = Crc {
            inner: file,
            crc: crc32fast::Hasher::new(),
        };
        let mut builder = ::tar::Builder::new(BufWriter::with_capacity(1 << 20, file));
        builder.mode(::tar::HeaderMode::Deterministic);
        Ok(ShardWriter {
            path,
            tmp,
            builder: Some(builder),
            pos: 0,
            samples: Vec::new(),
            members: Vec::new(),
            renamed: false,
        })
    }

    fn member(&mut self, name: &str, data: &[u8]) -> Result<u64, SourceError> {
        let mut header = ::tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(::tar::EntryType::Regular);
        let builder = self
            .builder
            .as_mut()
            .ok_or_else(|| SourceError::format(&self.path, "shard already finished"))?;
        builder
            .append_data(&mut header, name, data)
            .map_err(|e| SourceError::io(&self.tmp, e))?;
        // Names are short (no long-name extension header): data follows one header.
        let offset = self.pos + 512;
        self.pos = offset + padded(data.len() as u64);
        Ok(offset)
    }

    fn add(&mut self, key: &str, ext: &str, image: &[u8], label: u32) -> Result<(), SourceError> {
        let offset = self.member(&format!("{key}.{ext}"), image)?;
        self.member(&format!("{key}.cls"), label.to_string().as_bytes())?;
        self.samples
            .push((key.to_string(), offset, image.len() as u64, label));
        Ok(())
    }

    /// Adds a sample with fields: the image, `KEY.cls` when it has a label, and its
    /// other fields as members.
    fn add_fields(
        &mut self,
        key: &str,
        ext: &str,
        image: &[u8],
        label: Option<u32>,
        parts: &[(&str, Vec<u8>)],
    ) -> Result<(), SourceError> {
        let offset = self.member(&format!("{key}.{ext}"), image)?;
        if let Some(l) = label {
            self.member(&format!("{key}.cls"), l.to_string().as_bytes())?;
        }
        let mut members = Vec::with_capacity(parts.len());
        for (ext, bytes) in parts {
            let at = self.member(&format!("{key}.{ext}"), bytes)?;
            members.push((ext.to_string(), at, bytes.len() as u64));
        }
        self.samples.push((
            key.to_string(),
            offset,
            image.len() as u64,
            label.unwrap_or(NO_LABEL),
        ));
        self.members.push(members);
        Ok(())
    }

    /// Ends the archive, syncs and renames it, then writes its index (with `extra`'s
    /// fields when the samples have members); returns its manifest entry.
    fn finish(mut self, classes: &[String], extra: &FieldIndex) -> Result<ShardEntry, SourceError> {
        let tmp = self.tmp.clone();
        let io = |e| SourceError::io(&tmp, e);
        let builder = self
            .builder
            .take()
            .ok_or_else(|| SourceError::format(&self.path, "shard already finished"))?;
        let mut out = builder.into_inner().map_err(io)?;
        out.flush().map_err(io)?;
        let Crc { inner: file, crc } = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| SourceError::io(&self.path, e))?;
        self.renamed = true;
        let samples = std::mem::take(&mut self.samples);
        let count = samples.len() as u64;
        let mut idx = ShardIndex::new(bytes, classes.to_vec(), samples);
        if !extra.is_empty() {
            idx = idx.with_fields(FieldIndex {
                members: std::mem::take(&mut self.members),
                ..extra.clone()
            });
        }
        let mut side = self.path.as_os_str().to_os_string();
        side.push(INDEX_SUFFIX);
        let side = PathBuf::from(side);
        crate::durable::write_bytes(&side, &idx.to_json())
            .map_err(|e| SourceError::io(&side, e))?;
        Ok(ShardEntry {
            name: self
                .path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            bytes,
            samples: count,
            crc32: crc.finalize(),
        })
    }
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        // Unfinished (an error at any step, a full disk, a failed rename): remove the
        // partial shard. A killed process leaves only a temporary name, never a shard
        // name, and the next pack into the folder removes it.
        drop(self.builder.take());
        if !self.renamed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Copies every record of `src`, in order, into tar shards of at most `shard_bytes`
/// bytes each (a single larger sample gets a shard of its own) in the folder `out`,
/// which must not hold `.tar` files already. `progress(done, total)` follows each
/// record.
pub fn pack_tar(
    src: &dyn Source,
    out: &Path,
    shard_bytes: u64,
    mut progress: impl FnMut(usize, usize),
) -> Result<TarPackStats, SourceError> {
    let total = src.len();
    if total == 0 {
        return Err(SourceError::format(
            out,
            "nothing to pack: the source is empty",
        ));
    }
    if shard_bytes < 10 * 1024 {
        return Err(SourceError::format(
            out,
            format!("shard size {shard_bytes} is below 10 KiB"),
        ));
    }
    // A folder, or a link to one; never a file, FIFO or device in its place.
    match std::fs::metadata(out) {
        Ok(m) if !m.is_dir() => {
            return Err(SourceError::format(
                out,
                format!(
                    "{}, not a folder: --format tar writes its shards into a folder",
                    crate::durable::node_kind(&m)
                ),
            ))
        }
        _ => {}
    }
    // The refusal comes before any change to the folder: a finished pack there keeps
    // its manifest and temporaries and reads as it did.
    if out.is_dir() {
        for entry in std::fs::read_dir(out).map_err(|e| SourceError::io(out, e))? {
            let entry = entry.map_err(|e| SourceError::io(out, e))?;
            if super::is_tar_name(&entry.file_name().to_string_lossy()) {
                return Err(SourceError::format(
                    out,
                    "the folder holds .tar files already (shards of another pack would mix \
                     in): give an empty or new folder",
                ));
            }
        }
    }
    std::fs::create_dir_all(out).map_err(|e| SourceError::io(out, e))?;
    // What a killed earlier pack left (a full disk would fail again because of it).
    crate::durable::remove_stale_temps(out, &[SHARD_PREFIX, MANIFEST_NAME]);
    // A manifest in a folder without shards is stale; until the new one is written
    // last, the folder must read as unfinished.
    match std::fs::remove_file(out.join(MANIFEST_NAME)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(SourceError::io(out.join(MANIFEST_NAME), e))
        }
        _ => {}
    }
    let width = total.to_string().len().max(8);
    let mut stats = TarPackStats {
        records: 0,
        shards: 0,
        bytes: 0,
    };
    let mut buf = Vec::new();
    let mut cur: Option<ShardWriter> = None;
    let mut written = Vec::new();
    let fields = src.fields();
    let extra = field_index(src);
    let mut ann = Annotation::default();
    for i in 0..total {
        let kind = if extra.is_empty() {
            src.read(i, &mut buf)?
        } else {
            src.read_sample(i, fields, &mut buf, &mut ann)?
        };
        let (image, ext) = encoded(kind, &buf, &src.describe(i))?;
        let label = src.label(i);
        let key = format!("{i:0width$}");
        let parts = if extra.is_empty() {
            Vec::new()
        } else {
            member_parts(&ann, extra.keypoints.unwrap_or(0))
                .map_err(|w| w.record(src.describe(i)))?
        };
        let need = 512
            + padded(image.len() as u64)
            + 1024
            + parts
                .iter()
                .map(|(_, b)| 512 + padded(b.len() as u64))
                .sum::<u64>();
        if cur
            .as_ref()
            .is_some_and(|w| !w.samples.is_empty() && w.pos + need + 1024 > shard_bytes)
        {
            if let Some(w) = cur.take() {
                let entry = w.finish(src.classes(), &extra)?;
                stats.bytes += entry.bytes;
                written.push(entry);
            }
        }
        if cur.is_none() {
            if stats.shards >= MAX_SHARDS {
                return Err(SourceError::format(
                    out,
                    format!("more than {MAX_SHARDS} shards"),
                ));
            }
            let name = format!("{SHARD_PREFIX}{:06}.tar", stats.shards);
            cur = Some(ShardWriter::create(out.join(name))?);
            stats.shards += 1;
        }
        if let Some(w) = cur.as_mut() {
            if extra.is_empty() {
                w.add(&key, ext, &image, label)?;
            } else {
                let label = fields.contains(Field::Class).then_some(label);
                w.add_fields(&key, ext, &image, label, &parts)?;
            }
        }
        stats.records += 1;
        progress(i + 1, total);
    }
    if let Some(w) = cur.take() {
        let entry = w.finish(src.classes(), &extra)?;
        stats.bytes += entry.bytes;
        written.push(entry);
    }
    // Last, once every shard and index is whole: a folder without it is unfinished.
    let manifest = out.join(MANIFEST_NAME);
    crate::durable::write_bytes(&manifest, &Manifest::new(written).to_json())
        .map_err(|e| SourceError::io(&manifest, e))?;
    Ok(stats)
}

/// The index's fields for a source with more than image and class (empty otherwise,
/// so that a classification pack writes what it always wrote).
fn field_index(src: &dyn Source) -> FieldIndex {
    let fields = src.fields();
    let beyond: Vec<String> = fields
        .iter()
        .filter(|f| !matches!(f, Field::Image | Field::Class))
        .map(|f| f.name().to_string())
        .collect();
    if beyond.is_empty() {
        return FieldIndex::default();
    }
    let schema = src.keypoint_schema();
    FieldIndex {
        fields: beyond,
        members: Vec::new(),
        // Class numbers below the class count: the reader numbers classes up to it.
        max_class: src.classes().len().checked_sub(1).map(|m| m as u32),
        keypoints: schema.map(|s| s.len()),
        keypoint_names: schema.map(|s| s.names.clone()).unwrap_or_default(),
    }
}

/// A sample's fields as tar members: the caption as `txt`, labels, boxes, keypoints
/// and `meta` as `json`, the mask as `mask.png`.
fn member_parts(ann: &Annotation, k: usize) -> Result<Vec<(&'static str, Vec<u8>)>, Why> {
    let mut parts = Vec::new();
    if let Some(t) = &ann.text {
        parts.push(("txt", t.as_bytes().to_vec()));
    }
    let json_part = Annotation {
        text: None,
        mask: None,
        ..ann.clone()
    };
    if json_part != Annotation::default() {
        let bytes = crate::source::manifest::fields_json(None, &json_part, k)?;
        parts.push(("json", bytes));
    }
    match &ann.mask {
        None => {}
        Some(MaskData::Png(bytes)) => parts.push(("mask.png", bytes.clone())),
        Some(MaskData::Raw {
            width,
            height,
            data,
        }) => parts.push(("mask.png", grey_png(*width, *height, data)?)),
    }
    Ok(parts)
}

/// A class map as a greyscale PNG (what the readers decode back to the same bytes).
pub(crate) fn grey_png(width: usize, height: usize, data: &[u8]) -> Result<Vec<u8>, Why> {
    use image::ImageEncoder;
    let (w, h) = (
        u32::try_from(width).map_err(|_| format!("a mask {width} wide"))?,
        u32::try_from(height).map_err(|_| format!("a mask {height} high"))?,
    );
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(data, w, h, image::ExtendedColorType::L8)
        .map_err(|e| Why::because(format!("encoding the mask as PNG: {e}"), e))?;
    Ok(out)
}
