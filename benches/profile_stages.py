#!/usr/bin/env python3
"""Group `perf report --no-children --sort dso,sym --stdio -g none` lines (on stdin)
into the stages of a sample and print each stage's share. Used by profile.sh; the
argument is the libjpeg-turbo library the profiled binary loaded (for the address
ranges of its entropy decoder when the library is stripped).
"""

import re
import subprocess
import sys

# The source files of the entropy decoders, by the functions they export.
ENTROPY_EXPORTS = {
    "jdhuff.c": ["jpeg_make_d_derived_tbl", "jpeg_fill_bit_buffer", "jpeg_huff_decode", "jinit_huff_decoder"],
    "jdphuff.c": ["jinit_phuff_decoder"],
}

# (stage, pattern on the symbol, pattern on the dso or None), first match wins.
RULES = [
    ("entropy decode", r"decode_mcu|jpeg_fill_bit_buffer|jpeg_huff_decode|process_restart", r"libjpeg"),
    ("IDCT", r"idct", r"libjpeg"),
    ("colour + upsampling", r"ycc|rgb|upsample|merged|h2v|h1v|color_convert|gray", r"libjpeg"),
    ("libjpeg, other", r".", r"libjpeg"),
    ("resize", r"fast_image_resize", None),
    ("augmentation ops", r"stoker_augment::transform", None),
    ("decode glue (stoker_augment)", r"stoker_augment", None),
    ("allocation", r"malloc|free|realloc|calloc|_int_|mmap|munmap|brk", None),
    ("copies (memcpy/memmove/memset)", r"memcpy|memmove|memset", None),
    ("kernel", r".", r"kernel"),
]


def exported(lib):
    """Sorted (address, name) of the library's exported functions."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            syms.append((int(parts[0], 16), parts[2].split("@")[0]))
    return sorted(syms)


def entropy_ranges(lib):
    """Address ranges (lo, hi) that hold the entropy decoders: from the export before
    a file's first export to the export after its last (the file's static functions
    lie in between; the ends take in at most one cold function of each neighbour)."""
    syms = exported(lib)
    addrs = [a for a, _ in syms]
    where = {n: i for i, (_, n) in enumerate(syms)}
    ranges = []
    for names in ENTROPY_EXPORTS.values():
        idx = sorted(where[n] for n in names if n in where)
        if not idx:
            continue
        lo = addrs[idx[0] - 1] + 1 if idx[0] > 0 else 0
        hi = addrs[idx[-1] + 1] if idx[-1] + 1 < len(addrs) else 1 << 62
        ranges.append((lo, hi))
    return ranges


def main():
    lib = sys.argv[1]
    ranges = entropy_ranges(lib)
    line_re = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
    shares, unmatched = {}, 0.0
    for line in sys.stdin:
        m = line_re.match(line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(4)
        stage = None
        if "libjpeg" in dso and sym.startswith("0x"):
            addr = int(sym, 16)
            if any(lo <= addr < hi for lo, hi in ranges):
                stage = "entropy decode"
        if stage is None:
            for name, sym_re, dso_re in RULES:
                if (dso_re is None or re.search(dso_re, dso)) and re.search(sym_re, sym):
                    stage = name
                    break
        if stage is None:
            unmatched += pct
            continue
        shares[stage] = shares.get(stage, 0.0) + pct
    shares["other"] = unmatched
    total = sum(shares.values())
    print(f"{'stage':<34} {'share':>7}")
    for name, _, _ in RULES + [("other", None, None)]:
        if name in shares:
            print(f"{name:<34} {shares[name] / total * 100:>6.1f}%")
    print(f"(entropy decode address ranges in {lib}: " + ", ".join(f"{lo:#x}-{hi:#x}" for lo, hi in ranges) + ")")


if __name__ == "__main__":
    main()
