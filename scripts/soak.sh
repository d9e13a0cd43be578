#!/usr/bin/env bash
# Soak: memory over 50 epochs of a folder of photos that holds a few very large images
# (a benchmark, not a test; results go in benches/RESULTS.md). Prints the resident
# memory after each epoch: its peak must stop growing after the first epoch.
#
#   scripts/soak.sh [DIR] [EPOCHS]
#
# DIR (default /tmp/stoker-soak) is made if missing: 1,000 shapes of 256 px from
# `stoker-load gen`, plus 4 JPEGs of 24 to 48 megapixels (6000x4000 to 8000x6000).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/stoker-soak}
epochs=${2:-50}
cargo build --release -q -p stoker-load -p stoker-loader --example soak
if [ ! -d "$dir" ]; then
  target/release/stoker-load gen shapes "$dir" --count 1000 --size 256 --classes 4 --seed 1
  # The large images, written as PNGs by Python's standard library alone.
  python3 - "$dir" <<'PY'
import sys, zlib, struct, os
# A large PNG (no third-party packages): a smooth gradient with noise, compressed.
def png(path, w, h, seed):
    raw = bytearray()
    x = seed
    for y in range(h):
        raw.append(0)
        row = bytearray(3 * w)
        for i in range(0, 3 * w, 3):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            v = (i // 3 * 255 // w + (x >> 27)) & 255
            row[i] = v; row[i + 1] = (y * 255 // h) & 255; row[i + 2] = (v ^ y) & 255
        raw += row
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(bytes(raw), 1)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)
d = sys.argv[1]
cls = sorted(c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c)))[0]
for i, (w, h) in enumerate([(6000, 4000), (8000, 6000), (4000, 6000), (7000, 5000)]):
    png(os.path.join(d, cls, f"large_{i}.png"), w, h, i)
PY
fi
echo "== soak: $dir, $epochs epochs, rrc:224,flip, async, 2 workers, batch 64 ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
target/release/examples/soak "$dir" "$epochs" "rrc:224,flip" async
