"""Writes instances.json (a COCO instances file, by Python's json module) and
ann_to_mask.json (pycocotools' annToMask of each non-crowd annotation with a region,
as column-major run lengths starting with background), the reference of
loader/tests/coco.rs's instance-mask test. Run with pycocotools installed:

    python3 make.py    # in this folder
"""
import json

import numpy as np
from importlib.metadata import version
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO


def runs(m):
    """Column-major run lengths of a binary H x W array, background first."""
    flat = np.asarray(m, dtype=np.uint8).flatten(order="F")
    counts, cur, run = [], 0, 0
    for v in flat:
        if v != cur:
            counts.append(run)
            cur, run = v, 0
        run += 1
    counts.append(run)
    return counts


def ellipse(h, w, cx, cy, rx, ry):
    y, x = np.mgrid[0:h, 0:w]
    return (((x + 0.5 - cx) / rx) ** 2 + ((y + 0.5 - cy) / ry) ** 2 <= 1).astype(np.uint8)


def compressed(m):
    rle = mask_utils.encode(np.asfortranarray(m))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


W1, H1 = 160, 120
W2, H2 = W1, H1  # one size, so that the images batch together
blob = ellipse(H1, W1, 110, 70, 30, 22)
ring = ellipse(H1, W1, 60, 60, 40, 30) - ellipse(H1, W1, 60, 60, 20, 14)
crowd = np.zeros((H1, W1), np.uint8)
crowd[100:, :] = 1
disc = ellipse(H2, W2, 120, 60, 18, 25)

coco = {
    "info": {"description": "instance-mask reference", "year": 2026},
    "licenses": [],
    "images": [
        {"id": 1, "file_name": "one.png", "width": W1, "height": H1},
        {"id": 2, "file_name": "two.png", "width": W2, "height": H2},
        {"id": 3, "file_name": "three.png", "width": W2, "height": H2},
    ],
    "categories": [
        {"id": 1, "name": "cat", "supercategory": "animal"},
        {"id": 4, "name": "dog", "supercategory": "animal"},
    ],
    "annotations": [
        # A concave polygon (an L).
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 70, 80], "area": 3500,
         "iscrowd": 0,
         "segmentation": [[10, 10, 40, 10, 40, 60, 80, 60, 80, 90, 10, 90]]},
        # Two polygons, one object (they overlap the L: its mask is its own).
        {"id": 2, "image_id": 1, "category_id": 4, "bbox": [20, 5, 135, 60], "area": 2600,
         "iscrowd": 0,
         "segmentation": [[20.5, 5.25, 75.5, 20.75, 30.25, 50.5],
                          [100, 10, 155, 10, 155, 40, 100, 65]]},
        # Uncompressed RLE (a list of counts).
        {"id": 3, "image_id": 1, "category_id": 1, "bbox": [80, 48, 60, 44], "area": int(blob.sum()),
         "iscrowd": 0, "segmentation": {"size": [H1, W1], "counts": runs(blob)}},
        # Compressed RLE (pycocotools' string), a ring over the others.
        {"id": 4, "image_id": 1, "category_id": 4, "bbox": [20, 30, 80, 60], "area": int(ring.sum()),
         "iscrowd": 0, "segmentation": compressed(ring)},
        # A crowd: no instance.
        {"id": 5, "image_id": 1, "category_id": 4, "bbox": [0, 100, 160, 20], "area": 3200,
         "iscrowd": 1, "segmentation": compressed(crowd)},
        # A zero-area box: dropped with its region.
        {"id": 6, "image_id": 1, "category_id": 1, "bbox": [5, 5, 0, 10], "area": 0,
         "iscrowd": 0, "segmentation": [[5, 5, 6, 5, 6, 15]]},
        # Fractional polygon coordinates.
        {"id": 7, "image_id": 2, "category_id": 4, "bbox": [3.3, 4.6, 80.4, 70.1], "area": 3000,
         "iscrowd": 0,
         "segmentation": [[3.3, 4.6, 83.7, 12.2, 60.1, 74.7, 12.9, 60.4]]},
        {"id": 8, "image_id": 2, "category_id": 1, "bbox": [102, 35, 36, 50], "area": int(disc.sum()),
         "iscrowd": 0, "segmentation": compressed(disc)},
    ],
}

with open("instances.json", "w") as f:
    json.dump(coco, f)

api = COCO("instances.json")
ref = {"pycocotools": version("pycocotools"), "masks": {}}
for a in api.dataset["annotations"]:
    if a["iscrowd"] or a["bbox"][2] <= 0 or a["bbox"][3] <= 0:
        continue
    m = api.annToMask(a)
    kind = "polygon" if isinstance(a["segmentation"], list) else "rle"
    ref["masks"][str(a["id"])] = {"kind": kind, "area": int(m.sum()), "counts": runs(m)}
with open("ann_to_mask.json", "w") as f:
    json.dump(ref, f, indent=1)
