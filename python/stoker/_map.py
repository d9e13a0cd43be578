"""The Python side of `stoker.Loader(map=fn)`: one sample of a batch as the dict
`fn` gets, the call itself (run by the loader's map threads), and the collation of
the samples `fn` returned into a batch, by the rules of the built-in fields.

The loader's map threads call `run` for each sample, which also copies the arrays
`fn` returned into the batch's arrays (`place`), so the copies run on the map threads,
in parallel and while each output is still in cache; the consumer's thread calls
`collate` once the batch's samples are back. Nothing here keeps state between
batches but the idle memory of `_stoker.MapBuffers`, so any number of threads may
run `run` at once (with or without a GIL)."""

import traceback

import numpy as np
from numpy.random.bit_generator import ISeedSequence

# The native module has no stub of its own (the package stub covers `stoker`).
from ._stoker import collate_layout as _collate_layout  # type: ignore[import-not-found]

# Padded arrays of the built-in fields keep their built-in count names.
_COUNT_NAMES = {
    "boxes": "box_count",
    "box_labels": "box_count",
    "masks": "box_count",
    "keypoints": "keypoint_count",
}
# Keys of the batch dict that become part of another key's sample value.
_COUNTS = {"box_count", "keypoint_count"}


class MapOutputError(Exception):
    """What `fn` returned for sample `index` (its index in the data set) cannot be
    collated with the batch's other samples; the message says which key and why."""

    def __init__(self, index, message):
        super().__init__(message)
        self.index = index


def sample_of(batch, i):
    """Sample `i` of a loader batch (a dict), its padding removed: numpy arrays (views
    of the batch where possible), `text` a str, `raw` bytes."""
    out = {}
    for key, value in batch.items():
        if key in _COUNTS:
            continue
        if key in ("boxes", "box_labels", "masks"):
            value = value[i, : batch["box_count"][i]]
        elif key == "keypoints":
            value = value[i, : batch["keypoint_count"][i]]
        else:
            value = value[i]
        out[key] = value
    return out


class _Words(ISeedSequence):
    """A seed sequence that hands PCG64 four given 64-bit words: the sample's step
    stream (Rust's `step_rng(seed, epoch, index)`), drawn in Rust. numpy's own
    SeedSequence would cost about six times as long per sample."""

    __slots__ = ("words",)

    def __init__(self, words):
        self.words = np.array(words, dtype=np.uint64)

    def generate_state(self, n_words, dtype=np.uint32):
        # PCG64 asks for exactly the four words, as uint64: skip the general path,
        # which costs most of a generator's making.
        if n_words == 4 and dtype is np.uint64:
            return self.words.copy()
        words = self.words if np.dtype(dtype) == np.uint64 else self.words.view(np.uint32)
        return np.resize(words, n_words).astype(dtype)


def rng_of(words):
    """A fresh numpy Generator (PCG64) seeded by four 64-bit words."""
    return np.random.Generator(np.random.PCG64(_Words(words)))


def place(rows, buffers, n, out, i, same):
    """`out` with each array value copied into row `i` of its key's array in `rows`
    and replaced by a view of that row, and the keys so placed.

    `rows` is the batch's dict (made empty by the loader, shared by its threads) of
    the arrays being filled: for each key, an array of the batch's `n` rows, shaped
    and typed as the first sample to return the key had it, whose memory comes from
    the loader's `buffers` (`_stoker.MapBuffers`) and goes back there once the batch
    is gone. A sample whose value has another shape or dtype keeps its own array
    (`collate` then pads or refuses the key, by the usual rules). Left as they are:
    values handed back untouched (`same`), anything not a plain ndarray, object
    arrays, empty ones, and keys that are padded in any case (the built-in padded
    fields, and a key returned with its count), whose rows would be copied again
    into the padded array."""
    placed = []
    for key, v in out.items():
        if (
            type(v) is not np.ndarray
            or key in same
            or not isinstance(key, str)
            or v.dtype.hasobject
            or v.size == 0
            or key in _COUNT_NAMES
            or f"{key}_count" in out
        ):
            continue
        filling = rows.get(key)
        if filling is None:
            block = buffers.take(n * v.nbytes)
            made = block.view(v.dtype).reshape((n,) + v.shape)
            # Another thread may have made one first: one dict operation decides, with
            # or without a GIL (the loser's block goes back idle).
            filling = rows.setdefault(key, made)
        if filling.dtype != v.dtype or filling.shape[1:] != v.shape:
            continue
        row = filling[i, ...]
        np.copyto(row, v)
        placed.append((key, row))
    if not placed:
        return out, ()
    # A copy: `fn` may keep the dict it returned (a cache), which must not end up
    # viewing a batch whose memory is reused.
    out = dict(out)
    for key, row in placed:
        out[key] = row
    return out, frozenset(key for key, _ in placed)


