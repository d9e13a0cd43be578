#!/usr/bin/env python3
"""Peer baseline: the Hugging Face `datasets` library on Parquet shards, images decoded
by its Image feature (PIL) and transformed by torchvision in a DataLoader, as its
documentation's image-classification recipe does:

    ds = datasets.load_dataset("parquet", data_files=FILES, split="train")
    ds.set_transform(lambda b: {"image": [tf(im.convert("RGB")) for im in b["image"]],
                                "label": b["label"]})
    DataLoader(ds, batch_size=64, shuffle=True, num_workers=W)

with tf = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor()]),
the pipeline of `stoker-load bench DATA --transform rrc:224,flip`. For each W: one
warm-up epoch (it also builds the `datasets` cache: Arrow files, outside the timing),
then images/s over the timed epochs.

    python hf_datasets_loader.py /tmp/photos-parquet --workers 2 --epochs 2 --json
"""

import argparse
import glob
import json
import os
import sys
import tempfile
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="a folder of Parquet files (searched recursively)")
    p.add_argument("--workers", type=int, nargs="+", default=[2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    import datasets
    import torch
    from torchvision import transforms

    torch.set_num_threads(1)
    files = sorted(glob.glob(os.path.join(a.data, "**", "*.parquet"), recursive=True))
    cache = tempfile.mkdtemp(prefix="hf-cache-")
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])

    def apply(batch):
        return {"image": [tf(im.convert("RGB")) for im in batch["image"]], "label": batch["label"]}

    ds.set_transform(apply)
    for w in a.workers:
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=w,
                                             persistent_workers=w > 0)
        for _ in loader:  # warm-up
            pass
        t0 = time.perf_counter()
        n = 0
        for _ in range(a.epochs):
            for b in loader:
                n += b["image"].shape[0]
        wall = time.perf_counter() - t0
        r = {"peer": "hf-datasets", "workers": w, "images_per_sec": n / wall, "images": n,
             "epochs": a.epochs, "wall_seconds": wall, "datasets": datasets.__version__,
             "torch": torch.__version__}
        print(json.dumps(r) if a.json else f"datasets workers={w}: {n / wall:.1f} images/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
