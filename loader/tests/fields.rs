//! Samples with fields beyond image and class, end to end through the loader: boxes,
//! masks and keypoints follow every geometric transform exactly, batches stay
//! identical across modes and worker counts, resume is exact, and bad annotations are
//! errors naming the record (or skipped and counted).

use std::path::Path;
use std::sync::Arc;

use image::{GrayImage, Luma, Rgb, RgbImage};
use proptest::prelude::*;
use serde_json::json;
use stoker_augment::{AugmentError, Pipeline};
use stoker_loader::source::{open_with, OpenOptions};
use stoker_loader::{
    Batch, Digest, Field, Fields, Loader, LoaderConfig, LoaderError, Mode, OnError, Source,
};

const W: u32 = 64;
const H: u32 = 48;

/// The mask of sample `i`: class `1 + (x / 8 + y / 8 + i) % 5`, a checkerboard whose
/// values tell where each pixel came from.
fn mask_value(i: usize, x: u32, y: u32) -> u8 {
    1 + ((x / 8 + y / 8 + i as u32) % 5) as u8
}

/// Writes sample `i`: a PNG whose red channel is 40 times its mask value (lossless,
/// so the image and the mask can be compared after the transforms) and its mask.
fn write_sample(dir: &Path, i: usize) {
    let img = RgbImage::from_fn(W, H, |x, y| {
        Rgb([40 * mask_value(i, x, y), x as u8, y as u8])
    });
    img.save(dir.join(format!("img/{i}.png"))).expect("image");
    let mask = GrayImage::from_fn(W, H, |x, y| Luma([mask_value(i, x, y)]));
    mask.save(dir.join(format!("masks/{i}.png"))).expect("mask");
}

/// The boxes of sample `i`: one near each corner and one in the middle, classes 0-2.
fn boxes(i: usize) -> Vec<[f32; 4]> {
    let d = i as f32;
    vec![
        [1.0 + d, 2.0, 20.5, 14.0],
        [40.0, 30.0 - d, 63.0, 47.5],
        [20.0, 10.0, 44.0 + d, 38.0],
    ]
}

/// Keypoints of sample `i`: one instance per box, points (left, right, middle).
fn keypoints(i: usize) -> Vec<Vec<[f32; 3]>> {
    boxes(i)
        .iter()
        .map(|b| {
            vec![
                [b[0] + 1.0, b[1] + 1.0, 2.0],
                [b[2] - 1.0, b[1] + 1.0, 2.0],
                [(b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0, 1.0],
            ]
        })
        .collect()
}

/// A manifest of `n` samples with every field, written as a user would (json).
fn make_set(dir: &Path, n: usize) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    std::fs::create_dir_all(dir.join("masks")).unwrap();
    let mut lines = vec![json!({
        "classes": ["cat", "dog", "bird"],
        "keypoint_names": ["left_paw", "right_paw", "nose"],
    })
    .to_string()];
    for i in 0..n {
        write_sample(dir, i);
        lines.push(
            json!({
                "image": format!("img/{i}.png"),
                "label": i % 3,
                "labels": [i % 3, (i + 1) % 3],
                "text": format!("sample number {i}"),
                "boxes": boxes(i),
                "box_labels": ["cat", "dog", "bird"],
                "mask": format!("masks/{i}.png"),
                "keypoints": keypoints(i),
                "meta": {"id": i},
            })
            .to_string(),
        );
    }
    let path = dir.join("train.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn open(path: &Path) -> Arc<dyn Source> {
    open_with(path, &OpenOptions::default()).expect("open")
}

fn config(mode: Mode, workers: usize, spec: &str) -> LoaderConfig {
    LoaderConfig {
        batch_size: 4,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        seed: 7,
        shuffle: false,
        transform: Pipeline::parse(spec).expect("spec"),
        ..LoaderConfig::default()
    }
}

fn all_batches(src: Arc<dyn Source>, cfg: LoaderConfig) -> Vec<Batch> {
    let mut loader = Loader::new(src, cfg).expect("loader");
    loader.epoch(0).map(|b| b.expect("batch")).collect()
}

fn close(a: [f32; 4], b: [f32; 4]) -> bool {
    a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-3)
}

/// What a deterministic transform does to one coordinate pair, written out by hand:
/// the analytic mapping the loader must match.
struct Analytic {
    out: (f32, f32),
    map: fn(f32, f32) -> (f32, f32),
}

