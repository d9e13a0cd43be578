"""MixUp and CutMix from Python: dict batches with soft labels, the same bytes in
every mode, exact resume, and clear errors for bad settings."""

import numpy as np
import pytest

import stoker


def mixed_digest(batches):
    d = stoker.Digest()
    for b in batches:
        d.update(b["image"], b["label"], b["soft_labels"])
    return d.hexdigest()


def test_mixed_batches_are_dicts_with_soft_labels(shapes):
    loader = stoker.Loader(
        shapes, batch_size=16, transform="rrc:24,flip,trivialaugment", mixup=stoker.Mix(mixup=0.2, cutmix=1.0, prob=0.5)
    )
    sizes = []
    for b in loader.epoch(0):
        assert isinstance(b, dict) and sorted(b) == ["image", "label", "soft_labels"]
        images, labels, soft = b["image"], b["label"], b["soft_labels"]
        n = images.shape[0]
        assert images.dtype == np.uint8 and images.shape[1:] == (24, 24, 3)
        assert labels.dtype == np.int64 and labels.shape == (n,)
        assert soft.dtype == np.float32 and soft.shape == (n, 3)
        np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-6)
        # Every image keeps some of its own label; the rest goes to its neighbour's
        # (the batch rolled by one).
        rolled = np.roll(labels, 1)
        for i in range(n):
            own = soft[i, labels[i]]
            assert own > 0 or labels[i] == rolled[i]
            assert set(np.flatnonzero(soft[i])) <= {labels[i], rolled[i]}
        sizes.append(n)
    assert sizes == [16, 16, 16, 12]


def test_mixing_is_the_same_in_every_mode_and_resumes_exactly(shapes):
    def run(**kw):
        loader = stoker.Loader(shapes, batch_size=8, transform="rrc:20,flip", seed=3, mixup=stoker.Mix(mixup=0.4, cutmix=1.0), **kw)
        return [mixed_digest(loader.epoch(e)) for e in range(2)]

    reference = run(mode="sync")
    assert run(mode="async", workers=1) == reference
    assert run(mode="async", workers=3) == reference

    loader = stoker.Loader(shapes, batch_size=8, transform="rrc:20,flip", seed=3, mixup=stoker.Mix(mixup=0.4, cutmix=1.0))
    it = iter(loader.epoch(0))
    first = [next(it) for _ in range(3)]
    state = loader.state_dict()
    del it
    again = stoker.Loader(shapes, batch_size=8, transform="rrc:20,flip", seed=3, mixup=stoker.Mix(mixup=0.4, cutmix=1.0))
    again.load_state_dict(state)
    rest = list(again)
    assert mixed_digest(first + rest) == reference[0]


def test_without_mixing_batches_stay_pairs(shapes):
    loader = stoker.Loader(shapes, batch_size=16, mode="sync")
    for b in loader.epoch(0):
        assert isinstance(b, tuple) and len(b) == 2


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"mixup": 0.0}, "argument 'mixup': bad mix setting 'mixup:0': alpha must be a positive number"),
        ({"cutmix": -1.0}, "'cutmix:-1': alpha must be a positive number"),
        ({"mixup": float("nan")}, "'mixup:NaN': alpha must be a positive number"),
        ({"mixup": 0.2, "prob": 0.5}, "needs both mixup and cutmix"),
        ({"mixup": 0.2, "cutmix": 1.0, "prob": 1.5}, "switch probability must be within 0..1"),
        ({"prob": 0.5}, "argument 'mixup'"),
    ],
)
def test_bad_mix_settings_are_value_errors(shapes, kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        stoker.Loader(shapes, batch_size=8, mixup=stoker.Mix(**kw))


def test_policies_and_new_ops_parse_and_bad_ones_name_the_spec(shapes):
    loader = stoker.Loader(shapes, batch_size=8, transform="randaugment:n=2:m=9,rotate:15,blur:3", mode="sync")
    images, _ = next(iter(loader.epoch(0)))
    assert images.shape == (8, 32, 32, 3)
    with pytest.raises(ValueError, match="autoaugment:policy=coco"):
        stoker.Loader(shapes, transform="autoaugment:policy=coco")
    with pytest.raises(ValueError, match="m must be within 0..=30"):
        stoker.Loader(shapes, transform="randaugment:m=31")
