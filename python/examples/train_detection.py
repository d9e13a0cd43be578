"""Train a torchvision detector (Faster R-CNN, MobileNet v3 large FPN backbone) from
stoker's batches.

    python python/examples/train_detection.py                  # generated scenes
    python python/examples/train_detection.py --coco instances.json --images DIR
    python python/examples/train_detection.py --steps 20 --json --device cuda

Without --coco it trains on a scenes set that stoker generates (`stoker.gen_scenes`:
1 to 4 shapes of 10 kinds per image, with their boxes), made in stoker.cache_dir()
when missing. A COCO file is read by stoker itself (`Loader(stoker.Coco(FILE, DIR))`), its
images resized to --size x --size (the boxes move with them).

stoker gives a dict batch: `image` u8 (N, H, W, C), `boxes` float32 (N, M, 4) in
[x1, y1, x2, y2] pixels padded to the batch's most boxes M, `box_labels` int64 (N, M)
(-1 for padding) and `box_count` (N,). torchvision's detectors take a list of float
CHW images and a list of {"boxes": (B, 4), "labels": (B,)} targets, class 0 being the
background: `targets()` below turns one into the other.

The model starts from random weights (`weights=None, weights_backbone=None`: nothing is
downloaded), so a short run shows the loss falling, not a useful detector. With
--json the run prints {"loss_first", "loss_last", "images_per_sec"}: the mean
training loss (the sum of torchvision's four losses) over the first and the last
--window steps, and the images per second of the training steps. Needs torch and
torchvision.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np
import torch
import torch.autograd

import stoker

SCENES_COUNT = 512


def scenes_set(size: int) -> str:
    """The manifest of a generated scenes set of `size` px images, made when missing."""
    folder = os.path.join(stoker.cache_dir(), f"detection-scenes-{size}px")
    if not os.path.isdir(folder):
        print(f"making {SCENES_COUNT} scenes of {size}x{size} px in {folder}")
        stoker.gen_scenes(folder, SCENES_COUNT, width=size, height=size, max_shapes=4, seed=1)
    return os.path.join(folder, "train.jsonl")


def targets(batch: dict[str, Any], device: torch.device) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """stoker's dict batch as torchvision's detection input: float CHW images in [0, 1]
    and, per image, its boxes and labels without the padding (labels + 1: torchvision's
    class 0 is the background)."""
    images = torch.from_numpy(np.asarray(batch["image"])).to(device)
    images = images.permute(0, 3, 1, 2).float().div(255)
    boxes = torch.from_numpy(np.asarray(batch["boxes"])).to(device)
    labels = torch.from_numpy(np.asarray(batch["box_labels"])).to(device)
    out = []
    for i, n in enumerate(np.asarray(batch["box_count"]).tolist()):
        b, l = boxes[i, :n], labels[i, :n]
        # A box squeezed flat by the resize would stop torchvision with an assertion.
        keep = (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
        out.append({"boxes": b[keep], "labels": l[keep] + 1})
    return list(images), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coco", help="a COCO annotation file (default: generated scenes)")
    p.add_argument("--images", help="the COCO file's images folder")
    p.add_argument("--size", type=int, default=128, help="image side in pixels (default 128)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.01, help="SGD, momentum 0.9, weight decay 1e-4")
    p.add_argument("--transform", default="", help="stoker augmentation after the resize, e.g. flip")
    p.add_argument("--workers", type=int, default=2, help="stoker's decode threads")
    p.add_argument("--window", type=int, default=3, help="steps averaged into loss_first and loss_last")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--device", default="cpu", help="cpu, or cuda when torch sees a GPU")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = p.parse_args()
    if args.coco and not args.images:
        p.error("--coco needs --images, the folder its file names are in")
    if args.steps < 1 or args.window < 1:
        p.error("--steps and --window must be at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: torch sees no CUDA device")

    # torchvision ships no type information (no py.typed).
    from torchvision.models.detection import (  # type: ignore[import-untyped, unused-ignore]
        fasterrcnn_mobilenet_v3_large_fpn,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    fields = ["image", "boxes"]
    if args.coco:
        spec = ",".join(filter(None, [f"resize:{args.size}x{args.size}", args.transform]))
        data: "str | stoker.Coco" = stoker.Coco(args.coco, args.images)
    else:
        spec = args.transform
        data = str(scenes_set(args.size))
    loader = stoker.Loader(
        data,
        fields=fields,
        batch_size=args.batch_size,
        transform=spec,
        workers=args.workers,
        seed=args.seed,
        drop_last=True,
    )
    classes = len(loader.classes)
    if len(loader) == 0:
        p.error(f"{data}: fewer images than one batch of {args.batch_size}")

    # The images arrive at --size already: the model's own resize keeps them so.
    model = fasterrcnn_mobilenet_v3_large_fpn(
        weights=None,
        weights_backbone=None,
        num_classes=classes + 1,
        min_size=args.size,
        max_size=args.size,
    ).to(device)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    say = (lambda s: None) if args.json else print
    say(
        f"Faster R-CNN MobileNet v3 FPN, {classes} classes + background, on {data}: "
        f"{args.steps} steps of {args.batch_size} images of {args.size} px, {device}"
    )

    losses: list[float] = []
    seconds = 0.0
    epoch = 0
    while len(losses) < args.steps:
        for batch in loader.epoch(epoch):
            # A set with fields gives a dict batch, never the (images, labels) pair.
            assert isinstance(batch, dict)
            t0 = time.perf_counter()
            x, y = targets(dict(batch), device)
            parts = model(x, y)
            loss = torch.stack(list(parts.values())).sum()
            opt.zero_grad(set_to_none=True)
            # Not loss.backward(): untyped in some torch versions (docs/python.md).
            torch.autograd.backward(loss)
            opt.step()
            losses.append(float(loss.item()))
            seconds += time.perf_counter() - t0
            say(f"step {len(losses):>3}  loss {losses[-1]:.4f}  " + "  ".join(
                f"{k.removeprefix('loss_')} {float(v.item()):.3f}" for k, v in parts.items()))
            if len(losses) == args.steps:
                break
        epoch += 1

    w = min(args.window, len(losses))
    report = {
        "loss_first": sum(losses[:w]) / w,
        "loss_last": sum(losses[-w:]) / w,
        "images_per_sec": len(losses) * args.batch_size / max(seconds, 1e-9),
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"loss {report['loss_first']:.4f} -> {report['loss_last']:.4f} (means of {w} steps), "
            f"{report['images_per_sec']:.1f} images/s"
        )


if __name__ == "__main__":
    main()
