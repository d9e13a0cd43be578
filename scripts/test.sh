#!/usr/bin/env bash
# The test suite, as the README gives it: every crate's tests, then the Python
# package's (built into a venv with numpy and pytest only; see python-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
bash scripts/python-tests.sh
