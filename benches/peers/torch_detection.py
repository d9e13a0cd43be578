#!/usr/bin/env python3
"""Peer baseline for detection loading: torchvision.transforms.v2 + DataLoader over a
COCO annotation file, images/s.

The pipeline a PyTorch user writes for a detector, with the boxes carried through the
transforms by torchvision v2, measured the way `stoker-load bench INSTANCES.json
--images DIR --fields image,boxes --transform SPEC --batch-size 64` measures ours:

    image = torchvision.io.decode_image(read_file(path))      # uint8 CHW
    boxes = tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(h, w))
    v2.Compose([v2.RandomResizedCrop(512, antialias=True), v2.RandomHorizontalFlip(),
                v2.SanitizeBoundingBoxes(min_size=0)])(image, {"boxes": .., "labels": ..})
    DataLoader(ds, batch_size=64, shuffle=True, num_workers=W, collate_fn=stack + lists)

`--transform rrc:512,flip` or `resize:512x512,flip` (Resize((512, 512)) then the flip).
For each W: one warm-up epoch (untimed), then images/s over the timed epochs.

    python torch_detection.py instances.json --images DIR --workers 2 --epochs 2 --json
"""

import argparse
import json
import sys
import time


def worker_init(_worker_id):
    import torch

    torch.set_num_threads(1)


class CocoBoxes:
    """Images and boxes of a COCO annotation file (read with json, as a user would)."""

    def __init__(self, annotations, images, transform):
        import os

        with open(annotations) as f:
            doc = json.load(f)
        cats = sorted(c["id"] for c in doc["categories"])
        self.cat_index = {c: i for i, c in enumerate(cats)}
        self.items = []
        by_image = {}
        for a in doc["annotations"]:
            if not a.get("iscrowd", 0):
                by_image.setdefault(a["image_id"], []).append(a)
        for im in sorted(doc["images"], key=lambda i: i["id"]):
            anns = by_image.get(im["id"], [])
            boxes = [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                      a["bbox"][1] + a["bbox"][3]] for a in anns]
            labels = [self.cat_index[a["category_id"]] for a in anns]
            self.items.append((os.path.join(images, im["file_name"]), boxes, labels))
        self.transform = transform

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch
        from torchvision import io, tv_tensors

        path, boxes, labels = self.items[i]
        img = io.decode_image(io.read_file(path), mode=io.ImageReadMode.RGB)
        h, w = img.shape[-2:]
        target = {
            "boxes": tv_tensors.BoundingBoxes(
                torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                format="XYXY", canvas_size=(h, w)),
            "labels": torch.tensor(labels, dtype=torch.int64),
        }
        return self.transform(tv_tensors.Image(img), target)


def collate(batch):
    import torch

    images = torch.stack([b[0] for b in batch])
    return images, [b[1] for b in batch]


def make_transform(spec):
    from torchvision.transforms import v2

    steps = []
    for part in spec.split(","):
        name, _, arg = part.partition(":")
        if name == "rrc":
            steps.append(v2.RandomResizedCrop(int(arg), antialias=True))
        elif name == "resize":
            w, _, h = arg.partition("x")
            steps.append(v2.Resize((int(h or w), int(w)), antialias=True))
        elif name == "flip":
            steps.append(v2.RandomHorizontalFlip())
        else:
            sys.exit(f"torch_detection.py: unknown step {part!r} (rrc:N, resize:WxH, flip)")
    # What a detection recipe does after a crop: drop boxes that were cut away.
    # (min_size=1, the default and the least this torchvision takes.)
    steps.append(v2.SanitizeBoundingBoxes(min_size=1.0))
    return v2.Compose(steps)


def measure(args, workers):
    import torch

    torch.set_num_threads(1)
    ds = CocoBoxes(args.annotations, args.images, make_transform(args.transform))
    g = torch.Generator()
    g.manual_seed(0)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch_size, shuffle=True, num_workers=workers,
        worker_init_fn=worker_init if workers > 0 else None,
        persistent_workers=workers > 0, collate_fn=collate, generator=g)
    boxes = 0
    for _ in loader:  # warm-up epoch
        pass
    t0 = time.perf_counter()
    n = 0
    for _ in range(args.epochs):
        for images, targets in loader:
            n += images.shape[0]
            boxes += sum(len(t["boxes"]) for t in targets)
    wall = time.perf_counter() - t0
    return {"loader": "torchvision-v2", "workers": workers, "transform": args.transform,
            "images": n, "boxes": boxes, "seconds": wall, "images_per_sec": n / wall}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("annotations")
    p.add_argument("--images", required=True)
    p.add_argument("--transform", default="rrc:512,flip")
    p.add_argument("--workers", type=int, nargs="+", default=[2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for w in args.workers:
        r = measure(args, w)
        print(json.dumps(r) if args.json else
              f"torchvision v2, {w} workers: {r['images_per_sec']:.0f} images/s ({r['boxes']} boxes)")


if __name__ == "__main__":
    main()
