"""Train stoker's convnet in PyTorch, fed by stoker.Loader or by torch's DataLoader.

    python python/examples/train_torch.py                      # the demo set, stoker
    python python/examples/train_torch.py --loader torch       # the same loop, DataLoader
    python python/examples/train_torch.py --data DIR --val DIR --transform rrc:64,flip --val-transform resize:72,center:64

The model is the convnet `stoker-train` trains (three conv3x3+BN+ReLU+maxpool blocks
of 32/64/128 channels, global average pooling, linear), with the same recipe: SGD
momentum 0.9, lr 0.1 with half an epoch of warm-up then cosine decay, weight decay
5e-4 on conv/linear weights. The demo set is `stoker-train`'s (10 classes of shapes,
32x32 px, 10,000 training and 2,000 validation images in stoker.cache_dir()), made
here when missing. Needs torch (and torchvision plus pillow for --loader torch).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.autograd
import torch.nn as nn
import torch.nn.functional as F

# Not `torch.from_dlpack`: torch's own module does not re-export it, which `mypy
# --strict` (no implicit re-exports) reports.
from torch.utils.dlpack import from_dlpack

import stoker

DEMO_SIZE = 32
DEMO_TRANSFORM = "crop:32:pad=4,flip"

# One epoch's (images u8 NHWC, labels int64) batches, by epoch number.
Batches = Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]


def demo_set() -> tuple[str, str]:
    """(train, val) folders of the demo set, made as stoker-train makes them."""
    root = os.path.join(stoker.cache_dir(), f"train-shapes-{DEMO_SIZE}px")
    train, val = os.path.join(root, "train"), os.path.join(root, "val")
    for folder, count, seed in ((train, 10_000, 1), (val, 2_000, 2)):
        if not os.path.isdir(folder):
            print(f"making the demo set: {count} shapes of {DEMO_SIZE}x{DEMO_SIZE} px in {folder}")
            stoker.gen_shapes(folder, count, size=DEMO_SIZE, classes=10, seed=seed)
    return train, val


class ConvNet(nn.Module):
    """stoker's convnet: u8 NHWC in, (x/255 - 0.5)/0.25, three conv blocks, GAP, linear."""

    def __init__(
        self, classes: int, channels: tuple[int, ...] = (32, 64, 128), in_channels: int = 3
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        c = in_channels
        for width in channels:
            blocks += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
            blocks.append(nn.MaxPool2d(2))
            c = width
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float().div_(255).sub_(0.5).div_(0.25)
        for layer in self.features:
            # Maxpool is skipped once the map is smaller than 2x2, as in stoker.
            if isinstance(layer, nn.MaxPool2d) and min(x.shape[-2:]) < 2:
                continue
            x = layer(x)
        logits: torch.Tensor = self.head(x.mean(dim=(2, 3)))
        return logits


def stoker_batches(
    folder: str, args: argparse.Namespace, transform: str, shuffle: bool
) -> tuple[Batches, int, stoker.Loader | None]:
    """(images u8 NHWC, labels int64) torch tensors from stoker.Loader, no copy."""
    loader = stoker.Loader(
        folder,
        batch_size=args.batch_size,
        transform=transform,
        mode=args.mode,
        workers=args.workers,
        prefetch=2,
        seed=args.seed,
        shuffle=shuffle,
    )

    def epoch(e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in loader.epoch(e):
            # An image folder gives (images, labels) pairs, never a dict of fields.
            assert isinstance(batch, tuple)
            images, labels = batch
            # DLPack: the tensor views the loader's buffer; it returns to the pool once
            # the tensor (and the array) are gone.
            yield from_dlpack(images), from_dlpack(labels)

    return epoch, len(loader), loader


def torch_transform(spec: str) -> Callable[[Any], torch.Tensor]:
    """The torchvision equivalent of a stoker transform spec (the ops this script needs)."""
    # torchvision ships no type information (no py.typed): without python/mypy.ini,
    # which ignores that, `mypy --strict` would report the import.
    import torchvision.transforms as T  # type: ignore[import-untyped, unused-ignore]

    ops: list[Callable[[Any], Any]] = []
    for part in filter(None, spec.split(",")):
        name, *params = part.split(":")
        if name == "crop":
            pad = next((int(p[4:]) for p in params[1:] if p.startswith("pad=")), 0)
            ops.append(T.RandomCrop(int(params[0]), padding=pad))
        elif name == "rrc":
            ops.append(T.RandomResizedCrop(int(params[0])))
        elif name == "flip":
            ops.append(T.RandomHorizontalFlip())
        elif name == "resize":
            ops.append(T.Resize(int(params[0])))
        elif name == "center":
            ops.append(T.CenterCrop(int(params[0])))
        else:
            raise SystemExit(f"--loader torch: no torchvision equivalent here for '{part}'")
    # u8 HWC like stoker's batches, so that the model sees the same input either way.
    ops += [T.PILToTensor(), T.Lambda(lambda t: t.permute(1, 2, 0).contiguous())]
    compose: Callable[[Any], torch.Tensor] = T.Compose(ops)
    return compose


def torch_batches(
    folder: str, args: argparse.Namespace, transform: str, shuffle: bool
) -> tuple[Batches, int, stoker.Loader | None]:
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder  # type: ignore[import-untyped, unused-ignore]

    dataset = ImageFolder(folder, transform=torch_transform(transform))
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=shuffle,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        worker_init_fn=lambda _: torch.set_num_threads(1),
    )
    torch.manual_seed(args.seed)

    def epoch(e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yield from loader

    return epoch, len(loader), None


def lr_at(step: int, steps_per_epoch: int, total: int, base: float) -> float:
    warm = max(1, steps_per_epoch // 2)
    if step < warm:
        return base * (step + 1) / warm
    return 0.5 * base * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="training image folder (default: the demo set)")
    p.add_argument("--val", help="validation image folder (default: the demo set's)")
    p.add_argument("--loader", choices=["stoker", "torch"], default="stoker")
    p.add_argument("--transform", default=DEMO_TRANSFORM, help="stoker transform spec for training")
    p.add_argument("--val-transform", default="", help="stoker transform spec for validation")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--workers", type=int, default=2, help="stoker: decode threads; torch: worker processes")
    p.add_argument("--mode", choices=["sync", "async"], default="async", help="stoker's reading mode")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.data:
        train_dir, val_dir = args.data, args.val
    else:
        train_dir, val_dir = demo_set()
    make = stoker_batches if args.loader == "stoker" else torch_batches
    train_epoch, steps, stoker_loader = make(train_dir, args, args.transform, shuffle=True)
    val_epoch = make(val_dir, args, args.val_transform, shuffle=False)[0] if val_dir else None
    classes = len(os.listdir(train_dir)) if os.path.isdir(train_dir) else 10

    device = torch.device(args.device)
    model = ConvNet(classes).to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    rest = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0}],
        lr=args.lr,
        momentum=0.9,
    )
    per_epoch = min(steps, args.max_steps or steps)
    total = per_epoch * args.epochs
    print(f"{args.loader} loader, {args.workers} workers, {steps} batches/epoch, device {device}")
    step = 0
    for epoch in range(args.epochs):
        model.train()
        t0, wait, seen, correct, loss_sum = time.perf_counter(), 0.0, 0, 0, 0.0
        tw = time.perf_counter()
        for i, (images, labels) in enumerate(train_epoch(epoch)):
            wait += time.perf_counter() - tw
            if i >= per_epoch:
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(step, per_epoch, total, args.lr)
            x, y = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            # `loss.backward()` is an untyped method in some torch versions, which
            # `mypy --strict` refuses to call; the function it calls is typed.
            torch.autograd.backward(loss)
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
            step += 1
            tw = time.perf_counter()
        wall = time.perf_counter() - t0
        line = (
            f"epoch {epoch + 1}/{args.epochs}: loss {loss_sum / max(seen, 1):.4f}, "
            f"train acc {100 * correct / max(seen, 1):.2f}%, {seen / wall:.0f} img/s, "
            f"waited for data {100 * wait / wall:.1f}% of the time"
        )
        if val_epoch is not None:
            model.eval()
            hits = n = 0
            with torch.no_grad():
                for images, labels in val_epoch(0):
                    out = model(images.to(device))
                    hits += (out.argmax(1).cpu() == labels).sum().item()
                    n += len(labels)
            line += f", val acc {100 * hits / max(n, 1):.2f}%"
        print(line, flush=True)
    if stoker_loader is not None:
        m = stoker_loader.metrics()
        print(
            f"stoker: {m['samples']} samples, peak batch buffers {m['peak_buffer_bytes'] / 1e6:.1f} MB, "
            f"consumer waited {m['wait_seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
