//! End-to-end tests of the data sources (ImageFolder, packed, MNIST, CIFAR-10), the
//! format detection of `source::open`, and the synthetic data generators.

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

// ---------------------------------------------------------------- ImageFolder

#[test]
fn folder_orders_classes_and_files_by_name() {
    let dir = tmp();
    let expected = make_folder(dir.path());
    let src = ImageFolder::open(dir.path()).expect("open");
    assert_eq!(src.classes(), ["a_cat", "b_dog", "c_eel"]);
    assert_eq!(src.len(), expected.len());
    assert_eq!(src.format(), "folder");
    let mut buf = Vec::new();
    for (i, (rel, label)) in expected.iter().enumerate() {
        let path = dir.path().join(rel);
        assert_eq!(src.path(i), path, "sample {i}");
        assert_eq!(src.label(i), *label, "label of {rel}");
        assert_eq!(src.describe(i), path.display().to_string());
        assert_eq!(src.read(i, &mut buf).expect("read"), RecordKind::Encoded);
        assert_eq!(buf, fs::read(&path).expect("file"), "bytes of {rel}");
    }
}

#[test]
fn folder_errors_name_the_path_and_the_problem() {
    let dir = tmp();
    let missing = dir.path().join("nope");
    let e = ImageFolder::open(&missing).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(reason(&e).contains("no such directory"), "{e}");

    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let e = ImageFolder::open(&empty).unwrap_err();
    assert!(reason(&e).contains("empty folder"), "{e}");
    assert!(e.to_string().contains("empty"), "{e}");

    let flat = dir.path().join("flat");
    write(&flat.join("a.jpg"), &png(1));
    write(&flat.join("b.jpg"), &png(2));
    let e = ImageFolder::open(&flat).unwrap_err();
    assert!(reason(&e).contains("no class sub-folders"), "{e}");

    let holes = dir.path().join("holes");
    write(&holes.join("cat/a.jpg"), &png(1));
    write(&holes.join("dog/readme.txt"), b"x");
    fs::create_dir_all(holes.join("eel")).unwrap();
    let e = ImageFolder::open(&holes).unwrap_err();
    let r = reason(&e);
    assert!(
        r.contains("dog") && r.contains("eel") && !r.contains("cat"),
        "{e}"
    );
    assert!(r.contains("no images"), "{e}");

    let file = dir.path().join("file.jpg");
    write(&file, &png(1));
    let e = ImageFolder::open(&file).unwrap_err();
    assert!(reason(&e).contains("not a directory"), "{e}");
}

#[test]
fn reads_reuse_the_callers_buffer() {
    let dir = tmp();
    make_folder(&dir.path().join("f"));
    synthetic::write_mnist(&dir.path().join("m"), 5, 1).unwrap();
    synthetic::write_cifar(&dir.path().join("c"), 3, 1).unwrap();
    let folder = ImageFolder::open(&dir.path().join("f")).unwrap();
    packed::pack_source(&folder, &dir.path().join("p.pack"), |_, _| {}).unwrap();
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(folder),
        Box::new(Mnist::open_dir(&dir.path().join("m"), true).unwrap()),
        Box::new(Cifar10::open_dir(&dir.path().join("c"), true).unwrap()),
        Box::new(PackedReader::open(&dir.path().join("p.pack")).unwrap()),
    ];
    for src in &sources {
        let mut buf = Vec::with_capacity(1 << 16);
        let ptr = buf.as_ptr();
        for i in 0..src.len() {
            src.read(i, &mut buf).unwrap();
            assert!(!buf.is_empty());
            assert_eq!(buf.as_ptr(), ptr, "{} reallocated", src.format());
        }
        let e = src.read(src.len(), &mut buf).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }
}

#[test]
fn sources_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ImageFolder>();
    check::<PackedReader>();
    check::<Mnist>();
    check::<Cifar10>();
}

// ---------------------------------------------------------------- packed

fn assert_same_source(a: &dyn Source, b: &dyn Source) {
    assert_eq!(a.len(), b.len());
    assert_eq!(a.classes(), b.classes());
    assert_eq!(all_records(a), all_records(b));
}

