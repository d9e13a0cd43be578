//! Opening a data argument: a local path (packed file, image folder, MNIST, CIFAR-10,
//! tar shards) or a URL (`s3://`, `gs://`, `az://`, `http(s)://`, `file://`; with the
//! `remote` feature) — every CLI flag and library call that takes data comes here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::coco::{is_coco_name, Coco};
use super::manifest::{is_manifest_name, Manifest};
use super::segpairs::{is_pairs_dir, SegPairs};
use super::{
    files, mnist, packed, tar, Cifar10, ImageFolder, Mnist, PackedReader, Source, SourceError,
    TarSource,
};

/// The default size bound of `--cache DIR`: 10 GiB.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;

/// True when `s` starts with `scheme://` (a URL, not a local path).
pub fn is_url(s: &str) -> bool {
    match s.find("://") {
        Some(i) if i > 0 => {
            let scheme = &s[..i];
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        _ => false,
    }
}

/// How [`open_with`] opens a data set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// For MNIST/CIFAR sets that hold both splits: the training split (else the test
    /// split).
    pub train: bool,
    /// Read packed files through a memory map instead of positioned reads (faster per
    /// record; a file truncated while open then kills the process with SIGBUS).
    pub mmap: bool,
    /// Keep whole remote objects (tar shards, images; not packed files, which are read
    /// by ranges) in this folder for later epochs and runs.
    pub cache: Option<PathBuf>,
    /// The cache's size bound in bytes (least recently used objects leave first).
    pub cache_bytes: u64,
    /// Timeouts, retries and store settings for URLs.
    #[cfg(feature = "remote")]
    pub remote: crate::storage::RemoteOptions,
    /// The folder of masks (a path or URL) that pairs with the images of the data
    /// argument by stem (segmentation pairs).
    pub masks: Option<String>,
    /// The folder of images (a path or URL) that a COCO annotation file's
    /// `file_name`s are relative to; required for COCO, ignored elsewhere.
    pub images: Option<String>,
    /// The columns of a Parquet data set.
    pub parquet: super::parquet::ParquetColumns,
    /// The split of a Hugging Face Hub repository's Parquet files (`data/{split}-*`,
    /// `{config}/{split}/*`); `None`: `train` when `train` is set, else `validation`
    /// or `test` (docs/parquet.md).
    pub split: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            train: true,
            mmap: false,
            cache: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            #[cfg(feature = "remote")]
            remote: crate::storage::RemoteOptions::default(),
            masks: None,
            images: None,
            parquet: super::parquet::ParquetColumns::default(),
            split: None,
        }
    }
}

/// Which part to read of a data set that holds more than one: MNIST's and CIFAR-10's
/// training or test files, a Hugging Face Hub repository's Parquet split. A data set
/// of one part (a folder, a packed file, tar shards) reads the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// The training part: MNIST's `train-*` files, CIFAR-10's `data_batch_*.bin`, the
    /// Hub's `train` split.
    #[default]
    Train,
    /// The held-out part: MNIST's `t10k-*` files, CIFAR-10's `test_batch.bin`, the
    /// Hub's `validation` split (else `test`).
    Test,
}

impl Split {
    /// Whether this is the training part (as [`OpenOptions::train`] says it).
    pub fn is_train(self) -> bool {
        self == Split::Train
    }
}

/// [`open_with`] the default options and the given split:
/// `source::open("data/train", source::Split::Train)`.
pub fn open(path: impl AsRef<Path>, split: Split) -> Result<Arc<dyn Source>, SourceError> {
    open_with(
        path,
        &OpenOptions {
            train: split.is_train(),
            ..OpenOptions::default()
        },
    )
}

/// Open whatever `path` holds: a packed file, an ImageFolder directory, a directory
/// (or file) of MNIST IDX or CIFAR-10 binary batches, or tar shards (a `.tar` file, a
/// folder of them, or a brace pattern `train-{000000..000127}.tar`). A `path` that is
/// a URL is opened remotely (see [`open_url`]).
///
/// A directory is MNIST when it holds any MNIST file (`train-images-idx3-ubyte`, …),
/// else CIFAR-10 when it holds any batch (`data_batch_N.bin`, `test_batch.bin`, also
/// inside `cifar-10-batches-bin/`), else an ImageFolder. A file is packed when it starts
/// with the packed magic, MNIST when it is an IDX file (plain or gzipped), CIFAR-10 when
/// it is a `.bin` batch.
///
/// A path or URL ending in `.json` is a COCO annotation file, whose images are in the
/// folder `options.images` (required); one ending in `.jsonl` or `.ndjson` is a
/// JSON-lines manifest; `options.masks` pairs the images under `path` with masks.
pub fn open_with(
    path: impl AsRef<Path>,
    options: &OpenOptions,
) -> Result<Arc<dyn Source>, SourceError> {
    open_path(path.as_ref(), options)
}