fn clip_box(b: [f32; 4], (w, h): (f32, f32)) -> Option<[f32; 4]> {
    let c = [
        b[0].clamp(0.0, w),
        b[1].clamp(0.0, h),
        b[2].clamp(0.0, w),
        b[3].clamp(0.0, h),
    ];
    (c[2] > c[0] && c[3] > c[1]).then_some(c)
}

fn expected_box(a: &Analytic, b: [f32; 4]) -> Option<[f32; 4]> {
    let (x1, y1) = (a.map)(b[0], b[1]);
    let (x2, y2) = (a.map)(b[2], b[3]);
    clip_box([x1.min(x2), y1.min(y2), x1.max(x2), y1.max(y2)], a.out)
}

#[test]
fn deterministic_transforms_move_boxes_keypoints_and_masks_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_set(dir.path(), 4);
    let cases: Vec<(&str, Analytic)> = vec![
        (
            "resize:32x24",
            Analytic {
                out: (32.0, 24.0),
                map: |x, y| (x / 2.0, y / 2.0),
            },
        ),
        (
            "resize:96x72",
            Analytic {
                out: (96.0, 72.0),
                map: |x, y| (x * 1.5, y * 1.5),
            },
        ),
        (
            "center:40",
            Analytic {
                out: (40.0, 40.0),
                map: |x, y| (x - 12.0, y - 4.0),
            },
        ),
        (
            "pad:5",
            Analytic {
                out: (74.0, 58.0),
                map: |x, y| (x + 5.0, y + 5.0),
            },
        ),
        (
            "flip:p=1",
            Analytic {
                out: (64.0, 48.0),
                map: |x, y| (64.0 - x, y),
            },
        ),
        (
            "pad:2,flip:p=1,center:60x40",
            // pad: +2 -> 68x52; flip: 68 - x; centre crop 60x40 at (4, 6).
            Analytic {
                out: (60.0, 40.0),
                map: |x, y| (68.0 - (x + 2.0) - 4.0, y + 2.0 - 6.0),
            },
        ),
    ];
    for (spec, a) in cases {
        let batches = all_batches(open(&path), config(Mode::Sync, 1, spec));
        let b = &batches[0];
        let f = b.fields.as_ref().expect("fields");
        let [_, oh, ow, _] = b.shape();
        assert_eq!((ow as f32, oh as f32), a.out, "{spec}: output size");
        let mirrored = spec.contains("flip");
        for (i, &index) in b.indices.iter().enumerate() {
            // Boxes: the analytic mapping, clipped; classes kept with their boxes.
            let want: Vec<([f32; 4], i64)> = boxes(index)
                .into_iter()
                .zip([0i64, 1, 2])
                .filter_map(|(bx, l)| expected_box(&a, bx).map(|m| (m, l)))
                .collect();
            let (got, labels) = f.boxes_of(i);
            assert_eq!(
                got.len(),
                want.len(),
                "{spec} sample {index}: {got:?} vs {want:?}"
            );
            for ((g, l), (w, wl)) in got.iter().zip(labels).zip(&want) {
                assert!(
                    close(*g, *w),
                    "{spec} sample {index}: box {g:?}, want {w:?}"
                );
                assert_eq!(l, wl);
            }
            // Keypoints: mapped; left and right swap under a flip.
            let k = &f.keypoints;
            let per = k.per_instance * 3;
            let inst = &k.points[i * k.max * per..];
            for (n, pts) in keypoints(index).iter().enumerate() {
                let got = &inst[n * per..(n + 1) * per];
                for (j, p) in pts.iter().enumerate() {
                    let slot = if mirrored && j < 2 { 1 - j } else { j };
                    let (x, y) = (a.map)(p[0], p[1]);
                    let inside = x >= 0.0 && y >= 0.0 && x < a.out.0 && y < a.out.1;
                    let g = &got[slot * 3..slot * 3 + 3];
                    if inside {
                        assert!(
                            (g[0] - x).abs() < 1e-3 && (g[1] - y).abs() < 1e-3 && g[2] == p[2],
                            "{spec} sample {index} point {j}: {g:?}, want ({x}, {y})"
                        );
                    } else {
                        assert_eq!(g, [0.0; 3], "{spec}: a point outside is invisible");
                    }
                }
            }
            // Masks: nearest-neighbour by pixel centres, 255 where padding shows.
            let masks = b.masks().expect("masks");
            let m = &masks[i * ow * oh..(i + 1) * ow * oh];
            let img = b.image(i);
            for y in 0..oh {
                for x in 0..ow {
                    let got = m[y * ow + x];
                    // Invert the mapping at the pixel centre (all these maps are
                    // invertible translations, scales and mirrors).
                    let (sx, sy) = invert(&a, x as f32 + 0.5, y as f32 + 0.5);
                    let want = if sx >= 0.0 && sy >= 0.0 && sx < W as f32 && sy < H as f32 {
                        mask_value(index, sx as u32, sy as u32)
                    } else {
                        255
                    };
                    assert_eq!(got, want, "{spec} sample {index} mask at ({x}, {y})");
                    // Without resampling, the image's red channel is 40x the mask.
                    if !spec.starts_with("resize") && want != 255 {
                        assert_eq!(
                            img[(y * ow + x) * 3],
                            40 * want,
                            "{spec}: image and mask agree"
                        );
                    }
                }
            }
        }
    }
}

