//! Files named by an annotation (a manifest line, a COCO image, a mask) that may live
//! on disk or behind a URL: a [`Base`] resolves names relative to a folder or prefix
//! into [`Place`]s, which read whole.

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
        buf.clear();
        match self {
            Place::Local(path) => {
                use std::io::Read;
                let mut file = std::fs::File::open(path).map_err(|e| SourceError::io(path, e))?;
                file.read_to_end(buf)
                    .map_err(|e| SourceError::io(path, e))?;
            }
            #[cfg(feature = "remote")]
            Place::Remote(obj) => {
                let obj = obj.clone();
                let cache = base.cache();
                let mut owned = std::mem::take(buf);
                let (r, owned) = crate::storage::wait(async move {
                    let r =
                        crate::storage::read_into(&obj, cache.as_deref(), 0..obj.size, &mut owned)
                            .await;
                    (r, owned)
                })?;
                *buf = owned;
                r?;
            }
        }
        #[cfg(not(feature = "remote"))]
        let _ = base;
        if buf.is_empty() {
            return Err(SourceError::record(self.describe(), "empty file"));
        }
        Ok(())
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
