"""COCO annotation files from Python: stoker.Loader(stoker.Coco(json, images=folder)) yields one
dict per batch with the documented names, dtypes and shapes; the fields follow a
flip; the images keyword is required; a bad annotation is skipped under
on_error="skip". The JSON is written by the json module, the PNGs from numpy."""

import json
import struct
import zlib

import numpy as np
import pytest

import stoker

NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]


def write_png(path, rgb):
    """An 8-bit RGB PNG of the (H, W, 3) uint8 array."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(tag, data):
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)


def rle(mask):
    """COCO's column-major run lengths of a binary mask (background first)."""
    flat = mask.T.reshape(-1)
    counts, cur, run = [], 0, 0
    for v in flat:
        if v != cur:
            counts.append(run)
            cur, run = v, 0
        run += 1
    counts.append(run)
    return counts


def make_set(tmp_path, extra_annotations=()):
    """Two 64x48 images: a person, a car and a crowd in the first, a car in the
    second. Categories: person (id 1, keypoints) and car (id 3)."""
    images = tmp_path / "train2017"
    for i in (1, 2):
        rgb = np.zeros((48, 64, 3), np.uint8)
        rgb[..., 0] = np.arange(64, dtype=np.uint8)[None, :]
        rgb[..., 1] = i * 50
        write_png(images / f"{i:012d}.png", rgb)
    crowd = np.zeros((48, 64), np.uint8)
    crowd[40:, :] = 1
    person_kp = [20, 10, 2, 16, 8, 2, 24, 8, 1, 12, 9, 2, 0, 0, 0]
    coco = {
        "info": {"description": "stoker test"},
        "licenses": [],
        "images": [
            {"id": 2, "file_name": "000000000002.png", "width": 64, "height": 48},
            {"id": 1, "file_name": "000000000001.png", "width": 64, "height": 48},
        ],
        "categories": [
            {"id": 3, "name": "car", "supercategory": "vehicle"},
            {"id": 1, "name": "person", "supercategory": "person", "keypoints": NAMES,
             "skeleton": [[1, 2], [1, 3]]},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [10, 5, 20, 30],
             "area": 600, "num_keypoints": 4, "keypoints": person_kp,
             "segmentation": [[10, 5, 30, 5, 30, 35, 10, 35]]},
            {"id": 2, "image_id": 1, "category_id": 3, "iscrowd": 0, "bbox": [40, 10, 20, 20],
             "area": 400, "segmentation": [[40, 10, 60, 10, 60, 30, 40, 30]]},
            {"id": 3, "image_id": 1, "category_id": 1, "iscrowd": 1, "bbox": [0, 40, 64, 8],
             "area": 512, "num_keypoints": 0, "keypoints": [0] * 15,
             "segmentation": {"size": [48, 64], "counts": rle(crowd)}},
            {"id": 4, "image_id": 2, "category_id": 3, "iscrowd": 0, "bbox": [0, 0, 8, 8],
             "area": 64, "segmentation": [[0, 0, 8, 0, 8, 8, 0, 8]]},
            *extra_annotations,
        ],
    }
    path = tmp_path / "annotations" / "person_keypoints_train2017.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(coco, f)
    return path, images, person_kp


def test_batches_are_dicts_of_the_documented_fields(tmp_path):
    path, images, person_kp = make_set(tmp_path)
    loader = stoker.Loader(
        stoker.Coco(str(path), str(images)), batch_size=2, shuffle=False, mode="sync",
        transform="flip:p=1",
    )
    assert loader.classes == ["person", "car"]
    (d,) = list(loader.epoch(0))
    assert "label" not in d
    assert d["image"].dtype == np.uint8 and d["image"].shape == (2, 48, 64, 3)
    # The images are the files sorted by id, mirrored.
    assert (d["image"][0, :, :, 1] == 50).all() and (d["image"][1, :, :, 1] == 100).all()
    assert (d["image"][0, 0, :, 0] == np.arange(63, -1, -1)).all()

    boxes, labels, count = d["boxes"], d["box_labels"], d["box_count"]
    assert boxes.dtype == np.float32 and boxes.shape == (2, 2, 4)
    assert labels.dtype == np.int64 and labels.tolist() == [[0, 1], [1, -1]]
    assert count.dtype == np.int32 and count.tolist() == [2, 1]
    # x -> 64 - x; the crowd is no box.
    np.testing.assert_allclose(boxes[0], [[34, 5, 54, 35], [4, 10, 24, 30]])
    np.testing.assert_allclose(boxes[1, 0], [56, 0, 64, 8])
    assert (boxes[1, 1] == 0).all()

    mask = d["mask"]
    assert mask.dtype == np.uint8 and mask.shape == (2, 48, 64)
    want = np.zeros((48, 64), np.uint8)
    want[5:35, 10:30] = 1  # person: class 0 + 1
    want[10:30, 40:60] = 2  # car: class 1 + 1
    want[40:, :] = 255  # crowd
    assert (mask[0] == want[:, ::-1]).all()
    assert set(np.unique(mask[1]).tolist()) == {0, 2}

    kp, kc = d["keypoints"], d["keypoint_count"]
    assert kp.dtype == np.float32 and kp.shape == (2, 2, 5, 3)
    assert kc.dtype == np.int32 and kc.tolist() == [2, 1]
    pts = np.array(person_kp, np.float32).reshape(5, 3)
    flip = [0, 2, 1, 4, 3]  # left and right swap places
    for j in range(5):
        got = kp[0, 0, flip[j]]
        if pts[j, 2] == 0:
            assert (got == 0).all()
        else:
            np.testing.assert_allclose(got, [64 - pts[j, 0], pts[j, 1], pts[j, 2]])
    assert (kp[0, 1] == 0).all(), "a car has no points: an instance of zeros"


