"""A process forked after a loader was made (multiprocessing's default start on Linux,
DataLoader workers built around stoker) gets a working loader: the pipeline's threads,
the storage runtime and its clients are started again in the child, which goes on
with exactly the batches the parent would have had. Never a hang, and never a
BaseException such as PanicException. Each case runs in a fresh Python process, which
forks; the child reports through its exit status and a line on stdout."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import digest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="SKIPPED: no os.fork here")

CHILD = textwrap.dedent(
    """
    import os, sys, signal, traceback
    import stoker

    data, mode, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def digest(batches):
        d = stoker.Digest()
        for images, labels in batches:
            d.update(images, labels)
        return d.hexdigest()

    def make():
        return stoker.Loader(data, batch_size=4, mode=mode, workers=workers, seed=5,
                             transform="rrc:24,flip")

    loader = make()
    it = loader.epoch(0)
    head = [next(it), next(it)]  # the pipeline runs (async: threads, reads ahead)
    pid = os.fork()
    if pid == 0:
        # The child: the rest of the epoch from the same iterator, then a new epoch,
        # then a fresh loader; any exception is reported, never raised past here.
        try:
            signal.alarm(60)  # a hang ends the child instead of the test
            rest = digest(it)
            second = digest(loader.epoch(1))
            fresh = digest(make().epoch(1))
            print("child", rest, second, fresh, flush=True)
            os._exit(0)
        except BaseException as e:
            print("child-raised", type(e).__name__, e, flush=True)
            traceback.print_exc()
            os._exit(3)
    # The parent goes on too, with its own threads.
    rest = digest(it)
    second = digest(loader.epoch(1))
    _, status = os.waitpid(pid, 0)
    print("parent", rest, second, os.waitstatus_to_exitcode(status), flush=True)
    """
)


def run_child(data, mode, workers, env=None):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), mode, str(workers)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = [line.split() for line in out.stdout.splitlines()]
    assert out.returncode == 0, (out.stdout, out.stderr)
    child = next((line for line in lines if line[0] in ("child", "child-raised")), None)
    assert child is not None and child[0] == "child", (out.stdout, out.stderr)
    parent = next(line for line in lines if line[0] == "parent")
    assert parent[3] == "0", f"the child exited with {parent[3]}: {out.stderr}"
    return child[1:], parent[1:3]


@pytest.mark.parametrize("mode,workers", [("async", 2), ("sync", 0)])
def test_a_forked_child_gets_a_working_loader(shapes, mode, workers):
    import stoker

    ref = stoker.Loader(shapes, batch_size=4, mode="sync", seed=5, transform="rrc:24,flip")
    full = list(ref.epoch(0))
    want_rest = digest(full[2:])
    want_second = digest(ref.epoch(1))
    child, parent = run_child(shapes, mode, workers)
    assert parent == [want_rest, want_second]
    assert child == [want_rest, want_second, want_second]


def test_a_forked_child_reads_from_s3_in_both_modes(s3, shapes, tmp_path):
    """The storage runtime does not survive a fork: the child starts its own (in
    sync mode the parent's runtime, whose threads stayed behind, once hung it)."""
    import stoker

    pack = tmp_path / "shapes.pack"
    stoker.pack(shapes, pack)
    s3.create_bucket(Bucket="forkdata")
    s3.upload_file(str(pack), "forkdata", "shapes.pack")
    ref = stoker.Loader(pack, batch_size=4, mode="sync", seed=5, transform="rrc:24,flip")
    full = list(ref.epoch(0))
    want = [digest(full[2:]), digest(ref.epoch(1))]
    for mode, workers in (("sync", 0), ("async", 2)):
        child, parent = run_child("s3://forkdata/shapes.pack", mode, workers, env=dict(os.environ))
        assert parent == want, mode
        assert child == want + want[1:], mode


# The moto fixture of the remote tests.
from test_remote import s3  # noqa: E402,F401