/// Inverts an [`Analytic`] map numerically (the maps are affine and axis-aligned).
fn invert(a: &Analytic, x: f32, y: f32) -> (f32, f32) {
    let (ox, oy) = (a.map)(0.0, 0.0);
    let (xx, _) = (a.map)(1.0, 0.0);
    let (_, yy) = (a.map)(0.0, 1.0);
    ((x - ox) / (xx - ox), (y - oy) / (yy - oy))
}

fn digests(src: Arc<dyn Source>, cfg: LoaderConfig, epochs: u64) -> Vec<String> {
    let mut loader = Loader::new(src, cfg).expect("loader");
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            out.push(d.hex());
        }
    }
    out
}

#[test]
fn fields_are_identical_across_modes_and_worker_counts_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_set(dir.path(), 10);
    let spec = "rrc:40:scale=0.3-1,flip,erase:p=0.5";
    let shuffled = |mode, workers| LoaderConfig {
        shuffle: true,
        ..config(mode, workers, spec)
    };
    let reference = digests(open(&path), shuffled(Mode::Sync, 1), 2);
    assert_eq!(reference.len(), 2 * 3);
    for workers in [1, 2, 4] {
        assert_eq!(
            digests(open(&path), shuffled(Mode::Async, workers), 2),
            reference,
            "async with {workers} workers"
        );
    }
    // The fields are part of the digest: leaving out the boxes changes it.
    let fewer = LoaderConfig {
        fields: Some(Fields::of(&[Field::Image, Field::Mask, Field::Text])),
        ..shuffled(Mode::Sync, 1)
    };
    assert_ne!(digests(open(&path), fewer, 1), reference[..3]);

    // Resume mid-epoch: the rest of the epoch is the same batches.
    let mut loader = Loader::new(open(&path), shuffled(Mode::Async, 2)).unwrap();
    let mut epoch = loader.epoch(1);
    epoch.next().unwrap().unwrap();
    let state = epoch.state();
    drop(epoch);
    let mut again = Loader::new(open(&path), shuffled(Mode::Async, 3)).unwrap();
    let rest: Vec<String> = again
        .resume(&state)
        .unwrap()
        .map(|b| {
            let mut d = Digest::new();
            d.update(&b.unwrap());
            d.hex()
        })
        .collect();
    assert_eq!(rest, reference[4..], "resumed batches");
}

/// The decoded cache keeps each sample's fields with its image: boxes, masks,
/// keypoints, labels and captions come out the same, over epochs, in both modes,
/// whether the cache holds every sample or a few.
#[test]
fn fields_are_identical_with_the_decoded_cache() {
    use stoker_loader::DecodedCacheSize;
    let dir = tempfile::tempdir().unwrap();
    let path = make_set(dir.path(), 10);
    let spec = "rrc:40:scale=0.3-1,flip,erase:p=0.5";
    let cfg = |mode, workers, cache| LoaderConfig {
        shuffle: true,
        decoded_cache: cache,
        last_epoch: Some(2),
        ..config(mode, workers, spec)
    };
    let reference = digests(open(&path), cfg(Mode::Sync, 1, None), 3);
    let few = DecodedCacheSize::Bytes(3 * (W * H * 3) as u64 + 4000);
    for (mode, workers) in [(Mode::Sync, 1), (Mode::Async, 1), (Mode::Async, 2)] {
        for cache in [DecodedCacheSize::Auto, few] {
            let mut loader = Loader::new(open(&path), cfg(mode, workers, Some(cache))).unwrap();
            let mut got = Vec::new();
            for e in 0..3 {
                for b in loader.epoch(e) {
                    let mut d = Digest::new();
                    d.update(&b.expect("batch"));
                    got.push(d.hex());
                }
            }
            assert_eq!(got, reference, "{mode} x{workers} {cache}");
            let m = loader.metrics();
            assert!(m.decoded_cache_hits > 0, "{mode} x{workers} {cache}: {m:?}");
            if cache == few {
                assert!(m.decoded_cache_no_room > 0, "{mode} {cache}: {m:?}");
            }
        }
    }
}

