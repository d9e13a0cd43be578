//! CIFAR-10 in its binary distribution: `data_batch_1.bin`..`data_batch_5.bin` (train)
//! and `test_batch.bin` (test), each a run of 3073-byte records (one label byte, then
//! 1024 red, 1024 green and 1024 blue bytes), read through memory maps and turned from
//! planar CHW into the HWC the rest of stoker uses.

use std::fs;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{RecordKind, Source, SourceError};

/// Image side.
pub const SIDE: usize = 32;
/// Pixel bytes of one image (3 planes of 32x32).
pub const PIXELS: usize = SIDE * SIDE * 3;
/// Bytes of one record: the label, then the pixels.
pub const RECORD: usize = 1 + PIXELS;
/// The names of CIFAR-10's classes, by label, as `batches.meta.txt` lists them.
pub const CLASSES: [&str; 10] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];
/// The training batches' names, in order.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
/// The test batch's name.
pub const TEST_FILE: &str = "test_batch.bin";
/// The sub-folder the official archive unpacks to.
pub const ARCHIVE_DIR: &str = "cifar-10-batches-bin";

struct Batch {
    path: PathBuf,
    map: Mmap,
    /// Index of this batch's first record in the whole source.
    first: usize,
}

/// CIFAR-10 binary batches.
pub struct Cifar10 {
    batches: Vec<Batch>,
    labels: Vec<u8>,
    classes: Vec<String>,
}

impl std::fmt::Debug for Cifar10 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cifar10")
            .field(
                "files",
                &self.batches.iter().map(|b| &b.path).collect::<Vec<_>>(),
            )
            .field("records", &self.labels.len())
            .finish()
    }
}

/// Every name a batch file has in a CIFAR-10 folder, directly or in the archive's
/// sub-folder (relative, `/`-separated): a folder holding any of them is CIFAR-10.
pub(crate) fn file_names() -> Vec<String> {
    let batches = TRAIN_FILES.iter().chain(std::iter::once(&TEST_FILE));
    batches
        .flat_map(|f| [f.to_string(), format!("{ARCHIVE_DIR}/{f}")])
        .collect()
}

/// The folder holding the batches: `dir` itself, or the archive's sub-folder in it.
fn batch_dir(dir: &Path) -> PathBuf {
    let nested = dir.join(ARCHIVE_DIR);
    if nested.is_dir() {
        nested
    } else {
        dir.to_path_buf()
    }
}

/// Class names from `batches.meta.txt` beside the batches, else the standard ten.
fn class_names(dir: &Path) -> Result<Vec<String>, SourceError> {
    let meta = dir.join("batches.meta.txt");
    if !meta.is_file() {
        return Ok(CLASSES.iter().map(|s| s.to_string()).collect());
    }
    let text = fs::read(&meta).map_err(|e| SourceError::io(&meta, e))?;
    let text = String::from_utf8_lossy(&text);
    let names: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if names.len() != CLASSES.len() {
        return Err(SourceError::format(
            &meta,
            format!(
                "lists {} class names, CIFAR-10 has {}",
                names.len(),
                CLASSES.len()
            ),
        ));
    }
    Ok(names)
}

impl Cifar10 {
    /// True when `dir` (or its `cifar-10-batches-bin` sub-folder) holds any batch file.
    pub fn detect(dir: &Path) -> bool {
        file_names().iter().any(|n| dir.join(n).is_file())
    }

    /// Open the training batches (those of `data_batch_1..5.bin` present, in order) or
    /// the test batch found in `dir` or its `cifar-10-batches-bin` sub-folder.
    pub fn open_dir(dir: &Path, train: bool) -> Result<Self, SourceError> {
        let d = batch_dir(dir);
        let files: Vec<PathBuf> = if train {
            TRAIN_FILES
                .iter()
                .map(|f| d.join(f))
                .filter(|p| p.is_file())
                .collect()
        } else {
            Some(d.join(TEST_FILE))
                .filter(|p| p.is_file())
                .into_iter()
                .collect()
        };
        if files.is_empty() {
            return Err(SourceError::format(
                &d,
                if train {
                    "CIFAR-10 training split missing: no data_batch_1.bin .. data_batch_5.bin"
                } else {
                    "CIFAR-10 test split missing: no test_batch.bin"
                },
            ));
        }
        Self::open_files(&files, class_names(&d)?)
    }

