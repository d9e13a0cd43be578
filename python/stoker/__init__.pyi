"""Types of the `stoker` module, with its documentation, for type checkers and editors.

The runtime module is native (`stoker._stoker`, pyo3), so without this stub a checker
sees nothing of it. The full reference is docs/python.md, "API reference".

    import stoker
    loader = stoker.Loader("data/train", batch_size=64, transform="rrc:224,flip")
    for epoch in range(10):
        for images, labels in loader.epoch(epoch):
            ...  # images: uint8 (N, H, W, C) numpy array, labels: int64 (N,)

A batch is the `(images, labels)` pair for a classification set, a dict of fields
(`_FieldBatch`) for a set with more (COCO, JSON-lines manifests, segmentation pairs,
tars with captions or boxes), a dict with `soft_labels` (`_MixedBatch`) with
`mixup=`/`cutmix=`, and a dict of what `fn` returned with `map=fn`. Which of the first
two a set gives is known only once it is opened, so a plain `Loader` yields their
union: narrow it with `isinstance(batch, tuple)`. The names that start with `_` exist
only here, for annotations (import them under `typing.TYPE_CHECKING`).
"""

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypedDict, final, overload

import numpy as np
from numpy.typing import NDArray
from typing_extensions import NotRequired, Self, TypeAlias, TypeVar

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

__version__: str

# A path argument: the module converts it with os.fspath, so a pathlib.Path is as good
# as a str (bytes paths are refused).
_StrPath: TypeAlias = str | os.PathLike[str]

class Data:
    """A data set at a path or URL, opened by detection as a plain path is, with the
    reading options that belong to it: `split` ("train"/"test" for MNIST/CIFAR-10, a
    split's name for a Parquet set in the Hub's layout; None is the training split),
    `mmap` (read a packed file through a memory map), `cache` (a folder keeping whole
    remote objects for later epochs) and `cache_size` (its bound: bytes, or a str such
    as "20G"; default 10G)."""

    path: str
    split: str | None
    mmap: bool
    cache: str | None
    cache_size: int | str | None
    def __init__(
        self,
        path: _StrPath,
        *,
        split: str | None = None,
        mmap: bool = False,
        cache: _StrPath | None = None,
        cache_size: int | str | None = None,
    ) -> None: ...

class Parquet(Data):
    """Parquet files (a file, a folder, a glob, a Hub repository's layout) and the
    columns to read (docs/parquet.md)."""

    def __init__(
        self,
        path: _StrPath,
        image_column: str = "image",
        label_column: str = "label",
        text_column: str | None = None,
        boxes_column: str | None = None,
        box_format: Literal["xyxy", "xywh"] = "xyxy",
        box_classes_column: str | None = None,
        labels_column: str | None = None,
        mask_column: str | None = None,
        split: str | None = None,
        *,
        cache: _StrPath | None = None,
        cache_size: int | str | None = None,
    ) -> None: ...

class Coco(Data):
    """A COCO annotation file and the folder (path or URL) of its images."""

    def __init__(
        self,
        json: _StrPath,
        images: _StrPath,
        *,
        cache: _StrPath | None = None,
        cache_size: int | str | None = None,
    ) -> None: ...

class Pairs(Data):
    """Segmentation pairs: a folder of images and a folder of masks paired by stem."""

    def __init__(
        self,
        images: _StrPath,
        masks: _StrPath,
        *,
        cache: _StrPath | None = None,
        cache_size: int | str | None = None,
    ) -> None: ...

class Packed(Data):
    """A packed file, read through a memory map unless `mmap=False`."""

    def __init__(
        self,
        path: _StrPath,
        mmap: bool = True,
        *,
        cache: _StrPath | None = None,
        cache_size: int | str | None = None,
    ) -> None: ...

class Mixture:
    """Several data sets as one: `weights` (one per data set; None is equal), `stop`
    ("first_exhausted", "all_exhausted" (default) or "never", which needs
    `epoch_batches`), `epoch_batches` (batches per epoch on each rank). `steps` is
    the deprecated old name of `epoch_batches`."""

    sources: list[_StrPath | Data]
    weights: list[float] | None
    stop: str | None
    epoch_batches: int | None
    def __init__(
        self,
        sources: Sequence[_StrPath | Data],
        weights: Sequence[float] | None = None,
        stop: Literal["first_exhausted", "all_exhausted", "never"] | None = None,
        epoch_batches: int | None = None,
        *,
        steps: int | None = None,
    ) -> None: ...

