//! Local tar shards: packing any source into WebDataset shards, reading them back
//! (folder, single file, brace pattern) with the same records as the source, the
//! shard-aware order (deterministic across modes and workers, exact mid-epoch resume),
//! tars from other writers (json labels, extra members), and damaged shards.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stoker_loader::source::{self, tar, Source, TarSource};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{Digest, Loader, LoaderConfig, Mode};

fn shapes(dir: &Path, count: usize) -> PathBuf {
    let root = dir.join("folder");
    synthetic::shapes(
        &root,
        &ShapesOptions {
            count,
            size: 16,
            classes: 4,
            seed: 3,
        },
        |_, _| {},
    )
    .unwrap();
    root
}

/// Packs `src` into shards of about `shard_bytes` in `dir/shards`.
fn pack(src: &dyn Source, dir: &Path, shard_bytes: u64) -> (PathBuf, tar::TarPackStats) {
    let out = dir.join("shards");
    let stats = tar::pack_tar(src, &out, shard_bytes, |_, _| {}).unwrap();
    (out, stats)
}

fn same_records(a: &dyn Source, b: &dyn Source) {
    assert_eq!(a.len(), b.len());
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..a.len() {
        a.read(i, &mut x).unwrap();
        b.read(i, &mut y).unwrap();
        assert_eq!(x, y, "record {i}");
        assert_eq!(a.label(i), b.label(i), "label {i}");
    }
}

fn digest(src: Arc<dyn Source>, cfg: LoaderConfig, epochs: u64) -> String {
    let mut loader = Loader::new(src, cfg).unwrap();
    let mut d = Digest::new();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            d.update(&b.unwrap());
        }
    }
    d.hex()
}

fn cfg(mode: Mode, workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 7,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        shuffle_buffer: 16,
        seed: 11,
        ..LoaderConfig::default()
    }
}

#[test]
fn packed_shards_hold_the_sources_records_and_index_them_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 60), source::Split::Train).unwrap();
    // About 6 images a shard: several shards.
    let (out, stats) = pack(folder.as_ref(), dir.path(), 12 << 10);
    assert!(stats.shards >= 4, "{stats:?}");
    assert_eq!(stats.records, 60);
    let tars = source::open(&out, source::Split::Train).unwrap();
    assert_eq!(tars.format(), "tar");
    assert_eq!(
        tars.classes(),
        folder.classes(),
        "class names come from the index"
    );
    same_records(folder.as_ref(), tars.as_ref());
    let shards = tars.shards().unwrap();
    assert_eq!(shards.len(), stats.shards);
    assert_eq!(shards.last().unwrap().end, 60);
    // The index the writer kept is what a header scan finds.
    for i in 0..stats.shards {
        let shard = out.join(format!("shard-{i:06}.tar"));
        let bytes = std::fs::metadata(&shard).unwrap().len();
        let written = tar::ShardIndex::parse(
            &std::fs::read(out.join(format!("shard-{i:06}.tar.idx"))).unwrap(),
            bytes,
        )
        .unwrap();
        let scanned = TarSource::open_local(std::slice::from_ref(&shard), "x").unwrap();
        assert_eq!(scanned.len(), written.samples.len());
        for (k, (key, _, len, label)) in written.samples.iter().enumerate() {
            assert_eq!(scanned.key(k), Some(key.as_str()));
            assert_eq!(scanned.label(k), *label);
            let mut buf = Vec::new();
            scanned.read(k, &mut buf).unwrap();
            assert_eq!(buf.len() as u64, *len);
        }
    }
    // A brace pattern and a single shard open too.
    let pattern = format!(
        "{}/shard-{{000000..{:06}}}.tar",
        out.display(),
        stats.shards - 1
    );
    same_records(
        tars.as_ref(),
        source::open(Path::new(&pattern), source::Split::Train)
            .unwrap()
            .as_ref(),
    );
    let one = source::open(out.join("shard-000000.tar"), source::Split::Train).unwrap();
    assert_eq!(one.len(), shards[0].len());
    // Unshuffled, the folder and its shards give the same batches.
    let plain = |src| {
        digest(
            src,
            LoaderConfig {
                shuffle: false,
                ..cfg(Mode::Sync, 0)
            },
            1,
        )
    };
    assert_eq!(plain(folder.clone()), plain(tars.clone()));
    // Packing into a folder that has shards already would mix two packs.
    let e = tar::pack_tar(folder.as_ref(), &out, 1 << 20, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("holds .tar files already"), "{e}");
}

