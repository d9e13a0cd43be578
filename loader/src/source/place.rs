//! Files that may live on disk or behind a URL: one [`Place`], several of one data set
//! ([`Files`]: tar shards, Parquet files, an image folder's images), and a [`Base`]
//! that resolves names an annotation gives (a manifest line, a COCO image, a mask)
//! relative to a folder or prefix. A local file is read with plain file I/O on the
//! caller's thread; only a remote one goes through the storage runtime.

use std::path::{Path, PathBuf};

use super::{is_url, OpenOptions, SourceError};

/// One file: a local path, or a remote object (listed with its size).
#[derive(Clone, Debug)]
pub enum Place {
    /// A file on the local file system.
    Local(PathBuf),
    /// An object in a store, as its listing found it.
    #[cfg(feature = "remote")]
    Remote(crate::storage::Object),
}

impl Place {
    /// The path or URL, for messages.
    pub fn describe(&self) -> String {
        match self {
            Place::Local(p) => p.display().to_string(),
            #[cfg(feature = "remote")]
            Place::Remote(o) => o.url(),
        }
    }

    /// Reads the whole file into `buf` (cleared first). An empty file is an error.
    pub fn read(&self, base: &Base, buf: &mut Vec<u8>) -> Result<(), SourceError> {
        #[cfg(not(feature = "remote"))]
        let _ = base;
        match self {
            Place::Local(path) => read_local(path, buf),
            #[cfg(feature = "remote")]
            Place::Remote(obj) => read_remote(obj, base.cache(), buf),
        }
    }
}

/// Reads the whole local file `path` into `buf` (cleared first). An empty file, or
/// anything but a regular file (a FIFO would block the reader), is an error naming it.
pub(crate) fn read_local(path: &Path, buf: &mut Vec<u8>) -> Result<(), SourceError> {
    use std::io::Read;
    buf.clear();
    let mut file = super::open_regular(path)?;
    // read_to_end reserves from the file's size and only grows `buf` when the file is
    // larger than its capacity, so a recycled buffer is not reallocated.
    file.read_to_end(buf)
        .map_err(|e| SourceError::io(path, e))?;
    if buf.is_empty() {
        return Err(SourceError::record(
            path.display().to_string(),
            "empty file",
        ));
    }
    Ok(())
}

/// Reads the whole object `obj` into `buf` (cleared first) through `cache` when there
/// is one, waiting on the storage runtime. An empty object is an error naming it.
#[cfg(feature = "remote")]
pub(crate) fn read_remote(
    obj: &crate::storage::Object,
    cache: Option<std::sync::Arc<crate::storage::Cache>>,
    buf: &mut Vec<u8>,
) -> Result<(), SourceError> {
    buf.clear();
    let object = obj.clone();
    let mut owned = std::mem::take(buf);
    let (r, owned) = crate::storage::wait(async move {
        let r =
            crate::storage::read_into(&object, cache.as_deref(), 0..object.size, &mut owned).await;
        (r, owned)
    })?;
    *buf = owned;
    r?;
    nonempty(obj, buf)
}

/// [`read_remote`] as a future on the storage runtime, holding no thread while it
/// waits: the outcome and the buffer back.
#[cfg(feature = "remote")]
pub(crate) async fn read_remote_async(
    obj: crate::storage::Object,
    cache: Option<std::sync::Arc<crate::storage::Cache>>,
    mut buf: Vec<u8>,
) -> (Result<(), SourceError>, Vec<u8>) {
    buf.clear();
    let task = crate::storage::spawn(async move {
        let r = crate::storage::read_into(&obj, cache.as_deref(), 0..obj.size, &mut buf).await;
        (r, buf, obj)
    });
    match task.await {
        Ok((r, buf, obj)) => {
            let out = r
                .map_err(SourceError::from)
                .and_then(|()| nonempty(&obj, &buf));
            (out, buf)
        }
        Err(e) => (Err(e.into()), Vec::new()),
    }
}

