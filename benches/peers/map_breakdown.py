#!/usr/bin/env python3
"""Where a mapped batch's CPU time goes on the Python side (issue 44): per batch,
the CPU seconds of `fn` itself, of `stoker._map.run` without `fn` (the sample dict,
the rng, and the copy of the outputs into the batch), of `stoker._map.collate` on
the consumer's thread, and of the whole process. Photos, `rrc:224,flip`, batch 64,
one warm-up epoch, then the timed epochs; `light` (float32, channels first,
normalised; 2 decode workers) or `heavy` (numpy ufuncs; 1 decode worker), both
from map_bench.py, at 2 map threads.

    python benches/peers/map_breakdown.py /tmp/photos light --epochs 2

CPU time per batch is what a shared machine disturbs least: images/s there follow
the scheduler's share more than the code. It works with builds before 2026-12-06
too (their `run` takes four arguments; the wrappers pass any through).
"""

import argparse
import sys
import threading
import time
from pathlib import Path

import stoker
from stoker import _map

sys.path.insert(0, str(Path(__file__).parent))
import map_bench  # noqa: E402  (beside this script)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("photos")
    p.add_argument("map", choices=["light", "heavy"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    user = getattr(map_bench, a.map)
    spent = {"fn": 0.0, "run": 0.0, "collate": 0.0}
    lock = threading.Lock()

    def timed(name, f):
        def call(*args):
            t = time.thread_time()
            out = f(*args)
            with lock:
                spent[name] += time.thread_time() - t
            return out

        return call

    # The loader takes `run` from the module when it is made: patch it before.
    _map.run = timed("run", _map.run)
    _map.collate = timed("collate", _map.collate)
    loader = stoker.Loader(
        a.photos,
        batch_size=64,
        transform="rrc:224,flip",
        workers=1 if a.map == "heavy" else 2,
        map=timed("fn", user),
        map_threads=a.threads,
    )
    for _ in loader.epoch(0):
        pass
    spent.update(dict.fromkeys(spent, 0.0))
    t0, c0, batches, n = time.perf_counter(), time.process_time(), 0, 0
    for e in range(1, a.epochs + 1):
        for b in loader.epoch(e):
            batches, n = batches + 1, n + len(b["label"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ms = {k: v / batches * 1e3 for k, v in spent.items()}
    print(
        f"{a.map} map, {a.threads} threads ({stoker.__file__}): {n / wall:.0f} images/s, "
        f"{cpu / wall:.2f} cores; CPU ms per batch: fn {ms['fn']:.1f}, run without fn "
        f"{ms['run'] - ms['fn']:.1f}, collate {ms['collate']:.1f}, process "
        f"{cpu / batches * 1e3:.1f}"
    )


if __name__ == "__main__":
    sys.exit(main())
