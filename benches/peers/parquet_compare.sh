#!/usr/bin/env bash
# Parquet throughput side by side (issue 23's targets), on one photo folder:
#   1. stoker on the photos as one packed file (`stoker-load pack`),
#   2. stoker on the same photos as Parquet shards in the Hub's layout
#      (photos_to_parquet.py: pyarrow, row groups of 1,000, zstd),
#   3. the `datasets` library on those Parquet files, torchvision's transforms in a
#      DataLoader (hf_datasets_loader.py),
#   4. stoker.Loader(stoker.Parquet(...)) on those files through one Python loop
#      (stoker_parquet_loop.py): the Python side the issue's figure is about,
#      skipped with a note when STOKER_PYTHON cannot import stoker,
# each `rrc:224,flip`, batch 64, 2 workers, in alternating rounds; then the medians,
# the ratios, and stoker's peak RSS on Parquet (from `bench --json`).
#
#   benches/peers/parquet_compare.sh /tmp/photos [ROUNDS]
#
# Needs: a release stoker-load (STOKER_LOAD, default target/release/stoker-load), the
# peers venv (PEERS_VENV, default /root/peers-venv: torch, torchvision, datasets,
# pyarrow), and a Python with the release stoker wheel (STOKER_PYTHON, default the
# peers venv's; PYTHONPATH=<folder with the built `stoker`> works too).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
photos=${1:?usage: parquet_compare.sh PHOTOS_DIR [ROUNDS]}
rounds=${2:-3}
stoker=${STOKER_LOAD:-$repo/target/release/stoker-load}
py=${PEERS_VENV:-/root/peers-venv}/bin/python
stoker_py=${STOKER_PYTHON:-$py}
work=${WORK:-$(mktemp -d /tmp/stoker-parquet.XXXXXX)}
[[ -x "$stoker" ]] || { echo "no stoker-load at $stoker" >&2; exit 1; }

pack="$work/photos.pack"
pqdir="$work/parquet"
[[ -f "$pack" ]] || "$stoker" pack "$photos" "$pack" >&2
[[ -d "$pqdir" ]] || "$py" "$here/photos_to_parquet.py" "$photos" "$pqdir" --row-group 1000 >&2
echo "work folder $work; $rounds round(s)" >&2
sides="pack parquet hf"
if "$stoker_py" -c "import stoker" 2>/dev/null; then
    sides="$sides python"
    echo "stoker.Parquet side: $("$stoker_py" -c 'import stoker; print(stoker.__file__)')" >&2
else
    echo "no stoker module for $stoker_py (STOKER_PYTHON): the Python side is skipped" >&2
fi

bench() { "$stoker" bench "$1" --transform rrc:224,flip --batch-size 64 --mode async --workers 2 --epochs 2 --json; }
bench "$pack" >/dev/null # warm-up: page cache
for ((r = 0; r < rounds; r++)); do
    echo "round $r" >&2
    bench "$pack" >"$work/pack.r$r.json"
    bench "$pqdir" >"$work/parquet.r$r.json"
    "$py" "$here/hf_datasets_loader.py" "$pqdir" --workers 2 --epochs 2 --json >"$work/hf.r$r.json"
    if [[ $sides == *python* ]]; then
        "$stoker_py" "$here/stoker_parquet_loop.py" "$pqdir" --workers 2 --epochs 2 --json >"$work/python.r$r.json"
    fi
done

"$py" - "$work" "$rounds" $sides <<'PY'
import json, statistics, sys
work, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rate(name, r):
    with open(f"{work}/{name}.r{r}.json") as f:
        text = f.read().strip()
    try:
        return json.loads(text)  # stoker-load: one pretty-printed object
    except ValueError:
        return json.loads(text.splitlines()[-1])  # the peer: one object per line
rows = {n: [rate(n, r) for r in range(rounds)] for n in sides}
med = {n: statistics.median(d["images_per_sec"] for d in v) for n, v in rows.items()}
for n in rows:
    print(f"{n:8s} images/s per round: " + ", ".join(f"{d['images_per_sec']:.0f}" for d in rows[n]) + f"  median {med[n]:.0f}")
print(f"parquet / pack: {med['parquet'] / med['pack']:.3f}")
print(f"parquet / datasets: {med['parquet'] / med['hf']:.2f}x")
if "python" in med:
    print(f"stoker.Parquet (Python) / datasets: {med['python'] / med['hf']:.2f}x")
    print(f"stoker.Parquet (Python) / stoker-load on parquet: {med['python'] / med['parquet']:.3f}")
rss = [d.get("max_rss_bytes") or d.get("peak_rss_bytes") for d in rows["parquet"]]
if any(rss):
    print("stoker on parquet, peak RSS MB per round: " + ", ".join(f"{(x or 0) / 1e6:.0f}" for x in rss))
PY
