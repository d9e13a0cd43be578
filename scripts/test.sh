#!/usr/bin/env bash
# The test suite, as the README gives it: the test venv first (scripts/py-venv.sh:
# numpy, pytest, maturin and moto's S3 server), then every crate's tests with the S3
# tests required to run against moto, then the Python package's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash scripts/py-venv.sh)
echo "== [$SECONDS s] cargo test --workspace"
STOKER_MOTO_SERVER="$venv/bin/moto_server" STOKER_REQUIRE_S3=1 cargo test --workspace
echo "== [$SECONDS s] the Python package"
STOKER_REQUIRE_S3=1 bash scripts/python-tests.sh
