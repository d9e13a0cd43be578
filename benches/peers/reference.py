#!/usr/bin/env python3
"""Independent reference values for stoker-augment's transform tests.

Builds small deterministic RGB test images here (no files, no network), runs
them through PIL and torchvision, and writes inputs, outputs, library versions,
each op's exact semantics and the tolerance we expect the Rust side to meet, to
augment/tests/data/pil_reference.json (relative to the repository root).

Test images: grad8x6 (8x6) and grad16x12 (16x12), pixel (x, y) =
((x*37 + y*11) % 256, (x*5 + y*53) % 256, (x*x + y*7) % 256); plus crop16x12_window
to check RandomResizedCrop's crop-then-resize. All pixel data is a flat u8 list in
row-major HWC order (index = (y*w + x)*c + channel), with w, h, c alongside.

Each case has `output` (what the Rust side must reproduce) from the library named
in `library`; some also carry `variants`: the same op in another implementation
(torchvision on tensors, PIL's 8-bit HSV), for information and to show how far
honest implementations drift apart. `max_abs_diff_vs_output` records that drift.

    python reference.py            # writes augment/tests/data/pil_reference.json
    python reference.py --out X    # elsewhere
"""

import argparse
import json
import os
import platform

import numpy as np
from PIL import Image, ImageEnhance, ImageStat

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "augment", "tests", "data", "pil_reference.json"))

FORMULA = "pixel(x, y) = ((x*37 + y*11) % 256, (x*5 + y*53) % 256, (x*x + y*7) % 256)"


def gradient(w, h):
    a = np.zeros((h, w, 3), dtype=np.uint8)
    for y in range(h):
        for x in range(w):
            a[y, x] = ((x * 37 + y * 11) % 256, (x * 5 + y * 53) % 256, (x * x + y * 7) % 256)
    return a


def flat(a):
    """An HWC (or HW) u8 array as {w, h, c, data}."""
    a = np.asarray(a, dtype=np.uint8)
    if a.ndim == 2:
        a = a[:, :, None]
    h, w, c = a.shape
    return {"w": int(w), "h": int(h), "c": int(c), "data": [int(v) for v in a.reshape(-1)]}


def to_pil(a):
    return Image.fromarray(np.ascontiguousarray(a, dtype=np.uint8), "RGB")


def to_chw_tensor(a):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1).contiguous()


def from_chw_tensor(t):
    return t.permute(1, 2, 0).contiguous().numpy()


def maxdiff(a, b):
    return int(np.max(np.abs(np.asarray(a, dtype=np.int32) - np.asarray(b, dtype=np.int32))))


RESIZE_SEMANTICS = (
    "PIL Image.resize(size, Image.BILINEAR) (Pillow's ImagingResample): separable convolution "
    "with the triangle filter, support 1 scaled by max(1, in/out) so that a DOWNSCALE "
    "ANTIALIASES (the filter widens to cover every source pixel) while an upscale is plain "
    "bilinear interpolation; pixel centres at (i + 0.5) * in/out; coefficients normalised per "
    "output pixel; 8-bit path uses fixed-point coefficients (22 fractional bits) and rounds to "
    "u8 after EACH pass (horizontal first, then vertical). Edges: the filter window is clipped "
    "to the image and renormalised (no padding). torchvision's Resize/RandomResizedCrop on PIL "
    "images calls exactly this."
)
RESIZE_TOLERANCE = {
    "max_abs_diff": 1,
    "why": "same algorithm (fast_image_resize's Convolution(Bilinear) reimplements Pillow's), "
    "but fixed-point coefficient precision and the rounding of the intermediate u8 row pass "
    "can differ by one step; 2 would indicate a different pass order or intermediate precision, "
    "more than 2 a different filter or pixel-centre convention",
}
BLEND_SEMANTICS = (
    "ImageEnhance.X(img).enhance(f) = Image.blend(degenerate, img, f): per sample "
    "out = degenerate + f * (img - degenerate) computed in float (C float), then for "
    "0 <= f <= 1 truncated to u8, for f > 1 clipped to [0, 255] and truncated towards zero "
    "(never rounded)."
)
EXACT_TOLERANCE = {
    "max_abs_diff": 0,
    "why": "integer inputs, one float multiply-add and a truncation: an implementation that "
    "follows the stated semantics in f32 is bit-exact. Allow 1 only if the factor is "
    "carried in a different precision and a value lands exactly on an integer.",
}


