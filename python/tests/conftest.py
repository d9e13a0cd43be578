"""Shared fixtures: small image folders made by stoker.gen_shapes, the stoker-load
binary for comparisons with the Rust CLI, and a fresh Python to run a script in."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stoker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def shapes(tmp_path_factory):
    """60 JPEGs of 32x32 px in 3 classes."""
    d = tmp_path_factory.mktemp("data") / "shapes"
    stoker.gen_shapes(d, 60, size=32, classes=3, seed=1)
    return d


@pytest.fixture(scope="session")
def many(tmp_path_factory):
    """48 JPEGs of 16x16 px: with batch 2, 24 batches an epoch."""
    d = tmp_path_factory.mktemp("data") / "many"
    stoker.gen_shapes(d, 48, size=16, classes=4, seed=2)
    return d


@pytest.fixture
def copy_of(tmp_path):
    """Copies a data folder so a test may damage it."""

    def copy(src):
        dst = tmp_path / Path(src).name
        shutil.copytree(src, dst)
        return dst

    return copy


def find_stoker_load():
    """The stoker-load binary: $STOKER_LOAD, else the workspace's target folder."""
    env = os.environ.get("STOKER_LOAD")
    if env:
        return Path(env) if Path(env).is_file() else None
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    found = [target / p / "stoker-load" for p in ("release", "debug")]
    found = [p for p in found if p.is_file()]
    # The most recently built one: an old release build may predate the sources.
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


@pytest.fixture(scope="session")
def stoker_load():
    exe = find_stoker_load()
    if exe is None and os.environ.get("CI"):
        pytest.fail("no stoker-load binary: CI must build it (scripts/python-tests.sh does)")
    if exe is None:
        pytest.skip(
            "SKIPPED: no stoker-load binary (build it with `cargo build -p stoker-loader "
            "--bin stoker-load` or set STOKER_LOAD); .ci/run builds it"
        )
    return exe


def digest(batches):
    """stoker.Digest of (images, labels) pairs."""
    d = stoker.Digest()
    for images, labels in batches:
        d.update(images, labels)
    return d.hexdigest()


def python_child(script, *args, timeout=120):
    """`script` run by a fresh Python with `args` (made str) as sys.argv[1:], its output
    captured: for what must happen at exit, after a fork, or without hanging the suite
    (a hang fails at `timeout`)."""
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# A child started with this prefix dumps the Python stack of every thread to its stderr
# on SIGUSR1 (faulthandler's handler is C code: it runs even while the main thread is
# stuck in native code or waiting for the GIL). `where_stuck` sends it.
DUMPS_ON_SIGUSR1 = "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1, all_threads=True)\n"


def where_stuck(child):
    """What a child that did not finish in time was doing, for a failure message: each
    of its threads' state and kernel wait channel (/proc), their native stacks (gdb,
    where installed) and, for a child started with DUMPS_ON_SIGUSR1, every thread's
    Python stack. Kills the child."""
    pid, out = child.pid, []
    task = Path(f"/proc/{pid}/task")
    for t in sorted(task.iterdir(), key=lambda p: int(p.name)) if task.is_dir() else []:

        def read(name):
            try:
                return (t / name).read_text().strip()
            except OSError as e:
                return f"({e.strerror})"

        # stat: "pid (comm) state ...": the state is the field after the name.
        state = read("stat").rsplit(")", 1)[-1].split()[:1]
        out.append(f"task {t.name} {read('comm')!r} state {state} wchan {read('wchan')}")
        stack = read("stack")
        if stack and not stack.startswith("("):
            out += ["    " + line for line in stack.splitlines()]
    if shutil.which("gdb"):
        try:
            bt = subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            out += ["--- gdb ---", bt.stdout[-20000:]]
        except subprocess.TimeoutExpired:
            out.append("--- gdb did not finish ---")
    else:
        out.append("--- no gdb here for the native stacks ---")
    if child.poll() is None:
        child.send_signal(signal.SIGUSR1)
        time.sleep(1.0)  # for the dump to be written; not a bound on anything
        child.kill()
    try:
        rest, err = child.communicate(timeout=30)
    except ValueError:  # its pipes were already read to the end
        rest, err = "", ""
    out += ["--- stdout ---", str(rest), "--- stderr ---", str(err)]
    return "\n".join(out)
