"""Train a torchvision ResNet on stoker's device batches: bf16 autocast, channels_last.

    python python/examples/train_resnet_gpu.py --data DIR                  # stoker, device="cuda"
    python python/examples/train_resnet_gpu.py --data DIR --mode synthetic # one fixed batch on the GPU
    python python/examples/train_resnet_gpu.py --data DIR --mode torch     # DataLoader, pin_memory=True
    python python/examples/train_resnet_gpu.py --arch resnet50 --steps 100 --json

stoker hands out each batch already on the GPU, converted there in one kernel:
bfloat16, normalised with ImageNet's mean and std, (N, H, W, C) in memory, which is
exactly a channels_last (N, C, H, W) tensor: `from_dlpack(images).permute(0, 3, 1, 2)`
is the model's input, no copy. The `synthetic` mode trains on one fixed batch already
on the GPU (the upper bound: no data wait at all); the `torch` mode feeds the same loop
from torch's DataLoader with pin_memory=True, the same number of workers and
torchvision v2 transforms (RandomResizedCrop(224), RandomHorizontalFlip, Normalize).

Prints images/s and the data wait (the time spent in `next()` for a batch) over the
timed steps; `--json` prints them as one JSON line. DIR is an image folder (a
sub-folder per class); without --data, 2,560 shapes of 256 px are made in
stoker.cache_dir(). Needs torch and torchvision, and a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

# Not `torch.from_dlpack`: torch's own module does not re-export it, which `mypy
# --strict` (no implicit re-exports) reports.
from torch.utils.dlpack import from_dlpack

import stoker

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIZE = 224


def demo_data() -> Path:
    d = Path(stoker.cache_dir()) / "resnet-demo-256"
    if not d.is_dir():
        stoker.gen_shapes(d, 2560, size=256, classes=10, seed=0)
    return d


def stoker_batches(data: Path, batch: int, workers: int) -> Iterator[tuple[Any, Any]]:
    loader = stoker.Loader(
        data,
        batch_size=batch,
        transform=f"rrc:{SIZE},flip",
        workers=workers,
        drop_last=True,
        device="cuda",
        dtype="bfloat16",
        layout="NHWC",
        normalize=(MEAN, STD),
    )
    epoch = 0
    while True:
        for images, labels in loader.epoch(epoch):
            # NHWC in memory is channels_last NCHW: a view, not a copy.
            yield from_dlpack(images).permute(0, 3, 1, 2), from_dlpack(labels)
        epoch += 1


def torch_batches(data: Path, batch: int, workers: int) -> Iterator[tuple[Any, Any]]:
    # torchvision ships no type information (no py.typed).
    from torchvision.datasets import ImageFolder  # type: ignore[import-untyped, unused-ignore]
    from torchvision.transforms import v2  # type: ignore[import-untyped, unused-ignore]

    transform = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomResizedCrop(SIZE, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    loader = torch.utils.data.DataLoader(
        ImageFolder(str(data), transform=transform),
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        pin_memory=True,
        drop_last=True,
        persistent_workers=workers > 0,
    )
    while True:
        for images, labels in loader:
            images = images.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)
            yield images, labels.cuda(non_blocking=True)


def synthetic_batches(batch: int, classes: int) -> Iterator[tuple[Any, Any]]:
    g = torch.Generator(device="cuda").manual_seed(0)
    images = torch.randn(batch, 3, SIZE, SIZE, device="cuda", generator=g).to(
        dtype=torch.bfloat16, memory_format=torch.channels_last
    )
    labels = torch.randint(0, classes, (batch,), device="cuda", generator=g)
    while True:
        yield images, labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="an image folder (default: shapes made in stoker.cache_dir())")
    p.add_argument("--arch", choices=["resnet18", "resnet50"], default="resnet18")
    p.add_argument("--mode", choices=["stoker", "synthetic", "torch"], default="stoker")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="decode workers (default: every core but one)")
    p.add_argument("--warmup", type=int, default=10, help="steps before the timing starts")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = p.parse_args()

    import torchvision  # type: ignore[import-untyped, unused-ignore]

    if not torch.cuda.is_available():
        raise SystemExit("this example needs a CUDA GPU")
    data = args.data or demo_data()
    classes = len([d for d in data.iterdir() if d.is_dir()])
    model: nn.Module = getattr(torchvision.models, args.arch)(num_classes=classes)
    model = model.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    loss_fn = nn.CrossEntropyLoss()
    if args.mode == "stoker":
        batches = stoker_batches(data, args.batch, args.workers)
    elif args.mode == "torch":
        batches = torch_batches(data, args.batch, args.workers)
    else:
        batches = synthetic_batches(args.batch, classes)

    wait = 0.0
    start = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            start, wait = time.perf_counter(), 0.0
        t0 = time.perf_counter()
        images, labels = next(batches)
        wait += time.perf_counter() - t0
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    figures = {
        "mode": args.mode,
        "arch": args.arch,
        "batch": args.batch,
        "workers": args.workers,
        "steps": args.steps,
        "images_per_sec": args.steps * args.batch / elapsed,
        "data_wait_seconds": wait,
        "data_wait_share": wait / elapsed,
        "loss": float(loss.item()),
        "gpu": torch.cuda.get_device_name(),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{args.mode} {args.arch}: {figures['images_per_sec']:.0f} images/s, data wait "
            f"{wait:.2f} s of {elapsed:.2f} s ({100 * wait / elapsed:.1f}%)"
        )


if __name__ == "__main__":
    main()
