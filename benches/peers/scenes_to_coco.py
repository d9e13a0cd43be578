#!/usr/bin/env python3
"""Writes a COCO instances file (with Python's json, as COCO tools do) for a scenes set
made by `stoker-load gen scenes DIR` (or stoker.gen_scenes): one image entry per
manifest line, one annotation per box (bbox as x, y, width, height; category ids 1..K
in the manifest's class order), so stoker's COCO source and torchvision read the same
file.

    python scenes_to_coco.py DIR            # writes DIR/instances.json
"""

import json
import struct
import sys
from pathlib import Path


def jpeg_size(path):
    """(width, height) from a baseline JPEG's frame header."""
    b = path.read_bytes()
    i = 2
    while i < len(b):
        marker, length = b[i + 1], struct.unpack(">H", b[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            h, w = struct.unpack(">HH", b[i + 5:i + 9])
            return w, h
        i += 2 + length
    raise ValueError(f"{path}: no frame header")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = Path(sys.argv[1])
    lines = (d / "train.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    classes = header["classes"]
    doc = {"images": [], "annotations": [],
           "categories": [{"id": k + 1, "name": n} for k, n in enumerate(classes)]}
    ann_id = 1
    for img_id, line in enumerate(lines[1:], start=1):
        s = json.loads(line)
        w, h = jpeg_size(d / s["image"])
        doc["images"].append({"id": img_id, "file_name": s["image"], "width": w, "height": h})
        for (x1, y1, x2, y2), name in zip(s["boxes"], s["box_labels"]):
            doc["annotations"].append({
                "id": ann_id, "image_id": img_id, "category_id": classes.index(name) + 1,
                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
            ann_id += 1
    with open(d / "instances.json", "w") as f:
        json.dump(doc, f)
    print(f"{d / 'instances.json'}: {len(doc['images'])} images, {len(doc['annotations'])} boxes")


if __name__ == "__main__":
    main()