#[test]
fn batches_carry_every_field_with_its_shape() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_set(dir.path(), 5);
    let src = open(&path);
    let want = Fields::of(&[
        Field::Image,
        Field::Class,
        Field::Labels,
        Field::Text,
        Field::Boxes,
        Field::Mask,
        Field::Keypoints,
        Field::Raw,
    ]);
    assert_eq!(src.fields(), want);
    assert_eq!(src.classes(), ["cat", "dog", "bird"]);
    let batches = all_batches(src, config(Mode::Async, 2, ""));
    let b = &batches[1];
    let f = b.fields.as_ref().unwrap();
    assert_eq!(b.indices, [4]);
    assert_eq!(b.labels, [1]);
    assert_eq!(f.labels, [vec![1, 2]]);
    assert_eq!(f.labels_k_hot(3), [0, 1, 1]);
    assert_eq!(f.text, ["sample number 4"]);
    assert_eq!(f.raw, [br#"{"id":4}"#.to_vec()]);
    assert_eq!(f.boxes.count, [3]);
    assert_eq!(f.keypoints.per_instance, 3);
    assert_eq!(b.masks().unwrap().len(), 64 * 48);
    // Picking fields: the others are not carried, nor read.
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Boxes])),
        ..config(Mode::Sync, 1, "")
    };
    let b = &all_batches(open(&path), cfg)[0];
    let f = b.fields.as_ref().unwrap();
    assert!(b.masks().is_none() && f.text.is_empty() && f.boxes.count == [3, 3, 3, 3]);
    // A field the data set does not have is a configuration error that lists them.
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Image])),
        ..config(Mode::Sync, 1, "")
    };
    let b = &all_batches(open(&path), cfg)[0];
    assert!(b.fields.is_none(), "image alone is classification");
    let plain = dir.path().join("plain.jsonl");
    std::fs::write(
        &plain,
        json!({"image": "img/0.png", "label": 0}).to_string(),
    )
    .unwrap();
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Mask])),
        ..config(Mode::Sync, 1, "")
    };
    let e = Loader::new(open(&plain), cfg)
        .err()
        .expect("no masks")
        .to_string();
    assert!(
        e.contains("no field 'mask'") && e.contains("image,label"),
        "{e}"
    );
}

#[test]
fn a_manifest_with_a_byte_order_mark_and_only_empty_boxes_keeps_its_boxes_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("img")).unwrap();
    std::fs::create_dir_all(d.join("masks")).unwrap();
    let mut text = String::from("\u{feff}");
    for i in 0..4 {
        write_sample(d, i);
        // Empty keypoint lists with no header say nothing of an instance's points:
        // no keypoint field, and no error for the lack of a count.
        let line = json!({"image": format!("img/{i}.png"), "boxes": [], "box_labels": [],
                          "keypoints": []});
        text.push_str(&format!("{line}\n"));
    }
    let path = d.join("empty.jsonl");
    std::fs::write(&path, text).unwrap();
    let src = open(&path);
    // Every image without an object is still a detection set: batches of zero boxes,
    // not plain (image, label) pairs.
    assert!(src.fields().contains(Field::Boxes), "{:?}", src.fields());
    assert!(
        !src.fields().contains(Field::Keypoints),
        "{:?}",
        src.fields()
    );
    let b = &all_batches(src, config(Mode::Sync, 1, ""))[0];
    let f = b.fields.as_ref().expect("a batch with fields");
    assert_eq!(f.boxes.count, [0, 0, 0, 0]);
}

