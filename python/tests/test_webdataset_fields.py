"""WebDataset tars with any keys, written with Python's tarfile: a caption (.txt),
fields in .json (multi-label tags, boxes, keypoints), a mask (.mask.png / .seg.png),
read to the same batches as the manifest they were made from; bad members named."""

import io
import json
import tarfile

import numpy as np
import pytest

import stoker


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    d = tmp_path_factory.mktemp("wds") / "scenes"
    stoker.gen_scenes(d, 24, width=48, height=40, max_shapes=3, seed=5)
    return d


def manifest(scenes):
    lines = (scenes / "train.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    return header, [json.loads(line) for line in lines[1:]]


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(scenes, out, per_shard=10, mask_ext="mask.png", drop=None):
    """The manifest's samples as WebDataset shards: image, txt, json, mask."""
    header, samples = manifest(scenes)
    cls = {name: i for i, name in enumerate(header["classes"])}
    out.mkdir(parents=True, exist_ok=True)
    for s in range(0, len(samples), per_shard):
        with tarfile.open(out / f"train-{s // per_shard:04d}.tar", "w") as tar:
            for i, line in enumerate(samples[s : s + per_shard], start=s):
                key = f"sample{i:05d}"
                add(tar, f"{key}.jpg", (scenes / line["image"]).read_bytes())
                if drop != ("txt", i):
                    add(tar, f"{key}.txt", line["text"].encode())
                fields = {
                    "labels": [cls[c] for c in line["labels"]],
                    "boxes": line["boxes"],
                    "box_labels": [cls[c] for c in line["box_labels"]],
                    "keypoints": line["keypoints"],
                }
                add(tar, f"{key}.json", json.dumps(fields).encode())
                if drop != ("mask", i):
                    add(tar, f"{key}.{mask_ext}", (scenes / line["mask"]).read_bytes())
    return out


def batches(data, **kw):
    loader = stoker.Loader(data, batch_size=8, shuffle=False, transform="resize:32x24", **kw)
    return list(loader)


def test_tar_shards_read_as_the_manifest_they_were_made_from(scenes, tmp_path):
    shards = write_shards(scenes, tmp_path / "wds")
    from_tar = batches(shards)
    from_manifest = batches(scenes / "train.jsonl")
    assert len(from_tar) == len(from_manifest) == 3
    for t, m in zip(from_tar, from_manifest):
        assert set(t) == {
            "image", "labels", "text", "boxes", "box_labels", "box_count",
            "mask", "keypoints", "keypoint_count",
        }
        for key in ["image", "text", "boxes", "box_labels", "box_count", "mask",
                    "keypoints", "keypoint_count"]:
            if isinstance(t[key], list):
                assert t[key] == m[key], key
            else:
                assert t[key].dtype == m[key].dtype, key
                np.testing.assert_array_equal(t[key], m[key], err_msg=key)
        # The tar knows classes up to the largest number used; the manifest all 10.
        k = t["labels"].shape[1]
        np.testing.assert_array_equal(t["labels"], m["labels"][:, :k])
        assert not m["labels"][:, k:].any()
    assert sum(int(c) for b in from_tar for c in b["box_count"]) > 24


def test_seg_png_and_a_pick_of_fields(scenes, tmp_path):
    shards = write_shards(scenes, tmp_path / "wds", mask_ext="seg.png")
    (b,) = batches(shards, fields=["image", "mask", "text"])[:1]
    assert set(b) == {"image", "mask", "text"}
    assert b["mask"].shape == (8, 24, 32)
    assert set(np.unique(b["mask"])) <= set(range(11)) | {255}


def test_a_missing_mask_member_is_an_error_naming_the_sample(scenes, tmp_path):
    shards = write_shards(scenes, tmp_path / "wds", drop=("mask", 3))
    with pytest.raises(stoker.LoaderError, match=r"train-0000\.tar sample sample00003.*no mask member"):
        batches(shards)
    # Under skip it is counted and the rest arrive.
    got = batches(shards, on_error="skip")
    assert sum(len(b["text"]) for b in got) == 23


def test_a_caption_that_is_not_utf8_is_an_error(scenes, tmp_path):
    shards = write_shards(scenes, tmp_path / "wds")
    bad = tmp_path / "bad"
    bad.mkdir()
    with tarfile.open(shards / "train-0000.tar") as src, tarfile.open(bad / "a.tar", "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name == "sample00002.txt":
                data = b"caf\xe9 \xff"
            add(dst, m.name, data)
    with pytest.raises(stoker.LoaderError, match=r"sample00002.*caption is not UTF-8"):
        batches(bad)


def test_a_box_past_the_image_is_an_error(scenes, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    _, samples = manifest(scenes)
    with tarfile.open(bad / "a.tar", "w") as tar:
        for i, line in enumerate(samples[:4]):
            add(tar, f"k{i}.jpg", (scenes / line["image"]).read_bytes())
            box = [[1, 2, 30, 30]] if i != 2 else [[10, 10, 400, 20]]
            add(tar, f"k{i}.json", json.dumps({"boxes": box, "box_labels": [0]}).encode())
    with pytest.raises(stoker.LoaderError, match=r"a\.tar sample k2"):
        batches(bad)


def test_a_json_that_does_not_parse_names_the_member(scenes, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    _, samples = manifest(scenes)
    with tarfile.open(bad / "a.tar", "w") as tar:
        add(tar, "k0.jpg", (scenes / samples[0]["image"]).read_bytes())
        add(tar, "k0.json", b'{"boxes": [[1, 2, 3')
    with pytest.raises(stoker.LoaderError, match=r"k0\.json"):
        stoker.Loader(bad)
