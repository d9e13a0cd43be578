#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by scripts/gpu-bundle.sh, on a machine with a
# GPU and CUDA 13 libraries but no Rust: the CUDA parity tests, the training loop through
# the upload stage against the CPU (cuda_train), `stoker-train --device cuda` on a tiny
# set (cuda_cli), a one-rank NCCL all-reduce (cuda_nccl), the loader's upload round-trip test, the
# upload bench (pinned vs pageable GB/s) and `stoker-train --device cuda --compare-readers
# --epochs 2 --json` on the demo set, and Python's device batches (the wheel's
# test_gpu_batches.py, then train_resnet_gpu.py's figures), then issue 47's figures
# (step times against PyTorch in f32 and bf16, cuDNN against im2col, the demo's data
# wait, bf16's accuracy; section 6). Prints a summary; the whole run stays under 10
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

# GPU_CHECK_PARTS: the parts to run, comma-separated; unset runs them all. `tests`
# (1 to 2: the test executables), `upload` (3), `train` (4), `python` (5, without its
# ResNet figures), `python-figures` (5's ResNet runs), `issue47` (6). A device session
# is short: e.g. GPU_CHECK_PARTS=tests,python,issue47 first, the rest in a second call.
want() { [ -z "${GPU_CHECK_PARTS:-}" ] || [[ ",$GPU_CHECK_PARTS," == *",$1,"* ]]; }

