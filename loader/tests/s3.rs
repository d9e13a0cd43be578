//! Remote data against a real S3 API on localhost (moto's server; see s3_support):
//! packed files, tar shards (with and without their index) and image folders read
//! from S3 give the same batches as the local copies; listings longer than a page; a
//! server killed mid-epoch ends the epoch with a clear error within a bounded time;
//! wrong credentials, a missing bucket and a truncated shard are clear errors; resume
//! in the middle of a remote shard; the cache serves later epochs; a URL is detected by
//! the rules of a local path.

use crate::s3_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_support::Moto;
use stoker_loader::source::{self, packed, tar, OpenOptions, Source};
use stoker_loader::storage::{self, RemoteOptions};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{Digest, Loader, LoaderConfig, LoaderError, Mode, OnError};

fn shapes(dir: &Path, count: usize) -> PathBuf {
    let root = dir.join("folder");
    synthetic::shapes(
        &root,
        &ShapesOptions {
            count,
            size: 16,
            classes: 3,
            seed: 5,
        },
        |_, _| {},
    )
    .unwrap();
    root
}

fn open(url: &str, o: &RemoteOptions) -> Arc<dyn Source> {
    open_with(url, o, None)
}

fn open_with(url: &str, o: &RemoteOptions, cache: Option<(&Path, u64)>) -> Arc<dyn Source> {
    let opts = OpenOptions {
        remote: o.clone(),
        cache: cache.map(|(d, _)| d.to_path_buf()),
        cache_bytes: cache.map_or(1 << 30, |(_, b)| b),
        ..OpenOptions::default()
    };
    match source::open_with(Path::new(url), &opts) {
        Ok(s) => s,
        Err(e) => panic!("opening {url}: {e}"),
    }
}

fn open_err(url: &str, o: &RemoteOptions) -> String {
    let opts = OpenOptions {
        remote: o.clone(),
        ..OpenOptions::default()
    };
    match source::open_with(Path::new(url), &opts) {
        Ok(_) => panic!("{url} opened"),
        Err(e) => e.to_string(),
    }
}

fn cfg(mode: Mode) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        mode,
        workers: stoker_loader::Workers::Fixed(2),
        io_depth: 8,
        seed: 9,
        shuffle_buffer: 8,
        ..LoaderConfig::default()
    }
}

fn digest(src: Arc<dyn Source>, cfg: LoaderConfig) -> String {
    let mut loader = Loader::new(src, cfg).unwrap();
    let mut d = Digest::new();
    for e in 0..2 {
        for b in loader.epoch(e) {
            d.update(&b.unwrap());
        }
    }
    d.hex()
}

/// A local folder, its packed file and its tar shards.
struct Local {
    _dir: tempfile::TempDir,
    folder: PathBuf,
    pack: PathBuf,
    shards: PathBuf,
}

fn local_data(count: usize) -> Local {
    let dir = tempfile::tempdir().unwrap();
    let folder = shapes(dir.path(), count);
    let src = source::open(&folder, source::Split::Train).unwrap();
    let pack = dir.path().join("data.pack");
    packed::pack_source(src.as_ref(), &pack, |_, _| {}).unwrap();
    let shards = dir.path().join("shards");
    tar::pack_tar(src.as_ref(), &shards, 10 << 10, |_, _| {}).unwrap();
    Local {
        _dir: dir,
        folder,
        pack,
        shards,
    }
}

