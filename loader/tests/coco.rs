//! COCO annotation files end to end: files written by Python's `json` (as the tools
//! that make COCO files write them, `NaN` included) beside PNGs written by the image
//! crate. Instances (boxes, contiguous classes, crowd, polygons, RLE lists and
//! compressed strings, overlaps), person keypoints (left/right swap under a flip,
//! instances dropped with their boxes), fields through resize and flip against the
//! analytic mapping, every bad input under `on_error = fail` and `skip`, the errors
//! of opening, and the same set read from S3 (moto).

#[cfg(feature = "remote")]
use crate::s3_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use image::{Rgb, RgbImage};
use serde_json::{json, Value};
use stoker_augment::Pipeline;
use stoker_loader::source::{open_with, OpenOptions};
use stoker_loader::{
    Batch, Digest, Field, Fields, Loader, LoaderConfig, LoaderError, Mode, OnError, Source,
};

/// Writes `coco` to `path` with Python's `json.dump`. In `coco`, the string `"NaN"`
/// stands for a NaN number and `{"rle_string": [counts]}` for the counts encoded as
/// pycocotools' `rleToString` does (written out below in Python, independently of the
/// loader's decoder).
fn write_coco(path: &Path, coco: &Value) {
    const SCRIPT: &str = r#"
import json, sys

def rle_string(cnts):
    out = []
    for i, x in enumerate(cnts):
        if i > 2:
            x -= cnts[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)

def fix(v):
    if isinstance(v, dict):
        if set(v) == {"rle_string"}:
            return rle_string(v["rle_string"])
        return {k: fix(x) for k, x in v.items()}
    if isinstance(v, list):
        return [fix(x) for x in v]
    if v == "NaN":
        return float("nan")
    return v

with open(sys.argv[1], "w") as f:
    json.dump(fix(json.load(sys.stdin)), f)
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("python3 (the COCO files are written by Python's json module)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(coco.to_string().as_bytes())
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "python3 failed writing {}",
        path.display()
    );
}

/// A PNG of `w` x `h` whose pixels say where they are (lossless).
fn write_image(path: &Path, w: u32, h: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    RgbImage::from_fn(w, h, |x, y| Rgb([x as u8, y as u8, 77]))
        .save(path)
        .unwrap();
}

/// COCO's column-major run lengths of a row-major binary mask, by definition.
fn rle_counts(mask: &[bool], w: usize, h: usize) -> Vec<u32> {
    let mut counts = Vec::new();
    let (mut cur, mut run) = (false, 0u32);
    for x in 0..w {
        for y in 0..h {
            if mask[y * w + x] != cur {
                counts.push(run);
                cur = !cur;
                run = 0;
            }
            run += 1;
        }
    }
    counts.push(run);
    counts
}

/// A row-major `w` x `h` map with `[x0, x1) x [y0, y1)` set.
fn rect(w: usize, h: usize, (x0, x1): (usize, usize), (y0, y1): (usize, usize)) -> Vec<bool> {
    (0..w * h)
        .map(|i| (x0..x1).contains(&(i % w)) && (y0..y1).contains(&(i / w)))
        .collect()
}

fn paint_rect(m: &mut [u8], w: usize, (x0, x1): (usize, usize), (y0, y1): (usize, usize), v: u8) {
    for y in y0..y1 {
        m[y * w + x0..y * w + x1].fill(v);
    }
}

fn open_coco(json: &Path, images: &Path) -> Arc<dyn Source> {
    let opts = OpenOptions {
        images: Some(images.display().to_string()),
        ..OpenOptions::default()
    };
    match open_with(json, &opts) {
        Ok(s) => s,
        Err(e) => panic!("opening {}: {e}", json.display()),
    }
}

fn open_err(json: &Path, images: Option<&Path>) -> String {
    let opts = OpenOptions {
        images: images.map(|p| p.display().to_string()),
        ..OpenOptions::default()
    };
    match open_with(json, &opts) {
        Ok(_) => panic!("{} opened", json.display()),
        Err(e) => e.to_string(),
    }
}

fn config(mode: Mode, batch: usize, spec: &str) -> LoaderConfig {
    LoaderConfig {
        batch_size: batch,
        mode,
        workers: stoker_loader::Workers::Fixed(2),
        seed: 3,
        shuffle: false,
        transform: Pipeline::parse(spec).expect("spec"),
        ..LoaderConfig::default()
    }
}

fn batches(src: Arc<dyn Source>, cfg: LoaderConfig) -> Vec<Batch> {
    let mut loader = Loader::new(src, cfg).expect("loader");
    loader.epoch(0).map(|b| b.expect("batch")).collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-3)
}

const W: usize = 64;
const H: usize = 48;

