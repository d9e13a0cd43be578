#!/usr/bin/env python3
"""Python data loaders side by side: stoker.Loader, torch's DataLoader (0 and 2
workers), tf.data and DALI's CPU pipeline (each where installed), all fed through one
Python loop, on the same photos with RandomResizedCrop(224) + horizontal flip, u8,
batch 64. For each: images/s over the timed epochs, CPU seconds of the whole process
tree over them (worker processes included), and the peak RSS (and PSS) of the whole
process tree over the run.

    python benches/peers/python_loaders.py /tmp/photos [--epochs 2] [--json]
           [--only stoker,torch0,torch2,tfdata,dali] [--stoker-load target/release/stoker-load]

Each loader runs in a child process of its own (this script with --child NAME), so
that one's imports and memory do not count against another; the parent samples the
child's process tree from /proc every 20 ms for RSS and PSS. Inside the child: one
untimed warm-up epoch (threads and worker processes started, page cache warm), then
the timed epochs. With a stoker-load binary (found in target/ or given), the Rust
CLI's `bench` runs the same settings too, for the Python-vs-Rust figure.

Linux only (/proc). Nothing here is needed to build or test stoker.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

BATCH = 64
SIZE = 224
SEED = 0
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the loaders


def stoker_epochs(data, workers):
    import stoker

    loader = stoker.Loader(
        data,
        batch_size=BATCH,
        transform=f"rrc:{SIZE},flip",
        mode="async" if workers else "sync",
        workers=max(workers, 1),
        prefetch=2,
        seed=SEED,
    )
    return loader.epoch


def torch_epochs(data, workers):
    import torch
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    tf = transforms.Compose(
        [transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(), transforms.PILToTensor()]
    )
    loader = torch.utils.data.DataLoader(
        datasets.ImageFolder(data, transform=tf),
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        worker_init_fn=(lambda _: torch.set_num_threads(1)) if workers else None,
    )
    return lambda _epoch: iter(loader)


def tfdata_epochs(data, _workers):
    sys.path.insert(0, str(Path(__file__).parent))
    import tensorflow as tf
    from tfdata_loader import list_folder, make_dataset

    paths, labels = list_folder(data)
    # antialias=True: the resize stoker and torchvision compute; fused decode-and-crop.
    ds = make_dataset(tf, paths, labels, BATCH, antialias=True, seed=SEED, threads=None, fused=True)
    return lambda _epoch: ((b[0].numpy(), b[1].numpy()) for b in ds)


def dali_epochs(data, workers):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy  # noqa: F401 (import check)

    threads = max(workers, 1)

    @pipeline_def(batch_size=BATCH, num_threads=threads, device_id=None, seed=SEED)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(data), random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE, antialias=True)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()
    per_epoch = p.epoch_size("reader")
    steps = (per_epoch + BATCH - 1) // BATCH

    def epoch(_e):
        for _ in range(steps):
            images, labels = p.run()
            yield images.as_array(), labels.as_array()

    return epoch


LOADERS = {
    "stoker_sync": (stoker_epochs, 0),
    "stoker": (stoker_epochs, 2),
    "torch0": (torch_epochs, 0),
    "torch2": (torch_epochs, 2),
    "tfdata": (tfdata_epochs, None),
    "dali": (dali_epochs, 2),
}


# ------------------------------------------------------- process-tree figures


def descendants(pid):
    """pid and every process below it."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def tree_cpu_seconds(pid):
    """User + system CPU seconds of the live processes of pid's tree."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def tree_memory(pid):
    """(RSS, PSS) bytes summed over pid's tree."""
    rss = pss = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


# ------------------------------------------------------------------ the child


def child(name, data, epochs):
    make, workers = LOADERS[name]
    t_import = time.perf_counter()
    batches = make(data, workers)
    start_seconds = time.perf_counter() - t_import

    def one_loop(epoch):
        # The one loop every loader goes through: take each batch, count it, drop it.
        n = 0
        for images, labels in batches(epoch):
            n += len(labels)
        return n

    me = os.getpid()
    cpu_all, t_all = tree_cpu_seconds(me), time.perf_counter()
    warm = one_loop(0)  # warm-up
    cpu0, t0 = tree_cpu_seconds(me), time.perf_counter()
    images = sum(one_loop(e) for e in range(1, epochs + 1))
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds(me) - cpu0
    print(
        json.dumps(
            {
                "loader": name,
                "workers": workers,
                "images": images,
                "seconds": wall,
                "images_per_sec": images / wall,
                "cpu_seconds": cpu,
                "images_per_cpu_second": images / cpu if cpu > 0 else None,
                "start_seconds": start_seconds,
                # Warm-up epoch included, as `stoker-load bench` counts its start-up.
                "images_per_sec_all": (warm + images) / (time.perf_counter() - t_all),
                "images_per_cpu_second_all": (warm + images) / max(tree_cpu_seconds(me) - cpu_all, 1e-9),
            }
        ),
        flush=True,
    )


