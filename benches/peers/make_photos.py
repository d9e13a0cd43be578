#!/usr/bin/env python3
"""Make an ImageFolder of realistic JPEG photographs for loader throughput runs.

The pictures are random crops, rescales and horizontal flips of the two real
photographs scikit-learn ships inside its package (`load_sample_images()`:
china.jpg and flower.jpg, 640x427), resized to ImageNet-like sizes around 500x375
(landscape and portrait) and saved by PIL at JPEG quality 90 (4:2:0 chroma
subsampling, PIL's default). Real photographs matter: the cost of JPEG decoding
depends on the content (entropy), so flat synthetic images would flatter every
loader.

Layout: OUT_DIR/class_XX/NNNNNN.jpg, class = index % classes. The labels are
meaningless; this is a throughput set. The output depends only on (count, classes,
seed): image i is drawn from its own generator seeded by (seed, i).

    python make_photos.py /tmp/photos --count 1000
    python make_photos.py /tmp/photos-b --count 1000 --sizes 640x480,800x600,600x800,400x300,320x320

`--sizes` gives a second set of other shapes (a comma-separated list of WxH): larger
sides than the sources are upscales, which hold less detail per pixel.

No network access: the sample images are read from the installed scikit-learn.
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image

# Output sizes (width, height): ImageNet's typical 500x375 and its neighbours.
SIZES = [
    (500, 375),
    (375, 500),
    (480, 360),
    (360, 480),
    (500, 333),
    (333, 500),
    (512, 384),
    (448, 336),
    (500, 400),
    (400, 500),
]


def load_sources():
    """The two sample photographs as PIL RGB images (640x427)."""
    from sklearn.datasets import load_sample_images

    data = load_sample_images()
    return [Image.fromarray(np.asarray(a, dtype=np.uint8)).convert("RGB") for a in data.images]


def parse_sizes(text):
    """'640x480,800x600' -> [(640, 480), (800, 600)]."""
    sizes = []
    for part in text.split(","):
        w, sep, h = part.strip().partition("x")
        if not sep or not w.isdigit() or not h.isdigit() or int(w) < 8 or int(h) < 8:
            raise ValueError(f"--sizes: {part!r} is not WxH with sides of at least 8")
        sizes.append((int(w), int(h)))
    return sizes


def make_one(sources, index, seed, sizes=SIZES):
    """Image `index`: a random crop of a source with the target's aspect ratio,
    resized to the target size, maybe mirrored."""
    rng = np.random.default_rng([seed, index])
    src = sources[int(rng.integers(len(sources)))]
    tw, th = sizes[int(rng.integers(len(sizes)))]
    sw, sh = src.size
    aspect = tw / th
    # The largest crop of this aspect ratio that fits, then a random fraction of it
    # (by area, 50% to 100%): mostly mild upscales, as the sources are only 640x427.
    max_w = min(sw, sh * aspect)
    scale = np.sqrt(rng.uniform(0.50, 1.0))
    cw = max(8, int(round(max_w * scale)))
    ch = max(8, int(round(cw / aspect)))
    cw, ch = min(cw, sw), min(ch, sh)
    left = int(rng.integers(0, sw - cw + 1))
    top = int(rng.integers(0, sh - ch + 1))
    img = src.crop((left, top, left + cw, top + ch)).resize((tw, th), Image.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", help="folder to create (OUT_DIR/class_XX/NNNNNN.jpg)")
    p.add_argument("--count", type=int, required=True, help="number of images")
    p.add_argument("--classes", type=int, default=10, help="number of class folders (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    p.add_argument(
        "--sizes",
        default=None,
        help="output sizes, a comma-separated list of WxH (default: around 500x375)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="if OUT_DIR is not empty, first delete its class_*/*.jpg files",
    )
    a = p.parse_args(argv)
    if a.count < 1 or a.classes < 1:
        p.error("--count and --classes must be at least 1")
    try:
        sizes = parse_sizes(a.sizes) if a.sizes else SIZES
    except ValueError as e:
        p.error(str(e))
    if os.path.isdir(a.out_dir) and os.listdir(a.out_dir):
        if not a.overwrite:
            p.error(f"{a.out_dir} exists and is not empty (stale images would join the set); "
                    "choose another folder or pass --overwrite")
        for d in os.listdir(a.out_dir):
            sub = os.path.join(a.out_dir, d)
            if d.startswith("class_") and os.path.isdir(sub):
                for f in os.listdir(sub):
                    if f.endswith(".jpg"):
                        os.remove(os.path.join(sub, f))
                if not os.listdir(sub):
                    os.rmdir(sub)

    sources = load_sources()
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out_dir, f"class_{c:02d}"), exist_ok=True)
    total = 0
    for i in range(a.count):
        img = make_one(sources, i, a.seed, sizes)
        path = os.path.join(a.out_dir, f"class_{i % a.classes:02d}", f"{i:06d}.jpg")
        img.save(path, format="JPEG", quality=a.quality)
        total += os.path.getsize(path)
    print(
        f"wrote {a.count} JPEGs in {a.classes} classes to {a.out_dir} "
        f"({total / 1e6:.1f} MB, {total / a.count / 1e3:.0f} kB each on average)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
