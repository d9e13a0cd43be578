//! An image folder behind a URL prefix: the layout [`ImageFolder`](super::ImageFolder)
//! reads (`PREFIX/CLASS/…/FILE.jpg`), found by listing the prefix (the store pages
//! through it), with the same rules: classes sorted by name, files by key, hidden
//! names left out, labels from the first folder under the prefix.

use std::sync::Arc;

use super::folder::is_image;
use super::{ReadFuture, RecordKind, Source, SourceError};
use crate::storage::{self, Cache, Object};

/// Remote encoded images, one sub-prefix per class.
#[derive(Debug)]
pub struct RemoteFolder {
    url: String,
    classes: Vec<String>,
    files: Vec<Object>,
    labels: Vec<u32>,
    cache: Option<Arc<Cache>>,
}

impl RemoteFolder {
    /// Builds the folder from a listing of `prefix` (ending in `/`, or empty).
    pub fn from_listing(
        url: &str,
        prefix: &str,
        objects: Vec<Object>,
        cache: Option<Arc<Cache>>,
    ) -> Result<RemoteFolder, SourceError> {
        let bad = |reason: String| SourceError::remote(url.to_string(), reason);
        let mut by_class: std::collections::BTreeMap<String, Vec<Object>> = Default::default();
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
            if is_image(std::path::Path::new(rel)) {
                entry.push(obj);
            }
        }
        if by_class.is_empty() {
            return Err(bad(format!(
                "no class folders ({loose} objects at the top level); an image folder holds \
                 one sub-folder per class"
            )));
        }
        let empty: Vec<&String> = by_class
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(k, _)| k)
            .collect();
        if !empty.is_empty() {
            return Err(bad(format!(
                "{} of {} classes have no images (.jpg, .jpeg, .png, .webp): {}",
                empty.len(),
                by_class.len(),
                empty
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut out = RemoteFolder {
            url: url.to_string(),
            classes: Vec::new(),
            files: Vec::new(),
            labels: Vec::new(),
            cache,
        };
        for (class, mut files) in by_class {
            files.sort_by(|a, b| a.key.cmp(&b.key));
            let label =
                u32::try_from(out.classes.len()).map_err(|_| bad("too many classes".into()))?;
            out.labels.extend(std::iter::repeat_n(label, files.len()));
            out.files.extend(files);
            out.classes.push(class);
        }
        Ok(out)
    }

    fn object(&self, index: usize) -> Result<&Object, SourceError> {
        self.files.get(index).ok_or_else(|| {
            SourceError::record(
                format!("{} sample {index}", self.url),
                format!("index out of range (the folder holds {})", self.files.len()),
            )
        })
    }
}

fn finish(
    obj: &Object,
    r: Result<(), storage::StorageError>,
    buf: &[u8],
) -> Result<RecordKind, SourceError> {
    r?;
    if buf.is_empty() {
        return Err(SourceError::record(obj.url(), "empty file"));
    }
    Ok(RecordKind::Encoded)
}

impl Source for RemoteFolder {
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
            Some(o) => o.url(),
            None => format!("{} sample {index} (out of range)", self.url),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let obj = self.object(index)?.clone();
        let cache = self.cache.clone();
        let mut owned = std::mem::take(buf);
        let check = obj.clone();
        let (r, owned) = storage::wait(async move {
            let r = storage::read_into(&obj, cache.as_deref(), 0..obj.size, &mut owned).await;
            (r, owned)
        })?;
        *buf = owned;
        finish(&check, r, buf)
    }

    fn format(&self) -> &'static str {
        "folder"
    }

    fn read_async(self: Arc<Self>, index: usize, buf: Vec<u8>) -> ReadFuture {
        Box::pin(async move {
            let obj = match self.object(index) {
                Ok(o) => o.clone(),
                Err(e) => return (Err(e), buf),
            };
            let cache = self.cache.clone();
            let check = obj.clone();
            let mut buf = buf;
            let task = storage::spawn(async move {
                let r = storage::read_into(&obj, cache.as_deref(), 0..obj.size, &mut buf).await;
                (r, buf)
            });
            match task.await {
                Ok((r, buf)) => {
                    let out = finish(&check, r, &buf);
                    (out, buf)
                }
                Err(e) => (Err(e.into()), Vec::new()),
            }
        })
    }
}