def run_sampled(args):
    """Runs `args`, sampling its process tree's memory every 20 ms meanwhile; returns
    (returncode, stdout, stderr, peak RSS, peak PSS). Every loader measured here, the
    Rust CLI included, runs under the same sampler: reading a process's smaps_rollup
    takes its memory-map lock, which slows it by a few percent, so sampling one side
    only would skew the comparison."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]

    def sample():
        while proc.poll() is None:
            rss, pss = tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    return proc.returncode, out, err, peak[0], peak[1]


def run_child(name, data, epochs):
    """Runs one loader in a child process, sampling its tree's memory meanwhile."""
    code, out, err, rss, pss = run_sampled(
        [sys.executable, __file__, str(data), "--child", name, "--epochs", str(epochs)]
    )
    if code != 0:
        last = (err.strip().splitlines() or ["?"])[-1]
        return {"loader": name, "error": last}
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_bytes"], result["peak_pss_bytes"] = rss, pss
    return result


def available(name):
    module = {
        "stoker_sync": "stoker",
        "stoker": "stoker",
        "torch0": "torchvision",
        "torch2": "torchvision",
        "tfdata": "tensorflow",
        "dali": "nvidia.dali",
    }[name]
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def cli(exe, data, epochs):
    """`stoker-load bench` with the same settings, over 1 + `epochs` epochs from a cold
    start (after a separate run that warms the page cache)."""
    args = [str(exe), "bench", str(data), "--transform", f"rrc:{SIZE},flip", "--batch-size", str(BATCH)]
    args += ["--workers", "2", "--prefetch", "2", "--seed", str(SEED), "--json", "--epochs"]
    import resource

    subprocess.run(args + ["1"], check=True, capture_output=True)  # page cache, as the child's warm-up
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, out, err, _, _ = run_sampled(args + [str(epochs + 1)])
    if code != 0:
        raise RuntimeError(f"stoker-load bench failed: {err.strip()}")
    r = json.loads(out)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The whole process, start-up included: a little more than the epochs' own CPU.
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "loader": "stoker-load (Rust CLI)",
        "workers": 2,
        "images": r["samples"],
        "seconds": r["wall_seconds"],
        "images_per_sec": r["images_per_sec"],
        "images_per_sec_all": r["images_per_sec"],
        "images_per_cpu_second_all": r["samples"] / cpu,
        "peak_rss_bytes": r["peak_rss_bytes"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="an ImageFolder of JPEGs (make_photos.py)")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs (after one warm-up)")
    p.add_argument("--only", default=",".join(LOADERS), help="comma-separated: " + ", ".join(LOADERS))
    p.add_argument("--stoker-load", type=Path, help="the Rust CLI (default: target/release/stoker-load)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child, a.data, a.epochs)

    rows = []
    exe = a.stoker_load or REPO / "target" / "release" / "stoker-load"
    if exe.is_file():
        rows.append(cli(exe, a.data, a.epochs))
    for name in a.only.split(","):
        if not available(name):
            rows.append({"loader": name, "error": "not installed"})
            continue
        rows.append(run_child(name, a.data, a.epochs))
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"{a.data}: rrc:{SIZE},flip, u8, batch {BATCH}, 1 warm-up + {a.epochs} timed epochs, {os.cpu_count()} CPUs")
    print(f"{'loader':<24} {'workers':>7} {'images/s':>9} {'CPU s':>7} {'img/CPU s':>9} {'peak RSS MB':>11} {'peak PSS MB':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['loader']:<24} {'':>7} {r['error']}")
            continue
        cpu = r.get("cpu_seconds")
        per_cpu = r.get("images_per_cpu_second")
        pss = r.get("peak_pss_bytes")
        print(
            f"{r['loader']:<24} {r['workers'] if r['workers'] is not None else 'auto':>7} {r['images_per_sec']:>9.1f} "
            f"{cpu if cpu is not None else float('nan'):>7.1f} {per_cpu or float('nan'):>9.1f} "
            f"{r['peak_rss_bytes'] / 1e6:>11.1f} {pss / 1e6 if pss else float('nan'):>11.1f}"
        )
    by = {r["loader"]: r for r in rows if "error" not in r}
    if "stoker" in by and "torch2" in by:
        s, t = by["stoker"], by["torch2"]
        print(
            f"stoker / torch (2 workers): {s['images_per_sec'] / t['images_per_sec']:.2f}x images/s, "
            f"peak RSS {s['peak_rss_bytes'] / t['peak_rss_bytes']:.2f}x, PSS {s['peak_pss_bytes'] / t['peak_pss_bytes']:.2f}x"
        )
    if "stoker" in by and "stoker-load (Rust CLI)" in by:
        s, c = by["stoker"], by["stoker-load (Rust CLI)"]
        print(
            f"Python / Rust CLI (2 workers, {a.epochs + 1} epochs from a cold start each): "
            f"{s['images_per_sec_all']:.1f} / {c['images_per_sec_all']:.1f} = "
            f"{s['images_per_sec_all'] / c['images_per_sec_all']:.3f}; images per CPU second "
            f"{s['images_per_cpu_second_all']:.1f} / {c['images_per_cpu_second_all']:.1f} = "
            f"{s['images_per_cpu_second_all'] / c['images_per_cpu_second_all']:.3f}"
        )


if __name__ == "__main__":
    main()
