//! A data argument's place, as the format detector (`detect.rs`) asks about it: a
//! local path or a key (or prefix) in an object store, which holds nothing, a file or
//! a folder. A local question goes straight to the file system on the caller's
//! thread; only a URL goes through the storage runtime.

use std::path::{Path, PathBuf};

use super::place::{Files, Place};
use super::{files, is_url, tar, OpenOptions, SourceError};

/// Where a data argument points.
pub(crate) enum Location {
    /// A local path.
    Local(PathBuf),
    /// A key in a store: an object, or a prefix when no object has that key.
    #[cfg(feature = "remote")]
    Remote {
        /// The store.
        bucket: crate::storage::Bucket,
        /// The key as the URL gives it (empty for a whole bucket).
        key: String,
        /// The URL as given, for messages.
        url: String,
    },
}

/// What a [`Location`] holds.
pub(crate) enum Found {
    /// Nothing: no file or folder, no object and no objects under the prefix.
    Nothing,
    /// One regular file or object.
    File(FileAt),
    /// A folder, or a prefix with objects under it.
    Folder(Folder),
}

/// One file or object that a data argument names, with its size.
pub(crate) struct FileAt {
    /// The file.
    pub place: Place,
    /// Its size in bytes.
    pub size: u64,
}

/// A folder, or a prefix as one listing found it.
pub(crate) enum Folder {
    /// A local folder.
    Local(PathBuf),
    /// A prefix of a store with every object under it (the listing is recursive).
    #[cfg(feature = "remote")]
    Remote {
        /// The store.
        bucket: crate::storage::Bucket,
        /// The key prefix, ending in `/` (or empty).
        prefix: String,
        /// Every object under the prefix.
        objects: Vec<crate::storage::Object>,
    },
}

impl Location {
    /// The place `arg` (a path or URL) names; a URL's store is configured here, nothing
    /// is read yet.
    pub(crate) fn new(path: &Path, options: &OpenOptions) -> Result<Location, SourceError> {
        let arg = path.to_string_lossy();
        if !is_url(&arg) {
            return Ok(Location::Local(path.to_path_buf()));
        }
        #[cfg(feature = "remote")]
        {
            let (bucket, key) = crate::storage::Bucket::open(&arg, &options.remote)?;
            Ok(Location::Remote {
                bucket,
                key,
                url: arg.into_owned(),
            })
        }
        #[cfg(not(feature = "remote"))]
        {
            let _ = options;
            Err(SourceError::remote(
                arg.into_owned(),
                "URLs need stoker-loader's `remote` feature (this build has it off)",
            ))
        }
    }

    /// An error about the data argument as a whole.
    pub(crate) fn error(&self, reason: impl Into<String>) -> SourceError {
        match self {
            Location::Local(p) => SourceError::format(p, reason),
            #[cfg(feature = "remote")]
            Location::Remote { url, .. } => SourceError::remote(url.clone(), reason),
        }
    }

    /// The error for a location that holds nothing.
    pub(crate) fn missing(&self) -> SourceError {
        match self {
            Location::Local(_) => self.error("no such file or directory"),
            #[cfg(feature = "remote")]
            Location::Remote { .. } => {
                self.error("no such object, and no objects under it as a prefix")
            }
        }
    }

    /// Whether the argument is a brace pattern or a glob rather than one name (a local
    /// file whose name only looks like one is itself).
    pub(crate) fn is_pattern(&self) -> bool {
        match self {
            Location::Local(p) => {
                let text = p.to_string_lossy();
                (tar::is_pattern(&text) || files::is_glob(&text)) && !p.exists()
            }
            #[cfg(feature = "remote")]
            Location::Remote { key, .. } => tar::is_pattern(key) || files::is_glob(key),
        }
    }

    /// The files a pattern names, in the pattern's order: each name is one file (a
    /// local one is checked when it is opened; a remote one is HEADed, all at once) or
    /// a glob's matches in its folder, sorted.
    pub(crate) fn expand(&self) -> Result<Files, SourceError> {
        match self {
            Location::Local(path) => {
                let text = path.to_string_lossy();
                let mut paths = Vec::new();
                for name in tar::expand(&text).map_err(|r| self.error(r))? {
                    if files::is_glob(&name) {
                        paths.extend(files::glob_local_why(&name).map_err(|w| w.format(path))?);
                    } else {
                        paths.push(PathBuf::from(name));
                    }
                }
                Ok(Files::Local(paths))
            }
            #[cfg(feature = "remote")]
            Location::Remote { bucket, key, .. } => {
                remote::expand(bucket, key, |r| self.error(r)).map(Files::Remote)
            }
        }
    }

