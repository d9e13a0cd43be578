//! Packs of resized or raw pixels (`pack --max-side N --encoding raw|jpeg:Q|png|keep`):
//! sizes and pixels against PIL's `Image.thumbnail` (`tests/data/pil_thumbnail.json`,
//! made by `benches/peers/thumbnail_reference.py`), version 3 files of a shape per
//! record and their damage, `.ppm` tar members, fields that follow the resize, and the
//! default pack's bytes unchanged.

use std::path::Path;
use std::sync::Arc;

use image::ImageEncoder;
use stoker_augment::Pipeline;
use stoker_loader::sample::MaskData;
use stoker_loader::source::pack_image::thumbnail_size;
use stoker_loader::source::{
    open_with, packed, tar, Encoding, OpenOptions, PackOptions, PackedReader, PackedWriter,
    RecordKind,
};
use stoker_loader::synthetic::{scenes, ScenesOptions};
use stoker_loader::{Annotation, Digest, Loader, LoaderConfig, Source};

const REFERENCE: &str = include_str!("data/pil_thumbnail.json");

fn reference() -> serde_json::Value {
    serde_json::from_str(REFERENCE).expect("reference json")
}

fn png(w: usize, h: usize, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(data, w as u32, h as u32, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

fn numbers(v: &serde_json::Value) -> Vec<u8> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u8)
        .collect()
}

/// An image folder of the reference images as PNGs (lossless: the pixels PIL read),
/// one class each so that the folder keeps their order.
fn reference_folder(dir: &Path) -> Vec<serde_json::Value> {
    let r = reference();
    let images = r["images"].as_array().unwrap().clone();
    for (i, img) in images.iter().enumerate() {
        let (w, h) = (img["w"].as_u64().unwrap(), img["h"].as_u64().unwrap());
        let class = dir.join(format!("c{i}"));
        std::fs::create_dir_all(&class).unwrap();
        let bytes = png(w as usize, h as usize, &numbers(&img["data"]));
        std::fs::write(class.join("img.png"), bytes).unwrap();
    }
    images
}

fn opts(max_side: Option<u32>, encoding: &str) -> PackOptions {
    PackOptions::new(max_side, encoding.parse().unwrap()).unwrap()
}

#[test]
fn thumbnail_sizes_equal_pils() {
    let r = reference();
    for row in r["sizes"].as_array().unwrap() {
        let v: Vec<usize> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let (w, h, n, tw, th) = (v[0], v[1], v[2], v[3], v[4]);
        let want = ((tw, th) != (w, h)).then_some((tw, th));
        assert_eq!(thumbnail_size(w, h, n), want, "{w}x{h} to {n}");
    }
}

#[test]
fn raw_packs_hold_pils_thumbnails_with_a_shape_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("imgs");
    let images = reference_folder(&folder);
    let tol = reference()["max_abs_diff"].as_u64().unwrap() as i32;
    let src = open_with(&folder, &OpenOptions::default()).unwrap();
    // One max side for all: each image's own `n` is 32 or 48; pack each alone.
    for (i, img) in images.iter().enumerate() {
        let n = img["n"].as_u64().unwrap() as u32;
        let out = dir.path().join(format!("raw{i}.stk"));
        packed::pack_source_with(src.as_ref(), &out, &opts(Some(n), "raw"), |_, _| {})
            .expect("pack");
        let head = std::fs::read(&out).unwrap();
        assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 3);
        let back = PackedReader::open(&out).unwrap();
        assert!(back.is_shaped());
        let mut buf = Vec::new();
        let kind = back.read(i, &mut buf).unwrap();
        let (tw, th) = (
            img["thumb_w"].as_u64().unwrap(),
            img["thumb_h"].as_u64().unwrap(),
        );
        assert_eq!(
            kind,
            RecordKind::Raw {
                width: tw as u32,
                height: th as u32,
                channels: 3
            },
            "image {i}"
        );
        let want = numbers(&img["thumb"]);
        assert_eq!(buf.len(), want.len());
        let worst = buf
            .iter()
            .zip(&want)
            .map(|(&a, &b)| (a as i32 - b as i32).abs())
            .max()
            .unwrap();
        assert!(worst <= tol, "image {i}: off by {worst} from PIL");
    }
}

