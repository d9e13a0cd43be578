"""Sources that carry their own options (stoker.Data, Parquet, Coco, Pairs, Packed),
stoker.Mixture and stoker.Mix: what they take, and that they read what a plain path
with the same options reads."""

import numpy as np
import pytest

import stoker
from test_deprecations import same_batches

KW = dict(batch_size=8, shuffle=True, seed=5, transform="rrc:24,flip", mode="sync")


@pytest.fixture(scope="module")
def packed(shapes, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed") / "shapes.pack"
    stoker.pack(shapes, out)
    return out


def test_a_packed_file_reads_the_same_with_and_without_a_memory_map(packed):
    plain = stoker.Loader(packed, **KW)
    same_batches(stoker.Loader(stoker.Packed(packed), **KW), plain)
    same_batches(stoker.Loader(stoker.Data(packed, mmap=True), **KW), plain)
    same_batches(stoker.Loader(stoker.Packed(packed, mmap=False), **KW), plain)


def test_a_source_in_a_list_and_in_a_mixture(shapes, packed):
    a = stoker.Loader([stoker.Data(shapes), stoker.Packed(packed)], **KW)
    b = stoker.Loader(stoker.Mixture([shapes, packed]), **KW)
    same_batches(a, b)
    assert a.samples_per_epoch == 120


def test_sources_check_their_types_where_they_are_made(shapes):
    with pytest.raises(TypeError, match="path must be a path or URL"):
        stoker.Data(5)
    with pytest.raises(TypeError, match="mmap must be a bool"):
        stoker.Data(shapes, mmap="yes")
    with pytest.raises(TypeError, match="split must be a str"):
        stoker.Data(shapes, split=1)
    with pytest.raises(TypeError, match="images must be a path"):
        stoker.Coco("x.json", None)
    with pytest.raises(TypeError, match="text_column must be a str"):
        stoker.Parquet(shapes, text_column=3)
    with pytest.raises(TypeError, match="sources must be a list"):
        stoker.Mixture(shapes)
    assert repr(stoker.Data("a/b", split="test")) == "stoker.Data('a/b', split='test')"


def test_bad_values_are_the_loaders_value_errors(shapes):
    with pytest.raises(ValueError, match="argument 'data': .*box_format: box format 'yxyx'"):
        stoker.Loader(stoker.Parquet(shapes, box_format="yxyx"))
    with pytest.raises(ValueError, match="argument 'data': .*cache_size"):
        stoker.Loader(stoker.Data(shapes, cache_size="lots"))
    with pytest.raises(ValueError, match="argument 'data': an empty list"):
        stoker.Loader([])
    with pytest.raises(TypeError, match=r"^argument 'data': must be a path"):
        stoker.Loader([shapes, 5])


def test_mix_takes_numbers_not_bools(shapes):
    with pytest.raises(TypeError, match=r"^argument 'mixup': stoker\.Mix cutmix: .*not bool"):
        stoker.Loader(shapes, mixup=stoker.Mix(cutmix=True))
    with pytest.raises(TypeError, match=r"^argument 'mixup'"):
        stoker.Loader(shapes, mixup="0.2")
    batch = next(iter(stoker.Loader(shapes, batch_size=4, mixup=stoker.Mix(cutmix=np.float64(1.0)))))
    assert sorted(batch) == ["image", "label", "soft_labels"]