/// [`open_with`], once the path's type is known.
fn open_path(path: &Path, options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    if let Some(text) = path.to_str().filter(|t| is_coco_name(t)) {
        let Some(images) = &options.images else {
            return Err(SourceError::format(
                path,
                "a COCO annotation file needs the folder (a path or URL) that its file_names \
                 are relative to: `images=` in Python, `--images DIR` for stoker-load",
            ));
        };
        return Ok(Arc::new(Coco::open(text, images, options)?));
    }
    if let Some(masks) = &options.masks {
        let images = path.to_string_lossy();
        return Ok(Arc::new(SegPairs::open(&images, masks, options)?));
    }
    if let Some(text) = path.to_str() {
        if is_manifest_name(text) {
            return Ok(Arc::new(Manifest::open(text, options)?));
        }
        if is_url(text) {
            return open_url(text, options);
        }
        if (tar::is_pattern(text) || files::is_glob(text)) && !path.exists() {
            let mut paths = Vec::new();
            for name in tar::expand(text).map_err(|r| SourceError::format(path, r))? {
                if files::is_glob(&name) {
                    paths.extend(files::glob_local_why(&name).map_err(|w| w.format(path))?);
                } else {
                    paths.push(PathBuf::from(name));
                }
            }
            let parquet = |p: &PathBuf| super::parquet::is_parquet_name(&p.to_string_lossy());
            if paths.iter().all(parquet) {
                return Ok(Arc::new(super::parquet::ParquetSource::open(
                    &paths,
                    &options.parquet,
                    text,
                )?));
            }
            if paths.iter().any(parquet) {
                return Err(SourceError::format(
                    path,
                    "the pattern names Parquet files and others: give one kind",
                ));
            }
            return Ok(Arc::new(TarSource::open_local(&paths, text)?));
        }
    }
    let train = options.train;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::format(path, "no such file or directory"))
        }
        Err(e) => return Err(SourceError::io(path, e)),
    };
    if meta.is_dir() {
        if is_pairs_dir(path) {
            let (images, masks) = (path.join("images"), path.join("masks"));
            return Ok(Arc::new(SegPairs::open(
                &images.to_string_lossy(),
                &masks.to_string_lossy(),
                options,
            )?));
        }
        if Mnist::detect(path) {
            return Ok(Arc::new(Mnist::open_dir(path, train)?));
        }
        if Cifar10::detect(path) {
            return Ok(Arc::new(Cifar10::open_dir(path, train)?));
        }
        if let Some(shards) = tar::shards_in(path)? {
            tar::check_manifest(path, &shards)?;
            let what = path.display().to_string();
            return Ok(Arc::new(TarSource::open_local(&shards, &what)?));
        }
        let names = files::parquet_names_under(path).map_err(|e| SourceError::io(path, e))?;
        if !names.is_empty() {
            let what = path.display().to_string();
            let chosen = files::select_split(&names, options.split.as_deref(), train, &what)
                .map_err(|r| SourceError::format(path, r))?;
            let paths: Vec<PathBuf> = chosen.iter().map(|n| path.join(n)).collect();
            return Ok(Arc::new(super::parquet::ParquetSource::open(
                &paths,
                &options.parquet,
                &what,
            )?));
        }
        return Ok(Arc::new(ImageFolder::open(path)?));
    }
    if !meta.is_file() {
        // A FIFO, socket or device: its size says nothing, and opening a FIFO would
        // wait for a writer.
        return Err(SourceError::format(
            path,
            format!(
                "{}, not a regular file: give a file or a folder of data",
                crate::durable::node_kind(&meta)
            ),
        ));
    }
    if meta.len() == 0 {
        return Err(SourceError::format(path, "empty file"));
    }
    if super::parquet::is_parquet_name(&path.to_string_lossy()) {
        let what = path.display().to_string();
        return Ok(Arc::new(super::parquet::ParquetSource::open(
            &[path.to_path_buf()],
            &options.parquet,
            &what,
        )?));
    }
    let mut head = [0u8; 8];
    let n = {
        use std::io::Read;
        let file = super::open_regular(path)?;
        let mut n = 0;
        // `take` + read_to_end would allocate; a short loop fills the fixed array.
        let mut file = file.take(head.len() as u64);
        while n < head.len() {
            match file.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SourceError::io(path, e)),
            }
        }
        n
    };
    let head = &head[..n];
    if packed::has_magic(head) {
        let reader = if options.mmap {
            PackedReader::open_mapped(path)?
        } else {
            PackedReader::open(path)?
        };
        return Ok(Arc::new(reader));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if tar::is_tar_name(&name) {
        let what = path.display().to_string();
        return Ok(Arc::new(TarSource::open_local(
            &[path.to_path_buf()],
            &what,
        )?));
    }
    // Name first: a CIFAR batch starts with arbitrary pixel bytes, which could
    // happen to spell an IDX magic.
    if name.ends_with(".bin") {
        return Ok(Arc::new(Cifar10::open_file(path)?));
    }
    let idx_magic = |m: u32| head.starts_with(&m.to_be_bytes());
    let gz = head.starts_with(&[0x1f, 0x8b]);
    if idx_magic(mnist::IMAGES_MAGIC)
        || idx_magic(mnist::LABELS_MAGIC)
        || (gz && (name.contains("idx3") || name.contains("idx1")))
    {
        return Ok(Arc::new(Mnist::open_file(path)?));
    }
    Err(SourceError::format(
        path,
        "unknown file format: not a stoker packed file (magic STKPACK1), an MNIST IDX file, \
         a CIFAR-10 .bin batch or a .tar shard; for an image folder give its directory",
    ))
}

