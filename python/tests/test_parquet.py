"""Parquet shards written by pyarrow in the Hugging Face layout (an Image struct
{bytes, path}, a ClassLabel in the `huggingface` schema metadata, several row groups,
snappy and zstd) read to the batches of the image folder they came from."""

import json

import numpy as np
import pytest

import stoker

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    d = tmp_path_factory.mktemp("pq") / "shapes"
    stoker.gen_shapes(d, 30, size=24, classes=3, seed=7)
    return d


def folder_rows(folder):
    classes = sorted(p.name for p in folder.iterdir())
    rows = []
    for label, c in enumerate(classes):
        for f in sorted((folder / c).iterdir()):
            rows.append((f.read_bytes(), f.name, label))
    return classes, rows


def write_hf(folder, out, per_file=17):
    classes, rows = folder_rows(folder)
    out.mkdir(parents=True, exist_ok=True)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    hf = {"info": {"features": {"image": {"_type": "Image"},
                                "label": {"names": classes, "_type": "ClassLabel"},
                                "text": {"dtype": "string", "_type": "Value"}}}}
    schema = pa.schema([("image", image_type), ("label", pa.int64()), ("text", pa.string())],
                       metadata={"huggingface": json.dumps(hf)})
    parts = [rows[:per_file], rows[per_file:]]
    for k, part in enumerate(parts):
        table = pa.table({
            "image": pa.array([{"bytes": b, "path": n} for b, n, _ in part], type=image_type),
            "label": pa.array([l for _, _, l in part], type=pa.int64()),
            "text": pa.array([f"a {classes[l]}" for _, _, l in part]),
        }, schema=schema)
        pq.write_table(table, out / f"train-{k:05d}-of-00002.parquet", row_group_size=6,
                       compression="zstd" if k else "snappy")
    return classes


def test_hf_parquet_reads_as_its_folder(shapes, tmp_path):
    classes = write_hf(shapes, tmp_path / "data")
    kw = dict(batch_size=5, shuffle=False, transform="rrc:16,flip", seed=2)
    got = list(stoker.Loader(tmp_path / "data", **kw))
    want = list(stoker.Loader(shapes, **kw))
    assert len(got) == len(want) == 6
    for (gi, gl), (wi, wl) in zip(got, want):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gl, wl)
    loader = stoker.Loader(tmp_path / "data", text_column="text", batch_size=5, shuffle=False)
    batch = next(iter(loader))
    assert batch["text"] == [f"a {classes[int(l)]}" for l in batch["label"]]


def test_a_missing_column_names_the_file_and_the_columns(shapes, tmp_path):
    write_hf(shapes, tmp_path / "data")
    with pytest.raises(stoker.LoaderError, match=r"train-00000-of-00002\.parquet.*no image column 'img'"):
        stoker.Loader(tmp_path / "data", image_column="img")