#[test]
fn packed_round_trip_from_a_folder() {
    let dir = tmp();
    make_folder(&dir.path().join("f"));
    let folder = ImageFolder::open(&dir.path().join("f")).unwrap();
    let out = dir.path().join("set.pack");
    let mut calls = Vec::new();
    let stats = packed::pack_source(&folder, &out, |d, t| calls.push((d, t))).unwrap();
    assert_eq!(stats.records, folder.len());
    assert_eq!(stats.file_bytes, fs::metadata(&out).unwrap().len());
    assert_eq!(calls.len(), folder.len());
    assert_eq!(calls.last(), Some(&(folder.len(), folder.len())));
    let p = PackedReader::open(&out).unwrap();
    assert_eq!(p.format(), "packed");
    assert_eq!(p.layout(), RecordKind::Encoded);
    assert_eq!(p.describe(3), format!("{} record 3", out.display()));
    assert_same_source(&folder, &p);
    // Only the finished file is left: no temporary.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn packed_round_trip_from_mnist_and_cifar_keeps_raw_shapes() {
    let dir = tmp();
    synthetic::write_mnist(&dir.path().join("m"), 12, 3).unwrap();
    synthetic::write_cifar(&dir.path().join("c"), 4, 3).unwrap();
    let m = Mnist::open_dir(&dir.path().join("m"), true).unwrap();
    let c = Cifar10::open_dir(&dir.path().join("c"), true).unwrap();
    for (src, shape) in [
        (&m as &dyn Source, (28, 28, 1)),
        (&c as &dyn Source, (32, 32, 3)),
    ] {
        let out = dir.path().join(format!("{}.pack", src.format()));
        packed::pack_source(src, &out, |_, _| {}).unwrap();
        let p = PackedReader::open(&out).unwrap();
        let want = RecordKind::Raw {
            width: shape.0,
            height: shape.1,
            channels: shape.2,
        };
        assert_eq!(p.layout(), want);
        assert_same_source(src, &p);
        // And `open` finds it by its magic.
        let o = source::open(&out, source::Split::Train).unwrap();
        assert_eq!(o.format(), "packed");
        assert_same_source(src, o.as_ref());
    }
}