def resize_cases(images):
    import torch
    import torchvision.transforms.functional as F

    cases = []
    for src, (w, h) in (("grad8x6", (4, 3)), ("grad16x12", (10, 7)), ("grad8x6", (12, 9))):
        a = images[src]
        out = np.asarray(to_pil(a).resize((w, h), Image.BILINEAR))
        tv = from_chw_tensor(F.resize(to_chw_tensor(a), [h, w], interpolation=F.InterpolationMode.BILINEAR, antialias=True))
        tv_noaa = from_chw_tensor(F.resize(to_chw_tensor(a), [h, w], interpolation=F.InterpolationMode.BILINEAR, antialias=False))
        kind = "downscale (antialiased)" if w < a.shape[1] else "upscale (plain bilinear)"
        cases.append(
            {
                "name": f"resize_bilinear_{src}_to_{w}x{h}",
                "op": "resize",
                "input": src,
                "params": {"width": w, "height": h, "filter": "bilinear", "kind": kind},
                "library": "PIL Image.resize((w, h), Image.BILINEAR)",
                "semantics": RESIZE_SEMANTICS,
                "tolerance": RESIZE_TOLERANCE,
                "output": flat(out),
                "variants": {
                    "torchvision_tensor_antialias_true": {
                        "call": "F.resize(u8 CHW tensor, [h, w], BILINEAR, antialias=True)",
                        "output": flat(tv),
                        "max_abs_diff_vs_output": maxdiff(tv, out),
                    },
                    "torchvision_tensor_antialias_false": {
                        "call": "F.resize(u8 CHW tensor, [h, w], BILINEAR, antialias=False) "
                        "(= tf.image.resize's default: no antialias)",
                        "output": flat(tv_noaa),
                        "max_abs_diff_vs_output": maxdiff(tv_noaa, out),
                    },
                },
            }
        )
    # RandomResizedCrop's hard crop: the window is the whole world (no neighbours outside
    # it are read). torchvision F.resized_crop on PIL = img.crop(box).resize(size, BILINEAR).
    left, top, cw, ch, w, h = 2, 1, 11, 9, 7, 5
    a = images["grad16x12"]
    out = np.asarray(to_pil(a).crop((left, top, left + cw, top + ch)).resize((w, h), Image.BILINEAR))
    cases.append(
        {
            "name": "resized_crop_grad16x12_box_2_1_11x9_to_7x5",
            "op": "resized_crop",
            "input": "grad16x12",
            "params": {"left": left, "top": top, "crop_width": cw, "crop_height": ch, "width": w, "height": h},
            "library": "torchvision F.resized_crop on PIL = img.crop((left, top, left+cw, top+ch)).resize((w, h), Image.BILINEAR)",
            "semantics": "crop first (the filter never reads outside the box), then " + RESIZE_SEMANTICS,
            "tolerance": RESIZE_TOLERANCE,
            "output": flat(out),
        }
    )
    return cases


