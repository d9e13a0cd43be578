"""The installed package is the wheel's as built: libjpeg-turbo decodes, from the copy
inside the wheel (stoker.libs/), not a system library. Runs against a wheel install
(scripts/python-tests.sh sets STOKER_WHEEL=1); a build from source may use either."""

import os
from pathlib import Path

import pytest

import stoker

wheel_only = pytest.mark.skipif(
    not os.environ.get("STOKER_WHEEL"),
    reason="SKIPPED: not a wheel install (scripts/python-tests.sh tests the wheel)",
)


def test_the_decoder_is_named():
    name = stoker.decoder()
    assert name == "zune-jpeg" or name.startswith("libjpeg-turbo "), name


@wheel_only
def test_the_wheel_decodes_with_its_own_libjpeg_turbo(shapes):
    assert stoker.decoder().startswith("libjpeg-turbo "), stoker.decoder()
    # Decode a batch so the library is certainly in use, then see where it came from.
    next(iter(stoker.Loader(shapes, batch_size=4, transform="rrc:24").epoch(0)))
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("SKIPPED: needs Linux /proc to see the loaded libraries")
    jpeg = {line.split()[-1] for line in maps.read_text().splitlines() if "libjpeg" in line}
    libs = (Path(stoker.__file__).parent.parent / "stoker.libs").resolve()
    assert jpeg, "no libjpeg mapped"
    assert all(Path(p).resolve().parent == libs for p in jpeg), (jpeg, libs)