def run(fn, batch, i, words, rows, buffers):
    """Calls `fn(sample, rng)` for sample `i` of `batch`; its rng is a fresh generator
    seeded by `words`, the sample's (seed, epoch, index) stream, so the result is the
    same on any thread. Returns `fn`'s dict (its arrays copied into the batch's
    `rows`, see `place`, and viewed from there), the keys whose value `fn` handed
    back as it got it (the batch's own view) and the keys copied into `rows`:
    `collate` need copy neither again."""
    sample = sample_of(batch, i)
    out = fn(sample, rng_of(words))
    if not isinstance(out, dict):
        raise TypeError(f"map must return a dict, it returned {type(out).__name__}")
    same = [k for k, v in out.items() if sample.get(k) is v]
    out, placed = place(rows, buffers, len(batch["image"]), out, i, same)
    return out, same, placed


def describe(exc):
    """An exception raised by `fn`, then its traceback, for the error message."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    return f"{type(exc).__name__}: {exc}\n{tb}"


def _kind(v):
    """str, bytes or an array: a key must be the same kind in every sample."""
    if isinstance(v, str):
        return "str"
    if isinstance(v, bytes):
        return "bytes"
    return "array"


def collate(results, indices, batch, whole, rows):
    """The samples' dicts (in batch order; `results` holds `run`'s triples) as one
    batch dict. When no sample was left out (`whole`), a key every sample returned
    untouched is `batch`'s own array, with no copy, and a key every sample's value
    was copied into `rows` (see `place`) is that array; str values become a list, and
    bytes values a list; arrays are collated by the loader's own rules
    (docs/samples.md, "Collation"): stacked, or padded along the first axis with the
    lengths in a count (`<key>_count`; `box_count`, `keypoint_count` for the built-in
    fields, which always have theirs, as does a key whose count `fn` returns).
    Every sample must return str keys, the same keys, and for each key the same kind
    (str, bytes or array), dtype and trailing axes; otherwise MapOutputError naming
    the sample (by `indices`, the samples' indices in the data set), the key and
    what is wrong."""
    mapped = _collate(results, indices, batch, whole, rows)
    # Every sample is back, so no thread places into these arrays again: let the
    # batch dict be what keeps them, so that their memory is idle again (and reused)
    # as soon as the caller drops the batch, whichever thread still holds `rows`.
    rows.clear()
    return mapped


def _collate(results, indices, batch, whole, rows):
    """`collate` without its last step."""
    outs = [o for o, _, _ in results]
    for index, o in zip(indices, outs):
        for k in o:
            if not isinstance(k, str):
                raise MapOutputError(
                    index, f"map returned the key {k!r} ({type(k).__name__}): keys must be str"
                )
    keys = list(outs[0])
    for index, o in zip(indices, outs):
        if list(o) != keys and set(o) != set(keys):
            extra, missing = sorted(set(o) - set(keys)), sorted(set(keys) - set(o))
            raise MapOutputError(
                index,
                f"map returned keys {sorted(o)} but sample {indices[0]}'s were {sorted(keys)}"
                f" (extra: {extra}, missing: {missing}): every sample must return the same keys",
            )
    mapped = {}
    # Arrays go through the loader's collation rules (stoker_loader::array::layout,
    # via _stoker.collate_layout): which to stack, which to pad and with what, and
    # which counts the batch gets.
    arrays = {}
    for key in keys:
        if (
            whole
            and key not in _COUNT_NAMES
            and isinstance(batch.get(key), np.ndarray)
            and all(key in same for _, same, _ in results)
        ):
            mapped[key] = batch[key]
            continue
        values = [o[key] for o in outs]
        kind = _kind(values[0])
        for index, v in zip(indices, values):
            if _kind(v) != kind:
                raise MapOutputError(
                    index,
                    f"'{key}' is {type(v).__name__} but sample {indices[0]}'s is "
                    f"{type(values[0]).__name__}: a "
                    f"key is str in every sample, bytes in every sample, or an array in every one",
                )
        if kind != "array":
            mapped[key] = values
            continue
        column = []
        for index, v in zip(indices, values):
            try:
                column.append(np.asarray(v))
            except Exception as e:
                raise MapOutputError(
                    index, f"'{key}' cannot be made a numpy array: {type(e).__name__}: {e}"
                ) from e
        arrays[key] = column
    if not arrays:
        return mapped
    described = [
        [(key, str(a[i].dtype), a[i].shape, _int_of(a[i])) for key, a in arrays.items()]
        for i in range(len(outs))
    ]
    try:
        plan = _collate_layout(described)
    except ValueError as e:
        pos, key, reason = e.args
        raise MapOutputError(
            indices[pos], f"'{key}' {reason.replace('the first sample', f'sample {indices[0]}')}"
        ) from None
    for key, how, arg in plan:
        if how == "count":
            mapped[key] = np.array(arg, dtype=np.int32)
        elif how == "stack":
            filled = rows.get(key)
            if whole and filled is not None and all(key in p for _, _, p in results):
                mapped[key] = filled
            else:
                mapped[key] = np.stack(arrays[key])
        else:
            longest, fill, _ = arg
            column = arrays[key]
            first = column[0]
            padded = np.full((len(column), longest) + first.shape[1:], fill, dtype=first.dtype)
            for row, a in zip(padded, column):
                row[: a.shape[0]] = a
            mapped[key] = padded
    return mapped


def _int_of(a):
    """The value of an integer scalar (a count a map may give), else None."""
    if a.ndim == 0 and a.dtype.kind in "iu":
        return int(a)
    return None
