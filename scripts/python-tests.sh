#!/usr/bin/env bash
# The Python package's tests: build and install python/ (the `stoker` module) into the
# test venv (scripts/py-venv.sh: numpy, pytest, maturin and moto), then run pytest on
# python/tests against the stoker-load binary.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
venv=$(bash scripts/py-venv.sh)

# The dev profile, not maturin's default release: dependencies are optimised in it
# anyway (Cargo.toml) and are the ones `cargo test` already built, so this compiles
# little more than the module itself. `pip install ./python` (release) is what users run.
PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps ./python

# The parity tests compare with the CLI's --digest.
cargo build -q --bin stoker-load
STOKER_LOAD="$target/debug/stoker-load" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
