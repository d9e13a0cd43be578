#!/usr/bin/env bash
# The augmentation-policy pipeline side by side: stoker vs PyTorch DataLoader with
# torchvision v2, at one worker count.
#
#   benches/peers/policy_compare.sh DATA
#
# DATA: an ImageFolder of JPEGs (python benches/peers/make_photos.py /tmp/photos
# --count 1000). Each round runs, in an order that rotates from round to round:
#   stoker-load bench DATA --transform rrc:224,flip,randaugment:n=2:m=9
#       --batch-size 64 --mode async --workers W --epochs E --json
#   torch_loader.py DATA --pipeline randaugment --workers W   (v2 on PIL images)
#   torch_loader.py DATA --pipeline randaugment-tensor --workers W   (v2 on tensors)
# and prints each round and the medians: img/s and stoker / peer.
#
# Environment: STOKER_LOAD (default <repo>/target/release/stoker-load), PEERS_VENV
# (default /root/peers-venv), WORKERS (default 2), EPOCHS (default 2), BATCH_SIZE
# (default 64), ROUNDS (default 3), RESULTS (folder for the raw JSON; default a
# temp dir).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() {
    echo "policy_compare.sh: error: $*" >&2
    exit 1
}
[[ $# -eq 1 && $1 != -* ]] || {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
data="$1"
[[ -d "$data" ]] || die "no such folder: $data"
stoker="${STOKER_LOAD:-$repo/target/release/stoker-load}"
py="${PEERS_VENV:-/root/peers-venv}/bin/python"
w="${WORKERS:-2}"
epochs="${EPOCHS:-2}"
batch="${BATCH_SIZE:-64}"
rounds="${ROUNDS:-3}"
spec="rrc:224,flip,randaugment:n=2:m=9"
[[ -x "$stoker" ]] || die "no stoker-load at $stoker (cargo build --release -p stoker-load)"
[[ -x "$py" ]] || die "no Python venv at ${PEERS_VENV:-/root/peers-venv} (see $here/README.md)"
results="${RESULTS:-$(mktemp -d /tmp/stoker-policy.XXXXXX)}"
mkdir -p "$results"
echo "data $data; workers $w; $epochs timed epoch(s); batch $batch; $rounds round(s); raw JSON in $results" >&2
echo "load before: $(uptime)" >&2

"$stoker" bench "$data" --transform "$spec" --batch-size "$batch" --mode sync --epochs 1 --json >/dev/null ||
    die "stoker-load bench failed"
run() { # $1 = which, $2 = round
    case "$1" in
    stoker) "$stoker" bench "$data" --transform "$spec" --batch-size "$batch" --mode async \
        --workers "$w" --epochs "$epochs" --json >"$results/stoker.r$2.json" ;;
    torch-pil) "$py" "$here/torch_loader.py" "$data" --pipeline randaugment --workers "$w" \
        --epochs "$epochs" --batch-size "$batch" --json >"$results/torch-pil.r$2.json" ;;
    torch-tensor) "$py" "$here/torch_loader.py" "$data" --pipeline randaugment-tensor \
        --workers "$w" --epochs "$epochs" --batch-size "$batch" --json >"$results/torch-tensor.r$2.json" ;;
    esac
}
order=(stoker torch-pil torch-tensor)
for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < 3; k++)); do
        which="${order[$(((r + k) % 3))]}"
        echo "round $r: $which" >&2
        run "$which" "$r" || die "$which failed"
    done
done
echo "load after: $(uptime)" >&2
"$py" - "$results" "$rounds" <<'PY'
import json, statistics, sys
res, rounds = sys.argv[1], int(sys.argv[2])
def ips(name, r):
    with open(f"{res}/{name}.r{r}.json") as f:
        text = f.read().strip()
    # stoker-load prints one indented object; torch_loader.py a JSON line last.
    try:
        return json.loads(text)["images_per_sec"]
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])["images_per_sec"]
rows = {n: [ips(n, r) for r in range(rounds)] for n in ("stoker", "torch-pil", "torch-tensor")}
for r in range(rounds):
    s, p, t = (rows[n][r] for n in ("stoker", "torch-pil", "torch-tensor"))
    print(f"round {r}: stoker {s:.0f} img/s, torch v2 PIL {p:.0f} ({s / p:.2f}x), torch v2 tensor {t:.0f} ({s / t:.2f}x)")
m = {n: statistics.median(v) for n, v in rows.items()}
print(f"median: stoker {m['stoker']:.0f} img/s, torch v2 PIL {m['torch-pil']:.0f} "
      f"({m['stoker'] / m['torch-pil']:.2f}x), torch v2 tensor {m['torch-tensor']:.0f} "
      f"({m['stoker'] / m['torch-tensor']:.2f}x)")
PY
