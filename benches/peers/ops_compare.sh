#!/usr/bin/env bash
# Each augmentation op at 224x224 RGB side by side: stoker (the `ops_224` criterion
# group of benches/benches/augment.rs) against PIL (pil_ops.py, what torchvision runs
# on PIL images), in milliseconds per op per image.
#
#   benches/peers/ops_compare.sh
#
# Runs `cargo bench -p stoker-benches --bench augment -- ops_224` (a release build),
# reads criterion's mean for each op from target/criterion/ops_224/<op>/new/, runs
# pil_ops.py --json, and prints one row per op: stoker ms, PIL ms, stoker / PIL (under
# 1 is faster than PIL) and a mark where stoker is slower. Both sides include making
# the output image (`copy` is that alone).
#
# Environment: PEERS_VENV (default /root/peers-venv; needs pillow, and torchvision for
# the policy rows), CRITERION_ARGS (extra criterion flags, e.g. "--quick"),
# SKIP_BENCH=1 (reuse the last criterion results).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() {
    echo "ops_compare.sh: error: $*" >&2
    exit 1
}
[[ $# -eq 0 ]] || {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
py="${PEERS_VENV:-/root/peers-venv}/bin/python"
[[ -x "$py" ]] || die "no Python venv at ${PEERS_VENV:-/root/peers-venv} (see $here/README.md)"
target="$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
    "$py" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
echo "load before: $(uptime)" >&2
if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
    # shellcheck disable=SC2086 # CRITERION_ARGS is a list of flags
    (cd "$repo" && cargo bench -p stoker-benches --bench augment -- ops_224 ${CRITERION_ARGS:-}) >&2 ||
        die "cargo bench failed"
fi
pil="$("$py" "$here/pil_ops.py" --json)" || die "pil_ops.py failed"
echo "load after: $(uptime)" >&2
"$py" - "$target/criterion/ops_224" "$pil" <<'EOF'
import json, os, sys

root, pil = sys.argv[1], json.loads(sys.argv[2])
names = [n for n in sorted(os.listdir(root)) if os.path.isfile(os.path.join(root, n, "new", "estimates.json"))]
# The order of pil_ops.py's table (the same as augment.rs's), then any others.
order = [n for n in pil if n in names] + [n for n in names if n not in pil]
print(f"{'op':<16} {'stoker ms':>10} {'PIL ms':>10} {'stoker/PIL':>11}")
for name in order:
    with open(os.path.join(root, name, "new", "estimates.json")) as f:
        ours = json.load(f)["mean"]["point_estimate"] / 1e6
    theirs = pil.get(name)
    if theirs is None:
        print(f"{name:<16} {ours:>10.4f} {'-':>10} {'-':>11}")
        continue
    ratio = ours / theirs
    mark = "  slower" if ratio > 1 else ""
    print(f"{name:<16} {ours:>10.4f} {theirs:>10.4f} {ratio:>11.2f}{mark}")
EOF
