#!/usr/bin/env bash
# The Python package's tests, against the wheel users install: scripts/wheel.sh builds
# it (the dev profile: the same wheel, manylinux_2_28 with libjpeg-turbo inside, built
# faster), a fresh venv gets it with the test tools (scripts/py-venv.sh: numpy,
# pytest, moto, pyarrow, datasets, mypy) but no maturin build, and pytest runs on
# python/tests with no cargo on PATH, against the stoker-load binary for the parity
# tests.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
wheel=$(bash scripts/wheel.sh --profile "${STOKER_WHEEL_PROFILE:-dev}")

venv=$target/wheel-venv
rm -rf "$venv"
venv=$(STOKER_PY_VENV=$venv bash scripts/py-venv.sh)
start=$EPOCHREALTIME
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel"
echo "== installed $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in" \
  "$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }") s"

# The parity tests compare with the CLI's --digest.
cargo build -q --bin stoker-load
load=$(cd "$target/debug" && pwd)/stoker-load

# PATH without cargo (nor rustc): the install must not need a toolchain.
clean=$(echo "$PATH" | tr ':' '\n' | while read -r d; do [ -x "$d/cargo" ] || [ -x "$d/rustc" ] || echo "$d"; done | paste -sd:)
env PATH="$venv/bin:$clean" sh -c '! command -v cargo >/dev/null' || { echo "cargo still on PATH" >&2; exit 1; }
cd python/tests
env PATH="$venv/bin:$clean" STOKER_WHEEL=1 "$venv/bin/python" -c \
  "import stoker; print('== import stoker:', stoker.__version__, stoker.decoder(), 'from', stoker.__file__)"
env PATH="$venv/bin:$clean" STOKER_WHEEL=1 STOKER_LOAD="$load" "$venv/bin/python" -m pytest -q -p no:cacheprovider .
