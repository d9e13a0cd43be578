//! ImageFolder: a folder with one sub-folder per class, each holding encoded images,
//! on disk or under a URL prefix.
//!
//! The layout torchvision's `ImageFolder` reads: `ROOT/CLASS/…/FILE.jpg`. Classes are
//! sorted by name and files by path within a class, so labels and sample order depend
//! only on the names, never on the order a file system or a store lists them. A local
//! folder is walked and read with plain file I/O on the reading thread; a prefix is
//! listed once (the store pages through it) and its images are fetched on the storage
//! runtime. Both keep their files as one [`Files`] list, so a local sample costs a path
//! and a read, as it did before remote folders shared this module.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::place::{read_local, Files};
use super::{ReadFuture, RecordKind, Source, SourceError};

/// File extensions counted as images (compared case-insensitively).
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// Encoded images, one sub-folder (or sub-prefix) per class.
#[derive(Debug)]
pub struct ImageFolder {
    /// The folder's path or URL, for messages.
    root: String,
    classes: Vec<String>,
    files: Files,
    labels: Vec<u32>,
    /// The local copy remote reads go through, when one was asked for.
    #[cfg(feature = "remote")]
    cache: Option<Arc<crate::storage::Cache>>,
}
/// True for names a user hides (`.DS_Store`, `.git`, editor swap files).
fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

