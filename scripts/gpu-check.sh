#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by scripts/gpu-bundle.sh, on a machine with a
# GPU and CUDA 13 libraries but no Rust: the CUDA parity tests, the training loop through
# the upload stage against the CPU (cuda_train), `stoker-train --device cuda` on a tiny
# set (cuda_cli), a one-rank NCCL all-reduce (cuda_nccl), the loader's upload round-trip test, the
# upload bench (pinned vs pageable GB/s) and `stoker-train --device cuda --compare-readers
# --epochs 2 --json` on the demo set, and Python's device batches (the wheel's
# test_gpu_batches.py, then train_resnet_gpu.py's figures). Prints a summary; the whole run stays under 10
# minutes (each piece has a time limit). Logs go to $LOGDIR (default: a fresh temporary
# folder). On a machine without a usable GPU every piece reports SKIPPED with the reason.
# Exit status: 0 when every piece that exists passed, 1 otherwise (SKIPPED included).
# The tests run with STOKER_REQUIRE_GPU=1, so a test that would skip for want of a GPU
# (or of libnccl) fails instead; a skip noted below counts as a failure too.
set -u
export STOKER_REQUIRE_GPU=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The bundle's own copies of libraries the machine may lack (libjpeg-turbo).
[ -d "$here/lib" ] && export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
logs=${LOGDIR:-$(mktemp -d /tmp/stoker-gpu-check.XXXXXX)}
mkdir -p "$logs"
summary=()
failed=0

note() { summary+=("$(printf '%-22s %-8s %s' "$1" "$2" "$3")"); }

# run NAME LIMIT_S CMD...: runs CMD with a time limit, logging to $logs/NAME.log.
run() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    local dt=$((SECONDS - t0))
    tail -n 5 "$logs/$name.log" | sed 's/^/   /'
    if [ $rc -eq 0 ]; then
        note "$name" PASS "${dt}s"
    elif [ $rc -eq 124 ]; then
        note "$name" TIMEOUT "${dt}s (limit ${limit}s), log $logs/$name.log"
        failed=1
    else
        note "$name" FAIL "exit $rc after ${dt}s, log $logs/$name.log"
        failed=1
    fi
    return $rc
}

missing() { note "$1" MISSING "$2"; echo "== $1: missing ($2)"; }

echo "stoker GPU check; logs in $logs"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    echo "(no nvidia-smi)"
fi
[ -f "$here/MANIFEST" ] && head -2 "$here/MANIFEST"

# 1. CUDA parity tests (every op, every layer, training steps vs the CPU).
if [ -x "$here/tests/cuda_parity" ]; then
    if run cuda_parity 120 "$here/tests/cuda_parity" --test-threads=4 --nocapture; then :; fi
    if grep -q "no usable CUDA device" "$logs/cuda_parity.log"; then
        unset 'summary[${#summary[@]}-1]'
        note cuda_parity SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/cuda_parity.log")"
        failed=1
    fi
    grep -E "^test result|panicked|FAILED" "$logs/cuda_parity.log" | head -20 | sed 's/^/   /'
else
    missing cuda_parity "tests/cuda_parity not in the bundle"
fi

# 1b. The training loop on CUDA through the upload stage (async and sync) vs the CPU.
if [ -x "$here/tests/cuda_train" ]; then
    run cuda_train 45 "$here/tests/cuda_train" --test-threads=1 --nocapture || true
    if grep -q "no usable CUDA device" "$logs/cuda_train.log"; then
        unset 'summary[${#summary[@]}-1]'
        note cuda_train SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/cuda_train.log")"
        failed=1
    fi
    grep -E "^test result|panicked|FAILED|losses" "$logs/cuda_train.log" | head -20 | sed 's/^/   /'
else
    missing cuda_train "tests/cuda_train not in the bundle"
fi

