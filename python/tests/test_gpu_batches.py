"""device="cuda" batches, on a GPU (GPU-only: every test here skips, saying so, where
CUDA or torch is missing; scripts/gpu-check.sh runs them with STOKER_REQUIRE_GPU=1,
which turns those skips into failures):

- device batches equal the CPU reference (test_output.py checks the CPU path against
  numpy): uint8 exactly, float32 within 1e-6, float16 and bfloat16 within a unit in
  the last place;
- torch.from_dlpack takes them without a copy: the tensor's data_ptr is the array's;
- held batches are never overwritten: hold 8, then check them all; the 17th held is
  a LoaderError naming the 16 held.

Runs under pytest, or as a script (`python test_gpu_batches.py DATA_DIR`) where
pytest is not installed.
"""

import os
import sys

import numpy as np

import stoker

try:
    import pytest
except ImportError:  # run as a script on a machine without pytest
    pytest = None

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
COMMON = dict(batch_size=16, transform="rrc:24,flip", workers=2, seed=5)


def skip(reason):
    reason = f"SKIPPED (GPU-only): {reason}"
    if os.environ.get("STOKER_REQUIRE_GPU") == "1":
        raise AssertionError(f"{reason} (STOKER_REQUIRE_GPU=1)")
    print(reason, file=sys.stderr)
    if pytest is not None and __name__ != "__main__":
        pytest.skip(reason)
    raise SystemExit(0)


def need_cuda(data):
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    try:
        stoker.Loader(data, device="cuda", batch_size=2)
    except stoker.LoaderError as e:
        skip(f"no usable CUDA: {e}")
    if not torch.cuda.is_available():
        skip("torch sees no CUDA device")
    return torch


def to_host(torch, a):
    """A device array's values as numpy, through DLPack (bf16 as its uint16 bits)."""
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.data_ptr, "torch made a copy"
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
        return t.cpu().numpy().view(np.uint16)
    return t.cpu().numpy()


def ulp_close(got, want, bits):
    """float16/bfloat16 as their bit patterns: at most one unit in the last place apart."""
    g = got.view(np.uint16).astype(np.int32)
    w = want.view(np.uint16).astype(np.int32)
    assert np.abs(g - w).max() <= 1, f"{bits}: up to {np.abs(g - w).max()} ulp apart"


CASES = [
    ("uint8", "NHWC", None),
    ("uint8", "NCHW", None),
    ("float32", "NHWC", None),
    ("float32", "NCHW", (MEAN, STD)),
    ("float16", "NCHW", (MEAN, STD)),
    ("bfloat16", "NHWC", (MEAN, STD)),
    ("bfloat16", "NCHW", None),
]


def check_equal(torch, dev_batch, cpu_batch, dtype):
    (d_img, d_lab), (c_img, c_lab) = dev_batch, cpu_batch
    assert isinstance(d_img, stoker.DeviceArray) and isinstance(d_lab, stoker.DeviceArray)
    assert tuple(d_img.shape) == c_img.shape, (d_img.shape, c_img.shape)
    got = to_host(torch, d_img)
    if dtype == "uint8":
        np.testing.assert_array_equal(got, c_img)
    elif dtype == "float32":
        assert np.abs(got - c_img).max() <= 1e-6
    else:
        ulp_close(got, c_img, dtype)
    np.testing.assert_array_equal(to_host(torch, d_lab), c_lab)


def run_equal_to_the_cpu_reference(data):
    torch = need_cuda(data)
    for dtype, layout, norm in CASES:
        opts = dict(dtype=dtype, layout=layout, normalize=norm, **COMMON)
        cpu = list(stoker.Loader(data, **opts).epoch(0))
        dev = stoker.Loader(data, device="cuda", **opts)
        n = 0
        for d, c in zip(dev.epoch(0), cpu):
            check_equal(torch, d, c, dtype)
            n += 1
        assert n == len(cpu)


def run_zero_copy_into_torch(data):
    torch = need_cuda(data)
    loader = stoker.Loader(data, device="cuda", dtype="float32", layout="NCHW", **COMMON)
    images, labels = next(iter(loader.epoch(0)))
    assert images.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(images)
    assert t.data_ptr() == images.data_ptr
    assert t.dtype == torch.float32 and tuple(t.shape) == tuple(images.shape)
    assert t.is_contiguous()
    # The tensor keeps the batch alive on its own.
    del images
    assert torch.isfinite(t).all().item()
    assert torch.from_dlpack(labels).dtype == torch.int64


def run_held_batches_are_never_overwritten(data):
    torch = need_cuda(data)
    opts = dict(dtype="float16", layout="NCHW", normalize=(MEAN, STD), **COMMON)
    opts["batch_size"] = 4  # 60 samples: 15 batches an epoch
    cpu = list(stoker.Loader(data, **opts).epoch(0))
    loader = stoker.Loader(data, device="cuda", **opts)
    it = iter(loader.epoch(0))
    dev = [next(it) for _ in range(8)]
    # A slow consumer: the copy stream runs ahead of the checks below.
    torch.cuda.synchronize()
    for d, c in zip(dev, cpu):
        check_equal(torch, d, c, "float16")
    # Tensors held, the arrays dropped: still the slot's owners.
    tensors = [torch.from_dlpack(d[0]) for d in dev]
    del dev
    # Another epoch through the free slots, each batch dropped as the next comes.
    for _ in loader.epoch(1):
        pass
    for t, c in zip(tensors, cpu):
        ulp_close(t.view(torch.int16).cpu().numpy().view(np.uint16), c[0], "float16")
    del tensors, it
    # The limit: 16 held, the next is an error naming them; once one is dropped, the
    # next call hands out the batch that failed (none is lost).
    opts["batch_size"] = 2  # 30 batches an epoch
    cpu = list(stoker.Loader(data, **opts).epoch(0))
    loader = stoker.Loader(data, device="cuda", **opts)
    it = iter(loader.epoch(0))
    held = [next(it) for _ in range(16)]
    try:
        next(it)
    except stoker.LoaderError as e:
        assert "all 16 device batches are still held" in str(e), str(e)
    else:
        raise AssertionError("17 device batches held without an error")
    del held[0]
    held.append(next(it))
    for d, c in zip(held, cpu[1:17]):
        check_equal(torch, d, c, "float16")


if pytest is not None:
    # Its own data (the bundle carries this file without conftest.py).
    @pytest.fixture(scope="module")
    def gpu_data(tmp_path_factory):
        d = tmp_path_factory.mktemp("data") / "shapes"
        stoker.gen_shapes(d, 60, size=32, classes=3, seed=1)
        return d

    def test_device_batches_equal_the_cpu_reference(gpu_data):
        run_equal_to_the_cpu_reference(gpu_data)

    def test_torch_takes_them_without_a_copy(gpu_data):
        run_zero_copy_into_torch(gpu_data)

    def test_held_batches_are_never_overwritten(gpu_data):
        run_held_batches_are_never_overwritten(gpu_data)


if __name__ == "__main__":
    data = sys.argv[1]
    if not os.path.isdir(data):
        stoker.gen_shapes(data, 60, size=32, classes=3, seed=1)
    for f in (run_equal_to_the_cpu_reference, run_zero_copy_into_torch,
              run_held_batches_are_never_overwritten):
        f(data)
        print(f"ok {f.__name__}")