/// The instances set: three 64x48 images (ids 2, 5, 9, listed out of order; 9 has no
/// annotations) and categories 18 dog, 2 bird, 7 zebra (classes bird=0, zebra=1,
/// dog=2), annotations listed out of id order.
fn instances(dir: &Path) -> PathBuf {
    for name in ["img/a.png", "img/sub/b.png", "img/c.png"] {
        write_image(&dir.join(name), W as u32, H as u32);
    }
    let dog = rle_counts(&rect(W, H, (30, 40), (20, 44)), W, H);
    let crowd = rle_counts(&rect(W, H, (0, W), (40, H)), W, H);
    let coco = json!({
        "info": {"description": "test", "year": 2024},
        "licenses": [],
        "images": [
            {"id": 5, "file_name": "sub/b.png", "width": W, "height": H, "license": 1},
            {"id": 9, "file_name": "c.png", "width": W, "height": H},
            {"id": 2, "file_name": "a.png", "width": W, "height": H},
        ],
        "categories": [
            {"id": 18, "name": "dog", "supercategory": "animal"},
            {"id": 2, "name": "bird", "supercategory": "animal"},
            {"id": 7, "name": "zebra", "supercategory": "animal"},
        ],
        "annotations": [
            // Later ids paint over earlier ones: the bird over the zebra.
            {"id": 13, "image_id": 2, "category_id": 2, "bbox": [10, 8, 4, 4], "area": 16,
             "iscrowd": 0, "segmentation": [[10, 8, 14, 8, 14, 12, 10, 12]]},
            {"id": 10, "image_id": 2, "category_id": 7, "bbox": [4, 6, 20, 10], "area": 200,
             "iscrowd": 0, "segmentation": [[4, 6, 24, 6, 24, 16, 4, 16]]},
            {"id": 11, "image_id": 2, "category_id": 18, "bbox": [30, 20, 10, 24], "area": 240,
             "iscrowd": 0, "segmentation": {"size": [H, W], "counts": dog}},
            // A crowd (compressed RLE): no box, 255 in the mask, over the dog's feet.
            {"id": 12, "image_id": 2, "category_id": 2, "bbox": [0, 40, 64, 8], "area": 512,
             "iscrowd": 1, "segmentation": {"size": [H, W], "counts": {"rle_string": crowd}}},
            // Two polygons, one object: a triangle and a square, united.
            {"id": 20, "image_id": 5, "category_id": 7, "bbox": [8, 8, 52, 38], "area": 660,
             "iscrowd": 0,
             "segmentation": [[8, 8, 48, 8, 8, 38], [50, 40, 60, 40, 60, 46, 50, 46]]},
            // A box without a region.
            {"id": 21, "image_id": 5, "category_id": 18, "bbox": [1, 1, 2, 2], "area": 4,
             "iscrowd": 0, "segmentation": []},
        ],
    });
    let path = dir.join("annotations/instances_train.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_coco(&path, &coco);
    path
}

#[test]
fn instances_give_boxes_classes_crowd_and_masks() {
    let dir = tempfile::tempdir().unwrap();
    let json = instances(dir.path());
    let images = dir.path().join("img");
    let src = open_coco(&json, &images);
    assert_eq!(src.format(), "coco");
    assert_eq!(src.len(), 3);
    assert_eq!(src.classes(), ["bird", "zebra", "dog"]);
    assert_eq!(
        src.fields(),
        Fields::of(&[Field::Image, Field::Boxes, Field::Mask, Field::Masks])
    );
    assert!(src.keypoint_schema().is_none());
    // Samples are the images sorted by id.
    for (i, (id, name)) in [(2, "a.png"), (5, "sub/b.png"), (9, "c.png")]
        .iter()
        .enumerate()
    {
        let d = src.describe(i);
        assert!(
            d.contains("instances_train.json") && d.contains(&format!("image {id} (")),
            "{d}"
        );
        assert!(d.contains(name), "{d}");
    }

    for mode in [Mode::Sync, Mode::Async] {
        let b = &batches(open_coco(&json, &images), config(mode, 3, ""))[0];
        assert_eq!(b.indices, [0, 1, 2]);
        let f = b.fields.as_ref().unwrap();
        assert_eq!(f.boxes.count, [3, 2, 0]);
        let (boxes, labels) = f.boxes_of(0);
        // In annotation id order (10, 11, 13), xywh -> xyxy, crowd left out.
        assert_eq!(
            boxes,
            [
                [4.0, 6.0, 24.0, 16.0],
                [30.0, 20.0, 40.0, 44.0],
                [10.0, 8.0, 14.0, 12.0]
            ]
        );
        assert_eq!(labels, [1, 2, 0]);
        let (boxes, labels) = f.boxes_of(1);
        assert_eq!(boxes, [[8.0, 8.0, 60.0, 46.0], [1.0, 1.0, 3.0, 3.0]]);
        assert_eq!(labels, [1, 2]);

        let masks = b.masks().expect("masks");
        let m = |i: usize| &masks[i * W * H..(i + 1) * W * H];
        let mut want = vec![0u8; W * H];
        paint_rect(&mut want, W, (4, 24), (6, 16), 2); // zebra, id 10
        paint_rect(&mut want, W, (30, 40), (20, 44), 3); // dog, id 11
        paint_rect(&mut want, W, (0, W), (40, H), 255); // crowd, id 12
        paint_rect(&mut want, W, (10, 14), (8, 12), 1); // bird, id 13
        assert_eq!(m(0), want, "{mode}: image 2's mask");
        assert_eq!(m(2), vec![0u8; W * H], "image 9 has no annotations");

        // Image 5: the square exactly, the triangle within its edge pixels.
        let m5 = m(1);
        let at = |x: usize, y: usize| m5[y * W + x];
        for y in 0..H {
            for x in 50..60 {
                let want = if (40..46).contains(&y) { 2 } else { 0 };
                assert_eq!(at(x, y), want, "square at ({x}, {y})");
            }
        }
        assert_eq!((at(10, 10), at(40, 9), at(9, 36)), (2, 2, 2));
        assert_eq!((at(40, 30), at(30, 30), at(7, 20)), (0, 0, 0));
        let triangle = (0..H)
            .flat_map(|y| (0..50).map(move |x| (x, y)))
            .filter(|&(x, y)| at(x, y) == 2)
            .count() as f64;
        assert!((triangle - 600.0).abs() < 60.0, "{triangle} pixels");
        assert!(m5.iter().all(|&v| v == 0 || v == 2));
    }

    // Fields picked: a mask alone, or boxes alone (no mask painted).
    let only = |f: &[Field]| LoaderConfig {
        fields: Some(Fields::of(f)),
        ..config(Mode::Sync, 3, "")
    };
    let b = &batches(open_coco(&json, &images), only(&[Field::Mask]))[0];
    assert!(b.masks().is_some() && b.fields.as_ref().unwrap().boxes.count.is_empty());
    let b = &batches(open_coco(&json, &images), only(&[Field::Boxes]))[0];
    assert!(b.masks().is_none() && b.fields.as_ref().unwrap().boxes.count == [3, 2, 0]);
}

/// The reference set of `coco_reference/` (written by its `make.py` with Python's
/// json and pycocotools): the annotation file, and pycocotools' `annToMask` of each
/// instance by annotation id, with its kind (polygon or rle).
struct Reference {
    json: PathBuf,
    images: PathBuf,
    masks: std::collections::HashMap<u64, (String, Vec<u8>)>,
}

/// The images of the reference set (their pixels say where they are), and its masks.
fn reference(dir: &Path) -> Reference {
    let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/coco_reference");
    let images = dir.join("img");
    for name in ["one.png", "two.png", "three.png"] {
        write_image(&images.join(name), 160, 120);
    }
    let coco: Value =
        serde_json::from_slice(&std::fs::read(at.join("instances.json")).unwrap()).unwrap();
    let size_of = |image: u64| {
        let i = coco["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == image)
            .unwrap();
        (
            i["width"].as_u64().unwrap() as usize,
            i["height"].as_u64().unwrap() as usize,
        )
    };
    let refs: Value =
        serde_json::from_slice(&std::fs::read(at.join("ann_to_mask.json")).unwrap()).unwrap();
    let mut masks = std::collections::HashMap::new();
    for a in coco["annotations"].as_array().unwrap() {
        let id = a["id"].as_u64().unwrap();
        let Some(r) = refs["masks"].get(id.to_string()) else {
            continue;
        };
        let (w, h) = size_of(a["image_id"].as_u64().unwrap());
        let counts: Vec<u32> = serde_json::from_value(r["counts"].clone()).unwrap();
        // Column-major runs, background first, to a row-major map.
        let mut m = vec![0u8; w * h];
        let mut p = 0;
        for (i, &c) in counts.iter().enumerate() {
            for q in p..p + c as usize {
                m[(q % h) * w + q / h] = (i % 2) as u8;
            }
            p += c as usize;
        }
        assert_eq!(p, w * h, "annotation {id}'s reference");
        masks.insert(id, (r["kind"].as_str().unwrap().to_string(), m));
    }
    Reference {
        json: at.join("instances.json"),
        images,
        masks,
    }
}

fn with_masks(mode: Mode, spec: &str) -> LoaderConfig {
    LoaderConfig {
        fields: Some(Fields::of(&[Field::Image, Field::Boxes, Field::Masks])),
        ..config(mode, 1, spec)
    }
}

/// The instance annotations of each image of the reference set, in id order: the crowd
/// (5) is no instance and the zero-area box (6) is dropped.
const INSTANCES: [&[u64]; 3] = [&[1, 2, 3, 4], &[7, 8], &[]];

#[test]
fn instance_masks_match_pycocotools_ann_to_mask() {
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    let src = open_coco(&r.json, &r.images);
    assert!(src.fields().contains(Field::Masks));
    for mode in [Mode::Sync, Mode::Async] {
        let bs = batches(open_coco(&r.json, &r.images), with_masks(mode, ""));
        assert_eq!(bs.len(), 3);
        for (b, ids) in bs.iter().zip(INSTANCES) {
            let f = b.fields.as_ref().unwrap();
            assert_eq!(f.boxes.count, [ids.len() as i32], "{mode}");
            let [_, h, w, _] = b.shape();
            let all = b.instance_masks().expect("instance masks");
            assert_eq!(all.len(), f.boxes.max * h * w);
            let masks = b.instance_masks_of(0).unwrap();
            for (j, id) in ids.iter().enumerate() {
                let got = &masks[j * h * w..(j + 1) * h * w];
                let (kind, want) = &r.masks[id];
                assert!(got.iter().all(|&v| v <= 1), "{mode}: 0 and 1");
                let area = want.iter().filter(|&&v| v == 1).count();
                let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
                if kind == "rle" {
                    assert_eq!(differ, 0, "{mode}: annotation {id} (RLE) differs");
                } else {
                    assert!(
                        differ * 100 <= area,
                        "{mode}: annotation {id} (polygon) differs in {differ} of {area} pixels"
                    );
                }
            }
        }
    }
    // A set with instance masks carries them only when asked for (they take
    // max_instances x H x W bytes a sample).
    let b = &batches(src, config(Mode::Sync, 1, ""))[0];
    assert!(b.instance_masks().is_none() && b.masks().is_some());
}

#[test]
fn instance_masks_follow_flips_and_crops_exactly_and_drop_with_their_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    // The masks as painted, untransformed (pycocotools' own for the RLEs, within 1%
    // of them for the polygons: see the test above).
    let plain: Vec<Vec<u8>> = batches(open_coco(&r.json, &r.images), with_masks(Mode::Sync, ""))
        .iter()
        .map(|b| b.instance_masks_of(0).unwrap().to_vec())
        .collect();
    for mode in [Mode::Sync, Mode::Async] {
        // Mirrored: pixel (x, y) is the unmirrored mask's (w - 1 - x, y), exactly.
        let bs = batches(open_coco(&r.json, &r.images), with_masks(mode, "flip:p=1"));
        for ((b, ids), before) in bs.iter().zip(INSTANCES).zip(&plain) {
            let [_, h, w, _] = b.shape();
            let masks = b.instance_masks_of(0).unwrap();
            assert_eq!(masks.len(), ids.len() * h * w);
            for (j, id) in ids.iter().enumerate() {
                let want = &before[j * h * w..(j + 1) * h * w];
                if r.masks[id].0 == "rle" {
                    assert_eq!(want, r.masks[id].1, "annotation {id}");
                }
                for y in 0..h {
                    for x in 0..w {
                        assert_eq!(
                            masks[j * h * w + y * w + x],
                            want[y * w + w - 1 - x],
                            "{mode}: annotation {id} at ({x}, {y})"
                        );
                    }
                }
            }
        }
        // Padding writes the class map's 255 (ignore) and an instance mask's 0; with
        // both in the batch, each is where its own accessor says.
        let cfg = LoaderConfig {
            fields: Some(Fields::of(&[Field::Boxes, Field::Mask, Field::Masks])),
            batch_size: 3,
            ..config(mode, 3, "pad:4")
        };
        let b = &batches(open_coco(&r.json, &r.images), cfg)[0];
        let [n, h, w, _] = b.shape();
        assert_eq!((n, h, w), (3, 128, 168));
        let map = b.masks().unwrap();
        assert_eq!(map.len(), 3 * h * w);
        assert_eq!((map[0], map[h * w + 5 * w + 4]), (255, 0), "{mode}");
        for (i, ids) in INSTANCES.iter().enumerate() {
            let masks = b.instance_masks_of(i).unwrap();
            assert_eq!(masks.len(), ids.len() * h * w);
            for j in 0..ids.len() {
                let m = &masks[j * h * w..(j + 1) * h * w];
                let want = &plain[i][j * 160 * 120..(j + 1) * 160 * 120];
                for y in 0..h {
                    for x in 0..w {
                        let inside = (4..124).contains(&y) && (4..164).contains(&x);
                        let v = if inside {
                            want[(y - 4) * 160 + x - 4]
                        } else {
                            0
                        };
                        assert_eq!(m[y * w + x], v, "{mode}: sample {i} mask {j} at ({x}, {y})");
                    }
                }
            }
        }
        // A 20x20 centre crop of image 1 leaves under 5% of the boxes of
        // annotations 1 and 2, which are dropped with their masks; 3 and 4 stay,
        // cut as the image is (its pixels say where the crop began).
        let cfg = LoaderConfig {
            min_box_visibility: 0.05,
            ..with_masks(mode, "center:20x20")
        };
        let b = &batches(open_coco(&r.json, &r.images), cfg)[0];
        let f = b.fields.as_ref().unwrap();
        assert_eq!(f.boxes.count, [2], "{mode}");
        assert_eq!(
            f.boxes_of(0).1,
            [0, 1],
            "{mode}: annotations 3 (cat) and 4 (dog)"
        );
        let (x0, y0) = (b.image(0)[0] as usize, b.image(0)[1] as usize);
        let masks = b.instance_masks_of(0).unwrap();
        for (j, id) in [3u64, 4].iter().enumerate() {
            // Annotations 3 and 4 are masks 2 and 3 of image 1.
            let want = &plain[0][(j + 2) * 160 * 120..(j + 3) * 160 * 120];
            for y in 0..20 {
                for x in 0..20 {
                    assert_eq!(
                        masks[j * 400 + y * 20 + x],
                        want[(y + y0) * 160 + x + x0],
                        "{mode}: annotation {id} at ({x}, {y})"
                    );
                }
            }
        }
    }
}

#[test]
fn instance_masks_pad_to_the_batch_count_and_are_bounded_by_max_instances() {
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = LoaderConfig {
            batch_size: 3,
            ..with_masks(mode, "resize:48x40")
        };
        let b = &batches(open_coco(&r.json, &r.images), cfg)[0];
        let f = b.fields.as_ref().unwrap();
        assert_eq!(
            (f.boxes.count.as_slice(), f.boxes.max),
            ([4, 2, 0].as_slice(), 4)
        );
        let all = b.instance_masks().unwrap();
        assert_eq!(all.len(), 3 * 4 * 48 * 40);
        let per = 48 * 40;
        // Padding is zeros; each real mask has pixels.
        for (i, n) in [(0, 4), (1, 2), (2, 0)] {
            for j in 0..4 {
                let m = &all[(i * 4 + j) * per..(i * 4 + j + 1) * per];
                assert_eq!(
                    m.iter().any(|&v| v != 0),
                    j < n,
                    "{mode}: sample {i} mask {j}"
                );
            }
        }
        // max_instances bounds the boxes and their masks, and the buffer.
        let cfg = LoaderConfig {
            batch_size: 3,
            max_instances: Some(1),
            ..with_masks(mode, "resize:48x40")
        };
        let bound = |k| {
            let cfg = LoaderConfig {
                max_instances: Some(k),
                ..cfg.clone()
            };
            Loader::new(open_coco(&r.json, &r.images), cfg)
                .unwrap()
                .memory_bound_bytes()
        };
        // The memory bound counts an instance mask as one more byte a pixel: RGB and
        // one mask is 4, RGB and two is 5.
        assert_eq!(bound(1) * 5, bound(2) * 4);
        let mut loader = Loader::new(open_coco(&r.json, &r.images), cfg).unwrap();
        let b = loader.epoch(0).next().unwrap().unwrap();
        let f = b.fields.as_ref().unwrap();
        assert_eq!(f.boxes.count, [1, 1, 0]);
        assert_eq!(b.instance_masks().unwrap().len(), 3 * per);
    }
}

