#!/usr/bin/env python3
"""Reference values for `stoker-load pack --max-side N`: PIL's thumbnail sizes and pixels.

Writes loader/tests/data/pil_thumbnail.json (relative to the repository root):

- `sizes`: [w, h, n, thumb_w, thumb_h] for many shapes, from Image.thumbnail((n, n))
  (the sizes must match exactly);
- `images`: small deterministic RGB images, pixel (x, y) = ((x*37 + y*11) % 256,
  (x*5 + y*53) % 256, (x*x + y*7) % 256), each with its thumbnail at `n` made by
  Image.thumbnail((n, n), Image.BILINEAR, reducing_gap=None), which is
  Image.resize(size, Image.BILINEAR): the antialiased bilinear filter stoker's resize
  reimplements (pixels within `max_abs_diff`). Pixel data are flat u8 lists in
  row-major HWC order.

    python thumbnail_reference.py            # writes the file above
    python thumbnail_reference.py --out X    # elsewhere
"""

import argparse
import json
import os
import platform
import random

import numpy as np
import PIL
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(
    os.path.join(HERE, "..", "..", "loader", "tests", "data", "pil_thumbnail.json")
)


def gradient(w, h):
    a = np.zeros((h, w, 3), dtype=np.uint8)
    for y in range(h):
        for x in range(w):
            a[y, x] = ((x * 37 + y * 11) % 256, (x * 5 + y * 53) % 256, (x * x + y * 7) % 256)
    return a


def thumb_size(w, h, n):
    im = Image.new("L", (w, h))
    im.thumbnail((n, n), Image.BILINEAR, reducing_gap=None)
    return im.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    rng = random.Random(42)
    shapes = [(500, 375, 256), (375, 500, 256), (333, 500, 100), (1000, 3, 10), (3, 1000, 10),
              (640, 480, 224), (4000, 3000, 512), (256, 100, 256), (40, 40, 32), (101, 99, 50)]
    for _ in range(300):
        w, h = rng.randint(1, 3000), rng.randint(1, 3000)
        shapes.append((w, h, rng.randint(1, max(w, h))))
    sizes = []
    for w, h, n in shapes:
        tw, th = thumb_size(w, h, n)
        sizes.append([w, h, n, tw, th])
    images = []
    for w, h, n in [(61, 45, 32), (45, 61, 32), (64, 20, 48)]:
        a = gradient(w, h)
        im = Image.fromarray(a, "RGB")
        t = im.copy()
        t.thumbnail((n, n), Image.BILINEAR, reducing_gap=None)
        images.append({
            "w": w, "h": h, "n": n,
            "data": a.reshape(-1).tolist(),
            "thumb_w": t.size[0], "thumb_h": t.size[1],
            "thumb": np.asarray(t).reshape(-1).tolist(),
        })
    doc = {
        "generated_by": "benches/peers/thumbnail_reference.py",
        "versions": {"python": platform.python_version(), "pillow": PIL.__version__,
                     "numpy": np.__version__},
        "max_abs_diff": 1,
        "why": "fast_image_resize's Convolution(Bilinear) reimplements Pillow's filter; "
               "fixed-point rounding can differ by one step",
        "sizes": sizes,
        "images": images,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