/// A small raw pack: 20 records of 4x4x1 with labels i % 3.
fn small_pack(path: &Path) -> Vec<u8> {
    let classes = ["zero".to_string(), "one".into(), "two".into()];
    let layout = RecordKind::Raw {
        width: 4,
        height: 4,
        channels: 1,
    };
    let mut w = PackedWriter::create(path, layout, &classes).unwrap();
    for i in 0..20u8 {
        let rec: Vec<u8> = (0..16)
            .map(|k| i.wrapping_mul(31).wrapping_add(k))
            .collect();
        w.append(&rec, u32::from(i % 3)).unwrap();
    }
    assert_eq!(w.len(), 20);
    w.finish().unwrap();
    fs::read(path).unwrap()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn open_err(path: &Path, bytes: &[u8]) -> String {
    fs::write(path, bytes).unwrap();
    let e = PackedReader::open(path).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    reason(&e)
}

#[test]
fn damaged_packs_are_reported_precisely() {
    let dir = tmp();
    let good = small_pack(&dir.path().join("good.pack"));
    let bad = dir.path().join("bad.pack");
    let index_offset = u64_at(&good, 80) as usize;

    let mut b = good.clone();
    b[0] = b'X';
    assert!(open_err(&bad, &b).starts_with("bad magic"));

    assert_eq!(open_err(&bad, &[]), "empty file");
    assert!(
        open_err(&bad, &good[..60]).starts_with("truncated: header needs 128 bytes, file has 60")
    );

    let short = good.len() - 5;
    assert_eq!(
        open_err(&bad, &good[..short]),
        format!(
            "truncated: index needs {} bytes, file has {short}",
            good.len()
        )
    );

    let mut b = good.clone();
    b[9] = 7;
    assert!(open_err(&bad, &b).starts_with("unsupported version"));

    let mut b = good.clone();
    b[20] ^= 1;
    assert!(open_err(&bad, &b).starts_with("header checksum mismatch"));

    // Record 17's offset pushed past the end of the file.
    let mut b = good.clone();
    let at = index_offset + 17 * packed::ENTRY_LEN;
    b[at..at + 8].copy_from_slice(&(good.len() as u64 - 4).to_le_bytes());
    let r = open_err(&bad, &b);
    assert!(r.starts_with("record 17 extends past end of file"), "{r}");

    // A huge length must not overflow either.
    let mut b = good.clone();
    b[at + 8..at + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(open_err(&bad, &b).starts_with("record 17 extends past end of file"));

    // Pointing into the index itself: inside the file but outside the record data.
    let mut b = good.clone();
    b[at..at + 8].copy_from_slice(&(index_offset as u64).to_le_bytes());
    assert!(open_err(&bad, &b).contains("lies outside the record data"));

    // A label beyond the class table.
    let mut b = good.clone();
    b[at + 16] = 3;
    assert!(open_err(&bad, &b).starts_with("record 17 has label 3"));

    // A flipped label that stays in range is caught by the index checksum.
    let mut b = good.clone();
    assert_eq!(b[at + 16], 2);
    b[at + 16] = 0;
    assert!(open_err(&bad, &b).starts_with("index checksum mismatch"));

    // A damaged class name.
    let classes_offset = u64_at(&good, 64) as usize;
    let mut b = good.clone();
    b[classes_offset + 4] ^= 0x20;
    assert!(open_err(&bad, &b).starts_with("class table checksum mismatch"));
}

#[test]
fn damaged_record_bytes_fail_their_checksum_on_read() {
    let dir = tmp();
    let path = dir.path().join("p.pack");
    let mut b = small_pack(&path);
    // Records start right after the 128-byte header, 16 bytes each.
    b[128 + 5 * 16 + 3] ^= 0x40;
    fs::write(&path, &b).unwrap();
    let p = PackedReader::open(&path).expect("damage in record bytes is found on read");
    let mut buf = Vec::new();
    p.read(4, &mut buf).unwrap();
    match p.read(5, &mut buf).unwrap_err() {
        SourceError::Record { what, reason, .. } => {
            assert_eq!(what, format!("{} record 5", path.display()));
            assert!(reason.starts_with("checksum mismatch"), "{reason}");
        }
        other => panic!("expected a record error, got {other:?}"),
    }
    p.read(6, &mut buf).unwrap();
}

/// Open (and read every record of) `bytes` as a pack; any outcome but a panic is fine.
fn try_everything(path: &Path, bytes: &[u8]) -> bool {
    // A new file each time: rewriting one in place makes ext4 flush it to disk on every
    // truncation (auto_da_alloc), which turns this test from milliseconds into seconds.
    let _ = fs::remove_file(path);
    fs::write(path, bytes).unwrap();
    let Ok(p) = PackedReader::open(path) else {
        assert!(
            PackedReader::open_mapped(path).is_err(),
            "both ways of opening agree"
        );
        return false;
    };
    let m = PackedReader::open_mapped(path).expect("both ways of opening agree");
    let (mut buf, mut mbuf) = (Vec::new(), Vec::new());
    for i in 0..p.len() {
        assert_eq!(p.label(i), m.label(i));
        let (a, b) = (p.read(i, &mut buf), m.read(i, &mut mbuf));
        assert_eq!(a.is_ok(), b.is_ok());
        assert_eq!(buf, mbuf);
    }
    let _ = p.classes();
    true
}

#[test]
fn a_pack_that_shrinks_under_its_reader_gives_errors_not_a_fault() {
    let dir = tmp();
    make_folder(&dir.path().join("f"));
    let folder = ImageFolder::open(&dir.path().join("f")).unwrap();
    let out = dir.path().join("set.pack");
    packed::pack_source(&folder, &out, |_, _| {}).unwrap();
    let p = PackedReader::open(&out).unwrap();
    assert!(!p.is_mapped());
    let mut buf = Vec::new();
    p.read(0, &mut buf).unwrap();
    // Cut the file to its header while the reader holds it open (what a concurrent
    // rewrite in place does): every read is an error naming the record.
    let f = fs::OpenOptions::new().write(true).open(&out).unwrap();
    f.set_len(packed::HEADER_LEN as u64).unwrap();
    for i in 0..p.len() {
        let e = p.read(i, &mut buf).unwrap_err().to_string();
        assert!(e.contains(&format!("record {i}")), "{e}");
        assert!(e.contains("truncated or replaced"), "{e}");
        assert!(buf.is_empty());
    }
    // Through the loader too: the epoch ends with that error.
    let packed_again = dir.path().join("again.pack");
    for mode in [stoker_loader::Mode::Sync, stoker_loader::Mode::Async] {
        packed::pack_source(&folder, &packed_again, |_, _| {}).unwrap();
        let src = source::open(&packed_again, source::Split::Train).unwrap();
        let mut loader = stoker_loader::Loader::new(
            src,
            stoker_loader::LoaderConfig {
                batch_size: 2,
                mode,
                shuffle: false,
                ..Default::default()
            },
        )
        .unwrap();
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&packed_again)
            .unwrap();
        f.set_len(packed::HEADER_LEN as u64 + 10).unwrap();
        let errors: Vec<String> = loader
            .epoch(0)
            .filter_map(|b| b.err().map(|e| e.to_string()))
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("truncated or replaced"), "{}", errors[0]);
    }
}

