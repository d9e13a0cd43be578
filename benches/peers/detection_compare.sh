#!/usr/bin/env bash
# Detection loading side by side: stoker (COCO source, boxes carried through the
# transforms) vs torchvision.transforms.v2 + DataLoader, the same COCO file, one run.
#
#   benches/peers/detection_compare.sh DIR
#
# DIR: a scenes set with its COCO file, made by
#   stoker-load gen scenes DIR --count 1000 --width 500 --height 375 --max-shapes 13
#   python benches/peers/scenes_to_coco.py DIR
# (photo-sized JPEGs, 1 to 13 shapes each: 7 boxes on average). For each transform in
# TRANSFORMS (default "rrc:512,flip resize:512x512,flip"), ROUNDS rounds (default 3),
# alternating which loader goes first:
#   stoker-load bench DIR/instances.json --images DIR --fields image,boxes
#       --transform T --workers W --batch-size 64 --epochs E --json   (after a warm-up run)
#   torch_detection.py DIR/instances.json --images DIR --transform T --workers W --epochs E
# and prints each round's images/s and the median ratio stoker / torchvision.
#
# Environment: STOKER_LOAD (default <repo>/target/release/stoker-load), PEERS_VENV
# (default /root/peers-venv), WORKERS (default 2), EPOCHS (default 2), ROUNDS (3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
[[ $# -eq 1 ]] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dir="$1"
ann="$dir/instances.json"
[[ -f "$ann" ]] || { echo "no $ann: run scenes_to_coco.py $dir first" >&2; exit 1; }
stoker="${STOKER_LOAD:-$repo/target/release/stoker-load}"
py="${PEERS_VENV:-/root/peers-venv}/bin/python"
workers="${WORKERS:-2}"; epochs="${EPOCHS:-2}"; rounds="${ROUNDS:-3}"
transforms="${TRANSFORMS:-rrc:512,flip resize:512x512,flip}"
echo "data $dir; workers $workers; $epochs epochs; $rounds rounds; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

stoker_run() {
    "$stoker" bench "$ann" --images "$dir" --fields image,boxes --transform "$1" \
        --workers "$workers" --batch-size 64 --epochs "$epochs" --json |
        "$py" -c 'import json,sys; print(json.load(sys.stdin)["images_per_sec"])'
}
torch_run() {
    "$py" "$here/torch_detection.py" "$ann" --images "$dir" --transform "$1" \
        --workers "$workers" --epochs "$epochs" --json |
        "$py" -c 'import json,sys; print(json.loads(sys.stdin.readline())["images_per_sec"])'
}

for t in $transforms; do
    "$stoker" bench "$ann" --images "$dir" --fields image,boxes --transform "$t" --epochs 1 >/dev/null
    ratios=()
    for r in $(seq 1 "$rounds"); do
        if (( r % 2 )); then s=$(stoker_run "$t"); p=$(torch_run "$t"); else p=$(torch_run "$t"); s=$(stoker_run "$t"); fi
        ratio=$("$py" -c "print(f'{$s / $p:.2f}')")
        ratios+=("$ratio")
        printf '%-20s round %d: stoker %7.0f img/s  torchvision %7.0f img/s  ratio %s\n' "$t" "$r" "$s" "$p" "$ratio"
    done
    med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$t: median ratio stoker / torchvision = $med (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
