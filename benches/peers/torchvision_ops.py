#!/usr/bin/env python3
"""Reference outputs of torchvision.transforms.v2.functional for stoker's policy ops.

Crops three small pieces of the real photographs scikit-learn ships
(`load_sample_images()`: china.jpg and flower.jpg; one RGB crop of each and a gray
one), runs each op of augment's spec table through torchvision on uint8 CHW tensors,
and writes, under augment/tests/data/torchvision/ (relative to the repository root):

- the inputs and every output as PNG (lossless, a few KB each);
- ops.json: for each case the stoker spec (or the policy op and magnitude), the
  torchvision call, the input and output files and the tolerance; torchvision's
  magnitude tables of RandAugment, TrivialAugmentWide and AutoAugment for one image
  size; AutoAugment's three sub-policy lists; the library versions.

augment/tests/torchvision.rs reads them (CI needs no torch). Regenerate with the
peers venv (benches/peers/README.md):

    /root/peers-venv/bin/python benches/peers/torchvision_ops.py
"""

import argparse
import json
import math
import os
import platform

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "augment", "tests", "data", "torchvision"))

# Mean absolute difference allowed per case (issue 25): 1 grey level for pixel ops,
# 2 for the warps and the blur (nearest sampling at a half pixel, float order).
PIXEL_TOL = 1.0
WARP_TOL = 2.0


def crops():
    from sklearn.datasets import load_sample_images

    china, flower = load_sample_images().images  # 427x640x3 each
    return {
        # Roof tiles and foliage: fine texture and edges.
        "china_48x36": china[150:186, 300:348],
        # Petals and leaves: saturated colours, odd width.
        "flower_37x45": flower[200:245, 260:297],
        # The same kind of texture in one channel (PIL's L conversion).
        "china_gray_32x24": np.asarray(Image.fromarray(china[40:64, 400:432]).convert("L"))[:, :, None],
    }


def chw(a):
    import torch

    return torch.from_numpy(np.array(a, dtype=np.uint8, copy=True)).permute(2, 0, 1).contiguous()


def hwc(t):
    return t.permute(1, 2, 0).contiguous().numpy()


def save_png(path, a):
    a = np.asarray(a, dtype=np.uint8)
    img = Image.fromarray(a[:, :, 0], "L") if a.shape[2] == 1 else Image.fromarray(a, "RGB")
    img.save(path, optimize=True)


def cases():
    """(spec, torchvision call as text, function of the CHW tensor, tolerance, inputs)."""
    import torchvision.transforms.v2.functional as F

    rgb = ["china_48x36", "flower_37x45"]
    every = rgb + ["china_gray_32x24"]
    out = [
        ("posterize:3", "F.posterize(img, 3)", lambda t: F.posterize(t, 3), PIXEL_TOL, every),
        ("posterize:6", "F.posterize(img, 6)", lambda t: F.posterize(t, 6), PIXEL_TOL, rgb),
        ("solarize:128", "F.solarize(img, 128)", lambda t: F.solarize(t, 128), PIXEL_TOL, every),
        ("solarize:64.5", "F.solarize(img, 64.5)", lambda t: F.solarize(t, 64.5), PIXEL_TOL, rgb),
        ("equalize", "F.equalize(img)", F.equalize, PIXEL_TOL, every),
        ("autocontrast", "F.autocontrast(img)", F.autocontrast, PIXEL_TOL, every),
        ("invert", "F.invert(img)", F.invert, PIXEL_TOL, every),
        ("brightness:0.4", "F.adjust_brightness(img, 0.4)", lambda t: F.adjust_brightness(t, 0.4), PIXEL_TOL, rgb),
        ("brightness:1.7", "F.adjust_brightness(img, 1.7)", lambda t: F.adjust_brightness(t, 1.7), PIXEL_TOL, every),
        ("contrast:0.5", "F.adjust_contrast(img, 0.5)", lambda t: F.adjust_contrast(t, 0.5), PIXEL_TOL, every),
        ("contrast:1.9", "F.adjust_contrast(img, 1.9)", lambda t: F.adjust_contrast(t, 1.9), PIXEL_TOL, rgb),
        ("color:0.3", "F.adjust_saturation(img, 0.3)", lambda t: F.adjust_saturation(t, 0.3), PIXEL_TOL, every),
        ("color:1.9", "F.adjust_saturation(img, 1.9)", lambda t: F.adjust_saturation(t, 1.9), PIXEL_TOL, rgb),
        ("sharpness:0.2", "F.adjust_sharpness(img, 0.2)", lambda t: F.adjust_sharpness(t, 0.2), PIXEL_TOL, every),
        ("sharpness:1.9", "F.adjust_sharpness(img, 1.9)", lambda t: F.adjust_sharpness(t, 1.9), PIXEL_TOL, rgb),
        ("rotate:30", "F.rotate(img, 30)", lambda t: F.rotate(t, 30), WARP_TOL, every),
        ("rotate:-17.5:fill=128", "F.rotate(img, -17.5, fill=128)", lambda t: F.rotate(t, -17.5, fill=128), WARP_TOL, rgb),
        ("rotate:135", "F.rotate(img, 135)", lambda t: F.rotate(t, 135), WARP_TOL, rgb),
        (
            "affine:deg=10:tx=3:ty=-2:shear=15",
            "F.affine(img, angle=10, translate=[3, -2], scale=1, shear=[15, 0])",
            lambda t: F.affine(t, angle=10.0, translate=[3, -2], scale=1.0, shear=[15.0, 0.0]),
            WARP_TOL,
            every,
        ),
        (
            "affine:deg=-25:tx=-4.7:ty=2.2:shear=-8:fill=77",
            "F.affine(img, angle=-25, translate=[-4.7, 2.2], scale=1, shear=[-8, 0], fill=77)",
            lambda t: F.affine(t, angle=-25.0, translate=[-4.7, 2.2], scale=1.0, shear=[-8.0, 0.0], fill=77),
            WARP_TOL,
            rgb,
        ),
        (
            "affine:shear=30",
            "F.affine(img, angle=0, translate=[0, 0], scale=1, shear=[30, 0])",
            lambda t: F.affine(t, angle=0.0, translate=[0, 0], scale=1.0, shear=[30.0, 0.0]),
            WARP_TOL,
            rgb,
        ),
        ("blur:5:sigma=1.5", "F.gaussian_blur(img, [5, 5], [1.5, 1.5])", lambda t: F.gaussian_blur(t, [5, 5], [1.5, 1.5]), WARP_TOL, every),
        ("blur:9:sigma=3", "F.gaussian_blur(img, [9, 9], [3.0, 3.0])", lambda t: F.gaussian_blur(t, [9, 9], [3.0, 3.0]), WARP_TOL, rgb),
        ("blur:3", "F.gaussian_blur(img, [3, 3]) (default sigma 0.8)", lambda t: F.gaussian_blur(t, [3, 3]), WARP_TOL, rgb),
    ]
    return out