#[test]
fn packs_carry_instance_masks() {
    use stoker_loader::source::{packed, tar};
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    let src = open_coco(&r.json, &r.images);
    let masks_of = |src: Arc<dyn Source>| -> Vec<(Vec<i32>, Vec<u8>)> {
        let cfg = LoaderConfig {
            batch_size: 3,
            ..with_masks(Mode::Sync, "flip:p=1")
        };
        batches(src, cfg)
            .iter()
            .map(|b| {
                let f = b.fields.as_ref().unwrap();
                (f.boxes.count.clone(), b.instance_masks().unwrap().to_vec())
            })
            .collect()
    };
    let want = masks_of(src.clone());
    assert_eq!(want[0].0, [4, 2, 0]);
    // As RLE objects in each sample's json member (tar) or record (packed file).
    let shards = dir.path().join("shards");
    tar::pack_tar(src.as_ref(), &shards, 1 << 20, |_, _| {}).expect("pack --format tar");
    let stk = dir.path().join("set.stk");
    packed::pack_source(src.as_ref(), &stk, |_, _| {}).expect("pack");
    for back in [&shards, &stk] {
        let back = open_with(back, &OpenOptions::default()).expect("open the pack");
        assert!(back.fields().contains(Field::Masks), "{:?}", back.fields());
        assert_eq!(masks_of(back), want);
    }
}

