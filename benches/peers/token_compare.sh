#!/usr/bin/env bash
# Tokens/s side by side over the same Parquet texts, with 2 threads each: stoker's
# token loader (`stoker-load bench --tokens`), the `tokenizers` library's
# encode_batch, and `datasets.map(batched, num_proc=2)` followed by packing.
#
#   benches/peers/token_compare.sh [DATA.parquet TOKENIZER.json]
#
# Without arguments it makes a set first (token_peers.py make: 100,000 documents of
# made-up words, about 250 each, and a byte-level BPE of 8192 ids trained on them)
# in $WORK (default a temp dir). Each tool runs REPEAT times (default 3), in turn;
# every run prints one line: tool, tokens, seconds, tokens/s. Targets: stoker >= 0.9x
# encode_batch and >= 1.4x datasets.map (medians).
#
# Environment:
#   STOKER_LOAD  the stoker-load binary (default <repo>/target/release/stoker-load;
#                `cargo build --release -p stoker-load`)
#   PEERS_VENV   a venv with tokenizers, datasets, pyarrow and numpy (default
#                /root/peers-venv; `pip install tokenizers datasets pyarrow numpy`)
#   THREADS (2), SEQ_LEN (1024), BATCH (8), REPEAT (3), WORK
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
load=${STOKER_LOAD:-$repo/target/release/stoker-load}
venv=${PEERS_VENV:-/root/peers-venv}
py=$venv/bin/python
threads=${THREADS:-2}
seq_len=${SEQ_LEN:-1024}
batch=${BATCH:-8}
repeat=${REPEAT:-3}
export THREADS=$threads
export HF_DATASETS_DISABLE_PROGRESS_BARS=1

die() {
    echo "token_compare.sh: error: $*" >&2
    exit 1
}
[ -x "$load" ] || die "no stoker-load at $load (cargo build --release -p stoker-load)"
[ -x "$py" ] || die "no python in $venv (PEERS_VENV)"

if (($# >= 2)); then
    data=$1
    tok=$2
else
    work=${WORK:-$(mktemp -d)}
    [ -f "$work/texts.parquet" ] || "$py" "$here/token_peers.py" make "$work" >&2
    data=$work/texts.parquet
    tok=$work/tokenizer.json
fi

declare -A rates
for r in $(seq "$repeat"); do
    # stoker: reading, tokenizing on $threads workers (one more thread reads), packing.
    out=$("$load" bench "$data" --tokens "$tok" --seq-len "$seq_len" \
        --batch-size "$batch" --workers "$threads" --no-shuffle --json)
    line=$(echo "$out" | "$py" -c 'import json,sys; r=json.load(sys.stdin); print("stoker", r["tokens"], "%.3f" % r["seconds"], "%.0f" % r["tokens_per_s"])')
    echo "$line"
    rates[stoker]+="$(echo "$line" | cut -d' ' -f4) "
    for peer in encode_batch datasets_map; do
        line=$("$py" "$here/token_peers.py" "$peer" "$data" "$tok" | "$py" -c 'import json,sys; r=json.load(sys.stdin); print(r["peer"], r["tokens"], "%.3f" % r["seconds"], "%.0f" % r["tokens_per_s"])')
        echo "$line"
        rates[$peer]+="$(echo "$line" | cut -d' ' -f4) "
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
s=$(echo "${rates[stoker]}" | median)
e=$(echo "${rates[encode_batch]}" | median)
d=$(echo "${rates[datasets_map]}" | median)
echo "median tokens/s: stoker $s, encode_batch $e, datasets.map $d"
awk -v s="$s" -v e="$e" -v d="$d" 'BEGIN {
    printf "stoker / encode_batch = %.2fx (target >= 0.9x)\n", s / e
    printf "stoker / datasets.map = %.2fx (target >= 1.4x)\n", s / d }'