def color_cases(images):
    import torch
    import torchvision
    import torchvision.transforms.functional as F

    a = images["grad8x6"]
    img = to_pil(a)
    cases = []
    gray_mean = int(ImageStat.Stat(img.convert("L")).mean[0] + 0.5)
    enh = {
        "brightness": (
            ImageEnhance.Brightness,
            "degenerate = black (all zeros): out = trunc(f * v), clipped to 255 for f > 1.",
            {},
        ),
        "contrast": (
            ImageEnhance.Contrast,
            "degenerate = a constant image of m = int(mean(L) + 0.5), where L = img.convert('L') "
            "(rounded luma, see grayscale_pil_L) and mean is the float mean over all pixels "
            "(ImageStat); the same m for all three channels.",
            {"pivot_mean_gray": gray_mean},
        ),
        "saturation": (
            ImageEnhance.Color,
            "degenerate = img.convert('L').convert('RGB'): each pixel blended with its own "
            "rounded luma L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16.",
            {},
        ),
    }
    for op, (cls, what, extra) in enh.items():
        for f in (0.5, 1.5):
            out = np.asarray(cls(img).enhance(f))
            tv = from_chw_tensor(getattr(F, f"adjust_{op}")(to_chw_tensor(a), f))
            cases.append(
                {
                    "name": f"{op}_{f}_grad8x6",
                    "op": op,
                    "input": "grad8x6",
                    "params": {"factor": f, **extra},
                    "library": f"PIL ImageEnhance.{cls.__name__}(img).enhance({f}) "
                    f"(= torchvision F.adjust_{op} on a PIL image)",
                    "semantics": BLEND_SEMANTICS + " " + what,
                    "tolerance": EXACT_TOLERANCE,
                    "output": flat(out),
                    "variants": {
                        "torchvision_tensor": {
                            "call": f"F.adjust_{op}(u8 CHW tensor, {f}): _blend in float "
                            "(ratio*img + (1-ratio)*degenerate), clamp, .to(uint8) (truncate); "
                            "contrast pivot = float mean of the TRUNCATED 0.2989/0.587/0.114 "
                            "gray, not rounded; saturation blends with that truncated gray",
                            "output": flat(tv),
                            "max_abs_diff_vs_output": maxdiff(tv, out),
                        }
                    },
                }
            )

    hue_semantics = (
        "torchvision _functional_tensor.adjust_hue: x = v / 255 (float32); RGB -> HSV with "
        "h in [0, 1) (_rgb2hsv: s = (max-min)/max, h from the max channel, ties resolved r "
        "first, then g), h = (h + shift) mod 1.0, HSV -> RGB (_hsv2rgb: i = floor(6h), sextant "
        "table), then back to u8 by convert_image_dtype: trunc(x * (255 + 1 - 1e-3)) = "
        "trunc(x * 255.999) -- a TRUNCATION of a slightly stretched value, not round(x * 255). "
        "Gray pixels (max == min) come back unchanged."
    )
    for shift in (0.1, -0.25):
        out = from_chw_tensor(F.adjust_hue(to_chw_tensor(a), shift))
        pil_path = np.asarray(F.adjust_hue(img, shift))
        x = a.astype(np.float32)
        cases.append(
            {
                "name": f"hue_{shift}_grad8x6",
                "op": "hue",
                "input": "grad8x6",
                "params": {"shift": shift},
                "library": f"torchvision F.adjust_hue(u8 CHW tensor, {shift})",
                "semantics": hue_semantics,
                "tolerance": {
                    "max_abs_diff": 1,
                    "why": "a float HSV round trip: f32 operation order differs between "
                    "implementations, and round(x*255) instead of trunc(x*255.999) alone differs "
                    "by 1 on some samples (7% of them for shift 0.1 on grad8x6, checked); more "
                    "than 1 means a wrong hue formula",
                },
                "output": flat(out),
                "variants": {
                    "torchvision_pil_path": {
                        "call": f"F.adjust_hue(PIL image, {shift}): PIL 8-bit HSV, h += "
                        "uint8(shift*255) wrapping, back to RGB; coarse (8-bit hue), shown only "
                        "to explain why the tensor path is the reference",
                        "output": flat(pil_path),
                        "max_abs_diff_vs_output": maxdiff(pil_path, out),
                    }
                },
            }
        )

    # Grayscale.
    lum = np.asarray(img.convert("L"))
    cases.append(
        {
            "name": "grayscale_pil_L_grad8x6",
            "op": "grayscale_l",
            "input": "grad8x6",
            "params": {"output_channels": 1},
            "library": "PIL img.convert('L')",
            "semantics": "ITU-R 601-2 luma in fixed point, rounded: "
            "L = (19595*R + 38470*G + 7471*B + 0x8000) >> 16 (weights 0.299, 0.587, 0.114).",
            "tolerance": EXACT_TOLERANCE,
            "output": flat(lum),
        }
    )
    tv3 = from_chw_tensor(F.rgb_to_grayscale(to_chw_tensor(a), num_output_channels=3))
    pil3 = np.asarray(F.rgb_to_grayscale(img, num_output_channels=3))
    cases.append(
        {
            "name": "rgb_to_grayscale3_tensor_grad8x6",
            "op": "grayscale3",
            "input": "grad8x6",
            "params": {"output_channels": 3},
            "library": "torchvision F.rgb_to_grayscale(u8 CHW tensor, num_output_channels=3)",
            "semantics": "l = (0.2989*R + 0.587*G + 0.114*B) in float32, TRUNCATED to u8 "
            "(.to(uint8)), copied to all 3 channels. Note 0.2989, not 0.299, and truncation, not "
            "rounding: this differs from the PIL path (variant torchvision_pil_path = "
            "convert('L') copied to 3 channels, what Grayscale(3) gives on PIL images) by up to 1.",
            "tolerance": {
                "max_abs_diff": 0,
                "why": "exact when the same weights and truncation are used; an implementation "
                "that follows PIL's rounded luma instead must compare against the "
                "torchvision_pil_path variant (exact) and will be within 1 of this output",
            },
            "output": flat(tv3),
            "variants": {
                "torchvision_pil_path": {
                    "call": "F.rgb_to_grayscale(PIL image, num_output_channels=3) = "
                    "convert('L') then merged into 3 equal channels",
                    "output": flat(pil3),
                    "max_abs_diff_vs_output": maxdiff(pil3, tv3),
                }
            },
        }
    )
    return cases