    /// Open one batch file, with the class names of `batches.meta.txt` beside it if
    /// there is one.
    pub fn open_file(path: &Path) -> Result<Self, SourceError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::open_files(&[path.to_path_buf()], class_names(dir)?)
    }

    /// Open the given batch files, in this order, with these class names.
    pub fn open_files(files: &[PathBuf], classes: Vec<String>) -> Result<Self, SourceError> {
        let mut batches = Vec::with_capacity(files.len());
        let mut labels = Vec::new();
        for path in files {
            let file = crate::source::open_regular(path)?;
            let len = file.metadata().map_err(|e| SourceError::io(path, e))?.len();
            if len == 0 {
                return Err(SourceError::format(path, "empty file"));
            }
            if len % RECORD as u64 != 0 {
                return Err(SourceError::format(
                    path,
                    format!(
                        "length {len} is not a multiple of the {RECORD}-byte record \
                         (1 label byte + {PIXELS} pixel bytes): not a CIFAR-10 batch, or truncated"
                    ),
                ));
            }
            // SAFETY: read-only map; every access is bounds-checked against its length.
            // As with any mmap reader we assume the file is not truncated while open.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| SourceError::io(path, e))?;
            let first = labels.len();
            for (i, rec) in map.chunks_exact(RECORD).enumerate() {
                let label = rec[0];
                if usize::from(label) >= classes.len() {
                    return Err(SourceError::format(
                        path,
                        format!(
                            "record {i} has label {label}; CIFAR-10 labels are 0..{}",
                            classes.len() - 1
                        ),
                    ));
                }
                labels.push(label);
            }
            batches.push(Batch {
                path: path.clone(),
                map,
                first,
            });
        }
        Ok(Cifar10 {
            batches,
            labels,
            classes,
        })
    }

    /// The batch file and the record within it of sample `index`.
    fn locate(&self, index: usize) -> Option<(&Batch, usize)> {
        if index >= self.labels.len() {
            return None;
        }
        let b = self.batches.partition_point(|b| b.first <= index);
        let batch = self.batches.get(b.checked_sub(1)?)?;
        Some((batch, index - batch.first))
    }
}

/// Planar CHW (all red, all green, all blue) to interleaved HWC.
pub fn chw_to_hwc(chw: &[u8], hwc: &mut [u8]) {
    let plane = chw.len() / 3;
    let (r, rest) = chw.split_at(plane);
    let (g, b) = rest.split_at(plane);
    for (((px, &r), &g), &b) in hwc.chunks_exact_mut(3).zip(r).zip(g).zip(b) {
        px[0] = r;
        px[1] = g;
        px[2] = b;
    }
}

impl Source for Cifar10 {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        u32::from(self.labels[index])
    }

    fn describe(&self, index: usize) -> String {
        match self.locate(index) {
            Some((b, i)) => format!("{} record {i}", b.path.display()),
            None => format!("CIFAR-10 sample {index} (out of range)"),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let (batch, i) = self.locate(index).ok_or_else(|| {
            SourceError::record(
                self.describe(index),
                format!("index out of range (the set holds {})", self.len()),
            )
        })?;
        let start = i * RECORD + 1;
        let chw = batch
            .map
            .get(start..start + PIXELS)
            .ok_or_else(|| SourceError::record(self.describe(index), "extends past end of file"))?;
        buf.resize(PIXELS, 0);
        chw_to_hwc(chw, buf);
        Ok(RecordKind::Raw {
            width: SIDE as u32,
            height: SIDE as u32,
            channels: 3,
        })
    }

    fn format(&self) -> &'static str {
        "cifar10"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planar_to_interleaved() {
        let chw = [1, 2, 10, 20, 100, 200];
        let mut hwc = [0; 6];
        chw_to_hwc(&chw, &mut hwc);
        assert_eq!(hwc, [1, 10, 100, 2, 20, 200]);
    }
}
