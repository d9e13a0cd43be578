#!/usr/bin/env python3
"""The figures of the GPU check's issue 47 section, from its logs.

    python3 gpu-check-figures.py LOGDIR

LOGDIR holds one log per run, named GROUP.RUN.log by scripts/gpu-check.sh:
step_bench's and torch_train.py's one-line JSON (`ms_per_step`, `step_ms`) and
stoker-train's pretty JSON (`data_wait_share`, `val_accuracy`), after whatever the run
printed on stderr. Prints the medians, the ratios stoker / torch against issue 47's
targets, the convolution engine, the demo's data wait and bf16's accuracy, and writes
LOGDIR/figures.tsv: one `GROUP<TAB>text` line per group for the check's summary.
Runs that are missing or failed are left out of the medians and counted.
"""

import json
import os
import re
import statistics
import sys

ROUND = re.compile(r"\.r\d+$")


def last_json(path):
    """The last JSON object of a log (one line or pretty-printed), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    dec = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^\{", text)]
    for at in reversed(starts):
        try:
            obj, _ = dec.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def conv_engine(path):
    """What the convolutions ran on, as the run said it: a `conv_engine` JSON key or a
    line naming the conv engine."""
    obj = last_json(path) or {}
    for key, value in obj.items():
        if re.search(r"conv.*engine", key, re.I) and value:
            # Shapes that ran on im2col under the cuDNN engine (step_bench's list).
            fell = obj.get("cudnn_fallbacks") or []
            return str(value) + (f" ({len(fell)} shapes on im2col)" if fell else "")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if not ln.startswith("{")]
    except OSError:
        return None
    # A line naming the engine, else one naming cuDNN or im2col.
    for pattern in (r"conv(olution)?s?[ _-]?engine", r"cudnn|im2col"):
        for line in lines:
            if re.search(pattern, line, re.I):
                return line[:120]
    return None


class Logs:
    def __init__(self, root):
        self.root = root
        self.names = sorted(n[:-4] for n in os.listdir(root) if n.endswith(".log"))

    def path(self, name):
        return os.path.join(self.root, name + ".log")

    def runs(self, prefix):
        """The logs of one configuration: `prefix` itself or its rounds `prefix.rN`."""
        return [n for n in self.names if n == prefix or (n.startswith(prefix + ".r") and ROUND.search(n))]

    def values(self, prefix, key):
        """(values of `key` in the runs' JSON, runs without it)."""
        got, bad = [], 0
        for n in self.runs(prefix):
            obj = last_json(self.path(n))
            v = obj.get(key) if obj else None
            if isinstance(v, (int, float)):
                got.append(float(v))
            else:
                bad += 1
        return got, bad


def fmt_ms(vals):
    return ", ".join(f"{v:.3f}" for v in vals)


def med(vals):
    return statistics.median(vals) if vals else None


def verdict(ok):
    return "meets" if ok else "MISSES"


def steps(logs, out, tsv):
    for group, label, f32_target, bf16_target in [
        ("i47_convnet64", "convnet 64 px", 1.0, 1.0),
        ("i47_convnet32", "convnet 32 px", 0.5, None),
        ("i47_resnet64", "resnet 64 px", 1.0, 1.0),
    ]:
        short = []
        meds = {}
        for prec in ("f32", "bf16"):
            s, s_bad = logs.values(f"{group}.stoker_{prec}", "ms_per_step")
            t, t_bad = logs.values(f"{group}.torch_{prec}", "step_ms")
            if not s and not t and not s_bad and not t_bad:
                continue
            meds[prec] = med(s)
            line = f"  {label} {prec}: stoker {fmt_ms(s) or '-'}"
            line += f" (median {med(s):.3f} ms)" if s else ""
            line += f"; torch {fmt_ms(t) or '-'}" + (f" (median {med(t):.3f} ms)" if t else "")
            if s_bad or t_bad:
                line += f"; runs without a figure: stoker {s_bad}, torch {t_bad}"
            target = f32_target if prec == "f32" else bf16_target
            if s and t:
                r = med(s) / med(t)
                line += f"; stoker / torch {r:.2f}"
                if target is not None:
                    line += f" (target <= {target}: {verdict(r <= target)})"
                short.append(f"{prec} {r:.2f}x torch")
            out.append(line)
            if prec == "bf16":
                precs = {str((last_json(logs.path(n)) or {}).get("precision")) for n in logs.runs(f"{group}.stoker_bf16")}
                # A run that names another precision ignored the flag; one that names
                # none predates the key.
                if precs - {"bf16", "None"}:
                    out.append(f"    (the stoker bf16 runs report precision {sorted(precs)}: check that --precision bf16 took)")
        if meds.get("f32") and meds.get("bf16"):
            r = meds["bf16"] / meds["f32"]
            out.append(f"  {label}: stoker bf16 / stoker f32 {r:.2f} (target < 1: {verdict(r < 1)})")
            short.append(f"bf16/f32 {r:.2f}")
        for n in logs.runs(f"{group}.stoker_f32")[:1]:
            eng = conv_engine(logs.path(n))
            out.append(f"  {label} conv engine: {eng or '(not printed by this build)'}")
        if short:
            tsv.append((group, ", ".join(short)))
    tf, _ = logs.values("i47_convnet64.torch_tf32", "step_ms")
    s, _ = logs.values("i47_convnet64.stoker_f32", "ms_per_step")
    t, _ = logs.values("i47_convnet64.torch_f32", "step_ms")
    if tf:
        line = f"  convnet 64 px, torch with --tf32 (its default): {fmt_ms(tf)} ms"
        if t:
            line += f" (strict f32: {med(t):.3f})"
        if s:
            line += f"; stoker f32 / torch tf32 {med(s) / tf[0]:.2f}"
            tsv.append(("i47_torch_tf32", f"stoker f32 {med(s) / tf[0]:.2f}x torch tf32"))
        out.append(line)
    im, _ = logs.values("i47_im2col.stoker_f32", "ms_per_step")
    if im:
        line = f"  convnet 64 px f32 with STOKER_CONV=im2col: {fmt_ms(im)} ms"
        eng = conv_engine(logs.path("i47_im2col.stoker_f32"))
        line += f" [{eng or 'engine not printed'}]"
        if s:
            line += f"; default engine's median {med(s):.3f} ms, im2col / default {im[0] / med(s):.2f}"
            tsv.append(("i47_im2col", f"im2col / default {im[0] / med(s):.2f}"))
        out.append(line)


def data_wait(logs, out, tsv):
    short = []
    for name, label in [("i47_data_wait.demo", "demo on CUDA (its defaults)"),
                        ("i47_data_wait.no_cache", "the same data via --data (no decoded cache)")]:
        if name not in logs.names:
            continue
        obj = last_json(logs.path(name))
        if not obj or "data_wait_share" not in obj:
            out.append(f"  {label}: no report (see {logs.path(name)})")
            continue
        w = obj["data_wait_share"]
        per = ", ".join(f"{e.get('data_wait_share', 0) * 100:.1f}" for e in obj.get("per_epoch", []))
        line = (f"  {label}: data wait {w * 100:.2f}% of the step (per epoch: {per}), "
                f"{obj.get('images_per_sec', 0):.0f} images/s, {obj.get('workers')} workers, "
                f"val accuracy {100 * (obj.get('val_accuracy') or 0):.2f}%")
        if name.endswith(".demo"):
            line += f" (target < 5%: {verdict(w < 0.05)})"
            short.append(f"demo {w * 100:.2f}%")
        else:
            short.append(f"no cache {w * 100:.2f}%")
        out.append(line)
        try:
            with open(logs.path(name), encoding="utf-8", errors="replace") as f:
                cache = next((ln.strip() for ln in f if ln.startswith("decoded cache:")), None)
        except OSError:
            cache = None
        out.append(f"    {cache or 'no decoded cache line in the header'}")
        if obj.get("data_wait_covers"):
            out.append(f"    covers: {obj['data_wait_covers']}")
    if short:
        tsv.append(("i47_data_wait", ", ".join(short)))


def accuracy(logs, out, tsv):
    diffs = []
    for seed in range(3):
        a = {}
        for prec in ("f32", "bf16"):
            obj = last_json(logs.path(f"i47_bf16_acc.{prec}.s{seed}"))
            if obj and isinstance(obj.get("val_accuracy"), (int, float)):
                a[prec] = 100 * obj["val_accuracy"]
        if not a:
            continue
        line = f"  seed {seed}: val accuracy f32 {a.get('f32', float('nan')):.2f}%, bf16 {a.get('bf16', float('nan')):.2f}%"
        if len(a) == 2:
            diffs.append(a["bf16"] - a["f32"])
            line += f" (bf16 - f32 {diffs[-1]:+.2f} points)"
        out.append(line)
    if diffs:
        m = statistics.mean(diffs)
        out.append(f"  mean bf16 - f32 over {len(diffs)} seed(s): {m:+.2f} points "
                   f"(target within 0.3: {verdict(abs(m) <= 0.3)})")
        tsv.append(("i47_bf16_acc", f"bf16 - f32 {m:+.2f} points over {len(diffs)} seeds"))


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    logs = Logs(argv[1])
    out, tsv = [], []
    out.append("step times (batch 128, median of 50 steps per run; ms):")
    steps(logs, out, tsv)
    out.append("data wait:")
    data_wait(logs, out, tsv)
    out.append("bf16 accuracy (demo, 6 epochs):")
    accuracy(logs, out, tsv)
    print("\n".join(out))
    with open(os.path.join(argv[1], "figures.tsv"), "w", encoding="utf-8") as f:
        for group, text in tsv:
            f.write(f"{group}\t{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
