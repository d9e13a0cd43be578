//! A remote Parquet file as parquet's `ChunkReader`: column chunks fetched ahead by
//! ranged GETs (all of a row group's at once), anything else (the footer, a page
//! header past what was fetched) read on demand in blocks.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::source::Why;
use crate::storage::{self, Object};

/// The most bytes one on-demand GET asks for, past what the caller needs: a footer or a
/// page header is read in one request, not byte by byte.
const BLOCK: u64 = 64 << 10;

/// Ranges closer than this are fetched in one GET (fewer requests for a few wasted
/// bytes between column chunks).
const COALESCE: u64 = 1 << 20;

/// An object and the byte ranges of it already fetched.
#[derive(Clone)]
pub(super) struct Chunks {
    obj: Object,
    /// Fetched spans: (offset, bytes), sorted by offset, not overlapping.
    spans: Arc<Vec<(u64, Bytes)>>,
}

impl Chunks {
    pub(super) fn new(obj: Object) -> Chunks {
        Chunks {
            obj,
            spans: Arc::new(Vec::new()),
        }
    }

    pub(super) fn url(&self) -> String {
        self.obj.url()
    }

    pub(super) fn len(&self) -> u64 {
        self.obj.size
    }

    /// The object with `ranges` fetched (coalesced, several GETs in flight).
    pub(super) fn prefetch(&self, ranges: &[Range<u64>]) -> Result<Chunks, Why> {
        let mut sorted: Vec<Range<u64>> = ranges
            .iter()
            .filter(|r| !r.is_empty())
            .map(|r| r.start..r.end.min(self.obj.size))
            .collect();
        sorted.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::new();
        for r in sorted {
            match merged.last_mut() {
                Some(last) if r.start <= last.end + COALESCE => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        let obj = self.obj.clone();
        let want = merged.clone();
        let got = storage::wait(async move {
            use futures_util::StreamExt;
            futures_util::stream::iter(want.into_iter().map(|r| {
                let obj = obj.clone();
                async move { obj.get_range(r).await }
            }))
            .buffered(8)
            .collect::<Vec<_>>()
            .await
        })
        .map_err(Why::of)?;
        let mut spans = Vec::with_capacity(merged.len());
        for (r, bytes) in merged.into_iter().zip(got) {
            spans.push((r.start, bytes.map_err(Why::of)?));
        }
        Ok(Chunks {
            obj: self.obj.clone(),
            spans: Arc::new(spans),
        })
    }

    /// The object at `rel`, relative to this object's folder: HEAD, then GET.
    pub(super) fn read_beside(&self, rel: &str) -> Result<Bytes, Why> {
        if rel.starts_with('/') || rel.contains("://") {
            return Err(
                "a remote Parquet file's image paths must be relative to its folder".into(),
            );
        }
        let dir = self.obj.key.rsplit_once('/').map_or("", |(d, _)| d);
        let mut key = String::from(dir);
        for part in rel.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    let cut = key.rfind('/').unwrap_or(0);
                    key.truncate(cut);
                }
                p => {
                    if !key.is_empty() {
                        key.push('/');
                    }
                    key.push_str(p);
                }
            }
        }
        let bucket = self.obj.bucket.clone();
        storage::wait(async move { bucket.head(&key).await?.get().await })
            .and_then(|r| r)
            .map_err(Why::of)
    }

    /// The fetched bytes from `start` to the end of their span, if `start` is in one.
    fn fetched_from(&self, start: u64) -> Option<Bytes> {
        let i = self.spans.partition_point(|(off, _)| *off <= start);
        let (off, bytes) = self.spans.get(i.checked_sub(1)?)?;
        let at = usize::try_from(start - off).ok()?;
        (at < bytes.len()).then(|| bytes.slice(at..))
    }

    /// GET `range` now, from this thread.
    fn fetch(&self, range: Range<u64>) -> std::io::Result<Bytes> {
        let obj = self.obj.clone();
        storage::wait(async move { obj.get_range(range).await })
            .and_then(|r| r)
            .map_err(std::io::Error::other)
    }

    pub(super) fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if let Some(b) = self.fetched_from(start).filter(|b| b.len() >= length) {
            return Ok(b.slice(..length));
        }
        let end = start.saturating_add(length as u64);
        self.fetch(start..end)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }

    pub(super) fn get_read(&self, start: u64) -> Reader {
        Reader {
            chunks: self.clone(),
            pos: start,
            cur: Bytes::new(),
        }
    }
}

/// A reader from a position: fetched spans first, else GETs of [`BLOCK`] bytes.
pub(super) struct Reader {
    chunks: Chunks,
    pos: u64,
    cur: Bytes,
}

impl std::io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cur.is_empty() {
            let size = self.chunks.len();
            if self.pos >= size {
                return Ok(0);
            }
            self.cur = match self.chunks.fetched_from(self.pos) {
                Some(b) => b,
                None => {
                    let want = (buf.len() as u64).max(BLOCK);
                    self.chunks
                        .fetch(self.pos..self.pos.saturating_add(want).min(size))?
                }
            };
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        self.pos += n as u64;
        Ok(n)
    }
}