/// Batches of `src` in order, as digests.
fn digests(src: Arc<dyn Source>, spec: &str) -> Vec<String> {
    let cfg = LoaderConfig {
        batch_size: 4,
        shuffle: false,
        seed: 3,
        transform: Pipeline::parse(spec).expect("spec"),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, cfg).expect("loader");
    loader
        .epoch(0)
        .map(|b| {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            d.hex()
        })
        .collect()
}

fn shapes(dir: &Path, count: usize) -> Arc<dyn Source> {
    let folder = dir.join("shapes");
    let o = stoker_loader::synthetic::ShapesOptions {
        count,
        size: 72,
        classes: 3,
        ..Default::default()
    };
    stoker_loader::synthetic::shapes(&folder, &o, |_, _| {}).expect("shapes");
    open_with(&folder, &OpenOptions::default()).unwrap()
}

#[test]
fn raw_and_png_packs_of_one_size_give_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path(), 12);
    let (raw, png, jpeg) = (
        dir.path().join("raw.stk"),
        dir.path().join("png.stk"),
        dir.path().join("jpeg.stk"),
    );
    packed::pack_source_with(src.as_ref(), &raw, &opts(Some(40), "raw"), |_, _| {}).unwrap();
    packed::pack_source_with(src.as_ref(), &png, &opts(Some(40), "png"), |_, _| {}).unwrap();
    packed::pack_source_with(src.as_ref(), &jpeg, &opts(Some(40), "jpeg:75"), |_, _| {}).unwrap();
    let raw = open_with(&raw, &OpenOptions::default()).unwrap();
    let png = open_with(&png, &OpenOptions::default()).unwrap();
    let jpeg = open_with(&jpeg, &OpenOptions::default()).unwrap();
    let mut buf = Vec::new();
    assert_eq!(png.read(0, &mut buf).unwrap(), RecordKind::Encoded);
    assert!(buf.starts_with(b"\x89PNG"));
    assert_eq!(jpeg.read(0, &mut buf).unwrap(), RecordKind::Encoded);
    assert!(buf.starts_with(&[0xff, 0xd8, 0xff]));
    assert_eq!(
        stoker_augment::decode::probe(&buf).unwrap(),
        (40, 40),
        "72x72 to 40"
    );
    // PNG is lossless: decoded, it is the raw record's pixels, so the batches agree.
    let spec = "rrc:24,flip";
    assert_eq!(digests(raw.clone(), spec), digests(png, spec));
    assert_eq!(raw.len(), 12);
    assert_eq!(raw.classes(), src.classes());
    for i in 0..12 {
        assert_eq!(raw.label(i), src.label(i));
    }
}

#[test]
fn keep_copies_images_that_fit_and_re_encodes_those_that_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path(), 4);
    let out = dir.path().join("keep.stk");
    // 72 fits 100: every record's bytes as they were, in a version 1 file.
    packed::pack_source_with(src.as_ref(), &out, &opts(Some(100), "keep"), |_, _| {}).unwrap();
    let back = PackedReader::open(&out).unwrap();
    assert_eq!(back.version(), 1);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..4 {
        src.read(i, &mut a).unwrap();
        back.read(i, &mut b).unwrap();
        assert_eq!(a, b, "record {i}");
    }
    // 72 exceeds 30: a JPEG again, 30x30.
    let out = dir.path().join("keep30.stk");
    packed::pack_source_with(src.as_ref(), &out, &opts(Some(30), "keep"), |_, _| {}).unwrap();
    let back = PackedReader::open(&out).unwrap();
    back.read(0, &mut b).unwrap();
    assert!(b.starts_with(&[0xff, 0xd8, 0xff]));
    assert_eq!(stoker_augment::decode::probe(&b).unwrap(), (30, 30));
}

#[test]
fn the_default_pack_is_the_record_bytes_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path(), 6);
    let (a, b, c) = (
        dir.path().join("a.stk"),
        dir.path().join("b.stk"),
        dir.path().join("c.stk"),
    );
    packed::pack_source(src.as_ref(), &a, |_, _| {}).unwrap();
    packed::pack_source_with(src.as_ref(), &b, &PackOptions::default(), |_, _| {}).unwrap();
    // The old way: every record's bytes appended as they are.
    let mut w = PackedWriter::create(&c, RecordKind::Encoded, src.classes()).unwrap();
    let mut buf = Vec::new();
    for i in 0..src.len() {
        src.read(i, &mut buf).unwrap();
        w.append(&buf, src.label(i)).unwrap();
    }
    w.finish().unwrap();
    let old = std::fs::read(&c).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), old);
    assert_eq!(std::fs::read(&b).unwrap(), old);
    assert_eq!(PackOptions::default().encoding, Encoding::Keep);
}

