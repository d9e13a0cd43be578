//! The format detector: what a data argument is, decided once for local paths and
//! URLs alike. [`detect`] holds every rule, in order (a name, a pattern, a folder's
//! contents, a file's first bytes), and asks the [`Location`] only what is there; the
//! [`Format`] it returns is opened by [`Format::open`], one branch per format. A new
//! format is its module, one rule here and one branch in `open`.

use std::path::Path;
use std::sync::Arc;

use super::coco::{is_coco_name, Coco};
use super::location::{FileAt, Folder, Found, Location};
use super::manifest::{is_manifest_name, Manifest};
use super::parquet::{is_parquet_name, ParquetSource};
use super::place::{Files, Place};
use super::segpairs::SegPairs;
use super::{
    cifar, files, mnist, packed, tar, Cifar10, ImageFolder, Mnist, OpenOptions, PackedReader,
    Source, SourceError, TarSource,
};

/// What a data argument holds, with what its opening needs.
pub(crate) enum Format {
    /// A COCO annotation file (`.json`) and its images' folder.
    Coco,
    /// A JSON-lines manifest (`.jsonl`, `.ndjson`).
    Manifest,
    /// Segmentation pairs: the images' and the masks' folders (paths or URLs).
    Pairs { images: String, masks: String },
    /// A packed file (its first bytes are the packed magic).
    Packed(Place),
    /// Tar shards, in order.
    Tar(Files),
    /// Parquet files, in order.
    Parquet(Files),
    /// A folder of MNIST IDX files.
    MnistFolder(Folder),
    /// One MNIST IDX file (its partner is found beside it).
    MnistFile(Place),
    /// A folder of CIFAR-10 batches.
    CifarFolder(Folder),
    /// One CIFAR-10 batch.
    CifarFile(Place),
    /// An image folder: one sub-folder per class.
    ImageFolder(Folder),
}

/// Decides what `path` (a local path or a URL) is. The rules, first match wins:
///
/// 1. by name: a `.json` file is COCO; with `options.masks`, segmentation pairs; a
///    `.jsonl` or `.ndjson` file a manifest;
/// 2. a brace pattern or glob: its files, Parquet when all of them are, tar shards
///    when none is;
/// 3. a folder (a local one, or a prefix with objects under it): segmentation pairs
///    when it holds `images/` and `masks/`, MNIST when it holds an MNIST file,
///    CIFAR-10 when it holds a batch, tar shards when its files are `.tar` (and it has
///    no sub-folders), Parquet when it holds Parquet files (in the Hub's layout, one
///    split picked), else an image folder;
/// 4. a file or object: empty is an error; by name a Parquet file; by its first bytes
///    a packed file; by name a tar shard, a CIFAR-10 `.bin` batch; by its magic (or a
///    gzipped file's name) an MNIST IDX file.
pub(crate) fn detect(path: &Path, options: &OpenOptions) -> Result<Format, SourceError> {
    let arg = path.to_string_lossy();
    if is_coco_name(&arg) {
        return Ok(Format::Coco);
    }
    if let Some(masks) = &options.masks {
        return Ok(Format::Pairs {
            images: arg.into_owned(),
            masks: masks.clone(),
        });
    }
    if is_manifest_name(&arg) {
        return Ok(Format::Manifest);
    }
    let location = &Location::new(path, options)?;
    if location.is_pattern() {
        let found = location.expand()?;
        let names = found.names();
        if names.iter().all(|n| is_parquet_name(n)) {
            return Ok(Format::Parquet(found));
        }
        if names.iter().any(|n| is_parquet_name(n)) {
            return Err(location.error("the pattern names Parquet files and others: give one kind"));
        }
        return Ok(Format::Tar(found));
    }
    match location.probe()? {
        Found::Nothing => Err(location.missing()),
        Found::Folder(folder) => detect_folder(folder, &arg, location, options),
        Found::File(file) => detect_file(file, location),
    }
}

/// Rule 3 of [`detect`].
fn detect_folder(
    folder: Folder,
    arg: &str,
    location: &Location,
    options: &OpenOptions,
) -> Result<Format, SourceError> {
    if folder.has_folder("images") && folder.has_folder("masks") {
        return Ok(Format::Pairs {
            images: folder.sub("images"),
            masks: folder.sub("masks"),
        });
    }
    if mnist::file_names().iter().any(|n| folder.has_file(n)) {
        return Ok(Format::MnistFolder(folder));
    }
    if cifar::file_names().iter().any(|n| folder.has_file(n)) {
        return Ok(Format::CifarFolder(folder));
    }
    if let Some(shards) = folder.shards()? {
        return Ok(Format::Tar(shards));
    }
    let names = folder.parquet_names()?;
    if !names.is_empty() {
        let chosen =
            files::select_split(&names, &options.split, arg).map_err(|r| location.error(r))?;
        return Ok(Format::Parquet(folder.pick(&chosen)));
    }
    Ok(Format::ImageFolder(folder))
}

/// Rule 4 of [`detect`].
fn detect_file(file: FileAt, location: &Location) -> Result<Format, SourceError> {
    if file.size == 0 {
        return Err(location.error("empty file"));
    }
    let name = file.name();
    if is_parquet_name(&name) {
        return Ok(Format::Parquet(file.place.into()));
    }
    let head = file.head(8)?;
    if packed::has_magic(&head) {
        return Ok(Format::Packed(file.place));
    }
    if tar::is_tar_name(&name) {
        return Ok(Format::Tar(file.place.into()));
    }
    // Name first: a CIFAR batch starts with arbitrary pixel bytes, which could happen
    // to spell an IDX magic.
    if name.ends_with(".bin") {
        return Ok(Format::CifarFile(file.place));
    }
    let idx_magic = |m: u32| head.starts_with(&m.to_be_bytes());
    let gz = head.starts_with(&[0x1f, 0x8b]);
    if idx_magic(mnist::IMAGES_MAGIC)
        || idx_magic(mnist::LABELS_MAGIC)
        || (gz && (name.contains("idx3") || name.contains("idx1")))
    {
        return Ok(Format::MnistFile(file.place));
    }
    Err(location.error(
        "unknown file format: not a stoker packed file (magic STKPACK1), a Parquet file, \
         an MNIST IDX file, a CIFAR-10 .bin batch or a .tar shard; for an image folder \
         give its directory",
    ))
}