def test_fields_pick_what_is_loaded(tmp_path):
    path, images, _ = make_set(tmp_path)
    loader = stoker.Loader(
        stoker.Coco(path, images), batch_size=2, shuffle=False, fields=["boxes"]
    )
    (d,) = list(loader.epoch(0))
    assert set(d) == {"image", "boxes", "box_labels", "box_count"}


def instance(y, x):
    """A 48x64 instance mask of 1 in rows y, columns x (slices)."""
    m = np.zeros((48, 64), np.uint8)
    m[y, x] = 1
    return m


PERSON, CAR, SMALL_CAR = (
    instance(slice(5, 35), slice(10, 30)),
    instance(slice(10, 30), slice(40, 60)),
    instance(slice(0, 8), slice(0, 8)),
)


def test_instance_masks_are_one_per_box_and_follow_a_flip(tmp_path):
    path, images, _ = make_set(tmp_path)
    loader = stoker.Loader(
        stoker.Coco(path, images), batch_size=2, shuffle=False, transform="flip:p=1",
        fields=["image", "boxes", "masks"],
    )
    (d,) = list(loader.epoch(0))
    assert set(d) == {"image", "boxes", "box_labels", "box_count", "masks"}
    masks = d["masks"]
    # (N, M, H, W): one per box, in the boxes' order; the crowd is no instance.
    assert masks.dtype == np.uint8 and masks.shape == (2, 2, 48, 64)
    assert d["box_count"].tolist() == [2, 1]
    assert (masks[0, 0] == PERSON[:, ::-1]).all() and (masks[0, 1] == CAR[:, ::-1]).all()
    assert (masks[1, 0] == SMALL_CAR[:, ::-1]).all()
    assert (masks[1, 1] == 0).all(), "padding is zeros"
    # Without fields, a loader leaves the instance masks out (they cost M x H x W).
    (d,) = list(stoker.Loader(stoker.Coco(path, images), batch_size=2).epoch(0))
    assert "masks" not in d and "mask" in d


def test_a_map_gets_and_returns_instance_masks(tmp_path):
    path, images, _ = make_set(tmp_path)

    def last_box(s, rng):
        assert s["masks"].shape == (s["boxes"].shape[0], 48, 64)
        return {"image": s["image"], "boxes": s["boxes"][-1:], "masks": s["masks"][-1:]}

    loader = stoker.Loader(
        stoker.Coco(path, images), batch_size=2, shuffle=False, mode="sync",
        fields=["image", "boxes", "masks"], map=last_box,
    )
    (d,) = list(loader.epoch(0))
    assert d["masks"].dtype == np.uint8 and d["masks"].shape == (2, 1, 48, 64)
    assert d["box_count"].tolist() == [1, 1]
    assert (d["masks"][0, 0] == CAR).all() and (d["masks"][1, 0] == SMALL_CAR).all()


def test_masks_is_not_mask_and_the_error_says_which_is_which(tmp_path):
    # A detection file without regions has boxes but no instance masks.
    path, images, _ = make_set(tmp_path)
    coco = json.loads(path.read_text())
    for a in coco["annotations"]:
        a.pop("segmentation")
    path.write_text(json.dumps(coco))
    with pytest.raises(ValueError) as e:
        stoker.Loader(stoker.Coco(path, images), fields=["image", "boxes", "masks"])
    msg = str(e.value)
    assert "'masks' is one binary mask per instance" in msg, msg
    assert "'mask' one class map per image" in msg, msg


def test_images_is_required_for_a_coco_file(tmp_path):
    path, _, _ = make_set(tmp_path)
    with pytest.raises(stoker.LoaderError, match="images="):
        stoker.Loader(path)


def test_a_bad_annotation_fails_or_is_skipped(tmp_path):
    bad = {"id": 9, "image_id": 2, "category_id": 42, "iscrowd": 0, "bbox": [0, 0, 1, 1]}
    path, images, _ = make_set(tmp_path, [bad])
    loader = stoker.Loader(stoker.Coco(path, images), batch_size=1, shuffle=False)
    with pytest.raises(stoker.LoaderError, match="image 2.*annotation 9: unknown category id 42"):
        list(loader.epoch(0))
    loader = stoker.Loader(stoker.Coco(path, images), batch_size=1, shuffle=False, on_error="skip")
    batches = list(loader.epoch(0))
    assert sum(len(b["image"]) for b in batches) == 1
    assert [c for b in batches for c in b["box_count"].tolist()] == [2]
    assert loader.metrics()["skipped"] == 1