#[test]
fn shard_order_is_the_same_in_every_mode_and_resumes_mid_shard() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 50), source::Split::Train).unwrap();
    let (out, _) = pack(folder.as_ref(), dir.path(), 10 << 10);
    let tars = source::open(&out, source::Split::Train).unwrap();
    let want = digest(tars.clone(), cfg(Mode::Sync, 0), 2);
    assert_eq!(digest(tars.clone(), cfg(Mode::Async, 1), 2), want);
    assert_eq!(digest(tars.clone(), cfg(Mode::Async, 3), 2), want);
    // Through the loader too: every sample once, and with a buffer of 1 each shard
    // is read whole, from start to end, before the next.
    let mut loader = Loader::new(
        tars.clone(),
        LoaderConfig {
            shuffle_buffer: 1,
            ..cfg(Mode::Async, 2)
        },
    )
    .unwrap();
    let order: Vec<usize> = loader.epoch(0).flat_map(|b| b.unwrap().indices).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    let mut at = 0;
    let shards = tars.shards().unwrap();
    while at < order.len() {
        let shard = shards
            .iter()
            .find(|r| r.start == order[at])
            .expect("a shard starts here");
        assert_eq!(
            &order[at..at + shard.len()],
            &shard.clone().collect::<Vec<_>>()[..]
        );
        at += shard.len();
    }
    // Resume in the middle of epoch 1 (batch 3 of 8, inside a shard): the rest is the
    // same bytes as an uninterrupted run.
    for mode in [Mode::Sync, Mode::Async] {
        let mut loader = Loader::new(tars.clone(), cfg(mode, 2)).unwrap();
        let state = loader.state_at(1, 3);
        let mut full = Vec::new();
        for (k, b) in loader.epoch(1).enumerate() {
            let b = b.unwrap();
            if k >= 3 {
                full.push((b.indices.clone(), b.images.to_vec()));
            }
        }
        let mut again = Loader::new(tars.clone(), cfg(mode, 2)).unwrap();
        let rest: Vec<_> = again
            .resume(&state)
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                (b.indices.clone(), b.images.to_vec())
            })
            .collect();
        assert_eq!(rest, full, "{mode}");
    }
}

