"""Mixtures (several data sets by weight), elastic resume at another world size, and
rank/world_size from the launcher's environment."""

import hashlib
import json
import re

import pytest

import stoker
from conftest import digest


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    a, b = root / "a", root / "b"
    stoker.gen_shapes(a, 40, size=16, classes=3, seed=1)
    stoker.gen_shapes(b, 24, size=16, classes=3, seed=2)
    return a, b


def ids(batches):
    """One id per sample: a hash of its pixels (no transform, so a sample's pixels are
    its own)."""
    return [hashlib.sha1(img.tobytes()).hexdigest() for images, _ in batches for img in images]


def all_ids(path):
    return set(ids(stoker.Loader(path, batch_size=8, shuffle=False).epoch(0)))


def test_all_exhausted_gives_every_sample_of_both_and_is_deterministic(two):
    a, b = two
    kw = dict(batch_size=8, transform="rrc:12,flip", seed=3)
    mix = stoker.Mixture([a, b], weights=[0.7, 0.3], stop="all_exhausted")
    want = digest(stoker.Loader(mix, mode="sync", **kw).epoch(0))
    for workers in (1, 2, 4):
        assert digest(stoker.Loader(mix, mode="async", workers=workers, **kw).epoch(0)) == want
    loader = stoker.Loader(stoker.Mixture([str(a), str(b)], weights=[0.7, 0.3]), **kw)
    assert len(loader) == 8  # (40 + 24) / 8
    assert loader.samples_per_epoch == 64
    other = stoker.Loader(stoker.Mixture([a, b], weights=[0.3, 0.7]), **kw)
    assert digest(other.epoch(0)) != want


def test_mid_epoch_resume_is_exact_and_weights_may_change(two):
    a, b = two
    kw = dict(batch_size=8, seed=3)
    mix = stoker.Mixture([a, b], weights=[0.7, 0.3], stop="never", epoch_batches=5)
    straight = stoker.Loader(mix, **kw)
    whole = [digest([x]) for e in range(2) for x in straight.epoch(e)]
    first = stoker.Loader(mix, **kw)
    got = []
    for x in first.epoch(0):
        got.append(digest([x]))
        if len(got) == 3:
            break
    state = json.loads(json.dumps(first.state_dict()))
    assert "mixture" in state
    second = stoker.Loader(mix, **kw)
    second.load_state_dict(state)
    for _ in range(2):
        got += [digest([x]) for x in second]
    assert got == whole
    # New weights apply from the resume point: only b's samples from there on.
    only_b = stoker.Loader(
        stoker.Mixture([a, b], weights=[0.0, 1.0], stop="never", epoch_batches=5), **kw
    )
    only_b.load_state_dict(state)
    rest = ids(only_b)
    assert len(rest) == 2 * 8  # the 2 steps left of epoch 0
    assert set(rest) <= all_ids(b)
    mixed = stoker.Loader(mix, **kw)
    mixed.load_state_dict(state)
    assert not set(ids(mixed)) <= all_ids(b), "with the old weights, a too"


def test_bad_mixtures_are_value_errors(two):
    a, b = two
    for weights, match in [
        ([0.5, -0.5], "weight 1"),
        ([float("nan"), 1.0], "weight 0"),
        ([0.0, 0.0], "every weight is 0"),
        ([1.0], "1 weights for 2 sources"),
    ]:
        with pytest.raises(ValueError, match="argument 'data': .*" + re.escape(match)):
            stoker.Loader(stoker.Mixture([a, b], weights=weights))
    with pytest.raises(ValueError, match="argument 'data': stop must be"):
        stoker.Loader(stoker.Mixture([a, b], stop="sometimes"))
    with pytest.raises(ValueError, match="argument 'data': .*never"):
        stoker.Loader(stoker.Mixture([a, b], stop="never"))
    # A state of another mixture (another seed) is refused.
    state = stoker.Loader([a, b], seed=1).state_dict()
    with pytest.raises(stoker.LoaderError, match="seed"):
        stoker.Loader([a, b], seed=2).load_state_dict(state)


def test_a_state_of_two_ranks_continues_on_three(two):
    a, _ = two
    kw = dict(batch_size=4, seed=7, shuffle=True, mode="sync")
    first, states = [], []
    for rank in range(2):
        loader = stoker.Loader(a, rank=rank, world_size=2, **kw)
        it = loader.epoch(0)
        for _ in range(2):
            first.append(next(it))
        states.append(loader.state_dict())
    seen = ids(first)
    assert len(set(seen)) == 16
    rest = []
    for rank in range(3):
        loader = stoker.Loader(a, rank=rank, world_size=3, **kw)
        loader.load_state_dict(json.loads(json.dumps(states[0])))
        rest += ids(loader)
    assert set(seen) | set(rest) == all_ids(a)
    assert not set(seen) & set(rest)
    assert len(rest) - len(set(rest)) < 3  # the last step's padding only


def test_rank_and_world_size_come_from_the_launcher(two, monkeypatch):
    a, _ = two
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = stoker.Loader(a, batch_size=4)
    assert loader.state_dict()["rank"] == 1 and loader.state_dict()["world_size"] == 2
    assert len(loader) == 5  # 20 of 40 samples
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert stoker.Loader(a, batch_size=4).state_dict()["world_size"] == 4
    assert stoker.Loader(a, batch_size=4, rank=0, world_size=1).state_dict()["world_size"] == 1
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD"):
        stoker.Loader(a)


def test_data_sets_of_other_image_sizes_are_a_value_error_at_once(tmp_path):
    stoker.gen_shapes(tmp_path / "small", 6, size=32, classes=2)
    stoker.gen_shapes(tmp_path / "big", 6, size=48, classes=2)
    data = [tmp_path / "small", tmp_path / "big"]
    with pytest.raises(ValueError, match=r"data set 2 of the mixture .* gives 48x48 .* first gives 32x32"):
        stoker.Loader(data, batch_size=4)
    # A transform that ends in a fixed size makes them one.
    assert len(list(stoker.Loader(data, batch_size=4, transform="resize:32"))) == 3
