#!/usr/bin/env bash
# Weak scaling of data-parallel training on one machine: the same per-rank batch on
# 1 and 2 ranks, and what share of each step the gradient all-reduce takes.
#
#   cargo build --release -p stoker-train --features mpi
#   bash benches/scaling.sh [extra stoker-train args...]    (default: the demo convnet)
#
# Rows: one process with every core (no mpirun); one rank bound to one core (mpirun
# -np 1, the baseline a rank of the 2-rank job has); two ranks, one core each.
# Efficiency = images/s of 2 ranks / (2 x images/s of 1 bound rank).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/stoker-train
[ -x "$bin" ] || { echo "build first: cargo build --release -p stoker-train --features mpi" >&2; exit 1; }
args=(--epochs 2 --json "$@")
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --allow-run-as-root --oversubscribe)

field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d['$1'])"; }
run() {
  local name=$1; shift
  local out
  out=$("$@" "${args[@]}" 2>/dev/null)
  printf '%-34s %7.0f img/s  allreduce %5.1f%%  wait %4.1f%%  val %.2f%%\n' "$name" \
    "$(field images_per_sec_all_ranks <<<"$out")" \
    "$(echo "$out" | python3 -c "import json,sys; print(100*json.load(sys.stdin)['allreduce_share'])")" \
    "$(echo "$out" | python3 -c "import json,sys; print(100*json.load(sys.stdin)['data_wait_share'])")" \
    "$(echo "$out" | python3 -c "import json,sys; print(100*(json.load(sys.stdin)['val_accuracy'] or 0))")"
}
echo "stoker-train ${args[*]}   ($(nproc) cores, $(date -u +%F))"
run "1 process, all cores"          "$bin"
run "1 rank, 1 core (mpirun -np 1)" "${mpi[@]}" -np 1 "$bin"
run "2 ranks, 1 core each"          "${mpi[@]}" -np 2 "$bin"