/// A tar archive of `members` (name, bytes), as the tar crate writes one.
pub(crate) fn tar_bytes(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = ::tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = ::tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn png(seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_fn(9, 7, |x, y| image::Rgb([seed, x as u8 * 20, y as u8 * 30]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[test]
fn tars_from_other_writers_group_by_key_and_take_json_labels() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (png(1), png(2), png(3));
    let long = format!("{}/x", "d".repeat(120));
    let bytes = tar_bytes(&[
        ("__meta__.json", br#"{"note": "no image: not a sample"}"#),
        ("train/a.png", &a),
        ("train/a.json", br#"{"class": 2}"#),
        ("train/b.seg.txt", b"ignored"),
        ("train/b.png", &b),
        ("train/b.cls", b"1\n"),
        (&format!("{long}.png"), &c),
        (&format!("{long}.cls"), b"0"),
    ]);
    let path = dir.path().join("other.tar");
    std::fs::write(&path, &bytes).unwrap();
    let src = source::open(&path, source::Split::Train).unwrap();
    assert_eq!(src.len(), 3);
    assert_eq!(src.classes(), ["0", "1", "2"]);
    assert_eq!((src.label(0), src.label(1), src.label(2)), (2, 1, 0));
    let mut buf = Vec::new();
    src.read(0, &mut buf).unwrap();
    assert_eq!(buf, a);
    src.read(2, &mut buf).unwrap();
    assert_eq!(
        buf, c,
        "a GNU long name (its own header) does not shift the data"
    );
    assert!(
        src.describe(1).ends_with("other.tar sample train/b"),
        "{}",
        src.describe(1)
    );
}

/// The error opening `path`, as the command lines print it: the message and the causes
/// under it that it does not already say (`report::one_line`).
fn open_err(path: &Path) -> String {
    match source::open(path, source::Split::Train) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => stoker_loader::report::one_line(&e),
    }
}

#[test]
fn damaged_shards_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    let whole = tar_bytes(&[
        ("a.png", &a),
        ("a.cls", b"0"),
        ("b.png", &b),
        ("b.cls", b"1"),
    ]);
    let path = dir.path().join("t.tar");
    // Cut inside the second image, and cut between members (no end marker).
    for cut in [
        whole.len() - 1024 - 600,
        512 * (2 + a.len().div_ceil(512) + 2),
    ] {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let e = open_err(&path);
        assert!(e.contains("t.tar") && e.contains("truncated"), "{cut}: {e}");
    }
    let no_label = tar_bytes(&[("a.png", &a)]);
    std::fs::write(&path, no_label).unwrap();
    let e = open_err(&path);
    assert!(e.contains("sample a: no label"), "{e}");
    let bad_cls = tar_bytes(&[("a.png", &a), ("a.cls", b"cat")]);
    std::fs::write(&path, bad_cls).unwrap();
    let e = open_err(&path);
    assert!(
        e.contains("a.cls") && e.contains("not a class number"),
        "{e}"
    );
    let e = open_err(&dir.path().join("missing-{0..1}.tar"));
    assert!(
        e.contains("missing-0.tar") && e.contains("no such shard"),
        "{e}"
    );
    std::fs::write(&path, b"").unwrap();
    let e = open_err(&path);
    assert!(e.contains("t.tar"), "{e}");
}

/// Shards through a `file://` URL take the remote path (object_store, sidecar indexes,
/// streaming when there is none, the cache) without a network: the same batches as
/// the local shards.
#[cfg(feature = "remote")]
#[test]
fn file_urls_read_shards_through_the_remote_path() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 40), source::Split::Train).unwrap();
    let (out, stats) = pack(folder.as_ref(), dir.path(), 10 << 10);
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    for i in 0..stats.shards {
        let name = format!("shard-{i:06}.tar");
        std::fs::copy(out.join(&name), bare.join(&name)).unwrap();
    }
    let want = digest(
        source::open(&out, source::Split::Train).unwrap(),
        cfg(Mode::Async, 2),
        2,
    );
    let cache = dir.path().join("cache");
    for (data, cache) in [(&out, None), (&bare, None), (&bare, Some(cache.clone()))] {
        let url = format!("file://{}/", data.display());
        let opts = source::OpenOptions {
            cache,
            ..Default::default()
        };
        let src = source::open_with(Path::new(&url), &opts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(src.format(), "tar");
        assert_eq!(src.shards().unwrap().len(), stats.shards);
        assert_eq!(digest(src.clone(), cfg(Mode::Async, 2), 2), want, "{url}");
        assert_eq!(digest(src, cfg(Mode::Sync, 0), 2), want, "{url}, sync");
    }
    let indexes = std::fs::read_dir(cache.join("index")).unwrap().count();
    assert_eq!(
        indexes, stats.shards,
        "streamed indexes are kept in the cache"
    );
}

#[test]
fn two_samples_under_one_key_are_an_error_naming_the_shard_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    // WebDataset refuses this: grouping by key would give the first image the second
    // image's label.
    let bytes = tar_bytes(&[
        ("0.png", &a),
        ("0.cls", b"0"),
        ("0.png", &b),
        ("0.cls", b"1"),
    ]);
    let path = dir.path().join("dup.tar");
    std::fs::write(&path, bytes).unwrap();
    let e = open_err(&path);
    assert!(
        e.contains("dup.tar") && e.contains("duplicate key 0") && e.contains("0.png"),
        "{e}"
    );
}

