//! End-to-end tests of the data sources (ImageFolder, packed, MNIST, CIFAR-10), the
//! format detection of `source::open`, and the synthetic data generators: a module
//! each; the helpers they share are here.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use stoker_loader::source::{
    self, cifar, packed, Cifar10, ImageFolder, Mnist, PackedReader, PackedWriter, RecordKind,
    Source, SourceError,
};
use stoker_loader::synthetic::{self, ShapesOptions};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A tiny valid PNG whose pixels encode `seed`, so every file's bytes differ.
fn png(seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_fn(4, 3, |x, y| image::Rgb([seed, x as u8, y as u8]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .expect("png");
    out.into_inner()
}

fn write(path: &Path, bytes: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).expect("mkdir");
    }
    fs::write(path, bytes).expect("write");
}

/// A folder with classes created out of order, mixed-case extensions, hidden and
/// non-image files and a nested folder. Returns the expected (relative path, label)s.
fn make_folder(root: &Path) -> Vec<(&'static str, u32)> {
    let files = [
        ("b_dog/2.png", 1),
        ("a_cat/z.JPG", 0),
        ("a_cat/b.png", 0),
        ("c_eel/x.jpeg", 2),
        ("a_cat/a.PnG", 0),
        ("b_dog/1.jpg", 1),
        ("b_dog/sub/0.png", 1),
    ];
    for (k, (p, _)) in files.iter().enumerate() {
        write(&root.join(p), &png(k as u8));
    }
    write(&root.join("a_cat/.hidden.png"), &png(99));
    write(&root.join("a_cat/notes.txt"), b"not an image");
    write(&root.join(".git/x.png"), &png(98));
    write(&root.join("README.md"), b"top-level file");
    let mut expected = vec![
        ("a_cat/a.PnG", 0),
        ("a_cat/b.png", 0),
        ("a_cat/z.JPG", 0),
        ("b_dog/1.jpg", 1),
        ("b_dog/2.png", 1),
        ("b_dog/sub/0.png", 1),
        ("c_eel/x.jpeg", 2),
    ];
    expected.sort_by_key(|(_, l)| *l);
    expected
}

fn all_records(src: &dyn Source) -> Vec<(Vec<u8>, u32, RecordKind)> {
    let mut buf = Vec::new();
    (0..src.len())
        .map(|i| {
            let kind = src
                .read(i, &mut buf)
                .unwrap_or_else(|e| panic!("read {i}: {e}"));
            (buf.clone(), src.label(i), kind)
        })
        .collect()
}

fn reason(e: &SourceError) -> String {
    match e {
        SourceError::Format { reason, .. } => reason.clone(),
        other => panic!("expected a format error, got {other:?}"),
    }
}

mod cifar_batches;
mod format_detection;
mod image_folder;
mod mnist_idx;
mod packed_files;
mod synthetic_sets;
