"""Loader(map=fn, map_threads=N): the caller's per-sample function on threads of the
loader's own. Batches become dicts of what fn returns, collated like built-in fields;
rng is seeded per sample so the batches are the same in every mode and for any thread
count, and resume is exact; errors follow on_error; Ctrl-C stops a slow map; the
threads go with the loader."""

import gc
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import stoker
from conftest import python_child

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255


def normalise(sample, rng):
    """The light map: float32, channels first, normalised."""
    img = (sample["image"].astype(np.float32) - MEAN) / STD
    return {"image": img.transpose(2, 0, 1), "label": sample["label"]}


def jitter(sample, rng):
    """A map whose output depends on its rng."""
    noise = rng.integers(-40, 41, size=sample["image"].shape)
    img = np.clip(sample["image"].astype(np.int16) + noise, 0, 255).astype(np.uint8)
    return {"image": img, "label": sample["label"]}


def digest(batches):
    d = stoker.Digest()
    for b in batches:
        d.update(np.ascontiguousarray(b["image"]), b["label"])
    return d.hexdigest()


def test_the_map_output_is_the_batch(shapes):
    kw = dict(batch_size=8, transform="rrc:24,flip", seed=3, mode="sync")
    plain = list(stoker.Loader(shapes, **kw).epoch(0))
    mapped = list(stoker.Loader(shapes, map=normalise, map_threads=2, **kw).epoch(0))
    assert len(mapped) == len(plain)
    for (images, labels), b in zip(plain, mapped):
        assert sorted(b) == ["image", "label"]
        assert b["image"].dtype == np.float32
        assert b["image"].shape == (len(labels), 3, 24, 24)
        want = ((images.astype(np.float32) - MEAN) / STD).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(b["image"], want, rtol=1e-6)
        np.testing.assert_array_equal(b["label"], labels)


def test_new_keys_become_fields_and_dtypes_may_change(shapes):
    def f(sample, rng):
        return {
            "image": sample["image"][:8, :8].astype(np.float16),
            "brightness": np.float64(sample["image"].mean()),
            "name": f"class {int(sample['label'])}",
        }

    loader = stoker.Loader(shapes, batch_size=6, transform="center:16", map=f, shuffle=False)
    plain = stoker.Loader(shapes, batch_size=6, transform="center:16", shuffle=False)
    for b, (images, labels) in zip(loader.epoch(0), plain.epoch(0)):
        assert sorted(b) == ["brightness", "image", "name"]
        assert b["image"].dtype == np.float16 and b["image"].shape == (6, 8, 8, 3)
        assert b["brightness"].dtype == np.float64 and b["brightness"].shape == (6,)
        np.testing.assert_allclose(b["brightness"], images.reshape(6, -1).mean(axis=1))
        assert b["name"] == [f"class {l}" for l in labels]


def test_ragged_outputs_are_padded_with_counts(shapes):
    def f(sample, rng):
        n = int(rng.integers(0, 4))
        return {"points": np.full((n, 2), n + 1, dtype=np.float32), "label": sample["label"]}

    seen = set()
    for b in stoker.Loader(shapes, batch_size=10, map=f, map_threads=3, seed=1).epoch(0):
        points, count = b["points"], b["points_count"]
        assert count.dtype == np.int32 and count.shape == (10,)
        assert points.shape == (10, count.max(), 2)
        for row, n in zip(points, count):
            assert (row[:n] == n + 1).all(), "each sample's own rows"
            assert (row[n:] == 0).all(), "padding is zeros"
        seen.update(count.tolist())
    assert seen == {0, 1, 2, 3}, "the rng draws every length"


