//! Packed files: writing, reading back, versions, and damaged files.

use super::*;

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
