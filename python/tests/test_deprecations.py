"""The keywords `stoker.Loader` took before the sources carried their options
(python/stoker/_compat.py): each still works, warns with a DeprecationWarning that
names the new spelling, and gives the same batches as the new spelling."""

import re
import warnings

import numpy as np
import pytest

import stoker
from test_coco import make_set
from test_parquet import write_hf


def same_batches(a, b):
    """Two loaders' first epochs, batch for batch, array for array."""
    got, want = list(a.epoch(0)), list(b.epoch(0))
    assert len(got) == len(want) > 0
    for x, y in zip(got, want):
        if isinstance(x, tuple):
            x, y = dict(enumerate(x)), dict(enumerate(y))
        assert sorted(x) == sorted(y)
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k], err_msg=str(k))
            else:
                assert x[k] == y[k], k


def old(keyword, new, make):
    """`make()` (a Loader with the old keyword) under pytest.warns: the warning names
    `keyword` and its new spelling `new`, and points at this file (the caller)."""
    pattern = rf"stoker\.Loader\({keyword}=\.\.\.\) is deprecated: use {re.escape(new)}"
    with pytest.warns(DeprecationWarning, match=pattern) as caught:
        loader = make()
    assert any(w.filename == __file__ for w in caught), [w.filename for w in caught]
    return loader


KW = dict(batch_size=8, shuffle=True, seed=4, transform="rrc:24,flip", mode="sync")


def test_split(shapes):
    a = old("split", "stoker.Data(path, split=...)", lambda: stoker.Loader(shapes, split="train", **KW))
    same_batches(a, stoker.Loader(stoker.Data(shapes, split="train"), **KW))


def test_images_of_a_coco_file(tmp_path):
    path, images, _ = make_set(tmp_path)
    kw = dict(batch_size=2, shuffle=False, mode="sync")
    a = old("images", "stoker.Coco(json, images=...)", lambda: stoker.Loader(path, images=images, **kw))
    same_batches(a, stoker.Loader(stoker.Coco(path, images), **kw))


def test_masks_of_pairs(tmp_path):
    stoker.gen_scenes(tmp_path / "s", 6, width=32, height=32, seed=2)
    kw = dict(batch_size=3, shuffle=False, mode="sync")
    a = old(
        "masks",
        "stoker.Pairs(images, masks)",
        lambda: stoker.Loader(tmp_path / "s" / "images", masks=tmp_path / "s" / "masks", **kw),
    )
    same_batches(a, stoker.Loader(stoker.Pairs(tmp_path / "s" / "images", tmp_path / "s" / "masks"), **kw))


@pytest.fixture(scope="module")
def parquet(shapes, tmp_path_factory):
    out = tmp_path_factory.mktemp("pq") / "data"
    write_hf(shapes, out)
    return out


@pytest.mark.parametrize(
    "keyword, value",
    [("image_column", "image"), ("label_column", "label"), ("text_column", "text"), ("box_format", "xywh")],
)
def test_parquet_columns(parquet, keyword, value):
    kw = dict(batch_size=8, shuffle=False, mode="sync")
    a = old(
        keyword,
        f"stoker.Parquet(path, {keyword}=...)",
        lambda: stoker.Loader(parquet, **{keyword: value}, **kw),
    )
    same_batches(a, stoker.Loader(stoker.Parquet(parquet, **{keyword: value}), **kw))


@pytest.mark.parametrize("keyword", ["boxes_column", "box_classes_column", "labels_column", "mask_column"])
def test_parquet_columns_the_files_lack_fail_alike(parquet, keyword):
    with pytest.raises(stoker.LoaderError) as new:
        stoker.Loader(stoker.Parquet(parquet, **{keyword: "nowhere"}))
    with pytest.raises(stoker.LoaderError) as was:
        old(keyword, f"stoker.Parquet(path, {keyword}=...)", lambda: stoker.Loader(parquet, **{keyword: "nowhere"}))
    assert str(was.value) == str(new.value)


def test_cpu_budget(shapes):
    a = old("cpu_budget", 'workers="auto:N"', lambda: stoker.Loader(shapes, workers="auto", cpu_budget=2, **{**KW, "mode": "async"}))
    b = stoker.Loader(shapes, workers="auto:2", **{**KW, "mode": "async"})
    same_batches(a, b)
    with pytest.raises(ValueError, match="cpu_budget is the budget of workers"):
        old("cpu_budget", 'workers="auto:N"', lambda: stoker.Loader(shapes, workers=2, cpu_budget=2))


def test_cutmix_and_mix_prob(shapes):
    def make():
        return stoker.Loader(shapes, mixup=0.2, cutmix=1.0, mix_prob=0.3, **KW)

    with pytest.warns(DeprecationWarning, match=re.escape("use mixup=stoker.Mix(prob=...)")):
        a = old("cutmix", "mixup=stoker.Mix(cutmix=...)", make)
    same_batches(a, stoker.Loader(shapes, mixup=stoker.Mix(mixup=0.2, cutmix=1.0, prob=0.3), **KW))


def test_weights_stop_and_steps(shapes, many):
    kw = dict(batch_size=4, seed=2, transform="resize:16", mode="sync")
    for keyword, old_kw, new_kw in [
        ("weights", dict(weights=[0.6, 0.4]), dict(weights=[0.6, 0.4])),
        ("stop", dict(stop="first_exhausted"), dict(stop="first_exhausted")),
        ("steps", dict(stop="never", steps=5), dict(stop="never", epoch_batches=5)),
    ]:
        with warnings.catch_warnings():
            # stop="never" beside steps= warns too: that one is checked above.
            warnings.simplefilter("ignore", DeprecationWarning)
            a = old(
                keyword,
                f"data=stoker.Mixture(sources, {'epoch_batches' if keyword == 'steps' else keyword}=...)",
                lambda: stoker.Loader([shapes, many], **old_kw, **kw),
            )
        same_batches(a, stoker.Loader(stoker.Mixture([shapes, many], **new_kw), **kw))


def test_the_mixtures_steps(shapes, many):
    kw = dict(batch_size=4, seed=2, transform="resize:16", mode="sync")
    with pytest.warns(DeprecationWarning, match=re.escape("stoker.Mixture(steps=...) is deprecated: use epoch_batches")):
        m = stoker.Mixture([shapes, many], stop="never", steps=3)
    assert m.epoch_batches == 3
    same_batches(
        stoker.Loader(m, **kw),
        stoker.Loader(stoker.Mixture([shapes, many], stop="never", epoch_batches=3), **kw),
    )


def test_a_keyword_that_never_was_is_still_a_type_error(shapes):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bacth_size'"):
        with pytest.warns(DeprecationWarning, match="cutmix"):
            stoker.Loader(shapes, bacth_size=8, cutmix=1.0)