    /// Looks at what the location holds: a local path's metadata; for a URL, a HEAD of
    /// its key and, when no object has it, a listing of the key as a prefix.
    pub(crate) fn probe(&self) -> Result<Found, SourceError> {
        match self {
            Location::Local(path) => {
                let meta = match std::fs::metadata(path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Ok(Found::Nothing)
                    }
                    Err(e) => return Err(SourceError::io(path, e)),
                };
                if meta.is_dir() {
                    return Ok(Found::Folder(Folder::Local(path.clone())));
                }
                if !meta.is_file() {
                    // A FIFO, socket or device: its size says nothing, and opening a
                    // FIFO would wait for a writer.
                    return Err(self.error(format!(
                        "{}, not a regular file: give a file or a folder of data",
                        crate::durable::node_kind(&meta)
                    )));
                }
                Ok(Found::File(FileAt {
                    place: Place::Local(path.clone()),
                    size: meta.len(),
                }))
            }
            #[cfg(feature = "remote")]
            Location::Remote { bucket, key, .. } => remote::probe(bucket, key),
        }
    }
}

impl FileAt {
    /// The file's name, lower-cased: its last path part or key part.
    pub(crate) fn name(&self) -> String {
        match &self.place {
            Place::Local(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().to_lowercase())
                .unwrap_or_default(),
            #[cfg(feature = "remote")]
            Place::Remote(o) => o.key.rsplit('/').next().unwrap_or("").to_lowercase(),
        }
    }

    /// Up to `n` bytes from the start of the file.
    pub(crate) fn head(&self, n: usize) -> Result<Vec<u8>, SourceError> {
        match &self.place {
            Place::Local(p) => read_head(p, n),
            #[cfg(feature = "remote")]
            Place::Remote(o) => {
                let obj = o.clone();
                let end = obj.size.min(n as u64);
                let bytes = crate::storage::wait(async move { obj.get_range(0..end).await })??;
                Ok(bytes.to_vec())
            }
        }
    }
}

/// Up to `n` bytes from the start of the local file `path`.
fn read_head(path: &Path, n: usize) -> Result<Vec<u8>, SourceError> {
    use std::io::Read;
    let mut file = super::open_regular(path)?.take(n as u64);
    let mut head = Vec::with_capacity(n);
    file.read_to_end(&mut head)
        .map_err(|e| SourceError::io(path, e))?;
    Ok(head)
}

impl Folder {
    /// Whether the file `rel` (a relative name with `/` separators) is in the folder.
    pub(crate) fn has_file(&self, rel: &str) -> bool {
        match self {
            Folder::Local(p) => p.join(rel).is_file(),
            #[cfg(feature = "remote")]
            Folder::Remote {
                prefix, objects, ..
            } => objects
                .iter()
                .any(|o| o.key.strip_prefix(prefix.as_str()) == Some(rel)),
        }
    }

    /// Whether the sub-folder `name` is in the folder (remote: any object under it).
    pub(crate) fn has_folder(&self, name: &str) -> bool {
        match self {
            Folder::Local(p) => p.join(name).is_dir(),
            #[cfg(feature = "remote")]
            Folder::Remote {
                prefix, objects, ..
            } => {
                let sub = format!("{prefix}{name}/");
                objects.iter().any(|o| o.key.starts_with(&sub))
            }
        }
    }

    /// The path or URL of the sub-folder `name`.
    pub(crate) fn sub(&self, name: &str) -> String {
        match self {
            Folder::Local(p) => p.join(name).to_string_lossy().into_owned(),
            #[cfg(feature = "remote")]
            Folder::Remote { bucket, prefix, .. } => bucket.url_of(&format!("{prefix}{name}/")),
        }
    }

    /// The `.tar` files directly in the folder, sorted, once checked against the
    /// folder's `shards.json` when it has one; `None` when it holds none or has
    /// sub-folders (as an image folder does).
    pub(crate) fn shards(&self) -> Result<Option<Files>, SourceError> {
        match self {
            Folder::Local(p) => {
                let Some(shards) = tar::shards_in(p)? else {
                    return Ok(None);
                };
                tar::check_manifest(p, &shards)?;
                Ok(Some(Files::Local(shards)))
            }
            #[cfg(feature = "remote")]
            Folder::Remote {
                bucket,
                prefix,
                objects,
            } => remote::shards(bucket, prefix, objects),
        }
    }

    /// The Parquet files under the folder, as sorted names relative to it, at most
    /// [`files::HUB_DEPTH`] parts deep, hidden ones left out.
    pub(crate) fn parquet_names(&self) -> Result<Vec<String>, SourceError> {
        match self {
            Folder::Local(p) => files::parquet_names_under(p).map_err(|e| SourceError::io(p, e)),
            #[cfg(feature = "remote")]
            Folder::Remote {
                prefix, objects, ..
            } => {
                let mut names: Vec<String> = objects
                    .iter()
                    .filter_map(|o| o.key.strip_prefix(prefix.as_str()))
                    .filter(|rest| {
                        super::parquet::is_parquet_name(rest)
                            && rest.split('/').count() <= files::HUB_DEPTH
                            && !rest.split('/').any(|p| p.starts_with('.'))
                    })
                    .map(str::to_string)
                    .collect();
                names.sort();
                Ok(names)
            }
        }
    }

