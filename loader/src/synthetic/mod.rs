//! Synthetic data sets: a procedural ImageFolder of shapes for demos and benchmarks, and
//! tiny MNIST / CIFAR-10 files so that tests need no downloads.
//!
//! Every image is drawn from its own generator, `SampleRng::new(seed, stream, index)`,
//! so a set is the same bytes whatever the number of threads, and the pixels are
//! learnable: the class is the kind of shape, while position, size, rotation and all
//! colours are random, over a gradient background with noise.
//!
//! Streams: 0 for `shapes`, 1 and 2 for MNIST train and t10k, 10 + k for CIFAR-10
//! batch k (k = 1..5) and 16 for its test batch.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use image::codecs::jpeg::JpegEncoder;
use image::ExtendedColorType;
use stoker_augment::SampleRng;

use crate::durable::write_bytes;
use crate::source::cifar;

mod scenes;
pub use scenes::{scenes, ScenesOptions, KEYPOINT_NAMES};

/// The shape of each class, by label; folders are named `00_circle`, `01_square`, ….
pub const SHAPES: [&str; 10] = [
    "circle", "square", "triangle", "plus", "ring", "diamond", "hbars", "vbars", "star", "ellipse",
];

/// JPEG quality of generated images.
pub const JPEG_QUALITY: u8 = 90;

/// What [`shapes`] makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapesOptions {
    /// Number of images (spread evenly over the classes).
    pub count: usize,
    /// Side of each (square) image in pixels, 8..=4096.
    pub size: u32,
    /// Number of classes, 1..=10 (the first `classes` of [`SHAPES`]).
    pub classes: usize,
    /// Seeds every image's generator: the same options always make the same bytes.
    pub seed: u64,
}

impl Default for ShapesOptions {
    fn default() -> Self {
        ShapesOptions {
            count: 1000,
            size: 64,
            classes: 10,
            seed: 0,
        }
    }
}

/// What a generator wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct GenStats {
    /// Number of images written.
    pub images: usize,
    /// Number of classes the images are spread over.
    pub classes: usize,
    /// Bytes of image files written.
    pub bytes: u64,
    /// Wall-clock time the generator took, in seconds.
    pub seconds: f64,
}

