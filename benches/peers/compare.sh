#!/usr/bin/env bash
# Loader throughput side by side: stoker vs PyTorch DataLoader vs tf.data vs DALI's CPU
# pipeline, one run.
#
#   benches/peers/compare.sh DATA
#
# DATA: an ImageFolder of JPEGs (make one: python benches/peers/make_photos.py
# /tmp/photos --count 1000). Pipeline everywhere: RandomResizedCrop(224) + horizontal
# flip, batch 64, shuffled, u8 output. For each worker count W (default 0 1 2):
#   stoker-load bench DATA --transform rrc:224,flip --batch-size 64 --epochs 2 --json
#       with --mode sync for W=0 and --mode async --workers W otherwise
#   torch_loader.py (DataLoader, num_workers=W)
#   dali_loader.py (DALI's CPU pipeline, device_id=None, num_threads max(W, 1))
# then stoker once more with --workers auto, and tf.data once (AUTOTUNE on all cores;
# antialias on and off). Each peer does its own warm-up (stoker: one untimed sync run
# first; the Python scripts: one untimed epoch each). All of that is one round; ROUNDS
# rounds run one after another, each starting with a different loader (the order
# rotates), so that a spell of load from elsewhere on a shared machine does not always
# fall on the same loader. Then prints the median of the rounds: workers | stoker img/s
# | torch img/s | ratio | tf.data img/s | ratio | DALI img/s | ratio, where ratio =
# stoker / peer (above 1: stoker is faster), the auto row, and each round's ratios.
#
# Environment:
#   STOKER_LOAD  the stoker-load binary (default: <repo>/target/release/stoker-load)
#   PEERS_VENV   the Python venv with torch, torchvision, tensorflow-cpu and (optional)
#                nvidia-dali-cuda130 (default: /root/peers-venv; see benches/peers/README.md)
#   WORKERS      worker counts (default "0 1 2");  EPOCHS  timed epochs (default 2)
#   BATCH_SIZE   (default 64);  RESULTS  folder for the raw JSON (default: a temp dir)
#   ROUNDS       rounds (default 3)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

die() {
    echo "compare.sh: error: $*" >&2
    exit 1
}