#[test]
fn labels_out_of_bounds_are_errors_not_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let a = png(1);
    let path = dir.path().join("labels.tar");
    // 4294967294 once made a class list of 2^32 names (an abort); 20000000 cost GBs.
    for label in ["4294967294", "20000000", "1048576"] {
        std::fs::write(
            &path,
            tar_bytes(&[("k.png", &a), ("k.cls", label.as_bytes())]),
        )
        .unwrap();
        let e = open_err(&path);
        assert!(
            e.contains("labels.tar sample k")
                && e.contains(&format!("label {label} is out of bounds")),
            "{label}: {e}"
        );
    }
    // Below the maximum but far beyond the labels seen: bounded by them too.
    std::fs::write(
        &path,
        tar_bytes(&[
            ("a.png", &a),
            ("a.cls", b"0"),
            ("b.png", &a),
            ("b.cls", b"900000"),
        ]),
    )
    .unwrap();
    let e = open_err(&path);
    assert!(e.contains("only 2 distinct labels were seen"), "{e}");
    // A sparse but plausible set (a subset of a 1000-class set) is fine.
    std::fs::write(
        &path,
        tar_bytes(&[
            ("a.png", &a),
            ("a.cls", b"3"),
            ("b.png", &a),
            ("b.cls", b"999"),
        ]),
    )
    .unwrap();
    let src = source::open(&path, source::Split::Train).unwrap();
    assert_eq!(src.classes().len(), 1000);
}

/// The remote path takes labels from the sidecar index: a hostile one is refused the
/// same way (through a file:// URL, no network).
#[cfg(feature = "remote")]
#[test]
fn a_hostile_label_in_a_remote_index_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let a = png(1);
    let shard = tar_bytes(&[("k.png", &a), ("k.cls", b"0")]);
    let path = dir.path().join("s.tar");
    std::fs::write(&path, &shard).unwrap();
    let idx = format!(
        r#"{{"format": "stoker-tar-index", "version": 1, "tar_bytes": {}, "classes": [],
            "samples": [["k", 512, {}, 4294967294]]}}"#,
        shard.len(),
        a.len()
    );
    std::fs::write(dir.path().join("s.tar.idx"), idx).unwrap();
    let url = format!("file://{}", path.display());
    let e = match source::open(Path::new(&url), source::Split::Train) {
        Ok(_) => panic!("opened"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("label 4294967294 is out of bounds"), "{e}");
}

