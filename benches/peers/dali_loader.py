#!/usr/bin/env python3
"""Peer baseline: NVIDIA DALI's CPU pipeline on an ImageFolder of JPEGs.

The DALI counterpart of `rrc:224,flip`, on the CPU only (`device_id=None`, so no GPU
is needed or touched):

    fn.readers.file(file_root=DATA, random_shuffle=True)
    -> fn.decoders.image_random_crop(device="cpu", RGB, area 0.08..1, ratio 3/4..4/3)
       (decodes only the crop window, like stoker's libjpeg-turbo path)
    -> fn.resize(224x224)   (DALI's default: antialiased when shrinking)
    -> fn.flip(horizontal=coin flip)
    -> batches of 64, u8 HWC

One warm-up epoch (not timed; also warms the page cache), then images/s over the
timed epochs, for each thread count given (DALI's num_threads: its CPU worker pool).

    python dali_loader.py /tmp/photos --threads 1 2 --epochs 2 --json

Install: pip install nvidia-dali-cuda130 (the CPU pipeline runs without CUDA).
"""

import argparse
import json
import math
import time


def run(data, threads, batch_size, epochs, seed):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=seed)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=data, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs,
            device="cpu",
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()
    n = p.epoch_size("Reader")
    steps = math.ceil(n / batch_size)

    def epoch():
        count = 0
        for _ in range(steps):
            images, _labels = p.run()
            count += len(images)
        return count

    epoch()  # warm-up
    t0 = time.perf_counter()
    images = sum(epoch() for _ in range(epochs))
    dt = time.perf_counter() - t0
    return {
        "loader": "dali-cpu",
        "threads": threads,
        "images": images,
        "seconds": dt,
        "images_per_sec": images / dt,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for t in args.threads:
        r = run(args.data, t, args.batch_size, args.epochs, args.seed)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            print(f"DALI CPU, {t} threads: {r['images_per_sec']:.1f} img/s")


if __name__ == "__main__":
    main()
