#!/usr/bin/env python3
"""Step-by-step comparison of stoker's training with PyTorch's, on the same batches
from the same initial weights.

    cargo run --release -p stoker-trainer --example step_trace -- DATA /tmp/trace --steps 20
    python step_parity.py /tmp/trace

step_trace (trainer/examples/step_trace.rs) records what stoker did: its initial
weights and batch-norm statistics, the first step's gradients, every step's batch,
learning rate and loss, the weights and statistics after the last step, an eval-mode
loss of the first batch, and its schedule's rate for every step of the whole run.
This script loads the same initial weights into torch_train.py's model (stoker's
convnet in PyTorch, u8 NHWC input), replays the same batches with
torch.optim.SGD (momentum 0.9, weight decay on conv and linear weights only) at
the same rates, and prints side by side:

- the first step's loss and the relative difference of each gradient tensor;
- every step's loss;
- the relative difference of each weight tensor and running statistic at the end;
- the eval-mode loss of the first batch (running batch-norm statistics);
- the schedule: torch_recipe.py's LinearLR + CosineAnnealingLR rates against stoker's,
  for every step of the run.

Same arithmetic gives differences at float rounding (about 1e-6 relative for the
first gradients, growing slowly over steps as rounding compounds); a different rule
(another weight-decay form, momentum form, variance estimate, ...) shows up as a
difference orders of magnitude larger in the tensors it touches.
`--wd-all` / `--nesterov` / `--bn-momentum X` change the PyTorch side on purpose, to
see how large such a difference looks.

`--pixels N` also checks the data of the first N images against torchvision's: each
file decoded by PIL (as ImageFolder does), zero-padded by `--pad` on every side
(RandomCrop's padding, fill 0), and every crop position and flip searched for the one
closest to stoker's image. Same decoder output and the same padding give an exact
match at one position; decoders that round differently give a small maximum
difference there.
"""

import argparse
import json
import os
import sys

import numpy as np


