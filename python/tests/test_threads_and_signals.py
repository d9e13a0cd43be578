"""No thread outlives its loader, and Ctrl-C (SIGINT) in the loop raises
KeyboardInterrupt promptly, in a child process so the test run is not interrupted."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import DUMPS_ON_SIGUSR1, python_child, where_stuck

import stoker


def threads():
    # Loaders of earlier tests that only the cycle collector frees would stop their
    # threads in the middle of a count.
    gc.collect()
    return len(os.listdir("/proc/self/task"))


pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="SKIPPED: needs Linux /proc to count threads"
)


def test_dropping_the_loader_mid_epoch_stops_its_threads(shapes):
    # The first batch imports numpy, whose OpenBLAS starts a thread the process keeps:
    # not the loader's, so counted in `before` (this test may run first).
    next(iter(stoker.Loader(shapes, batch_size=4, workers=1).epoch(0)))
    before = threads()
    loader = stoker.Loader(shapes, batch_size=4, workers=3, prefetch=2)
    it = loader.epoch(0)
    images, labels = next(it)
    assert threads() > before, "the async pipeline runs on threads of its own"
    del it, loader
    assert threads() == before, "the pipeline threads were not stopped"
    # Batches still held only keep their buffer, not the pipeline.
    del images, labels
    gc.collect()
    assert threads() == before


def test_threads_do_not_pile_up_over_epochs_and_restarts(shapes):
    before = threads()
    loader = stoker.Loader(shapes, batch_size=8, workers=2)
    for e in range(3):
        for _ in loader.epoch(e):
            pass
    during = threads()
    for e in (7, 2, 9):  # out of order: each restarts the pipeline
        next(iter(loader.epoch(e)))
    assert threads() <= during
    del loader
    assert threads() == before


CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy  # its BLAS thread pool starts on import: not ours to count
    import stoker

    loader = stoker.Loader(sys.argv[1], batch_size=4, transform="rrc:96,flip",
                           mode=sys.argv[2], workers=1, prefetch=1)
    before = len(os.listdir("/proc/self/task"))
    print("ready", flush=True)
    try:
        for e in range(10**6):
            for images, labels in loader.epoch(e):
                pass
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
    del loader
    print("threads", len(os.listdir("/proc/self/task")), before, flush=True)
    """
)


