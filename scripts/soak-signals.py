#!/usr/bin/env python3
"""Soak for Ctrl-C: runs the child of python/tests/test_threads_and_signals.py (a
loader looping over epochs, one SIGINT) many times and counts the runs that hang or
fail, each with what its threads were doing (a benchmark-style run, not a test).

    python scripts/soak-signals.py [--runs N] [--mode sync|async|both] [--load K]

Run it with the Python that has the `stoker` wheel installed (and pytest: it imports
the test's child and diagnostics). The SIGINT lands at a random point between 0 and
0.8 s into the loop, so that it meets every part of `__next__`, the creation of each
epoch's iterator and the loop's own lines. `--load K` keeps K busy processes running
beside it, as a loaded CI machine would. Prints one line per failure (its report goes
to --reports) and a summary: runs, hangs and other failures per mode.
"""

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))

import pytest  # noqa: E402
import stoker  # noqa: E402
from test_threads_and_signals import interrupted_once  # noqa: E402


def spin():
    while True:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100, help="runs per mode")
    p.add_argument("--mode", choices=["sync", "async", "both"], default="both")
    p.add_argument("--load", type=int, default=0, help="busy processes beside the runs")
    p.add_argument("--timeout", type=float, default=30, help="seconds after the SIGINT")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reports", default="soak-signals-reports", help="folder for reports")
    a = p.parse_args()
    modes = ["sync", "async"] if a.mode == "both" else [a.mode]
    rng = random.Random(a.seed)
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(a.load)]
    for h in hogs:
        h.start()
    counts = {m: [0, 0, 0] for m in modes}  # runs, hangs, other failures
    reports = Path(a.reports)
    start = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "big"
            stoker.gen_shapes(data, 16, size=256, classes=2)
            for i in range(a.runs):
                for mode in modes:
                    after = rng.uniform(0.0, 0.8)
                    counts[mode][0] += 1
                    try:
                        interrupted_once(data, mode, after=after, timeout=a.timeout)
                        continue
                    except pytest.fail.Exception as e:
                        kind, text = 1, str(e)
                    except AssertionError as e:
                        kind, text = 2, str(e)
                    counts[mode][kind] += 1
                    reports.mkdir(exist_ok=True)
                    f = reports / f"{mode}-{i}.txt"
                    f.write_text(f"signal after {after:.3f} s\n{text}\n")
                    what = "HANG" if kind == 1 else "FAIL"
                    print(f"{what} {mode} run {i} (signal after {after:.3f} s): {f}", flush=True)
    finally:
        for h in hogs:
            h.terminate()
    took = time.monotonic() - start
    print(f"python {sys.version.split()[0]}, stoker {stoker.__version__} from {stoker.__file__}")
    print(f"{os.cpu_count()} cores, {a.load} busy processes beside, {took:.0f} s")
    for m, (runs, hangs, fails) in counts.items():
        print(f"{m}: {runs} runs, {hangs} hangs, {fails} other failures")
    return 1 if any(h or f for _, h, f in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
