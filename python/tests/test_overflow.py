"""The ends of the documented ranges: epoch 2**64-1, and steps= whose draws overflow."""

import textwrap

import pytest

import stoker
from conftest import python_child

# Prints a digest per batch of epoch 2**64-1 (whole, then resumed after its first
# batch): in a child, so that a hang fails the test instead of stopping the suite.
LAST_EPOCH = textwrap.dedent(
    """
    import sys, stoker
    def digests(batches):
        out = []
        for images, labels in batches:
            d = stoker.Digest()
            d.update(images, labels)
            out.append(d.hexdigest())
        return out
    data, mode = sys.argv[1], sys.argv[2]
    make = lambda: stoker.Loader(data, batch_size=8, mode=mode, seed=5, transform="flip")
    loader = make()
    state = {**loader.state_dict(), "epoch": 2**64 - 1, "next_batch": 1}
    whole = digests(loader.epoch(2**64 - 1))
    resumed = make()
    resumed.load_state_dict(state)
    print(" ".join(whole), flush=True)
    print(" ".join(digests(resumed.epoch(2**64 - 1))), flush=True)
    # Past the last epoch there is no next one: iteration ends at once, and the state
    # is the end of the last.
    after = loader.state_dict()
    assert list(loader) == [], "no epoch after 2**64-1"
    assert (after["epoch"], after["next_batch"]) == (2**64 - 1, len(whole)), after
    """
)


def last_epoch(shapes, mode):
    out = python_child(LAST_EPOCH, shapes, mode)
    assert out.returncode == 0, out.stderr
    whole, resumed = (line.split() for line in out.stdout.splitlines())
    return whole, resumed


def test_the_last_epoch_is_read_whole_in_async_mode_as_in_sync(shapes):
    """Async mode read epoch 2**64-1 and then hung: its read stage overflowed going on
    to the next epoch, of which there is none."""
    whole, resumed = last_epoch(shapes, "sync")
    assert len(whole) == 8  # 60 samples in batches of 8
    assert resumed == whole[1:]
    assert last_epoch(shapes, "async") == (whole, resumed)



@pytest.mark.parametrize("steps", [2**62, 2**63 - 1, 5 * 10**18])
def test_steps_past_the_draw_counter_are_a_value_error_naming_steps(shapes, many, steps):
    """A never epoch is steps x batch_size x world_size draws, counted in 64 bits: past
    2**64 the constructor raised a PanicException (an overflow)."""
    with pytest.raises(ValueError, match=f"argument 'data': {steps} batches of 4 on each of 1 ranks"):
        stoker.Loader(
            stoker.Mixture([shapes, many], stop="never", epoch_batches=steps),
            batch_size=4, rank=0, world_size=1,
        )