/// Drops a sample's last box (and so breaks the pairing of boxes and masks).
fn drop_last_box(
    s: &mut stoker_loader::StepSample<'_>,
    _: &mut stoker_augment::SampleRng,
) -> Result<(), stoker_loader::StepError> {
    s.fields.boxes.pop();
    s.fields.box_labels.pop();
    Ok(())
}

#[test]
fn a_step_that_drops_boxes_under_instance_masks_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    for mode in [Mode::Sync, Mode::Async] {
        let cfg = LoaderConfig {
            steps: vec![stoker_loader::UserStep::new(drop_last_box)],
            ..with_masks(mode, "")
        };
        let mut loader = Loader::new(open_coco(&r.json, &r.images), cfg).unwrap();
        let e = loader.epoch(0).find_map(Result::err).expect("an error");
        let msg = e.to_string();
        assert!(
            msg.contains("image 1") && msg.contains("changed the sample's 4 boxes to 3"),
            "{mode}: {msg}"
        );
    }
}

#[test]
fn masks_is_no_longer_mask_and_the_error_says_which_is_which() {
    let dir = tempfile::tempdir().unwrap();
    let json = instances(dir.path());
    let images = dir.path().join("img");
    // Once an alias of mask, "masks" now names the instance masks.
    assert_eq!("masks".parse::<Field>(), Ok(Field::Masks));
    assert_eq!("seg".parse::<Field>(), Ok(Field::Mask));
    // A detection file without regions has no instance masks: asking for them says
    // what each field is.
    let det = dir.path().join("det.json");
    write_coco(
        &det,
        &json!({
            "images": [{"id": 1, "file_name": "a.png", "width": W, "height": H}],
            "categories": [{"id": 1, "name": "x"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1,
                             "bbox": [1, 1, 4, 4], "iscrowd": 0}],
        }),
    );
    let err = |src, f: &[Field]| {
        let cfg = LoaderConfig {
            fields: Some(Fields::of(f)),
            ..config(Mode::Sync, 1, "")
        };
        match Loader::new(src, cfg) {
            Ok(_) => panic!("a loader was made"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(open_coco(&det, &images), &[Field::Boxes, Field::Masks]);
    assert!(
        e.contains("no field 'masks'")
            && e.contains("'masks' is one binary mask per instance")
            && e.contains("'mask' one class map per image"),
        "{e}"
    );
    // Instance masks are one per box: without boxes they say so.
    let e = err(open_coco(&json, &images), &[Field::Masks]);
    assert!(e.contains("ask for boxes too"), "{e}");
}

#[test]
fn a_detection_file_without_segmentations_has_no_mask_field() {
    let dir = tempfile::tempdir().unwrap();
    write_image(&dir.path().join("img/a.png"), 32, 32);
    let json = dir.path().join("det.json");
    write_coco(
        &json,
        &json!({
            "images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}],
            "categories": [{"id": 1, "name": "thing"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4]}],
        }),
    );
    let src = open_coco(&json, &dir.path().join("img"));
    assert_eq!(src.fields(), Fields::of(&[Field::Image, Field::Boxes]));
    // An image-only file (image_info_test.json) opens with images alone.
    let info = dir.path().join("image_info.json");
    write_coco(
        &info,
        &json!({"images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}]}),
    );
    let src = open_coco(&info, &dir.path().join("img"));
    assert_eq!(src.fields(), Fields::of(&[Field::Image]));
    assert!(src.classes().is_empty());
    // No categories, no classes: its batches carry the image alone, as a caption
    // set's carry no label, rather than a class 0 for every sample.
    for (mode, picked) in [(Mode::Sync, None), (Mode::Async, Some(&[Field::Image][..]))] {
        let cfg = LoaderConfig {
            fields: picked.map(Fields::of),
            ..config(mode, 1, "")
        };
        let all = batches(src.clone(), cfg);
        assert_eq!(all.len(), 1);
        let f = all[0].fields.as_ref().expect("not a classification batch");
        assert_eq!(f.fields, Fields::of(&[Field::Image]), "{mode}");
    }
    // Asking for a class is an error that says what the set has.
    for want in [&[Field::Class][..], &[Field::Image, Field::Class]] {
        let cfg = LoaderConfig {
            fields: Some(Fields::of(want)),
            ..config(Mode::Sync, 1, "")
        };
        let e = Loader::new(src.clone(), cfg)
            .err()
            .expect("no class")
            .to_string();
        assert!(
            e.contains("no field 'label'") && e.contains("(it has: image)"),
            "{e}"
        );
    }
    // Class + 1 of 300 categories does not fit in a byte: no mask, boxes still, and
    // instance masks, which hold no class.
    let many = dir.path().join("lvis_like.json");
    let categories: Vec<Value> = (1..=300)
        .map(|i| json!({"id": i, "name": format!("c{i}")}))
        .collect();
    write_coco(
        &many,
        &json!({
            "images": [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}],
            "categories": categories,
            "annotations": [{"id": 1, "image_id": 1, "category_id": 300, "bbox": [1, 2, 3, 4],
                             "segmentation": [[1, 2, 4, 2, 4, 6]]}],
        }),
    );
    let src = open_coco(&many, &dir.path().join("img"));
    assert_eq!(
        src.fields(),
        Fields::of(&[Field::Image, Field::Boxes, Field::Masks])
    );
    let b = &batches(src.clone(), config(Mode::Sync, 1, ""))[0];
    assert_eq!(b.fields.as_ref().unwrap().boxes_of(0).1, [299]);
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Boxes, Field::Masks])),
        ..config(Mode::Sync, 1, "")
    };
    let b = &batches(src, cfg)[0];
    let m = b.instance_masks_of(0).unwrap();
    assert_eq!((m.len(), m[3 * 32 + 3], m[20 * 32 + 20]), (32 * 32, 1, 0));
}