#[test]
fn no_byte_pattern_makes_the_reader_panic() {
    let dir = tmp();
    let good = small_pack(&dir.path().join("good.pack"));
    let path = dir.path().join("fuzz.pack");
    for len in 0..good.len() {
        assert!(
            !try_everything(&path, &good[..len]),
            "truncated to {len} opened"
        );
    }
    let mut opened = 0;
    for at in 0..good.len() {
        for pattern in [0x01u8, 0x80, 0xFF] {
            let mut b = good.clone();
            b[at] ^= pattern;
            opened += usize::from(try_everything(&path, &b));
        }
        let mut b = good.clone();
        b[at] = 0xFF;
        try_everything(&path, &b);
    }
    // Only flips in record bytes open (and then fail their checksum on read).
    assert!(opened > 0 && opened <= 3 * 20 * 16, "{opened}");
    let mut extended = good.clone();
    extended.extend_from_slice(&[0xAB; 100]);
    assert!(try_everything(&path, &extended));
}

/// A source whose record `fail_at` cannot be read.
struct Failing {
    inner: Mnist,
    fail_at: usize,
}

impl Source for Failing {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn classes(&self) -> &[String] {
        self.inner.classes()
    }
    fn label(&self, i: usize) -> u32 {
        self.inner.label(i)
    }
    fn describe(&self, i: usize) -> String {
        self.inner.describe(i)
    }
    fn read(&self, i: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        if i == self.fail_at {
            return Err(SourceError::record(self.describe(i), "disk on fire"));
        }
        self.inner.read(i, buf)
    }
    fn format(&self) -> &'static str {
        "failing"
    }
}

fn leftovers(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|e| e != "keep"))
        .collect()
}

#[test]
fn an_interrupted_pack_leaves_no_output_file() {
    let dir = tmp();
    let data = dir.path().join("data.keep");
    synthetic::write_mnist(&data, 10, 0).unwrap();
    let out_dir = dir.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("set.pack");

    // A read error part-way.
    let src = Failing {
        inner: Mnist::open_dir(&data, true).unwrap(),
        fail_at: 6,
    };
    let e = packed::pack_source(&src, &out, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("disk on fire"), "{e}");
    assert_eq!(leftovers(&out_dir), Vec::<PathBuf>::new());

    // A panic part-way (what Ctrl-C unwinding looks like to the writer).
    let src = Mnist::open_dir(&data, true).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        packed::pack_source(&src, &out, |done, _| {
            if done == 4 {
                panic!("interrupted");
            }
        })
    }));
    assert!(r.is_err());
    assert_eq!(leftovers(&out_dir), Vec::<PathBuf>::new());

    // A writer dropped before finish.
    let mut w = PackedWriter::create(&out, RecordKind::Encoded, &["a".to_string()]).unwrap();
    w.append(b"xyz", 0).unwrap();
    assert!(
        packed::temp_path(&out).exists(),
        "records go to the temporary name"
    );
    assert!(!out.exists());
    drop(w);
    assert_eq!(leftovers(&out_dir), Vec::<PathBuf>::new());

    // And a finished one appears under its name only.
    let mut w = PackedWriter::create(&out, RecordKind::Encoded, &["a".to_string()]).unwrap();
    w.append(b"xyz", 0).unwrap();
    w.finish().unwrap();
    assert_eq!(leftovers(&out_dir), vec![out.clone()]);
}

