"""A program that uses stoker as a user would, written to pass `mypy --strict`.

python/tests/test_typing.py type-checks it against the stub (python/stoker/__init__.pyi)
and runs it, so that the types the stub claims are checked against what the module
delivers at run time too. The `assert_type` lines pin the stub's choices (which batch
type each kind of loader yields); mypy reads them, Python skips them.

    python python/tests/typed_usage.py [FOLDER]    # FOLDER: where its small data sets go
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

import stoker

if TYPE_CHECKING:
    from typing_extensions import assert_type

    from stoker import _FieldBatch, _Metrics, _MixedBatch, _Pair, _StateDict


def make_data(root: Path) -> tuple[Path, Path]:
    """A small image folder and a small scenes set (a manifest with every field)."""
    shapes, scenes = root / "shapes", root / "scenes"
    stoker.gen_shapes(shapes, 24, size=16, classes=3, seed=1)
    stoker.gen_scenes(str(scenes), 8, width=32, height=32, max_shapes=3, seed=2)
    return shapes, scenes


def classify(shapes: Path) -> str:
    """Two epochs of (images, labels) pairs, hashed as `stoker-load bench --digest` does."""
    loader = stoker.Loader(
        shapes,
        batch_size=8,
        transform="flip",
        mode="async",
        workers=2,
        prefetch=2,
        seed=3,
        shuffle=True,
        on_error="fail",
        channels=3,
    )
    if TYPE_CHECKING:
        assert_type(loader, stoker.Loader[_Pair | _FieldBatch])
    h, w, c = loader.image_shape
    digest = stoker.Digest()
    for epoch in range(2):
        for batch in loader.epoch(epoch):
            # A classification set gives pairs; which kind a set gives is known only
            # once it is opened, so the type is a union until narrowed.
            if not isinstance(batch, tuple):
                raise TypeError(f"an image folder gave a {type(batch).__name__}")
            images, labels = batch
            if TYPE_CHECKING:
                assert_type(images, NDArray[np.uint8])
                assert_type(labels, NDArray[np.int64])
            assert images.dtype == np.uint8 and images.shape[1:] == (h, w, c)
            assert labels.dtype == np.int64 and int(labels.max()) < len(loader.classes)
            # numpy types `base` as an array or None; here it is the pooled buffer.
            buffer: object = images.base
            assert isinstance(buffer, stoker.BatchBuffer) and buffer.position[0] == epoch
            digest.update(images, labels)
    return digest.hexdigest()


def labels_of(batch: _Pair | _FieldBatch) -> list[int]:
    """The labels of a batch of either kind a plain loader yields."""
    labels = batch[1] if isinstance(batch, tuple) else batch["label"]
    return [int(label) for label in labels]


def resume(shapes: Path) -> None:
    """A checkpoint through JSON: the resumed loader gives the rest of the epoch."""
    loader = stoker.Loader(str(shapes), batch_size=4, seed=7, workers="auto:2")
    straight = [labels_of(batch) for batch in loader.epoch(0)]
    run = stoker.Loader(shapes, batch_size=4, seed=7)
    for batch in run:
        first = labels_of(batch)
        break
    # What a training loop saves after its first step.
    state = run.state_dict()
    if TYPE_CHECKING:
        assert_type(state, _StateDict)
    assert state["next_batch"] == 1 and "fingerprint" in state
    again = stoker.Loader(shapes, batch_size=4, seed=7)
    again.load_state_dict(json.loads(json.dumps(state)))
    rest = again.epoch(state["epoch"])
    assert rest.epoch == 0 and rest.next_batch == 1 and len(rest) == len(loader) - 1
    assert [first] + [labels_of(batch) for batch in rest] == straight
    m = loader.metrics()
    if TYPE_CHECKING:
        assert_type(m, _Metrics)
    assert m["samples"] == loader.samples_per_epoch and m.get("cpu_budget") == 2
    print(f"resume: {m['images_per_sec']:.0f} images/s, waited {m['wait_seconds']:.3f} s")


def fields(scenes: Path) -> None:
    """A manifest with boxes, masks and captions: dict batches with padded boxes."""
    loader = stoker.Loader(
        scenes / "train.jsonl",
        batch_size=4,
        transform="resize:24x24,flip",
        fields=["image", "boxes", "mask", "text"],
        min_box_visibility=0.25,
        max_instances=2,
    )
    for batch in loader:
        if isinstance(batch, tuple):
            raise TypeError("a manifest with boxes gave (images, labels)")
        if TYPE_CHECKING:
            assert_type(batch, _FieldBatch)
        boxes, count = batch["boxes"], batch["box_count"]
        assert boxes.dtype == np.float32 and boxes.shape[2] == 4
        assert count.dtype == np.int32 and int(count.max()) <= 2
        assert batch["box_labels"].dtype == np.int64
        assert batch["mask"].shape == batch["image"].shape[:3]
        assert all(isinstance(t, str) for t in batch["text"])
        assert "keypoints" not in batch


def jitter(sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """A map: float32 CHW images with a little noise, the label kept."""
    image: NDArray[np.uint8] = sample["image"]
    x = image.astype(np.float32) / 255 + rng.normal(0, 0.01, image.shape).astype(np.float32)
    return {"image": x.transpose(2, 0, 1), "label": sample["label"]}


def mapped(shapes: Path) -> None:
    """map=: batches are dicts of what the function returned."""
    loader = stoker.Loader(shapes, batch_size=6, map=jitter, map_threads=2, seed=5)
    if TYPE_CHECKING:
        assert_type(loader, stoker.Loader[dict[str, Any]])
    for batch in loader.epoch(0):
        assert batch["image"].dtype == np.float32 and batch["image"].shape[1] == 3
    # The generator the map got for sample 0 of epoch 0.
    assert isinstance(stoker.map_rng(5, 0, 0).random(), float)


def mixed(shapes: Path) -> None:
    """mixup=stoker.Mix(...): dicts with soft labels."""
    loader = stoker.Loader(shapes, batch_size=6, mixup=stoker.Mix(mixup=0.2, cutmix=1.0, prob=0.5))
    if TYPE_CHECKING:
        assert_type(loader, stoker.Loader[_MixedBatch])
    digest = stoker.Digest()
    for batch in loader:
        soft = batch["soft_labels"]
        assert soft.dtype == np.float32 and soft.shape == (len(batch["label"]), 3)
        digest.update(batch["image"], batch["label"], soft)
    print(f"mixed: {digest}")


def packed(shapes: Path, root: Path) -> None:
    """pack(): the same set as one file, read with the same batches."""
    stats = stoker.pack(shapes, root / "shapes.stoker")
    assert stats["records"] == 24 and stats["classes"] == 3
    a = stoker.Loader(shapes, batch_size=8, shuffle=False)
    b = stoker.Loader(root / "shapes.stoker", batch_size=8, shuffle=False)
    for x, y in zip(a, b):
        assert isinstance(x, tuple) and isinstance(y, tuple)
        assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])


def main(root: Path) -> None:
    shapes, scenes = make_data(root)
    print(f"stoker {stoker.__version__}, demo data in {stoker.cache_dir()}")
    # decoder() came after some builds of the module: ask only where it is.
    if hasattr(stoker, "decoder"):
        print(f"JPEG decoder: {stoker.decoder()}")
    print(f"classify: {classify(shapes)}")
    resume(shapes)
    fields(scenes)
    mapped(shapes)
    mixed(shapes)
    packed(shapes, root)
    try:
        stoker.Loader(root / "nowhere")
    except stoker.LoaderError as e:
        print(f"a missing set: {e}")
    else:
        raise AssertionError("a missing data set opened")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
