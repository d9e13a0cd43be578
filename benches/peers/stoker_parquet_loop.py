#!/usr/bin/env python3
"""stoker's Python side of the Parquet comparison: `stoker.Loader(stoker.Parquet(DIR))`
through one Python loop (take each batch, count it, drop it), the settings of
`hf_datasets_loader.py` and `stoker-load bench DIR --transform rrc:224,flip`:
RandomResizedCrop(224) + flip, u8, batch 64, shuffled, async with 2 workers. One
untimed warm-up epoch, then images/s over the timed epochs.

    python benches/peers/stoker_parquet_loop.py /tmp/photos-parquet --epochs 2 --json

Needs a Python with the stoker wheel (and numpy); parquet_compare.sh runs it as the
"stoker.Parquet (Python)" side.
"""

import argparse
import json
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="a folder of Parquet files (or a file, a glob)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    import stoker

    loader = stoker.Loader(
        stoker.Parquet(a.data),
        batch_size=a.batch_size,
        transform="rrc:224,flip",
        mode="async",
        workers=a.workers,
        prefetch=2,
        seed=0,
    )
    for _ in loader.epoch(0):  # warm-up: threads started, page cache warm
        pass
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for e in range(1, a.epochs + 1):
        for _images, labels in loader.epoch(e):
            n += len(labels)
    wall = time.perf_counter() - t0
    r = {
        "peer": "stoker.Parquet (Python)",
        "workers": a.workers,
        "images_per_sec": n / wall,
        "images": n,
        "epochs": a.epochs,
        "wall_seconds": wall,
        "cores_busy": (time.process_time() - c0) / wall,
        "stoker": stoker.__version__,
        "module": stoker.__file__,
    }
    print(json.dumps(r) if a.json else f"stoker.Parquet (Python): {n / wall:.1f} images/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
