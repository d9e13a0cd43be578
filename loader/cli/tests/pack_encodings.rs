//! `stoker-load pack --max-side N --encoding raw|jpeg:Q|png|keep`: what `inspect` says of
//! the result (the encoding and the longest side), the default's bytes unchanged, and a
//! bad option refused by name before anything is written.

use std::path::{Path, PathBuf};

use crate::util::{failing, path, stoker_load};

fn shapes(dir: &Path) -> PathBuf {
    let data = dir.join("shapes");
    let out = stoker_load(&[
        "gen",
        "shapes",
        path(&data),
        "--count",
        "12",
        "--size",
        "48",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

fn ok(args: &[&str]) -> String {
    let out = stoker_load(args);
    assert!(
        out.status.success(),
        "stoker-load {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn inspect_shows_the_encoding_and_the_longest_side() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shapes(tmp.path());
    let raw = tmp.path().join("raw.stk");
    ok(&[
        "pack",
        path(&data),
        path(&raw),
        "--max-side",
        "20",
        "--encoding",
        "raw",
    ]);
    let text = ok(&["inspect", path(&raw)]);
    assert!(
        text.contains("packed version 3: raw u8 pixels, a shape per record"),
        "{text}"
    );
    assert!(text.contains("encodings: raw (12)"), "{text}");
    assert!(text.contains("longest side: 20"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", path(&raw), "--json"])).unwrap();
    assert_eq!(json["max_side"], 20);
    assert_eq!(json["encodings"]["raw"], 12);

    let jpeg = tmp.path().join("jpeg.stk");
    ok(&[
        "pack",
        path(&data),
        path(&jpeg),
        "--max-side",
        "30",
        "--encoding",
        "jpeg:80",
    ]);
    let text = ok(&["inspect", path(&jpeg)]);
    assert!(text.contains("encodings: jpeg (12)"), "{text}");
    assert!(text.contains("longest side: 30"), "{text}");

    let shards = tmp.path().join("shards");
    ok(&[
        "pack",
        path(&data),
        path(&shards),
        "--format",
        "tar",
        "--max-side",
        "24",
        "--encoding",
        "raw",
    ]);
    let text = ok(&["inspect", path(&shards)]);
    assert!(text.contains("encodings: raw (12)"), "{text}");
    assert!(text.contains("longest side: 24"), "{text}");
}

#[test]
fn the_default_pack_is_keep_and_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shapes(tmp.path());
    let (a, b) = (tmp.path().join("a.stk"), tmp.path().join("b.stk"));
    ok(&["pack", path(&data), path(&a)]);
    ok(&["pack", path(&data), path(&b), "--encoding", "keep"]);
    let bytes = std::fs::read(&a).unwrap();
    assert_eq!(bytes, std::fs::read(&b).unwrap());
    // Version 1, records as the folder's files.
    assert_eq!(&bytes[8..12], &1u32.to_le_bytes());
    let text = ok(&["inspect", path(&a)]);
    assert!(text.contains("encodings: jpeg (12)"), "{text}");
    assert!(text.contains("longest side: 48"), "{text}");
}

#[test]
fn bad_pack_options_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let data = shapes(tmp.path());
    let out = tmp.path().join("never.stk");
    for (args, words) in [
        (
            &["--max-side", "0"][..],
            "0 is out of range (expected 1 to 65535)",
        ),
        (
            &["--encoding", "jpeg:0"][..],
            "JPEG quality '0' is not a whole number from 1 to 100",
        ),
        (&["--encoding", "jpeg:101"][..], "JPEG quality '101'"),
        (
            &["--encoding", "webp"][..],
            "unknown encoding 'webp' (expected keep, raw, png or jpeg:Q with Q from 1 to 100)",
        ),
    ] {
        let mut all = vec!["pack", path(&data), path(&out)];
        all.extend_from_slice(args);
        let err = failing(&all);
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
