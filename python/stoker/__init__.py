"""stoker: a deterministic, bounded-memory data loader for training.

    import stoker
    loader = stoker.Loader("data/train", batch_size=64, transform="rrc:224,flip")
    for epoch in range(10):
        for images, labels in loader.epoch(epoch):
            ...  # images: uint8 (N, H, W, C) numpy array, labels: int64 (N,)

The images array is a view on the loader's pooled batch buffer (no copy); the buffer
goes back to the pool when the array and every view of it are gone. Batches are the
same bytes in sync and async mode and for any number of workers, and the same as the
Rust loader's (`stoker-load bench --digest` prints a `Digest` of them).

A data set with fields beyond image and class (COCO, JSON-lines manifests,
segmentation pairs, tars with captions or boxes) yields one dict per batch instead:
`image`, and those of `label`, `labels`, `text`, `boxes`, `box_labels`, `box_count`,
`mask`, `keypoints`, `keypoint_count` and `raw` it has, and the instance masks
`masks` (N, M, H, W) when `fields` lists them (docs/samples.md):

    loader = stoker.Loader(stoker.Coco("annotations/instances_train.json", "train2017/"),
                           transform="rrc:512,flip")
    for batch in loader:
        images, boxes, count = batch["image"], batch["boxes"], batch["box_count"]

A step of your own: `map=fn` calls `fn(sample, rng)` for every sample on
`map_threads` threads (numpy code that releases the GIL runs in parallel). `sample`
is a dict of numpy arrays (`image`, `label`, the other fields), `rng` a fresh
`numpy.random.Generator` for the sample (`stoker.map_rng(seed, epoch, index)`); the
batch is a dict of what `fn` returns, collated like the built-in fields:

    def fn(sample, rng):
        img = sample["image"].astype(np.float32) / 255
        return {"image": img.transpose(2, 0, 1), "label": sample["label"]}

    loader = stoker.Loader("data/train", transform="rrc:224,flip", map=fn, map_threads=2)
"""

# numpy first: the native module needs its C API, and without numpy this is a plain
# ImportError here rather than a panic inside the first batch.
import numpy as _numpy  # noqa: F401
import atexit as _atexit

from ._stoker import (
    BatchBuffer,
    DeviceArray,
    Digest,
    EpochIterator,
    Loader,
    LoaderError,
    TokenLoader,
    __version__,
    cache_dir,
    decoder,
    gen_scenes,
    gen_shapes,
    map_rng,
    pack,
)
from ._stoker import stop_map_threads as _stop_map_threads
from ._sources import Coco, Data, Mix, Mixture, Packed, Pairs, Parquet

# The map threads of loaders still alive at exit are stopped before the interpreter
# finalizes: a thread that asks for the GIL after that is ended by Python mid-call.
_atexit.register(_stop_map_threads)

__all__ = [
    "BatchBuffer",
    "Coco",
    "Data",
    "DeviceArray",
    "Digest",
    "EpochIterator",
    "Loader",
    "LoaderError",
    "Mix",
    "Mixture",
    "Packed",
    "Pairs",
    "Parquet",
    "TokenLoader",
    "__version__",
    "cache_dir",
    "decoder",
    "gen_scenes",
    "gen_shapes",
    "map_rng",
    "pack",
]