class Mix:
    """MixUp and CutMix (`Loader(mixup=stoker.Mix(...))`): their Beta alphas (> 0;
    None leaves one out) and `prob`, the chance of CutMix when both are given (0 to
    1, default 0.5)."""

    mixup: float | None
    cutmix: float | None
    prob: float | None
    def __init__(
        self, mixup: float | None = None, cutmix: float | None = None, prob: float | None = None
    ) -> None: ...

_Data: TypeAlias = _StrPath | Data | Sequence[_StrPath | Data] | Mixture
"""`Loader`'s `data`."""

_Pair: TypeAlias = tuple[NDArray[np.uint8], NDArray[np.int64]]
"""A classification batch: images uint8 (N, H, W, C), a view on the loader's pooled
buffer (its `base` is a `BatchBuffer`), and labels int64 (N,)."""

class _FieldBatch(TypedDict):
    """A batch of a data set with fields beyond image and class: `image` always, the
    others when the set has them and `fields=` did not leave them out
    (docs/samples.md, "The field kinds")."""

    image: NDArray[np.uint8]
    """(N, H, W, C), a view on the pooled buffer."""
    label: NotRequired[NDArray[np.int64]]
    """(N,): each sample's class."""
    labels: NotRequired[NDArray[np.uint8]]
    """(N, classes): multi-label tags, k-hot."""
    text: NotRequired[list[str]]
    """N captions."""
    boxes: NotRequired[NDArray[np.float32]]
    """(N, M, 4): [x1, y1, x2, y2] in output pixels, padded with zeros to the batch's
    most boxes M."""
    box_labels: NotRequired[NDArray[np.int64]]
    """(N, M): each box's class, -1 for padding."""
    box_count: NotRequired[NDArray[np.int32]]
    """(N,): the boxes of each sample."""
    mask: NotRequired[NDArray[np.uint8]]
    """(N, H, W): class per pixel, 255 for "ignore"; a view on the pooled buffer."""
    masks: NotRequired[NDArray[np.uint8]]
    """(N, M, H, W): one binary (0/1) mask per box, in the boxes' order, zeros for
    padding; only when `fields` lists "masks"; a view on the pooled buffer."""
    keypoints: NotRequired[NDArray[np.float32]]
    """(N, M, K, 3): instances of K (x, y, visibility) points, padded with zeros."""
    keypoint_count: NotRequired[NDArray[np.int32]]
    """(N,): the keypoint instances of each sample."""
    raw: NotRequired[list[bytes]]
    """N byte strings passed through untouched."""

class _MixedBatch(TypedDict):
    """A batch mixed by MixUp/CutMix (`mixup=`, `cutmix=`)."""

    image: NDArray[np.uint8]
    """(N, H, W, C), the mixed images."""
    label: NDArray[np.int64]
    """(N,): each image's own label before mixing."""
    soft_labels: NDArray[np.float32]
    """(N, classes): the mixed targets, for a soft cross-entropy."""

_MapFn: TypeAlias = Callable[[dict[str, Any], np.random.Generator], dict[str, Any]]
"""`map=fn`: `fn(sample, rng)` gets one sample (numpy arrays, padding removed; `text` a
str, `raw` bytes) and the sample's own generator, and returns a dict; the batch is the
samples' dicts collated (stacked, or padded with `<key>_count`)."""

# Covariant: a Loader[_MixedBatch] may go where a loader of any batch is expected.
# The default keeps a bare `stoker.Loader` annotation legal under --strict.
_B = TypeVar("_B", covariant=True, default=_Pair | _FieldBatch)

class _StateDict(TypedDict):
    """`Loader.state_dict()`: where the loader stands; flat and JSON-serialisable."""

    seed: int
    epoch: int
    next_batch: int
    batch_size: int
    samples: int
    rank: int
    world_size: int
    fingerprint: NotRequired[int]
    """The data set's fingerprint (absent from states saved before it existed)."""
    elastic: NotRequired[str]
    """JSON text: an epoch taken over from another world size or batch size."""
    mixture: NotRequired[str]
    """JSON text: the position of a mixture of data sets."""