[[ $# -eq 1 && $1 != -* ]] || {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
data="$1"
[[ -d "$data" ]] || die "no such folder: $data
  make one with: ${PEERS_VENV:-/root/peers-venv}/bin/python $here/make_photos.py $data --count 1000"

stoker="${STOKER_LOAD:-$repo/target/release/stoker-load}"
venv="${PEERS_VENV:-/root/peers-venv}"
workers="${WORKERS:-0 1 2}"
epochs="${EPOCHS:-2}"
batch="${BATCH_SIZE:-64}"
rounds="${ROUNDS:-3}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive whole number, not '$rounds'"

[[ -x "$stoker" ]] || die "stoker-load binary not found at $stoker
  build it with:  (cd $repo && cargo build --release -p stoker-load --bin stoker-load)
  or point STOKER_LOAD at an existing binary."

py="$venv/bin/python"
[[ -x "$py" ]] || die "Python venv not found at $venv (no $py)
  create it with:
    python3 -m venv $venv
    $venv/bin/pip install torch torchvision pillow scikit-learn numpy tensorflow-cpu
  or point PEERS_VENV at an existing one (see $here/README.md)."
TF_CPP_MIN_LOG_LEVEL=2 "$py" -c 'import torch, torchvision, tensorflow, PIL' 2>/dev/null ||
    die "the venv at $venv lacks a package (torch, torchvision, tensorflow-cpu, pillow)
  install them with:  $venv/bin/pip install torch torchvision pillow scikit-learn numpy tensorflow-cpu"

results="${RESULTS:-$(mktemp -d /tmp/stoker-peers.XXXXXX)}"
mkdir -p "$results"
echo "data $data; stoker $stoker; venv $venv; workers [$workers]; $epochs timed epoch(s); batch $batch; $rounds round(s)" >&2
echo "raw JSON in $results" >&2

stoker_bench() { # $1 = workers, then extra args
    local w="$1"
    shift
    local mode=(--mode async --workers "$w")
    [[ "$w" == 0 ]] && mode=(--mode sync)
    "$stoker" bench "$data" --transform rrc:224,flip --batch-size "$batch" "${mode[@]}" --json "$@"
}

echo "stoker: warm-up run (sync, 1 epoch, not counted)" >&2
stoker_bench 0 --epochs 1 >/dev/null || die "stoker-load bench failed on $data (see above)"

have_dali=0
if "$py" -c 'import nvidia.dali' 2>/dev/null; then
    have_dali=1
else
    echo "DALI: nvidia.dali is not installed in $venv; its column stays empty" >&2
fi

# One loader's runs of round $r; raw JSON goes to "$results/<name>.r$r.json[l]".
run_stoker() {
    for w in $workers; do
        echo "round $r: stoker: workers $w" >&2
        stoker_bench "$w" --epochs "$epochs" >"$results/stoker_w$w.r$r.json" ||
            die "stoker-load bench failed (workers $w)"
    done
}
run_auto() {
    echo "round $r: stoker: workers auto" >&2
    "$stoker" bench "$data" --transform rrc:224,flip --batch-size "$batch" --mode async --workers auto \
        --epochs "$epochs" --json >"$results/stoker_auto.r$r.json" || die "stoker-load bench failed (workers auto)"
}
run_torch() {
    echo "round $r: torch: workers $workers" >&2
    # shellcheck disable=SC2086 # word splitting of $workers is intended
    "$py" "$here/torch_loader.py" "$data" --workers $workers --epochs "$epochs" \
        --batch-size "$batch" --json >"$results/torch.r$r.jsonl" || die "torch_loader.py failed"
}
run_tf() {
    echo "round $r: tf.data: AUTOTUNE, antialias off and on" >&2
    TF_CPP_MIN_LOG_LEVEL=2 "$py" "$here/tfdata_loader.py" "$data" --epochs "$epochs" \
        --batch-size "$batch" --antialias both --json >"$results/tfdata.r$r.jsonl" 2>"$results/tfdata.stderr" ||
        { cat "$results/tfdata.stderr" >&2; die "tfdata_loader.py failed"; }
}
run_dali() {
    if [[ $have_dali == 0 ]]; then
        : >"$results/dali.r$r.jsonl"
        return
    fi
    local dali_threads=()
    for w in $workers; do dali_threads+=("$((w > 0 ? w : 1))"); done
    echo "round $r: DALI CPU pipeline: threads ${dali_threads[*]}" >&2
    "$py" "$here/dali_loader.py" "$data" --threads "${dali_threads[@]}" --epochs "$epochs" \
        --batch-size "$batch" --json >"$results/dali.r$r.jsonl" 2>"$results/dali.stderr" ||
        { cat "$results/dali.stderr" >&2; die "dali_loader.py failed"; }
}

loaders=(run_stoker run_auto run_torch run_tf run_dali)
for ((r = 0; r < rounds; r++)); do
    n=${#loaders[@]}
    for ((k = 0; k < n; k++)); do
        "${loaders[$(((k + r) % n))]}"
    done
done

"$py" - "$results" "$rounds" $workers <<'EOF'
import json, os, statistics, sys

results, rounds, workers = sys.argv[1], int(sys.argv[2]), [int(w) for w in sys.argv[3:]]

def lines(name):
    with open(os.path.join(results, name)) as f:
        return [json.loads(l) for l in f if l.strip()]

def one(name):
    with open(os.path.join(results, name)) as f:
        return json.load(f)

# Per round: {key: images/s}; then the median over rounds of each key.
def per_round(read):
    return [read(r) for r in range(rounds)]

def median(runs):
    keys = set().union(*runs)
    return {k: statistics.median(run[k] for run in runs if k in run) for k in keys}

stoker_r = per_round(lambda r: {w: one(f"stoker_w{w}.r{r}.json")["images_per_sec"] for w in workers})
torch_r = per_round(lambda r: {x["workers"]: x["images_per_sec"] for x in lines(f"torch.r{r}.jsonl")})
tf_r = per_round(lambda r: {x["antialias"]: x["images_per_sec"] for x in lines(f"tfdata.r{r}.jsonl")})
dali_r = per_round(lambda r: {x["threads"]: x["images_per_sec"] for x in lines(f"dali.r{r}.jsonl")})
auto_r = [one(f"stoker_auto.r{r}.json") for r in range(rounds)]
stoker, torch, tf, dali = median(stoker_r), median(torch_r), median(tf_r), median(dali_r)
auto = auto_r[0] | {"images_per_sec": statistics.median(a["images_per_sec"] for a in auto_r)}
cores = os.cpu_count()
tf_main = tf.get(False, tf.get(True))  # TF's default, antialias=False: the harder baseline

def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"

head = ["workers", "stoker img/s", "torch img/s", "ratio", f"tf.data img/s ({cores} cores)", "ratio",
        "DALI img/s (threads)", "ratio"]
rows = [
    [str(w), f"{stoker[w]:.1f}", f"{torch.get(w, 0):.1f}", ratio(stoker[w], torch.get(w)),
     f"{tf_main:.1f}", ratio(stoker[w], tf_main),
     f"{dali.get(max(w, 1), 0):.1f} ({max(w, 1)})", ratio(stoker[w], dali.get(max(w, 1)))]
    for w in workers
]
widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
print(" | ".join(h.rjust(n) for h, n in zip(head, widths)))
print("-+-".join("-" * n for n in widths))
for r in rows:
    print(" | ".join(c.rjust(n) for c, n in zip(r, widths)))
print()
best = max(stoker.values())
chosen = auto.get("auto", {})
print(f"stoker --workers auto: {auto['images_per_sec']:.1f} img/s ({auto['images_per_sec'] / best:.2f} of the best "
      f"fixed setting above, {best:.1f}); chose {json.dumps(chosen)}")
print()
print(f"Medians of {rounds} round(s). ratio = stoker / peer (above 1: stoker is faster).")
if rounds > 1:
    w = max(workers)
    def each(peer_r, key):
        return " ".join(ratio(s[w], p.get(key)) for s, p in zip(stoker_r, peer_r))
    tf_key = False if False in tf else True
    print(f"Each round at {w} worker(s): stoker " + " ".join(f"{s[w]:.0f}" for s in stoker_r)
          + f" img/s; vs torch {each(torch_r, w)}; vs tf.data {each(tf_r, tf_key)}; vs DALI {each(dali_r, max(w, 1))}; auto / best fixed "
          + " ".join(f"{a['images_per_sec'] / max(s.values()):.2f}" for a, s in zip(auto_r, stoker_r)) + ".")
print("tf.data: fused decode-and-crop, AUTOTUNE over all cores whatever the row; the column is")
print("  tf.image.resize's default antialias=False (cheaper than our antialiased resize).")
if True in tf:
    print(f"  With antialias=True (what PIL and stoker compute): {tf[True]:.1f} img/s; stoker / that: "
          + ", ".join(f"W={w} {ratio(stoker[w], tf[True])}" for w in workers) + ".")
EOF
