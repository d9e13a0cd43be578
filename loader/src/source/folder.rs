//! ImageFolder: a directory with one sub-folder per class, each holding encoded images.
//!
//! The layout torchvision's `ImageFolder` reads: `ROOT/CLASS/…/FILE.jpg`. Classes are
//! sorted by name and files by path within a class, so labels and sample order depend
//! only on the names on disk, never on the order a file system lists them.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{RecordKind, Source, SourceError};

/// File extensions counted as images (compared case-insensitively).
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// A directory of encoded images, one sub-folder per class.
#[derive(Debug)]
pub struct ImageFolder {
    root: PathBuf,
    classes: Vec<String>,
    files: Vec<PathBuf>,
    labels: Vec<u32>,
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

impl ImageFolder {
    /// Scan `root`: each non-hidden sub-folder is a class; its images (jpg, jpeg, png)
    /// are the class's samples.
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
        let mut classes = Vec::new();
        let mut files = Vec::new();
        let mut labels = Vec::new();
        let mut empty = Vec::new();
        let mut loose_files = 0usize;
        for (name, path) in entries {
            let meta = fs::metadata(&path).map_err(|e| SourceError::io(&path, e))?;
            if !meta.is_dir() {
                loose_files += 1;
                continue;
            }
            let class = name.to_string_lossy().into_owned();
            let before = files.len();
            collect_images(&path, &mut files)?;
            if files.len() == before {
                empty.push(class.clone());
            }
            let label = classes.len() as u32;
            labels.resize(files.len(), label);
            classes.push(class);
        }
        if classes.is_empty() {
            return Err(SourceError::format(
                root,
                format!(
                    "no class sub-folders ({loose_files} files at the top level); an image \
                     folder holds one sub-folder per class"
                ),
            ));
        }
        if !empty.is_empty() {
            return Err(SourceError::format(
                root,
                format!(
                    "{} of {} classes have no images (.jpg, .jpeg, .png, .webp): {}",
                    empty.len(),
                    classes.len(),
                    empty.join(", ")
                ),
            ));
        }
        if u32::try_from(classes.len()).is_err() {
            return Err(SourceError::format(root, "too many classes"));
        }
        Ok(ImageFolder {
            root: root.to_path_buf(),
            classes,
            files,
            labels,
        })
    }

    /// The folder this source reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of sample `index`.
    pub fn path(&self, index: usize) -> &Path {
        &self.files[index]
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
        match self.files.get(index) {
            Some(p) => p.display().to_string(),
            None => format!("{} sample {index} (out of range)", self.root.display()),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let path = self.files.get(index).ok_or_else(|| {
            SourceError::record(
                format!("{} sample {index}", self.root.display()),
                format!("index out of range (the folder holds {})", self.files.len()),
            )
        })?;
        // A file swapped for a FIFO since the scan must not block the worker.
        let mut file = super::open_regular(path)?;
        // read_to_end reserves from the file's size and only grows `buf` when the
        // file is larger than its capacity, so a recycled buffer is not reallocated.
        file.read_to_end(buf)
            .map_err(|e| SourceError::io(path, e))?;
        if buf.is_empty() {
            return Err(SourceError::record(
                path.display().to_string(),
                "empty file",
            ));
        }
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "folder"
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