/// Rewrites the checksums a change of record `i`'s bytes invalidated (the record's in
/// its index entry, the index's and the header's), so that only the change remains.
fn reseal(bytes: &mut [u8], i: usize) {
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let count = u64_at(bytes, 16) as usize;
    let index_at = u64_at(bytes, 80) as usize;
    let entry = index_at + i * 24;
    let (off, len) = (
        u64_at(bytes, entry) as usize,
        u64_at(bytes, entry + 8) as usize,
    );
    let crc = crc32fast::hash(&bytes[off..off + len]);
    bytes[entry + 20..entry + 24].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32fast::hash(&bytes[index_at..index_at + count * 24]);
    bytes[88..92].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..124]);
    bytes[124..128].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_raw_record_whose_size_does_not_match_its_shape_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path(), 3);
    let out = dir.path().join("raw.stk");
    packed::pack_source_with(src.as_ref(), &out, &opts(Some(20), "raw"), |_, _| {}).unwrap();
    let mut bytes = std::fs::read(&out).unwrap();
    let entry = u64::from_le_bytes(bytes[80..88].try_into().unwrap()) as usize + 24;
    let rec = u64::from_le_bytes(bytes[entry..entry + 8].try_into().unwrap()) as usize;
    // Record 1 says it is 21 pixels wide; it holds 20x20x3.
    bytes[rec..rec + 4].copy_from_slice(&21u32.to_le_bytes());
    reseal(&mut bytes, 1);
    let damaged = dir.path().join("damaged.stk");
    std::fs::write(&damaged, &bytes).unwrap();
    let r = PackedReader::open(&damaged).expect("the index is whole");
    let mut buf = Vec::new();
    r.read(0, &mut buf).expect("record 0 is whole");
    let e = r.read(1, &mut buf).unwrap_err().to_string();
    assert!(e.contains("damaged.stk record 1"), "{e}");
    assert!(
        e.contains("it holds 1200 bytes of pixels, its shape 21x20x3 needs 1260"),
        "{e}"
    );
    // The loader reports it as that sample's error, not a panic.
    let mut loader = Loader::new(
        open_with(&damaged, &OpenOptions::default()).unwrap(),
        LoaderConfig {
            batch_size: 3,
            shuffle: false,
            transform: Pipeline::parse("resize:16").unwrap(),
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let err = loader.epoch(0).next().unwrap().unwrap_err().to_string();
    assert!(err.contains("record 1"), "{err}");
}

#[test]
fn raw_tar_shards_hold_ppm_members_read_without_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let src = shapes(dir.path(), 5);
    let shards = dir.path().join("shards");
    tar::pack_tar_with(
        src.as_ref(),
        &shards,
        1 << 20,
        &opts(Some(33), "raw"),
        |_, _| {},
    )
    .unwrap();
    let file = std::fs::File::open(shards.join("shard-000000.tar")).unwrap();
    let mut names = Vec::new();
    for e in ::tar::Archive::new(file).entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".ppm") {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut b).unwrap();
            assert!(b.starts_with(b"P6\n33 33\n255\n"), "{name}");
            assert_eq!(b.len(), 13 + 33 * 33 * 3);
        }
        names.push(name);
    }
    assert!(names.contains(&"00000000.ppm".to_string()), "{names:?}");
    let back = open_with(&shards, &OpenOptions::default()).unwrap();
    let packed_raw = dir.path().join("raw.stk");
    packed::pack_source_with(src.as_ref(), &packed_raw, &opts(Some(33), "raw"), |_, _| {}).unwrap();
    let packed_raw = open_with(&packed_raw, &OpenOptions::default()).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..5 {
        let k = back.read(i, &mut a).unwrap();
        assert_eq!(
            k,
            RecordKind::Raw {
                width: 33,
                height: 33,
                channels: 3
            }
        );
        assert_eq!(packed_raw.read(i, &mut b).unwrap(), k);
        assert_eq!(a, b, "sample {i}: the same pixels as the packed file's");
    }
    let spec = "rrc:16";
    assert_eq!(digests(back, spec), digests(packed_raw, spec));
}

