"""Batches: shapes and dtypes, the same bytes in every mode, and zero-copy arrays
that keep their pixels while held."""

import gc
import json

import numpy as np
import pytest

import stoker
from conftest import digest


def test_shapes_dtypes_and_labels(shapes):
    loader = stoker.Loader(shapes, batch_size=16, transform="rrc:24,flip", workers=2)
    assert len(loader) == 4  # 60 samples, batch 16, last batch kept
    assert loader.image_shape == (24, 24, 3)
    assert len(loader.classes) == 3 and loader.classes == sorted(loader.classes)
    sizes = []
    for images, labels in loader.epoch(0):
        assert isinstance(images, np.ndarray) and images.dtype == np.uint8
        assert images.ndim == 4 and images.shape[1:] == (24, 24, 3)
        assert labels.dtype == np.int64 and labels.shape == (images.shape[0],)
        assert images.flags.c_contiguous
        assert set(labels.tolist()) <= {0, 1, 2}
        sizes.append(images.shape[0])
    assert sizes == [16, 16, 16, 12]
    m = loader.metrics()
    assert m["samples"] == 60 and m["batches"] == 4 and m["skipped"] == 0
    assert m["images_per_sec"] > 0 and m["wait_seconds"] >= 0
    assert 0 < m["peak_buffer_bytes"] <= m["memory_bound_bytes"]
    json.dumps(m)


def test_drop_last_and_no_shuffle(shapes):
    loader = stoker.Loader(shapes, batch_size=16, shuffle=False, drop_last=True, mode="sync")
    batches = list(loader.epoch(0))
    assert [b[0].shape[0] for b in batches] == [16, 16, 16]
    again = stoker.Loader(shapes, batch_size=16, shuffle=False, drop_last=True, mode="sync")
    # Without shuffling every epoch visits the samples in the same order.
    assert digest(again.epoch(5)) == digest(batches)


def test_sync_async_and_worker_counts_give_the_same_bytes(shapes):
    def run(**kw):
        loader = stoker.Loader(shapes, batch_size=8, transform="rrc:20,flip", seed=3, **kw)
        return [digest(loader.epoch(e)) for e in range(2)]

    reference = run(mode="sync")
    assert reference[0] != reference[1], "epochs are shuffled and augmented differently"
    assert run(mode="async", workers=1) == reference
    assert run(mode="async", workers=3, prefetch=1) == reference
    other_seed = stoker.Loader(shapes, batch_size=8, transform="rrc:20,flip", seed=4, mode="sync")
    assert digest(other_seed.epoch(0)) != reference[0]


def test_iterating_the_loader_walks_the_epochs(shapes):
    a = stoker.Loader(shapes, batch_size=16, transform="flip", mode="sync")
    straight = [digest(a.epoch(e)) for e in range(3)]
    b = stoker.Loader(shapes, batch_size=16, transform="flip")
    assert [digest(b) for _ in range(3)] == straight
    assert b.state_dict()["epoch"] == 3 and b.state_dict()["next_batch"] == 0


def test_images_view_the_pooled_buffer_without_a_copy(shapes):
    loader = stoker.Loader(shapes, batch_size=16, transform="flip")
    it = iter(loader)
    images, labels = next(it)
    owner = images.base
    assert isinstance(owner, stoker.BatchBuffer)
    assert len(owner) == images.nbytes
    # DLPack (what torch.from_dlpack uses) shares the memory.
    shared = np.from_dlpack(images)
    assert np.shares_memory(shared, images)
    assert images.__dlpack__() is not None
    assert loader.metrics()["buffers_held"] == 1
    # A view keeps the buffer out of the pool after the array itself is gone.
    view = images[3:5]
    del images, shared, owner
    gc.collect()
    assert loader.metrics()["buffers_held"] == 1
    del view
    gc.collect()
    assert loader.metrics()["buffers_held"] == 0


def test_buffers_are_reused_when_batches_are_dropped(shapes):
    loader = stoker.Loader(shapes, batch_size=8, transform="flip", workers=2, prefetch=2)
    for e in range(4):
        for images, labels in loader.epoch(e):
            pass
    m = loader.metrics()
    assert m["batches"] == 4 * 8
    bound = 2 + 2 + 1  # prefetch + workers + the consumer's
    assert m["buffers_allocated"] <= bound and m["pool_grown"] == 0
    assert m["peak_buffer_bytes"] <= m["memory_bound_bytes"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_holding_100_batches_leaves_the_early_ones_unchanged(many, mode):
    loader = stoker.Loader(many, batch_size=2, transform="rrc:12,flip", mode=mode, seed=9)
    held, copies = [], []
    for e in range(5):
        for images, labels in loader.epoch(e):
            held.append((images, labels))
            copies.append((images.copy(), labels.copy()))
            if len(held) == 100:
                break
        if len(held) == 100:
            break
    assert len(held) == 100
    for (images, labels), (c_images, c_labels) in zip(held, copies):
        np.testing.assert_array_equal(images, c_images)
        np.testing.assert_array_equal(labels, c_labels)
    pointers = {images.__array_interface__["data"][0] for images, _ in held}
    assert len(pointers) == 100, "every held batch has its own buffer"
    m = loader.metrics()
    # Keeping batches makes the pool grow, and it is counted.
    assert m["buffers_held"] == 100 and m["pool_grown"] > 0
    del held, images, labels
    gc.collect()
    assert loader.metrics()["buffers_held"] == 0


def test_digest_takes_plain_arrays_too(shapes):
    loader = stoker.Loader(shapes, batch_size=16, mode="sync")
    pairs = [(i.copy(), l.astype(np.int32)) for i, l in loader.epoch(0)]
    assert digest(pairs) == digest(stoker.Loader(shapes, batch_size=16).epoch(0))
    d = stoker.Digest()
    with pytest.raises(ValueError, match="label -1"):
        d.update(pairs[0][0], [-1] * 16)
    with pytest.raises(ValueError, match="labels"):
        d.update(pairs[0][0], [0, 1])
