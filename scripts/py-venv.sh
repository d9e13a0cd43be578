#!/usr/bin/env bash
# The test venv (target/py-venv, or $STOKER_PY_VENV): numpy and pytest for the Python
# package's tests, maturin to build it, moto's S3 server for the remote-data tests
# (cargo's and pytest's), and pyarrow and the `datasets` library (with pillow, which
# its Image feature needs) to write the Parquet test files as real users' tools do.
# Idempotent; prints the venv's absolute path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
venv=${STOKER_PY_VENV:-$target/py-venv}
# Absolute: the build backend runs `maturin` from PATH in another folder.
mkdir -p "$(dirname "$venv")" && venv=$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" >&2; then
    # Debian's python3 keeps venv in a package of its own.
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    rm -rf "$venv" && python3 -m venv "$venv" >&2
  fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check numpy pytest mypy maturin 'moto[server]>=5.1,<6' pyarrow \
  'datasets>=3,<6' pillow >&2
echo "$venv"