class _Metrics(TypedDict):
    """`Loader.metrics()`: totals since the loader was made."""

    images_per_sec: float
    """Samples delivered over the time from the first epoch asked for to the last batch."""
    elapsed_seconds: float
    wait_seconds: float
    """Time the consumer waited for batches."""
    samples: int
    skipped: int
    """Samples left out under on_error="skip" (by the loader or the map)."""
    map_threads: int
    batches: int
    bytes_read: int
    read_seconds: float
    decode_seconds: float
    collate_seconds: float
    mean_queue_len: float
    peak_buffer_bytes: int
    memory_bound_bytes: int
    buffers_allocated: int
    buffers_held: int
    pool_grown: int
    """Buffers allocated past the pool's size because the consumer kept batches."""
    pipeline_starts: int
    threads: int
    workers: int
    cpu_budget: NotRequired[int]
    """With workers="auto" only."""
    io_depth: NotRequired[int]
    """With workers="auto" only: the io_depth it chose."""
    decoded_cache_capacity: NotRequired[int]
    """With decoded_cache only (as are the five below): the most bytes it may hold."""
    decoded_cache_bytes: NotRequired[int]
    """Bytes it holds now."""
    decoded_cache_hits: NotRequired[int]
    """Samples taken from it, neither read nor decoded."""
    decoded_cache_misses: NotRequired[int]
    """Samples read and decoded."""
    decoded_cache_windowed: NotRequired[int]
    """Misses decoded through a libjpeg-turbo crop window, which it does not keep."""
    decoded_cache_no_room: NotRequired[int]
    """Misses it had no room left for."""

class _PackStats(TypedDict):
    """`pack()`'s result."""

    records: int
    classes: int
    record_bytes: int
    file_bytes: int

class LoaderError(Exception):
    """Raised for bad data: a path or object that is missing or cannot be read, a
    sample that cannot be decoded (under on_error="fail"), an exception in a `map`
    function (its `__cause__`), a state `load_state_dict` cannot go on from. The message
    names the file, record or setting. A bad argument value, or settings the data
    cannot be loaded with, is a ValueError; a wrong type a TypeError."""

