"""Bad data and bad settings raise stoker.LoaderError or ValueError naming the file or
the setting, and never take the interpreter down."""

import re

import numpy as np
import pytest

import stoker


def corrupt(folder):
    """Writes a file that is not an image into the first class folder."""
    first = sorted(p for p in folder.iterdir() if p.is_dir())[0]
    bad = first / "zz_broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    return bad


def test_missing_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(stoker.LoaderError, match="nowhere.*no such file"):
        stoker.Loader(missing)


def test_empty_folder(tmp_path):
    with pytest.raises(stoker.LoaderError, match=str(tmp_path)):
        stoker.Loader(tmp_path)


def test_corrupt_image_fails_naming_the_file(shapes, copy_of):
    folder = copy_of(shapes)
    bad = corrupt(folder)
    loader = stoker.Loader(folder, batch_size=8, shuffle=False, on_error="fail")
    with pytest.raises(stoker.LoaderError, match="zz_broken.jpg"):
        for _ in loader.epoch(0):
            pass
    # The loader is still usable: the next epoch starts afresh (and fails again).
    with pytest.raises(stoker.LoaderError, match=bad.name):
        for _ in loader.epoch(1):
            pass


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_corrupt_image_is_skipped_and_counted(shapes, copy_of, mode):
    folder = copy_of(shapes)
    corrupt(folder)
    loader = stoker.Loader(folder, batch_size=8, on_error="skip", mode=mode)
    n = sum(images.shape[0] for images, labels in loader.epoch(0))
    assert n == 60
    m = loader.metrics()
    assert m["skipped"] == 1 and m["samples"] == 60


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(transform="rrc:0"), ValueError, "argument 'transform': 'rrc:0'"),
        (dict(transform="sparkle:3"), ValueError, "unknown transform 'sparkle'"),
        # Ranges: the loader's own checks (LoaderConfig::validate), named as Python
        # spells the argument.
        (dict(batch_size=0), ValueError, "argument 'batch_size': 0 is out of range (expected 1"),
        (dict(workers=0), ValueError, "argument 'workers': 0 is out of range (expected 1"),
        (dict(workers=10**6), ValueError, "argument 'workers': 1000000 is out of range (expected 1 to 1024)"),
        (dict(workers="auto:0"), ValueError, "argument 'workers': 0 is out of range"),
        (dict(mode="fast"), ValueError, "argument 'mode': unknown mode 'fast'"),
        (dict(on_error="ignore"), ValueError, "argument 'on_error'"),
        (dict(rank=2, world_size=2), ValueError, "argument 'rank': rank 2 is out of range for world size 2"),
        (dict(world_size=0), ValueError, "argument 'world_size'"),
        (dict(channels=2), ValueError, "argument 'channels': must be 1 or 3, not 2"),
        (dict(max_instances=0), ValueError, "argument 'max_instances': must be at least 1"),
        (dict(min_box_visibility=2.0), ValueError, "argument 'min_box_visibility'"),
        (dict(batch_size=1 << 24), ValueError, "argument 'batch_size': 16777216 is out of range (expected 1 to 1048576)"),
        (dict(batch_size=1 << 20, transform="resize:4096"), ValueError, "argument 'batch_size': "),
        # Conversions: what cannot be a Rust count at all.
        (dict(batch_size=-3), ValueError, "argument 'batch_size': must be a whole number from 0"),
        (dict(workers=-1), ValueError, "argument 'workers': must be a whole number from 0"),
        (dict(workers=10**40), ValueError, "argument 'workers': must be a whole number from 0"),
        (dict(workers="2"), TypeError, "argument 'workers': must be an int, \"auto\" or \"auto:N\""),
        (dict(prefetch=-2), ValueError, "argument 'prefetch'"),
        (dict(seed=-1), ValueError, "argument 'seed'"),
        (dict(data=None), TypeError, "argument 'data': must be a path"),
    ],
)
def test_bad_settings(shapes, kwargs, error, words):
    kwargs = {"data": shapes, **kwargs}
    with pytest.raises(error, match=re.escape(words)):
        stoker.Loader(**kwargs)