#[test]
fn packed_tars_and_folders_from_s3_match_the_local_copies() {
    let Some(mut moto) = Moto::start("packed_tars_and_folders_from_s3_match_the_local_copies")
    else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("data");
    let local = local_data(40);
    storage::upload_file(&local.pack, "s3://data/set/data.pack", &o).unwrap();
    storage::upload_dir(&local.shards, "s3://data/set/shards", &o, 8).unwrap();
    storage::upload_dir(&local.folder, "s3://data/set/folder/", &o, 8).unwrap();
    // The shards again without their indexes: indexed by streaming each once.
    let bare = local._dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    for e in std::fs::read_dir(&local.shards).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tar") {
            std::fs::copy(&p, bare.join(p.file_name().unwrap())).unwrap();
        }
    }
    storage::upload_dir(&bare, "s3://data/set/bare/", &o, 8).unwrap();

    for mode in [Mode::Sync, Mode::Async] {
        let c = cfg(mode);
        let want = digest(
            source::open(&local.pack, source::Split::Train).unwrap(),
            c.clone(),
        );
        let got = open("s3://data/set/data.pack", &o);
        assert_eq!(got.format(), "packed");
        assert_eq!(digest(got, c.clone()), want, "packed, {mode}");

        let want = digest(
            source::open(&local.shards, source::Split::Train).unwrap(),
            c.clone(),
        );
        for url in [
            "s3://data/set/shards",
            "s3://data/set/shards/",
            "s3://data/set/bare",
        ] {
            let got = open(url, &o);
            assert_eq!(got.format(), "tar");
            assert_eq!(digest(got, c.clone()), want, "{url}, {mode}");
        }
        let n = std::fs::read_dir(&local.shards).unwrap().count() / 2;
        let pattern = format!("s3://data/set/shards/shard-{{000000..{:06}}}.tar", n - 1);
        assert_eq!(digest(open(&pattern, &o), c.clone()), want, "{pattern}");

        let want = digest(
            source::open(&local.folder, source::Split::Train).unwrap(),
            c.clone(),
        );
        let got = open("s3://data/set/folder", &o);
        assert_eq!(got.format(), "folder");
        assert_eq!(digest(got, c.clone()), want, "folder, {mode}");
    }

    // With a cache: the bare shards' indexes and bytes are kept, within the bound, and
    // later epochs read them from there (even with the server gone).
    let cache = tempfile::tempdir().unwrap();
    let bound = 1 << 20;
    let local_tars = source::open(&local.shards, source::Split::Train).unwrap();
    let mut want = Loader::new(local_tars, cfg(Mode::Async)).unwrap();
    let got = open_with("s3://data/set/bare", &o, Some((cache.path(), bound)));
    let mut got = Loader::new(got, cfg(Mode::Async)).unwrap();
    let epoch = |l: &mut Loader, e: u64| {
        let mut d = Digest::new();
        for b in l.epoch(e) {
            d.update(&b.unwrap());
        }
        d.hex()
    };
    assert_eq!(epoch(&mut got, 0), epoch(&mut want, 0));
    let objs: Vec<u64> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".obj"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    let shards = std::fs::read_dir(&bare).unwrap().count();
    assert_eq!(objs.len(), shards, "every shard cached");
    assert!(objs.iter().sum::<u64>() <= bound, "{objs:?}");
    let indexes = std::fs::read_dir(cache.path().join("index"))
        .unwrap()
        .count();
    assert_eq!(indexes, shards, "one index per shard indexed");
    moto.kill();
    assert_eq!(
        epoch(&mut got, 1),
        epoch(&mut want, 1),
        "epoch 1 from the cache"
    );
}