def test_mapped_arrays_are_the_stack_of_the_samples_outputs_byte_for_byte(shapes):
    """The map threads copy each output into the batch's array as it comes back:
    the batch is exactly np.stack of what fn returned, in both modes."""

    def f(sample, rng):
        img = sample["image"].astype(np.float32) * rng.random()
        return {
            "image": img.transpose(2, 0, 1),
            "noise": rng.standard_normal(5),
            "label": sample["label"],
        }

    kw = dict(batch_size=7, transform="center:16", shuffle=False, seed=4)
    plain = stoker.Loader(shapes, mode="sync", **kw)
    for mode in ("sync", "async"):
        mapped = stoker.Loader(shapes, mode=mode, map=f, map_threads=3, **kw)
        start = 0
        for (images, labels), b in zip(plain.epoch(1), mapped.epoch(1)):
            outs = [
                f({"image": images[i], "label": labels[i]}, stoker.map_rng(4, 1, start + i))
                for i in range(len(labels))
            ]
            for key in ("image", "noise"):
                want = np.stack([o[key] for o in outs])
                assert (b[key].dtype, b[key].shape) == (want.dtype, want.shape), key
                assert b[key].tobytes() == want.tobytes(), (mode, key)
            np.testing.assert_array_equal(b["label"], labels)
            start += len(labels)
        assert start == 60


def test_a_mapped_batchs_memory_is_reused_once_dropped_never_while_held(shapes):
    def f(sample, rng):
        return {"x": sample["image"].astype(np.float32)}

    def address(a):
        return a.__array_interface__["data"][0]

    kw = dict(batch_size=6, transform="center:16", mode="sync", shuffle=False)
    images, _ = next(iter(stoker.Loader(shapes, **kw).epoch(0)))
    it = iter(stoker.Loader(shapes, map=f, **kw).epoch(0))
    first = next(it)["x"]
    kept = first.copy()
    np.testing.assert_array_equal(kept, images.astype(np.float32))
    owner = first
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert type(owner).__name__ == "MapBuffer", "the loader lends the batch's memory"
    second = next(it)["x"]
    assert not np.shares_memory(first, second), "a batch held keeps its memory"
    dropped = address(second)
    del second
    third = next(it)["x"]
    assert address(third) == dropped, "a dropped batch's memory is reused"
    view = third[1:]
    del third
    fourth = next(it)["x"]
    assert not np.shares_memory(view, fourth), "a view keeps the memory too"
    np.testing.assert_array_equal(first, kept)


def test_idle_map_memory_is_bounded():
    buffers = stoker._stoker.MapBuffers()
    a = buffers.take(1000)
    assert (a.dtype, a.shape, a.flags.writeable) == (np.uint8, (1000,), True)
    held = [buffers.take(8 * n) for n in range(1, 7)]
    assert len(buffers) == 0
    del a
    while held:
        del held[0]  # 8, 16, ..., 48 bytes: the last four back are kept
    assert len(buffers) == 4, "the four last returned are kept, no more"
    again = buffers.take(48)
    assert len(buffers) == 3, "a block of the size asked for is taken from the idle ones"
    fresh = buffers.take(8)
    assert len(buffers) == 3, "the first ones back were let go"
    again[:] = 7
    fresh[:] = 7


def test_the_dict_the_map_returned_is_left_as_it_was(shapes):
    """The outputs are copied into the batch, and the batch views them there; the
    map's own dict (a cache may keep it) still holds the map's own arrays."""
    returned = []

    def f(sample, rng):
        out = {"x": np.full(4, int(sample["label"]), np.int64)}
        returned.append((out, out["x"]))
        return out

    for _ in stoker.Loader(shapes, batch_size=5, map=f, mode="sync").epoch(0):
        pass
    assert len(returned) == 60
    for out, x in returned:
        assert out["x"] is x


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """12 scenes with boxes and keypoints, made by stoker.gen_scenes."""
    d = tmp_path_factory.mktemp("map") / "scenes"
    stoker.gen_scenes(d, 12, width=48, height=40, max_shapes=3, seed=3)
    return d


@pytest.mark.parametrize("batch_size", [1, 4])
def test_an_identity_map_keeps_the_batch(scenes, batch_size):
    """The same keys and values as the loader's own batch, counts included, also when
    the samples of a batch have as many boxes (one sample a batch: always)."""
    kw = dict(batch_size=batch_size, shuffle=False, mode="sync")
    plain = list(stoker.Loader(scenes / "train.jsonl", **kw))
    mapped = list(stoker.Loader(scenes / "train.jsonl", map=lambda s, r: s, **kw))
    assert len(mapped) == len(plain) > 0
    for p, m in zip(plain, mapped):
        assert sorted(m) == sorted(p)
        assert "box_count" in m and "keypoint_count" in m
        for key, value in p.items():
            if isinstance(value, np.ndarray):
                assert m[key].dtype == value.dtype, key
                np.testing.assert_array_equal(m[key], value, err_msg=key)
            else:
                assert m[key] == value, key


