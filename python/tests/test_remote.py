"""stoker.Loader and stoker.pack on data in S3 (moto's server, in a thread): a URL is
a data argument like a path, and gives the batches of the local copy."""

import os
import socket

import pytest

import stoker
from conftest import digest


@pytest.fixture
def s3(monkeypatch):
    """A bucket-less S3 on localhost, and the AWS_* variables that point at it."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        if os.environ.get("STOKER_REQUIRE_S3") == "1":
            raise
        pytest.skip(f"moto not installed ({e})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "STOKER_IO_RETRIES": "1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    yield client
    server.stop()


def test_a_packed_file_in_s3_gives_the_local_batches(s3, shapes, tmp_path):
    pack = tmp_path / "shapes.pack"
    stoker.pack(shapes, pack)
    s3.create_bucket(Bucket="pydata")
    s3.upload_file(str(pack), "pydata", "sets/shapes.pack")
    want = digest(stoker.Loader(pack, batch_size=8, seed=3).epoch(0))
    for mode in ("sync", "async"):
        remote = stoker.Loader("s3://pydata/sets/shapes.pack", batch_size=8, seed=3, mode=mode)
        assert len(remote) == 8
        assert digest(remote.epoch(0)) == want


def test_missing_objects_are_loader_errors_naming_the_url(s3):
    s3.create_bucket(Bucket="pyempty")
    with pytest.raises(stoker.LoaderError, match="s3://pyempty/none.pack"):
        stoker.Loader("s3://pyempty/none.pack")


def test_parquet_in_s3_reads_as_locally(s3, tmp_path):
    """A Hub repository (written by pyarrow) under an S3 prefix: split= picks its files,
    and the batches are the local copy's."""
    pytest.importorskip("pyarrow")
    from test_parquet import hub_repo

    folder = tmp_path / "shapes"
    stoker.gen_shapes(folder, 30, size=24, classes=3, seed=7)
    repo = tmp_path / "repo"
    hub_repo(folder, repo)
    s3.create_bucket(Bucket="hub")
    for f in sorted(repo.rglob("*")):
        if f.is_file():
            s3.upload_file(str(f), "hub", "repo/" + f.relative_to(repo).as_posix())
    kw = dict(batch_size=6, seed=4)
    for mode in ("sync", "async"):
        want = digest(stoker.Loader(repo, mode=mode, **kw).epoch(0))
        assert digest(stoker.Loader("s3://hub/repo/", mode=mode, **kw).epoch(0)) == want
    assert len(stoker.Loader(stoker.Parquet("s3://hub/repo", split="test"), batch_size=1)) == 4