#[test]
fn a_listing_longer_than_one_page_is_read_whole() {
    let Some(moto) = Moto::start("a_listing_longer_than_one_page_is_read_whole") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("many");
    // 1010 objects: S3 lists 1000 keys a page.
    let dir = tempfile::tempdir().unwrap();
    let one = std::fs::read(
        std::fs::read_dir(shapes(dir.path(), 3).join("00_circle"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    let root = dir.path().join("many");
    for class in ["a", "b"] {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..505 {
            std::fs::write(root.join(class).join(format!("{i:04}.jpg")), &one).unwrap();
        }
    }
    storage::upload_dir(&root, "s3://many/imgs", &o, 32).unwrap();
    let local = source::open(&root, source::Split::Train).unwrap();
    let remote = open("s3://many/imgs/", &o);
    assert_eq!(remote.len(), 1010);
    assert_eq!(remote.classes(), local.classes());
    for i in [0, 504, 505, 999, 1000, 1009] {
        assert_eq!(remote.label(i), local.label(i), "{i}");
        let name = |s: &dyn Source| {
            s.describe(i)
                .rsplit('/')
                .take(2)
                .collect::<Vec<_>>()
                .join("/")
        };
        assert_eq!(name(remote.as_ref()), name(local.as_ref()), "{i}");
    }
    let mut buf = Vec::new();
    remote.read(1009, &mut buf).unwrap();
    assert_eq!(buf, one);
}

#[test]
fn a_server_killed_mid_epoch_ends_it_with_a_clear_error_in_bounded_time() {
    let Some(mut moto) =
        Moto::start("a_server_killed_mid_epoch_ends_it_with_a_clear_error_in_bounded_time")
    else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("dying");
    let local = local_data(64);
    storage::upload_file(&local.pack, "s3://dying/data.pack", &o).unwrap();
    storage::upload_dir(&local.shards, "s3://dying/shards", &o, 8).unwrap();
    let pack = open("s3://dying/data.pack", &o);
    let tars = open("s3://dying/shards", &o);
    let mut loaders: Vec<(&str, Loader)> = Vec::new();
    for (name, src) in [("packed", &pack), ("tar", &tars)] {
        for mode in [Mode::Sync, Mode::Async] {
            let l = Loader::new(src.clone(), cfg(mode)).unwrap();
            loaders.push((if mode == Mode::Sync { name } else { "async" }, l));
        }
    }
    // Made while the server lives (a loader reads its first sample to learn the size).
    let mut skipping = Loader::new(
        tars.clone(),
        LoaderConfig {
            on_error: OnError::Skip,
            ..cfg(Mode::Async)
        },
    )
    .unwrap();
    // Every loader delivers its first batch, then the server dies.
    let mut epochs = Vec::new();
    for (name, l) in loaders.iter_mut() {
        let mut cursor = l.start_epoch(0);
        l.next_batch(&mut cursor).unwrap().unwrap();
        epochs.push((*name, cursor));
    }
    moto.kill();
    let t0 = Instant::now();
    for ((name, l), (_, cursor)) in loaders.iter_mut().zip(epochs.iter_mut()) {
        let mut err = None;
        while let Some(b) = l.next_batch(cursor) {
            if let Err(e) = b {
                err = Some(e);
                break;
            }
        }
        // The async pipeline may have read ahead: it must still fail before the end.
        let e = err.unwrap_or_else(|| panic!("{name}: the epoch ended without an error"));
        let text = e.to_string();
        assert!(matches!(e, LoaderError::Sample { .. }), "{name}: {text}");
        assert!(
            text.contains("s3://dying/"),
            "{name}: names the object: {text}"
        );
        assert!(
            text.contains("retries") || text.contains("retry"),
            "{name}: says it retried: {text}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    // With skip, a dead server's samples are left out and counted; the epoch ends.
    let t0 = Instant::now();
    let mut delivered = 0;
    for b in skipping.epoch(0) {
        delivered += b.unwrap().indices.len();
    }
    assert_eq!(delivered, 0);
    assert_eq!(skipping.metrics().skipped, 64);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn wrong_credentials_a_missing_bucket_and_a_truncated_shard_are_clear_errors() {
    let Some(moto) =
        Moto::start("wrong_credentials_a_missing_bucket_and_a_truncated_shard_are_clear_errors")
    else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("bkt");
    let e = open_err("s3://nobucket/data.pack", &o);
    assert!(
        e.starts_with("s3://nobucket/") && e.contains("NoSuchBucket"),
        "{e}"
    );
    let e = open_err("s3://bkt/missing.pack", &o);
    assert!(
        e.starts_with("s3://bkt/missing.pack") && e.contains("no such object"),
        "{e}"
    );
    let e = open_err("s3://bkt/missing-{0..1}.tar", &o);
    assert!(
        e.starts_with("s3://bkt/missing-0.tar") && e.contains("not found"),
        "{e}"
    );

    let local = local_data(30);
    let shard = std::fs::read(local.shards.join("shard-000000.tar")).unwrap();
    let cut = local._dir.path().join("cut.tar");
    std::fs::write(&cut, &shard[..shard.len() - 1500]).unwrap();
    storage::upload_file(&cut, "s3://bkt/cut/shard-000000.tar", &o).unwrap();
    let e = open_err("s3://bkt/cut/shard-000000.tar", &o);
    assert!(
        e.contains("s3://bkt/cut/shard-000000.tar") && e.contains("truncated"),
        "{e}"
    );
    // The same cut shard beside the whole shard's index: the index is stale.
    storage::upload_file(
        &local.shards.join("shard-000000.tar.idx"),
        "s3://bkt/cut/shard-000000.tar.idx",
        &o,
    )
    .unwrap();
    let e = open_err("s3://bkt/cut/shard-000000.tar", &o);
    assert!(
        e.contains("shard-000000.tar.idx") && e.contains("truncated or replaced"),
        "{e}"
    );
    drop(moto);

    let Some(auth) = Moto::start_with_auth("wrong credentials") else {
        return;
    };
    let t0 = Instant::now();
    let e = open_err("s3://bkt/data.pack", &auth.options());
    assert!(
        e.starts_with("s3://bkt/data.pack") && e.contains("403"),
        "{e}"
    );
    assert!(e.contains("check the credentials"), "{e}");
    // Refused credentials are not worth retrying.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn resume_in_the_middle_of_a_remote_shard_gives_the_rest_of_the_epoch() {
    let Some(moto) =
        Moto::start("resume_in_the_middle_of_a_remote_shard_gives_the_rest_of_the_epoch")
    else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("res");
    let local = local_data(48);
    storage::upload_dir(&local.shards, "s3://res/shards", &o, 8).unwrap();
    let src = open("s3://res/shards", &o);
    assert!(src.shards().unwrap().len() >= 3);
    for mode in [Mode::Sync, Mode::Async] {
        let mut first = Loader::new(src.clone(), cfg(mode)).unwrap();
        let state = first.state_at(1, 2);
        let full: Vec<(Vec<usize>, Vec<u8>)> = first
            .epoch(1)
            .skip(2)
            .map(|b| {
                let b = b.unwrap();
                (b.indices.clone(), b.images.to_vec())
            })
            .collect();
        // Batch 2 starts inside a shard: its samples and the previous batch's share one.
        let mut again = Loader::new(src.clone(), cfg(mode)).unwrap();
        let json = state.to_json();
        let state = stoker_loader::LoaderState::from_json(&json).unwrap();
        let rest: Vec<(Vec<usize>, Vec<u8>)> = again
            .resume(&state)
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                (b.indices.clone(), b.images.to_vec())
            })
            .collect();
        assert_eq!(rest, full, "{mode}");
        assert_eq!(rest.len(), 4);
    }
}

/// The first error of an epoch, or a panic naming `what` when it ends without one.
fn first_error(loader: &mut Loader, what: &str) -> LoaderError {
    for b in loader.epoch(0) {
        if let Err(e) = b {
            return e;
        }
    }
    panic!("{what}: the epoch ended without an error")
}

#[test]
fn objects_changed_after_listing_are_errors_naming_them() {
    let Some(moto) = Moto::start("objects_changed_after_listing_are_errors_naming_them") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("chg");
    let local = local_data(24);
    storage::upload_file(&local.pack, "s3://chg/data.pack", &o).unwrap();
    storage::upload_dir(&local.shards, "s3://chg/shards", &o, 8).unwrap();
    storage::upload_dir(&local.folder, "s3://chg/folder/", &o, 8).unwrap();
    let tars = open("s3://chg/shards", &o);
    let folder = open("s3://chg/folder/", &o);
    let pack = open("s3://chg/data.pack", &o);
    let cfg = |mode| LoaderConfig {
        shuffle: false,
        ..cfg(mode)
    };
    // Loaders made (and their first sample read) before anything changes.
    let mut loaders = Vec::new();
    for mode in [Mode::Sync, Mode::Async] {
        for (name, src) in [("tar", &tars), ("folder", &folder), ("packed", &pack)] {
            loaders.push((
                format!("{name}, {mode}"),
                Loader::new(src.clone(), cfg(mode)).unwrap(),
            ));
        }
    }

    // A shard rewritten with the same size (one byte of an image changed): the index's
    // offsets still fit, so only the version says the labels belong to other bytes.
    let shard = local.shards.join("shard-000000.tar");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = 512 + 100;
    bytes[mid] ^= 0xff;
    let changed = local._dir.path().join("changed.tar");
    std::fs::write(&changed, &bytes).unwrap();
    storage::upload_file(&changed, "s3://chg/shards/shard-000000.tar", &o).unwrap();
    // An image replaced by a larger one, and the packed file by a longer copy.
    let first_image = local.folder.join(
        std::fs::read_dir(&local.folder)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .min()
            .unwrap(),
    );
    let image = std::fs::read_dir(&first_image)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let rel = image
        .strip_prefix(&local.folder)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut bigger = std::fs::read(&image).unwrap();
    bigger.extend_from_slice(&[0u8; 4096]);
    let bigger_path = local._dir.path().join("bigger.jpg");
    std::fs::write(&bigger_path, &bigger).unwrap();
    storage::upload_file(&bigger_path, &format!("s3://chg/folder/{rel}"), &o).unwrap();
    let mut longer = std::fs::read(&local.pack).unwrap();
    longer.extend_from_slice(&[0u8; 100]);
    let longer_path = local._dir.path().join("longer.pack");
    std::fs::write(&longer_path, &longer).unwrap();
    storage::upload_file(&longer_path, "s3://chg/data.pack", &o).unwrap();

    for (name, loader) in loaders.iter_mut() {
        let e = first_error(loader, name).to_string();
        let object = match &name[..3] {
            "tar" => "s3://chg/shards/shard-000000.tar".to_string(),
            "fol" => format!("s3://chg/folder/{rel}"),
            _ => "s3://chg/data.pack".to_string(),
        };
        assert!(e.contains(&object), "{name}: names the object: {e}");
        assert!(
            e.contains("changed since it was listed"),
            "{name}: says it changed: {e}"
        );
    }
    // Opened again, the new versions read (the shard's image byte is now different).
    let again = open("s3://chg/shards", &o);
    let mut buf = Vec::new();
    again.read(0, &mut buf).unwrap();
}

#[test]
fn a_stopped_server_ends_an_async_epoch_within_the_documented_time() {
    let Some(moto) = Moto::start("a_stopped_server_ends_an_async_epoch_within_the_documented_time")
    else {
        return;
    };
    if moto.server_pid().is_none() {
        println!("SKIPPED: the moto server's PID is unknown (no /proc children list)");
        return;
    }
    let o = RemoteOptions {
        retries: 1,
        timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        backoff: Duration::from_millis(50),
        retry_timeout: Duration::from_secs(1),
        ..moto.options()
    };
    moto.create_bucket("stop");
    let local = local_data(48);
    storage::upload_file(&local.pack, "s3://stop/data.pack", &o).unwrap();
    let src = open("s3://stop/data.pack", &o);
    // A batch of 16 read 2 at a time: before, each round of reads waited out its own
    // timeouts, so the epoch took 8 times a request's worst case to fail.
    let cfg = LoaderConfig {
        batch_size: 16,
        io_depth: 2,
        workers: stoker_loader::Workers::Fixed(2),
        ..cfg(Mode::Async)
    };
    let mut loader = Loader::new(src, cfg).unwrap();
    assert!(moto.signal("STOP"), "SIGSTOP the server");
    let t0 = Instant::now();
    let e = first_error(&mut loader, "stopped server");
    let took = t0.elapsed();
    assert!(moto.signal("CONT"));
    assert!(e.to_string().contains("s3://stop/data.pack"), "{e}");
    // The documented bound (docs/remote-data.md): one request's worst case, plus
    // scheduling slack.
    let bound = o.worst_case() + Duration::from_secs(2);
    assert!(
        took < bound,
        "the epoch failed after {took:?}, more than the worst case {:?} + 2 s",
        o.worst_case()
    );
}

#[test]
fn every_format_with_fields_reads_from_s3_as_locally() {
    let Some(moto) = Moto::start("every_format_with_fields_reads_from_s3_as_locally") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("fields");
    let dir = tempfile::tempdir().unwrap();
    let scenes = dir.path().join("scenes");
    let opts = synthetic::ScenesOptions {
        count: 16,
        width: 40,
        height: 32,
        max_shapes: 3,
        classes: 10,
        seed: 2,
    };
    synthetic::scenes(&scenes, &opts, |_, _| {}).unwrap();
    let manifest = source::open(scenes.join("train.jsonl"), source::Split::Train).unwrap();
    let pack = dir.path().join("scenes.pack");
    packed::pack_source(manifest.as_ref(), &pack, |_, _| {}).unwrap();
    let shards = dir.path().join("shards");
    tar::pack_tar(manifest.as_ref(), &shards, 10 << 10, |_, _| {}).unwrap();
    storage::upload_dir(&scenes, "s3://fields/scenes/", &o, 8).unwrap();
    storage::upload_file(&pack, "s3://fields/scenes.pack", &o).unwrap();
    storage::upload_dir(&shards, "s3://fields/shards/", &o, 8).unwrap();

    let c = LoaderConfig {
        transform: stoker_augment::Pipeline::parse("rrc:24:scale=0.5-1,flip").unwrap(),
        shuffle: false,
        ..cfg(Mode::Async)
    };
    let want = digest(manifest.clone(), c.clone());
    for url in [
        "s3://fields/scenes/train.jsonl",
        "s3://fields/scenes.pack",
        "s3://fields/shards/",
    ] {
        let got = open(url, &o);
        assert_eq!(got.fields(), manifest.fields(), "{url}");
        assert_eq!(digest(got, c.clone()), want, "{url}");
    }
    // Segmentation pairs (images/ and masks/ of the same set): boxes aside, the mask
    // and image of every sample match the local pairs.
    let local_pairs = source::open(&scenes, source::Split::Train).unwrap();
    let remote_pairs = open("s3://fields/scenes/", &o);
    assert_eq!(remote_pairs.fields(), local_pairs.fields());
    assert_eq!(digest(remote_pairs, c.clone()), digest(local_pairs, c));
}

/// One detector decides what a path and a URL are: the cases the URL rules used to
/// get differently from the local ones.
#[test]
fn a_url_is_detected_by_the_rules_of_a_local_path() {
    let Some(moto) = Moto::start("a_url_is_detected_by_the_rules_of_a_local_path") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("rules");
    let local = local_data(12);
    let dir = local._dir.path();
    let c = cfg(Mode::Sync);

    // A packed file named like a shard: its magic decides, here and there (a URL
    // ending in .tar was opened as tar shards, and failed).
    let disguised = dir.join("data.tar");
    std::fs::copy(&local.pack, &disguised).unwrap();
    storage::upload_file(&disguised, "s3://rules/data.tar", &o).unwrap();
    let want = digest(
        source::open(&local.pack, source::Split::Train).unwrap(),
        c.clone(),
    );
    assert_eq!(
        source::open(&disguised, source::Split::Train)
            .unwrap()
            .format(),
        "packed"
    );
    let got = open("s3://rules/data.tar", &o);
    assert_eq!(got.format(), "packed");
    assert_eq!(digest(got, c.clone()), want);

    // An empty object is an empty file, as an empty local file is (it was "unknown
    // format").
    let empty = dir.join("empty.pack");
    std::fs::write(&empty, b"").unwrap();
    storage::upload_file(&empty, "s3://rules/empty.pack", &o).unwrap();
    let e = open_err("s3://rules/empty.pack", &o);
    assert!(
        e.starts_with("s3://rules/empty.pack") && e.ends_with("empty file"),
        "{e}"
    );

    // A pattern naming Parquet files and shards is refused, as a local one is (the
    // URL's was opened as tar shards).
    let mixed = dir.join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(&local.pack, mixed.join("a.parquet")).unwrap();
    std::fs::copy(local.shards.join("shard-000000.tar"), mixed.join("b.tar")).unwrap();
    storage::upload_dir(&mixed, "s3://rules/mixed/", &o, 4).unwrap();
    let local_err = match source::open(mixed.join("{a.parquet,b.tar}"), source::Split::Train) {
        Ok(s) => panic!("the mixed pattern opened as {}", s.format()),
        Err(e) => e.to_string(),
    };
    let e = open_err("s3://rules/mixed/{a.parquet,b.tar}", &o);
    for e in [&local_err, &e] {
        assert!(
            e.contains("the pattern names Parquet files and others"),
            "{e}"
        );
    }
    assert!(e.starts_with("s3://rules/mixed/"), "{e}");

    // MNIST and CIFAR-10 behind a URL are named as what they are, and as read from
    // local files only (an MNIST prefix was taken for an image folder without class
    // folders, a CIFAR-10 batch for an unknown format).
    synthetic::write_mnist(&dir.join("mnist"), 7, 0).unwrap();
    storage::upload_dir(&dir.join("mnist"), "s3://rules/mnist/", &o, 4).unwrap();
    let e = open_err("s3://rules/mnist", &o);
    assert!(
        e.starts_with("s3://rules/mnist")
            && e.contains("an MNIST folder, which is read from local files only"),
        "{e}"
    );
    synthetic::write_cifar(&dir.join("cifar"), 2, 0).unwrap();
    storage::upload_file(
        &dir.join("cifar/data_batch_1.bin"),
        "s3://rules/cifar/data_batch_1.bin",
        &o,
    )
    .unwrap();
    let e = open_err("s3://rules/cifar/data_batch_1.bin", &o);
    assert!(
        e.contains("a CIFAR-10 batch, which is read from local files only"),
        "{e}"
    );
    let e = open_err("s3://rules/cifar/", &o);
    assert!(e.contains("a CIFAR-10 folder"), "{e}");

    // Class folders with a stray shard beside them are an image folder, as a local
    // folder is (the URL's was opened as that one shard).
    let stray = dir.join("stray");
    copy_tree(&local.folder, &stray);
    std::fs::copy(
        local.shards.join("shard-000000.tar"),
        stray.join("extra.tar"),
    )
    .unwrap();
    storage::upload_dir(&stray, "s3://rules/stray/", &o, 8).unwrap();
    let want = digest(
        source::open(&local.folder, source::Split::Train).unwrap(),
        c.clone(),
    );
    let here = source::open(&stray, source::Split::Train).unwrap();
    assert_eq!(here.format(), "folder");
    assert_eq!(digest(here, c.clone()), want);
    let got = open("s3://rules/stray", &o);
    assert_eq!(got.format(), "folder");
    assert_eq!(digest(got, c), want);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