#[test]
fn an_empty_box_list_needs_no_box_labels_and_boxes_still_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("img")).unwrap();
    std::fs::create_dir_all(d.join("masks")).unwrap();
    let mut lines = vec![json!({"image": "img/0.png", "boxes": boxes(0),
                                "box_labels": ["cat", "dog", "bird"]})
    .to_string()];
    write_sample(d, 0);
    for i in 1..4 {
        write_sample(d, i);
        // An image with no objects: no classes to give.
        lines.push(json!({"image": format!("img/{i}.png"), "boxes": []}).to_string());
    }
    let path = d.join("empty.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let src = open(&path);
    assert!(src.fields().contains(Field::Boxes), "{:?}", src.fields());
    let b = &all_batches(src, config(Mode::Sync, 1, ""))[0];
    let f = b.fields.as_ref().expect("a batch with fields");
    assert_eq!(f.boxes.count, [3, 0, 0, 0]);
    // Boxes with no classes for them are still refused.
    bad_line(
        d,
        json!({"image": "img/3.png", "boxes": [[0, 0, 10, 10]]}),
        "boxes without \"box_labels\"",
    );
}

/// COCO's column-major run lengths (background first) of the `[x0, x1) x [y0, y1)`
/// rectangle of a `w` x `h` image, by definition.
fn rect_runs(w: u32, h: u32, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> Vec<u32> {
    let mut counts = Vec::new();
    let (mut cur, mut run) = (false, 0);
    for x in 0..w {
        for y in 0..h {
            let inside = (x0..x1).contains(&x) && (y0..y1).contains(&y);
            if inside != cur {
                counts.push(run);
                (cur, run) = (inside, 0);
            }
            run += 1;
        }
    }
    counts.push(run);
    counts
}

#[test]
fn a_manifest_gives_instance_masks_as_pngs_or_rle_and_they_follow_a_flip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("img")).unwrap();
    std::fs::create_dir_all(d.join("masks")).unwrap();
    // A PNG instance mask marks its object 255 (nonzero is the instance).
    let png = GrayImage::from_fn(W, H, |x, y| {
        Luma([if (4..20).contains(&x) && (6..30).contains(&y) {
            255
        } else {
            0
        }])
    });
    png.save(d.join("masks/0_0.png")).unwrap();
    let mut lines = Vec::new();
    for i in 0..4 {
        write_sample(d, i);
    }
    lines.push(json!({
        "image": "img/0.png",
        "boxes": [[4, 6, 20, 30], [30, 10, 50, 40]],
        "box_labels": ["cat", "dog"],
        "masks": ["masks/0_0.png", {"size": [H, W], "counts": rect_runs(W, H, (30, 50), (10, 40))}],
    }));
    lines.push(json!({"image": "img/1.png", "boxes": [], "box_labels": [], "masks": []}));
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let path = d.join("inst.jsonl");
    std::fs::write(&path, text.join("\n")).unwrap();
    let src = open(&path);
    assert!(src.fields().contains(Field::Masks), "{:?}", src.fields());
    let (w, h) = (W as usize, H as usize);
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = LoaderConfig {
            fields: Some(Fields::of(&[Field::Boxes, Field::Masks])),
            ..config(mode, 2, "flip:p=1")
        };
        let b = &all_batches(open(&path), cfg)[0];
        let f = b.fields.as_ref().unwrap();
        assert_eq!(
            (f.boxes.count.as_slice(), f.boxes.max),
            ([2, 0].as_slice(), 2)
        );
        let all = b.instance_masks().unwrap();
        assert_eq!(all.len(), 2 * 2 * w * h);
        assert!(all[2 * w * h..].iter().all(|&v| v == 0), "{mode}: padding");
        for (j, (xs, ys)) in [((4, 20), (6, 30)), ((30, 50), (10, 40))]
            .iter()
            .enumerate()
        {
            for y in 0..h {
                for x in 0..w {
                    // Mirrored: the source pixel is w - 1 - x.
                    let sx = w - 1 - x;
                    let want = u8::from((xs.0..xs.1).contains(&sx) && (ys.0..ys.1).contains(&y));
                    assert_eq!(
                        all[j * w * h + y * w + x],
                        want,
                        "{mode}: mask {j} at ({x}, {y})"
                    );
                }
            }
        }
    }
    // One mask per box, and masks of the image's size.
    bad_line(
        d,
        json!({"image": "img/3.png", "boxes": [[0, 0, 10, 10]], "box_labels": [0],
               "masks": []}),
        "1 boxes but 0 masks",
    );
}