def test_a_map_may_return_the_count_of_boxes_it_did_not_make_ragged(shapes):
    def f(sample, rng):
        return {"boxes": np.ones((2, 4), np.float32), "box_count": np.int32(2)}

    b = next(iter(stoker.Loader(shapes, batch_size=4, map=f)))
    assert b["boxes"].shape == (4, 2, 4)
    assert b["box_count"].tolist() == [2, 2, 2, 2]


def test_a_count_the_map_returns_makes_its_key_padded_and_counted_in_every_batch(shapes):
    """The loader's rule (docs/samples.md, "Collation"): a key whose count `fn` gives
    is variable-length, so every batch has the count, also when every sample of the
    batch has as many rows; the count is checked against the rows."""

    def f(sample, rng):
        n = 2 if sample["label"] < 5 else 1
        return {"points": np.ones((n, 2), np.float32), "points_count": n}

    for b in stoker.Loader(shapes, batch_size=4, map=f, shuffle=False):
        assert sorted(b) == ["points", "points_count"]
        assert b["points_count"].dtype == np.int32
        assert b["points"].shape == (4, b["points_count"].max(), 2)

    def wrong(sample, rng):
        return {"points": np.ones((2, 2), np.float32), "points_count": 3}

    loader, msg = collation_error(shapes, wrong)
    assert "'points' has 2 rows but its count 'points_count' says 3" in msg, msg


def test_map_collation_is_the_loaders_rule(shapes):
    """_map.collate asks the Rust rules (stoker._stoker.collate_layout): the same
    layout for the same shapes."""
    plan = stoker._stoker.collate_layout(
        [[("boxes", "float32", (2, 4), None), ("x", "float64", (3,), None)]] * 2
    )
    assert plan == [
        ("boxes", "pad", (2, 0, "box_count")),
        ("box_count", "count", [2, 2]),
        ("x", "stack", None),
    ]


def test_ragged_boxes_keep_their_built_in_count_name(shapes):
    def f(sample, rng):
        n = int(sample["label"])
        return {"boxes": np.ones((n, 4), np.float32), "box_labels": np.zeros(n, np.int64)}

    b = next(iter(stoker.Loader(shapes, batch_size=12, map=f, seed=2)))
    assert sorted(b) == ["box_count", "box_labels", "boxes"]
    assert b["boxes"].shape == (12, b["box_count"].max(), 4)
    for labels, n in zip(b["box_labels"], b["box_count"]):
        assert (labels[:n] == 0).all() and (labels[n:] == -1).all(), "padded classes are -1"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_exception_names_the_sample_with_its_traceback(shapes, mode):
    def f(sample, rng):
        if sample["label"] == 1:
            raise ValueError("no ones here")
        return {"label": sample["label"]}

    loader = stoker.Loader(shapes, batch_size=8, map=f, mode=mode)
    with pytest.raises(stoker.LoaderError) as info:
        for _ in loader:
            pass
    msg = str(info.value)
    assert msg.startswith("sample ") and "map raised ValueError: no ones here" in msg
    assert "Traceback" in msg and "in f" in msg, msg
    # The file of a class-1 sample (gen_shapes names its class folders).
    assert loader.classes[1] in msg, msg
    assert isinstance(info.value.__cause__, ValueError)


def test_on_error_skip_leaves_the_sample_out_and_counts_it(shapes):
    def f(sample, rng):
        if sample["label"] == 1:
            raise ValueError("no ones here")
        return {"label": sample["label"]}

    plain = [l for _, labels in stoker.Loader(shapes, batch_size=8, seed=4).epoch(0) for l in labels]
    loader = stoker.Loader(shapes, batch_size=8, map=f, on_error="skip", seed=4)
    got = [l for b in loader.epoch(0) for l in b["label"]]
    assert got == [l for l in plain if l != 1]
    assert loader.metrics()["skipped"] == plain.count(1) > 0