/// An error generating a data set.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// Creating, writing or renaming a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The output directory cannot be used: it is not empty, or has no name.
    #[error("{}: {reason}", path.display())]
    Refused {
        /// The output directory.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// An option is out of range (a count of zero, a size or class count outside the
    /// accepted range).
    #[error("invalid options: {0}")]
    Options(String),
    /// Encoding an image failed (or, for a scene's mask PNG, encoding or saving it).
    #[error("encoding {}: {source}", path.display())]
    Encode {
        /// The file the image was to be written to.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> GenError + '_ {
    move |source| GenError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Folder name of class `k`, e.g. `03_plus`.
pub fn class_dir_name(k: usize) -> String {
    format!("{k:02}_{}", SHAPES[k % SHAPES.len()])
}

pub(crate) fn luma(c: [f32; 3]) -> f32 {
    0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]
}

pub(crate) fn random_colour(rng: &mut SampleRng) -> [f32; 3] {
    [
        rng.uniform(0.0, 255.0) as f32,
        rng.uniform(0.0, 255.0) as f32,
        rng.uniform(0.0, 255.0) as f32,
    ]
}

/// Is the point (x, y), in the shape's own frame scaled so the shape fits the unit
/// disc, inside a shape of kind `kind`? `aux` is the kind's free parameter (ring width,
/// ellipse aspect).
pub(crate) fn inside(kind: usize, x: f32, y: f32, aux: f32) -> bool {
    match kind {
        0 => x * x + y * y <= 1.0,
        1 => x.abs().max(y.abs()) <= 0.78,
        2 => {
            // Equilateral, apex up: three half-planes through the edges.
            let (s, h) = (3f32.sqrt(), 0.5);
            y <= h && s * x - y <= 1.0 && -s * x - y <= 1.0
        }
        3 => (x.abs() <= 0.26 && y.abs() <= 0.95) || (y.abs() <= 0.26 && x.abs() <= 0.95),
        4 => {
            let r2 = x * x + y * y;
            r2 <= 1.0 && r2 >= aux * aux
        }
        5 => x.abs() + y.abs() <= 1.0,
        6 | 7 => {
            let (along, across) = if kind == 6 { (x, y) } else { (y, x) };
            along.abs() <= 0.9
                && across.abs() <= 0.9
                && ((across + 0.9) / 0.36).floor() as i32 % 2 == 0
        }
        8 => {
            // Five points: the boundary radius falls linearly from 1 at a point to 0.42
            // between points.
            let r = (x * x + y * y).sqrt();
            let sector = std::f32::consts::TAU / 5.0;
            let a = (y.atan2(x) + std::f32::consts::FRAC_PI_2).rem_euclid(sector);
            let t = (a - sector / 2.0).abs() / (sector / 2.0);
            r <= 0.42 + 0.58 * t
        }
        _ => {
            let yy = y / aux;
            x * x + yy * yy <= 1.0
        }
    }
}

/// Draw one `size`x`size` RGB image (HWC) of shape `kind` into `out`.
///
/// The shape's colour is random but kept at least a visible step of brightness away
/// from the background under it, so that the class is in the shape, not the colour.
pub fn render_shape(kind: usize, size: u32, rng: &mut SampleRng, out: &mut Vec<u8>) {
    let kind = kind % SHAPES.len();
    let s = size as usize;
    let sf = size as f32;
    // Background: a gradient between two colours in a random direction, plus noise.
    let c0 = random_colour(rng);
    let c1 = random_colour(rng);
    let phi = rng.uniform(0.0, std::f64::consts::TAU) as f32;
    let (gx, gy) = (phi.cos() / sf, phi.sin() / sf);
    let noise = rng.uniform(8.0, 28.0) as f32;
    // The shape: radius 20..40% of the side, wholly inside the image.
    let r = rng.uniform(0.2, 0.4) as f32 * sf;
    let cx = rng.uniform(r as f64, (sf - r) as f64) as f32;
    let cy = rng.uniform(r as f64, (sf - r) as f64) as f32;
    let theta = match kind {
        // Squares, pluses, diamonds and bars would turn into one another if rotated
        // freely; keep them near their canonical angle.
        1 | 3 | 5 => rng.uniform(-0.3, 0.3),
        6 | 7 => rng.uniform(-0.2, 0.2),
        _ => rng.uniform(0.0, std::f64::consts::TAU),
    } as f32;
    let aux = match kind {
        4 => rng.uniform(0.5, 0.68) as f32,
        _ => rng.uniform(0.4, 0.6) as f32,
    };
    let mut fill = random_colour(rng);
    let t_center = ((cx - sf / 2.0) * gx + (cy - sf / 2.0) * gy + 0.5).clamp(0.0, 1.0);
    let bg_center: [f32; 3] = std::array::from_fn(|k| c0[k] + (c1[k] - c0[k]) * t_center);
    let (lf, lb) = (luma(fill), luma(bg_center));
    if (lf - lb).abs() < 70.0 {
        // Too close to the background: push the fill towards black or white.
        let target = if lb > 128.0 { 0.0 } else { 255.0 };
        fill = fill.map(|c| c + (target - c) * 0.7);
    }
    let fill_noise = rng.uniform(2.0, 12.0) as f32;
    let (sin, cos) = theta.sin_cos();
    out.clear();
    out.resize(s * s * 3, 0);
    // 2x2 supersampling: edges get partial coverage instead of stair steps.
    const SUB: [f32; 2] = [0.25, 0.75];
    for py in 0..s {
        for px in 0..s {
            let mut hits = 0u32;
            for oy in SUB {
                for ox in SUB {
                    let dx = (px as f32 + ox - cx) / r;
                    let dy = (py as f32 + oy - cy) / r;
                    let x = dx * cos + dy * sin;
                    let y = -dx * sin + dy * cos;
                    hits += u32::from(inside(kind, x, y, aux));
                }
            }
            let a = hits as f32 / 4.0;
            let t =
                ((px as f32 - sf / 2.0) * gx + (py as f32 - sf / 2.0) * gy + 0.5).clamp(0.0, 1.0);
            let o = (py * s + px) * 3;
            for k in 0..3 {
                let bg = c0[k] + (c1[k] - c0[k]) * t + rng.uniform(-1.0, 1.0) as f32 * noise;
                let fg = fill[k] + rng.uniform(-1.0, 1.0) as f32 * fill_noise;
                out[o + k] = (bg * (1.0 - a) + fg * a).round().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

fn encode_jpeg(rgb: &[u8], size: u32, path: &Path, out: &mut Vec<u8>) -> Result<(), GenError> {
    out.clear();
    JpegEncoder::new_with_quality(&mut *out, JPEG_QUALITY)
        .encode(rgb, size, size, ExtendedColorType::Rgb8)
        .map_err(|e| GenError::Encode {
            path: path.to_path_buf(),
            source: e.into(),
        })
}

/// `DIR.tmp-PID-N-NANOS`: where a set for `dir` is made before it is renamed into place.
pub(crate) fn temp_dir_for(dir: &Path) -> Result<PathBuf, GenError> {
    let name = dir.file_name().ok_or_else(|| GenError::Refused {
        path: dir.to_path_buf(),
        reason: "not a directory name".into(),
    })?;
    let mut name = name.to_os_string();
    // Unique to this call: a counter for the threads of one process, and the time for
    // processes on two machines (same pid) writing to one shared folder.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    name.push(format!(".tmp-{}-{call}-{nanos}", std::process::id()));
    Ok(dir.with_file_name(name))
}

/// Refuse to overwrite a non-empty `dir`; an empty one is replaced.
pub(crate) fn check_target(dir: &Path) -> Result<(), GenError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(GenError::Refused {
                    path: dir.to_path_buf(),
                    reason: "already exists and is not empty; remove it or pick another".into(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(GenError::Io {
            path: dir.to_path_buf(),
            source: e,
        }),
    }
}

/// Move a finished `tmp` set to `dir` in one rename, so `dir` is either absent or whole.
pub(crate) fn publish(tmp: &Path, dir: &Path) -> Result<(), GenError> {
    check_target(dir)?;
    if dir.exists() {
        fs::remove_dir(dir).map_err(io_err(dir))?;
    }
    fs::rename(tmp, dir).map_err(io_err(dir))
}

/// Removes a temporary directory unless disarmed: on error or panic a half-made set
/// disappears instead of lingering under a name that looks like data.
pub(crate) struct TempDir(pub(crate) Option<PathBuf>);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Generate an ImageFolder of `opts.count` JPEG shapes in `dir` (one sub-folder per
/// class, `00_circle` …, balanced: image `i` has class `i % classes`).
///
/// The set is built in `DIR.tmp-PID-N-NANOS` and renamed to `dir` when complete, so an
/// interrupted run never leaves a `dir` that looks whole. `dir` must not exist or be
/// empty. `progress(done, total)` is called on this thread as images are written. The
/// bytes depend only on the options, not on the number of threads.
pub fn shapes(
    dir: &Path,
    opts: &ShapesOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<GenStats, GenError> {
    if opts.count == 0 {
        return Err(GenError::Options("count must be at least 1".into()));
    }
    if !(1..=SHAPES.len()).contains(&opts.classes) {
        return Err(GenError::Options(format!(
            "classes must be 1..={}, not {}",
            SHAPES.len(),
            opts.classes
        )));
    }
    if !(8..=4096).contains(&opts.size) {
        return Err(GenError::Options(format!(
            "size must be 8..=4096 pixels, not {}",
            opts.size
        )));
    }
    let start = Instant::now();
    check_target(dir)?;
    let tmp = temp_dir_for(dir)?;
    if let Some(parent) = tmp.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    let mut guard = TempDir(Some(tmp.clone()));
    let class_dirs: Vec<PathBuf> = (0..opts.classes)
        .map(|k| tmp.join(class_dir_name(k)))
        .collect();
    for d in &class_dirs {
        fs::create_dir_all(d).map_err(io_err(d))?;
    }
    let width = opts.count.to_string().len().max(6);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(opts.count);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<Result<u64, GenError>>();
    let mut bytes = 0u64;
    let mut failure = None;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop, class_dirs) = (&next, &stop, &class_dirs);
            scope.spawn(move || {
                let (mut rgb, mut jpeg) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= opts.count {
                        break;
                    }
                    let class = i % opts.classes;
                    let path = class_dirs[class].join(format!("{i:0width$}.jpg"));
                    let mut rng = SampleRng::new(opts.seed, 0, i as u64);
                    render_shape(class, opts.size, &mut rng, &mut rgb);
                    let r = encode_jpeg(&rgb, opts.size, &path, &mut jpeg).and_then(|()| {
                        fs::write(&path, &jpeg).map_err(io_err(&path))?;
                        Ok(jpeg.len() as u64)
                    });
                    if tx.send(r).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut done = 0;
        for r in rx {
            match r {
                Ok(n) => {
                    bytes += n;
                    done += 1;
                    progress(done, opts.count);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    failure.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    publish(&tmp, dir)?;
    guard.0 = None;
    Ok(GenStats {
        images: opts.count,
        classes: opts.classes,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// A greyscale shape for MNIST-style data: luma of [`render_shape`].
fn render_grey(kind: usize, size: u32, rng: &mut SampleRng, rgb: &mut Vec<u8>) -> Vec<u8> {
    render_shape(kind, size, rng, rgb);
    rgb.chunks_exact(3)
        .map(|p| {
            let y = 0.299 * f32::from(p[0]) + 0.587 * f32::from(p[1]) + 0.114 * f32::from(p[2]);
            y.round().clamp(0.0, 255.0) as u8
        })
        .collect()
}

/// Write a tiny MNIST set in `dir` (created if needed): `train-images-idx3-ubyte`,
/// `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and `t10k-labels-idx1-ubyte`,
/// each split with `n` 28x28 greyscale images. Image `i` has label `i % 10` and shows
/// that class's shape, so a model can learn it.
pub fn write_mnist(dir: &Path, n: usize, seed: u64) -> Result<(), GenError> {
    let count = u32::try_from(n).map_err(|_| GenError::Options(format!("{n} images")))?;
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut rgb = Vec::new();
    for (prefix, stream) in [("train", 1u64), ("t10k", 2)] {
        let mut images = Vec::with_capacity(16 + n * 784);
        for v in [2051u32, count, 28, 28] {
            images.extend_from_slice(&v.to_be_bytes());
        }
        let mut labels = Vec::with_capacity(8 + n);
        for v in [2049u32, count] {
            labels.extend_from_slice(&v.to_be_bytes());
        }
        for i in 0..n {
            let mut rng = SampleRng::new(seed, stream, i as u64);
            images.extend(render_grey(i % 10, 28, &mut rng, &mut rgb));
            labels.push((i % 10) as u8);
        }
        for (kind, bytes) in [("images-idx3", &images), ("labels-idx1", &labels)] {
            let path = dir.join(format!("{prefix}-{kind}-ubyte"));
            write_bytes(&path, bytes).map_err(io_err(&path))?;
        }
    }
    Ok(())
}

/// Write a tiny CIFAR-10 set in `dir` (created if needed): `data_batch_1.bin` ..
/// `data_batch_5.bin`, `test_batch.bin` and `batches.meta.txt`, each batch with
/// `n_per_batch` 32x32 RGB records. Record `i` of a batch has label `i % 10` and shows
/// that class's shape.
pub fn write_cifar(dir: &Path, n_per_batch: usize, seed: u64) -> Result<(), GenError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut rgb = Vec::new();
    let files = cifar::TRAIN_FILES
        .iter()
        .enumerate()
        .map(|(k, f)| (*f, 11 + k as u64))
        .chain(std::iter::once((cifar::TEST_FILE, 16)));
    for (name, stream) in files {
        let mut out = Vec::with_capacity(n_per_batch * cifar::RECORD);
        for i in 0..n_per_batch {
            let label = i % 10;
            let mut rng = SampleRng::new(seed, stream, i as u64);
            render_shape(label, cifar::SIDE as u32, &mut rng, &mut rgb);
            out.push(label as u8);
            // HWC to the file's planar CHW.
            for c in 0..3 {
                out.extend(rgb.iter().skip(c).step_by(3));
            }
        }
        let path = dir.join(name);
        write_bytes(&path, &out).map_err(io_err(&path))?;
    }
    let mut meta = cifar::CLASSES.join("\n");
    meta.push_str("\n\n");
    let path = dir.join("batches.meta.txt");
    write_bytes(&path, meta.as_bytes()).map_err(io_err(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_covers_some_but_not_all_of_the_disc() {
        for (kind, name) in SHAPES.iter().enumerate() {
            let mut hits = 0;
            let n = 64;
            for j in 0..n {
                for i in 0..n {
                    let x = (i as f32 + 0.5) / n as f32 * 2.0 - 1.0;
                    let y = (j as f32 + 0.5) / n as f32 * 2.0 - 1.0;
                    hits += usize::from(inside(kind, x, y, 0.5));
                }
            }
            let share = hits as f64 / (n * n) as f64;
            assert!((0.1..0.85).contains(&share), "{name}: {share}");
        }
    }

    #[test]
    fn render_is_deterministic_and_not_flat() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        render_shape(3, 32, &mut SampleRng::new(5, 0, 7), &mut a);
        render_shape(3, 32, &mut SampleRng::new(5, 0, 7), &mut b);
        assert_eq!(a, b);
        assert_eq!(a.len(), 32 * 32 * 3);
        let distinct: std::collections::HashSet<_> = a.chunks(3).collect();
        assert!(distinct.len() > 100);
    }
}
