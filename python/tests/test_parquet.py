"""Parquet shards written by pyarrow in the Hugging Face layout (an Image struct
{bytes, path}, a ClassLabel in the `huggingface` schema metadata, several row groups,
snappy and zstd) read to the batches of the image folder they came from."""

import json

import numpy as np
import pytest

import stoker
from conftest import digest

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
    loader = stoker.Loader(stoker.Parquet(tmp_path / "data", text_column="text"), batch_size=5, shuffle=False)
    batch = next(iter(loader))
    assert batch["text"] == [f"a {classes[int(l)]}" for l in batch["label"]]


def test_a_missing_column_names_the_file_and_the_columns(shapes, tmp_path):
    write_hf(shapes, tmp_path / "data")
    with pytest.raises(stoker.LoaderError, match=r"train-00000-of-00002\.parquet.*no image column 'img'"):
        stoker.Loader(stoker.Parquet(tmp_path / "data", image_column="img"))
    # A label column named by the caller too (a typo would leave the set classless);
    # the default name may be missing, for a set without classes.
    with pytest.raises(stoker.LoaderError, match=r"no label column 'fine_lable' \(the columns: image, label, text\)"):
        stoker.Loader(stoker.Parquet(tmp_path / "data", label_column="fine_lable"))


def hub_repo(folder, root):
    """A Hub repository on disk: data/train-*.parquet and data/test-*.parquet."""
    classes = write_hf(folder, root / "data")
    _, rows = folder_rows(folder)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    test = pa.table({
        "image": pa.array([{"bytes": b, "path": n} for b, n, _ in rows[:4]], type=image_type),
        "label": pa.array([l for _, _, l in rows[:4]], type=pa.int64()),
    })
    pq.write_table(test, root / "data" / "test-00000-of-00001.parquet")
    (root / "README.md").write_text("---\nlicense: mit\n---\n")
    return classes


def test_split_picks_the_files_of_a_hub_repository(shapes, tmp_path):
    hub_repo(shapes, tmp_path / "repo")
    kw = dict(batch_size=5, shuffle=False, seed=2)
    want = digest(stoker.Loader(shapes, **kw))
    assert digest(stoker.Loader(tmp_path / "repo", **kw)) == want
    assert digest(stoker.Loader(str(tmp_path / "repo/data/train-*.parquet"), **kw)) == want
    assert len(stoker.Loader(stoker.Parquet(tmp_path / "repo", split="test"), batch_size=1)) == 4
    with pytest.raises(stoker.LoaderError, match="no Parquet file of split 'validation'"):
        stoker.Loader(stoker.Parquet(tmp_path / "repo", split="validation"))
    # A split's name means nothing to an image folder: refused, not ignored.
    with pytest.raises(ValueError, match="argument 'data': .*split: 'validation' is a split by name"):
        stoker.Loader(stoker.Data(shapes, split="validation"))


def test_files_written_by_the_datasets_library(shapes, tmp_path):
    """The `datasets` library's own Image and ClassLabel features, written by
    Dataset.to_parquet: the images and class names of the folder they came from."""
    datasets = pytest.importorskip("datasets")
    classes, rows = folder_rows(shapes)
    features = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=classes),
    })
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": b, "path": n} for b, n, _ in rows],
         "label": [l for _, _, l in rows]},
        features=features,
    )
    out = tmp_path / "hf" / "train-00000-of-00001.parquet"
    out.parent.mkdir()
    ds.to_parquet(str(out), batch_size=8)
    kw = dict(batch_size=len(rows), shuffle=False)
    loader = stoker.Loader(out.parent, **kw)
    assert loader.classes == classes
    got_images, got_labels = next(iter(loader))
    images, labels = next(iter(stoker.Loader(shapes, **kw)))
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert [int(l) for l in got_labels] == [l for _, _, l in rows]



def test_null_and_non_image_cells_are_errors_of_their_row_or_skipped(shapes, tmp_path):
    classes, rows = folder_rows(shapes)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])

    def write(name, bad):
        cells = [{"bytes": b, "path": n} for b, n, _ in rows[:10]]
        for i, cell in bad.items():
            cells[i] = cell
        table = pa.table({"image": pa.array(cells, type=image_type),
                          "label": pa.array([l for _, _, l in rows[:10]], type=pa.int64())})
        out = tmp_path / name
        out.mkdir()
        pq.write_table(table, out / "train.parquet", row_group_size=4)
        return out

    null = write("null", {3: None})
    with pytest.raises(stoker.LoaderError, match=r"train\.parquet row group 0 row 3\): the image cell is null"):
        list(stoker.Loader(null, batch_size=5, shuffle=False))
    junk = write("junk", {7: {"bytes": b"this is not an image", "path": "x.jpg"}})
    with pytest.raises(stoker.LoaderError, match=r"train\.parquet row group 1 row 3"):
        list(stoker.Loader(junk, batch_size=5, shuffle=False))
    both = write("both", {3: None, 7: {"bytes": b"this is not an image", "path": "x.jpg"}})
    loader = stoker.Loader(both, batch_size=5, shuffle=False, on_error="skip")
    n = sum(images.shape[0] for images, _ in loader)
    assert n == 8 and loader.metrics()["skipped"] == 2
