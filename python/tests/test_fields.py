"""Batches with fields beyond image and class: the dict API, its exact keys, dtypes and
shapes, picking fields, segmentation pairs, manifests written with json, determinism
and resume."""

import json

import numpy as np
import pytest

import stoker


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """24 scenes of 48x40 px with every field, made by stoker.gen_scenes."""
    d = tmp_path_factory.mktemp("fields") / "scenes"
    stoker.gen_scenes(d, 24, width=48, height=40, max_shapes=3, seed=3)
    return d


def test_a_manifest_yields_dicts_with_every_field(scenes):
    loader = stoker.Loader(scenes / "train.jsonl", batch_size=8, transform="resize:32x24,flip")
    batch = next(iter(loader))
    assert isinstance(batch, dict)
    assert set(batch) == {
        "image", "labels", "text", "boxes", "box_labels", "box_count",
        "mask", "keypoints", "keypoint_count",
    }
    n = 8
    assert batch["image"].dtype == np.uint8 and batch["image"].shape == (n, 24, 32, 3)
    assert batch["labels"].dtype == np.uint8 and batch["labels"].shape == (n, 10)
    assert set(np.unique(batch["labels"])) <= {0, 1}
    assert isinstance(batch["text"], list) and len(batch["text"]) == n
    assert all(isinstance(t, str) and t for t in batch["text"])
    m = batch["boxes"].shape[1]
    assert batch["boxes"].dtype == np.float32 and batch["boxes"].shape == (n, m, 4)
    assert batch["box_labels"].dtype == np.int64 and batch["box_labels"].shape == (n, m)
    assert batch["box_count"].dtype == np.int32 and batch["box_count"].shape == (n,)
    assert batch["mask"].dtype == np.uint8 and batch["mask"].shape == (n, 24, 32)
    assert batch["keypoints"].dtype == np.float32
    assert batch["keypoints"].shape[0] == n and batch["keypoints"].shape[2:] == (3, 3)
    assert batch["keypoint_count"].dtype == np.int32
    for i, c in enumerate(batch["box_count"]):
        # Padding after the count: zero boxes, class -1.
        assert (batch["box_labels"][i, c:] == -1).all()
        assert (batch["boxes"][i, c:] == 0).all()
        assert (batch["box_labels"][i, :c] >= 0).all()
        b = batch["boxes"][i, :c]
        assert (b[:, 0] >= 0).all() and (b[:, 2] <= 32).all() and (b[:, 3] <= 24).all()
        assert (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
    assert set(np.unique(batch["mask"])) <= set(range(11)) | {255}
    # The mask is a view on the batch buffer, like the images.
    assert batch["mask"].base is batch["image"].base


def test_fields_picks_what_is_loaded(scenes):
    loader = stoker.Loader(scenes / "train.jsonl", batch_size=4, fields=["image", "boxes"])
    batch = next(iter(loader))
    assert set(batch) == {"image", "boxes", "box_labels", "box_count"}
    with pytest.raises(ValueError, match="no field 'label'"):
        stoker.Loader(scenes / "train.jsonl", fields=["label"])
    with pytest.raises(ValueError, match="unknown field 'shapes'"):
        stoker.Loader(scenes / "train.jsonl", fields=["shapes"])


def test_classification_keeps_its_pair(tmp_path):
    stoker.gen_shapes(tmp_path / "s", 8, size=16, classes=2)
    images, labels = next(iter(stoker.Loader(tmp_path / "s", batch_size=4)))
    assert images.shape == (4, 16, 16, 3) and labels.dtype == np.int64


def test_segmentation_pairs_by_folder_and_by_keyword(scenes, tmp_path):
    a = stoker.Loader(scenes, batch_size=6, shuffle=False)
    b = stoker.Loader(stoker.Pairs(scenes / "images", str(scenes / "masks")), batch_size=6, shuffle=False)
    # Pairs takes a pathlib.Path as well as a str.
    c = stoker.Loader(stoker.Pairs(scenes / "images", scenes / "masks"), batch_size=6, shuffle=False)
    n = 0
    for x, y, z in zip(a, b, c):
        assert set(x) == {"image", "mask"}
        for other in (y, z):
            assert np.array_equal(x["image"], other["image"])
            assert np.array_equal(x["mask"], other["mask"])
        assert x["mask"].shape == (6, 40, 48)
        n += 1
    assert n == len(a) > 0


def test_masks_once_meant_mask_and_the_error_says_so(scenes):
    # Segmentation pairs have a class map per image, no instance masks: `masks`, once
    # another name of `mask`, is now an error naming both.
    with pytest.raises(ValueError) as e:
        stoker.Loader(scenes, fields=["image", "masks"])
    msg = str(e.value)
    assert "no field 'masks'" in msg and "one binary mask per instance" in msg, msg
    assert "this data set has 'mask': ask for it by that name" in msg, msg
    d = next(iter(stoker.Loader(scenes, fields=["image", "mask"], batch_size=8)))
    assert set(d) == {"image", "mask"}


def write_manifest(scenes, path, lines):
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


def test_a_manifest_written_with_json_resumes_exactly(scenes, tmp_path):
    src = [json.loads(l) for l in (scenes / "train.jsonl").read_text().splitlines()[1:]]
    lines = [{"classes": ["circle", "square", "triangle", "plus", "ring", "diamond",
                          "hbars", "vbars", "star", "ellipse"]}]
    for s in src:
        lines.append({"image": str(scenes / s["image"]), "boxes": s["boxes"],
                      "box_labels": s["box_labels"], "text": s["text"]})
    path = write_manifest(scenes, tmp_path / "m.jsonl", lines)
    spec = "rrc:32:scale=0.3-1,flip"

    def run(loader, epoch):
        return [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in b.items()}
                for b in loader.epoch(epoch)]

    ref = run(stoker.Loader(path, batch_size=5, transform=spec, mode="sync"), 1)
    for workers in (1, 3):
        got = run(stoker.Loader(path, batch_size=5, transform=spec, workers=workers), 1)
        for x, y in zip(ref, got):
            assert x.keys() == y.keys()
            for k in x:
                assert np.array_equal(np.asarray(x[k]), np.asarray(y[k])), k
    loader = stoker.Loader(path, batch_size=5, transform=spec)
    it = loader.epoch(1)
    next(it)
    next(it)
    state = loader.state_dict()
    again = stoker.Loader(path, batch_size=5, transform=spec)
    again.load_state_dict(state)
    rest = [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in b.items()}
            for b in again]
    assert len(rest) == len(ref) - 2
    for x, y in zip(ref[2:], rest):
        assert np.array_equal(x["boxes"], y["boxes"]) and x["text"] == y["text"]
        assert np.array_equal(x["image"], y["image"])


def test_a_bad_line_names_the_manifest_line(scenes, tmp_path):
    lines = [{"image": str(scenes / "images" / "000000.jpg"), "boxes": [[0, 0, 500, 5]],
              "box_labels": [0]}]
    path = write_manifest(scenes, tmp_path / "bad.jsonl", lines)
    with pytest.raises(stoker.LoaderError, match=r"bad.jsonl line 1.*outside the 48x40 image"):
        for _ in stoker.Loader(path, batch_size=1):
            pass


def test_mixing_a_set_without_a_class_per_sample_is_refused(scenes):
    # gen_scenes' manifest has multi-label tags but no label: every soft label would
    # have been all on class 0.
    with pytest.raises(ValueError, match="no class per sample"):
        stoker.Loader(scenes / "train.jsonl", fields=["image"], mixup=0.2)
