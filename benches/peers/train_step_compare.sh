#!/usr/bin/env bash
# Training step side by side: stoker's convnet (or resnet) vs the same network in
# PyTorch, on the CPU or one GPU, alternating the two so that both see the same load.
#
#   benches/peers/train_step_compare.sh [ROUNDS]
#
# For each round (default 3) and each size in SIZES (default "64 32"), runs
#   step_bench MODEL BATCH SIZE STEPS --warmup WARMUP --json
#       [--cuda] --precision PRECISION                              (stoker)
#   torch_train.py --model MODEL --device DEVICE --precision PRECISION
#       --batch-size BATCH --size SIZE --steps STEPS --warmup WARMUP
#       --threads THREADS --json                                    (PyTorch)
# one after the other (which one goes first alternates by round), then prints a row
# per run and, per size, the median of each and the ratio stoker ms / PyTorch ms
# (below 1: stoker is faster). Both report the median of per-step times.
#
# Environment:
#   STEP_BENCH  the step_bench binary (default: <repo>/target/release/examples/step_bench;
#               build it with `cargo build --release -p stoker-trainer --example step_bench`)
#   PEERS_VENV  the Python venv with torch (default /root/peers-venv; see README.md)
#   PYTHON      a Python with torch to use instead of the venv's (e.g. python3 on the
#               GPU machine)
#   SIZES (default "64 32"), BATCH (128), STEPS (10), WARMUP (2), THREADS (2: the
#   threads of both, torch's --threads and stoker's RAYON_NUM_THREADS)
#   MODEL       convnet (default) or resnet
#   DEVICE      cpu (default) or cuda (step_bench --cuda: CUDA device 0)
#   PRECISION   f32 (default) or bf16 (autocast; CUDA only, both sides)
#   TF32        if 1 (CUDA, f32), PyTorch runs with --tf32: its default TF32
#               convolutions, against stoker's plain f32
#   RESULTS     folder for the raw JSON lines (default: a temp dir)
#   TORCH_AVX2  if 1, PyTorch runs with ONEDNN_MAX_CPU_ISA=AVX2,
#               ATEN_CPU_CAPABILITY=avx2 and MKL_ENABLE_INSTRUCTIONS=AVX2: its kernels
#               held to AVX2, as a stoker build with `--no-default-features` holds
#               gemm-f32's (no AVX-512 kernels)
#
# The CPU's model and whether it has AVX-512 head the summary: a ratio means little
# without them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

die() {
    echo "train_step_compare.sh: error: $*" >&2
    exit 1
}

rounds="${1:-3}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || {
    sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
bench="${STEP_BENCH:-$repo/target/release/examples/step_bench}"
venv="${PEERS_VENV:-/root/peers-venv}"
py="${PYTHON:-$venv/bin/python}"
sizes="${SIZES:-64 32}"
batch="${BATCH:-128}"
steps="${STEPS:-10}"
warmup="${WARMUP:-2}"
threads="${THREADS:-2}"
model="${MODEL:-convnet}"
device="${DEVICE:-cpu}"
precision="${PRECISION:-f32}"
[[ "$model" == convnet || "$model" == resnet ]] || die "MODEL=$model: expected convnet or resnet"
[[ "$precision" == f32 || "$precision" == bf16 ]] || die "PRECISION=$precision: expected f32 or bf16"
case "$device" in
cpu) cuda_flag=() ;;
cuda) cuda_flag=(--cuda) ;;
*) die "DEVICE=$device: expected cpu or cuda" ;;
esac
[[ "$precision" == f32 || "$device" == cuda ]] || die "PRECISION=bf16 needs DEVICE=cuda"
tf32_flag=()
if [[ "${TF32:-0}" == 1 ]]; then
    [[ "$device" == cuda && "$precision" == f32 ]] || die "TF32=1 needs DEVICE=cuda and PRECISION=f32"
    tf32_flag=(--tf32)
fi
[[ -x "$bench" ]] || die "no step_bench at $bench
  build it: cargo build --release -p stoker-trainer --example step_bench"
command -v "$py" >/dev/null || die "no Python at $py (set PEERS_VENV or PYTHON; see $here/README.md)"
"$py" -c "import torch" 2>/dev/null || die "$py cannot import torch"
results="${RESULTS:-$(mktemp -d)}"
mkdir -p "$results"
log="$results/train_step_compare.jsonl"
: >"$log"

load1() { cut -d' ' -f1 /proc/loadavg; }
run_stoker() {
    RAYON_NUM_THREADS="$threads" "$bench" "$model" "$batch" "$1" "$steps" --warmup "$warmup" --json \
        "${cuda_flag[@]}" --precision "$precision" |
        "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["who"]="stoker"; r["load"]=sys.argv[1]; print(json.dumps(r))' "$(load1)" >>"$log"
}
run_torch() {
    "${torch_env[@]}" "$py" "$here/torch_train.py" --model "$model" --device "$device" \
        --precision "$precision" "${tf32_flag[@]}" --batch-size "$batch" --size "$1" \
        --steps "$steps" --warmup "$warmup" --threads "$threads" --json |
        "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["who"]="torch"; r["size"]='"$1"'; r["load"]=sys.argv[1]; print(json.dumps(r))' "$(load1)" >>"$log"
}

# awk stops at the first match itself: `sed | head` under pipefail can die of
# SIGPIPE on a machine with many CPUs.
cpu_model="$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
if grep -qw avx512f /proc/cpuinfo; then avx512=yes; else avx512=no; fi
torch_env=(env)
torch_isa="its default"
if [[ "${TORCH_AVX2:-0}" == 1 ]]; then
    torch_env=(env ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2)
    torch_isa="held to AVX2"
fi
cpu="${cpu_model:-unknown CPU}, AVX-512: $avx512, torch's kernels: $torch_isa; $model on $device in $precision${tf32_flag:+ (torch with TF32)}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= rounds; r++)); do
    for s in $sizes; do
        if ((r % 2 == 1)); then
            run_stoker "$s"
            run_torch "$s"
        else
            run_torch "$s"
            run_stoker "$s"
        fi
        echo "round $r size $s done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"$py" - "$log" "$cpu" "$bench" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'who':<7} {'size':>4} {'ms/step':>9} {'load':>5}")
for r in rows:
    ms = r["ms_per_step"] if r["who"] == "stoker" else r["step_ms"]
    print(f"{r['who']:<7} {r['size']:>4} {ms:>9.1f} {r['load']:>5}")
print()
print(f"CPU: {sys.argv[2]}; step_bench: {sys.argv[3]}")
print(f"{'size':>4} {'stoker ms':>10} {'torch ms':>9} {'ratio':>6}")
for size in sorted({r["size"] for r in rows}, reverse=True):
    st = statistics.median(r["ms_per_step"] for r in rows if r["who"] == "stoker" and r["size"] == size)
    to = statistics.median(r["step_ms"] for r in rows if r["who"] == "torch" and r["size"] == size)
    print(f"{size:>4} {st:>10.1f} {to:>9.1f} {st / to:>6.2f}")
PY
echo "raw results: $log" >&2
