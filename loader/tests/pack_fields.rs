//! Packs that carry every field. `pack --format tar` of a data set with fields writes
//! `txt`, `json` and `mask.png` members and a version 2 index; `pack` writes a version 2
//! packed file. Reading either back gives the same samples and the same batches (flips
//! included, since both keep the keypoint names) as the data set they were packed
//! from, and classification packs stay version 1.

use std::path::Path;
use std::sync::Arc;

use stoker_augment::Pipeline;
use stoker_loader::sample::MaskData;
use stoker_loader::source::{open_with, packed, tar, OpenOptions, PackedReader};
use stoker_loader::synthetic::{scenes, ScenesOptions};
use stoker_loader::{Annotation, Digest, Field, Loader, LoaderConfig, Source};

fn make_scenes(dir: &Path, count: usize) -> Arc<dyn Source> {
    let opts = ScenesOptions {
        count,
        width: 48,
        height: 40,
        max_shapes: 3,
        classes: 10,
        seed: 11,
    };
    scenes(&dir.join("scenes"), &opts, |_, _| {}).expect("scenes");
    open_with(dir.join("scenes/train.jsonl"), &OpenOptions::default()).expect("manifest")
}

fn digests(src: Arc<dyn Source>, spec: &str) -> Vec<String> {
    let cfg = LoaderConfig {
        batch_size: 5,
        // Shards are shuffled shard by shard: the orders differ, so compare in order.
        shuffle: false,
        seed: 4,
        transform: Pipeline::parse(spec).expect("spec"),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut out = Vec::new();
    for e in 0..2 {
        for b in loader.epoch(e) {
            let b = b.expect("batch");
            assert!(b.fields.is_some());
            let mut d = Digest::new();
            d.update(&b);
            out.push(d.hex());
        }
    }
    out
}

#[test]
fn tar_shards_carry_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let src = make_scenes(dir.path(), 20);
    let out = dir.path().join("shards");
    let stats = tar::pack_tar(src.as_ref(), &out, 12 << 10, |_, _| {}).expect("pack");
    assert_eq!(stats.records, 20);
    assert!(stats.shards > 1, "several shards: {stats:?}");
    let idx_bytes = std::fs::read(out.join("shard-000000.tar.idx")).unwrap();
    let idx = tar::ShardIndex::parse(
        &idx_bytes,
        std::fs::metadata(out.join("shard-000000.tar"))
            .unwrap()
            .len(),
    )
    .expect("index");
    assert_eq!(idx.version, tar::INDEX_VERSION_FIELDS);
    assert_eq!(
        idx.extra.keypoint_names,
        ["left_end", "right_end", "centre"]
    );

    let back = open_with(&out, &OpenOptions::default()).expect("shards");
    assert_eq!(back.format(), "tar");
    assert_eq!(back.len(), src.len());
    assert_eq!(back.fields(), src.fields());
    assert_eq!(back.classes(), src.classes());
    let names = |s: &dyn Source| s.keypoint_schema().map(|k| k.names.clone());
    assert_eq!(names(back.as_ref()), names(src.as_ref()));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut fa, mut fb) = (Annotation::default(), Annotation::default());
    for i in 0..src.len() {
        src.read_sample(i, src.fields(), &mut a, &mut fa).unwrap();
        back.read_sample(i, back.fields(), &mut b, &mut fb).unwrap();
        assert_eq!(a, b, "image {i}");
        // The manifest reads the mask file, the tar its member: the same PNG bytes.
        assert!(matches!(fb.mask, Some(MaskData::Png(_))));
        assert_eq!(fa, fb, "fields of sample {i}");
        assert!(!fb.boxes.is_empty() && fb.text.is_some() && !fb.labels.is_empty());
    }
    // A field not wanted is not read: no caption in the annotation.
    back.read_sample(0, src.fields().without(Field::Text), &mut b, &mut fb)
        .unwrap();
    assert_eq!(fb.text, None);

    let spec = "rrc:32:scale=0.4-1,flip";
    assert_eq!(digests(src, spec), digests(back, spec));
}