def dumps_compact_lists(doc):
    """JSON with indentation, but each pixel list on one line (readable diffs)."""
    lists = []

    def stash(o):
        if isinstance(o, dict):
            return {k: stash(v) for k, v in o.items()}
        if isinstance(o, list) and all(isinstance(v, int) for v in o):
            lists.append(json.dumps(o, separators=(",", ":")))
            return f"@@LIST{len(lists) - 1}@@"
        if isinstance(o, list):
            return [stash(v) for v in o]
        return o

    text = json.dumps(stash(doc), indent=1)
    for i, l in enumerate(lists):
        text = text.replace(f'"@@LIST{i}@@"', l)
    return text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help=f"JSON file to write (default {DEFAULT_OUT})")
    a = p.parse_args(argv)

    import PIL
    import torch
    import torchvision

    images = {"grad8x6": gradient(8, 6), "grad16x12": gradient(16, 12)}
    doc = {
        "generated_by": "benches/peers/reference.py",
        "versions": {
            "python": platform.python_version(),
            "pillow": PIL.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "numpy": np.__version__,
        },
        "layout": "pixel data are flat u8 lists in row-major HWC order: index = (y*w + x)*c + channel",
        "how_to_use": "for each case, apply `op` with `params` to images[input] and compare with "
        "`output` within tolerance.max_abs_diff (per sample, absolute). `variants` are other "
        "implementations of the same op, for information only.",
        "images": {
            name: {**flat(arr), "formula": FORMULA} for name, arr in images.items()
        },
        "cases": resize_cases(images) + color_cases(images),
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(dumps_compact_lists(doc))
        f.write("\n")
    print(f"wrote {len(doc['cases'])} cases to {a.out}")
    for c in doc["cases"]:
        drift = {k: v["max_abs_diff_vs_output"] for k, v in c.get("variants", {}).items()}
        print(f"  {c['name']:<44} tol {c['tolerance']['max_abs_diff']}  variants' max diff {drift}")


if __name__ == "__main__":
    main()