@pytest.mark.parametrize("on_error", ["skip", "fail"])
@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_an_exit_from_the_map_is_raised_as_it_is(shapes, exc, on_error):
    """Only an Exception is a bad sample; SystemExit or KeyboardInterrupt from fn ends
    the loop even with on_error="skip", and is not wrapped in a LoaderError."""

    def f(sample, rng):
        if sample["label"] == 1:
            raise exc(7)
        return {"label": sample["label"]}

    loader = stoker.Loader(shapes, batch_size=8, map=f, on_error=on_error, mode="sync")
    with pytest.raises(exc) as info:
        for _ in loader:
            pass
    assert info.value.args == (7,)
    assert loader.metrics()["skipped"] == 0


def first_disagreeing(shapes, batch_size):
    """The index and class of the first sample (shuffle off) whose class differs from
    its batch's first sample's: the one a map that depends on the class trips on."""
    labels = [int(l) for _, ls in stoker.Loader(shapes, batch_size=batch_size, shuffle=False)
              for l in ls]
    for start in range(0, len(labels), batch_size):
        for i in range(start, min(start + batch_size, len(labels))):
            if labels[i] != labels[start]:
                return i, labels[i], start
    raise AssertionError("every batch has one class")


def collation_error(shapes, f, **kw):
    loader = stoker.Loader(shapes, batch_size=16, map=f, shuffle=False, **kw)
    with pytest.raises(stoker.LoaderError) as info:
        for _ in loader:
            pass
    return loader, str(info.value)


@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_a_batch_whose_samples_disagree_is_an_error_naming_the_sample_and_key(shapes, on_error):
    def f(sample, rng):
        dtype = np.float32 if sample["label"] == 0 else np.int64
        return {"x": np.zeros(3, dtype)}

    loader, msg = collation_error(shapes, f, on_error=on_error)
    index, label, first = first_disagreeing(shapes, 16)
    # The sample by its index and its file (gen_shapes names its class folders), the
    # key, and what is wrong.
    assert msg.startswith(f"sample {index} ("), msg
    assert loader.classes[label] in msg.split(")")[0], msg
    assert (
        f"map output cannot be collated into a batch: 'x' is int64 but sample {first}'s "
        "is float32" in msg
    ), msg


def test_text_that_is_str_in_some_samples_and_bytes_in_others_is_an_error(shapes):
    def f(sample, rng):
        return {"t": "text" if sample["label"] == 0 else b"bytes"}

    loader, msg = collation_error(shapes, f)
    index, label, first = first_disagreeing(shapes, 16)
    assert msg.startswith(f"sample {index} ("), msg
    assert f"'t' is bytes but sample {first}'s is str" in msg, msg


def test_a_map_whose_dict_has_keys_that_are_not_str_is_an_error(shapes):
    def f(sample, rng):
        return {"label": sample["label"], 7: sample["image"]}

    loader, msg = collation_error(shapes, f)
    assert msg.startswith("sample 0 ("), msg
    assert "map returned the key 7 (int): keys must be str" in msg, msg


def test_samples_with_other_keys_name_the_keys(shapes):
    def f(sample, rng):
        out = {"label": sample["label"]}
        if sample["label"] != 0:
            out["extra"] = 1
        return out

    loader, msg = collation_error(shapes, f)
    index, label, first = first_disagreeing(shapes, 16)
    assert msg.startswith(f"sample {index} ("), msg
    assert "extra: ['extra'], missing: []" in msg, msg


def test_bad_arguments_are_refused(shapes):
    with pytest.raises(TypeError, match="map must be a function"):
        stoker.Loader(shapes, map=3)
    with pytest.raises(ValueError, match="map_threads"):
        stoker.Loader(shapes, map_threads=2)
    with pytest.raises(ValueError, match="map_threads must be between 1"):
        stoker.Loader(shapes, map=normalise, map_threads=0)
    with pytest.raises(ValueError, match="cannot be combined"):
        stoker.Loader(shapes, map=normalise, mixup=0.2)
    with pytest.raises(stoker.LoaderError, match="must return a dict"):
        next(iter(stoker.Loader(shapes, map=lambda s, r: [1])))