#[test]
fn a_classification_pack_still_writes_version_1_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = stoker_loader::synthetic::ShapesOptions {
        count: 12,
        ..Default::default()
    };
    let folder = dir.path().join("shapes");
    stoker_loader::synthetic::shapes(&folder, &opts, |_, _| {}).expect("shapes");
    let src = open_with(&folder, &OpenOptions::default()).expect("folder");
    let out = dir.path().join("shards");
    tar::pack_tar(src.as_ref(), &out, 1 << 20, |_, _| {}).expect("pack");
    let side = std::fs::read_to_string(out.join("shard-000000.tar.idx")).unwrap();
    assert!(side.contains("\"version\":1"), "{side}");
    assert!(!side.contains("members"), "{side}");
    let back = open_with(&out, &OpenOptions::default()).expect("shards");
    assert!(back.fields().is_classification());
}

/// The samples of `back` equal those of `src`, field for field.
fn same_samples(src: &dyn Source, back: &dyn Source) {
    assert_eq!(back.len(), src.len());
    assert_eq!(back.fields(), src.fields());
    assert_eq!(back.classes(), src.classes());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut fa, mut fb) = (Annotation::default(), Annotation::default());
    for i in 0..src.len() {
        src.read_sample(i, src.fields(), &mut a, &mut fa).unwrap();
        back.read_sample(i, back.fields(), &mut b, &mut fb).unwrap();
        assert_eq!(a, b, "image {i}");
        assert_eq!(fa, fb, "fields of sample {i}");
        // A plain read gives the image alone.
        back.read(i, &mut b).unwrap();
        assert_eq!(a, b, "image {i} by read");
    }
}

#[test]
fn packed_files_carry_every_field_in_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let src = make_scenes(dir.path(), 20);
    let out = dir.path().join("scenes.stk");
    let stats = packed::pack_source(src.as_ref(), &out, |_, _| {}).expect("pack");
    assert_eq!(stats.records, 20);
    let head = std::fs::read(&out).unwrap();
    assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 2);
    for back in [
        PackedReader::open(&out).expect("open"),
        PackedReader::open_mapped(&out).expect("map"),
    ] {
        same_samples(src.as_ref(), &back);
        let names = back.keypoint_schema().map(|k| k.names.clone());
        assert_eq!(names, src.keypoint_schema().map(|k| k.names.clone()));
    }
    let back = open_with(&out, &OpenOptions::default()).expect("open");
    let spec = "rrc:32:scale=0.4-1,flip";
    assert_eq!(digests(src, spec), digests(back, spec));

    // Damage inside a record is its checksum error, named.
    let mut bytes = std::fs::read(&out).unwrap();
    bytes[200] ^= 0xff;
    let damaged = dir.path().join("damaged.stk");
    std::fs::write(&damaged, &bytes).unwrap();
    let r = PackedReader::open(&damaged).expect("the index is whole");
    let (mut buf, mut ann) = (Vec::new(), Annotation::default());
    let e = r
        .read_sample(0, r.fields(), &mut buf, &mut ann)
        .unwrap_err();
    assert!(e.to_string().contains("damaged.stk record 0"), "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}

#[test]
fn a_classification_packed_file_stays_version_1() {
    let dir = tempfile::tempdir().unwrap();
    let opts = stoker_loader::synthetic::ShapesOptions {
        count: 12,
        ..Default::default()
    };
    let folder = dir.path().join("shapes");
    stoker_loader::synthetic::shapes(&folder, &opts, |_, _| {}).expect("shapes");
    let src = open_with(&folder, &OpenOptions::default()).expect("folder");
    let out = dir.path().join("shapes.stk");
    packed::pack_source(src.as_ref(), &out, |_, _| {}).expect("pack");
    let head = std::fs::read(&out).unwrap();
    assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 1);
    assert!(head[92..124].iter().all(|&b| b == 0));
}
