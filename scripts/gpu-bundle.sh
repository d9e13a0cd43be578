#!/usr/bin/env bash
# Builds everything the GPU check needs into .gpu-bundle/ (ignored by git), to carry to
# a GPU machine that has CUDA but no Rust toolchain and no network:
#   bin/    stoker-train, stoker-load, stoker-upload-bench, step_bench (the trainer's
#           example: step times against PyTorch) (release, stripped)
#   tests/  the GPU test executables (cargo test --release --no-run), stripped:
#           cuda_parity, cuda_train, cuda_nccl (trainer, with its nccl feature, which
#           does not link MPI), cuda_cli (stoker-train --device cuda), loader_upload
#           (the loader's lib tests)
#   python/ the wheel (scripts/wheel.sh, release), python/tests/test_gpu_batches.py
#           and python/examples/train_resnet_gpu.py (Python's device batches)
#   peers/  benches/peers/torch_train.py (PyTorch's side of the step times)
#   gpu-check.sh, gpu-check-figures.py (its issue 47 figures), MANIFEST
# and the same folder as .gpu-bundle.tar.xz (ignored too), the form that fits the
# 64 MiB a device call carries: the binaries hold arrow, parquet and object_store.
# Run on the build machine from anywhere in the repository; then, on the GPU machine,
# `tar xJf .gpu-bundle.tar.xz && bash .gpu-bundle/gpu-check.sh`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/.gpu-bundle"
cd "$root"

echo "== building release binaries"
cargo build --release -p stoker-train --bin stoker-train
cargo build --release -p stoker-load --features cuda --bin stoker-load --bin stoker-upload-bench

# Test executables: cargo prints their paths in its JSON messages ("executable"); test
# harnesses live in deps/ (the stoker-train binary cuda_cli runs does not).
test_exes() {
    cargo test --release --no-run --message-format=json "$@" |
        grep -o '"executable":"[^"]*"' | sed 's/"executable":"\(.*\)"/\1/' | grep '/deps/'
}

echo "== building GPU test executables"
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests"
trainer_tests=$(test_exes -p stoker-trainer --features nccl --test cuda_parity --test cuda_train --test cuda_nccl)
# (nccl here too: the same trainer library as above, built once.)
cli_tests=$(test_exes -p stoker-train --features nccl --test cuda_cli)
loader_tests=$(test_exes -p stoker-loader --features cuda --lib)
# (nccl: the trainer library the tests above built, not a third one.)
cargo build --release -p stoker-trainer --features nccl --example step_bench

copy() { # copy SRC DEST: strip symbols to keep the bundle small (backtraces there
    # show addresses only)
    cp "$1" "$2"
    if command -v strip >/dev/null; then strip --strip-all "$2" 2>/dev/null || true; fi
}
for b in stoker-train stoker-load stoker-upload-bench; do
    copy "target/release/$b" "$out/bin/$b"
done
copy target/release/examples/step_bench "$out/bin/step_bench"
mkdir -p "$out/peers"
cp benches/peers/torch_train.py "$out/peers/"
# Named by their test target: deps/cuda_parity-<hash> -> tests/cuda_parity.
for t in $trainer_tests $cli_tests; do copy "$t" "$out/tests/$(basename "$t" | sed 's/-[0-9a-f]*$//')"; done
for t in $loader_tests; do copy "$t" "$out/tests/loader_upload"; done
# Shared libraries the GPU machine's image may lack (libjpeg-turbo, which stoker-augment
# links when it is here): copied into lib/, which gpu-check.sh puts on LD_LIBRARY_PATH.
# CUDA's own libraries are loaded at run time from that machine's install, not carried.
mkdir -p "$out/lib"
for lib in $(ldd "$out/bin/stoker-train" "$out/bin/stoker-load" | grep -o '/[^ ]*lib\(jpeg\|turbojpeg\)[^ ]*' | sort -u); do
    cp -L "$lib" "$out/lib/"
done
# Python's device batches: the wheel users install (no CUDA inside: it loads libcuda
# and libnvrtc at run time), its GPU tests and the ResNet example.
echo "== building the wheel"
wheel=$(bash scripts/wheel.sh --profile "${STOKER_WHEEL_PROFILE:-release}")
mkdir -p "$out/python/tests" "$out/python/examples"
cp "$wheel" "$out/python/"
cp python/tests/test_gpu_batches.py "$out/python/tests/"
cp python/examples/train_resnet_gpu.py "$out/python/examples/"
cp scripts/gpu-check.sh "$out/gpu-check.sh"
cp scripts/gpu-check-figures.py "$out/gpu-check-figures.py"
chmod +x "$out/gpu-check.sh" "$out"/bin/* "$out"/tests/*

{
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "glibc of the build machine: $(ldd --version 2>/dev/null | head -1)"
    (cd "$out" && find . -type f ! -name MANIFEST -exec ls -l {} \; | awk '{print $5, $9}')
} >"$out/MANIFEST"

echo "== compressing"
tar cJf "$root/.gpu-bundle.tar.xz" -C "$root" .gpu-bundle
size=$(stat -c %s "$root/.gpu-bundle.tar.xz")
echo "== bundle: $out ($(du -sm "$out" | cut -f1) MiB), $root/.gpu-bundle.tar.xz $((size / 1024 / 1024)) MiB"
if [ "$size" -ge $((60 * 1024 * 1024)) ]; then
    echo "error: the compressed bundle is over 60 MiB (a device call carries 64 MiB)" >&2
    exit 1
fi
cat "$out/MANIFEST"