# 1b'. The stoker-train binary with --device cuda on a tiny set (its test runs the
# bundle's binary).
if [ -x "$here/tests/cuda_cli" ]; then
    STOKER_TRAIN_BIN="$here/bin/stoker-train" \
        run cuda_cli 45 "$here/tests/cuda_cli" --test-threads=1 --nocapture || true
    if grep -q "no usable CUDA device" "$logs/cuda_cli.log"; then
        unset 'summary[${#summary[@]}-1]'
        note cuda_cli SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/cuda_cli.log")"
        failed=1
    fi
    grep -E "^test result|panicked|FAILED" "$logs/cuda_cli.log" | head -20 | sed 's/^/   /'
else
    missing cuda_cli "tests/cuda_cli not in the bundle"
fi

# 1c. NCCL on one GPU (a one-rank communicator: the plumbing of the multi-GPU path).
# libnccl from PyTorch's pip dependency nvidia-nccl-cu13 when the system has none.
if [ -x "$here/tests/cuda_nccl" ]; then
    nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
    LD_LIBRARY_PATH="${nccl_lib:+$nccl_lib:}${LD_LIBRARY_PATH:-}" \
        run cuda_nccl 30 "$here/tests/cuda_nccl" --nocapture || true
    if grep -q "SKIPPED\|would be skipped" "$logs/cuda_nccl.log"; then
        unset 'summary[${#summary[@]}-1]'
        note cuda_nccl SKIPPED "$(grep -m1 -o 'SKIPPED.*\|would be skipped.*' "$logs/cuda_nccl.log")"
        failed=1
    fi
    grep -E "^test result|panicked|FAILED|nccl:" "$logs/cuda_nccl.log" | head -5 | sed 's/^/   /'
else
    missing cuda_nccl "tests/cuda_nccl not in the bundle"
fi

# 2. The loader's upload stage: round trip through both slots, async and sync.
if [ -x "$here/tests/loader_upload" ]; then
    run loader_upload 40 "$here/tests/loader_upload" upload --nocapture || true
    if grep -q "SKIPPED\|would be skipped" "$logs/loader_upload.log"; then
        unset 'summary[${#summary[@]}-1]'
        note loader_upload SKIPPED "$(grep -m1 'SKIPPED\|would be skipped' "$logs/loader_upload.log")"
        failed=1
    fi
else
    missing loader_upload "tests/loader_upload not in the bundle"
fi

