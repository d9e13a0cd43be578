//! `--cache DIR`: whole remote objects (tar shards, images) kept on local disk for
//! later epochs, least recently used first out when the size bound is reached.
//!
//! A cached object is named by a hash of its URL, size and version tag, so a changed
//! object is fetched again and a later process reuses what an earlier one left. Files
//! appear whole or not at all (written under a temporary name, then renamed), and one
//! object is fetched once even when many reads ask for it at the same moment. Indexes
//! built by streaming a shard are kept under `DIR/index/`, outside the bound.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;

use super::{Object, StorageError};

struct Entry {
    size: u64,
    used: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    total: u64,
    tick: u64,
}

/// A size-bounded local copy of remote objects.
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    /// One lock per object being fetched, so concurrent readers wait for one download.
    fills: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .field("bytes", &self.bytes())
            .finish()
    }
}

fn cache_err(path: &Path, what: &str, e: std::io::Error) -> StorageError {
    StorageError::Cache {
        path: path.to_path_buf(),
        what: what.to_string(),
        source: e,
    }
}

/// The file name an object is cached under.
fn name_of(obj: &Object) -> String {
    let key = format!(
        "{}\u{0}{}\u{0}{}",
        obj.url(),
        obj.size,
        obj.version.as_deref().unwrap_or("")
    );
    format!("{:016x}.obj", xxhash_rust::xxh3::xxh3_64(key.as_bytes()))
}

impl Cache {
    /// Opens (creating) the cache folder `dir` bounded to `max_bytes`, adopting the
    /// objects an earlier run left there (oldest first out).
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Arc<Cache>, StorageError> {
        std::fs::create_dir_all(dir.join("index"))
            .map_err(|e| cache_err(dir, "creating the cache folder", e))?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| cache_err(dir, "listing the cache", e))? {
            let entry = entry.map_err(|e| cache_err(dir, "listing the cache", e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() && name.ends_with(".obj") {
                let mtime = meta.modified().ok();
                found.push((mtime, name, meta.len()));
            }
        }
        // Fetches that a killed process left half-written; those of live processes
        // sharing the folder are theirs to finish.
        crate::durable::remove_stale_temps(dir, &[""]);
        found.sort();
        let cache = Cache {
            dir: dir.to_path_buf(),
            max_bytes,
            state: Mutex::new(State::default()),
            fills: Mutex::new(HashMap::new()),
        };
        {
            let mut st = cache.lock();
            for (_, name, size) in found {
                st.tick += 1;
                let used = st.tick;
                st.total += size;
                st.entries.insert(name, Entry { size, used });
            }
            cache.evict(&mut st, 0);
        }
        Ok(Arc::new(cache))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a table of sizes: a panic elsewhere cannot leave it unusable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.lock().total
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes least recently used objects until `incoming` more bytes fit.
    fn evict(&self, st: &mut State, incoming: u64) {
        while st.total + incoming > self.max_bytes && !st.entries.is_empty() {
            let Some(oldest) = st
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            if let Some(e) = st.entries.remove(&oldest) {
                st.total -= e.size;
            }
            // A reader that has the file open keeps reading it (Unix); one that opens
            // it after this falls back to the store.
            let _ = std::fs::remove_file(self.dir.join(&oldest));
        }
    }

    /// Whether `obj` is small enough to keep (half the bound, so two shards fit).
    pub fn admits(&self, obj: &Object) -> bool {
        obj.size <= self.max_bytes / 2
    }

    /// The local copy of `obj`, fetching it first when it is not cached; `None` when
    /// the object is too big for the cache.
    pub async fn local_copy(&self, obj: &Object) -> Result<Option<PathBuf>, StorageError> {
        if !self.admits(obj) {
            return Ok(None);
        }
        let name = name_of(obj);
        let path = self.dir.join(&name);
        if self.touch(&name) {
            return Ok(Some(path));
        }
        // Keyed by process too: a forked child must not wait for a fill whose task
        // stayed in the parent.
        let fill_key = format!("{}:{name}", std::process::id());
        let fill = {
            let mut fills = self.fills.lock().unwrap_or_else(|p| p.into_inner());
            fills.entry(fill_key.clone()).or_default().clone()
        };
        let _guard = fill.lock().await;
        let out = self.fill(obj, &name, &path).await;
        self.fills
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fill_key);
        out.map(Some)
    }

    /// Fetches `obj` into `path` (unless a concurrent fill just did) and records it.
    async fn fill(&self, obj: &Object, name: &str, path: &Path) -> Result<PathBuf, StorageError> {
        if self.touch(name) {
            return Ok(path.to_path_buf());
        }
        let tmp = crate::durable::temp_name(path);
        if let Err(e) = self.fetch(obj, &tmp).await {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let mut st = self.lock();
        self.evict(&mut st, obj.size);
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            cache_err(path, "storing a fetched object", e)
        })?;
        st.tick += 1;
        let used = st.tick;
        if let Some(old) = st.entries.insert(
            name.to_string(),
            Entry {
                size: obj.size,
                used,
            },
        ) {
            st.total -= old.size;
        }
        st.total += obj.size;
        Ok(path.to_path_buf())
    }

    /// Marks `name` used; false when it is not cached.
    fn touch(&self, name: &str) -> bool {
        let mut st = self.lock();
        st.tick += 1;
        let tick = st.tick;
        match st.entries.get_mut(name) {
            Some(e) if self.dir.join(name).is_file() => {
                e.used = tick;
                true
            }
            Some(_) => {
                if let Some(e) = st.entries.remove(name) {
                    st.total -= e.size;
                }
                false
            }
            None => false,
        }
    }

