#!/usr/bin/env python3
"""Throughput of `stoker.Loader(map=fn, map_threads=N)` (issue 26), three figures:

  scaling   a numpy-heavy map (per-pixel float maths on 224x224 images) at 1 and 2
            map threads: the 2-thread rate over the 1-thread rate (numpy releases
            the GIL inside its ufuncs, so the calls overlap).
  overhead  photos with rrc:224,flip: no map against an identity map
            (`lambda s, rng: s`): the share of throughput the map machinery costs.
  torch     photos with rrc:224,flip and the light map (float32, channels first,
            normalised), stoker at 2 workers against torch's DataLoader at 2 workers
            with torchvision's RandomResizedCrop(224) + RandomHorizontalFlip and the
            same map in its Dataset (skipped when torch is not installed).

Each figure alternates its runs for --rounds rounds after one warm-up epoch per
loader, and prints the median images/s of each side (all batches consumed, nothing
else done with them).

    python benches/peers/map_bench.py /tmp/photos --rounds 5 --json
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import stoker

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255


def heavy(sample, rng):
    """Per-pixel float maths: a few passes of numpy ufuncs over 224x224x3 floats."""
    x = sample["image"].astype(np.float32) * (1 / 255)
    for _ in range(4):
        x = np.sqrt(x * x + 0.25) * np.exp(-x) + np.sin(x) * 0.5
    return {"image": x, "label": sample["label"]}


def identity(sample, rng):
    return sample


def light(sample, rng):
    img = (sample["image"].astype(np.float32) - MEAN) / STD
    return {"image": np.ascontiguousarray(img.transpose(2, 0, 1)), "label": sample["label"]}


def rate(make, epochs):
    """(images/s, cores used: this process's CPU seconds per second) of `epochs` full
    epochs of a loader from `make`, after one warm-up. The second figure shows the
    parallelism a run got on a machine shared with other work."""
    loader = make()
    for _ in loader.epoch(0):
        pass
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    for e in range(1, epochs + 1):
        for b in loader.epoch(e):
            n += len(b["label"] if isinstance(b, dict) else b[1])
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    del loader
    return n / dt, cpu / dt


def rounds(sides, n, epochs):
    got = {name: [] for name in sides}
    for _ in range(n):
        for name, make in sides.items():
            got[name].append(rate(make, epochs))
    return {
        name: {
            "median": statistics.median(r for r, _ in v),
            "all": [r for r, _ in v],
            "cores": [c for _, c in v],
        }
        for name, v in got.items()
    }


def torch_side(data, batch_size, workers):
    try:
        import torch
        from torchvision import datasets, transforms
    except ImportError:
        return None

    class Mapped(torch.utils.data.Dataset):
        """torchvision's transforms to a uint8 HWC array, then the same map."""

        def __init__(self):
            tf = transforms.Compose(
                [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
            )
            self.ds = datasets.ImageFolder(data, transform=tf)

        def __len__(self):
            return len(self.ds)

        def __getitem__(self, i):
            img, label = self.ds[i]
            out = light({"image": np.asarray(img), "label": label}, None)
            return torch.from_numpy(out["image"]), label

    def make():
        loader = torch.utils.data.DataLoader(
            Mapped(),
            batch_size=batch_size,
            shuffle=True,
            num_workers=workers,
            persistent_workers=True,
            worker_init_fn=lambda _: torch.set_num_threads(1),
        )
        return loader

    return make


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("photos", help="an ImageFolder of photos (make_photos.py)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--only", choices=["scaling", "overhead", "torch"], nargs="*")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    only = set(a.only or ["scaling", "overhead", "torch"])
    out = {}
    kw = dict(batch_size=a.batch_size, transform="rrc:224,flip", workers=2)
    if "scaling" in only:
        # One decode worker: the map, not the decoding, is what this measures.
        sk = dict(kw, workers=1)
        out["scaling"] = rounds(
            {
                f"heavy map, {t} thread(s)": (
                    lambda t=t: stoker.Loader(a.photos, map=heavy, map_threads=t, **sk)
                )
                for t in (1, 2)
            },
            a.rounds,
            a.epochs,
        )
    if "overhead" in only:
        out["overhead"] = rounds(
            {
                "no map": lambda: stoker.Loader(a.photos, **kw),
                "identity map, 2 threads": lambda: stoker.Loader(
                    a.photos, map=identity, map_threads=2, **kw
                ),
            },
            a.rounds,
            a.epochs,
        )
    if "torch" in only:
        make = torch_side(a.photos, a.batch_size, 2)
        if make is None:
            out["torch"] = "skipped: torch is not installed"
        else:
            torch_loader = make()

            class Epochs:
                def epoch(self, e):
                    return iter(torch_loader)

            out["torch"] = rounds(
                {
                    "stoker + light map": lambda: stoker.Loader(
                        a.photos, map=light, map_threads=2, **kw
                    ),
                    "torch DataLoader + light map": Epochs,
                },
                a.rounds,
                a.epochs,
            )
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
