//! Where a Parquet file's bytes come from: a local file read by positioned reads, or
//! (with the `remote` feature) an object read by ranged GETs; and the reads of whole
//! column chunks that a row group or the label column needs.

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::file::reader::{ChunkReader, Length};

#[cfg(feature = "remote")]
use super::remote;
use crate::source::{open_regular, SourceError, Why};

/// A file read by positioned reads. parquet's own reader for `File` seeks a cloned
/// descriptor, whose offset every clone shares: two workers decoding two row groups of
/// one file at once would read each other's bytes.
#[derive(Clone)]
pub(super) struct Pread(pub(super) Arc<File>);

/// A reader from a position of a [`Pread`] file.
pub(super) struct PreadAt {
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

impl Length for Pread {
    fn len(&self) -> u64 {
        self.0.metadata().map_or(0, |m| m.len())
    }
}

impl ChunkReader for Pread {
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

/// Where a file's bytes come from: a local file, or an object read by ranged GETs.
#[derive(Clone)]
pub(super) enum Backing {
    Local(PathBuf, Pread),
    #[cfg(feature = "remote")]
    Remote(remote::Chunks),
}

impl Backing {
    /// The file's path or URL, for messages.
    pub(super) fn name(&self) -> String {
        match self {
            Backing::Local(p, _) => p.display().to_string(),
            #[cfg(feature = "remote")]
            Backing::Remote(c) => c.url(),
        }
    }

    /// An error about the whole file.
    pub(super) fn error(&self, why: impl Into<Why>) -> SourceError {
        let why = why.into();
        match self {
            Backing::Local(p, _) => why.format(p),
            #[cfg(feature = "remote")]
            Backing::Remote(c) => why.remote(c.url()),
        }
    }

    /// Reads the file at `rel` (relative to this file's folder, or an absolute local
    /// path beside a local file) into `buf`.
    pub(super) fn read_beside(&self, rel: &str, buf: &mut Vec<u8>) -> Result<(), Why> {
        match self {
            Backing::Local(path, _) => {
                let full = match path.parent() {
                    Some(dir) => dir.join(rel),
                    None => PathBuf::from(rel),
                };
                use std::io::Read;
                open_regular(&full)
                    .map_err(Why::of)?
                    .read_to_end(buf)
                    .map(|_| ())
                    .map_err(|e| Why::because(format!("{}: {e}", full.display()), e))
            }
            #[cfg(feature = "remote")]
            Backing::Remote(c) => {
                let bytes = c.read_beside(rel)?;
                buf.extend_from_slice(&bytes);
                Ok(())
            }
        }
    }

    /// A reader of the file that has `ranges` (byte ranges of column chunks) at hand:
    /// a remote file fetches them first, all at once, so that decoding a row group
    /// costs one round of GETs and not one per page.
    pub(super) fn with_ranges(&self, ranges: &[Range<u64>]) -> Result<Backing, Why> {
        match self {
            Backing::Local(..) => {
                let _ = ranges;
                Ok(self.clone())
            }
            #[cfg(feature = "remote")]
            Backing::Remote(c) => Ok(Backing::Remote(c.prefetch(ranges)?)),
        }
    }
}

impl Length for Backing {
    fn len(&self) -> u64 {
        match self {
            Backing::Local(_, f) => f.len(),
            #[cfg(feature = "remote")]
            Backing::Remote(c) => c.len(),
        }
    }
}

impl ChunkReader for Backing {
    type T = Box<dyn std::io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            Backing::Local(_, f) => Ok(Box::new(f.get_read(start)?)),
            #[cfg(feature = "remote")]
            Backing::Remote(c) => Ok(Box::new(c.get_read(start))),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            Backing::Local(_, f) => f.get_bytes(start, length),
            #[cfg(feature = "remote")]
            Backing::Remote(c) => c.get_bytes(start, length),
        }
    }
}

/// The byte ranges of the column chunks of root columns `roots` in row groups `groups`.
pub(super) fn chunk_ranges(
    md: &parquet::file::metadata::ParquetMetaData,
    roots: &[usize],
    groups: impl Iterator<Item = usize>,
) -> Vec<Range<u64>> {
    let descr = md.file_metadata().schema_descr();
    let mut out = Vec::new();
    for g in groups {
        for (leaf, c) in md.row_group(g).columns().iter().enumerate() {
            if roots.contains(&descr.get_column_root_idx(leaf)) {
                let (start, len) = c.byte_range();
                out.push(start..start.saturating_add(len));
            }
        }
    }
    out
}

/// Every row of root column `root` of a file, in batches.
pub(super) fn read_column(
    file: &Backing,
    meta: &ArrowReaderMetadata,
    root: usize,
) -> Result<Vec<RecordBatch>, Why> {
    let md = meta.metadata();
    let at_hand = file.with_ranges(&chunk_ranges(md, &[root], 0..md.num_row_groups()))?;
    let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), [root]);
    ParquetRecordBatchReaderBuilder::new_with_metadata(at_hand, meta.clone())
        .with_projection(mask)
        .build()
        .map_err(Why::of)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(Why::of)
}