#[test]
fn names_from_a_shard_are_escaped_in_messages() {
    let dir = tempfile::tempdir().unwrap();
    let a = png(1);
    let path = dir.path().join("names.tar");
    std::fs::write(&path, tar_bytes(&[("evil\u{1b}[2J\u{7}.png", &a)])).unwrap();
    let e = open_err(&path);
    assert!(e.contains("no label"), "{e}");
    assert!(
        !e.chars().any(|c| c.is_control()),
        "raw control characters in: {e:?}"
    );
    assert!(e.contains(r"evil\u{1b}[2J\u{7}"), "{e}");
    std::fs::write(&path, tar_bytes(&[("x.png", &a), ("x.cls", b"\x1b[31m7")])).unwrap();
    let e = open_err(&path);
    assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
    assert!(e.contains(r"\u{1b}[31m7"), "{e}");
    // A header whose size is not a number: the tar crate's error quotes the member's
    // name as it is. Our message escapes it and keeps that error as its source, and
    // the printed line (which adds the causes a message does not say) stays escaped.
    let mut bytes = tar_bytes(&[("evil\u{1b}[2J.png", &a)]);
    bytes[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
    bytes[148..156].fill(b' ');
    let sum: u32 = bytes[..512].iter().map(|&b| u32::from(b)).sum();
    bytes[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = source::open(&path, source::Split::Train)
        .err()
        .expect("a damaged header");
    let cause = std::error::Error::source(&err).expect("the tar crate's error is kept");
    assert!(cause.to_string().contains('\u{1b}'), "{cause}");
    let e = open_err(&path);
    assert!(
        !e.chars().any(|c| c.is_control()),
        "raw control characters in: {e:?}"
    );
    assert!(e.contains(r"evil\u{1b}[2J"), "{e}");
}

#[test]
fn a_shard_rewritten_in_place_after_indexing_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    let path = dir.path().join("t.tar");
    std::fs::write(
        &path,
        tar_bytes(&[
            ("a.png", &a),
            ("a.cls", b"0"),
            ("b.png", &b),
            ("b.cls", b"1"),
        ]),
    )
    .unwrap();
    let src = source::open(&path, source::Split::Train).unwrap();
    let mut buf = Vec::new();
    src.read(1, &mut buf).unwrap();
    assert_eq!(buf, b);
    // Same size, other samples (as `cp` of another shard over it would leave it): the
    // index's labels would go with other images. The new modification time is set,
    // not waited for (a file system's clock may tick coarser than the test runs).
    let then = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(
        &path,
        tar_bytes(&[
            ("b.png", &b),
            ("b.cls", b"1"),
            ("a.png", &a),
            ("a.cls", b"0"),
        ]),
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(then + std::time::Duration::from_secs(1))
        .unwrap();
    let e = src.read(1, &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("t.tar sample b") && e.contains("changed since it was indexed"),
        "{e}"
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_is_named_as_one_and_never_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("data.tar");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        println!("SKIPPED: mkfifo is not available");
        return;
    }
    // As a data argument, and as a shard in a folder of shards (which opens it).
    let e = open_err(&fifo);
    assert!(e.contains("a FIFO (named pipe), not a regular file"), "{e}");
    let folder = dir.path().join("shards");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(
        folder.join("a.tar"),
        tar_bytes(&[("a.png", &png(1)), ("a.cls", b"0")]),
    )
    .unwrap();
    std::process::Command::new("mkfifo")
        .arg(folder.join("b.tar"))
        .status()
        .unwrap();
    let e = open_err(&folder);
    assert!(e.contains("b.tar") && e.contains("FIFO"), "{e}");
}

#[test]
fn a_pack_writes_its_manifest_last_and_readers_check_it() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 40), source::Split::Train).unwrap();
    let (out, stats) = pack(folder.as_ref(), dir.path(), 10 << 10);
    let manifest =
        tar::Manifest::parse(&std::fs::read(out.join(tar::MANIFEST_NAME)).unwrap()).unwrap();
    assert_eq!(manifest.shards.len(), stats.shards);
    assert_eq!(manifest.samples, 40);
    for s in &manifest.shards {
        let bytes = std::fs::read(out.join(&s.name)).unwrap();
        assert_eq!(s.bytes, bytes.len() as u64, "{}", s.name);
        assert_eq!(s.crc32, crc32fast::hash(&bytes), "{}", s.name);
        let idx = tar::ShardIndex::parse(
            &std::fs::read(out.join(format!("{}.idx", s.name))).unwrap(),
            s.bytes,
        )
        .unwrap();
        assert_eq!(s.samples, idx.samples.len() as u64);
    }
    assert_eq!(source::open(&out, source::Split::Train).unwrap().len(), 40);
    // A copy that lost a shard (or a pack killed before its last one, with a manifest
    // from elsewhere) is an error naming the shard.
    let last = &manifest.shards[manifest.shards.len() - 1].name;
    let partial = dir.path().join("partial");
    std::fs::create_dir(&partial).unwrap();
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with(last.as_str()) {
            std::fs::copy(&p, partial.join(&name)).unwrap();
        }
    }
    let e = open_err(&partial);
    assert!(e.contains(&format!("{last} is missing")), "{e}");
    // Without the manifest (a pack killed after some shards) it still opens, with a
    // warning on stderr (checked in the CLI's tests); the samples are what is there.
    std::fs::remove_file(partial.join(tar::MANIFEST_NAME)).unwrap();
    let src = source::open(&partial, source::Split::Train).unwrap();
    assert_eq!(
        src.len() as u64,
        40 - manifest.shards.last().unwrap().samples
    );
}