# 3. Upload bandwidth, pinned vs pageable.
if [ -x "$here/bin/stoker-upload-bench" ]; then
    if run upload_bench 30 "$here/bin/stoker-upload-bench" --json; then
        summary[${#summary[@]} - 1]+=" $(tail -n 1 "$logs/upload_bench.log")"
    elif grep -q "no usable CUDA device" "$logs/upload_bench.log"; then
        unset 'summary[${#summary[@]}-1]'
        note upload_bench SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/upload_bench.log")"
    fi
else
    missing upload_bench "bin/stoker-upload-bench not in the bundle"
fi

# 4. A short training run on the GPU, both readers compared (the demo set: 10000 + 2000
# shapes of 32x32 px, made first).
train="$here/bin/stoker-train"
if [ ! -x "$train" ]; then
    missing train_cuda "bin/stoker-train not in the bundle"
elif ! "$train" --help 2>/dev/null | grep -q -- "--device"; then
    missing train_cuda "this stoker-train has no --device option yet"
else
    work=$(mktemp -d /tmp/stoker-train.XXXXXX)
    # STOKER_CACHE: the demo set goes to a scratch folder, not the user's cache.
    if run train_cuda 60 env STOKER_CACHE="$work" \
        "$train" --device cuda --compare-readers --epochs 2 --json; then
        grep -E '"(device|images_per_sec|data_wait_share|data_wait_covers|same_training|async_saves_share_of_wall_time)"' \
            "$logs/train_cuda.log" | sed 's/^/   /'
    elif grep -q "no usable CUDA device" "$logs/train_cuda.log"; then
        unset 'summary[${#summary[@]}-1]'
        note train_cuda SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/train_cuda.log")"
    fi
fi

# 5. Python's device batches (docs/gpu-batches.md): the bundle's wheel installed into a
# folder of its own (no network, no Rust), then python/tests/test_gpu_batches.py (under
# pytest where the machine has it, else as a script), then the ResNet example in its
# three modes for the figures. Needs torch (and torchvision for the example).
wheel=$(ls "$here"/python/stoker-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
    missing py_gpu_batches "python/stoker-*.whl not in the bundle"
elif ! python3 -c 'import torch' 2>/dev/null; then
    note py_gpu_batches SKIPPED "GPU-only Python tests need torch, which python3 lacks"
    failed=1
else
    pydir=$(mktemp -d /tmp/stoker-py.XXXXXX)
    python3 -m pip install -q --no-deps --no-index --target "$pydir/site" "$wheel" >"$logs/py_install.log" 2>&1 \
        || { tail -n 5 "$logs/py_install.log"; }
    export PYTHONPATH="$pydir/site${PYTHONPATH:+:$PYTHONPATH}"
    # libnvrtc (the conversion kernel's compiler) from PyTorch's pip dependency where
    # the system has none on its library path.
    nvrtc_lib=$(python3 -c 'import nvidia, glob, os; print(next((os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*"))), ""))' 2>/dev/null || true)
    [ -n "$nvrtc_lib" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nvrtc_lib"
    cd "$here/python/tests" || exit 1
    if python3 -c 'import pytest' 2>/dev/null; then
        run py_gpu_batches 120 python3 -m pytest -q -rs -p no:cacheprovider test_gpu_batches.py || true
    else
        run py_gpu_batches 120 python3 test_gpu_batches.py "$pydir/shapes" || true
    fi
    cd - >/dev/null || exit 1
    if grep -q "SKIPPED" "$logs/py_gpu_batches.log"; then
        unset 'summary[${#summary[@]}-1]'
        note py_gpu_batches SKIPPED "$(grep -m1 -o 'SKIPPED.*' "$logs/py_gpu_batches.log" | tr -d '"')"
        failed=1
    fi
    grep -E "passed|failed|SKIPPED|Error|^ok " "$logs/py_gpu_batches.log" | head -10 | sed 's/^/   /'
    # The figures: ResNet-18, batch 256, 224 px, every core but one; stoker, the
    # synthetic upper bound, DataLoader(pin_memory=True). Short runs: the lead's idle
    # machine takes the final ones (benches/RESULTS.md).
    if grep -q "SKIPPED" "$logs/py_gpu_batches.log"; then
        echo "== resnet18_*: not run (no usable GPU, above)"
    elif python3 -c 'import torchvision' 2>/dev/null; then
        for mode in synthetic stoker torch; do
            run "resnet18_$mode" 150 env STOKER_CACHE="$pydir/cache" python3 "$here/python/examples/train_resnet_gpu.py" \
                --arch resnet18 --mode "$mode" --warmup 5 --steps 20 --json || true
            summary[${#summary[@]} - 1]+=" $(tail -n 1 "$logs/resnet18_$mode.log" | cut -c1-200)"
        done
    else
        note resnet_example SKIPPED "torchvision missing"
    fi
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
# A piece skipped for want of a usable GPU counts as a failure here (this is the GPU
# check); the verdict says which kind of failure it was.
skipped=$(printf '%s\n' "${summary[@]}" | grep -c ' SKIPPED ' || true)
broken=$(printf '%s\n' "${summary[@]}" | grep -cE ' (FAIL|TIMEOUT|MISSING) ' || true)
if [ $failed -eq 0 ]; then
    echo "GPU check: all present pieces passed ($skipped skipped)"
else
    echo "GPU check: FAILED ($broken failed, timed out or missing; $skipped skipped)"
fi
exit $failed