const NAMES: [&str; 5] = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"];

/// A person's COCO bbox `[x, y, w, h]` and its points `(x, y, v)`.
type Person = ([f32; 4], Vec<[f32; 3]>);

/// A person: its box and 5 points (the right ear not labelled).
fn person(x: f32, y: f32) -> Person {
    (
        [x, y, 20.0, 30.0],
        vec![
            [x + 10.0, y + 5.0, 2.0],
            [x + 6.0, y + 3.0, 2.0],
            [x + 14.0, y + 3.0, 1.0],
            [x + 2.0, y + 4.0, 2.0],
            [0.0, 0.0, 0.0],
        ],
    )
}

/// person_keypoints: image 1 (64x48) with persons at (10, 5) and (0, 0) and a crowd,
/// image 2 (96x72) with one at (40, 20). Returns the file and each image's persons.
fn keypoint_set(dir: &Path) -> (PathBuf, Vec<Vec<Person>>) {
    write_image(&dir.join("img/p1.png"), 64, 48);
    write_image(&dir.join("img/p2.png"), 96, 72);
    let persons = vec![
        vec![person(10.0, 5.0), person(0.0, 0.0)],
        vec![person(40.0, 20.0)],
    ];
    let mut anns = Vec::new();
    let mut id = 1;
    for (img, list) in persons.iter().enumerate() {
        for (b, pts) in list {
            let flat: Vec<f32> = pts.iter().flatten().copied().collect();
            let [x, y, w, h] = *b;
            anns.push(json!({
                "id": id, "image_id": img + 1, "category_id": 1, "iscrowd": 0,
                "bbox": b, "area": w * h, "num_keypoints": 4, "keypoints": flat,
                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
            }));
            id += 1;
        }
    }
    // A crowd of people: neither a box nor a keypoint instance.
    anns.push(json!({
        "id": 50, "image_id": 1, "category_id": 1, "iscrowd": 1, "bbox": [40, 0, 20, 10],
        "num_keypoints": 0, "keypoints": vec![0; 15],
        "segmentation": {"size": [48, 64], "counts": rle_counts(&rect(64, 48, (40, 60), (0, 10)), 64, 48)},
    }));
    let json = dir.join("person_keypoints_train.json");
    write_coco(
        &json,
        &json!({
            "images": [
                {"id": 1, "file_name": "p1.png", "width": 64, "height": 48},
                {"id": 2, "file_name": "p2.png", "width": 96, "height": 72},
            ],
            "categories": [{"id": 1, "name": "person", "supercategory": "person",
                            "keypoints": NAMES, "skeleton": [[1, 2], [1, 3], [2, 4], [3, 5]]}],
            "annotations": anns,
        }),
    );
    (json, persons)
}