def test_batches_are_the_same_in_every_mode_and_thread_count(shapes):
    def run(**kw):
        loader = stoker.Loader(shapes, batch_size=7, transform="rrc:24,flip", seed=9, **kw)
        return digest(loader.epoch(1))

    want = run(mode="sync", map=jitter, map_threads=1)
    for mode in ("sync", "async"):
        for threads in (1, 2, 4):
            assert run(mode=mode, workers=3, map=jitter, map_threads=threads) == want, (
                mode,
                threads,
            )
    # The map matters, and so does its seed.
    assert run(mode="sync", map=normalise_u8) != want
    loader = stoker.Loader(shapes, batch_size=7, transform="rrc:24,flip", seed=10, map=jitter)
    assert digest(loader.epoch(1)) != want


def normalise_u8(sample, rng):
    return {"image": sample["image"], "label": sample["label"]}


def test_rng_is_the_samples_own_and_can_be_redone_outside(shapes):
    def f(sample, rng):
        return {"draw": rng.integers(2**62)}

    loader = stoker.Loader(shapes, batch_size=8, shuffle=False, seed=11, map=f, map_threads=3)
    draws = [d for b in loader.epoch(2) for d in b["draw"]]
    want = [stoker.map_rng(11, 2, i).integers(2**62) for i in range(len(draws))]
    assert draws == want
    assert len(set(draws)) == len(draws), "every sample its own stream"
    assert stoker.map_rng(11, 3, 0).integers(2**62) != want[0], "and every epoch"


def test_resume_mid_epoch_is_exact(shapes):
    kw = dict(batch_size=6, transform="rrc:24,flip", seed=5, map=jitter, map_threads=3)
    straight = list(stoker.Loader(shapes, **kw).epoch(0))
    loader = stoker.Loader(shapes, **kw)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    del it, loader
    fresh = stoker.Loader(shapes, mode="sync", **kw)
    fresh.load_state_dict(state)
    rest = list(fresh)
    assert len(rest) == len(straight) - 3
    assert digest(rest) == digest(straight[3:])


def threads():
    gc.collect()
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="SKIPPED: needs Linux /proc")
def test_map_threads_are_joined_when_the_loader_is_dropped(shapes):
    before = threads()
    loader = stoker.Loader(shapes, batch_size=4, mode="sync", map=jitter, map_threads=3)
    assert threads() == before + 3
    assert loader.metrics()["map_threads"] == 3
    next(iter(loader))
    del loader
    assert threads() == before


CHILD = textwrap.dedent(
    """
    import os, sys, threading
    import numpy
    import stoker

    # A map call that returns only once the interrupt has been handled: no batch can
    # ever be made, so the consumer's wait ends by the interrupt or never.
    release = threading.Event()

    def stuck(sample, rng):
        print("mapping", flush=True)
        release.wait()
        return {"label": sample["label"]}

    loader = stoker.Loader(sys.argv[1], batch_size=4, mode=sys.argv[2], map=stuck,
                           map_threads=1)
    before = len(os.listdir("/proc/self/task"))
    print("ready", flush=True)
    try:
        for e in range(10**6):
            for b in loader.epoch(e):
                pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    release.set()
    del loader
    print("threads", len(os.listdir("/proc/self/task")), before, flush=True)
    """
)


def lines_of(stream):
    """A queue that gets each line of `stream` as it comes, then None at its end: a
    reader with a deadline (`get(timeout=...)`), where `readline` alone would wait for
    ever on a child that stalls."""
    lines = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="SKIPPED: needs Linux /proc")
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_ctrl_c_during_a_slow_map_raises_keyboard_interrupt(shapes, mode):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(shapes), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = lines_of(child.stdout)
        assert lines.get(timeout=20) == "ready"
        assert lines.get(timeout=20) == "mapping"
        # Time for the main thread to reach its wait for the batch (the assertions
        # do not depend on it: an interrupt that came before the wait would pass
        # too, and a wait it could not cut short would hang until the timeout).
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        child.wait(timeout=20)
        out = list(iter(lambda: lines.get(timeout=20), None))
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, child.stderr.read()
    assert "interrupted" in out, out
    after, before = next(line for line in out if line.startswith("threads")).split()[1:]
    assert int(after) < int(before), "the map thread (and the pipeline's) were joined"