/// The samples ranks `0..world` deliver from `state` on (or from the start of epoch
/// 1), `take` batches each (`None`: to the end), and rank 0's state after them.
fn ranks_deliver(
    src: &Arc<dyn Source>,
    world: usize,
    take: Option<usize>,
    state: Option<&stoker_loader::LoaderState>,
) -> (Vec<usize>, stoker_loader::LoaderState) {
    let mut got = Vec::new();
    let mut saved = None;
    for rank in 0..world {
        let c = LoaderConfig {
            rank,
            world_size: world,
            ..cfg(Mode::Async, 2)
        };
        let mut l = Loader::new(src.clone(), c).unwrap();
        let mut ep = match state {
            None => l.epoch(1),
            Some(s) => {
                let s = stoker_loader::LoaderState::from_json(&s.to_json()).unwrap();
                l.resume(&s).unwrap()
            }
        };
        for _ in 0..take.unwrap_or(usize::MAX) {
            match ep.next() {
                Some(b) => got.extend(b.unwrap().indices),
                None => break,
            }
        }
        if rank == 0 {
            saved = Some(ep.state());
        }
    }
    (got, saved.unwrap())
}

#[test]
fn shards_resume_on_another_rank_count_delivering_each_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 150), source::Split::Train).unwrap();
    let (out, _) = pack(folder.as_ref(), dir.path(), 10 << 10);
    let tars = source::open(&out, source::Split::Train).unwrap();
    assert!(tars.shards().unwrap().len() >= 3, "enough shards to deal");
    for (w, w2, take) in [(2, 3, 2), (3, 1, 1)] {
        let (all, _) = ranks_deliver(&tars, w, None, None);
        let (first, state) = ranks_deliver(&tars, w, Some(take), None);
        let (rest, _) = ranks_deliver(&tars, w2, None, Some(&state));
        let mut union = [first.clone(), rest.clone()].concat();
        union.sort_unstable();
        union.dedup();
        assert_eq!(all.len(), 150usize.div_ceil(w) * w, "{w} ranks, padded");
        assert_eq!(
            union,
            (0..150).collect::<Vec<_>>(),
            "{w} -> {w2}: every sample of the epoch"
        );
        let mut after = rest.clone();
        after.sort_unstable();
        after.dedup();
        let again = rest.len() - after.len() + after.iter().filter(|i| first.contains(i)).count();
        assert!(
            again < w2,
            "{w} -> {w2}: {again} delivered again (padding is under {w2})"
        );
    }
}

/// How many times each of `0..len` is in `got`.
fn times(got: &[usize], len: usize) -> Vec<usize> {
    let mut n = vec![0; len];
    for &i in got {
        n[i] += 1;
    }
    n
}

#[test]
fn uneven_shards_give_each_sample_once_per_epoch_on_any_rank_count() {
    let dir = tempfile::tempdir().unwrap();
    let folder = source::open(shapes(dir.path(), 53), source::Split::Train).unwrap();
    let (out, _) = pack(folder.as_ref(), dir.path(), 10 << 10);
    let tars = source::open(&out, source::Split::Train).unwrap();
    let sizes: Vec<usize> = tars.shards().unwrap().iter().map(|r| r.len()).collect();
    assert!(
        sizes.len() >= 4 && sizes.iter().any(|&n| n != sizes[0]),
        "uneven shards: {sizes:?}"
    );
    for world in [2, 3, 4] {
        for (seed, epoch) in [(11, 0), (11, 1), (4, 2), (9, 5)] {
            let mut got = Vec::new();
            let mut steps = Vec::new();
            for rank in 0..world {
                let c = LoaderConfig {
                    rank,
                    world_size: world,
                    seed,
                    ..cfg(Mode::Async, 2)
                };
                let mut l = Loader::new(tars.clone(), c).unwrap();
                let mut n = 0;
                for b in l.epoch(epoch) {
                    got.extend(b.unwrap().indices);
                    n += 1;
                }
                steps.push(n);
            }
            let why = format!("{sizes:?} on {world} ranks, seed {seed}, epoch {epoch}");
            assert!(
                steps.iter().all(|&n| n == steps[0]),
                "{why}: steps {steps:?}"
            );
            // Every sample, and beyond them only Pad's repeats (ceil(53 / world) on
            // every rank).
            let n = times(&got, 53);
            assert!(n.iter().all(|&k| k >= 1), "{why}: {n:?}");
            assert_eq!(
                got.len() - 53,
                53usize.div_ceil(world) * world - 53,
                "{why}"
            );
        }
    }
    // Resumed mid-epoch on as many ranks, or taken over by another rank count: the
    // rest of the epoch, each sample once but for the padding.
    for (w, w2, take) in [(2, 2, 2), (3, 3, 1), (2, 3, 2), (4, 3, 1)] {
        let (first, state) = ranks_deliver(&tars, w, Some(take), None);
        let (rest, _) = ranks_deliver(&tars, w2, None, Some(&state));
        let n = times(&[first.clone(), rest.clone()].concat(), 53);
        assert!(n.iter().all(|&k| k >= 1), "{w} -> {w2}: {n:?}");
        // Padding: under w at the first layout's end, under w2 at the new one's.
        let repeats = first.len() + rest.len() - 53;
        assert!(
            repeats <= (w - 1) + (w2 - 1),
            "{w} -> {w2}: {repeats} repeats, more than the padding"
        );
    }
}

