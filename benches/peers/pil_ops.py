#!/usr/bin/env python3
"""Time each augmentation op on PIL at 224x224 RGB: the peer of the `ops_224` group of
`benches/benches/augment.rs` (same op names, same magnitudes).

Each op is what torchvision runs on a PIL image (RandAugment, TrivialAugmentWide,
ColorJitter and friends call these): ImageOps for the value-by-value ops, ImageEnhance
for the blends, `Image.transform(AFFINE, NEAREST)` for the warps, PIL's GaussianBlur.
The input is a 224x224 crop of scikit-learn's china.jpg (a real photograph; the ops'
cost hardly depends on content, but equalize's and autocontrast's tables do), or a
smooth synthetic picture when scikit-learn is missing. Each op returns a new image, as
torchvision's do; `copy` (`img.copy()`) is that allocation and copy alone.

    python pil_ops.py            # a table: op, ms per image
    python pil_ops.py --json     # {"op": ms, ...} for ops_compare.sh

The figure per op is the best of --repeats runs of --number calls (the least
disturbed by other work on the machine), in milliseconds per image.
"""

import argparse
import json
import math
import sys
import timeit

from PIL import Image, ImageEnhance, ImageFilter, ImageOps

SIZE = 224


def photo():
    try:
        from sklearn.datasets import load_sample_images

        china = load_sample_images().images[0]  # 427x640x3
        return Image.fromarray(china[100 : 100 + SIZE, 200 : 200 + SIZE]).convert("RGB")
    except ImportError:
        img = Image.new("RGB", (SIZE, SIZE))
        img.putdata(
            [
                tuple(int(127 + 100 * math.sin((x * (k + 1) + y * (3 - k)) * 0.05)) for k in range(3))
                for y in range(SIZE)
                for x in range(SIZE)
            ]
        )
        return img


def affine_matrix(w, h, angle, translate, shear):
    """torchvision's `_get_inverse_affine_matrix` about the image centre, as its
    `F.affine` hands it to PIL (scale 1)."""
    cx, cy = w * 0.5, h * 0.5
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    m = [d, -b, 0.0, -c, a, 0.0]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty) + cx
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty) + cy
    return m


def jitter(img):
    # ColorJitter(0.4) on PIL: brightness, contrast and saturation (one order of them).
    img = ImageEnhance.Brightness(img).enhance(1.2)
    img = ImageEnhance.Contrast(img).enhance(0.8)
    return ImageEnhance.Color(img).enhance(1.3)


def hue(img, shift=0.1):
    # torchvision's F.adjust_hue on PIL: through HSV, the H band shifted.
    h, s, v = img.convert("HSV").split()
    h = h.point(lambda x: (x + int(shift * 255)) % 256)
    return Image.merge("HSV", (h, s, v)).convert("RGB")


def ops():
    """(name, function of a PIL image); the names of `OPS_224` in augment.rs."""
    aff = affine_matrix(SIZE, SIZE, -10.0, (3, -2), (15.0, 0.0))
    rot = affine_matrix(SIZE, SIZE, -30.0, (0, 0), (0.0, 0.0))
    table = [
        ("copy", lambda im: im.copy()),
        ("flip", lambda im: im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)),
        ("posterize", lambda im: ImageOps.posterize(im, 4)),
        ("solarize", lambda im: ImageOps.solarize(im, 128)),
        ("invert", lambda im: ImageOps.invert(im)),
        ("equalize", lambda im: ImageOps.equalize(im)),
        ("autocontrast", lambda im: ImageOps.autocontrast(im)),
        ("brightness", lambda im: ImageEnhance.Brightness(im).enhance(1.5)),
        ("contrast", lambda im: ImageEnhance.Contrast(im).enhance(1.5)),
        ("color", lambda im: ImageEnhance.Color(im).enhance(1.5)),
        ("sharpness", lambda im: ImageEnhance.Sharpness(im).enhance(1.5)),
        ("rotate", lambda im: im.transform(im.size, Image.Transform.AFFINE, rot, Image.Resampling.NEAREST)),
        ("affine", lambda im: im.transform(im.size, Image.Transform.AFFINE, aff, Image.Resampling.NEAREST)),
        ("blur", lambda im: im.filter(ImageFilter.GaussianBlur(1.5))),
        ("jitter", jitter),
        ("hue", hue),
        ("gray", lambda im: im.convert("L").convert("RGB")),
    ]
    try:
        import torchvision.transforms as T

        ra, ta = T.RandAugment(num_ops=2, magnitude=9), T.TrivialAugmentWide()
        table += [("randaugment", ra), ("trivialaugment", ta)]
    except ImportError:
        print("pil_ops.py: no torchvision: randaugment and trivialaugment left out", file=sys.stderr)
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print {op: ms} as JSON")
    ap.add_argument("--number", type=int, default=200, help="calls per run")
    ap.add_argument("--repeats", type=int, default=5, help="runs per op (the best counts)")
    ap.add_argument("--only", help="comma-separated op names")
    args = ap.parse_args()
    img = photo()
    img.load()
    only = set(args.only.split(",")) if args.only else None
    result = {}
    for name, fn in ops():
        if only and name not in only:
            continue
        fn(img)  # warm up (tables, lazy imports)
        best = min(timeit.repeat(lambda: fn(img), number=args.number, repeat=args.repeats))
        result[name] = best / args.number * 1e3
    if args.json:
        print(json.dumps(result))
    else:
        for name, ms in result.items():
            print(f"{name:<16} {ms:8.4f} ms")


if __name__ == "__main__":
    main()
