#!/usr/bin/env python3
"""The demo recipe of stoker-train, in PyTorch: train stoker's `convnet` on an ImageFolder
the way a PyTorch user would, and report the validation accuracy.

    python torch_recipe.py --data TRAIN_DIR --val VAL_DIR --seed 0 [--json]

The recipe (stoker-train's defaults for the demo set; keep in sync with
trainer/cli/src/demo.rs, trainer/src/schedule.rs and trainer/src/optim.rs):

- data: torchvision ImageFolder; training transform RandomCrop(SIZE, padding=PAD)
  (zero fill), RandomHorizontalFlip(), ToTensor(), Normalize(mean 0.5, std 0.25) on
  every channel; validation: ToTensor(), Normalize(...) only. DataLoader with
  shuffle=True, batch 128, the last partial batch kept (drop_last=False).
- model: stoker's convnet, built by torch_train.py's build_model (conv3x3 32/64/128
  without bias, BatchNorm2d eps 1e-5 momentum 0.1, ReLU, maxpool 2x2, global average
  pool, linear), without its u8 DataNorm layer (the transforms normalise here), with
  PyTorch's default initialisation (kaiming_uniform a=sqrt(5) for weights,
  U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for biases, batch norm weight 1 and bias 0).
- loss: CrossEntropyLoss (mean over the batch).
- optimiser: SGD(lr 0.1, momentum 0.9, dampening 0, no Nesterov), weight decay 5e-4
  on conv and linear weights only (batch-norm parameters and biases: none).
- schedule, stepped once per batch: LinearLR from lr/W up to lr over the first W
  steps, then CosineAnnealingLR down to 0 at the run's last step (SequentialLR),
  W = min(steps_per_epoch // 2, total // 10), at least 1: half an epoch of warm-up,
  as stoker's Schedule::warmup_cosine.
- 6 epochs; evaluation (model.eval(): running batch-norm statistics) after each.

`--target labels` is the multi-label recipe (`stoker-train --target labels`): --data and
--val are JSON-lines manifests (`stoker-load gen scenes`, the multi-label demo's
train.jsonl), each line's `labels` the image's tags; the training transform is
RandomHorizontalFlip() alone (the demo's `flip`); the loss BCEWithLogitsLoss() (mean
over every sample and class); the report the exact-match ratio as `val_accuracy`, and
`val_map` (per-class average precision, scikit-learn's `average_precision_score` step
definition, averaged over the classes with a positive), `val_f1_micro` and
`val_f1_macro` at threshold 0.5, as stoker-train reports them.

`--conv-init he-normal` starts the conv weights from N(0, 2/fan_in) instead (stoker's
initialisation before issue 31), to measure what the initialisation alone does.
`--print-lr` prints the learning rate of every step and exits (to compare with
stoker's schedule).
"""

import argparse
import json
import os
import random
import sys
import time

MEAN = 0.5
STD = 0.25