#[test]
fn the_writer_refuses_bad_records() {
    let dir = tmp();
    let out = dir.path().join("x.pack");
    let raw = RecordKind::Raw {
        width: 2,
        height: 2,
        channels: 3,
    };
    let mut w = PackedWriter::create(&out, raw, &["a".to_string()]).unwrap();
    assert!(w
        .append(&[0; 11], 0)
        .unwrap_err()
        .to_string()
        .contains("needs 12"));
    assert!(w
        .append(&[0; 12], 1)
        .unwrap_err()
        .to_string()
        .contains("label 1"));
    assert!(PackedWriter::create(&out, raw, &[]).is_err());
    drop(w);
    // A writer with no records still makes a valid (empty) file.
    let w = PackedWriter::create(&out, raw, &["a".to_string()]).unwrap();
    assert!(w.is_empty());
    w.finish().unwrap();
    let p = PackedReader::open(&out).unwrap();
    assert_eq!((p.len(), p.layout(), p.classes().len()), (0, raw, 1));
}

// ---------------------------------------------------------------- MNIST

/// IDX files with known content: image i has pixel k = (i * 7 + k) % 256.
fn write_idx(dir: &Path, prefix: &str, n: u32, rows: u32, cols: u32) -> (Vec<u8>, Vec<u8>) {
    let mut images = Vec::new();
    for v in [2051u32, n, rows, cols] {
        images.extend_from_slice(&v.to_be_bytes());
    }
    for i in 0..n {
        images.extend((0..rows * cols).map(|k| ((i * 7 + k) % 256) as u8));
    }
    let mut labels = Vec::new();
    for v in [2049u32, n] {
        labels.extend_from_slice(&v.to_be_bytes());
    }
    labels.extend((0..n).map(|i| ((i * 3) % 10) as u8));
    write(&dir.join(format!("{prefix}-images-idx3-ubyte")), &images);
    write(&dir.join(format!("{prefix}-labels-idx1-ubyte")), &labels);
    (images, labels)
}

