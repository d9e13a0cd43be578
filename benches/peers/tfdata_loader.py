#!/usr/bin/env python3
"""Peer baseline: tf.data throughput on an ImageFolder of JPEGs.

The tf.data counterpart of `rrc:224,flip`, written the way TensorFlow's own
ImageNet input pipelines write it (fused decode-and-crop, so only the crop window's
MCUs are decoded):

    list files + labels -> shuffle (whole list, reshuffled every epoch)
    -> map(num_parallel_calls=AUTOTUNE):
         tf.io.read_file -> tf.image.extract_jpeg_shape
         -> tf.image.sample_distorted_bounding_box(area_range=(0.08, 1),
                aspect_ratio_range=(3/4, 4/3), min_object_covered=0, 10 attempts)
         -> tf.image.decode_and_crop_jpeg -> tf.image.resize(224x224, bilinear,
                antialias=A) -> round, saturate_cast to uint8
         -> tf.image.random_flip_left_right
    -> batch(64) -> prefetch(AUTOTUNE)

(--decode full swaps the fused decode-and-crop for decode_jpeg + crop, to show
how much of tf.data's speed comes from decoding only the window.)

One warm-up epoch (not timed; also warms the page cache), then images/s over the
timed epochs. tf.data has no worker count: AUTOTUNE sizes its parallelism to the
machine (all cores) unless --threads caps its private thread pool.

Antialias: tf.image.resize's default is antialias=False, i.e. plain bilinear
interpolation from the 4 nearest pixels even when shrinking (aliasing, cheaper);
antialias=True widens the filter on downscale like PIL (and stoker) do.
--antialias both (the default) runs both, labelled.

    python tfdata_loader.py /tmp/photos --epochs 2 --json
"""

import argparse
import json
import os
import sys
import time

IMAGE_EXTS = (".jpg", ".jpeg", ".JPG", ".JPEG")


def list_folder(root):
    """(paths, labels) like torchvision's ImageFolder: classes are the sorted
    sub-folder names."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    paths, labels = [], []
    for ci, c in enumerate(classes):
        for dirpath, _dirs, files in sorted(os.walk(os.path.join(root, c))):
            for f in sorted(files):
                if f.endswith(IMAGE_EXTS):
                    paths.append(os.path.join(dirpath, f))
                    labels.append(ci)
    if not paths:
        raise SystemExit(f"error: no JPEG files under {root}/<class>/")
    return paths, labels


def make_dataset(tf, paths, labels, batch_size, antialias, seed, threads, fused):
    autotune = tf.data.AUTOTUNE

    def load(path, label):
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        # RandomResizedCrop's window: area in [0.08, 1] of the image, aspect ratio in
        # [3/4, 4/3], no object constraint; after 10 failed attempts TF falls back to
        # the whole image (torchvision falls back to a central crop).
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4]),
            min_object_covered=0.0,
            aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        if fused:
            img = tf.image.decode_and_crop_jpeg(data, tf.stack([y, x, h, w]), channels=3)
        else:  # full decode, then crop: what stoker and torchvision do
            img = tf.image.decode_jpeg(data, channels=3)
            img = tf.image.crop_to_bounding_box(img, y, x, h, w)
        img = tf.image.resize(img, [224, 224], method="bilinear", antialias=antialias)
        img = tf.saturate_cast(tf.round(img), tf.uint8)
        img = tf.image.random_flip_left_right(img)
        return img, label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    ds = ds.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=autotune, deterministic=False)
    ds = ds.batch(batch_size)
    ds = ds.prefetch(autotune)
    if threads:
        opts = tf.data.Options()
        opts.threading.private_threadpool_size = threads
        opts.threading.max_intra_op_parallelism = 1
        ds = ds.with_options(opts)
    return ds


def run_epoch(ds):
    n = 0
    for images, _labels in ds:
        n += int(images.shape[0])
    return n


def measure(tf, paths, labels, epochs, batch_size, antialias, seed, threads, fused):
    ds = make_dataset(tf, paths, labels, batch_size, antialias, seed, threads, fused)
    run_epoch(ds)  # warm-up: graph tracing, autotuning, page cache
    c0 = time.process_time()  # all of this process's threads
    t0 = time.perf_counter()
    n = 0
    for _ in range(epochs):
        n += run_epoch(ds)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {
        "peer": "tfdata",
        "workers": threads if threads else "autotune",
        "antialias": antialias,
        "decode": "crop" if fused else "full",
        "images_per_sec": n / wall,
        "images": n,
        "epochs": epochs,
        "batch_size": batch_size,
        "wall_seconds": wall,
        # CPU time over the timed epochs: less sensitive than images/s to other jobs.
        "cpu_seconds": cpu,
        "images_per_cpu_second": n / cpu if cpu > 0 else None,
        "cores": os.cpu_count(),
        "tensorflow": tf.__version__,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="ImageFolder root (DATA/<class>/<image>.jpg)")
    p.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    p.add_argument(
        "--antialias",
        choices=["false", "true", "both"],
        default="both",
        help="tf.image.resize antialias (its default is false); both runs both (default)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="cap tf.data's private thread pool at N threads (default 0: AUTOTUNE on all cores)",
    )
    p.add_argument(
        "--decode",
        choices=["crop", "full"],
        default="crop",
        help="crop: fused decode_and_crop_jpeg (default, TF's idiom); "
        "full: decode the whole image, then crop (what stoker and torchvision do)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 0:
        p.error("--epochs and --batch-size must be >= 1, --threads >= 0")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's start-up chatter off the output
    import tensorflow as tf

    tf.random.set_seed(a.seed)
    paths, labels = list_folder(a.data)
    modes = {"false": [False], "true": [True], "both": [False, True]}[a.antialias]
    if not a.json:
        print(
            f"tensorflow {tf.__version__}, {len(paths)} images, batch {a.batch_size}, "
            f"{a.epochs} timed epoch(s), threads {a.threads or 'AUTOTUNE'}",
            file=sys.stderr,
        )
    for aa in modes:
        r = measure(tf, paths, labels, a.epochs, a.batch_size, aa, a.seed, a.threads, a.decode == "crop")
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            print(
                f"tfdata antialias={str(aa).lower()} decode={r['decode']}: {r['images_per_sec']:.1f} images/s "
                f"({r['images']} images in {r['wall_seconds']:.2f} s; "
                f"{r['cpu_seconds']:.2f} CPU s, {r['images_per_cpu_second'] or 0:.0f} images per CPU s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