fn scenes_source(dir: &Path) -> Arc<dyn Source> {
    let o = ScenesOptions {
        count: 6,
        width: 48,
        height: 40,
        max_shapes: 3,
        classes: 5,
        seed: 7,
    };
    scenes(&dir.join("scenes"), &o, |_, _| {}).expect("scenes");
    open_with(dir.join("scenes/train.jsonl"), &OpenOptions::default()).unwrap()
}

fn mask_of(ann: &Annotation) -> (usize, usize, Vec<u8>) {
    match ann.mask.as_ref().expect("a mask") {
        MaskData::Raw {
            width,
            height,
            data,
        } => (*width, *height, data.clone()),
        MaskData::Png(bytes) => {
            let mut data = Vec::new();
            let (w, h) = stoker_augment::mask::decode_mask(bytes, &mut data, 1 << 24).unwrap();
            (w, h, data)
        }
    }
}

#[test]
fn fields_follow_the_resize_in_packed_files_and_tar_shards() {
    let dir = tempfile::tempdir().unwrap();
    let src = scenes_source(dir.path());
    assert!(src.fields().contains(stoker_loader::Field::Boxes));
    let file = dir.path().join("scenes.stk");
    packed::pack_source_with(src.as_ref(), &file, &opts(Some(24), "raw"), |_, _| {}).unwrap();
    let shards = dir.path().join("shards");
    tar::pack_tar_with(
        src.as_ref(),
        &shards,
        1 << 20,
        &opts(Some(24), "png"),
        |_, _| {},
    )
    .unwrap();
    let head = std::fs::read(&file).unwrap();
    assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 3);
    // 48x40 to 24: 24x20, half in x and in y.
    for back in [
        open_with(&file, &OpenOptions::default()).unwrap(),
        open_with(&shards, &OpenOptions::default()).unwrap(),
    ] {
        assert_eq!(back.fields(), src.fields());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (mut fa, mut fb) = (Annotation::default(), Annotation::default());
        let mut boxes = 0;
        for i in 0..src.len() {
            src.read_sample(i, src.fields(), &mut a, &mut fa).unwrap();
            let kind = back.read_sample(i, back.fields(), &mut b, &mut fb).unwrap();
            match kind {
                RecordKind::Raw { width, height, .. } => assert_eq!((width, height), (24, 20)),
                RecordKind::Encoded => {
                    assert_eq!(stoker_augment::decode::probe(&b).unwrap(), (24, 20))
                }
            }
            let half: Vec<[f32; 4]> = fa
                .boxes
                .iter()
                .map(|b| [b[0] * 0.5, b[1] * 0.5, b[2] * 0.5, b[3] * 0.5])
                .collect();
            assert_eq!(fb.boxes, half, "sample {i}");
            assert_eq!(fb.box_labels, fa.box_labels);
            boxes += fb.boxes.len();
            let kp: Vec<f32> = fa
                .keypoints
                .chunks(3)
                .flat_map(|p| [p[0] * 0.5, p[1] * 0.5, p[2]])
                .collect();
            assert_eq!(fb.keypoints, kp, "sample {i}");
            let (mw, mh, m) = mask_of(&fa);
            assert_eq!((mw, mh), (48, 40));
            // Nearest: each new pixel is the old one under its centre, (2x+1, 2y+1).
            let want: Vec<u8> = (0..20)
                .flat_map(|y| (0..24).map(move |x| (x, y)))
                .map(|(x, y)| m[(2 * y + 1) * 48 + 2 * x + 1])
                .collect();
            assert_eq!(mask_of(&fb), (24, 20, want), "mask of sample {i}");
        }
        assert!(boxes > 0, "the scenes have boxes");
    }
    let back = open_with(&file, &OpenOptions::default()).unwrap();
    let cfg = LoaderConfig {
        batch_size: 3,
        shuffle: false,
        fields: Some(src.fields()),
        transform: Pipeline::parse("rrc:16,flip").unwrap(),
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(back, cfg).unwrap();
    let n: usize = loader.epoch(0).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 6);
}