#[test]
fn bad_instance_masks_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("img")).unwrap();
    std::fs::create_dir_all(d.join("masks")).unwrap();
    write_sample(d, 0);
    // A good line first: the loader takes the batch shape from it.
    let good = json!({"image": "img/0.png", "boxes": [], "masks": []});
    let cases = [
        (
            json!({"size": [H, W], "counts": [5]}),
            "RLE counts add up to 5 pixels",
        ),
        (
            json!({"size": [10, 10], "counts": [100]}),
            "instance mask 0 is 10x10 but its image is 64x48",
        ),
        (json!(7), "neither a PNG's path nor an RLE object"),
        (json!("masks/nothing.png"), "nothing.png"),
    ];
    for (mask, want) in cases {
        let line = json!({"image": "img/0.png", "boxes": [[0, 0, 10, 10]], "box_labels": [0],
                          "masks": [mask]});
        let path = d.join("bad.jsonl");
        std::fs::write(&path, format!("{good}\n{line}\n")).unwrap();
        let cfg = LoaderConfig {
            fields: Some(Fields::of(&[Field::Boxes, Field::Masks])),
            ..config(Mode::Sync, 1, "")
        };
        let err = Loader::new(open(&path), cfg)
            .unwrap()
            .epoch(0)
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("{want}: no error"));
        let msg = stoker_loader::report::one_line(&err);
        assert!(
            msg.contains("bad.jsonl line 2") && msg.contains(want),
            "{want}: {msg}"
        );
    }
}

/// One bad line among good ones: `fail` names the manifest line and the problem,
/// `skip` leaves that sample out and counts it.
fn bad_line(dir: &Path, line: serde_json::Value, want: &str) {
    let mut lines = vec![json!({"classes": ["cat", "dog", "bird"]}).to_string()];
    for i in 0..3 {
        lines.push(
            json!({"image": format!("img/{i}.png"), "boxes": boxes(i),
                   "box_labels": [0, 1, 2], "mask": format!("masks/{i}.png")})
            .to_string(),
        );
    }
    lines.push(line.to_string());
    let path = dir.join("bad.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    for mode in [Mode::Sync, Mode::Async] {
        let mut loader = Loader::new(open(&path), config(mode, 2, "flip")).expect("loader");
        let err = loader
            .epoch(0)
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("{want}: no error"));
        let msg = err.to_string();
        assert!(matches!(err, LoaderError::Sample { index: 3, .. }), "{msg}");
        assert!(
            msg.contains("bad.jsonl line 5") && msg.contains(want),
            "{want}: {msg}"
        );
        let cfg = LoaderConfig {
            on_error: OnError::Skip,
            ..config(mode, 2, "flip")
        };
        let mut loader = Loader::new(open(&path), cfg).expect("loader");
        let (mut n, mut skipped) = (0, 0);
        for b in loader.epoch(0) {
            let b = b.expect("skip mode");
            n += b.len();
            skipped += b.skipped;
        }
        assert_eq!((n, skipped), (3, 1), "{want}");
    }
}

