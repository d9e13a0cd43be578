//! Opening remote shards: each shard's index from its sidecar `SHARD.tar.idx`, else
//! from the cache folder, else by streaming the shard once through the header scan.
//!
//! This stays apart from `open_local` (in `mod.rs`) on purpose: a local shard is
//! indexed by seeking from header to header, which costs a request per member on a
//! store, so a remote one is streamed once (or not read at all, given its index).
//! Both make the same `TarSource`, and `detect.rs` picks between them by the kind of
//! place.

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;

use super::index::{scan, ShardIndex, INDEX_SUFFIX};
use super::{check_end, Shard, ShardData, TarSource};
use crate::source::{SourceError, Why};
use crate::storage::{self, Cache, Object, StorageError};

/// Shards whose indexes are fetched at once.
const PARALLEL_INDEX_LOADS: usize = 16;

/// A blocking reader over a stream of chunks pumped by a task on the storage runtime.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, StorageError>>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                // The storage error itself, not its text: the scan's error keeps this
                // I/O error, whose `get_ref` is the storage error (its `source` skips
                // to the storage error's own source, the client's).
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur[..n]);
        let _ = self.cur.split_to(n);
        Ok(n)
    }
}

fn remote_err(url: String, reason: String) -> SourceError {
    SourceError::remote(url, reason)
}

/// Indexes `obj` by reading it whole: from the cache's copy when it fits there (the
/// copy then serves later reads too), else streamed through the header scan.
async fn index_by_reading(obj: &Object, cache: Option<&Cache>) -> Result<ShardIndex, SourceError> {
    let size = obj.size;
    let url = obj.url();
    let local = match cache {
        Some(c) => c.local_copy(obj).await?,
        None => None,
    };
    let scanned = match local {
        Some(path) => {
            tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&path).map_err(Why::of)?;
                let mut archive = ::tar::Archive::new(&file);
                let entries = archive.entries_with_seek().map_err(Why::of)?;
                scan(entries, Some(size))
            })
            .await
        }
        None => {
            let mut stream = obj.stream().await?;
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tokio::spawn(async move {
                while let Some(chunk) = stream.next().await {
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
            });
            tokio::task::spawn_blocking(move || {
                let reader = ChannelReader {
                    rx,
                    cur: Bytes::new(),
                };
                let mut archive = ::tar::Archive::new(reader);
                let entries = archive.entries().map_err(Why::of)?;
                scan(entries, Some(size))
            })
            .await
        }
    };
    let (samples, extra, end) = scanned
        .map_err(|e| remote_err(url.clone(), format!("indexing failed: {e}")).caused_by(e))?
        .map_err(|w| w.remote(url.clone()))?;
    check_end(end, size).map_err(|r| remote_err(url.clone(), r))?;
    Ok(ShardIndex::new(size, Vec::new(), samples).with_fields(extra))
}

/// The index of one remote shard.
async fn load_index(obj: &Object, cache: Option<&Cache>) -> Result<ShardIndex, SourceError> {
    let side_key = format!("{}{INDEX_SUFFIX}", obj.key);
    match obj.bucket.head(&side_key).await {
        Ok(side) => {
            let bytes = side.get().await?;
            return ShardIndex::parse_why(&bytes, obj.size).map_err(|w| w.remote(side.url()));
        }
        Err(StorageError::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(idx) = cache
        .and_then(|c| c.load_index(obj))
        .and_then(|b| ShardIndex::parse(&b, obj.size).ok())
    {
        return Ok(idx);
    }
    eprintln!(
        "stoker: {}: no index ({}{INDEX_SUFFIX}); reading the whole shard once to index it{}",
        obj.url(),
        obj.key.rsplit('/').next().unwrap_or(&obj.key),
        if cache.is_some() {
            " (kept in the cache)"
        } else {
            ""
        }
    );
    let idx = index_by_reading(obj, cache).await?;
    if let Some(c) = cache {
        c.store_index(obj, &idx.to_json())?;
    }
    Ok(idx)
}

impl TarSource {
    /// Opens remote shards: `objects` in shard order, `what` naming the data set.
    pub fn open_remote(
        objects: Vec<Object>,
        what: &str,
        cache: Option<Arc<Cache>>,
    ) -> Result<TarSource, SourceError> {
        let jobs = objects.into_iter().enumerate().map(move |(i, obj)| {
            let cache = cache.clone();
            async move {
                let idx = load_index(&obj, cache.as_deref()).await;
                (i, obj, cache, idx)
            }
        });
        let mut loaded = storage::wait(async move {
            futures_util::stream::iter(jobs)
                .buffer_unordered(PARALLEL_INDEX_LOADS)
                .collect::<Vec<_>>()
                .await
        })?;
        loaded.sort_by_key(|(i, ..)| *i);
        let mut shards = Vec::with_capacity(loaded.len());
        for (_, object, cache, idx) in loaded {
            shards.push((
                Shard {
                    name: super::printable(&object.url()),
                    data: ShardData::Remote { object, cache },
                    stamp: None,
                },
                idx?,
            ));
        }
        TarSource::assemble(what, shards)
    }
}
