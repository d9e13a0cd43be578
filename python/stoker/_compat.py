"""The keywords `stoker.Loader` took before the sources carried their own options:
each still works for this release, moved to its new place with a DeprecationWarning
that names the new spelling. The native constructor calls `upgrade` when a call
has a keyword that is not a parameter of the signature."""

import copy
import warnings

from ._sources import Data, Mix, Mixture

# Old keyword -> its new spelling, for the warning (docs/python.md, "Migration").
NEW_SPELLING = {
    "split": "stoker.Data(path, split=...) (or stoker.Parquet(path, split=...))",
    "images": "stoker.Coco(json, images=...)",
    "masks": "stoker.Pairs(images, masks)",
    "image_column": "stoker.Parquet(path, image_column=...)",
    "label_column": "stoker.Parquet(path, label_column=...)",
    "text_column": "stoker.Parquet(path, text_column=...)",
    "boxes_column": "stoker.Parquet(path, boxes_column=...)",
    "box_format": "stoker.Parquet(path, box_format=...)",
    "box_classes_column": "stoker.Parquet(path, box_classes_column=...)",
    "labels_column": "stoker.Parquet(path, labels_column=...)",
    "mask_column": "stoker.Parquet(path, mask_column=...)",
    "cpu_budget": 'workers="auto:N"',
    "cutmix": "mixup=stoker.Mix(cutmix=...)",
    "mix_prob": "mixup=stoker.Mix(prob=...)",
    "weights": "data=stoker.Mixture(sources, weights=...)",
    "stop": "data=stoker.Mixture(sources, stop=...)",
    "steps": "data=stoker.Mixture(sources, epoch_batches=...)",
}

# The options a plain path took from the Loader: a source's now.
_SOURCE_KEYS = [k for k in NEW_SPELLING if k.endswith("_column")] + [
    "split",
    "images",
    "masks",
    "box_format",
]


def _named(name, make):
    """`make()`, its TypeError naming the old argument."""
    try:
        return make()
    except TypeError as e:
        raise TypeError(f"argument '{name}': {e}") from None


def upgrade(args, kwargs):
    """`(args, kwargs)` of a `Loader(...)` call with the old keywords in their new
    places (the others untouched, so the binder reports an unknown one)."""
    old = [k for k in kwargs if k in NEW_SPELLING]
    if not old:
        return args, kwargs
    for k in old:
        # stacklevel 2: the caller of stoker.Loader (the constructor is native).
        warnings.warn(
            f"stoker.Loader({k}=...) is deprecated: use {NEW_SPELLING[k]}",
            DeprecationWarning,
            stacklevel=2,
        )
    kw = dict(kwargs)
    args = tuple(args)
    if "data" in kw:
        data = kw.pop("data")
    elif args:
        data, args = args[0], args[1:]
    else:
        return args, kwargs  # the binder says data is missing
    options = {k: kw.pop(k) for k in _SOURCE_KEYS if k in kw}
    if options:

        def with_options(d):
            if isinstance(d, Data):
                src = copy.copy(d)
                src._columns = dict(d._columns)
            else:
                src = _named("data", lambda: Data(d))
            for k, v in options.items():
                if k == "split":
                    src.split = _named(k, lambda: Data(".", split=v).split)
                elif k in ("images", "masks"):
                    src._columns[k] = None if v is None else _named(k, lambda: Data(v).path)
                else:
                    src._columns[k] = v
            return src

        if isinstance(data, Mixture):
            data.sources = [with_options(d) for d in data.sources]
        elif isinstance(data, (list, tuple)):
            data = [with_options(d) for d in data]
        else:
            data = with_options(data)
    if "cpu_budget" in kw:
        budget = kw.pop("cpu_budget")
        workers = kw.get("workers", args[3] if len(args) > 3 else 2)
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise TypeError(f"argument 'cpu_budget': must be an int, got {type(budget).__name__}")
        if not (isinstance(workers, str) and workers.strip().lower() == "auto"):
            raise ValueError('cpu_budget is the budget of workers="auto"; give one or the other')
        workers = f"auto:{budget}"
        if len(args) > 3:
            args = args[:3] + (workers,) + args[4:]
        else:
            kw["workers"] = workers
    if "cutmix" in kw or "mix_prob" in kw:
        alpha = kw.pop("mixup", None)
        kw["mixup"] = Mix(mixup=alpha, cutmix=kw.pop("cutmix", None), prob=kw.pop("mix_prob", None))
    if any(k in kw for k in ("weights", "stop", "steps")):
        sources = data if isinstance(data, (list, tuple)) else [data]
        data = Mixture(
            sources,
            weights=kw.pop("weights", None),
            stop=kw.pop("stop", None),
            epoch_batches=kw.pop("steps", None),
        )
    return (data,) + args, kw
