//! MNIST in its original IDX files (`train-images-idx3-ubyte` and friends, plain or
//! gzipped), held in memory: the training set is 47 MB of pixels.
//!
//! IDX is big-endian: the images file is magic 2051, count, rows, cols, then
//! count*rows*cols bytes; the labels file is magic 2049, count, then count bytes.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{RecordKind, Source, SourceError};

/// Magic number of an IDX file of u8 images (type 0x08, 3 dimensions).
pub const IMAGES_MAGIC: u32 = 2051;
/// Magic number of an IDX file of u8 labels (type 0x08, 1 dimension).
pub const LABELS_MAGIC: u32 = 2049;
/// The largest file we agree to decompress: far above MNIST's 47 MB, far below harm.
const MAX_DECOMPRESSED: u64 = 1 << 32;

/// MNIST-format images and labels (also fits Fashion-MNIST and KMNIST, same files).
#[derive(Debug)]
pub struct Mnist {
    images_path: PathBuf,
    pixels: Vec<u8>,
    labels: Vec<u8>,
    rows: u32,
    cols: u32,
    classes: Vec<String>,
}

/// Read a file whole, gunzipping it when it starts with the gzip magic (whatever its
/// name says).
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, SourceError> {
    let mut bytes = Vec::new();
    super::open_regular(path)?
        .read_to_end(&mut bytes)
        .map_err(|e| SourceError::io(path, e))?;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut out)
        .map_err(|e| SourceError::format(path, format!("bad gzip data: {e}")).caused_by(e))?;
    if out.len() as u64 > MAX_DECOMPRESSED {
        return Err(SourceError::format(
            path,
            "decompresses to more than 4 GiB; not an MNIST file",
        ));
    }
    Ok(out)
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The names MNIST's files go by, for `prefix` `train` or `t10k`: the official
/// `-idx3-ubyte` spelling, the `.idx3-ubyte` one some mirrors use, each plain or `.gz`.
fn candidates(prefix: &str, kind: &str, dims: u8) -> [String; 4] {
    [
        format!("{prefix}-{kind}-idx{dims}-ubyte"),
        format!("{prefix}-{kind}.idx{dims}-ubyte"),
        format!("{prefix}-{kind}-idx{dims}-ubyte.gz"),
        format!("{prefix}-{kind}.idx{dims}-ubyte.gz"),
    ]
}

/// Every name an MNIST images or labels file of either split has (plain or gzipped):
/// a folder holding any of them is an MNIST folder.
pub(crate) fn file_names() -> Vec<String> {
    ["train", "t10k"]
        .iter()
        .flat_map(|p| [candidates(p, "images", 3), candidates(p, "labels", 1)])
        .flatten()
        .collect()
}

