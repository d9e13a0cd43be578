"""decoded_cache=: batches are the same bytes with and without it, over epochs, in
both modes, whether it holds every sample or a few; resume stays exact; metrics() say
what it did; bad sizes are a ValueError naming the argument."""

import pytest

import stoker
from conftest import digest

SPEC = "crop:24:pad=4,flip"


def run(data, epochs=3, **kw):
    loader = stoker.Loader(data, batch_size=8, transform=SPEC, seed=5, **kw)
    return [digest(loader.epoch(e)) for e in range(epochs)], loader.metrics()


@pytest.mark.parametrize("mode,workers", [("sync", 0), ("async", 1), ("async", 2)])
def test_batches_are_the_same_bytes_with_the_cache(shapes, mode, workers):
    reference, plain = run(shapes, mode="sync", workers=0)
    assert "decoded_cache_hits" not in plain
    assert reference[0] != reference[1], "epochs are augmented differently"
    # 60 images of 32x32x3: "100K" holds about a third of them.
    for size in ["auto", "100K", 64 << 20]:
        got, m = run(shapes, mode=mode, workers=workers, decoded_cache=size)
        assert got == reference, (mode, workers, size)
        assert m["decoded_cache_hits"] > 0, m
        assert m["decoded_cache_bytes"] <= m["decoded_cache_capacity"]
        if size == "100K":
            assert m["decoded_cache_capacity"] == 100 << 10
            assert m["decoded_cache_no_room"] > 0, m
        else:
            assert m["decoded_cache_bytes"] >= 60 * 32 * 32 * 3, m


def test_resume_is_exact_with_the_cache(shapes):
    reference, _ = run(shapes, mode="sync", workers=0, epochs=2)
    loader = stoker.Loader(shapes, batch_size=8, transform=SPEC, seed=5, decoded_cache="auto")
    list(loader.epoch(0))
    it = loader.epoch(1)
    first = next(it)
    state = loader.state_dict()
    del it
    again = stoker.Loader(shapes, batch_size=8, transform=SPEC, seed=5, decoded_cache="8M")
    again.load_state_dict(state)
    rest = list(again)
    assert digest([first, *rest]) == reference[1]


@pytest.mark.parametrize(
    "size,error,match",
    [
        ("", ValueError, "decoded_cache: '' is neither 'auto' nor a size"),
        ("lots", ValueError, "decoded_cache: 'lots' is neither"),
        ("1.5G", ValueError, "decoded_cache: '1.5G'"),
        ("0", ValueError, "decoded_cache"),
        (0, ValueError, "decoded_cache"),
        (-1, ValueError, "decoded_cache"),
        (2**70, ValueError, "decoded_cache"),
        ("99999999T", ValueError, "out of range"),
        ("1024T", ValueError, "argument 'decoded_cache': 1125899906842624 bytes do not fit"),
        (1.5, TypeError, "decoded_cache"),
    ],
)
def test_bad_sizes_name_the_argument(shapes, size, error, match):
    with pytest.raises(error, match=match):
        stoker.Loader(shapes, batch_size=8, decoded_cache=size)