#[test]
fn an_empty_box_list_in_a_json_member_needs_no_box_labels() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    let bytes = tar_bytes(&[
        ("a.png", &a),
        ("a.cls", b"0"),
        ("a.json", br#"{"boxes": [[1, 1, 5, 5]], "box_labels": [1]}"#),
        ("b.png", &b),
        ("b.cls", b"1"),
        // An image with no objects: no classes to give.
        ("b.json", br#"{"boxes": []}"#),
    ]);
    let path = dir.path().join("boxes.tar");
    std::fs::write(&path, bytes).unwrap();
    let src = source::open(&path, source::Split::Train).unwrap_or_else(|e| panic!("{e}"));
    let fields = src.fields();
    assert!(fields.contains(stoker_loader::Field::Boxes), "{fields:?}");
    let (mut buf, mut ann) = (Vec::new(), stoker_loader::Annotation::default());
    src.read_sample(0, fields, &mut buf, &mut ann).unwrap();
    assert_eq!((ann.boxes.len(), ann.box_labels.as_slice()), (1, &[1][..]));
    src.read_sample(1, fields, &mut buf, &mut ann).unwrap();
    assert!(ann.boxes.is_empty() && ann.box_labels.is_empty(), "{ann:?}");
    assert_eq!(buf, b);
}

/// A set whose every `.json` lists no boxes is still a detection set (as a manifest's
/// is): before, with no box anywhere, it read as classification.
#[test]
fn a_set_whose_images_all_hold_no_objects_has_the_boxes_field() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    let bytes = tar_bytes(&[
        ("a.png", &a),
        ("a.json", br#"{"boxes": []}"#),
        ("b.png", &b),
        ("b.json", br#"{"boxes": [], "labels": []}"#),
    ]);
    let path = dir.path().join("empty.tar");
    std::fs::write(&path, bytes).unwrap();
    let src = source::open(&path, source::Split::Train).unwrap_or_else(|e| panic!("{e}"));
    let fields = src.fields();
    assert!(fields.contains(stoker_loader::Field::Boxes), "{fields:?}");
    assert!(fields.contains(stoker_loader::Field::Labels), "{fields:?}");
    let (mut buf, mut ann) = (Vec::new(), stoker_loader::Annotation::default());
    for i in 0..2 {
        src.read_sample(i, fields, &mut buf, &mut ann).unwrap();
        assert!(ann.boxes.is_empty() && ann.labels.is_empty(), "{ann:?}");
    }
}

/// A tar shard's `.json` member gives instance masks as a manifest line does, as COCO
/// RLE objects (a path would name a file outside the shard: an error).
#[test]
fn instance_masks_in_a_json_member_are_rle_objects() {
    use stoker_loader::{Field, Fields};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    // png() is 9 x 7; the instance is columns 2..5 of rows 1..4, down each column.
    let mut counts = vec![7 * 2 + 1];
    for _ in 2..5 {
        counts.extend([3, 3 + 1]);
    }
    *counts.last_mut().unwrap() = 3 + 7 * 4;
    let json_a = serde_json::json!({"boxes": [[2, 1, 5, 4]], "box_labels": [0],
                                    "masks": [{"size": [7, 9], "counts": counts}]})
    .to_string();
    let bytes = tar_bytes(&[("a.png", &a), ("a.json", json_a.as_bytes())]);
    let path = dir.path().join("inst.tar");
    std::fs::write(&path, bytes).unwrap();
    let src: Arc<dyn Source> = source::open(&path, source::Split::Train).unwrap();
    assert!(src.fields().contains(Field::Masks), "{:?}", src.fields());
    let cfg = LoaderConfig {
        batch_size: 1,
        mode: Mode::Sync,
        shuffle: false,
        fields: Some(Fields::of(&[Field::Boxes, Field::Masks])),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, cfg).unwrap();
    let first = loader.epoch(0).next().unwrap().unwrap();
    let m = first.instance_masks_of(0).unwrap();
    let want: Vec<u8> = (0..7 * 9)
        .map(|p| u8::from((2..5).contains(&(p % 9)) && (1..4).contains(&(p / 9))))
        .collect();
    assert_eq!(m, want.as_slice());
    let bytes = tar_bytes(&[
        ("b.png", &b),
        (
            "b.json",
            br#"{"boxes": [[1, 1, 3, 3]], "box_labels": [0], "masks": ["b.mask.png"]}"#,
        ),
    ]);
    let path = dir.path().join("paths.tar");
    std::fs::write(&path, bytes).unwrap();
    let e = open_err(&path);
    assert!(
        e.contains("b.json") && e.contains("\"b.mask.png\" is a path"),
        "{e}"
    );
}

#[test]
fn two_images_two_masks_or_two_labels_that_differ_are_errors_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (png(1), png(2));
    // Opening reads the headers only: what the images and masks hold does not matter.
    let (jpg, m) = (png(3), png(4));
    let path = dir.path().join("two.tar");
    // (the tar's members after a good sample, the two that conflict)
    type Case<'a> = (&'a [(&'a str, &'a [u8])], [&'a str; 2]);
    let cases: [Case; 4] = [
        (
            &[("x/k.png", &b), ("x/k.jpg", &jpg), ("x/k.cls", b"0")],
            ["x/k.png", "x/k.jpg"],
        ),
        (
            &[("k.png", &b), ("k.mask.png", &m), ("k.seg.png", &m)],
            ["k.mask.png", "k.seg.png"],
        ),
        (
            &[
                ("k.png", &b),
                ("k.cls", b"1"),
                ("k.json", br#"{"label": 2}"#),
            ],
            ["k.cls", "k.json"],
        ),
        (
            &[
                ("k.json", br#"{"class": 3}"#),
                ("k.png", &b),
                ("k.cls", b"0"),
            ],
            ["k.json", "k.cls"],
        ),
    ];
    for (members, [first, second]) in cases {
        // A good sample first: the error is the second's, not the shard's start.
        let mut all: Vec<(&str, &[u8])> = vec![("a.png", &a), ("a.cls", b"0")];
        all.extend_from_slice(members);
        std::fs::write(&path, tar_bytes(&all)).unwrap();
        let e = open_err(&path);
        let key = if first.starts_with("x/") { "x/k" } else { "k" };
        assert!(
            e.contains("two.tar")
                && e.contains(&format!("sample {key}:"))
                && e.contains(first)
                && e.contains(second),
            "{first} and {second}: {e}"
        );
    }
    // The same label in both is no conflict.
    let same = tar_bytes(&[
        ("k.png", &b),
        ("k.cls", b"2"),
        ("k.json", br#"{"label": 2}"#),
    ]);
    std::fs::write(&path, same).unwrap();
    let src = source::open(&path, source::Split::Train).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(src.label(0), 2);
}
