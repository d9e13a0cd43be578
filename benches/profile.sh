#!/usr/bin/env bash
# Where a sample's time goes, by stage: the share inside libjpeg-turbo's entropy
# (Huffman) decode, the IDCT, colour conversion and upsampling, the rest of libjpeg,
# the resize, the augmentation ops, allocation and copies, the kernel.
#
#   benches/profile.sh DATA [SPEC]
#
# DATA: an image folder of JPEGs (benches/peers/make_photos.py /tmp/photos --count
# 1000); SPEC: the transform (default rrc:224,flip). Runs `perf record` on
#   stoker-load bench DATA --transform SPEC --mode sync --epochs E
# (one thread: the consumer decodes, so the profile is one sample after another) and
# prints each stage's share of the samples perf took.
#
# Debian strips libjpeg-turbo, so its internal functions (decode_mcu_fast and the
# like) have no names in the profile. The entropy decoder's are found without them:
# each source file of libjpeg is contiguous in the library, and jdhuff.c (baseline
# Huffman) and jdphuff.c (progressive) export functions (jpeg_fill_bit_buffer,
# jpeg_huff_decode, jinit_huff_decoder, jinit_phuff_decoder), so every address between
# the exported neighbours of those files counts as entropy decode. With the
# libjpeg62-turbo-dbgsym package (Debian's debug archive) perf names them all and the
# name rules alone decide; the two ways should agree.
#
# Environment: STOKER_LOAD (default <repo>/target/release/stoker-load), EPOCHS
# (default 3), PERF_DATA (default a temp file), LIBJPEG (default: the libjpeg.so the
# binary loads).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
die() {
    echo "profile.sh: error: $*" >&2
    exit 1
}
[[ $# -ge 1 && $# -le 2 && $1 != -* ]] || {
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
data="$1"
spec="${2:-rrc:224,flip}"
stoker="${STOKER_LOAD:-$repo/target/release/stoker-load}"
epochs="${EPOCHS:-3}"
[[ -x "$stoker" ]] || die "no stoker-load at $stoker (cargo build --release -p stoker-load)"
command -v perf >/dev/null || die "perf is not installed (Debian: apt-get install linux-perf)"
[[ -e "$data" ]] || die "no such data: $data"
libjpeg="${LIBJPEG:-$(ldd "$stoker" | awk '/libjpeg/ {print $3; exit}')}"
[[ -n "$libjpeg" && -e "$libjpeg" ]] || die "stoker-load does not load libjpeg (a build without libjpeg-turbo?)"
perf_data="${PERF_DATA:-$(mktemp /tmp/stoker-perf.XXXXXX)}"

echo "load before: $(uptime)" >&2
perf record -q -F 2000 -o "$perf_data" -- \
    "$stoker" bench "$data" --transform "$spec" --mode sync --epochs "$epochs" >&2 ||
    die "perf record failed (kernel.perf_event_paranoid is $(cat /proc/sys/kernel/perf_event_paranoid))"
echo "load after: $(uptime)" >&2

perf report -i "$perf_data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
    python3 "$here/profile_stages.py" "$libjpeg"
echo "perf data: $perf_data (perf report -i $perf_data)" >&2