def test_a_split_that_cannot_be_one_names_data(shapes):
    # Judged by the library where the data set is opened (as for --split on a command
    # line), named as Python gives it: inside `data`, for this data set.
    with pytest.raises(ValueError) as e:
        stoker.Loader(stoker.Data(shapes, split="val"))
    said = str(e.value)
    assert said.startswith(f"argument 'data': {shapes}: split: 'val' is a split by name"), said
    assert "give train or test" in said
    for bad in ["a/b", "", " "]:
        with pytest.raises(ValueError) as e:
            stoker.Loader(stoker.Data(shapes, split=bad))
        said = str(e.value)
        assert said.startswith(f"argument 'data': {shapes}: split: \"{bad}\" is not"), said
    # In a mixture too, as the data set that is opened with it.
    with pytest.raises(ValueError, match=f"argument 'data': {re.escape(str(shapes))}: split"):
        stoker.Loader(stoker.Mixture([shapes, stoker.Data(shapes, split="dev")]))


def test_every_setting_the_loader_refuses_names_a_parameter_of_loader():
    """One table (python/src/errors.rs, `py_name`) from the loader's settings to
    Loader's arguments: each name it gives is a real parameter, and those it leaves
    out are the settings Python keeps at their defaults."""
    import inspect

    params = inspect.signature(stoker.Loader).parameters
    names = dict(stoker._stoker._setting_names())
    # Every setting the loader names is in the table (it is built from Setting::ALL).
    assert {"batch_size", "world_size", "weights", "epoch_batches", "mixup"} <= names.keys()
    for setting, argument in names.items():
        if argument is not None:
            assert argument in params, f"{setting} maps to {argument}, not a parameter"
    unset = {s for s, a in names.items() if a is None}
    assert unset == {"shard_policy", "shuffle_buffer", "trace", "max_pixels", "max_buffer_bytes", "steps"}


def test_sync_mode_needs_no_workers(shapes):
    loader = stoker.Loader(shapes, mode="sync", workers=0, prefetch=0, batch_size=30)
    assert sum(1 for _ in loader.epoch(0)) == 2


def test_drop_last_with_too_few_samples(shapes):
    with pytest.raises(ValueError, match="drop_last"):
        stoker.Loader(shapes, batch_size=100, drop_last=True)


def test_pack_and_gen_errors(tmp_path):
    with pytest.raises(stoker.LoaderError, match="nowhere"):
        stoker.pack(tmp_path / "nowhere", tmp_path / "out.pack")
    with pytest.raises(ValueError, match="count"):
        stoker.gen_shapes(tmp_path / "g", 0)
    with pytest.raises(ValueError, match="classes"):
        stoker.gen_shapes(tmp_path / "g", 5, classes=11)


def test_workers_auto(shapes):
    straight = stoker.Loader(shapes, batch_size=8, workers=1, seed=3)
    auto = stoker.Loader(shapes, batch_size=8, workers="auto:2", seed=3)
    for (a, la), (b, lb) in zip(straight.epoch(0), auto.epoch(0)):
        assert (a == b).all() and (la == lb).all()
    m = auto.metrics()
    assert m["cpu_budget"] == 2 and 1 <= m["workers"] <= 2
    with pytest.raises(ValueError, match="argument 'workers': 0 is out of range"):
        stoker.Loader(shapes, workers="auto:0")
    with pytest.raises(ValueError, match="argument 'workers'"):
        stoker.Loader(shapes, workers="auto:many")
    with pytest.raises(TypeError, match="argument 'workers'"):
        stoker.Loader(shapes, workers="many")