#[cfg(feature = "remote")]
fn nonempty(obj: &crate::storage::Object, buf: &[u8]) -> Result<(), SourceError> {
    if buf.is_empty() {
        return Err(SourceError::record(obj.url(), "empty file"));
    }
    Ok(())
}

/// The files of one data set, all local or all objects of one store, in the data set's
/// order. One list of paths or of objects, so a local set costs what its paths cost.
#[derive(Clone, Debug)]
pub enum Files {
    /// Local files.
    Local(Vec<PathBuf>),
    /// Objects, as listed or HEADed.
    #[cfg(feature = "remote")]
    Remote(Vec<crate::storage::Object>),
}

impl From<Place> for Files {
    fn from(place: Place) -> Files {
        match place {
            Place::Local(p) => Files::Local(vec![p]),
            #[cfg(feature = "remote")]
            Place::Remote(o) => Files::Remote(vec![o]),
        }
    }
}

impl Files {
    /// The number of files.
    pub fn len(&self) -> usize {
        match self {
            Files::Local(v) => v.len(),
            #[cfg(feature = "remote")]
            Files::Remote(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file names (local paths, object keys), in order.
    pub fn names(&self) -> Vec<std::borrow::Cow<'_, str>> {
        match self {
            Files::Local(v) => v.iter().map(|p| p.to_string_lossy()).collect(),
            #[cfg(feature = "remote")]
            Files::Remote(v) => v.iter().map(|o| o.key.as_str().into()).collect(),
        }
    }

    /// The path or URL of file `i`, for messages.
    pub fn describe(&self, i: usize) -> Option<String> {
        match self {
            Files::Local(v) => v.get(i).map(|p| p.display().to_string()),
            #[cfg(feature = "remote")]
            Files::Remote(v) => v.get(i).map(|o| o.url()),
        }
    }
}

/// Where relative names are looked up: a local folder, or a URL prefix whose objects
/// were listed once.
#[derive(Debug)]
pub enum Base {
    /// A local folder.
    Local(PathBuf),
    /// A URL prefix, listed when it was opened.
    #[cfg(feature = "remote")]
    Remote {
        /// The prefix's URL, ending in `/`.
        url: String,
        /// The store the prefix is in.
        bucket: crate::storage::Bucket,
        /// The key prefix, ending in `/` (or empty).
        prefix: String,
        /// Every object under the prefix, by key.
        objects: std::collections::HashMap<String, crate::storage::Object>,
        /// The local copy reads go through, when one was asked for.
        cache: Option<std::sync::Arc<crate::storage::Cache>>,
    },
}

impl Base {
    /// The folder or prefix `location` (a path or URL), listed once when remote.
    pub fn open(location: &str, options: &OpenOptions) -> Result<Base, SourceError> {
        if !is_url(location) {
            return Ok(Base::Local(PathBuf::from(location)));
        }
        #[cfg(feature = "remote")]
        {
            use crate::storage::{self, Bucket, Cache};
            let (bucket, key) = Bucket::open(location, &options.remote)?;
            let mut prefix = key;
            if !prefix.is_empty() && !prefix.ends_with('/') {
                prefix.push('/');
            }
            let b = bucket.clone();
            let p = prefix.clone();
            let listed = storage::wait(async move { b.list(&p).await })??;
            let cache = match &options.cache {
                Some(dir) => Some(Cache::open(dir, options.cache_bytes)?),
                None => None,
            };
            let url = bucket.url_of(&prefix);
            Ok(Base::Remote {
                url,
                bucket,
                prefix,
                objects: listed.into_iter().map(|o| (o.key.clone(), o)).collect(),
                cache,
            })
        }
        #[cfg(not(feature = "remote"))]
        {
            let _ = options;
            Err(SourceError::remote(
                location.to_string(),
                "URLs need stoker-loader's `remote` feature (this build has it off)",
            ))
        }
    }

    /// The folder of a file, for names relative to it: the parent of a local path,
    /// the prefix of a URL up to its last `/`.
    pub fn parent_of(location: &str) -> String {
        if is_url(location) {
            match location.rfind('/') {
                Some(i) => location[..=i].to_string(),
                None => location.to_string(),
            }
        } else {
            Path::new(location)
                .parent()
                .map(|p| p.display().to_string())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| ".".into())
        }
    }

    /// The base's own path or URL, for messages.
    pub fn describe(&self) -> String {
        match self {
            Base::Local(p) => p.display().to_string(),
            #[cfg(feature = "remote")]
            Base::Remote { url, .. } => url.clone(),
        }
    }

    /// The file `name` (relative to the base; an absolute path or a URL is taken as
    /// it is when local). A remote name not in the listing is an error naming it.
    pub fn resolve(&self, name: &str) -> Result<Place, String> {
        match self {
            Base::Local(dir) => {
                if is_url(name) {
                    return Err(format!(
                        "'{name}' is a URL, but the data set is local (give the data as a URL to read remote files)"
                    ));
                }
                Ok(Place::Local(dir.join(name)))
            }
            #[cfg(feature = "remote")]
            Base::Remote {
                url,
                prefix,
                objects,
                ..
            } => {
                let rel = name.trim_start_matches("./");
                let key = format!("{prefix}{rel}");
                objects
                    .get(&key)
                    .cloned()
                    .map(Place::Remote)
                    .ok_or_else(|| format!("no object '{rel}' under {url}"))
            }
        }
    }

    /// The names under the base (relative, sorted): a local folder's files
    /// (recursively) or the listed keys.
    pub fn names(&self) -> Result<Vec<String>, SourceError> {
        match self {
            Base::Local(dir) => {
                let mut out = Vec::new();
                walk(dir, dir, &mut out)?;
                out.sort();
                Ok(out)
            }
            #[cfg(feature = "remote")]
            Base::Remote {
                prefix, objects, ..
            } => {
                let mut out: Vec<String> = objects
                    .keys()
                    .filter_map(|k| k.strip_prefix(prefix.as_str()))
                    .filter(|k| !k.split('/').any(|p| p.starts_with('.')))
                    .map(str::to_string)
                    .collect();
                out.sort();
                Ok(out)
            }
        }
    }

    #[cfg(feature = "remote")]
    fn cache(&self) -> Option<std::sync::Arc<crate::storage::Cache>> {
        match self {
            Base::Remote { cache, .. } => cache.clone(),
            Base::Local(_) => None,
        }
    }
}

/// Every non-hidden file under `dir`, as names relative to `root`.
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), SourceError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::format(dir, "no such directory"))
        }
        Err(e) => return Err(SourceError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| SourceError::io(dir, e))?;
        if entry.file_name().as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(|e| SourceError::io(&path, e))?;
        if meta.is_dir() {
            walk(root, &path, out)?;
        } else if meta.is_file() {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    Ok(())
}

/// Reads a whole annotation file (a manifest, a COCO JSON) named by a path or URL.
pub fn read_file(location: &str, options: &OpenOptions) -> Result<Vec<u8>, SourceError> {
    if !is_url(location) {
        let path = Path::new(location);
        return std::fs::read(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SourceError::format(path, "no such file"),
            _ => SourceError::io(path, e),
        });
    }
    #[cfg(feature = "remote")]
    {
        use crate::storage::{self, Bucket};
        let (bucket, key) = Bucket::open(location, &options.remote)?;
        let bytes = storage::wait(async move {
            let obj = bucket.head(&key).await?;
            obj.get().await
        })??;
        Ok(bytes.to_vec())
    }
    #[cfg(not(feature = "remote"))]
    {
        let _ = options;
        Err(SourceError::remote(
            location.to_string(),
            "URLs need stoker-loader's `remote` feature (this build has it off)",
        ))
    }
}