def interrupted_once(data, mode, after=0.5, timeout=60):
    """Runs CHILD over `data` in `mode`, sends it one SIGINT `after` seconds after it
    is ready, and returns its (stdout, stderr). A child that has not ended `timeout`
    seconds after the signal (a bound only a hang exceeds) fails the test with what
    its threads were doing (`where_stuck`)."""
    child = subprocess.Popen(
        [sys.executable, "-c", DUMPS_ON_SIGUSR1 + CHILD, str(data), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready", where_stuck(child)
        time.sleep(after)  # inside the loop
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the child ({mode}) had not ended {timeout} s after its SIGINT:\n"
                + where_stuck(child)
            )
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    # Promptly: a generous bound that only a hang (or a missed signal) exceeds.
    assert float(lines["interrupted"]) - sent < 10.0, out
    after, before = lines["threads"].split()
    assert int(after) <= int(before), "pipeline threads were left behind"
    return out, err


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_sigint_in_the_loop_raises_keyboard_interrupt(tmp_path, mode):
    data = tmp_path / "big"
    # Larger images, so that the consumer spends its time waiting on the loader.
    stoker.gen_shapes(data, 16, size=256, classes=2)
    interrupted_once(data, mode)


def test_uncaught_sigint_ends_the_process(tmp_path):
    data = tmp_path / "big"
    # Enough images that the child is still inside its loop when the signal comes.
    stoker.gen_shapes(data, 96, size=256, classes=2)
    code = CHILD.replace("except KeyboardInterrupt", "except ZeroDivisionError")
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(data), "async"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
    assert "KeyboardInterrupt" in err
    assert child.returncode != 0


def test_the_gil_is_released_while_a_batch_is_made(tmp_path):
    """Another Python thread keeps running while the loader works on a batch."""
    import threading

    data = tmp_path / "large"
    # Enough work per call that the ticker has time to run inside it.
    stoker.gen_shapes(data, 96, size=256, classes=2)
    # Sync mode: the whole batch is made inside one call, on this thread.
    loader = stoker.Loader(data, batch_size=8, transform="rrc:224,flip", mode="sync")
    next(iter(loader.epoch(0)))  # decoders and buffers warmed up
    # The ticker notes the calls it sees under way. Python code runs only under the
    # GIL, and with a switch interval far longer than the test no thread is made to
    # hand it over: the ticker runs only when the main thread lets the GIL go of its
    # own accord, and the ticker gives it back at every turn (`sleep(0)`). So it can
    # see `in_call` set only if the call let the GIL go.
    state = {"in_call": None, "seen": set()}
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            call = state["in_call"]
            if call is not None:
                state["seen"].add(call)
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    t = threading.Thread(target=ticker, daemon=True)
    try:
        t.start()
        it = iter(loader.epoch(1))
        calls = 0
        while True:
            state["in_call"] = calls
            batch = next(it, None)
            state["in_call"] = None
            if batch is None:
                break
            calls += 1
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    # Holding the GIL through the calls would hide every one of them from the ticker.
    # (The last call, which finds the epoch's end, does not count.) One seen is the
    # proof: on a loaded machine the ticker may not be scheduled inside every call, so
    # asking it to see most of them would test the machine, not the loader.
    seen = state["seen"] - {calls}
    assert calls == 12 and len(seen) >= 1, (calls, sorted(seen))


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_the_interpreter_exits_cleanly_with_a_live_loader(shapes, mode):
    """A loader still running at exit is dropped during finalisation without a hang
    or a crash."""
    code = (
        "import stoker, sys\n"
        f"loader = stoker.Loader(sys.argv[1], batch_size=4, mode={mode!r})\n"
        "it = iter(loader)\n"
        "images, labels = next(it)\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(shapes)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


RESUME_CHILD = textwrap.dedent(
    """
    import signal, sys
    import stoker

    # Ctrl-C raises KeyboardInterrupt only inside next(it), once per call: the script's
    # own lines never lose a batch to an interrupt, so every batch missing below was
    # lost by the loader. Inside next() the loader is in use (state_dict() refuses);
    # a handler that Python runs just after next() returned, before `b = ...`, would
    # drop the batch returned: Python's loss, in a window of microseconds no library
    # can close, which would fail this test about once in a hundred runs.
    armed = False

    def on_sigint(signum, frame):
        global armed
        if not armed:
            return
        try:
            loader.state_dict()
        except RuntimeError:
            armed = False
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    data, mode = sys.argv[1], sys.argv[2]

    def make():
        return stoker.Loader(data, batch_size=2, transform="rrc:128,flip", mode=mode,
                             workers=1, prefetch=1, seed=3)

    # The batches a run without interrupts gives: (epoch, step, first label).
    want = [(e, images.base.position[1], int(labels[0]))
            for e in range(2) for images, labels in make().epoch(e)]
    loader = make()
    got, interrupts, bad_states = [], 0, []
    print("ready", flush=True)
    for e in range(2):
        it = loader.epoch(e)
        delivered = 0
        while True:
            b = None
            try:
                armed = True
                b = next(it)
                armed = False
            except KeyboardInterrupt:
                interrupts += 1
                if b is None:
                    # Interrupted: nothing delivered, and the state says so.
                    s = loader.state_dict()
                    if (s["epoch"], s["next_batch"]) != (e, delivered):
                        bad_states.append((e, s["next_batch"], delivered))
            except StopIteration:
                armed = False
                break
            if b is not None:
                images, labels = b
                got.append((e, images.base.position[1], int(labels[0])))
                delivered += 1
    # The parent goes on signalling until this process has exited: ignored from
    # here, or one landing during interpreter shutdown (handlers back to default)
    # would kill it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("done", interrupts, got == want, len(got), len(want), bad_states, flush=True)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_interrupted_next_loses_no_batch(tmp_path, mode):
    """SIGINT while next(it) waits raises KeyboardInterrupt; the next call delivers
    the batch that was being made (before: it was dropped, the run went 0-4 then 6,
    and state_dict said 6), and the state moves only when a batch is delivered."""
    data = tmp_path / "big"
    stoker.gen_shapes(data, 24, size=256, classes=2)
    child = subprocess.Popen(
        [sys.executable, "-c", RESUME_CHILD, str(data), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        # Interrupts every 20 ms until the child is done.
        while child.poll() is None:
            child.send_signal(signal.SIGINT)
            time.sleep(0.02)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    fields = out.split()
    assert fields[0] == "done", out
    interrupts, same = int(fields[1]), fields[2]
    assert interrupts > 0, "no interrupt landed inside next(): nothing was tested"
    assert same == "True", f"batches lost or repeated: got {fields[3]} of {fields[4]}"
    assert out.strip().endswith("[]"), f"state_dict moved without a delivery: {out}"


def test_one_loader_used_from_two_threads_is_a_clear_error(tmp_path):
    """A second thread using a loader while the first waits in next() gets a
    RuntimeError that says what is wrong, not pyo3's bare "Already borrowed"."""
    import threading

    data = tmp_path / "large"
    stoker.gen_shapes(data, 16, size=256, classes=2)
    loader = stoker.Loader(data, batch_size=8, transform="rrc:224,flip", mode="sync")
    it = iter(loader.epoch(0))
    inside, stop = threading.Event(), threading.Event()

    def consume():
        while not stop.is_set():
            inside.set()
            for _ in loader.epoch(0):
                pass

    t = threading.Thread(target=consume)
    t.start()
    inside.wait()
    seen = {}
    deadline = time.monotonic() + 30
    calls = {
        "next": lambda: next(it),
        "state_dict": loader.state_dict,
        "metrics": loader.metrics,
        "len": lambda: len(loader),
        "epoch": lambda: loader.epoch(1),
    }
    while len(seen) < len(calls) and time.monotonic() < deadline:
        for name, call in calls.items():
            try:
                call()
            except RuntimeError as e:
                seen[name] = str(e)
    stop.set()
    t.join()
    assert set(seen) == set(calls), f"never refused: {set(calls) - set(seen)}"
    for name, msg in seen.items():
        assert "in use by another thread" in msg and "Already" not in msg, (name, msg)
    assert "stoker.Loader" in repr(loader)


FIRST_BATCH_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy
    import stoker

    loader = stoker.Loader(sys.argv[1], batch_size=4, mode=sys.argv[2])
    # A SIGINT sent from the first Python function called inside next(): its handler
    # then raises KeyboardInterrupt inside that function (as Ctrl-C would, landing
    # there), whatever code it is.
    inside, sent = False, []

    def tracer(frame, event, arg):
        if inside and not sent:
            sent.append(frame.f_code.co_filename)
            os.kill(os.getpid(), signal.SIGINT)

    sys.settrace(tracer)
    it = loader.epoch(0)
    got, interrupts = 0, 0
    while True:
        try:
            inside = True
            b = next(it, None)
            inside = False
        except KeyboardInterrupt:
            inside = False
            interrupts += 1
            continue
        if b is None:
            break
        got += 1
    sys.settrace(None)
    print(got, interrupts, sent)
    """
)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ctrl_c_in_the_first_batch_is_a_keyboard_interrupt_not_a_panic(shapes, mode):
    """numpy's C API was loaded at the first batch, running numpy's Python code inside
    next(); a Ctrl-C landing there became a PanicException ("Failed to access NumPy
    array API capsule") that ended the script. It is loaded when stoker is imported."""
    out = python_child(FIRST_BATCH_CHILD, shapes, mode, timeout=120)
    assert out.returncode == 0, out.stderr
    got, interrupts, sent = out.stdout.split(" ", 2)
    # 60 samples in batches of 4, each delivered once, interrupted or not.
    assert int(got) == 15, out.stdout
    assert int(interrupts) == len(eval(sent)), out.stdout
