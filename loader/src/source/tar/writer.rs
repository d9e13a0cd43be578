//! Packing any source into WebDataset tar shards: `KEY.jpg`/`KEY.png` and `KEY.cls`
//! per sample, shards of at most a given size, each written under a temporary name,
//! flushed and renamed (so a shard name is always a whole shard), followed by its
//! sidecar index `SHARD.tar.idx`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::index::{IndexedSample, ShardIndex, INDEX_SUFFIX};
use crate::source::{RecordKind, Source, SourceError};

/// Shards are named `shard-000000.tar`, `shard-000001.tar`, ...
pub const SHARD_PREFIX: &str = "shard-";
/// The most shards one pack writes.
const MAX_SHARDS: usize = 1_000_000;

/// What a finished tar pack wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TarPackStats {
    pub records: usize,
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
    let bad = |reason: String| SourceError::Record {
        what: what.to_string(),
        reason,
    };
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
                .map_err(|e| bad(format!("encoding {width}x{height}x{channels} as PNG: {e}")))?;
            Ok((out, "png"))
        }
    }
}

/// One shard being written.
struct ShardWriter {
    path: PathBuf,
    tmp: PathBuf,
    builder: Option<::tar::Builder<BufWriter<File>>>,
    pos: u64,
    samples: Vec<IndexedSample>,
}

impl ShardWriter {
    fn create(path: PathBuf) -> Result<Self, SourceError> {
        let tmp = crate::durable::temp_name(&path);
        let file = File::create(&tmp).map_err(|e| SourceError::io(&tmp, e))?;
        let mut builder = ::tar::Builder::new(BufWriter::with_capacity(1 << 20, file));
        builder.mode(::tar::HeaderMode::Deterministic);
        Ok(ShardWriter {
            path,
            tmp,
            builder: Some(builder),
            pos: 0,
            samples: Vec::new(),
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

    /// Ends the archive, syncs and renames it, then writes its index.
    fn finish(mut self, classes: &[String]) -> Result<u64, SourceError> {
        let io = |e| SourceError::io(&self.tmp, e);
        let builder = self
            .builder
            .take()
            .ok_or_else(|| SourceError::format(&self.path, "shard already finished"))?;
        let mut out = builder.into_inner().map_err(io)?;
        out.flush().map_err(io)?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| SourceError::io(&self.path, e))?;
        let samples = std::mem::take(&mut self.samples);
        let idx = ShardIndex::new(bytes, classes.to_vec(), samples);
        let mut side = self.path.as_os_str().to_os_string();
        side.push(INDEX_SUFFIX);
        let side = PathBuf::from(side);
        crate::durable::write_bytes(&side, &idx.to_json())
            .map_err(|e| SourceError::io(&side, e))?;
        Ok(bytes)
    }
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        // Unfinished: remove the partial shard (a killed process leaves only a
        // temporary name, never a shard name).
        if self.builder.take().is_some() {
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
    std::fs::create_dir_all(out).map_err(|e| SourceError::io(out, e))?;
    for entry in std::fs::read_dir(out).map_err(|e| SourceError::io(out, e))? {
        let entry = entry.map_err(|e| SourceError::io(out, e))?;
        if super::is_tar_name(&entry.file_name().to_string_lossy()) {
            return Err(SourceError::format(
                out,
                "the folder holds .tar files already (shards of another pack would mix in): \
                 give an empty or new folder",
            ));
        }
    }
    let width = total.to_string().len().max(8);
    let mut stats = TarPackStats {
        records: 0,
        shards: 0,
        bytes: 0,
    };
    let mut buf = Vec::new();
    let mut cur: Option<ShardWriter> = None;
    for i in 0..total {
        let kind = src.read(i, &mut buf)?;
        let (image, ext) = encoded(kind, &buf, &src.describe(i))?;
        let label = src.label(i);
        let key = format!("{i:0width$}");
        let need = 512 + padded(image.len() as u64) + 1024;
        if cur
            .as_ref()
            .is_some_and(|w| !w.samples.is_empty() && w.pos + need + 1024 > shard_bytes)
        {
            if let Some(w) = cur.take() {
                stats.bytes += w.finish(src.classes())?;
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
            w.add(&key, ext, &image, label)?;
        }
        stats.records += 1;
        progress(i + 1, total);
    }
    if let Some(w) = cur.take() {
        stats.bytes += w.finish(src.classes())?;
    }
    crate::durable::sync_parent(&out.join("x")).map_err(|e| SourceError::io(out, e))?;
    Ok(stats)
}