fn find_in(dir: &Path, names: &[String]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

impl Mnist {
    /// The images and labels files of one split in `dir`, if both are there.
    pub fn find(dir: &Path, train: bool) -> Option<(PathBuf, PathBuf)> {
        let prefix = if train { "train" } else { "t10k" };
        let images = find_in(dir, &candidates(prefix, "images", 3))?;
        let labels = find_in(dir, &candidates(prefix, "labels", 1))?;
        Some((images, labels))
    }

    /// True when `dir` holds an MNIST images or labels file of either split.
    pub fn detect(dir: &Path) -> bool {
        file_names().iter().any(|n| dir.join(n).is_file())
    }

    /// Open the training (`train`) or test (`t10k`) split found in `dir`.
    pub fn open_dir(dir: &Path, train: bool) -> Result<Self, SourceError> {
        let (split, prefix) = if train {
            ("training", "train")
        } else {
            ("test", "t10k")
        };
        let images = find_in(dir, &candidates(prefix, "images", 3));
        let labels = find_in(dir, &candidates(prefix, "labels", 1));
        match (images, labels) {
            (Some(i), Some(l)) => Self::open(&i, &l),
            (i, _) => Err(SourceError::format(
                dir,
                format!(
                    "MNIST {split} split incomplete: no {} (or .gz) found",
                    if i.is_none() {
                        candidates(prefix, "images", 3)[0].clone()
                    } else {
                        candidates(prefix, "labels", 1)[0].clone()
                    }
                ),
            )),
        }
    }

    /// Open one IDX file, images or labels, and find its partner beside it by name
    /// (`…images…idx3…` <-> `…labels…idx1…`).
    pub fn open_file(path: &Path) -> Result<Self, SourceError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| SourceError::format(path, "not an MNIST file name"))?;
        let partner = if name.contains("images") {
            name.replace("images", "labels").replace("idx3", "idx1")
        } else if name.contains("labels") {
            name.replace("labels", "images").replace("idx1", "idx3")
        } else {
            return Err(SourceError::format(
                path,
                "cannot tell the images file from the labels file: the name has neither \
                 `images` nor `labels`",
            ));
        };
        let other = path.with_file_name(&partner);
        if !other.is_file() {
            return Err(SourceError::format(
                path,
                format!("MNIST partner file {partner} not found beside it"),
            ));
        }
        if name.contains("images") {
            Self::open(path, &other)
        } else {
            Self::open(&other, path)
        }
    }

    /// Open an images file and its labels file (either may be gzipped) and check that
    /// they agree.
    pub fn open(images_path: &Path, labels_path: &Path) -> Result<Self, SourceError> {
        let images = read_maybe_gz(images_path)?;
        let bad = |reason: String| SourceError::format(images_path, reason);
        let magic = be_u32(&images, 0).ok_or_else(|| {
            bad(format!(
                "truncated: IDX header needs 16 bytes, file has {}",
                images.len()
            ))
        })?;
        if magic != IMAGES_MAGIC {
            return Err(bad(format!(
                "bad magic {magic} (an IDX images file has {IMAGES_MAGIC})"
            )));
        }
        let (Some(count), Some(rows), Some(cols)) =
            (be_u32(&images, 4), be_u32(&images, 8), be_u32(&images, 12))
        else {
            return Err(bad(format!(
                "truncated: IDX header needs 16 bytes, file has {}",
                images.len()
            )));
        };
        if rows == 0 || cols == 0 {
            return Err(bad(format!("images of zero size {rows}x{cols}")));
        }
        let want = (count as u64)
            .checked_mul(rows as u64 * cols as u64)
            .and_then(|n| n.checked_add(16));
        if want != Some(images.len() as u64) {
            return Err(bad(format!(
                "{count} images of {rows}x{cols} need {} bytes, file has {}",
                want.map_or_else(|| "too many".into(), |w| w.to_string()),
                images.len()
            )));
        }

        let labels = read_maybe_gz(labels_path)?;
        let bad = |reason: String| SourceError::format(labels_path, reason);
        let (Some(magic), Some(lcount)) = (be_u32(&labels, 0), be_u32(&labels, 4)) else {
            return Err(bad(format!(
                "truncated: IDX header needs 8 bytes, file has {}",
                labels.len()
            )));
        };
        if magic != LABELS_MAGIC {
            return Err(bad(format!(
                "bad magic {magic} (an IDX labels file has {LABELS_MAGIC})"
            )));
        }
        if lcount != count {
            return Err(bad(format!(
                "{lcount} labels, but {} holds {count} images",
                images_path.display()
            )));
        }
        if labels.len() as u64 != 8 + count as u64 {
            return Err(bad(format!(
                "{count} labels need {} bytes, file has {}",
                8 + count as u64,
                labels.len()
            )));
        }
        let labels = labels[8..].to_vec();
        if let Some((i, l)) = labels.iter().enumerate().find(|(_, &l)| l >= 10) {
            return Err(bad(format!(
                "record {i} has label {l}; MNIST labels are 0..9"
            )));
        }
        let mut pixels = images;
        pixels.drain(..16);
        Ok(Mnist {
            images_path: images_path.to_path_buf(),
            pixels,
            labels,
            rows,
            cols,
            classes: (0..10).map(|d| d.to_string()).collect(),
        })
    }

    /// The images file this source reads.
    pub fn images_path(&self) -> &Path {
        &self.images_path
    }

    fn sample_len(&self) -> usize {
        self.rows as usize * self.cols as usize
    }
}

impl Source for Mnist {
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
        format!("{} record {index}", self.images_path.display())
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        let n = self.sample_len();
        let bytes = index
            .checked_mul(n)
            .and_then(|s| self.pixels.get(s..s + n))
            .ok_or_else(|| {
                SourceError::record(
                    self.describe(index),
                    format!("index out of range (the file holds {})", self.len()),
                )
            })?;
        buf.extend_from_slice(bytes);
        Ok(RecordKind::Raw {
            width: self.cols,
            height: self.rows,
            channels: 1,
        })
    }

    fn format(&self) -> &'static str {
        "mnist"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_are_candidates() {
        let c = candidates("train", "images", 3);
        assert!(c.contains(&"train-images-idx3-ubyte".to_string()));
        assert!(c.contains(&"train-images.idx3-ubyte".to_string()));
        assert!(c.contains(&"train-images-idx3-ubyte.gz".to_string()));
    }
}