@final
class Loader(Generic[_B]):
    """A deterministic, bounded-memory loader over an image folder, a packed file,
    MNIST/CIFAR-10, Parquet files, tar shards, a COCO file or a JSON-lines manifest,
    local or at a URL (s3://, gs://, az://, http(s)://).

    Iterate `loader.epoch(e)`, or the loader itself (the next epoch, or the rest of an
    interrupted one). Batches are the same bytes in sync and async mode and for any
    number of workers. Every argument but `data` has a default; those after
    `io_depth` are keyword-only:

    - data: a path or URL (opened by detection), a source with options of its own
      (`Data`, `Parquet`, `Coco`, `Pairs`, `Packed`), a list of them (a mixture of
      equal weights), or a `Mixture` (weights, stop rule, epoch_batches).
    - batch_size=64: samples per batch, 1 to 2**20.
    - transform="": the augmentation spec, e.g. "rrc:224,flip" (augment/README.md).
    - mode="async": "async" (worker threads prefetch) or "sync" (on the caller's thread).
    - workers=2: decode threads, 1 to 1024 (0 too in sync mode), "auto" (within every
      core but one), or "auto:N" (within N threads).
    - prefetch=2: batches kept ready ahead, 1 to 1024 (0 too in sync mode).
    - seed=0: seeds the shuffle and every sample's augmentation, 0 to 2**64-1.
    - shuffle=True: a new order every epoch.
    - drop_last=False: leave out the short last batch.
    - on_error="fail": "fail" raises LoaderError on a bad sample, "skip" leaves it out.
    - rank=None: this process's shard; default the launcher's (OMPI_COMM_WORLD_RANK,
      then RANK), else 0.
    - world_size=None: the number of shards; default the launcher's, else 1.
    - io_depth=8: reads in flight, 1 to 4096 (0 too in sync mode).
    - channels=None: 1 or 3; None is 3 for encoded images, the record's own for raw.
    - mixup=None: MixUp's Beta alpha (> 0), or `Mix(mixup=, cutmix=, prob=)` for
      CutMix too. Batches are then `_MixedBatch` dicts.
    - fields=None: the fields to load, e.g. ["image", "boxes"]; None is all the set has.
    - min_box_visibility=0.0: drop a box with less than this share of its area left
      after the transforms, 0 to 1.
    - max_instances=None: the most boxes/keypoint instances kept per sample, >= 1.
    - map=None: `fn(sample, rng) -> dict` run on every sample. Not with mixup.
    - map_threads=None: the map's threads, 1 to 256 (default 2, only with map).
    - decoded_cache=None: keep decoded images (and their fields) for later epochs, up
      to this many bytes: a string such as "256M" or "8G" (K, M, G, T), an int, or
      "auto" (what the memory bound leaves beside the batch buffers). Batches are the
      same bytes either way; None keeps none.
    - device="cpu": where batches go: "cpu" (numpy arrays), or "cuda" / "cuda:N"
      (images, labels and masks as `DeviceArray`s on that GPU, through pinned memory
      and a copy stream; ragged fields stay numpy). Without a usable GPU, "cuda" is
      a LoaderError at once (docs/gpu-batches.md).
    - dtype="uint8": the images' type: "uint8", "float32", "float16" or "bfloat16"
      (a float is x / 255, or normalised). On the CPU "bfloat16" is a uint16 array of
      the bf16 bit patterns (numpy has no bfloat16).
    - layout="NHWC": "NHWC" or "NCHW".
    - normalize=None: (mean, std) per channel on the 0-1 scale, torchvision's
      convention: (x / 255 - mean) / std, computed in float32. Float dtypes only.

    The keywords of the last release (split, images, masks, the Parquet columns,
    cpu_budget, cutmix, mix_prob, weights, stop, steps) still work, with a
    DeprecationWarning naming the new spelling (docs/python.md, "Migration").

    A bad value is a ValueError naming the argument (`argument 'batch_size': ...`), a
    wrong type a TypeError; data that cannot be opened is a LoaderError.
    """

    @overload
    def __new__(
        cls,
        data: _Data,
        batch_size: int = 64,
        transform: str = "",
        mode: Literal["sync", "async"] = "async",
        workers: int | str = 2,
        prefetch: int = 2,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        on_error: Literal["fail", "skip"] = "fail",
        rank: int | None = None,
        world_size: int | None = None,
        io_depth: int = 8,
        *,
        channels: Literal[1, 3] | None = None,
        mixup: None = None,
        fields: Sequence[str] | None = None,
        min_box_visibility: float = 0.0,
        max_instances: int | None = None,
        map: None = None,
        map_threads: None = None,
        decoded_cache: str | int | None = None,
        device: str = "cpu",
        dtype: Literal["uint8", "float32", "float16", "bfloat16"] = "uint8",
        layout: Literal["NHWC", "NCHW"] = "NHWC",
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> Loader[_Pair | _FieldBatch]: ...
    @overload
    def __new__(
        cls,
        data: _Data,
        batch_size: int = 64,
        transform: str = "",
        mode: Literal["sync", "async"] = "async",
        workers: int | str = 2,
        prefetch: int = 2,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        on_error: Literal["fail", "skip"] = "fail",
        rank: int | None = None,
        world_size: int | None = None,
        io_depth: int = 8,
        *,
        channels: Literal[1, 3] | None = None,
        mixup: None = None,
        fields: Sequence[str] | None = None,
        min_box_visibility: float = 0.0,
        max_instances: int | None = None,
        map: _MapFn,
        map_threads: int | None = None,
        decoded_cache: str | int | None = None,
        device: str = "cpu",
        dtype: Literal["uint8", "float32", "float16", "bfloat16"] = "uint8",
        layout: Literal["NHWC", "NCHW"] = "NHWC",
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> Loader[dict[str, Any]]: ...
    @overload
    def __new__(
        cls,
        data: _Data,
        batch_size: int = 64,
        transform: str = "",
        mode: Literal["sync", "async"] = "async",
        workers: int | str = 2,
        prefetch: int = 2,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        on_error: Literal["fail", "skip"] = "fail",
        rank: int | None = None,
        world_size: int | None = None,
        io_depth: int = 8,
        *,
        channels: Literal[1, 3] | None = None,
        mixup: float | Mix,
        fields: Sequence[str] | None = None,
        min_box_visibility: float = 0.0,
        max_instances: int | None = None,
        map: None = None,
        map_threads: None = None,
        decoded_cache: str | int | None = None,
        device: str = "cpu",
        dtype: Literal["uint8", "float32", "float16", "bfloat16"] = "uint8",
        layout: Literal["NHWC", "NCHW"] = "NHWC",
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> Loader[_MixedBatch]: ...

    def __len__(self) -> int:
        """Batches per epoch."""

    def __iter__(self) -> EpochIterator[_B]:
        """One epoch: the rest of the current one if it was left unfinished (or set by
        `load_state_dict`), else the next."""

    def epoch(self, e: int) -> EpochIterator[_B]:
        """The batches of epoch `e` (0 to 2**64-1) from the first, or from the position
        `load_state_dict` set when it is in epoch `e`."""

    def state_dict(self) -> _StateDict:
        """Where the loader stands, as a small JSON-serialisable dict: loading it into a
        loader made with the same data and settings continues with exactly the batches
        a straight run would give next."""

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Continue from `state` (from `state_dict`): the next `for ... in loader`, or
        `loader.epoch(state["epoch"])`, yields the rest of that epoch. Another world
        size or batch size may load it (elastic resume). TypeError for a non-mapping,
        KeyError for a missing entry, LoaderError for a state these settings cannot go
        on from (another data set, seed or sample count)."""

    def metrics(self) -> _Metrics:
        """Totals since the loader was made: images_per_sec, wait_seconds, samples,
        skipped, batches, peak_buffer_bytes, per-stage busy times, bytes read and buffer
        pool figures."""

    @property
    def batch_size(self) -> int:
        """Samples per batch (the last may have fewer unless drop_last)."""

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of every image."""

    @property
    def classes(self) -> list[str]:
        """Class names, indexed by label."""

    @property
    def samples_per_epoch(self) -> int:
        """Samples per epoch on this rank (before any are skipped)."""

@final
class EpochIterator(Generic[_B]):
    """The batches of one epoch of a `Loader` (made by `Loader.epoch` and
    `iter(loader)`, not by hand). Each `next()` waits with the GIL released; Ctrl-C
    raises KeyboardInterrupt within about 50 ms and loses no batch."""

    def __iter__(self) -> Self: ...
    def __next__(self) -> _B: ...
    def __len__(self) -> int:
        """Batches left in this epoch (at most: under on_error="skip", a batch whose
        samples were all skipped is left out)."""

    @property
    def epoch(self) -> int:
        """The epoch this iterator walks."""

    @property
    def next_batch(self) -> int:
        """The next batch it will deliver."""

@final
class BatchBuffer:
    """The owner of one batch's pooled image buffer: the `base` of the images array
    (and of `mask` and `masks`). The buffer goes back to the pool when the array and every view
    of it are gone. Not made by hand."""

    def __len__(self) -> int:
        """Bytes of the images (N * H * W * C)."""

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batch) of the batch these images belong to."""

@final
class DeviceArray:
    """One array of a `device="cuda"` batch, on the GPU: hand it to
    `torch.from_dlpack`, `jax.dlpack.from_dlpack` or `cupy.from_dlpack` (no copy). The
    consumer's stream waits on the device for the upload. Its memory stays valid while
    it or any tensor made from it lives; the loader reuses it only after. Not made by
    hand (docs/gpu-batches.md)."""

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def dtype(self) -> str:
        """numpy's name of the element type ("bfloat16" for bfloat16)."""
    @property
    def device(self) -> str:
        """"cuda:N"."""
    @property
    def data_ptr(self) -> int:
        """The device address of the first element."""
    @property
    def nbytes(self) -> int: ...

@final
class Digest:
    """A running hash of batches (images, then labels, in order), the same as
    `stoker-load bench --digest`: two runs agree iff they delivered the same pixels
    and labels in the same batches."""

    def __new__(cls) -> Self: ...
    def update(
        self,
        images: NDArray[np.uint8],
        labels: NDArray[np.integer[Any]] | Sequence[int],
        soft_labels: NDArray[np.float32] | None = None,
    ) -> None:
        """Adds one batch: `images` a C-contiguous uint8 array (N, H, W, C), `labels`
        the N labels (any integer array or sequence; each in 0..2**32), and a mixed
        batch's `soft_labels` (C-contiguous float32 (N, classes)). ValueError for a
        layout or a label it cannot hash."""

    def hexdigest(self) -> str:
        """The digest so far, as 32 hex digits (as `stoker-load bench --digest` prints
        it)."""

def pack(
    src: _StrPath,
    out: _StrPath,
    test: bool = False,
    max_side: int | None = None,
    encoding: str = "keep",
) -> _PackStats:
    """Packs an image folder (or an MNIST/CIFAR-10 set: its training split, or its test
    split with `test=True`) into one packed file at `out`, as `stoker-load pack` does.
    `max_side` (1 to 65535) resizes every image whose longer side exceeds it, as PIL's
    `Image.thumbnail` sizes it; `encoding` is "keep" (the bytes as they are), "raw"
    (pixels read without decoding), "png" or "jpeg:Q" (Q from 1 to 100). Returns
    records, classes, record_bytes, file_bytes. ValueError for a bad `max_side` or
    `encoding`; LoaderError when `src` cannot be read or `out` written."""

# The defaults are `...` where the runtime signature shows `...` (stubtest compares
# them); the docstrings give their values.
def gen_shapes(
    out: _StrPath, count: int, size: int = ..., classes: int = ..., seed: int = ...
) -> None:
    """Writes `count` (1 to 10,000,000) procedurally drawn JPEGs of `size` x `size`
    pixels (8 to 4096, default 64) into an image folder at `out`, one sub-folder per
    class (`classes`: 1 to 10, default 10), as `stoker-load gen shapes` does. The same
    `seed` (default 0) draws the same images."""

def gen_scenes(
    out: _StrPath,
    count: int,
    width: int = ...,
    height: int = ...,
    max_shapes: int = ...,
    classes: int = ...,
    seed: int = ...,
) -> None:
    """Writes `count` (1 to 10,000,000) synthetic scenes of `width` x `height` pixels
    (16 to 4096 each, default 64), each with 1 to `max_shapes` (1 to 64, default 4)
    shapes of `classes` (1 to 10, default 10) kinds, into `out`: `images/`, `masks/`
    and the manifest `train.jsonl` with boxes, tags, captions and keypoints, as
    `stoker-load gen scenes` does. `seed` defaults to 0."""

def cache_dir() -> Path:
    """The folder for generated demo data, as the Rust tools use it: `$STOKER_CACHE`,
    else `$XDG_CACHE_HOME/stoker`, else `~/.cache/stoker`."""

def decoder() -> str:
    """The JPEG decoder this build of the module uses: "libjpeg-turbo X.Y.Z" (the
    crop-window, DCT-scaled fast path; the wheel carries it inside) or "zune-jpeg" (a
    build from source on a machine without libjpeg-turbo)."""

def map_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The `numpy.random.Generator` (PCG64) a `map` function gets for sample `index` of
    `epoch` under `seed`: to redo one sample's draws outside the loader."""

# TokenLoader: token streams for language models (docs/tokens.md).

class _TokenBatch(TypedDict):
    tokens: NDArray[np.int32]
    """int32 (batch_size, seq_len + 1): the ids of `batch_size` windows."""
    positions: NDArray[np.int32]
    """int32 (batch_size, seq_len + 1): each token's place in its document (0 after
    an EOS)."""

class _TokenState(TypedDict):
    seed: int
    epoch: int
    batches: int
    doc: int
    offset: int
    seq_len: int
    batch_size: int
    rank: int
    world_size: int
    shuffle: bool
    documents: int
    elastic: NotRequired[dict[str, Any]]

@final
class TokenLoader:
    """Batches of packed token windows: documents from Parquet files, folders or URLs
    (`text_column`), JSON lines, text files, or a nanoGPT `.bin` file, tokenized with a
    `tokenizer.json` on `workers` threads; each document then EOS, cut into windows of
    `seq_len + 1` tokens with a stride of `seq_len`, `batch_size` a batch. Iterating
    gives one epoch; the batches are the same in either mode and for any number of
    workers, and `state_dict()`/`load_state_dict()` resume exactly."""

    def __new__(
        cls,
        data: _StrPath | Sequence[_StrPath],
        tokenizer: _StrPath | None = None,
        seq_len: int = 1024,
        batch_size: int = 8,
        text_column: str = "text",
        eos: str | int | None = None,
        mode: Literal["sync", "async"] = "async",
        workers: int = 2,
        seed: int = 0,
        shuffle: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        token_dtype: Literal["uint16", "uint32"] = "uint16",
        chunk_bytes: int = 65536,
        weights: Sequence[float] | None = None,
        stop: Literal["all_exhausted", "first_exhausted"] = "all_exhausted",
    ) -> Self: ...
    @property
    def documents(self) -> int:
        """Documents in the data set (windows, for a `.bin` file)."""
    @property
    def eos_id(self) -> int | None:
        """The EOS id appended to every document."""
    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration is in."""
    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` at the next iteration."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> _TokenBatch: ...
    def state_dict(self) -> _TokenState:
        """Where the loader stands (JSON-able)."""
    def load_state_dict(
        self, state: _TokenState | Mapping[str, Any] | Sequence[_TokenState | Mapping[str, Any]]
    ) -> None:
        """Continues from `state` at the next iteration; a list of every rank's states,
        saved at another world size, takes the epoch over (an elastic resume)."""