POLICY_OPS = [
    ("ShearX", 0.3),
    ("ShearX", -0.2),
    ("ShearY", 0.25),
    ("TranslateX", 13.7),
    ("TranslateY", -9.2),
    ("Rotate", 25.0),
    ("Brightness", -0.45),
    ("Color", 0.6),
    ("Contrast", -0.3),
    ("Sharpness", 0.9),
    ("Posterize", 5.0),
    ("Solarize", 0.4),
]


def tables(h, w):
    """torchvision's magnitude tables, float32 values as Python floats."""
    import torchvision.transforms.v2 as T

    out = {}
    for name, cls, bins in (("randaugment", T.RandAugment, 31), ("trivialaugment", T.TrivialAugmentWide, 31), ("autoaugment", T.AutoAugment, 10)):
        space = {}
        for op, (fn, signed) in cls._AUGMENTATION_SPACE.items():
            mags = fn(bins, h, w)
            space[op] = {"signed": bool(signed), "magnitudes": None if mags is None else [float(v) for v in mags]}
        out[name] = {"bins": bins, "ops": list(cls._AUGMENTATION_SPACE.keys()), "space": space}
    return out


def policies():
    import torchvision.transforms.v2 as T

    out = {}
    for p in (T.AutoAugmentPolicy.IMAGENET, T.AutoAugmentPolicy.CIFAR10, T.AutoAugmentPolicy.SVHN):
        aa = T.AutoAugment(policy=p)
        out[p.value] = [[[op, prob, idx] for (op, prob, idx) in sub] for sub in aa._policies]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help=f"folder to write (default {DEFAULT_OUT})")
    a = p.parse_args(argv)

    import PIL
    import sklearn
    import torch
    import torchvision
    import torchvision.transforms.v2 as T

    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    inputs = crops()
    for name, arr in inputs.items():
        save_png(os.path.join(a.out, f"{name}.png"), arr)

    doc_cases = []
    for spec, call, fn, tol, names in cases():
        for inp in names:
            res = hwc(fn(chw(inputs[inp])))
            slug = spec.replace(":", "_").replace("=", "").replace(".", "p").replace("-", "m")
            fname = f"{slug}__{inp}.png"
            save_png(os.path.join(a.out, fname), res)
            doc_cases.append({"spec": spec, "torchvision": call, "input": f"{inp}.png", "output": fname, "mean_abs_tol": tol})

    ra = T.RandAugment()
    for op, mag in POLICY_OPS:
        tol = WARP_TOL if op in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate") else PIXEL_TOL
        for inp in ("china_48x36", "flower_37x45"):
            res = hwc(ra._apply_image_or_video_transform(chw(inputs[inp]), op, mag, interpolation=ra.interpolation, fill=ra._fill))
            fname = f"policy_{op}_{str(mag).replace('.', 'p').replace('-', 'm')}__{inp}.png"
            save_png(os.path.join(a.out, fname), res)
            doc_cases.append(
                {
                    "policy_op": op,
                    "magnitude": mag,
                    "torchvision": f"RandAugment()._apply_image_or_video_transform(img, {op!r}, {mag}, NEAREST, fill=None)",
                    "input": f"{inp}.png",
                    "output": fname,
                    "mean_abs_tol": tol,
                }
            )

    doc = {
        "generated_by": "benches/peers/torchvision_ops.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": PIL.__version__,
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
        },
        "how_to_use": "apply `spec` (a stoker pipeline) or the policy op with `magnitude` to the "
        "input PNG and compare with the output PNG: mean absolute difference over all samples "
        "at most mean_abs_tol",
        "table_size": {"height": 160, "width": 224},
        "tables": tables(160, 224),
        "autoaugment_policies": policies(),
        "cases": doc_cases,
    }
    with open(os.path.join(a.out, "ops.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(a.out, n)) for n in os.listdir(a.out))
    print(f"wrote {len(doc_cases)} cases, {total / 1024:.0f} KB, to {a.out}")


if __name__ == "__main__":
    main()
