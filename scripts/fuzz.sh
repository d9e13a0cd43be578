#!/usr/bin/env bash
# A fuzzing campaign: MINUTES (default 3) of AFL++ on each harness of benches/fuzz, one
# harness after the other, on the stable toolchain through cargo-afl.
#
#   scripts/fuzz.sh [MINUTES] [HARNESS...]     (harnesses: `cargo run -p stoker-fuzz -- list`)
#
# It installs cargo-afl when missing (its install builds AFL++ from the source it
# vendors: needs a C compiler and make), builds the instrumented driver into
# target/afl, starts each harness from its seed corpus (plus the seeds too large to
# commit) with its dictionary, prints the executions per harness from AFL's
# fuzzer_stats, and copies every crash and hang AFL saved into
# benches/fuzz/regressions/<harness>/ (named by content hash), where the replay test
# (`cargo test -p stoker-fuzz`) picks them up. AFL's output stays in benches/fuzz/out/
# (ignored by git). The harnesses refuse any single allocation over 1 GiB (a crash).
#
# Environment: FUZZ_MEM_MB (the target's memory limit, default 4096), FUZZ_TIMEOUT_MS
# (per input; default: AFL chooses from the seeds), FUZZ_HANG_MS (what counts as a
# hang, default 5000), FUZZ_FEATURES (features of stoker-fuzz to build with, e.g.
# `turbo` to require libjpeg-turbo, which the build uses by default where found).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
minutes=${1:-3}
[ $# -gt 0 ] && shift
case $minutes in
'' | *[!0-9]*)
    echo "fuzz.sh: MINUTES must be a whole number, got '$minutes'" >&2
    exit 2
    ;;
esac

# The afl crate's version in Cargo.lock: cargo-afl must match it.
afl_version=$(awk '/^name = "afl"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if ! cargo afl --version 2>/dev/null | grep -qF "$afl_version"; then
    echo "== installing cargo-afl $afl_version"
    cargo install cargo-afl --version "$afl_version" --locked
fi
# Normally done by the install; says "already built" (an error) when it was.
cargo afl config --build >/dev/null 2>&1 || true

echo "== building the instrumented driver (target/afl)"
CARGO_TARGET_DIR="$repo/target/afl" cargo afl build --release -p stoker-fuzz \
    --features "afl${FUZZ_FEATURES:+,$FUZZ_FEATURES}" --bin stoker-fuzz-afl
driver="$repo/target/afl/release/stoker-fuzz-afl"

if [ $# -gt 0 ]; then
    harnesses=("$@")
else
    mapfile -t harnesses < <(cargo run -q -p stoker-fuzz -- list | awk '{ print $1 }')
fi

out=benches/fuzz/out
mkdir -p "$out"
# Scratch files of the harnesses (and those left by killed targets) go in one folder
# on tmpfs when there is one, removed at the end.
tmp_base=/dev/shm
[ -d "$tmp_base" ] && [ -w "$tmp_base" ] || tmp_base=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$tmp_base/stoker-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The seeds as committed plus those too large to commit (a whole checkpoint).
seeds="$scratch/seeds"
cargo run -q -p stoker-fuzz -- seeds "$seeds" --all >/dev/null

# AFL++'s own dictionaries for formats it knows (cargo-afl keeps its AFL++ source).
afl_dicts=$(find "${XDG_DATA_HOME:-$HOME/.local/share}/afl.rs" -maxdepth 3 -type d \
    -name dictionaries 2>/dev/null | head -n 1)

field() { awk -F' *: *' -v k="$2" '$1 == k { print $2 }' "$1"; }

summary="$out/summary.md"
{
    echo "fuzz.sh $minutes min/harness, features: afl${FUZZ_FEATURES:+,$FUZZ_FEATURES}," \
        "$(date -u +%Y-%m-%d), $(nproc) cores"
    echo
    echo "| harness | executions | execs/s | corpus | edges | crashes | hangs |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
} >"$summary"

for h in "${harnesses[@]}"; do
    corpus=benches/fuzz/corpus/$h
    [ -d "$corpus" ] || {
        echo "fuzz.sh: no corpus folder $corpus (unknown harness '$h'?)" >&2
        exit 2
    }
    in="$scratch/in-$h"
    mkdir -p "$in"
    cp "$corpus"/* "$in"/
    [ -d "$seeds/$h" ] && cp "$seeds/$h"/* "$in"/
    dicts=()
    [ -f "benches/fuzz/dict/$h.dict" ] && dicts+=(-x "benches/fuzz/dict/$h.dict")
    if [ -n "$afl_dicts" ]; then
        case $h in
        decode) dicts+=(-x "$afl_dicts/jpeg.dict" -x "$afl_dicts/png.dict") ;;
        state | checkpoint) dicts+=(-x "$afl_dicts/json.dict") ;;
        esac
    fi
    timeout_opt=()
    [ -n "${FUZZ_TIMEOUT_MS:-}" ] && timeout_opt=(-t "$FUZZ_TIMEOUT_MS")
    rm -rf "${out:?}/$h"
    echo "== $h: $minutes min"
    # No UI (a log instead), any core, and no checks of the machine's CPU governor or
    # core-dump handler (a container cannot change them; crashes are still caught).
    # An input is saved as a hang past FUZZ_HANG_MS (instrumented code is several
    # times slower; AFL's default of 1 s flags honest large images).
    TMPDIR="$scratch" AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 \
        AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_HANG_TMOUT="${FUZZ_HANG_MS:-5000}" \
        cargo afl fuzz -V $((minutes * 60)) -m "${FUZZ_MEM_MB:-4096}" "${timeout_opt[@]}" \
        "${dicts[@]}" -i "$in" -o "$out/$h" -- "$driver" "$h" >"$out/$h.log" 2>&1 || {
        echo "fuzz.sh: afl-fuzz failed on $h; the end of $out/$h.log:" >&2
        tail -n 20 "$out/$h.log" >&2
        exit 1
    }
    stats="$out/$h/default/fuzzer_stats"
    found=0
    for kind in crashes hangs; do
        for f in "$out/$h/default/$kind"/id:*; do
            [ -e "$f" ] || continue
            mkdir -p "benches/fuzz/regressions/$h"
            case $kind in
            crashes) name=crash ;;
            hangs) name=hang ;;
            esac
            cp "$f" "benches/fuzz/regressions/$h/$name-$(sha256sum "$f" | cut -c1-16)"
            found=$((found + 1))
        done
    done
    row=$(printf '| %s | %s | %s | %s | %s | %s | %s |' "$h" \
        "$(field "$stats" execs_done)" "$(field "$stats" execs_per_sec)" \
        "$(field "$stats" corpus_count)" "$(field "$stats" edges_found)" \
        "$(field "$stats" saved_crashes)" "$(field "$stats" saved_hangs)")
    echo "$row" >>"$summary"
    echo "   $row"
    [ $found -gt 0 ] && echo "   $found input(s) copied to benches/fuzz/regressions/$h/"
done

echo
cat "$summary"
echo
echo "Replay what was found: cargo test -p stoker-fuzz --test replay"