#[test]
fn bad_annotations_name_the_record_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    make_set(dir.path(), 4);
    let base = |extra: serde_json::Value| {
        let mut v =
            json!({"image": "img/3.png", "mask": "masks/3.png", "boxes": [], "box_labels": []});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let d = dir.path();
    bad_line(
        d,
        base(json!({"boxes": [[0, 0, 70, 10]], "box_labels": [0]})),
        "outside the 64x48 image",
    );
    bad_line(
        d,
        base(json!({"boxes": [[-2, 0, 10, 10]], "box_labels": [0]})),
        "negative",
    );
    bad_line(
        d,
        base(json!({"boxes": [[20, 0, 10, 10]], "box_labels": [0]})),
        "x2 < x1",
    );
    bad_line(
        d,
        base(json!({"boxes": [[0, 0, 10, 10]], "box_labels": ["fish"]})),
        "unknown class 'fish'",
    );
    bad_line(
        d,
        base(json!({"boxes": [[0, 0, 10, 10]], "box_labels": [7]})),
        "class 7 is out of range",
    );
    bad_line(
        d,
        base(json!({"boxes": [[0, 0, 10]], "box_labels": [0]})),
        "not a list of 4 numbers",
    );
    bad_line(d, base(json!({"mask": "masks/none.png"})), "none.png");
    std::fs::write(d.join("masks/small.png"), {
        let mut b = Vec::new();
        GrayImage::new(8, 8)
            .write_to(&mut std::io::Cursor::new(&mut b), image::ImageFormat::Png)
            .unwrap();
        b
    })
    .unwrap();
    bad_line(
        d,
        base(json!({"mask": "masks/small.png"})),
        "the mask is 8x8 but its image is 64x48",
    );
    // A mask that is not a PNG: the decoder's error, kept as the sample error's cause.
    std::fs::write(d.join("masks/junk.png"), b"not a png at all").unwrap();
    bad_line(
        d,
        base(json!({"mask": "masks/junk.png"})),
        "bad mask: not a PNG",
    );
    let mut loader = Loader::new(open(&d.join("bad.jsonl")), config(Mode::Sync, 2, "")).unwrap();
    let err = loader.epoch(0).find_map(Result::err).unwrap();
    assert!(
        matches!(err.decode_error(), Some(AugmentError::Mask(_))),
        "{err:?}"
    );
    // A line that is not JSON at all (NaN is not JSON either).
    bad_line_text(
        d,
        r#"{"image": "img/3.png", "boxes": [[NaN, 0, 1, 1]]}"#,
        "expected value",
    );
    bad_line_text(d, "not json", "expected ident");
}

fn bad_line_text(dir: &Path, text: &str, want: &str) {
    let mut lines = vec![json!({"classes": ["cat"]}).to_string()];
    for i in 0..3 {
        lines.push(
            json!({"image": format!("img/{i}.png"), "boxes": [], "box_labels": []}).to_string(),
        );
    }
    lines.push(text.to_string());
    let path = dir.join("badtext.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let mut loader = Loader::new(open(&path), config(Mode::Sync, 1, "")).expect("loader");
    let msg = loader
        .epoch(0)
        .find_map(Result::err)
        .expect("an error")
        .to_string();
    assert!(
        msg.contains("badtext.jsonl line 5") && msg.contains(want),
        "{msg}"
    );
}

/// A random pipeline of geometric and erasing steps.
fn random_spec() -> impl Strategy<Value = String> {
    let step = prop_oneof![
        (8usize..80, 8usize..80).prop_map(|(w, h)| format!("resize:{w}x{h}")),
        (8usize..80).prop_map(|s| format!("resize:{s}")),
        (8usize..80).prop_map(|s| format!("center:{s}")),
        (8usize..64, 0usize..6).prop_map(|(s, p)| format!("crop:{s}:pad={p}")),
        (8usize..64).prop_map(|s| format!("rrc:{s}:scale=0.05-1")),
        (1usize..6).prop_map(|p| format!("pad:{p}")),
        Just("flip".to_string()),
        Just("erase:p=1".to_string()),
        Just("cutout:9".to_string()),
    ];
    prop::collection::vec(step, 1..5).prop_map(|v| v.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_pipelines_keep_boxes_inside_and_mask_values_from_the_input(
        spec in random_spec(), seed in 0u64..1000,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = make_set(dir.path(), 3);
        let cfg = LoaderConfig { seed, ..config(Mode::Sync, 1, &spec) };
        let Ok(mut loader) = Loader::new(open(&path), cfg) else {
            // A pipeline may refuse the input size (an image larger than its limit);
            // that is not a field question.
            return Ok(());
        };
        for b in loader.epoch(0) {
            let b = b.map_err(|e| TestCaseError::fail(e.to_string()))?;
            let [_, h, w, _] = b.shape();
            let f = b.fields.as_ref().unwrap();
            for i in 0..b.len() {
                for bx in f.boxes_of(i).0 {
                    prop_assert!(bx[0] >= 0.0 && bx[1] >= 0.0, "{spec}: {bx:?}");
                    prop_assert!(bx[2] <= w as f32 && bx[3] <= h as f32, "{spec}: {bx:?} in {w}x{h}");
                    prop_assert!(bx[2] > bx[0] && bx[3] > bx[1], "{spec}: {bx:?}");
                }
            }
            for &v in b.masks().unwrap() {
                prop_assert!((1..=5).contains(&v) || v == 255, "{spec}: mask value {v}");
            }
        }
    }
}
