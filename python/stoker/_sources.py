"""What `stoker.Loader` reads, beyond a plain path: the data sets that carry options
of their own (`Data` and its kinds `Parquet`, `Coco`, `Pairs`, `Packed`), several data
sets as one (`Mixture`), and MixUp/CutMix together (`Mix`).

These objects only hold what they were given (checking types, so a mistake shows
where it was made); the loader judges the values when it opens the data
(python/src/args.rs reads `_options()` and `_mixture()`)."""

import os
import warnings


def _path(name, value):
    try:
        return os.fspath(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a path or URL (str or os.PathLike), not {type(value).__name__}"
        ) from None


def _str(name, value):
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    return value


class Data:
    """A data set at a path or URL, opened by detection as a plain path is, with the
    reading options that belong to it:

    - split=None: "train"/"test" for MNIST/CIFAR-10, any split name for a Parquet set
      in the Hub's layout; None is the training split.
    - mmap=False: read a packed file through a memory map (faster per record; a file
      truncated while open then kills the process with SIGBUS).
    - cache=None: a folder that keeps whole remote objects (tar shards, images) for
      later epochs and runs; cache_size=None: its bound, an int of bytes or a str such
      as "20G" (default 10G).
    """

    _kind = "Data"

    def __init__(self, path, *, split=None, mmap=False, cache=None, cache_size=None):
        self.path = _path("path", path)
        self.split = _str("split", split)
        if not isinstance(mmap, bool):
            raise TypeError(f"mmap must be a bool, not {type(mmap).__name__}")
        self.mmap = mmap
        self.cache = None if cache is None else _path("cache", cache)
        if cache_size is not None and (
            isinstance(cache_size, bool) or not isinstance(cache_size, (int, str))
        ):
            raise TypeError(
                f"cache_size must be an int of bytes or a str such as '20G', "
                f"not {type(cache_size).__name__}"
            )
        self.cache_size = cache_size
        self._columns = {}

    def _options(self):
        """What python/src/args.rs reads to open it (stoker_loader's OpenOptions)."""
        return {
            "path": self.path,
            "split": self.split,
            "mmap": self.mmap,
            "cache": self.cache,
            "cache_size": self.cache_size,
            **self._columns,
        }

    def __repr__(self):
        given = {k: v for k, v in self._options().items() if k != "path" and v not in (None, False)}
        args = "".join(f", {k}={v!r}" for k, v in given.items())
        return f"stoker.{self._kind}({self.path!r}{args})"


class Parquet(Data):
    """Parquet files (a file, a folder, a glob, a Hub repository's layout) and the
    columns to read (docs/parquet.md): the image and label columns, and the optional
    text, boxes (with their format, "xyxy" or "xywh", and classes), multi-label and
    mask columns; `split` picks a Hub split by name."""

    _kind = "Parquet"

    def __init__(
        self,
        path,
        image_column="image",
        label_column="label",
        text_column=None,
        boxes_column=None,
        box_format="xyxy",
        box_classes_column=None,
        labels_column=None,
        mask_column=None,
        split=None,
        *,
        cache=None,
        cache_size=None,
    ):
        super().__init__(path, split=split, cache=cache, cache_size=cache_size)
        columns = dict(
            image_column=image_column,
            label_column=label_column,
            text_column=text_column,
            boxes_column=boxes_column,
            box_format=box_format,
            box_classes_column=box_classes_column,
            labels_column=labels_column,
            mask_column=mask_column,
        )
        for name, value in columns.items():
            _str(name, value)
        self._columns = columns


class Coco(Data):
    """A COCO annotation file (`instances_*.json`, `person_keypoints_*.json`) and the
    folder (path or URL) of the images its `file_name`s are relative to."""

    _kind = "Coco"

    def __init__(self, json, images, *, cache=None, cache_size=None):
        super().__init__(json, cache=cache, cache_size=cache_size)
        self._columns = {"images": _path("images", images)}


class Pairs(Data):
    """Segmentation pairs: a folder of images and a folder of masks paired by stem
    (paths or URLs)."""

    _kind = "Pairs"

    def __init__(self, images, masks, *, cache=None, cache_size=None):
        super().__init__(images, cache=cache, cache_size=cache_size)
        self._columns = {"masks": _path("masks", masks)}


class Packed(Data):
    """A packed file (`stoker-load pack`, `stoker.pack`), read through a memory map
    unless `mmap=False`."""

    _kind = "Packed"

    def __init__(self, path, mmap=True, *, cache=None, cache_size=None):
        super().__init__(path, mmap=mmap, cache=cache, cache_size=cache_size)


class Mixture:
    """Several data sets as one (docs/mixtures.md): each position's data set is drawn
    by weight from a seeded counter.

    - sources: a list of paths or sources (`Data`, `Parquet`, ...).
    - weights=None: one per data set, finite, >= 0, not all 0; None is equal weights.
    - stop=None: "first_exhausted", "all_exhausted" (default) or "never" (needs
      epoch_batches).
    - epoch_batches=None: batches per epoch on each rank, >= 1 (with stop="never").

    `steps=` is the old name of `epoch_batches` (deprecated).
    """

    def __init__(self, sources, weights=None, stop=None, epoch_batches=None, *, steps=None):
        if steps is not None:
            warnings.warn(
                "stoker.Mixture(steps=...) is deprecated: use epoch_batches=...",
                DeprecationWarning,
                stacklevel=2,
            )
            if epoch_batches is not None:
                raise TypeError("give epoch_batches or its old name steps, not both")
            epoch_batches = steps
        if isinstance(sources, (str, os.PathLike, Data)):
            raise TypeError("sources must be a list of paths or sources")
        self.sources = list(sources)
        self.weights = None if weights is None else list(weights)
        self.stop = _str("stop", stop)
        self.epoch_batches = epoch_batches

    def _mixture(self):
        """What python/src/args.rs reads."""
        return {
            "sources": self.sources,
            "weights": self.weights,
            "stop": self.stop,
            "epoch_batches": self.epoch_batches,
        }

    def __repr__(self):
        return (
            f"stoker.Mixture({self.sources!r}, weights={self.weights!r}, stop={self.stop!r}, "
            f"epoch_batches={self.epoch_batches!r})"
        )


class Mix:
    """MixUp and CutMix on each finished batch (`Loader(mixup=stoker.Mix(...))`):
    their Beta alphas (> 0; None leaves one out) and `prob`, the chance of CutMix
    when both are given (0 to 1, default 0.5). `mixup=0.2` alone is
    `stoker.Mix(mixup=0.2)`."""

    def __init__(self, mixup=None, cutmix=None, prob=None):
        self.mixup = mixup
        self.cutmix = cutmix
        self.prob = prob

    def __repr__(self):
        return f"stoker.Mix(mixup={self.mixup!r}, cutmix={self.cutmix!r}, prob={self.prob!r})"