impl Format {
    /// What this data set is, in words, when it has no parts by name (all but
    /// Parquet); `None` for Parquet.
    pub(crate) fn without_splits(&self) -> Option<&'static str> {
        Some(match self {
            Format::Parquet(_) => return None,
            Format::Coco => "a COCO annotation file",
            Format::Manifest => "a JSON-lines manifest",
            Format::Pairs { .. } => "a set of segmentation pairs",
            Format::Packed(_) => "a packed file",
            Format::Tar(_) => "a set of tar shards",
            Format::MnistFolder(_) | Format::MnistFile(_) => "an MNIST set",
            Format::CifarFolder(_) | Format::CifarFile(_) => "a CIFAR-10 set",
            Format::ImageFolder(_) => "an image folder",
        })
    }

    /// Opens the detected format; `arg` names the data set in messages.
    pub(crate) fn open(
        self,
        arg: &str,
        options: &OpenOptions,
    ) -> Result<Arc<dyn Source>, SourceError> {
        Ok(match self {
            Format::Coco => {
                let Some(images) = &options.images else {
                    return Err(SourceError::format(
                        arg,
                        "a COCO annotation file needs the folder (a path or URL) that its \
                         file_names are relative to: `images=` in Python, `--images DIR` \
                         for stoker-load",
                    ));
                };
                Arc::new(Coco::open(arg, images, options)?)
            }
            Format::Manifest => Arc::new(Manifest::open(arg, options)?),
            Format::Pairs { images, masks } => Arc::new(SegPairs::open(&images, &masks, options)?),
            Format::Packed(Place::Local(path)) if options.mmap => {
                Arc::new(PackedReader::open_mapped(&path)?)
            }
            Format::Packed(Place::Local(path)) => Arc::new(PackedReader::open(&path)?),
            #[cfg(feature = "remote")]
            Format::Packed(Place::Remote(object)) => Arc::new(PackedReader::open_remote(object)?),
            Format::Tar(Files::Local(paths)) => Arc::new(TarSource::open_local(&paths, arg)?),
            #[cfg(feature = "remote")]
            Format::Tar(Files::Remote(objects)) => Arc::new(TarSource::open_remote(
                objects,
                arg,
                remote_cache(options)?,
            )?),
            Format::Parquet(Files::Local(paths)) => {
                Arc::new(ParquetSource::open(&paths, &options.parquet, arg)?)
            }
            #[cfg(feature = "remote")]
            Format::Parquet(Files::Remote(objects)) => {
                Arc::new(ParquetSource::open_remote(objects, &options.parquet, arg)?)
            }
            Format::MnistFolder(Folder::Local(dir)) => {
                Arc::new(Mnist::open_dir(&dir, options.split.is_train())?)
            }
            Format::CifarFolder(Folder::Local(dir)) => {
                Arc::new(Cifar10::open_dir(&dir, options.split.is_train())?)
            }
            Format::MnistFile(Place::Local(path)) => Arc::new(Mnist::open_file(&path)?),
            Format::CifarFile(Place::Local(path)) => Arc::new(Cifar10::open_file(&path)?),
            Format::ImageFolder(Folder::Local(dir)) => Arc::new(ImageFolder::open(&dir)?),
            #[cfg(feature = "remote")]
            Format::MnistFile(Place::Remote(_)) => {
                return Err(local_only(arg, "an MNIST IDX file"))
            }
            #[cfg(feature = "remote")]
            Format::CifarFile(Place::Remote(_)) => return Err(local_only(arg, "a CIFAR-10 batch")),
            #[cfg(feature = "remote")]
            Format::MnistFolder(Folder::Remote { .. }) => {
                return Err(local_only(arg, "an MNIST folder"))
            }
            #[cfg(feature = "remote")]
            Format::CifarFolder(Folder::Remote { .. }) => {
                return Err(local_only(arg, "a CIFAR-10 folder"))
            }
            #[cfg(feature = "remote")]
            Format::ImageFolder(Folder::Remote {
                bucket,
                prefix,
                objects,
            }) => Arc::new(ImageFolder::from_listing(
                &bucket.url_of(&prefix),
                &prefix,
                objects,
                remote_cache(options)?,
            )?),
        })
    }
}

/// The error for a format read from local files only, found behind a URL.
#[cfg(feature = "remote")]
fn local_only(arg: &str, what: &str) -> SourceError {
    SourceError::remote(
        arg.to_string(),
        format!(
            "{what}, which is read from local files only: download it, or pack it \
             (`stoker-load pack`) and give the packed file's URL"
        ),
    )
}

/// The local cache remote tar shards and images go through, when `options` asks for
/// one.
#[cfg(feature = "remote")]
fn remote_cache(options: &OpenOptions) -> Result<Option<Arc<crate::storage::Cache>>, SourceError> {
    match &options.cache {
        Some(dir) => Ok(Some(crate::storage::Cache::open(dir, options.cache_bytes)?)),
        None => Ok(None),
    }
}