# libcudnn, libcublas and libnvrtc from PyTorch's pip packages where the system lacks
# them (after the system's own, which win): the test executables need cuDNN too (the
# cuDNN tests ask for it and fail without it).
nv_libs=$(python3 -c 'import nvidia, glob, os; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "lib", "lib*.so*"))})))' 2>/dev/null || true)
[ -n "$nv_libs" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nv_libs"

echo "stoker GPU check; logs in $logs${GPU_CHECK_PARTS:+ (parts: $GPU_CHECK_PARTS)}"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    echo "(no nvidia-smi)"
fi
[ -f "$here/MANIFEST" ] && head -2 "$here/MANIFEST"

# 1. CUDA parity tests (every op, every layer, training steps vs the CPU).
if ! want tests; then :; elif [ -x "$here/tests/cuda_parity" ]; then
    if run cuda_parity 120 "$here/tests/cuda_parity" --test-threads=4 --nocapture; then :; fi
    if grep -q "no usable CUDA device" "$logs/cuda_parity.log"; then
        unset 'summary[${#summary[@]}-1]'
        note cuda_parity SKIPPED "$(grep -m1 -o 'no usable CUDA device.*' "$logs/cuda_parity.log")"
        failed=1
    fi
    grep -E "^test result|panicked|FAILED" "$logs/cuda_parity.log" | head -20 | sed 's/^/   /'
    # Shapes cuDNN did not run as asked (packed instead of strided, or im2col), if any.
    grep -E "^stoker: convolution" "$logs/cuda_parity.log" | sort | uniq -c | head -10 | sed 's/^/   /'
else
    missing cuda_parity "tests/cuda_parity not in the bundle"
fi

# 1b. The training loop on CUDA through the upload stage (async and sync) vs the CPU.
if ! want tests; then :; elif [ -x "$here/tests/cuda_train" ]; then
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
if ! want tests; then :; elif [ -x "$here/tests/cuda_cli" ]; then
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
if ! want tests; then :; elif [ -x "$here/tests/cuda_nccl" ]; then
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
if ! want tests; then :; elif [ -x "$here/tests/loader_upload" ]; then
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
if ! want upload; then :; elif [ -x "$here/bin/stoker-upload-bench" ]; then
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
if ! want train; then :; elif [ ! -x "$train" ]; then
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
if ! want python && ! want python-figures; then :; elif [ -z "$wheel" ]; then
    missing py_gpu_batches "python/stoker-*.whl not in the bundle"
elif ! python3 -c 'import torch' 2>/dev/null; then
    note py_gpu_batches SKIPPED "GPU-only Python tests need torch, which python3 lacks"
    failed=1
else
    pydir=$(mktemp -d /tmp/stoker-py.XXXXXX)
    python3 -m pip install -q --no-deps --no-index --target "$pydir/site" "$wheel" >"$logs/py_install.log" 2>&1 \
        || { tail -n 5 "$logs/py_install.log"; }
    export PYTHONPATH="$pydir/site${PYTHONPATH:+:$PYTHONPATH}"
    # (libnvrtc, the conversion kernel's compiler: on LD_LIBRARY_PATH from the top.)
    if want python; then
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
    fi
    # The figures: ResNet-18, batch 256, 224 px, every core but one; stoker, the
    # synthetic upper bound, DataLoader(pin_memory=True). Short runs: the lead's idle
    # machine takes the final ones (benches/RESULTS.md).
    if ! want python-figures; then
        :
    elif grep -qs "SKIPPED" "$logs/py_gpu_batches.log"; then
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

# 6. Issue 47 (cuDNN convolutions, bf16, the data wait): step times against PyTorch,
# alternating the two (per round: stoker f32, torch f32, stoker bf16, torch bf16), for
# the convnet at 64 px, the im2col convolutions once (STOKER_CONV=im2col), the demo's
# data wait (its defaults on CUDA, then the same data through --data, without the
# decoded cache), the demo's accuracy in f32 and bf16 over 3 seeds, the ResNet at 64 px
# and the convnet at 32 px, in that order. One summary line per group, the figures
# (medians, ratios stoker / torch) printed after the runs. The section starts no run
# once ISSUE47_BUDGET seconds (default 240) are spent, and says what it left out.
i47_budget=${ISSUE47_BUDGET:-240}
i47_rounds=${ISSUE47_ROUNDS:-3}
i47_logs="$logs/issue47"
mkdir -p "$i47_logs"
bench="$here/bin/step_bench"
peer="$here/peers/torch_train.py"
i47_groups="i47_convnet64 i47_im2col i47_data_wait i47_bf16_acc i47_resnet64 i47_convnet32"
i47_start=$SECONDS

# i47 NAME LIMIT CMD...: one run, logged to $i47_logs/NAME.log, counted in its group
# (i47_ok, i47_bad, i47_err: the first failure's message). Not started once the
# section's budget is spent (status 125, counted in i47_cut); its limit is cut to what
# is left of the budget, and a run stopped by that cut is counted in i47_cut too.
i47() {
    local name=$1 limit=$2 left rc cut=0
    shift 2
    left=$((i47_budget - (SECONDS - i47_start)))
    if [ "$left" -lt 10 ]; then
        echo "   $name: not run (the section's ${i47_budget}s are spent)"
        i47_cut=$((i47_cut + 1))
        return 125
    fi
    [ "$limit" -gt "$left" ] && limit=$left cut=1
    timeout "$limit" "$@" >"$i47_logs/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 124 ] && [ $cut = 1 ]; then
        echo "   $name: stopped at the end of the section's ${i47_budget}s"
        i47_cut=$((i47_cut + 1))
    elif [ $rc -eq 0 ]; then
        i47_ok=$((i47_ok + 1))
        echo "   $name: ok"
    else
        i47_bad=$((i47_bad + 1))
        local why
        if [ $rc -eq 124 ]; then
            why="timed out after ${limit}s"
        else
            why="exit $rc: $(grep -m1 -iE 'error|unknown|unrecognized|invalid|panicked' "$i47_logs/$name.log" | cut -c1-160)"
        fi
        echo "   $name: FAILED, $why (log $i47_logs/$name.log)"
        [ -z "$i47_err" ] && i47_err="$name $why"
    fi
    return $rc
}
i47_begin() { i47_ok=0 i47_bad=0 i47_cut=0 i47_err=""; echo "== $1"; }
# i47_end GROUP: the group's summary line from its counts.
i47_end() {
    if [ "$i47_bad" -gt 0 ]; then
        note "$1" FAIL "$i47_ok ok, $i47_bad failed (first: $i47_err)"
        failed=1
    elif [ "$i47_ok" -eq 0 ]; then
        note "$1" "NOT RUN" "the section's ${i47_budget}s were spent (ISSUE47_BUDGET)"
        failed=1
    elif [ "$i47_cut" -gt 0 ]; then
        note "$1" PASS "$i47_ok runs; $i47_cut not run (the section's ${i47_budget}s were spent)"
    else
        note "$1" PASS "$i47_ok runs"
    fi
}
# stoker_step NAME KIND SIZE [FLAGS...] and torch_step NAME MODEL SIZE [FLAGS...]: one
# timed run of each (batch 128, 50 steps after 10).
stoker_step() {
    local name=$1 kind=$2 size=$3
    shift 3
    i47 "$name" 60 "$bench" "$kind" 128 "$size" 50 --warmup 10 --cuda --json "$@"
}
torch_step() {
    local name=$1 model=$2 size=$3
    shift 3
    local m=()
    [ "$model" != convnet ] && m=(--model "$model")
    i47 "$name" 90 python3 "$peer" --device cuda ${m[@]+"${m[@]}"} --batch-size 128 --size "$size" \
        --steps 50 --warmup 10 --json "$@"
}
# step_rounds GROUP KIND SIZE: the alternating rounds of one configuration; PyTorch's
# part only where torch can run it (torch_ok; torch_resnet for the ResNet).
step_rounds() {
    local group=$1 kind=$2 size=$3 r can_torch=$torch_ok
    [ "$kind" = resnet ] && [ "$torch_resnet" != 1 ] && can_torch=0
    i47_begin "$group"
    for r in $(seq 1 "$i47_rounds"); do
        stoker_step "$group.stoker_f32.r$r" "$kind" "$size"
        [ "$can_torch" = 1 ] && torch_step "$group.torch_f32.r$r" "$kind" "$size"
        stoker_step "$group.stoker_bf16.r$r" "$kind" "$size" --precision bf16
        [ "$can_torch" = 1 ] && torch_step "$group.torch_bf16.r$r" "$kind" "$size" --precision bf16
    done
    i47_end "$group"
    if [ "$can_torch" != 1 ]; then
        local why=$torch_why
        [ "$torch_ok" = 1 ] && why="peers/torch_train.py has no --model (the ResNet peer)"
        summary[${#summary[@]} - 1]+="; PyTorch not run: $why"
    fi
}

if ! want issue47; then :; elif ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    for g in $i47_groups; do note "$g" SKIPPED "no GPU (nvidia-smi lists none)"; done
    failed=1
elif [ ! -x "$bench" ] || [ ! -x "$train" ] || [ ! -f "$peer" ]; then
    for g in $i47_groups; do
        missing "$g" "bin/step_bench, bin/stoker-train or peers/torch_train.py not in the bundle"
    done
    failed=1
else
    torch_ok=0 torch_resnet=0 torch_why="python3 cannot import torch"
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        torch_ok=1
        python3 "$peer" --help 2>/dev/null | grep -q -- '--model' && torch_resnet=1
    elif python3 -c 'import torch' 2>/dev/null; then
        torch_why="torch.cuda.is_available() is False"
    fi
    # The demo set and the PTX cache: train_cuda's scratch folder when it made one.
    i47_cache=${work:-$(mktemp -d /tmp/stoker-train.XXXXXX)}

    step_rounds i47_convnet64 convnet 64
    if [ "$torch_ok" = 1 ]; then
        # PyTorch's own default (TF32 convolutions) once, beside its strict f32.
        i47_begin i47_torch_tf32
        torch_step i47_convnet64.torch_tf32 convnet 64 --tf32
        i47_end i47_torch_tf32
    fi

    i47_begin i47_im2col
    i47 i47_im2col.stoker_f32 60 env STOKER_CONV=im2col "$bench" convnet 128 64 50 --warmup 10 --cuda --json
    i47_end i47_im2col

    # The demo as it runs on CUDA by default (6 epochs, the decoded cache on), then its
    # data through --data (the same training, no decoded cache).
    i47_begin i47_data_wait
    i47 i47_data_wait.demo 90 env STOKER_CACHE="$i47_cache" "$train" --device cuda --json
    shapes="$i47_cache/train-shapes-32px"
    if [ -d "$shapes/train" ]; then
        i47 i47_data_wait.no_cache 90 env STOKER_CACHE="$i47_cache" "$train" --device cuda --json \
            --data "$shapes/train" --val "$shapes/val" --transform 'crop:32:pad=4,flip'
    fi
    i47_end i47_data_wait

    i47_begin i47_bf16_acc
    for seed in 0 1 2; do
        i47 "i47_bf16_acc.f32.s$seed" 60 env STOKER_CACHE="$i47_cache" "$train" --device cuda --json --seed "$seed"
        i47 "i47_bf16_acc.bf16.s$seed" 60 env STOKER_CACHE="$i47_cache" "$train" --device cuda --json --seed "$seed" --precision bf16
    done
    i47_end i47_bf16_acc

    step_rounds i47_resnet64 resnet 64
    step_rounds i47_convnet32 convnet 32

    echo "== issue 47: figures (the section took $((SECONDS - i47_start))s)"
    if python3 "$here/gpu-check-figures.py" "$i47_logs" >"$i47_logs/figures.txt" 2>&1; then
        cat "$i47_logs/figures.txt"
        # Each group's key figures on its summary line.
        while IFS=$'\t' read -r g text; do
            for i in "${!summary[@]}"; do
                case "${summary[$i]}" in "$g "*) summary[i]+="; $text" ;; esac
            done
        done <"$i47_logs/figures.tsv"
    else
        echo "   the figures could not be read: $(tail -n 1 "$i47_logs/figures.txt")"
    fi
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
# A piece skipped for want of a usable GPU counts as a failure here (this is the GPU
# check); the verdict says which kind of failure it was.
skipped=$(printf '%s\n' "${summary[@]}" | grep -c ' SKIPPED ' || true)
broken=$(printf '%s\n' "${summary[@]}" | grep -cE ' (FAIL|TIMEOUT|MISSING|NOT RUN) ' || true)
if [ $failed -eq 0 ]; then
    echo "GPU check: all present pieces passed ($skipped skipped)"
else
    echo "GPU check: FAILED ($broken failed, timed out, missing or not run; $skipped skipped)"
fi
exit $failed