#[test]
fn keypoints_and_masks_follow_resize_and_flip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (json, persons) = keypoint_set(dir.path());
    let images = dir.path().join("img");
    let src = open_coco(&json, &images);
    assert_eq!(
        src.fields(),
        Fields::of(&[
            Field::Image,
            Field::Boxes,
            Field::Mask,
            Field::Keypoints,
            Field::Masks
        ])
    );
    let schema = src.keypoint_schema().expect("schema");
    assert_eq!(schema.names, NAMES);
    assert_eq!(schema.flip, [0, 2, 1, 4, 3]);

    let sizes = [(64usize, 48usize), (96, 72)];
    for mode in [Mode::Sync, Mode::Async] {
        let b = &batches(
            open_coco(&json, &images),
            config(mode, 2, "resize:32x24,flip:p=1"),
        )[0];
        let f = b.fields.as_ref().unwrap();
        assert_eq!(f.boxes.count, [2, 1]);
        assert_eq!(f.keypoints.count, [2, 1], "the crowd is no instance");
        assert_eq!(f.keypoints.per_instance, 5);
        let masks = b.masks().unwrap();
        for (i, &(w, h)) in sizes.iter().enumerate() {
            let (sx, sy) = (32.0 / w as f32, 24.0 / h as f32);
            // resize, then mirror: x' = 32 - x * 32 / w, y' = y * 24 / h.
            let map = |x: f32, y: f32| (32.0 - x * sx, y * sy);
            let (boxes, labels) = f.boxes_of(i);
            assert!(labels.iter().all(|&l| l == 0));
            for (got, (bx, _)) in boxes.iter().zip(&persons[i]) {
                let (x1, y1) = map(bx[0], bx[1]);
                let (x2, y2) = map(bx[0] + bx[2], bx[1] + bx[3]);
                let want = [x2.max(0.0), y1, x1.min(32.0), y2.min(24.0)];
                assert!(close(got, &want), "{mode} image {i}: {got:?} vs {want:?}");
            }
            let k = &f.keypoints;
            for (n, (_, pts)) in persons[i].iter().enumerate() {
                let start = (i * k.max + n) * 15;
                let got = &k.points[start..start + 15];
                for (j, p) in pts.iter().enumerate() {
                    // Point j lands in the slot of its mirror twin.
                    let slot = schema.flip[j];
                    let g = &got[slot * 3..slot * 3 + 3];
                    if p[2] == 0.0 {
                        assert_eq!(g, [0.0; 3], "{mode}: an unlabelled point stays unlabelled");
                    } else {
                        let (x, y) = map(p[0], p[1]);
                        assert!(close(g, &[x, y, p[2]]), "{mode} image {i} point {j}: {g:?}");
                    }
                }
            }
            // The mask: person boxes are 1, the crowd 255, resampled nearest-neighbour
            // (pixel centres) and then mirrored.
            let mut src_mask = vec![0u8; w * h];
            for (bx, _) in &persons[i] {
                let x = (bx[0] as usize, (bx[0] + bx[2]) as usize);
                paint_rect(
                    &mut src_mask,
                    w,
                    x,
                    (bx[1] as usize, (bx[1] + bx[3]) as usize),
                    1,
                );
            }
            if i == 0 {
                paint_rect(&mut src_mask, w, (40, 60), (0, 10), 255);
            }
            let m = &masks[i * 32 * 24..(i + 1) * 32 * 24];
            for y in 0..24 {
                for x in 0..32 {
                    let rx = 31 - x;
                    let px = ((rx as f32 + 0.5) / sx).floor() as usize;
                    let py = ((y as f32 + 0.5) / sy).floor() as usize;
                    assert_eq!(
                        m[y * 32 + x],
                        src_mask[py * w + px],
                        "{mode} image {i} mask at ({x}, {y})"
                    );
                }
            }
        }
    }
}

#[test]
fn a_keypoint_instance_is_dropped_with_its_box() {
    let dir = tempfile::tempdir().unwrap();
    let (json, persons) = keypoint_set(dir.path());
    let src = open_coco(&json, &dir.path().join("img"));
    // The centre 8x8 of image 1 is [28, 36) x [20, 28): the person at (0, 0) (box
    // [0, 20) x [0, 30)) is dropped with its keypoints; the one at (10, 5) keeps
    // [28, 30) x [20, 28) of its box.
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Boxes, Field::Keypoints])),
        ..config(Mode::Sync, 1, "center:8")
    };
    let b = &batches(src, cfg)[0];
    let f = b.fields.as_ref().unwrap();
    assert_eq!(f.boxes.count, [1]);
    assert_eq!(f.keypoints.count, [1]);
    let (bx, _) = &persons[0][0];
    let (got, _) = f.boxes_of(0);
    let want = [0.0, 0.0, (bx[0] + bx[2] - 28.0).min(8.0), 8.0];
    assert!(close(&got[0], &want), "{got:?}");
    // Its nose (20, 10) is outside the crop: invisible, like every other point.
    assert!(f.keypoints.points.iter().all(|&v| v == 0.0));
}

/// A person_keypoints file of one 64x48 image: annotation 1 a person with a box,
/// points and a region; annotations 2 (`[30, 5, 0, 0]`) and 3 (height 0) boxes
/// without area, with points and regions of their own; annotation 4 a person whose
/// right eye lies far off the image.
fn degenerate_set(dir: &Path) -> PathBuf {
    write_image(&dir.join("img/d.png"), 64, 48);
    let pts = |x: f32, y: f32| -> Vec<f32> {
        [
            [x, y, 2.0],
            [x + 2.0, y, 2.0],
            [x + 4.0, y, 1.0],
            [x, y + 2.0, 2.0],
            [x + 4.0, y + 2.0, 2.0],
        ]
        .concat()
    };
    let mut far = pts(44.0, 30.0);
    far[6..9].copy_from_slice(&[500.0, 20.0, 2.0]);
    let square = |x: f32, y: f32| json!([[x, y, x + 6.0, y, x + 6.0, y + 6.0, x, y + 6.0]]);
    let json = dir.join("person_keypoints_degenerate.json");
    write_coco(
        &json,
        &json!({
            "images": [{"id": 1, "file_name": "d.png", "width": 64, "height": 48}],
            "categories": [{"id": 1, "name": "person", "keypoints": NAMES}],
            "annotations": [
                {"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [10, 10, 20, 20],
                 "keypoints": pts(12.0, 12.0), "segmentation": square(10.0, 10.0)},
                {"id": 2, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [30, 5, 0, 0],
                 "keypoints": pts(31.0, 6.0), "segmentation": square(32.0, 2.0)},
                {"id": 3, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [2, 36, 8, 0],
                 "keypoints": pts(3.0, 37.0), "segmentation": square(2.0, 36.0)},
                {"id": 4, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [40, 28, 20, 16],
                 "keypoints": far},
            ],
        }),
    );
    json
}

#[test]
fn a_zero_area_box_is_dropped_with_its_keypoints_and_region_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let json = degenerate_set(dir.path());
    let images = dir.path().join("img");
    let coco = stoker_loader::source::Coco::open(
        &json.display().to_string(),
        &images.display().to_string(),
        &OpenOptions::default(),
    )
    .unwrap();
    assert_eq!(coco.dropped_boxes(), [2, 3]);
    let src = open_coco(&json, &images);
    assert_eq!(
        src.layout(),
        ["zero-area boxes dropped: 2 (annotations 2, 3), with their keypoints and mask regions"]
    );
    // With no transform (nothing to clip them) and with one.
    for spec in ["", "flip:p=1"] {
        for mode in [Mode::Sync, Mode::Async] {
            let b = &batches(open_coco(&json, &images), config(mode, 1, spec))[0];
            let f = b.fields.as_ref().unwrap();
            let (boxes, _) = f.boxes_of(0);
            let want = if spec.is_empty() {
                [[10.0, 10.0, 30.0, 30.0], [40.0, 28.0, 60.0, 44.0]]
            } else {
                [[34.0, 10.0, 54.0, 30.0], [4.0, 28.0, 24.0, 44.0]]
            };
            assert_eq!(boxes, want, "{spec} {mode}");
            assert_eq!(f.keypoints.count, [2], "{spec} {mode}");
            // Only annotation 1's square is painted: 36 pixels of class 1.
            let mask = b.masks().unwrap();
            assert_eq!(
                mask.iter().filter(|&&v| v == 1).count(),
                36,
                "{spec} {mode}"
            );
            assert!(mask.iter().all(|&v| v <= 1), "{spec} {mode}");
        }
    }
}

