"""dtype=, layout= and normalize= on the CPU: each combination equals a numpy reference
computed from the default uint8 batches; the defaults leave batches as they were;
bad values are errors naming the argument; device="cuda" without a GPU is a
LoaderError at construction (before the data is opened). (On a GPU, test_gpu_batches.py checks the device batches against
this same CPU path.)"""

import numpy as np
import pytest

import stoker

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

COMMON = dict(batch_size=16, transform="rrc:24,flip", workers=2, seed=3)


def reference(images, dtype, layout, normalize):
    """The documented arithmetic in numpy: float32, (x / 255 - mean) / std, each step
    rounded as IEEE float32 (numpy's float32 ops are), then rounded to nearest even
    for float16 (numpy's astype) and bfloat16 (by hand, on the bits)."""
    if dtype == "uint8":
        y = images
    else:
        y = images.astype(np.float32) / np.float32(255)
        if normalize is not None:
            mean = np.asarray(normalize[0], dtype=np.float32)
            std = np.asarray(normalize[1], dtype=np.float32)
            y = (y - mean) / std
        if dtype == "float16":
            y = y.astype(np.float16)
        elif dtype == "bfloat16":
            bits = y.view(np.uint32).astype(np.uint64)
            y = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    if layout == "NCHW":
        y = np.ascontiguousarray(y.transpose(0, 3, 1, 2))
    return y


def plain_batches(shapes):
    return list(stoker.Loader(shapes, **COMMON).epoch(0))


CASES = [
    (dtype, layout, norm)
    for dtype in ("uint8", "float32", "float16", "bfloat16")
    for layout in ("NHWC", "NCHW")
    for norm in (None, (MEAN, STD))
    if not (dtype == "uint8" and norm is not None)
]


@pytest.mark.parametrize("dtype,layout,normalize", CASES)
def test_each_dtype_layout_and_normalize_equals_the_numpy_reference(shapes, dtype, layout, normalize):
    plain = plain_batches(shapes)
    loader = stoker.Loader(shapes, dtype=dtype, layout=layout, normalize=normalize, **COMMON)
    got = list(loader.epoch(0))
    assert len(got) == len(plain)
    want_dtype = {"uint8": np.uint8, "float32": np.float32, "float16": np.float16,
                  "bfloat16": np.uint16}[dtype]
    for (images, labels), (raw, raw_labels) in zip(got, plain):
        want = reference(raw, dtype, layout, normalize)
        assert images.dtype == want_dtype
        assert images.shape == want.shape and images.flags.c_contiguous
        # The same bits: the host follows the documented order exactly.
        np.testing.assert_array_equal(images.view(np.uint8), want.view(np.uint8))
        np.testing.assert_array_equal(labels, raw_labels)
    if dtype == "float32" and normalize is not None:
        exact = (raw.astype(np.float64) / 255 - np.asarray(MEAN)) / np.asarray(STD)
        if layout == "NCHW":
            exact = exact.transpose(0, 3, 1, 2)
        assert np.abs(images - exact).max() <= 1e-6 * max(1.0, np.abs(exact).max())


def test_the_defaults_hand_out_the_pooled_bytes_as_before(shapes):
    plain = stoker.Loader(shapes, **COMMON)
    explicit = stoker.Loader(shapes, device="cpu", dtype="uint8", layout="NHWC", normalize=None, **COMMON)
    a, b = stoker.Digest(), stoker.Digest()
    for (x, y), (u, v) in zip(plain.epoch(0), explicit.epoch(0)):
        a.update(x, y)
        b.update(u, v)
        # Still the zero-copy view of the loader's buffer: no pass over it was made.
        assert isinstance(u.base, stoker.BatchBuffer)
    assert a.hexdigest() == b.hexdigest()


def test_converted_batches_give_the_pooled_buffer_back_at_once(shapes):
    loader = stoker.Loader(shapes, dtype="float32", layout="NCHW", **COMMON)
    held = list(loader.epoch(0))
    assert all(not isinstance(x.base, stoker.BatchBuffer) for x, _ in held)
    # Four batches held by the consumer, none of the loader's buffers.
    assert loader.metrics()["buffers_held"] == 0
    assert loader.metrics()["pool_grown"] == 0


def test_bfloat16_on_the_cpu_is_the_bit_patterns_as_uint16(shapes):
    loader = stoker.Loader(shapes, dtype="bfloat16", **COMMON)
    images, _ = next(iter(loader.epoch(0)))
    assert images.dtype == np.uint16
    # Read back as float32 (the bits in the upper half), within bf16's rounding.
    as_f32 = (images.astype(np.uint32) << 16).view(np.float32)
    raw, _ = plain_batches(shapes)[0]
    f = raw.astype(np.float32) / 255
    assert np.abs(as_f32 - f).max() <= 2.0**-8


def test_mixed_and_mapped_batches_are_converted_too(shapes):
    mixed = stoker.Loader(shapes, mixup=0.4, dtype="float16", layout="NCHW", **COMMON)
    d = next(iter(mixed.epoch(0)))
    assert d["image"].dtype == np.float16 and d["image"].shape[1] == 3
    assert d["soft_labels"].dtype == np.float32

    def flip(sample, rng):
        return {"image": sample["image"][:, ::-1].copy(), "label": sample["label"]}

    mapped = stoker.Loader(shapes, map=flip, dtype="float32", normalize=(MEAN, STD), **COMMON)
    b = next(iter(mapped.epoch(0)))
    raw = plain_batches(shapes)[0][0][:, :, ::-1]
    np.testing.assert_array_equal(b["image"], reference(raw, "float32", "NHWC", (MEAN, STD)))


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(dtype="int8"), ValueError, ["argument 'dtype'", "int8", "float32"]),
        (dict(layout="CHW"), ValueError, ["argument 'layout'", "CHW", "NCHW"]),
        (dict(dtype="float32", normalize=((0.5, 0.5), (0.2, 0.2))), ValueError,
         ["argument 'normalize'", "2 mean(s)", "3 channel(s)"]),
        (dict(dtype="float32", normalize=((0.5,) * 3, (0.2, 0.0, 0.2))), ValueError,
         ["argument 'normalize'", "std[1]", "above 0"]),
        (dict(normalize=(MEAN, STD)), ValueError, ["argument 'normalize'", "float dtype"]),
        (dict(dtype="float32", normalize=(0.5, 0.2)), TypeError, ["normalize", "(mean, std)"]),
        (dict(device="tpu"), ValueError, ["argument 'device'", "tpu", "cuda:N"]),
        (dict(dtype=32), TypeError, ["dtype"]),
    ],
)
def test_bad_values_are_errors_naming_the_argument(shapes, kwargs, exc, words):
    with pytest.raises(exc) as e:
        stoker.Loader(shapes, **kwargs)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_device_cuda_without_a_gpu_is_a_loader_error_at_once(shapes):
    try:
        stoker.Loader(shapes, device="cuda", batch_size=4)
    except stoker.LoaderError as e:
        msg = str(e)
        assert "device" in msg and "cuda:0" in msg and "CUDA" in msg, msg
        # The reason: no driver, no device, or no compiler.
        assert any(w in msg for w in ("not found", "no usable", "NVRTC", "libnvrtc")), msg
        return
    pytest.skip("SKIPPED (needs a machine without a GPU): CUDA is usable here; "
                "test_gpu_batches.py checks device batches")
