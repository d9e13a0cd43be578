#!/usr/bin/env bash
# The Python package's tests: build and install python/ (the `stoker` module) into a
# virtual environment that holds numpy and pytest only (and maturin, the build
# backend), then run pytest on python/tests against the stoker-load binary.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
venv=${STOKER_PY_VENV:-$target/py-venv}
# Absolute: the build backend runs `maturin` from PATH in another folder.
mkdir -p "$(dirname "$venv")" && venv=$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv"; then
    # Debian's python3 keeps venv in a package of its own.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    rm -rf "$venv" && python3 -m venv "$venv"
  fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check numpy pytest maturin

# The dev profile, not maturin's default release: dependencies are optimised in it
# anyway (Cargo.toml) and are the ones `cargo test` already built, so this compiles
# little more than the module itself. `pip install ./python` (release) is what users run.
PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps ./python

# The parity tests compare with the CLI's --digest.
cargo build -q --bin stoker-load
STOKER_LOAD="$target/debug/stoker-load" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