    /// The files `rels` (names relative to the folder), in that order.
    pub(crate) fn pick(&self, rels: &[String]) -> Files {
        match self {
            Folder::Local(p) => Files::Local(rels.iter().map(|r| p.join(r)).collect()),
            #[cfg(feature = "remote")]
            Folder::Remote {
                prefix, objects, ..
            } => Files::Remote(
                rels.iter()
                    .filter_map(|r| {
                        let key = format!("{prefix}{r}");
                        objects.iter().find(|o| o.key == key).cloned()
                    })
                    .collect(),
            ),
        }
    }
}

/// The store's side of the questions above.
#[cfg(feature = "remote")]
mod remote {
    use super::super::place::{Files, Place};
    use super::super::{files, tar, SourceError};
    use super::{FileAt, Folder, Found};
    use crate::storage::{self, Bucket, Object, StorageError};

    /// HEADs every key, 16 at a time, in order.
    fn head_all(bucket: &Bucket, keys: Vec<String>) -> Result<Vec<Object>, SourceError> {
        let b = bucket.clone();
        let heads = storage::wait(async move {
            use futures_util::StreamExt;
            futures_util::stream::iter(keys.into_iter().map(|k| {
                let b = b.clone();
                async move { b.head(&k).await }
            }))
            .buffered(16)
            .collect::<Vec<_>>()
            .await
        })?;
        Ok(heads.into_iter().collect::<Result<Vec<_>, _>>()?)
    }

    pub(super) fn expand(
        bucket: &Bucket,
        key: &str,
        error: impl Fn(String) -> SourceError,
    ) -> Result<Vec<Object>, SourceError> {
        let keys = tar::expand(key).map_err(&error)?;
        // Each name is one literal key (HEADed below, all at once) or a glob's listed
        // matches.
        let mut literal = Vec::new();
        let mut parts: Vec<Result<usize, Vec<Object>>> = Vec::new();
        for k in keys {
            if !files::is_glob(&k) {
                parts.push(Ok(literal.len()));
                literal.push(k);
                continue;
            }
            let (dir, last) = k.rsplit_once('/').unwrap_or(("", k.as_str()));
            if files::is_glob(dir) {
                return Err(error(format!(
                    "'{k}': a glob may only stand in the last part of the key"
                )));
            }
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            let b = bucket.clone();
            let p = prefix.clone();
            let mut found: Vec<Object> = storage::wait(async move { b.list(&p).await })??
                .into_iter()
                .filter(|o| {
                    o.key
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| !rest.contains('/') && files::glob_match(last, rest))
                })
                .collect();
            if found.is_empty() {
                return Err(error(format!("'{k}': no object matches")));
            }
            found.sort_by(|a, b| a.key.cmp(&b.key));
            parts.push(Err(found));
        }
        let heads = head_all(bucket, literal)?;
        Ok(parts
            .into_iter()
            .flat_map(|p| match p {
                Ok(i) => vec![heads[i].clone()],
                Err(found) => found,
            })
            .collect())
    }

    pub(super) fn probe(bucket: &Bucket, key: &str) -> Result<Found, SourceError> {
        let mut prefix = key.to_string();
        if !key.is_empty() && !key.ends_with('/') {
            let b = bucket.clone();
            let k = key.to_string();
            match storage::wait(async move { b.head(&k).await })? {
                Ok(obj) => {
                    let size = obj.size;
                    return Ok(Found::File(FileAt {
                        place: Place::Remote(obj),
                        size,
                    }));
                }
                Err(StorageError::NotFound { .. }) => prefix.push('/'),
                Err(e) => return Err(e.into()),
            }
        }
        let b = bucket.clone();
        let p = prefix.clone();
        let objects = storage::wait(async move { b.list(&p).await })??;
        if objects.is_empty() {
            return Ok(Found::Nothing);
        }
        Ok(Found::Folder(Folder::Remote {
            bucket: bucket.clone(),
            prefix,
            objects,
        }))
    }

    pub(super) fn shards(
        bucket: &Bucket,
        prefix: &str,
        objects: &[Object],
    ) -> Result<Option<Files>, SourceError> {
        let mut shards = Vec::new();
        for o in objects {
            let Some(rest) = o.key.strip_prefix(prefix) else {
                continue;
            };
            if rest.starts_with('.') {
                continue;
            }
            if rest.contains('/') {
                // A sub-folder: not a folder of shards, as a local one would not be.
                return Ok(None);
            }
            if tar::is_tar_name(rest) {
                shards.push(o.clone());
            }
        }
        if shards.is_empty() {
            return Ok(None);
        }
        shards.sort_by(|a, b| a.key.cmp(&b.key));
        tar::check_remote_manifest(&bucket.url_of(prefix), prefix, objects, &shards)?;
        Ok(Some(Files::Remote(shards)))
    }
}