/// Opens the data at `url`:
/// - a brace pattern or a key ending in `.tar`: those tar shards;
/// - an object starting with the packed magic: a packed file, read by ranged GETs;
/// - otherwise a prefix (a folder): its `.tar` objects when it has some directly under
///   it, else an image folder (class = first folder under the prefix), both found by
///   listing (with pagination).
#[cfg(feature = "remote")]
pub fn open_url(url: &str, options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    use crate::storage::{self, Bucket, Cache, StorageError};
    let (bucket, key) = Bucket::open(url, &options.remote)?;
    let cache = match &options.cache {
        Some(dir) => Some(Cache::open(dir, options.cache_bytes)?),
        None => None,
    };
    let head_all = |keys: Vec<String>| -> Result<Vec<storage::Object>, SourceError> {
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
    };
    let remote_err = |reason: String| SourceError::remote(url.to_string(), reason);
    if tar::is_pattern(&key) || files::is_glob(&key) {
        let keys = tar::expand(&key).map_err(remote_err)?;
        // In the pattern's order: each name is one literal key (HEADed below, all at
        // once) or a glob's listed matches.
        let mut literal = Vec::new();
        let mut parts: Vec<Result<usize, Vec<storage::Object>>> = Vec::new();
        for k in keys {
            if !files::is_glob(&k) {
                parts.push(Ok(literal.len()));
                literal.push(k);
                continue;
            }
            let (dir, last) = k.rsplit_once('/').map_or(("", k.as_str()), |(d, l)| (d, l));
            if files::is_glob(dir) {
                return Err(remote_err(format!(
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
            let mut found: Vec<storage::Object> = storage::wait(async move { b.list(&p).await })??
                .into_iter()
                .filter(|o| {
                    o.key
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| !rest.contains('/') && files::glob_match(last, rest))
                })
                .collect();
            if found.is_empty() {
                return Err(remote_err(format!("'{k}': no object matches")));
            }
            found.sort_by(|a, b| a.key.cmp(&b.key));
            parts.push(Err(found));
        }
        let heads = head_all(literal)?;
        let objects: Vec<storage::Object> = parts
            .into_iter()
            .flat_map(|p| match p {
                Ok(i) => vec![heads[i].clone()],
                Err(found) => found,
            })
            .collect();
        if objects
            .iter()
            .all(|o| super::parquet::is_parquet_name(&o.key))
        {
            return Ok(Arc::new(super::parquet::ParquetSource::open_remote(
                objects,
                &options.parquet,
                url,
            )?));
        }
        return Ok(Arc::new(TarSource::open_remote(objects, url, cache)?));
    }
    if super::parquet::is_parquet_name(&key) {
        return Ok(Arc::new(super::parquet::ParquetSource::open_remote(
            head_all(vec![key])?,
            &options.parquet,
            url,
        )?));
    }
    if tar::is_tar_name(&key) {
        return Ok(Arc::new(TarSource::open_remote(
            head_all(vec![key])?,
            url,
            cache,
        )?));
    }
    let mut prefix = key.clone();
    if !key.is_empty() && !key.ends_with('/') {
        let b = bucket.clone();
        let k = key.clone();
        match storage::wait(async move {
            let obj = b.head(&k).await?;
            let head = obj.get_range(0..obj.size.min(8)).await?;
            Ok::<_, StorageError>((obj, head))
        })? {
            Ok((obj, head)) => {
                if packed::has_magic(&head) {
                    return Ok(Arc::new(PackedReader::open_remote(obj)?));
                }
                return Err(SourceError::remote(
                    url.to_string(),
                    "unknown format: remote data is a stoker packed file (magic \
                             STKPACK1), .tar shards, Parquet files, or a prefix holding \
                             shards, Parquet files or an image folder",
                ));
            }
            Err(StorageError::NotFound { .. }) => prefix.push('/'),
            Err(e) => return Err(e.into()),
        }
    }
    let b = bucket.clone();
    let p = prefix.clone();
    let objects = storage::wait(async move { b.list(&p).await })??;
    if objects.is_empty() {
        return Err(SourceError::remote(
            url.to_string(),
            "no such object, and no objects under it as a prefix",
        ));
    }
    let shards: Vec<storage::Object> = objects
        .iter()
        .filter(|o| {
            o.key
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| !rest.contains('/') && tar::is_tar_name(rest))
        })
        .cloned()
        .collect();
    if !shards.is_empty() {
        tar::check_remote_manifest(&bucket.url_of(&prefix), &prefix, &objects, &shards)?;
        return Ok(Arc::new(TarSource::open_remote(shards, url, cache)?));
    }
    // Parquet files directly under the prefix, or in the Hub's layout below it.
    let mut names: Vec<(String, &storage::Object)> = objects
        .iter()
        .filter_map(|o| {
            let rest = o.key.strip_prefix(prefix.as_str())?;
            (super::parquet::is_parquet_name(rest)
                && rest.split('/').count() <= files::HUB_DEPTH
                && !rest.split('/').any(|p| p.starts_with('.')))
            .then(|| (rest.to_string(), o))
        })
        .collect();
    if !names.is_empty() {
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let rel: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
        let chosen = files::select_split(&rel, options.split.as_deref(), options.train, url)
            .map_err(remote_err)?;
        let picked = names
            .iter()
            .filter(|(n, _)| chosen.contains(n))
            .map(|(_, o)| (*o).clone())
            .collect();
        return Ok(Arc::new(super::parquet::ParquetSource::open_remote(
            picked,
            &options.parquet,
            url,
        )?));
    }
    // A prefix holding `images/` and `masks/` is a set of segmentation pairs, as a
    // local folder holding both is.
    let under = |sub: &str| {
        let p = format!("{prefix}{sub}/");
        objects.iter().any(|o| o.key.starts_with(&p))
    };
    if under("images") && under("masks") {
        let (images, masks) = (
            bucket.url_of(&format!("{prefix}images/")),
            bucket.url_of(&format!("{prefix}masks/")),
        );
        return Ok(Arc::new(SegPairs::open(&images, &masks, options)?));
    }
    let listing_url = bucket.url_of(&prefix);
    Ok(Arc::new(super::remote_folder::RemoteFolder::from_listing(
        &listing_url,
        &prefix,
        objects,
        cache,
    )?))
}

/// Without the `remote` feature a URL is an error that says so.
#[cfg(not(feature = "remote"))]
pub fn open_url(url: &str, _options: &OpenOptions) -> Result<Arc<dyn Source>, SourceError> {
    Err(SourceError::remote(
        url.to_string(),
        "URLs need stoker-loader's `remote` feature (this build has it off)",
    ))
}