fn check_known_mnist(m: &Mnist, n: u32) {
    assert_eq!(m.len(), n as usize);
    assert_eq!(m.classes().len(), 10);
    assert_eq!(m.classes()[3], "3");
    assert_eq!(m.format(), "mnist");
    let mut buf = Vec::new();
    for i in 0..n {
        let kind = m.read(i as usize, &mut buf).unwrap();
        assert_eq!(
            kind,
            RecordKind::Raw {
                width: 28,
                height: 28,
                channels: 1
            }
        );
        let want: Vec<u8> = (0..784).map(|k| ((i * 7 + k) % 256) as u8).collect();
        assert_eq!(buf, want, "image {i}");
        assert_eq!(m.label(i as usize), (i * 3) % 10);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn mnist_reads_plain_and_gzipped_files() {
    let dir = tmp();
    let plain = dir.path().join("plain");
    let (images, labels) = write_idx(&plain, "train", 6, 28, 28);
    write_idx(&plain, "t10k", 4, 28, 28);
    check_known_mnist(&Mnist::open_dir(&plain, true).unwrap(), 6);
    check_known_mnist(&Mnist::open_dir(&plain, false).unwrap(), 4);

    let gz = dir.path().join("gz");
    write(&gz.join("train-images-idx3-ubyte.gz"), &gzip(&images));
    write(&gz.join("train-labels-idx1-ubyte.gz"), &gzip(&labels));
    check_known_mnist(&Mnist::open_dir(&gz, true).unwrap(), 6);
    let e = Mnist::open_dir(&gz, false).unwrap_err();
    assert!(e.to_string().contains("t10k-images-idx3-ubyte"), "{e}");

    let dotted = dir.path().join("dotted");
    write(&dotted.join("train-images.idx3-ubyte"), &images);
    write(&dotted.join("train-labels.idx1-ubyte"), &labels);
    let m = source::open(&dotted, source::Split::Train).unwrap();
    assert_eq!(m.format(), "mnist");
    assert_eq!(m.len(), 6);
    // One file given directly: the partner is found beside it.
    let m = source::open(dotted.join("train-labels.idx1-ubyte"), source::Split::Train).unwrap();
    assert_eq!(m.len(), 6);
    let m = source::open(gz.join("train-images-idx3-ubyte.gz"), source::Split::Train).unwrap();
    assert_eq!(m.len(), 6);
}

#[test]
fn mnist_rejects_inconsistent_files() {
    let dir = tmp();
    let (images, labels) = write_idx(dir.path(), "train", 5, 28, 28);
    let ip = dir.path().join("train-images-idx3-ubyte");
    let lp = dir.path().join("train-labels-idx1-ubyte");
    let expect = |images: &[u8], labels: &[u8], what: &str| {
        fs::write(&ip, images).unwrap();
        fs::write(&lp, labels).unwrap();
        let e = Mnist::open(&ip, &lp).unwrap_err();
        assert!(e.to_string().contains(what), "{e} lacks {what}");
    };
    let mut b = images.clone();
    b[3] = 0x01;
    expect(&b, &labels, "bad magic 2049");
    expect(&images, &images, "bad magic 2051");
    expect(
        &images[..images.len() - 1],
        &labels,
        "need 3936 bytes, file has 3935",
    );
    expect(&images[..10], &labels, "truncated");
    let mut l = labels.clone();
    l[7] = 4;
    expect(&images, &l, "4 labels, but");
    let mut l = labels.clone();
    l[10] = 10;
    expect(&images, &l, "record 2 has label 10");
    expect(
        &images,
        &labels[..labels.len() - 1],
        "5 labels need 13 bytes",
    );
    expect(&images, &gzip(&labels)[..20], "bad gzip");
}

// ---------------------------------------------------------------- CIFAR-10

/// A CIFAR batch whose record i has label (i + shift) % 10 and planes R = 10 + p % 50,
/// G = 100 + p % 50, B = 200 + i for pixel p.
fn cifar_batch(n: usize, shift: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(((i + shift) % 10) as u8);
        out.extend((0..1024).map(|p| (10 + p % 50) as u8));
        out.extend((0..1024).map(|p| (100 + p % 50) as u8));
        out.extend((0..1024).map(|_| (200 + i) as u8));
    }
    out
}

#[test]
fn cifar_reads_hwc_from_planar_batches() {
    let dir = tmp();
    let d = dir.path().join(cifar::ARCHIVE_DIR);
    write(&d.join("data_batch_1.bin"), &cifar_batch(3, 0));
    write(&d.join("data_batch_2.bin"), &cifar_batch(2, 5));
    write(&d.join("test_batch.bin"), &cifar_batch(4, 1));
    let c = Cifar10::open_dir(dir.path(), true).unwrap();
    assert_eq!(c.len(), 5);
    assert_eq!(c.classes()[0], "airplane");
    assert_eq!(c.classes()[9], "truck");
    assert_eq!(
        (0..5).map(|i| c.label(i)).collect::<Vec<_>>(),
        [0, 1, 2, 5, 6]
    );
    assert!(
        c.describe(4).ends_with("data_batch_2.bin record 1"),
        "{}",
        c.describe(4)
    );
    let mut buf = Vec::new();
    let kind = c.read(4, &mut buf).unwrap();
    assert_eq!(
        kind,
        RecordKind::Raw {
            width: 32,
            height: 32,
            channels: 3
        }
    );
    assert_eq!(buf.len(), 3072);
    for p in [0usize, 1, 33, 1023] {
        assert_eq!(
            &buf[p * 3..p * 3 + 3],
            &[(10 + p % 50) as u8, (100 + p % 50) as u8, 201],
            "pixel {p}"
        );
    }
    let t = Cifar10::open_dir(dir.path(), false).unwrap();
    assert_eq!(t.len(), 4);
    assert_eq!(t.label(0), 1);

    write(
        &d.join("batches.meta.txt"),
        b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n",
    );
    let c = Cifar10::open_dir(dir.path(), true).unwrap();
    assert_eq!(c.classes()[9], "j");
    write(&d.join("batches.meta.txt"), b"a\nb\n");
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(e.to_string().contains("batches.meta.txt"), "{e}");
}

#[test]
fn cifar_rejects_bad_batches() {
    let dir = tmp();
    let p = dir.path().join("data_batch_1.bin");
    let mut b = cifar_batch(3, 0);
    b.pop();
    write(&p, &b);
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(
        reason(&e).contains("not a multiple of the 3073-byte record"),
        "{e}"
    );
    let mut b = cifar_batch(3, 0);
    b[2 * 3073] = 10;
    write(&p, &b);
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(e.to_string().contains("data_batch_1.bin"), "{e}");
    assert!(reason(&e).contains("record 2 has label 10"), "{e}");
    let e = Cifar10::open_dir(dir.path(), false).unwrap_err();
    assert!(reason(&e).contains("test_batch.bin"), "{e}");
}

// ---------------------------------------------------------------- open

fn open_fails(path: &Path) -> SourceError {
    match source::open(path, source::Split::Train) {
        Ok(s) => panic!("{} opened as {}", path.display(), s.format()),
        Err(e) => e,
    }
}

#[test]
fn open_detects_each_format() {
    let dir = tmp();
    let root = dir.path();
    make_folder(&root.join("folder"));
    synthetic::write_mnist(&root.join("mnist"), 7, 0).unwrap();
    synthetic::write_cifar(&root.join("cifar"), 2, 0).unwrap();

    let f = source::open(root.join("folder"), source::Split::Train).unwrap();
    assert_eq!((f.format(), f.len()), ("folder", 7));
    packed::pack_source(f.as_ref(), &root.join("f.pack"), |_, _| {}).unwrap();
    // The magic decides, not the name.
    fs::rename(root.join("f.pack"), root.join("f.data")).unwrap();
    assert_eq!(
        source::open(root.join("f.data"), source::Split::Train)
            .unwrap()
            .format(),
        "packed"
    );

    let m = source::open(root.join("mnist"), source::Split::Train).unwrap();
    assert_eq!((m.format(), m.len()), ("mnist", 7));
    assert!(m.describe(0).contains("train-images"));
    let m = source::open(root.join("mnist"), source::Split::Test).unwrap();
    assert!(m.describe(0).contains("t10k-images"));

    let c = source::open(root.join("cifar"), source::Split::Train).unwrap();
    assert_eq!((c.format(), c.len()), ("cifar10", 10));
    let c = source::open(root.join("cifar"), source::Split::Test).unwrap();
    assert_eq!(c.len(), 2);
    let c = source::open(root.join("cifar/data_batch_3.bin"), source::Split::Train).unwrap();
    assert_eq!((c.format(), c.len()), ("cifar10", 2));

    let e = open_fails(&root.join("missing"));
    assert!(
        e.to_string().contains("missing") && reason(&e).contains("no such file"),
        "{e}"
    );
    write(&root.join("empty.pack"), b"");
    assert_eq!(reason(&open_fails(&root.join("empty.pack"))), "empty file");
    write(&root.join("notes.txt"), b"hello there");
    let e = open_fails(&root.join("notes.txt"));
    assert!(reason(&e).starts_with("unknown file format"), "{e}");
    // A damaged pack is reported as damaged, not as unknown.
    let good = fs::read(root.join("f.data")).unwrap();
    write(&root.join("cut.pack"), &good[..good.len() - 1]);
    let e = open_fails(&root.join("cut.pack"));
    assert!(reason(&e).starts_with("truncated: index"), "{e}");
}

// ---------------------------------------------------------------- gen

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for class in fs::read_dir(dir).unwrap() {
        let class = class.unwrap().path();
        for f in fs::read_dir(&class).unwrap() {
            let f = f.unwrap().path();
            let rel = f.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            out.push((rel, fs::read(&f).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn shapes_are_deterministic_decodable_and_balanced() {
    let dir = tmp();
    let opts = ShapesOptions {
        count: 23,
        size: 32,
        classes: 4,
        seed: 9,
    };
    let a = dir.path().join("a");
    let mut last = (0, 0);
    let stats = synthetic::shapes(&a, &opts, |d, t| last = (d, t)).unwrap();
    assert_eq!(last, (23, 23));
    assert_eq!((stats.images, stats.classes), (23, 4));
    let b = dir.path().join("b");
    synthetic::shapes(&b, &opts, |_, _| {}).unwrap();
    let (ta, tb) = (tree(&a), tree(&b));
    assert_eq!(ta.len(), 23);
    assert_eq!(ta, tb, "same seed, same bytes");
    assert_eq!(
        stats.bytes,
        ta.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    );

    let c = dir.path().join("c");
    synthetic::shapes(
        &c,
        &ShapesOptions {
            seed: 10,
            ..opts.clone()
        },
        |_, _| {},
    )
    .unwrap();
    let tc = tree(&c);
    assert!(ta.iter().zip(&tc).all(|(x, y)| x.0 == y.0 && x.1 != y.1));

    let src = ImageFolder::open(&a).unwrap();
    assert_eq!(
        src.classes(),
        ["00_circle", "01_square", "02_triangle", "03_plus"]
    );
    let mut per_class = [0; 4];
    for (i, (bytes, _, _)) in all_records(&src).into_iter().enumerate() {
        let img =
            image::load_from_memory(&bytes).unwrap_or_else(|e| panic!("{}: {e}", src.describe(i)));
        assert_eq!((img.width(), img.height()), (32, 32));
        let rgb = img.to_rgb8();
        let distinct: std::collections::HashSet<_> = rgb.pixels().collect();
        assert!(distinct.len() > 50, "background is textured");
        per_class[src.label(i) as usize] += 1;
    }
    assert_eq!(per_class, [6, 6, 6, 5]);
    // Nothing but the finished sets is left.
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
}

#[test]
fn shapes_refuses_bad_options_and_occupied_folders() {
    let dir = tmp();
    let opts = |classes, count| ShapesOptions {
        count,
        size: 16,
        classes,
        seed: 0,
    };
    let d = dir.path().join("s");
    assert!(synthetic::shapes(&d, &opts(11, 5), |_, _| {}).is_err());
    assert!(synthetic::shapes(&d, &opts(0, 5), |_, _| {}).is_err());
    assert!(synthetic::shapes(&d, &opts(3, 0), |_, _| {}).is_err());
    assert!(!d.exists());
    // An existing empty folder is filled; a non-empty one is left alone.
    fs::create_dir(&d).unwrap();
    synthetic::shapes(&d, &opts(2, 4), |_, _| {}).unwrap();
    assert_eq!(tree(&d).len(), 4);
    let e = synthetic::shapes(&d, &opts(2, 4), |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(tree(&d).len(), 4);
}

/// Several processes (ranks on machines sharing a folder) may make the same set at once:
/// each builds in its own temporary folder, one publishes, and the folder only ever
/// holds a whole set.
#[test]
fn racing_makers_leave_one_whole_set() {
    let dir = tmp();
    let d = dir.path().join("race");
    let opts = ShapesOptions {
        count: 300,
        size: 16,
        classes: 4,
        seed: 3,
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let makers: Vec<_> = (0..6)
            .map(|_| s.spawn(|| synthetic::shapes(&d, &opts, |_, _| {})))
            .collect();
        makers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().any(|r| r.is_ok()), "{results:?}");
    assert_eq!(tree(&d).len(), 300);
    let reference = dir.path().join("alone");
    synthetic::shapes(&reference, &opts, |_, _| {}).unwrap();
    assert_eq!(tree(&d), tree(&reference));
    // No temporary folder is left behind by the makers that lost.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn generated_mnist_and_cifar_are_valid_and_deterministic() {
    let dir = tmp();
    for (name, seed) in [("m1", 4), ("m2", 4)] {
        synthetic::write_mnist(&dir.path().join(name), 13, seed).unwrap();
    }
    let m1 = Mnist::open_dir(&dir.path().join("m1"), true).unwrap();
    let m2 = Mnist::open_dir(&dir.path().join("m2"), true).unwrap();
    assert_eq!(all_records(&m1), all_records(&m2));
    assert_eq!(
        (0..13).map(|i| m1.label(i)).collect::<Vec<_>>()[..12],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    );
    let t = Mnist::open_dir(&dir.path().join("m1"), false).unwrap();
    assert_ne!(all_records(&t), all_records(&m1), "splits differ");

    synthetic::write_cifar(&dir.path().join("c"), 11, 4).unwrap();
    let c = Cifar10::open_dir(&dir.path().join("c"), true).unwrap();
    assert_eq!(c.len(), 55);
    assert_eq!(c.label(12), 1);
    let t = Cifar10::open_dir(&dir.path().join("c"), false).unwrap();
    assert_eq!(t.len(), 11);
    // No temporary names are left behind.
    assert!(fs::read_dir(dir.path().join("c")).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
}
