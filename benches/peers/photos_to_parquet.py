#!/usr/bin/env python3
"""Write an ImageFolder as Parquet shards in the Hugging Face Hub's layout, with
pyarrow: OUT/data/train-NNNNN-of-MMMMM.parquet, an `image` column of the `datasets`
Image struct {bytes, path}, a `label` column with its ClassLabel names in the
schema's `huggingface` metadata, row groups of --row-group rows, zstd or snappy.
Rows are in the folder's order (class folders sorted, files sorted), as
`stoker-load pack` writes them.

    python photos_to_parquet.py /tmp/photos /tmp/photos-parquet --row-group 1000
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("out")
    p.add_argument("--row-group", type=int, default=1000)
    p.add_argument("--files", type=int, default=1, help="number of shards (default 1)")
    p.add_argument("--compression", default="zstd")
    a = p.parse_args()
    classes = sorted(d for d in os.listdir(a.folder) if os.path.isdir(os.path.join(a.folder, d)))
    rows = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(a.folder, c))):
            rows.append((os.path.join(a.folder, c, f), f"{c}/{f}", label))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    hf = {"info": {"features": {"image": {"_type": "Image"},
                                "label": {"names": classes, "_type": "ClassLabel"}}}}
    schema = pa.schema([("image", image_type), ("label", pa.int64())],
                       metadata={"huggingface": json.dumps(hf)})
    out = os.path.join(a.out, "data")
    os.makedirs(out, exist_ok=True)
    per = -(-len(rows) // a.files)
    for k in range(a.files):
        part = rows[k * per:(k + 1) * per]
        with pq.ParquetWriter(os.path.join(out, f"train-{k:05d}-of-{a.files:05d}.parquet"), schema,
                              compression=a.compression) as w:
            for s in range(0, len(part), a.row_group):
                chunk = part[s:s + a.row_group]
                images = []
                for path, rel, _ in chunk:
                    with open(path, "rb") as f:
                        images.append({"bytes": f.read(), "path": rel})
                w.write_table(pa.table({"image": pa.array(images, type=image_type),
                                        "label": pa.array([l for _, _, l in chunk], type=pa.int64())},
                                       schema=schema), row_group_size=a.row_group)
    print(f"{len(rows)} rows, {len(classes)} classes, {a.files} file(s) in {out}")


if __name__ == "__main__":
    main()