#[test]
fn a_keypoint_off_the_image_is_invisible_without_a_transform() {
    let dir = tempfile::tempdir().unwrap();
    let json = degenerate_set(dir.path());
    let cfg = LoaderConfig {
        fields: Some(Fields::of(&[Field::Boxes, Field::Keypoints])),
        ..config(Mode::Sync, 1, "")
    };
    let b = &batches(open_coco(&json, &dir.path().join("img")), cfg)[0];
    let k = &b.fields.as_ref().unwrap().keypoints;
    assert_eq!(k.count, [2]);
    // Person 4 (the second instance): its right eye, (500, 20) on a 64 px wide image,
    // is (0, 0, 0) as if a crop had cut it off; its other points are as written.
    let got = &k.points[15..30];
    assert_eq!(
        got,
        [44.0, 30.0, 2.0, 46.0, 30.0, 2.0, 0.0, 0.0, 0.0, 44.0, 32.0, 2.0, 48.0, 32.0, 2.0]
    );
    // Person 1's points are all on the image and all kept.
    assert_eq!(&k.points[..3], [12.0, 12.0, 2.0]);
}

/// The bad-input sets' transform: a resize makes every image one size, so that an
/// image whose real size differs from its JSON's reaches the mask check.
const SPEC: &str = "flip,resize:64x48";

/// A set of three good images (ids 1-3) and image 4 built from `bad`: `fail` names
/// the file, image 4 and `want`; `skip` leaves image 4 out and counts it.
fn bad_case(dir: &Path, image: Value, anns: Vec<Value>, want: &str) {
    let img = dir.join("img");
    for i in 1..=3 {
        write_image(&img.join(format!("{i}.png")), 64, 48);
    }
    let mut images: Vec<Value> = (1..=3)
        .map(|i| json!({"id": i, "file_name": format!("{i}.png"), "width": 64, "height": 48}))
        .collect();
    images.push(image);
    let mut annotations: Vec<Value> = (1..=3)
        .map(|i| {
            json!({"id": i, "image_id": i, "category_id": 1, "iscrowd": 0,
                   "bbox": [2, 2, 10, 10], "segmentation": [[2, 2, 12, 2, 12, 12]]})
        })
        .collect();
    annotations.extend(anns);
    let json = dir.join("instances_bad.json");
    write_coco(
        &json,
        &json!({"images": images, "annotations": annotations,
                "categories": [{"id": 1, "name": "a"},
                               {"id": 2, "name": "b", "keypoints": ["left_x", "right_x"]}]}),
    );
    for mode in [Mode::Sync, Mode::Async] {
        let mut loader =
            Loader::new(open_coco(&json, &img), config(mode, 2, SPEC)).expect("loader");
        let err = loader
            .epoch(0)
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("{want}: no error"));
        let msg = err.to_string();
        assert!(matches!(err, LoaderError::Sample { index: 3, .. }), "{msg}");
        assert!(
            msg.contains("instances_bad.json image 4") && msg.contains(want),
            "{want}: {msg}"
        );
        let cfg = LoaderConfig {
            on_error: OnError::Skip,
            ..config(mode, 2, SPEC)
        };
        let mut loader = Loader::new(open_coco(&json, &img), cfg).expect("loader");
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
fn bad_annotations_name_the_file_image_and_annotation_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_image(&d.join("img/4.png"), 64, 48);
    write_image(&d.join("img/small.png"), 32, 32);
    let image = json!({"id": 4, "file_name": "4.png", "width": 64, "height": 48});
    let ann = |extra: Value| {
        let mut a = json!({"id": 40, "image_id": 4, "category_id": 1, "iscrowd": 0,
                           "bbox": [1, 1, 5, 5]});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        a
    };
    let rle =
        |size: Value, counts: Value| json!({"segmentation": {"size": size, "counts": counts}});
    let cases: Vec<(Value, Value, &str)> =
        vec![
        (
            image.clone(),
            ann(json!({"category_id": 99})),
            "annotation 40: unknown category id 99",
        ),
        (
            image.clone(),
            ann(json!({"segmentation": [[1, 1, 5, 5]]})),
            "annotation 40: a polygon has 2 points; it needs at least 3",
        ),
        (
            image.clone(),
            ann(rle(json!([10, 10]), json!([100]))),
            "annotation 40: the RLE's size [10, 10] (height, width) is not its image's [48, 64]",
        ),
        (
            image.clone(),
            ann(rle(json!([48, 64]), json!([3000, 100]))),
            "annotation 40: the RLE counts add up to 3100 pixels, which overrun the 64x48",
        ),
        (
            image.clone(),
            ann(rle(json!([48, 64]), json!({"rle_string": [3000, 100]}))),
            "which overrun",
        ),
        (
            image.clone(),
            ann(rle(json!([48, 64]), json!("5 2"))),
            "annotation 40: the counts string holds ' '",
        ),
        (
            image.clone(),
            ann(json!({"bbox": [-2, 0, 5, 5]})),
            "annotation 40: bbox [-2.0, 0.0, 5.0, 5.0] has a negative coordinate",
        ),
        (
            image.clone(),
            ann(json!({"bbox": [1, "NaN", 5, 5]})),
            "annotation 40: bbox [1.0, NaN, 5.0, 5.0] has a coordinate that is not a number",
        ),
        (
            image.clone(),
            ann(json!({"bbox": [5, 5, -1, 3]})),
            "has a negative width or height",
        ),
        (image.clone(), ann(json!({"bbox": null})), "annotation 40: no bbox"),
        (
            image.clone(),
            ann(json!({"category_id": 2, "keypoints": [1, 1, 2, 3, 3]})),
            "annotation 40: 5 keypoint values, not 2 (x, y, visibility) points",
        ),
        (
            image.clone(),
            ann(json!({"segmentation": [[1, 1, 5, "NaN", 5, 5]]})),
            "a polygon coordinate is NaN",
        ),
        // Checked by the loader against the decoded image.
        (
            image.clone(),
            ann(json!({"bbox": [50, 0, 30, 10]})),
            "box 0 [50.0, 0.0, 80.0, 10.0] lies outside the 64x48 image",
        ),
        (
            json!({"id": 4, "file_name": "missing.png", "width": 64, "height": 48}),
            ann(json!({})),
            "missing.png",
        ),
        (
            json!({"id": 4, "file_name": "small.png", "width": 64, "height": 48}),
            ann(json!({"segmentation": [[1, 1, 5, 1, 5, 5]]})),
            "the mask is 64x48 but its image is 32x32",
        ),
    ];
    for (i, (image, ann, want)) in cases.into_iter().enumerate() {
        let case = d.join(format!("case{i}"));
        std::fs::create_dir_all(&case).unwrap();
        for f in ["4.png", "small.png"] {
            std::fs::create_dir_all(case.join("img")).unwrap();
            std::fs::copy(d.join("img").join(f), case.join("img").join(f)).unwrap();
        }
        bad_case(&case, image, vec![ann], want);
    }
}

