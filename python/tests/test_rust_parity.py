"""The Python batches are the Rust loader's bytes: the same digest as
`stoker-load bench --digest` for the same settings, and the same for a packed copy."""

import json
import subprocess

import pytest

import stoker
from conftest import digest


def cli_digest(exe, data, *args):
    out = subprocess.run(
        [str(exe), "bench", str(data), "--json", "--digest", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(out.stdout)["digest"]


@pytest.mark.parametrize(
    "mode, workers, transform, shuffle",
    [("sync", 0, "rrc:24,flip", True), ("async", 2, "crop:32:pad=4,flip", True), ("async", 1, "", False)],
)
def test_same_digest_as_the_cli(stoker_load, shapes, mode, workers, transform, shuffle):
    args = ["--mode", mode, "--batch-size", "16", "--epochs", "2", "--seed", "7"]
    args += ["--transform", transform]
    if mode == "async":
        args += ["--workers", str(workers)]
    if not shuffle:
        args.append("--no-shuffle")
    expected = cli_digest(stoker_load, shapes, *args)
    loader = stoker.Loader(
        shapes,
        batch_size=16,
        transform=transform,
        mode=mode,
        workers=max(workers, 1),
        seed=7,
        shuffle=shuffle,
    )
    got = digest(b for e in range(2) for b in loader.epoch(e))
    assert got == expected


def test_packed_file_gives_the_folder_s_batches(stoker_load, shapes, tmp_path):
    out = tmp_path / "shapes.pack"
    stats = stoker.pack(shapes, out)
    assert stats["records"] == 60 and stats["classes"] == 3
    assert stats["file_bytes"] == out.stat().st_size
    settings = dict(batch_size=16, transform="rrc:24,flip", seed=2)
    folder = digest(stoker.Loader(shapes, **settings).epoch(0))
    assert digest(stoker.Loader(out, **settings).epoch(0)) == folder
    assert cli_digest(stoker_load, out, "--batch-size", "16", "--transform", "rrc:24,flip", "--seed", "2") == folder


def test_a_raw_pack_gives_the_batches_of_a_png_pack_and_of_the_cli(stoker_load, shapes, tmp_path):
    raw, png, cli = tmp_path / "raw.pack", tmp_path / "png.pack", tmp_path / "cli.pack"
    stats = stoker.pack(shapes, raw, max_side=20, encoding="raw")
    assert stats["records"] == 60
    # Version 3: raw pixels with a shape per record.
    assert raw.read_bytes()[8:12] == (3).to_bytes(4, "little")
    stoker.pack(shapes, png, max_side=20, encoding="png")
    subprocess.run([str(stoker_load), "pack", str(shapes), str(cli), "--max-side", "20", "--encoding", "raw"],
                   check=True, capture_output=True, timeout=120)
    assert cli.read_bytes() == raw.read_bytes()
    settings = dict(batch_size=16, transform="rrc:16,flip", seed=2)
    # PNG is lossless: decoded, its pixels are the raw records'.
    assert digest(stoker.Loader(raw, **settings).epoch(0)) == digest(stoker.Loader(png, **settings).epoch(0))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(max_side=0), "max_side must be between 1 and 65535, got 0"),
        (dict(encoding="jpeg:0"), "JPEG quality '0' is not a whole number from 1 to 100"),
        (dict(encoding="jpeg:101"), "JPEG quality '101'"),
        (dict(encoding="webp"), "unknown encoding 'webp' (expected keep, raw, png or jpeg:Q"),
    ],
)
def test_pack_refuses_bad_options_by_name(shapes, tmp_path, kwargs, words):
    out = tmp_path / "never.pack"
    with pytest.raises(ValueError) as e:
        stoker.pack(shapes, out, **kwargs)
    assert words in str(e.value)
    assert not out.exists()