def warmup_steps(per_epoch, epochs):
    """stoker's Schedule::warmup_cosine: half an epoch, at most a tenth of the run."""
    total = per_epoch * epochs
    return max(min(per_epoch // 2, total // 10), 1)


def make_schedule(torch, opt, per_epoch, epochs):
    total = per_epoch * epochs
    w = warmup_steps(per_epoch, epochs)
    sched = torch.optim.lr_scheduler
    # Factor (i + 1) / w at step i < w, reaching 1 at step w - 1.
    warm = sched.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=max(w - 1, 0))
    cos = sched.CosineAnnealingLR(opt, T_max=max(total - w, 1), eta_min=0.0)
    return sched.SequentialLR(opt, [warm, cos], milestones=[w]), w, total


def average_precision(scores, positive):
    """scikit-learn's step definition: sum over thresholds (ties as one) of the precision
    there times the recall it adds. None without positives."""
    total = sum(positive)
    if total == 0:
        return None
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    tp = fp = 0
    ap = recall = 0.0
    i = 0
    while i < len(order):
        s = scores[order[i]]
        while i < len(order) and scores[order[i]] == s:
            if positive[order[i]]:
                tp += 1
            else:
                fp += 1
            i += 1
        r = tp / total
        ap += (r - recall) * tp / (tp + fp)
        recall = r
    return ap


def label_metrics(logits, tags):
    """(mAP, micro F1, macro F1) of (n, classes) lists of logits and 0/1 tags; a logit
    above 0 predicts the tag."""
    classes = len(tags[0])
    aps, f1s, tp_all, wrong_all = [], [], 0, 0
    for c in range(classes):
        col = [row[c] for row in logits]
        pos = [row[c] for row in tags]
        ap = average_precision(col, pos)
        if ap is not None:
            aps.append(ap)
        tp = sum(1 for z, t in zip(col, pos) if z > 0 and t)
        wrong = sum(1 for z, t in zip(col, pos) if (z > 0) != bool(t))
        f1s.append(2 * tp / (2 * tp + wrong) if tp + wrong else 0.0)
        tp_all += tp
        wrong_all += wrong
    mean_ap = sum(aps) / len(aps) if aps else None
    micro = 2 * tp_all / (2 * tp_all + wrong_all) if tp_all + wrong_all else 0.0
    return mean_ap, micro, sum(f1s) / classes


def manifest_dataset(torch, path, transform):
    """A JSON-lines manifest with a `classes` header: (image, k-hot float tags) pairs."""
    from PIL import Image

    root = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    classes = rows[0]["classes"]
    index = {name: i for i, name in enumerate(classes)}
    samples = []
    for r in rows[1:]:
        k_hot = torch.zeros(len(classes))
        for name in r["labels"]:
            k_hot[index[name] if isinstance(name, str) else int(name)] = 1.0
        samples.append((os.path.join(root, r["image"]), k_hot))

    class Manifest(torch.utils.data.Dataset):
        def __len__(self):
            return len(samples)

        def __getitem__(self, i):
            p, t = samples[i]
            return transform(Image.open(p).convert("RGB")), t

    return Manifest(), classes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="training ImageFolder")
    p.add_argument("--val", required=True, help="validation ImageFolder")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--size", type=int, default=None, help="crop side (default: the images' side)")
    p.add_argument("--pad", type=int, default=4, help="RandomCrop padding (default 4)")
    p.add_argument("--channels", default="32,64,128")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes (default 1)")
    p.add_argument("--conv-init", choices=["torch", "he-normal"], default="torch")
    p.add_argument("--target", choices=["class", "labels"], default="class",
                   help="labels: multi-label tags from JSON-lines manifests")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd",
                   help="adamw: torch.optim.AdamW(lr, betas (0.9, 0.999), eps 1e-8)")
    p.add_argument("--print-lr", action="store_true", help="print every step's learning rate and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    a = p.parse_args(argv)

    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_train import build_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    random.seed(a.seed)

    labels = a.target == "labels"
    norm = [transforms.ToTensor(), transforms.Normalize([MEAN] * 3, [STD] * 3)]
    if labels:
        train_ds, names = manifest_dataset(torch, a.data, transforms.Compose([transforms.RandomHorizontalFlip()] + norm))
        val_ds, _ = manifest_dataset(torch, a.val, transforms.Compose(norm))
        size = a.size or val_ds[0][0].shape[1]
        classes = len(names)
    else:
        probe = datasets.ImageFolder(a.val)
        if len(probe) == 0:
            raise SystemExit(f"error: no images in {a.val}")
        w0, h0 = probe[0][0].size
        size = a.size or h0
        train_tf = transforms.Compose(
            [transforms.RandomCrop(size, padding=a.pad, fill=0), transforms.RandomHorizontalFlip()] + norm
        )
        val_tf = transforms.Compose(norm if (h0, w0) == (size, size) else [transforms.CenterCrop(size)] + norm)
        train_ds = datasets.ImageFolder(a.data, transform=train_tf)
        val_ds = datasets.ImageFolder(a.val, transform=val_tf)
        classes = len(train_ds.classes)
    gen = torch.Generator()
    gen.manual_seed(a.seed)
    loader_kw = dict(num_workers=a.workers, persistent_workers=a.workers > 0)
    train_dl = DataLoader(train_ds, batch_size=a.batch_size, shuffle=True, drop_last=False, generator=gen, **loader_kw)
    val_dl = DataLoader(val_ds, batch_size=500, shuffle=False, **loader_kw)

    channels = [int(c) for c in a.channels.split(",")]
    # torch_train's model without its first layer (the u8 DataNorm): the transforms
    # above already give normalised float NCHW.
    model = build_model(torch, channels, classes, size)[1:]
    if a.conv_init == "he-normal":
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
    decay = [q for q in model.parameters() if q.ndim > 1]  # conv and linear weights
    no_decay = [q for q in model.parameters() if q.ndim <= 1]  # batch norm, biases
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    else:
        opt = torch.optim.SGD(groups, lr=a.lr, momentum=a.momentum, dampening=0.0, nesterov=False)
    per_epoch = len(train_dl)
    sched, warmup, total = make_schedule(torch, opt, per_epoch, a.epochs)
    if a.print_lr:
        for _ in range(total):
            print(repr(opt.param_groups[0]["lr"]))
            opt.step()
            sched.step()
        return 0
    loss_fn = torch.nn.BCEWithLogitsLoss() if labels else torch.nn.CrossEntropyLoss()

    def right(out, y):
        if labels:
            return ((out > 0) == (y > 0.5)).all(1).sum().item()
        return (out.argmax(1) == y).sum().item()

    say = (lambda s: print(s, file=sys.stderr)) if a.json else print
    say(
        f"torch {torch.__version__}: convnet {channels}, {sum(q.numel() for q in model.parameters())} parameters, "
        f"{len(train_ds)} training / {len(val_ds)} validation images of {size} px, {classes} classes; "
        f"{a.epochs} epochs x {per_epoch} steps, warm-up {warmup}, seed {a.seed}, {a.threads} threads"
    )
    epochs = []
    t_start = time.perf_counter()
    for epoch in range(a.epochs):
        model.train()
        t0 = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for x, y in train_dl:
            out = model(x)
            loss = loss_fn(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            n = y.shape[0]
            loss_sum += loss.item() * n
            correct += right(out, y)
            seen += n
        train_s = time.perf_counter() - t0
        model.eval()
        vloss, vcorrect, vseen = 0.0, 0, 0
        vlogits, vtags = [], []
        with torch.no_grad():
            for x, y in val_dl:
                out = model(x)
                if labels:
                    # Per sample: the mean over its classes, as the training loss.
                    vloss += loss_fn(out, y).item() * y.shape[0]
                    vlogits += out.tolist()
                    vtags += y.int().tolist()
                else:
                    vloss += torch.nn.functional.cross_entropy(out, y, reduction="sum").item()
                vcorrect += right(out, y)
                vseen += y.shape[0]
        rec = {
            "epoch": epoch + 1,
            "train_loss": loss_sum / seen,
            "train_accuracy": correct / seen,
            "val_loss": vloss / vseen,
            "val_accuracy": vcorrect / vseen,
            "train_seconds": train_s,
        }
        if labels:
            rec["val_map"], rec["val_f1_micro"], rec["val_f1_macro"] = label_metrics(vlogits, vtags)
        epochs.append(rec)
        say(
            f"epoch {epoch + 1}/{a.epochs}  loss {rec['train_loss']:.4f}  train {100 * rec['train_accuracy']:.2f}%  "
            f"val {100 * rec['val_accuracy']:.2f}%  {train_s:.1f} s"
            + (f"  mAP {rec['val_map']:.3f}  F1 micro {rec['val_f1_micro']:.3f} macro {rec['val_f1_macro']:.3f}" if labels else "")
        )
    last = epochs[-1]
    summary = {
        "peer": "torch",
        "torch": torch.__version__,
        "seed": a.seed,
        "conv_init": a.conv_init,
        "val_accuracy": last["val_accuracy"],
        "val_loss": last["val_loss"],
        "train_loss": last["train_loss"],
        "train_accuracy": last["train_accuracy"],
        "steps": per_epoch * a.epochs,
        "warmup": warmup,
        "wall_seconds": time.perf_counter() - t_start,
        "per_epoch": epochs,
    }
    if labels:
        summary.update({k: last[k] for k in ("val_map", "val_f1_micro", "val_f1_macro")})
        summary.update(target="labels", optimizer=a.optimizer, lr=a.lr)
    if a.json:
        print(json.dumps(summary))
    else:
        say(f"final: train loss {last['train_loss']:.4f}, val accuracy {100 * last['val_accuracy']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