EXIT_ALIVE = textwrap.dedent(
    """
    import sys
    import stoker
    loader = stoker.Loader(sys.argv[1], batch_size=4, workers=1, map=lambda s, r: s)
    it = iter(loader)
    next(it)
    next(it)
    print("end of script", flush=True)
    """
)


def test_a_loader_alive_at_exit_lets_python_exit_cleanly(shapes):
    """A script that ends with a map loader mid-epoch (the next batch in flight on the
    map threads): its threads are stopped before Python finalizes. A thread that asks
    for the GIL after that is ended mid-call, and that crashed about one exit in two,
    so ten exits all but guarantee that a regression shows."""
    for _ in range(10):
        out = python_child(EXIT_ALIVE, shapes, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "end of script"


LATE = textwrap.dedent(
    """
    import atexit
    import sys

    def late():
        # Registered before stoker's own hook, so it runs after it.
        try:
            stoker.Loader(sys.argv[1], batch_size=4, map=lambda s, r: s)
            print("made", flush=True)
        except stoker.LoaderError as e:
            print("refused:", e, flush=True)

    atexit.register(late)
    import stoker
    """
)


def test_a_map_loader_made_after_the_exit_hook_is_refused(shapes):
    """Its threads would run into the finalization the hook guards against."""
    out = python_child(LATE, shapes, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: Python is exiting"), out.stdout


FORKED = textwrap.dedent(
    """
    import os
    import sys
    import stoker
    loader = stoker.Loader(sys.argv[1], batch_size=4, workers=1, map=lambda s, r: s)
    it = iter(loader)
    next(it)
    pid = os.fork()
    if pid == 0:
        try:
            for _ in it:
                pass
            print("child: every batch", flush=True)
        except stoker.LoaderError as e:
            print("child: error", "forked from" in str(e), flush=True)
        sys.exit(0)  # through atexit, which must not wait for the parent's threads
    _, status = os.waitpid(pid, 0)
    print("parent:", os.waitstatus_to_exitcode(status), sum(1 for _ in it), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="SKIPPED: no os.fork here")
def test_a_forked_child_gets_an_error_not_a_wait_for_the_parents_map_threads(shapes):
    """The map threads stay in the parent: in the child the loader says so (a wait for
    their results would never end), and the child's exit does not join them."""
    out = python_child(FORKED, shapes, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "child: error True" in lines, out.stdout
    # 60 samples in batches of 4, one taken before the fork: the parent goes on.
    assert "parent: 0 14" in lines, out.stdout


def test_a_batch_whose_wait_was_interrupted_comes_with_the_next_call(shapes):
    """The batch a KeyboardInterrupt cut short is not lost: the next call returns it."""
    calls = []

    def f(sample, rng):
        calls.append(1)
        if len(calls) == 3:
            # As a signal handler would: raised in the consumer's wait below.
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        return jitter(sample, rng)

    kw = dict(batch_size=4, transform="rrc:24,flip", seed=6, mode="sync")
    straight = list(stoker.Loader(shapes, map=jitter, **kw).epoch(0))
    it = stoker.Loader(shapes, map=f, map_threads=1, **kw).epoch(0)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    rest = list(it)
    assert digest(rest) == digest(straight)


def test_the_next_batch_is_mapped_while_the_caller_works(shapes):
    """In async mode the map threads start on the next batch before the caller asks
    for it, as the decode workers do (they overlap with the caller's step)."""
    import threading

    second = threading.Event()

    seen = []

    def record(sample, rng):
        seen.append(1)
        if len(seen) <= 4:
            # The first batch is slow: the loader has made the second (4 images of
            # 32 px, a millisecond's work) by the time it is back, with a second to
            # spare for a loaded machine.
            time.sleep(0.25)
        else:
            second.set()
        return {"label": sample["label"]}

    loader = stoker.Loader(shapes, batch_size=4, mode="async", map=record, map_threads=1)
    it = loader.epoch(0)
    first = next(it)
    assert len(first["label"]) == 4
    assert second.wait(10), "the second batch was not mapped until it was asked for"
    assert len(next(it)["label"]) == 4


def test_a_sync_loader_maps_only_the_batch_asked_for(shapes):
    """Sync mode makes a batch on the caller's thread: nothing runs ahead of it."""
    calls = []

    def record(sample, rng):
        calls.append(int(sample["label"]))
        return {"label": sample["label"]}

    it = stoker.Loader(shapes, batch_size=4, mode="sync", map=record, map_threads=2).epoch(0)
    next(it)
    assert len(calls) == 4
    next(it)
    assert len(calls) == 8


SIGNALLED = textwrap.dedent(
    """
    import signal, sys, threading, time
    import numpy as np
    import stoker

    # Ctrl-C raises KeyboardInterrupt only inside next(it), once per call, and at most
    # CAP times (so that a collation slower than the signals' period ends all the
    # same): the script's own lines never lose a batch to an interrupt, so a sample
    # missing below was lost by the loader. Inside next() the loader is in use
    # (state_dict() refuses); a handler that Python runs just after next() returned
    # would drop the batch returned, Python's own window, not the loader's.
    CAP = 40
    armed, raised = False, 0

    def on_sigint(signum, frame):
        global armed, raised
        if not armed or raised >= CAP:
            return
        try:
            loader.state_dict()
        except RuntimeError:
            armed = False
            raised += 1
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    def big(sample, rng):
        # 600x600 float64 (2.9 MB) a sample: the collation stacks megabytes, and a
        # signal is likely to land in it.
        draw = int(rng.integers(2**53))
        return {"x": np.full((600, 600), float(draw)), "id": draw}

    def make():
        return stoker.Loader(sys.argv[1], batch_size=4, mode=sys.argv[2], workers=1,
                             map=big, map_threads=2, seed=8)

    want = [int(i) for b in make().epoch(0) for i in b["id"]]
    got, interrupts, failure = [], 0, None
    stop = threading.Event()
    main = threading.main_thread().ident

    def signaller():
        while not stop.is_set():
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.007)

    def record(b):
        assert (b["x"][:, 0, 0] == b["id"]).all()
        got.extend(int(i) for i in b["id"])

    loader = make()
    it = loader.epoch(0)
    t = threading.Thread(target=signaller)
    t.start()
    try:
        while True:
            b = None
            try:
                armed = True
                b = next(it)
                armed = False
            except KeyboardInterrupt:
                interrupts += 1
            except StopIteration:
                armed = False
                break
            if b is not None:
                record(b)
    except Exception as e:
        failure = repr(e)
    armed = False
    stop.set()
    t.join()
    print("done", interrupts, len(want), got == want, len(got), len(set(got)), failure, flush=True)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ctrl_c_during_the_collation_loses_no_batch(tmp_path, mode):
    """SIGINT every 7 ms while large map outputs are collated: each KeyboardInterrupt
    comes as itself, and every sample arrives once, in order. (Before, one that landed
    in the collation was a LoaderError with an empty reason, and the epoch then ended,
    having delivered 0 to 4 of 64 samples.)"""
    data = tmp_path / "small"
    stoker.gen_shapes(data, 64, size=16, classes=2, seed=5)
    out = python_child(SIGNALLED, data, mode, timeout=300)
    assert out.returncode == 0, out.stderr
    fields = out.stdout.split()
    assert fields[0] == "done", out.stdout
    interrupts, want, same, got, unique, failure = fields[1:7]
    assert failure == "None", f"next(it) raised {out.stdout.split(' ', 6)[-1]}"
    assert int(interrupts) > 0, "no interrupt landed inside next(): nothing was tested"
    assert want == "64" and same == "True", f"got {got} samples ({unique} distinct) of {want}"
