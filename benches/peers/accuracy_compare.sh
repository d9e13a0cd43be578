#!/usr/bin/env bash
# Validation accuracy side by side: stoker-train and the same recipe in PyTorch
# (torch_recipe.py), on the same folders, with the same seeds.
#
#   benches/peers/accuracy_compare.sh TRAIN_DIR VAL_DIR [SEEDS...]
#
# For each seed (default 0 1 2), runs
#   stoker-train --data TRAIN_DIR --val VAL_DIR --transform crop:SIZE:pad=PAD,flip
#       --seed S --epochs EPOCHS --device cpu --json
#   torch_recipe.py --data TRAIN_DIR --val VAL_DIR --pad PAD --seed S --epochs EPOCHS --json
# one after the other (which goes first alternates by seed), then prints each run's
# validation accuracy and final training loss, and per trainer the mean, the sample
# standard deviation and the range over the seeds, and the difference of the means.
# Both use the demo recipe: batch 128, SGD momentum 0.9, lr 0.1 with half an epoch of
# warm-up then cosine, weight decay 5e-4 on conv and linear weights.
#
# Environment:
#   STOKER_TRAIN  the stoker-train binary (default <repo>/target/release/stoker-train;
#                 build it with `cargo build --release -p stoker-train`)
#   PEERS_VENV    the venv with torch and torchvision (default /root/peers-venv)
#   SIZE (default: the images' side, from the first validation image), PAD (4),
#   EPOCHS (6), THREADS (2: torch's threads and stoker's RAYON_NUM_THREADS),
#   TORCH_WORKERS (1: the DataLoader's worker processes),
#   RESULTS (folder for the raw JSON lines; default a temp dir)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

die() {
    echo "accuracy_compare.sh: error: $*" >&2
    exit 1
}

if (($# < 2)); then
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
train="$1"
val="$2"
shift 2
seeds=("$@")
((${#seeds[@]})) || seeds=(0 1 2)
for s in "${seeds[@]}"; do
    [[ "$s" =~ ^[0-9]+$ ]] || die "seed $s is not a number"
done
[[ -d "$train" ]] || die "no folder $train"
[[ -d "$val" ]] || die "no folder $val"
bin="${STOKER_TRAIN:-$repo/target/release/stoker-train}"
venv="${PEERS_VENV:-/root/peers-venv}"
py="$venv/bin/python"
pad="${PAD:-4}"
epochs="${EPOCHS:-6}"
threads="${THREADS:-2}"
workers="${TORCH_WORKERS:-1}"
[[ -x "$bin" ]] || die "no stoker-train at $bin
  build it: cargo build --release -p stoker-train"
[[ -x "$py" ]] || die "no Python at $py (set PEERS_VENV; see $here/README.md)"
"$py" -c "import torch, torchvision" 2>/dev/null || die "$py cannot import torch and torchvision"
size="${SIZE:-$("$py" -c 'import sys; from torchvision import datasets; print(datasets.ImageFolder(sys.argv[1])[0][0].size[1])' "$val")}"
[[ "$size" =~ ^[1-9][0-9]*$ ]] || die "could not tell the image size of $val (set SIZE)"
results="${RESULTS:-$(mktemp -d)}"
mkdir -p "$results"
log="$results/accuracy_compare.jsonl"
: >"$log"

load1() { cut -d' ' -f1 /proc/loadavg; }
tag() {
    "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["who"]=sys.argv[1]; r["seed"]=int(sys.argv[2]); r["load"]=sys.argv[3]; r.pop("per_epoch", None); print(json.dumps(r))' "$@"
}
run_stoker() {
    RAYON_NUM_THREADS="$threads" "$bin" --data "$train" --val "$val" \
        --transform "crop:$size:pad=$pad,flip" --seed "$1" --epochs "$epochs" \
        --device cpu --json 2>"$results/stoker-$1.err" | tag stoker "$1" "$(load1)" >>"$log" ||
        die "stoker-train failed with seed $1: see $results/stoker-$1.err"
}
run_torch() {
    "$py" "$here/torch_recipe.py" --data "$train" --val "$val" --size "$size" --pad "$pad" \
        --seed "$1" --epochs "$epochs" --threads "$threads" --workers "$workers" --json \
        2>"$results/torch-$1.err" | tag torch "$1" "$(load1)" >>"$log" ||
        die "torch_recipe.py failed with seed $1: see $results/torch-$1.err"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
i=0
for s in "${seeds[@]}"; do
    if ((i % 2 == 0)); then
        run_stoker "$s"
        run_torch "$s"
    else
        run_torch "$s"
        run_stoker "$s"
    fi
    i=$((i + 1))
    echo "seed $s done (load $(load1))" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"$py" - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'who':<7} {'seed':>4} {'val acc %':>9} {'train loss':>10} {'load':>5}")
for r in rows:
    print(f"{r['who']:<7} {r['seed']:>4} {100 * r['val_accuracy']:>9.2f} {r['train_loss']:>10.4f} {r['load']:>5}")
print()
means = {}
print(f"{'who':<7} {'mean %':>7} {'sd':>5} {'min':>6} {'max':>6}  (val accuracy over {len(rows) // 2} seeds)")
for who in ("stoker", "torch"):
    acc = [100 * r["val_accuracy"] for r in rows if r["who"] == who]
    means[who] = statistics.mean(acc)
    sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
    print(f"{who:<7} {means[who]:>7.2f} {sd:>5.2f} {min(acc):>6.2f} {max(acc):>6.2f}")
print(f"stoker - torch: {means['stoker'] - means['torch']:+.2f} points")
PY
echo "raw results: $log" >&2