def test_arguments_bind_by_position_or_keyword_as_the_signature_says(shapes):
    """Loader's arguments are bound by hand (python/src/bind.rs), as pyo3 binds a
    signature: positions, keywords and the TypeErrors for a call that does not fit."""
    import inspect

    params = list(inspect.signature(stoker.Loader).parameters.values())
    assert [p.name for p in params[:4]] == ["data", "batch_size", "transform", "mode"]
    assert params[2].default == "" and params[3].default == "async"
    assert len(params) == 25
    assert [p.name for p in params if p.kind is p.KEYWORD_ONLY][0] == "channels"
    by_position = stoker.Loader(shapes, 8, "flip", "sync", seed=3)
    by_keyword = stoker.Loader(data=shapes, batch_size=8, transform="flip", mode="sync", seed=3)
    for (a, la), (b, lb) in zip(by_position.epoch(0), by_keyword.epoch(0)):
        assert (a == b).all() and (la == lb).all()
    calls = [
        (lambda: stoker.Loader(), "Loader.__new__() missing 1 required positional argument: 'data'"),
        (
            lambda: stoker.Loader(shapes, bacth_size=8),
            "Loader.__new__() got an unexpected keyword argument 'bacth_size'",
        ),
        (
            lambda: stoker.Loader(shapes, 8, batch_size=8),
            "Loader.__new__() got multiple values for argument 'batch_size'",
        ),
        (
            lambda: stoker.Loader(*([shapes] * 14)),
            "Loader.__new__() takes from 1 to 13 positional arguments but 14 were given",
        ),
    ]
    for call, message in calls:
        with pytest.raises(TypeError) as e:
            call()
        assert str(e.value) == message
    # A value of the wrong type: the conversion's error, its message led by the
    # argument's name, the conversion's own error as its cause.
    with pytest.raises(TypeError) as e:
        stoker.Loader(shapes, transform=5)
    assert str(e.value).startswith("argument 'transform': ") and "str" in str(e.value)
    assert isinstance(e.value.__cause__, TypeError)


def test_a_conversion_error_of_another_class_is_kept_as_it_is(shapes):
    # A lone surrogate cannot become UTF-8: UnicodeEncodeError, which cannot be remade
    # from one message, so it is raised as the conversion raised it.
    with pytest.raises(UnicodeEncodeError):
        stoker.Loader(shapes, transform="\udcff")


@pytest.mark.parametrize(
    "name, value",
    [
        ("batch_size", "8"),
        ("transform", 224),
        ("mode", None),
        ("workers", 1.5),
        ("shuffle", 1),
        ("on_error", None),
        ("mixup", "0.2"),
        ("fields", [1]),
        ("min_box_visibility", None),
        ("channels", 3.0),
        ("decoded_cache", 1.5),
    ],
)
def test_a_value_of_the_wrong_type_names_its_argument(shapes, name, value):
    # "argument 'mixup': must be real number, not str", or the integers' own
    # "batch_size must be an int, got str".
    with pytest.raises(TypeError, match=rf"^(argument '{name}': |{name} must be )"):
        stoker.Loader(shapes, **{name: value})


@pytest.mark.parametrize(
    "name, value",
    [
        ("mixup", True),
        ("mixup", False),
        ("min_box_visibility", False),
        ("mixup", np.True_),
    ],
)
def test_a_bool_is_not_a_float_argument(shapes, name, value):
    """`mixup=True` is no alpha (Python would make it 1.0), and `mixup=False` would
    turn mixing on: both are refused, as a bool is for the int arguments."""
    with pytest.raises(TypeError, match=rf"^argument '{name}': must be a real number, not bool"):
        stoker.Loader(shapes, **{name: value})


def test_numbers_of_any_kind_are_still_floats(shapes):
    loader = stoker.Loader(
        shapes, batch_size=4, mixup=stoker.Mix(mixup=1, cutmix=np.float32(0.5), prob=1)
    )
    assert sorted(next(iter(loader))) == ["image", "label", "soft_labels"]
