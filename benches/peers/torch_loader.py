#!/usr/bin/env python3
"""Peer baseline: PyTorch DataLoader throughput on an ImageFolder of JPEGs.

The pipeline a PyTorch user writes for ImageNet-style training, measured the way
`stoker-load bench DATA --transform rrc:224,flip --batch-size 64` measures ours:

    torchvision.datasets.ImageFolder(DATA, transform=Compose([
        RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor()]))
    DataLoader(ds, batch_size=64, shuffle=True, num_workers=W)

With --pipeline randaugment (for `--transform rrc:224,flip,randaugment:n=2:m=9`) the
transform is torchvision.transforms.v2's, as the reference training scripts build it
on PIL images:

    v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                v2.RandAugment(num_ops=2, magnitude=9), v2.PILToTensor()])

and with --pipeline randaugment-tensor the same on uint8 tensors (v2.PILToTensor()
first: RandAugment then runs the tensor kernels stoker's ops follow).

For each W: one warm-up epoch (not timed; it also warms the page cache), then
images/s over the timed full epochs (all batches consumed, nothing else done with
them). Batches are u8 (N, 3, 224, 224), as ours are u8 (N, 224, 224, 3).

Threads: PyTorch's DataLoader already calls torch.set_num_threads(1) in every
worker process; we do the same explicitly in worker_init_fn. The main process
would by default use one intra-op thread per physical core; with --main-threads
(default 1) we pin it to one thread so that W=0 is a single-threaded run like
stoker's sync mode (decoding and PIL resizing are single-threaded anyway; only the
collate's torch.stack could use a second thread).

    python torch_loader.py /tmp/photos --workers 0 1 2 --epochs 2 --json
"""

import argparse
import json
import os
import resource
import sys
import time


def worker_init(_worker_id):
    import torch

    # What the DataLoader already does in each worker; explicit, so it is not a guess.
    torch.set_num_threads(1)


PIPELINES = ("rrc-flip", "randaugment", "randaugment-tensor")


def make_transform(pipeline):
    from torchvision import transforms

    if pipeline == "rrc-flip":
        return transforms.Compose(
            [
                transforms.RandomResizedCrop(224),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor(),
            ]
        )
    from torchvision.transforms import v2

    ra = [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.RandAugment(num_ops=2, magnitude=9)]
    if pipeline == "randaugment":
        return v2.Compose(ra + [v2.PILToTensor()])
    return v2.Compose([v2.PILToTensor()] + ra)


def make_loader(data, workers, batch_size, persistent, seed, pipeline="rrc-flip"):
    import torch
    from torchvision import datasets

    tf = make_transform(pipeline)
    ds = datasets.ImageFolder(data, transform=tf)
    g = torch.Generator()
    g.manual_seed(seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        worker_init_fn=worker_init if workers > 0 else None,
        persistent_workers=persistent and workers > 0,
        generator=g,
    )
    return ds, loader


def _proc_cpu(pid):
    """utime + stime of a live process, in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _worker_pids(loader):
    it = getattr(loader, "_iterator", None)  # persistent workers live here (private API)
    return [w.pid for w in getattr(it, "_workers", []) or [] if w.pid]


def cpu_snapshot(loader):
    """CPU seconds so far of this process, its reaped children and its live workers."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = {pid: _proc_cpu(pid) for pid in _worker_pids(loader)}
    return time.process_time() + ch.ru_utime + ch.ru_stime, live


def cpu_since(loader, snap):
    base, live0 = snap
    now, live1 = cpu_snapshot(loader)
    # Workers alive now: their time since the snapshot (or since birth if new).
    return now - base + sum(t - live0.get(pid, 0.0) for pid, t in live1.items())


def run_epoch(loader):
    n = 0
    for images, labels in loader:
        n += images.shape[0]
    return n


def measure(data, workers, epochs, batch_size, persistent, seed, pipeline="rrc-flip"):
    ds, loader = make_loader(data, workers, batch_size, persistent, seed, pipeline)
    run_epoch(loader)  # warm-up: worker start, page cache, allocator
    snap = cpu_snapshot(loader)
    t0 = time.perf_counter()
    n = 0
    for _ in range(epochs):
        n += run_epoch(loader)
    wall = time.perf_counter() - t0
    cpu = cpu_since(loader, snap)
    return {
        "peer": "torch",
        "workers": workers,
        "images_per_sec": n / wall,
        "images": n,
        "epochs": epochs,
        "batch_size": batch_size,
        "wall_seconds": wall,
        # CPU time of the main process and its workers over the timed epochs: less
        # sensitive than images/s to other jobs on a shared machine.
        "cpu_seconds": cpu,
        "images_per_cpu_second": n / cpu if cpu > 0 else None,
        "dataset_size": len(ds),
        "persistent_workers": persistent and workers > 0,
        "pipeline": pipeline,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="ImageFolder root (DATA/<class>/<image>)")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="worker counts to run (default 0 1 2)")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per worker count (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--main-threads", type=int, default=1, help="torch threads in the main process (default 1)")
    p.add_argument(
        "--no-persistent",
        action="store_true",
        help="restart the worker processes every epoch (DataLoader's default); "
        "by default they persist, as stoker's pipeline does across epochs",
    )
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    p.add_argument("--pipeline", choices=PIPELINES, default="rrc-flip", help="transform (default rrc-flip; see above)")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or any(w < 0 for w in a.workers):
        p.error("--epochs and --batch-size must be >= 1, workers >= 0")

    import torch
    import torchvision

    torch.set_num_threads(a.main_threads)
    torch.manual_seed(a.seed)  # RandomResizedCrop/Flip draw from torch's generator
    if not a.json:
        print(
            f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
            f"main threads {torch.get_num_threads()}, batch {a.batch_size}, {a.epochs} timed epoch(s)",
            file=sys.stderr,
        )
    for w in a.workers:
        r = measure(a.data, w, a.epochs, a.batch_size, not a.no_persistent, a.seed, a.pipeline)
        r["torch"] = torch.__version__
        r["torchvision"] = torchvision.__version__
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print(
                f"torch workers={w}: {r['images_per_sec']:.1f} images/s "
                f"({r['images']} images in {r['wall_seconds']:.2f} s; "
                f"{r['cpu_seconds']:.2f} CPU s, {r['images_per_cpu_second'] or 0:.0f} images per CPU s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
