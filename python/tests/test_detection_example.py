"""python/examples/train_detection.py run for real: a torchvision Faster R-CNN trained
for a few steps from stoker's batches, on generated scenes and on a COCO file written
as json writes one. It needs torch and torchvision, which the test venv (and CI) does
not install: without them these tests skip, saying so."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stoker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_detection.py"


def need_torch():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError as e:
        pytest.skip(f"SKIPPED: torch or torchvision is not installed ({e}); the detection example needs both")


def run_example(tmp_path, *args):
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--json", "--threads", "2", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        # The generated set goes to the test's folder, not the user's cache.
        env={**os.environ, "STOKER_CACHE": str(tmp_path / "cache")},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_detector_loss_falls_on_generated_scenes(tmp_path):
    need_torch()
    r = run_example(tmp_path, "--steps", "12", "--window", "3", "--size", "96")
    assert set(r) == {"loss_first", "loss_last", "images_per_sec"}
    assert r["images_per_sec"] > 0
    # From random weights the classifier and objectness losses fall within steps.
    assert r["loss_last"] < 0.8 * r["loss_first"], r
    assert (tmp_path / "cache" / "detection-scenes-96px" / "train.jsonl").is_file()


def test_the_detector_trains_on_a_coco_file(tmp_path):
    need_torch()
    # A COCO file as json writes it, over scenes stoker generates: boxes as
    # [x, y, width, height], category ids from 1, 64 px images resized to 96.
    stoker.gen_scenes(tmp_path / "scenes", 16, width=64, height=64, max_shapes=3, classes=4, seed=3)
    lines = (tmp_path / "scenes" / "train.jsonl").read_text().splitlines()
    header, rows = json.loads(lines[0]), [json.loads(l) for l in lines[1:]]
    cats = [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(header["classes"])]
    cat_id = {c["name"]: c["id"] for c in cats}
    images, anns = [], []
    for i, r in enumerate(rows):
        images.append({"id": i + 1, "file_name": r["image"], "width": 64, "height": 64})
        for (x1, y1, x2, y2), name in zip(r["boxes"], r["box_labels"]):
            w, h = x2 - x1, y2 - y1
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": cat_id[name],
                         "bbox": [x1, y1, w, h], "area": w * h, "iscrowd": 0})
    coco = tmp_path / "instances.json"
    coco.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    r = run_example(tmp_path, "--coco", str(coco), "--images", str(tmp_path / "scenes"),
                    "--steps", "3", "--window", "1", "--size", "96")
    assert all(math.isfinite(v) and v > 0 for v in r.values()), r