/// True when `path` has one of [`IMAGE_EXTENSIONS`], in any letter case.
pub fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// Names in `dir`, sorted, with hidden ones left out.
fn sorted_entries(dir: &Path) -> Result<Vec<(std::ffi::OsString, PathBuf)>, SourceError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| SourceError::io(dir, e))? {
        let entry = entry.map_err(|e| SourceError::io(dir, e))?;
        let name = entry.file_name();
        if !is_hidden(&name) {
            out.push((name, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Every image under `dir`, recursively, in sorted path order.
fn collect_images(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), SourceError> {
    for (_, path) in sorted_entries(dir)? {
        // `metadata` follows symbolic links, so linked class folders and files count.
        let meta = fs::metadata(&path).map_err(|e| SourceError::io(&path, e))?;
        if meta.is_dir() {
            collect_images(&path, out)?;
        } else if meta.is_file() && is_image(&path) {
            out.push(path);
        }
    }
    Ok(())
}

/// The classes in order and the images of each, found by a walk or a listing: what
/// both kinds of folder check the same way.
struct Found<F> {
    classes: Vec<(String, Vec<F>)>,
    /// Files (or objects) at the top level, beside the class folders.
    loose: usize,
}

/// The classes, and the files and labels in sample order.
struct Samples<F> {
    classes: Vec<String>,
    files: Vec<F>,
    labels: Vec<u32>,
}

impl<F> Found<F> {
    /// The samples, once every class is checked to hold an image; `bad` makes the
    /// error that names the folder.
    fn into_samples(self, bad: impl Fn(String) -> SourceError) -> Result<Samples<F>, SourceError> {
        if self.classes.is_empty() {
            return Err(bad(format!(
                "no class sub-folders ({} files at the top level); an image folder holds \
                 one sub-folder per class",
                self.loose
            )));
        }
        let empty: Vec<&str> = self
            .classes
            .iter()
            .filter(|(_, files)| files.is_empty())
            .map(|(c, _)| c.as_str())
            .collect();
        if !empty.is_empty() {
            return Err(bad(format!(
                "{} of {} classes have no images (.jpg, .jpeg, .png, .webp): {}",
                empty.len(),
                self.classes.len(),
                empty.join(", ")
            )));
        }
        if u32::try_from(self.classes.len()).is_err() {
            return Err(bad("too many classes".into()));
        }
        let mut classes = Vec::with_capacity(self.classes.len());
        let mut files = Vec::new();
        let mut labels = Vec::new();
        for (label, (class, found)) in self.classes.into_iter().enumerate() {
            files.extend(found);
            labels.resize(files.len(), label as u32);
            classes.push(class);
        }
        Ok(Samples {
            classes,
            files,
            labels,
        })
    }
}

impl ImageFolder {
    /// Scan the local folder `root`: each non-hidden sub-folder is a class; its images
    /// (jpg, jpeg, png, webp, at any depth) are the class's samples.
    pub fn open(root: &Path) -> Result<Self, SourceError> {
        let meta = match fs::metadata(root) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SourceError::format(root, "no such directory"))
            }
            Err(e) => return Err(SourceError::io(root, e)),
        };
        if !meta.is_dir() {
            return Err(SourceError::format(
                root,
                "not a directory (an image folder holds one sub-folder per class)",
            ));
        }
        let entries = sorted_entries(root)?;
        if entries.is_empty() {
            return Err(SourceError::format(
                root,
                "empty folder: an image folder holds one sub-folder per class",
            ));
        }
        let mut found = Found {
            classes: Vec::new(),
            loose: 0,
        };
        for (name, path) in entries {
            let meta = fs::metadata(&path).map_err(|e| SourceError::io(&path, e))?;
            if !meta.is_dir() {
                found.loose += 1;
                continue;
            }
            let mut files = Vec::new();
            collect_images(&path, &mut files)?;
            found
                .classes
                .push((name.to_string_lossy().into_owned(), files));
        }
        let s = found.into_samples(|reason| SourceError::format(root, reason))?;
        Ok(ImageFolder {
            root: root.display().to_string(),
            classes: s.classes,
            files: Files::Local(s.files),
            labels: s.labels,
            #[cfg(feature = "remote")]
            cache: None,
        })
    }

    /// The image folder under `prefix` (ending in `/`, or empty) of the store that
    /// `objects` (its listing) came from; `url` is the prefix's URL. The first folder
    /// level under the prefix is the class, hidden names are left out, files are
    /// sorted by key.
    #[cfg(feature = "remote")]
    pub fn from_listing(
        url: &str,
        prefix: &str,
        objects: Vec<crate::storage::Object>,
        cache: Option<Arc<crate::storage::Cache>>,
    ) -> Result<Self, SourceError> {
        let mut by_class: std::collections::BTreeMap<String, Vec<crate::storage::Object>> =
            Default::default();
        let mut loose = 0usize;
        for obj in objects {
            let Some(rel) = obj.key.strip_prefix(prefix) else {
                continue;
            };
            let parts: Vec<&str> = rel.split('/').collect();
            if parts.iter().any(|p| p.starts_with('.')) {
                continue;
            }
            if parts.len() < 2 {
                loose += 1;
                continue;
            }
            let entry = by_class.entry(parts[0].to_string()).or_default();
            if is_image(Path::new(rel)) {
                entry.push(obj);
            }
        }
        for files in by_class.values_mut() {
            files.sort_by(|a, b| a.key.cmp(&b.key));
        }
        let found = Found {
            classes: by_class.into_iter().collect(),
            loose,
        };
        let s = found.into_samples(|reason| SourceError::remote(url.to_string(), reason))?;
        Ok(ImageFolder {
            root: url.to_string(),
            classes: s.classes,
            files: Files::Remote(s.files),
            labels: s.labels,
            cache,
        })
    }

    /// The folder's path or URL.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The local file of sample `index`; `None` out of range or for a remote folder.
    pub fn path(&self, index: usize) -> Option<&Path> {
        match &self.files {
            Files::Local(v) => v.get(index).map(PathBuf::as_path),
            #[cfg(feature = "remote")]
            Files::Remote(_) => None,
        }
    }

    fn out_of_range(&self, index: usize) -> SourceError {
        SourceError::record(
            format!("{} sample {index}", self.root),
            format!("index out of range (the folder holds {})", self.files.len()),
        )
    }
}

impl Source for ImageFolder {
    fn len(&self) -> usize {
        self.files.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        self.labels[index]
    }

    fn describe(&self, index: usize) -> String {
        self.files
            .describe(index)
            .unwrap_or_else(|| format!("{} sample {index} (out of range)", self.root))
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        match &self.files {
            Files::Local(v) => {
                let path = v.get(index).ok_or_else(|| self.out_of_range(index))?;
                read_local(path, buf)?;
            }
            #[cfg(feature = "remote")]
            Files::Remote(v) => {
                let obj = v.get(index).ok_or_else(|| self.out_of_range(index))?;
                super::place::read_remote(obj, self.cache.clone(), buf)?;
            }
        }
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "folder"
    }

    fn read_async(self: Arc<Self>, index: usize, buf: Vec<u8>) -> ReadFuture {
        #[cfg(feature = "remote")]
        if let Files::Remote(v) = &self.files {
            let obj = v.get(index).cloned();
            let cache = self.cache.clone();
            return Box::pin(async move {
                let Some(obj) = obj else {
                    return (Err(self.out_of_range(index)), buf);
                };
                let (r, buf) = super::place::read_remote_async(obj, cache, buf).await;
                (r.map(|()| RecordKind::Encoded), buf)
            });
        }
        // A local file is read on the blocking pool, as every local source is.
        super::read_blocking(self, index, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_extensions_ignore_case() {
        assert!(is_image(Path::new("a/b.JPG")));
        assert!(is_image(Path::new("b.Jpeg")));
        assert!(is_image(Path::new("b.png")));
        assert!(!is_image(Path::new("b.gif")));
        assert!(!is_image(Path::new("jpg")));
    }

    #[test]
    fn hidden_names() {
        assert!(is_hidden(std::ffi::OsStr::new(".DS_Store")));
        assert!(!is_hidden(std::ffi::OsStr::new("cat")));
    }
}
