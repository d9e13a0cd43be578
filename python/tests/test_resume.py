"""state_dict / load_state_dict: exact mid-epoch resume."""

import json
import textwrap

import pytest

import stoker
from conftest import digest, python_child

SETTINGS = dict(batch_size=8, transform="rrc:20,flip", seed=5)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_mid_epoch_equals_the_straight_run(shapes, mode):
    straight = stoker.Loader(shapes, mode=mode, **SETTINGS)
    whole = [digest([b]) for e in range(2) for b in straight.epoch(e)]

    first = stoker.Loader(shapes, mode=mode, **SETTINGS)
    got = []
    for b in first.epoch(0):
        got.append(digest([b]))
        if len(got) == 3:
            break
    state = json.loads(json.dumps(first.state_dict()))
    assert state["epoch"] == 0 and state["next_batch"] == 3
    del first

    second = stoker.Loader(shapes, mode="async" if mode == "sync" else "sync", **SETTINGS)
    second.load_state_dict(state)
    for _ in range(2):  # the rest of epoch 0, then epoch 1
        got += [digest([b]) for b in second]
    assert got == whole


def test_epoch_of_the_loaded_state_resumes_and_others_start_afresh(shapes):
    a = stoker.Loader(shapes, **SETTINGS)
    rest = [digest([b]) for b in list(a.epoch(1))[5:]]
    epoch2 = digest(a.epoch(2))

    b = stoker.Loader(shapes, **SETTINGS)
    b.load_state_dict({**a.state_dict(), "epoch": 1, "next_batch": 5})
    assert b.state_dict()["next_batch"] == 5
    assert [digest([x]) for x in b.epoch(1)] == rest
    assert digest(b.epoch(2)) == epoch2


def test_a_state_saved_with_the_old_world_key_still_loads(shapes):
    a = stoker.Loader(shapes, **SETTINGS)
    rest = [digest([b]) for b in list(a.epoch(0))[2:]]
    state = {**a.state_dict(), "epoch": 0, "next_batch": 2}
    assert state["world_size"] == 1 and "world" not in state
    # As the releases before `world_size` wrote it.
    old = {("world" if k == "world_size" else k): v for k, v in state.items()}
    b = stoker.Loader(shapes, **SETTINGS)
    b.load_state_dict(old)
    assert [digest([x]) for x in b.epoch(0)] == rest
    assert b.state_dict()["world_size"] == 1
    with pytest.raises(KeyError, match="world_size"):
        b.load_state_dict({k: v for k, v in state.items() if k != "world_size"})


def test_state_from_another_loader_is_refused(shapes):
    a = stoker.Loader(shapes, **SETTINGS)
    state = a.state_dict()
    other = stoker.Loader(shapes, batch_size=4)  # and seed 0
    with pytest.raises(stoker.LoaderError, match="seed"):
        other.load_state_dict(state)
    with pytest.raises(stoker.LoaderError, match="past the end"):
        a.load_state_dict({**state, "next_batch": 99})
    with pytest.raises(KeyError, match="next_batch"):
        a.load_state_dict({k: v for k, v in state.items() if k != "next_batch"})
    with pytest.raises(ValueError, match="'epoch'"):
        a.load_state_dict({**state, "epoch": -1})
    with pytest.raises(TypeError):
        a.load_state_dict("not a dict")


def test_a_state_of_another_data_set_of_the_same_size_is_refused(shapes, tmp_path, copy_of):
    """state_dict carries a fingerprint of the data (count, names, labels): another
    set of 60 images is refused; the same set copied elsewhere is not."""
    other = tmp_path / "other"
    stoker.gen_shapes(other, 60, size=32, classes=4, seed=9)
    a = stoker.Loader(shapes, **SETTINGS)
    it = a.epoch(0)
    next(it)
    state = a.state_dict()
    assert isinstance(state["fingerprint"], int)
    b = stoker.Loader(other, **SETTINGS)
    assert b.state_dict()["samples"] == state["samples"]
    with pytest.raises(stoker.LoaderError, match="another data set"):
        b.load_state_dict(state)
    moved = stoker.Loader(copy_of(shapes), **SETTINGS)
    assert moved.state_dict()["fingerprint"] == state["fingerprint"]
    moved.load_state_dict(state)
    assert moved.state_dict()["next_batch"] == 1
    # A state saved before states had fingerprints is accepted as before.
    legacy = {k: v for k, v in state.items() if k != "fingerprint"}
    b.load_state_dict(legacy)


# Loads `shapes`' state with one change (named by argv[2]) into a fresh loader and
# prints what load_state_dict raised: in a child, because before the checks some of
# these ended the process (an allocation per rank of the state's world) or never
# returned (a mixture epoch drawn without end).
TAMPERED = textwrap.dedent(
    """
    import json, sys, stoker
    data, case = sys.argv[1], sys.argv[2]
    kw = dict(batch_size=4, workers=1, seed=5, rank=0, world_size=1)
    if case.startswith("mixture"):
        never = dict(stop="never", epoch_batches=3) if case != "mixture_counter" else {}
        data = stoker.Mixture([data, data], **never)
    state = stoker.Loader(data, **kw).state_dict()
    if case.startswith("mixture"):
        m = json.loads(state["mixture"])
        if case == "mixture_no_end":
            del m["end"]
        elif case == "mixture_huge_end":
            m["end"] = 2**64 - 1
        else:
            m["base"]["counter"] = 2**64 - 1
        state["mixture"] = json.dumps(m)
    else:
        state.update(
            {
                "world": {"world_size": 2**40},
                "rank": {"rank": 5, "world_size": 1},
                "batch_size": {"batch_size": 0},
            }[case]
        )
    try:
        stoker.Loader(data, **kw).load_state_dict(state)
        print("loaded", flush=True)
    except Exception as e:
        print(type(e).__name__, e, flush=True)
    """
)


@pytest.mark.parametrize(
    "case,says",
    [
        ("world", "the state's world_size is 1099511627776, out of range (a loader has 1 to"),
        ("rank", "the state's rank is 5, out of range for its world_size of 1"),
        ("batch_size", "the state's batch_size is 0, out of range"),
        ("mixture_no_end", 'the state\'s mixture has no "end"'),
        ("mixture_huge_end", 'the state\'s mixture "end" is 18446744073709551615'),
        ("mixture_counter", "the state's mixture base is at draw 18446744073709551615"),
    ],
)
def test_a_tampered_state_is_a_loader_error_naming_its_field(shapes, case, says):
    out = python_child(TAMPERED, shapes, case)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LoaderError "), out.stdout
    assert says in out.stdout, out.stdout