#[test]
fn files_that_cannot_be_opened_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = d.join("img");
    std::fs::create_dir_all(&img).unwrap();
    let json = d.join("instances.json");
    std::fs::write(&json, "{\"images\": [").unwrap();
    let e = open_err(&json, Some(&img));
    assert!(
        e.contains("instances.json") && e.contains("not a COCO annotation file"),
        "{e}"
    );
    let cases: Vec<(Value, &str)> = vec![
        (json!({"annotations": []}), "no \"images\" list"),
        (
            json!({"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}],
                   "annotations": [{"id": 7, "image_id": 99, "category_id": 1, "bbox": [0, 0, 1, 1]}],
                   "categories": [{"id": 1, "name": "a"}]}),
            "annotation 7 is of image id 99, which is not in \"images\"",
        ),
        (
            json!({"images": [], "categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]}),
            "category id 1 appears twice ('a' and 'b')",
        ),
        (
            json!({"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4},
                              {"id": 1, "file_name": "b.png", "width": 4, "height": 4}]}),
            "image id 1 appears twice",
        ),
        (
            json!({"images": [], "categories": [
                {"id": 1, "name": "person", "keypoints": ["nose"]},
                {"id": 2, "name": "cat", "keypoints": ["tail"]}]}),
            "name different keypoints",
        ),
        (
            json!({"images": [{"id": 1, "file_name": "a.png", "height": 4}]}),
            "missing field `width`",
        ),
    ];
    for (coco, want) in cases {
        write_coco(&json, &coco);
        let e = open_err(&json, Some(&img));
        assert!(
            e.contains("instances.json") && e.contains(want),
            "{want}: {e}"
        );
    }
    // Without images=: the argument that is missing.
    let e = open_err(&json, None);
    assert!(e.contains("`images=` in Python, `--images DIR`"), "{e}");
    let e = open_err(&d.join("nothing.json"), Some(&img));
    assert!(
        e.contains("nothing.json") && e.contains("no such file"),
        "{e}"
    );
}

fn digest(src: Arc<dyn Source>, cfg: LoaderConfig) -> String {
    let mut loader = Loader::new(src, cfg).unwrap();
    let mut d = Digest::new();
    for b in loader.epoch(0) {
        d.update(&b.unwrap());
    }
    d.hex()
}

#[cfg(feature = "remote")]
#[test]
fn a_coco_set_in_s3_gives_the_local_batches() {
    use stoker_loader::storage;
    let Some(moto) = s3_support::Moto::start("a_coco_set_in_s3_gives_the_local_batches") else {
        return;
    };
    let o = moto.options();
    moto.create_bucket("coco");
    let dir = tempfile::tempdir().unwrap();
    let (json, _) = keypoint_set(dir.path());
    // A third image that is in the JSON but not in the bucket (nor on disk).
    let mut coco: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    coco["images"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": 3, "file_name": "gone.png", "width": 64, "height": 48}));
    write_coco(&json, &coco);
    storage::upload_file(&json, "s3://coco/annotations/person_keypoints.json", &o).unwrap();
    storage::upload_dir(&dir.path().join("img"), "s3://coco/train/", &o, 4).unwrap();
    let remote = |images: &str| {
        let opts = OpenOptions {
            remote: o.clone(),
            images: Some(images.into()),
            ..OpenOptions::default()
        };
        open_with(
            Path::new("s3://coco/annotations/person_keypoints.json"),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let cfg = |mode| LoaderConfig {
        on_error: OnError::Skip,
        ..config(mode, 2, "resize:32x24,flip")
    };
    for mode in [Mode::Sync, Mode::Async] {
        let local = open_coco(&json, &dir.path().join("img"));
        let want = digest(local, cfg(mode));
        for images in ["s3://coco/train", "s3://coco/train/"] {
            let src = remote(images);
            assert_eq!(src.len(), 3);
            assert!(
                src.describe(0).contains("s3://coco/train/p1.png"),
                "{}",
                src.describe(0)
            );
            assert_eq!(digest(src, cfg(mode)), want, "{images}, {mode}");
        }
    }
    // The missing object, under `fail`: named with the prefix.
    let mut loader = Loader::new(
        remote("s3://coco/train"),
        config(Mode::Sync, 1, "resize:32x24"),
    )
    .unwrap();
    let msg = loader
        .epoch(0)
        .find_map(Result::err)
        .expect("an error")
        .to_string();
    assert!(
        msg.contains("person_keypoints.json image 3")
            && msg.contains("no object 'gone.png' under s3://coco/train/"),
        "{msg}"
    );
}

#[test]
fn instance_masks_come_out_the_same_from_the_decoded_cache() {
    use stoker_loader::DecodedCacheSize;
    let dir = tempfile::tempdir().unwrap();
    let r = reference(dir.path());
    // Three epochs of random flips and pads: the later epochs run from the cache, whose
    // entries must carry each sample's instance masks (the digest covers them).
    let run = |mode: Mode, cache: Option<DecodedCacheSize>| {
        let cfg = LoaderConfig {
            decoded_cache: cache,
            last_epoch: Some(2),
            ..with_masks(mode, "pad:4,flip")
        };
        let mut loader = Loader::new(open_coco(&r.json, &r.images), cfg).expect("loader");
        let mut digests = Vec::new();
        for e in 0..3 {
            for b in loader.epoch(e) {
                let b = b.expect("batch");
                assert!(b.instance_masks().is_some());
                let mut d = Digest::new();
                d.update(&b);
                digests.push(d.hex());
            }
        }
        (digests, loader.metrics().decoded_cache_hits)
    };
    for mode in [Mode::Sync, Mode::Async] {
        let (plain, none) = run(mode, None);
        let (cached, hits) = run(mode, Some(DecodedCacheSize::Bytes(64 << 20)));
        assert_eq!(none, 0);
        assert_eq!(cached, plain, "{mode}");
        // The async mode reads ahead across epochs, so some of its later reads may come
        // before the first decodes are kept: only the sync mode's count is exact.
        if mode == Mode::Sync {
            assert_eq!(hits, 2 * INSTANCES.len() as u64, "later epochs hit");
        }
    }
}