def rel(a, b):
    """max |a - b| / max(|b|, tiny) over a tensor."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="folder written by step_trace")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--wd-all", action="store_true", help="PyTorch side: decay every parameter (a deliberate difference)")
    p.add_argument("--nesterov", action="store_true", help="PyTorch side: Nesterov momentum (a deliberate difference)")
    p.add_argument("--bn-momentum", type=float, default=0.1, help="PyTorch side: batch-norm momentum (default 0.1)")
    p.add_argument("--pixels", type=int, default=0, help="check the first N images' pixels against PIL + RandomCrop")
    p.add_argument("--pad", type=int, default=4, help="the trace's crop padding (default 4)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the figures")
    a = p.parse_args(argv)

    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from torch_recipe import make_schedule
    from torch_train import build_model

    torch.set_num_threads(a.threads)
    t = json.load(open(os.path.join(a.trace, "trace.json")))
    h, w, c = t["input"]
    if t["mean"] != [0.5] * c or t["std"] != [0.25] * c:
        raise SystemExit(f"error: the trace normalises with {t['mean']}/{t['std']}; torch_train.py's model uses 0.5/0.25")
    f32 = lambda name: np.fromfile(os.path.join(a.trace, name), dtype="<f4")
    params0, state0, grads0 = f32("params0.f32"), f32("state0.f32"), f32("grads0.f32")
    params_end, state_end = f32("params_end.f32"), f32("state_end.f32")

    def entries(kind):
        for e in t[kind]:
            n = int(np.prod(e["shape"]))
            yield e, slice(e["offset"], e["offset"] + n)

    def batch(k):
        x = np.fromfile(os.path.join(a.trace, f"batch_{k}.u8"), dtype=np.uint8)
        y = np.fromfile(os.path.join(a.trace, f"labels_{k}.u32"), dtype="<u4")
        n = y.size
        return torch.from_numpy(x.reshape(n, h, w, c).copy()), torch.from_numpy(y.astype(np.int64))

    def replay(dtype):
        """The trace's steps in PyTorch at `dtype`: per-step losses, the first step's
        gradients, the tensors at the end, the eval-mode loss of the first batch."""
        model = build_model(torch, [32, 64, 128], t["classes"], h, in_channels=c).to(dtype)
        convs = [m for m in model if isinstance(m, torch.nn.Conv2d)]
        bns = [m for m in model if isinstance(m, torch.nn.BatchNorm2d)]
        (head,) = [m for m in model if isinstance(m, torch.nn.Linear)]
        for bn in bns:
            bn.momentum = a.bn_momentum
        # stoker's names -> PyTorch tensors (parameters and buffers).
        tensors = {"head.weight": head.weight, "head.bias": head.bias}
        for i, (cv, bn) in enumerate(zip(convs, bns), 1):
            tensors[f"conv{i}.weight"] = cv.weight
            tensors[f"bn{i}.weight"] = bn.weight
            tensors[f"bn{i}.bias"] = bn.bias
            tensors[f"bn{i}.running_mean"] = bn.running_mean
            tensors[f"bn{i}.running_var"] = bn.running_var
        with torch.no_grad():
            for kind, flat in (("params", params0), ("state", state0)):
                for e, sl in entries(kind):
                    dst = tensors[e["name"]]
                    dst.copy_(torch.from_numpy(flat[sl].copy()).view(dst.shape))
        decay = [tensors[e["name"]] for e, _ in entries("params") if e["decay"] or a.wd_all]
        no_decay = [tensors[e["name"]] for e, _ in entries("params") if not (e["decay"] or a.wd_all)]
        opt_cfg = t["optimizer"]
        opt = torch.optim.SGD(
            [{"params": decay, "weight_decay": opt_cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=t["steps"][0]["lr"],
            momentum=opt_cfg["momentum"],
            dampening=0.0,
            nesterov=a.nesterov,
        )
        loss_fn = torch.nn.CrossEntropyLoss()
        model.train()
        losses, grads = [], {}
        for k, s in enumerate(t["steps"]):
            x, y = batch(k)
            for g in opt.param_groups:
                g["lr"] = s["lr"]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            if k == 0:
                grads = {e["name"]: tensors[e["name"]].grad.detach().double().numpy().ravel() for e, _ in entries("params")}
            opt.step()
            losses.append(loss.item())
        end = {e["name"]: tensors[e["name"]].detach().double().numpy().ravel() for kind in ("params", "state") for e, _ in entries(kind)}
        model.eval()
        x, y = batch(0)
        with torch.no_grad():
            ev = loss_fn(model(x), y).item()
        return losses, grads, end, ev

    l32, g32, e32, ev32 = replay(torch.float32)
    l64, g64, e64, ev64 = replay(torch.float64)
    out = {"steps": [], "grads0": {}, "end": {}}
    print("Differences are against PyTorch in float64; 'torch f32' is PyTorch's own float32 rounding.")
    print(f"{'step':>4} {'lr':>10} {'stoker loss':>12} {'torch f32':>12} {'torch f64':>12} {'stoker rel':>10} {'f32 rel':>9}")
    for k, s in enumerate(t["steps"]):
        ds, dt = abs(s["loss"] - l64[k]) / abs(l64[k]), abs(l32[k] - l64[k]) / abs(l64[k])
        out["steps"].append({"lr": s["lr"], "stoker": s["loss"], "torch32": l32[k], "torch64": l64[k]})
        print(f"{k:>4} {s['lr']:>10.6f} {s['loss']:>12.6f} {l32[k]:>12.6f} {l64[k]:>12.6f} {ds:>10.2e} {dt:>9.2e}")
    print("\nfirst step's gradients, max |x - torch f64| / max |torch f64| per tensor:")
    print(f"  {'':<18} {'stoker':>9} {'torch f32':>9}")
    for e, sl in entries("params"):
        name = e["name"]
        r = (rel(grads0[sl], g64[name]), rel(g32[name], g64[name]))
        out["grads0"][name] = r
        print(f"  {name:<18} {r[0]:>9.2e} {r[1]:>9.2e}")
    print(f"\nafter {len(t['steps'])} steps, max |x - torch f64| / max |torch f64| per tensor:")
    print(f"  {'':<18} {'stoker':>9} {'torch f32':>9}")
    for kind, flat in (("params", params_end), ("state", state_end)):
        for e, sl in entries(kind):
            name = e["name"]
            r = (rel(flat[sl], e64[name]), rel(e32[name], e64[name]))
            out["end"][name] = r
            print(f"  {name:<18} {r[0]:>9.2e} {r[1]:>9.2e}")
    se = t["eval_first_batch"]["loss"]
    out["eval"] = {"stoker": se, "torch32": ev32, "torch64": ev64}
    print(f"\neval-mode loss of the first batch: stoker {se:.6f}, torch f32 {ev32:.6f}, torch f64 {ev64:.6f}")

    # The whole run's schedule, as torch_recipe.py steps it.
    sc = t["schedule"]
    probe = torch.nn.Parameter(torch.zeros(1))
    popt = torch.optim.SGD([probe], lr=sc["base"])
    sched, warm, total = make_schedule(torch, popt, sc["per_epoch"], sc["epochs"])
    lrs = []
    for _ in range(total):
        lrs.append(popt.param_groups[0]["lr"])
        popt.step()
        sched.step()
    st = np.array(t["lr_all"], dtype=np.float64)
    diff = np.abs(np.array(lrs) - st)
    out["schedule"] = {"steps": total, "warmup": [warm, sc["warmup"]], "max_abs": float(diff.max()), "at": int(diff.argmax())}
    print(
        f"schedule over {total} steps: warm-up {warm} (torch) / {sc['warmup']} (stoker); "
        f"max |torch - stoker| = {diff.max():.2e} at step {diff.argmax()} "
        f"(lr {lrs[diff.argmax()]:.8f} vs {st[diff.argmax()]:.8f}); f32 spacing at 0.1 is 7.5e-9"
    )
    if a.pixels:
        out["pixels"] = check_pixels(t, batch, a.pixels, a.pad)
    if a.json:
        print(json.dumps(out))
    return 0


def check_pixels(t, batch, count, pad):
    """stoker's first `count` images against PIL's decode of the same files, padded and
    cropped at the closest of every position and flip."""
    from PIL import Image

    h, w, c = t["input"]
    exact, worst, hist = 0, 0, {}
    done = 0
    for k, s in enumerate(t["steps"]):
        x, _ = batch(k)
        for i, path in enumerate(s["files"]):
            if done == count:
                break
            ref = np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)
            padded = np.zeros((ref.shape[0] + 2 * pad, ref.shape[1] + 2 * pad, 3), np.int16)
            padded[pad : pad + ref.shape[0], pad : pad + ref.shape[1]] = ref
            img = x[i].numpy().astype(np.int16)
            best = None
            for flip in (False, True):
                src = padded[:, ::-1] if flip else padded
                for top in range(padded.shape[0] - h + 1):
                    for left in range(padded.shape[1] - w + 1):
                        d = np.abs(src[top : top + h, left : left + w] - img)
                        score = (int(d.max()), float(d.mean()))
                        if best is None or score < best[0]:
                            best = (score, top, left, flip)
            (dmax, _), top, left, flip = best
            exact += dmax == 0
            worst = max(worst, dmax)
            hist[dmax] = hist.get(dmax, 0) + 1
            done += 1
    print(
        f"pixels: {done} images against PIL decode + zero pad {pad} + crop/flip: {exact} exact, "
        f"max difference at the best position {worst}; images by max difference {dict(sorted(hist.items()))}"
    )
    return {"images": done, "exact": exact, "worst": worst, "by_max_diff": hist}


if __name__ == "__main__":
    sys.exit(main())