    async fn fetch(&self, obj: &Object, tmp: &Path) -> Result<(), StorageError> {
        let mut file = File::create(tmp).map_err(|e| cache_err(tmp, "creating a cache file", e))?;
        let mut stream = obj.stream().await?;
        let mut got = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            got += chunk.len() as u64;
            file.write_all(&chunk)
                .map_err(|e| cache_err(tmp, "writing a cache file", e))?;
        }
        if got != obj.size {
            return Err(StorageError::Request {
                url: obj.url(),
                what: "GET".into(),
                reason: format!(
                    "got {got} bytes, expected {} (the object changed?)",
                    obj.size
                ),
                source: None,
            });
        }
        file.sync_all()
            .map_err(|e| cache_err(tmp, "writing a cache file", e))?;
        Ok(())
    }

    /// Reads bytes `range` of `obj` into `buf` from the local copy, fetching the
    /// object whole first if needed. False (and `buf` untouched) when the object is
    /// too big to cache or its copy vanished: read it from the store then.
    pub async fn read_into(
        &self,
        obj: &Object,
        range: Range<u64>,
        buf: &mut Vec<u8>,
    ) -> Result<bool, StorageError> {
        let Some(path) = self.local_copy(obj).await? else {
            return Ok(false);
        };
        let Ok(file) = File::open(&path) else {
            return Ok(false);
        };
        let len = (range.end - range.start) as usize;
        buf.clear();
        buf.resize(len, 0);
        match crate::positioned::read_at(&file, buf, range.start) {
            Ok(true) => Ok(true),
            Ok(false) => {
                buf.clear();
                Err(StorageError::Request {
                    url: obj.url(),
                    what: format!(
                        "reading bytes {}..{} of the cached copy",
                        range.start, range.end
                    ),
                    reason: format!("{} is shorter", path.display()),
                    source: None,
                })
            }
            Err(e) => {
                buf.clear();
                Err(cache_err(&path, "reading a cached object", e))
            }
        }
    }

    /// A stored index for `obj` (see [`store_index`](Self::store_index)).
    pub fn load_index(&self, obj: &Object) -> Option<Vec<u8>> {
        std::fs::read(self.index_path(obj)).ok()
    }

    /// Keeps `bytes`, an index built for `obj`, for later runs.
    pub fn store_index(&self, obj: &Object, bytes: &[u8]) -> Result<(), StorageError> {
        let path = self.index_path(obj);
        crate::durable::write_bytes(&path, bytes)
            .map_err(|e| cache_err(&path, "storing an index", e))
    }

    fn index_path(&self, obj: &Object) -> PathBuf {
        self.dir
            .join("index")
            .join(name_of(obj).replace(".obj", ".idx"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{wait, Bucket, RemoteOptions};

    fn object(dir: &Path, name: &str, fill: u8) -> Object {
        let path = dir.join(name);
        std::fs::write(&path, vec![fill; 400]).unwrap();
        let url = format!("file://{}", path.display());
        let (bucket, key) = Bucket::open(&url, &RemoteOptions::default()).unwrap();
        wait(async move { bucket.head(&key).await })
            .unwrap()
            .unwrap()
    }

    fn read(cache: &Arc<Cache>, obj: &Object, range: Range<u64>) -> Vec<u8> {
        let (c, o) = (cache.clone(), obj.clone());
        wait(async move {
            let mut buf = Vec::new();
            assert!(c.read_into(&o, range, &mut buf).await.unwrap());
            buf
        })
        .unwrap()
    }

    #[test]
    fn keeps_objects_within_the_bound_least_recently_used_out() {
        let src = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let objs: Vec<Object> = (0..3)
            .map(|i| object(src.path(), &format!("o{i}"), i as u8))
            .collect();
        // 1000 bytes: two objects of 400 fit, a third evicts the least recently used.
        let cache = Cache::open(dir.path(), 1000).unwrap();
        assert_eq!(read(&cache, &objs[0], 10..20), vec![0u8; 10]);
        assert_eq!(read(&cache, &objs[1], 0..400), vec![1u8; 400]);
        assert_eq!(read(&cache, &objs[0], 0..1), vec![0u8; 1]);
        assert_eq!(read(&cache, &objs[2], 399..400), vec![2u8; 1]);
        assert_eq!(cache.bytes(), 800);
        let kept = |c: &Cache| -> Vec<bool> {
            objs.iter()
                .map(|o| c.dir().join(name_of(o)).is_file())
                .collect()
        };
        assert_eq!(
            kept(&cache),
            [true, false, true],
            "o1 was least recently used"
        );
        // The source changes: a new version is another cache entry, never stale bytes.
        std::fs::write(src.path().join("o0"), vec![9u8; 400]).unwrap();
        let changed = object(src.path(), "o0", 9);
        assert_eq!(read(&cache, &changed, 0..2), vec![9u8; 2]);
        // A later process adopts what is there, within its own bound.
        drop(cache);
        let again = Cache::open(dir.path(), 500).unwrap();
        assert!(again.bytes() <= 500);
        // An object over half the bound is not kept: read it from the store.
        let small = Cache::open(&dir.path().join("small"), 600).unwrap();
        let o = objs[2].clone();
        let served = wait(async move {
            let mut buf = Vec::new();
            small.read_into(&o, 0..4, &mut buf).await.unwrap()
        })
        .unwrap();
        assert!(!served);
    }
}
