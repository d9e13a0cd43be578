#!/usr/bin/env python3
"""Peer baseline: time per training step of stoker's `convnet` (or `resnet`) in PyTorch.

Measures the compute side of a training step (forward, loss, backward, SGD update)
so that `stoker-train`'s step time can be judged against PyTorch on the same
machine. No data loading happens in the timed loop: one batch is prepared before
timing (synthetic random pixels, or with --data one real batch decoded from an
ImageFolder, resized to --size and centre-cropped) and fed again at every step.

The model takes a u8 NHWC batch, as stoker's loader delivers it, and converts
and normalises it as its first layer (DataNorm), on the device.

Architecture: stoker's `convnet` exactly, as trainer/src/model/convnet.rs builds
it (checked against that file on 2026-12-02; KEEP IN SYNC, --channels covers its
WIDTHS constant):

    DataNorm: u8 NHWC -> f32 NCHW, (x/255 - mean) / std per channel (stoker's
        ModelConfig default: mean 0.5, std 0.25 on every channel)
    for each c in --channels (default 32,64,128 = convnet::WIDTHS):
        Conv2d 3x3, stride 1, padding 1 (c_in -> c), no bias (ConvSpec::same)
        -> BatchNorm2d (eps 1e-5, momentum 0.1) -> ReLU (fused into the BN in stoker)
        -> MaxPool 2x2 stride 2, skipped once the map is smaller than 2x2
    global average pool -> Linear(c_last -> classes, with bias)

With --model resnet: stoker's `resnet` exactly, as trainer/src/model/resnet.rs builds
it (checked against that file on 2026-12-06; KEEP IN SYNC, WIDTHS 32,64,128 and
STRIDES 1,2,2):

    DataNorm, then the stem: Conv2d 3x3 (3 -> 32, stride 1, padding 1, no bias)
        -> BatchNorm2d -> ReLU (-> MaxPool 2x2 stride 2 when the input is 48 px or more)
    three basic blocks (32, stride 1), (64, stride 2), (128, stride 2), each
        relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), conv1 3x3 with the
        block's stride, conv2 3x3 stride 1 (padding 1, no bias), the shortcut the
        identity or, when the shape changes, Conv2d 1x1 with the stride (no padding,
        no bias) -> BatchNorm2d
    global average pool -> Linear(128 -> classes, with bias)

    loss: softmax cross-entropy; optimiser: SGD, momentum 0.9, no Nesterov;
    weight decay (--weight-decay, default 0) only on conv and linear weights, as
    stoker's parameter registry groups them (BN parameters and biases: no decay)

Precision (--precision): f32 runs every op in f32; on CUDA TF32 is switched off for
cuDNN and cuBLAS (torch.backends.cudnn.allow_tf32 and cuda.matmul.allow_tf32 =
False), the same arithmetic as stoker's f32, unless --tf32 asks for PyTorch's default
TF32 convolutions (and TF32 matmuls). bf16 runs the forward and the loss under
torch.autocast(device_type=<device>, dtype=torch.bfloat16) and the backward outside
it, as PyTorch's AMP examples do; the parameters, their gradients and SGD stay f32.

Timing: --warmup steps (default 5, not timed), then --steps steps (default 30)
each timed separately (CUDA: synchronised before and after); reports the median.
Threads: torch.set_num_threads(--threads), default 2 = this machine's cores
(PyTorch's default is the number of physical cores; we make it explicit).

    python torch_train.py --device cpu --batch-size 128 --size 64 --steps 30 --json
    python torch_train.py --device cuda --model resnet --precision bf16 --json
"""

import argparse
import json
import os
import statistics
import sys
import time

MEAN = 0.5  # stoker ModelConfig defaults, in units of the [0, 1] pixel range
STD = 0.25
RESNET_WIDTHS = [32, 64, 128]  # trainer/src/model/resnet.rs WIDTHS and STRIDES
RESNET_STRIDES = [1, 2, 2]


def data_norm(torch, in_channels=3):
    """u8 NHWC -> normalised f32 NCHW: the model's first layer, as in stoker."""
    nn = torch.nn

    class DataNorm(nn.Module):
        def __init__(self):
            super().__init__()
            mean = torch.full((in_channels,), MEAN * 255.0)
            std = torch.full((in_channels,), STD * 255.0)
            self.register_buffer("mean", mean.view(1, -1, 1, 1))
            self.register_buffer("inv_std", (1.0 / std).view(1, -1, 1, 1))

        def forward(self, x):
            x = x.permute(0, 3, 1, 2).float()
            return (x - self.mean) * self.inv_std

    return DataNorm()


def build_model(torch, channels, classes, size, in_channels=3):
    nn = torch.nn

    layers = [data_norm(torch, in_channels)]
    c_in = in_channels
    hw = size
    for c in channels:
        layers += [
            nn.Conv2d(c_in, c, kernel_size=3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(c, eps=1e-5, momentum=0.1),
            nn.ReLU(inplace=True),
        ]
        if hw >= 2:
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            hw //= 2
        c_in = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


def build_resnet(torch, classes, size, in_channels=3):
    """stoker's `resnet` (trainer/src/model/resnet.rs), layer by layer."""
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, c_in, c, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
            self.conv2 = nn.Conv2d(c, c, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
            self.shortcut = None
            if stride != 1 or c_in != c:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(c_in, c, 1, stride=stride, padding=0, bias=False),
                    nn.BatchNorm2d(c, eps=1e-5, momentum=0.1),
                )

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            s = x if self.shortcut is None else self.shortcut(x)
            return torch.relu(y + s)

    layers = [
        data_norm(torch, in_channels),
        nn.Conv2d(in_channels, RESNET_WIDTHS[0], 3, stride=1, padding=1, bias=False),
        nn.BatchNorm2d(RESNET_WIDTHS[0], eps=1e-5, momentum=0.1),
        nn.ReLU(inplace=True),
    ]
    if size >= 48:
        layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
    c_in = RESNET_WIDTHS[0]
    for c, stride in zip(RESNET_WIDTHS, RESNET_STRIDES):
        layers.append(BasicBlock(c_in, c, stride))
        c_in = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


def real_batch(torch, data, batch_size, size):
    """One batch of real images (u8 NHWC) and labels from an ImageFolder."""
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.PILToTensor()])
    ds = datasets.ImageFolder(data, transform=tf)
    if len(ds) == 0:
        raise SystemExit(f"error: no images in {data}")
    idx = [i % len(ds) for i in range(batch_size)]
    xs, ys = zip(*(ds[i] for i in idx))
    x = torch.stack(xs).permute(0, 2, 3, 1).contiguous()
    return x, torch.tensor(ys, dtype=torch.int64), len(ds.classes)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="ImageFolder to take ONE real batch from (default: random pixels)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="default cpu")
    p.add_argument("--model", choices=["convnet", "resnet"], default="convnet", help="default convnet")
    p.add_argument(
        "--precision",
        choices=["f32", "bf16"],
        default="f32",
        help="f32 (default), or bf16 autocast for the forward and the loss",
    )
    p.add_argument(
        "--tf32",
        action="store_true",
        help="CUDA f32: let cuDNN and cuBLAS use TF32 (PyTorch's default for convolutions); "
        "without it TF32 is off, as in stoker's f32",
    )
    p.add_argument("--batch-size", type=int, default=128, help="default 128")
    p.add_argument("--size", type=int, default=64, help="input height = width (default 64)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--channels", default="32,64,128", help="conv widths, comma-separated (default 32,64,128)")
    p.add_argument("--classes", type=int, default=10, help="classes when --data is not given (default 10)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="SGD weight decay (default 0)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2: this machine's cores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    try:
        channels = [int(c) for c in a.channels.split(",") if c.strip()]
    except ValueError:
        p.error(f"--channels must be integers separated by commas, got {a.channels!r}")
    if a.model == "resnet":
        if a.channels != p.get_default("channels"):
            p.error("--channels sets the convnet's widths; the resnet's are fixed (32,64,128)")
        channels = list(RESNET_WIDTHS)
    if a.tf32 and (a.device != "cuda" or a.precision != "f32"):
        p.error("--tf32 applies to --device cuda with --precision f32")
    if not channels or min(channels) < 1 or a.batch_size < 1 or a.size < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--channels, --batch-size, --size and --steps must be positive")

    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda asked for, but torch.cuda.is_available() is False")
    dev = torch.device(a.device)
    if dev.type == "cuda":
        # Off unless --tf32: stoker's f32 is plain f32 (its cuBLAS math mode is the
        # default one, and its convolutions are f32).
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cuda.matmul.allow_tf32 = a.tf32

    if a.data:
        x, y, classes = real_batch(torch, a.data, a.batch_size, a.size)
        source = f"one real batch from {a.data}"
    else:
        classes = a.classes
        x = torch.randint(0, 256, (a.batch_size, a.size, a.size, 3), dtype=torch.uint8)
        y = torch.randint(0, classes, (a.batch_size,), dtype=torch.int64)
        source = "random pixels"
    x, y = x.to(dev), y.to(dev)

    if a.model == "resnet":
        model = build_resnet(torch, classes, a.size).to(dev)
    else:
        model = build_model(torch, channels, classes, a.size).to(dev)
    model.train()
    decay = [q for n, q in model.named_parameters() if q.ndim > 1]  # conv and linear weights
    no_decay = [q for n, q in model.named_parameters() if q.ndim <= 1]  # BN, biases
    opt = torch.optim.SGD(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr,
        momentum=0.9,
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def forward_loss():
        if a.precision == "bf16":
            # The forward and the loss under autocast, the backward outside it.
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                return loss_fn(model(x), y)
        return loss_fn(model(x), y)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward_loss()
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    r = {
        "peer": "torch",
        "model": a.model,
        "device": a.device,
        "precision": a.precision,
        "tf32": bool(a.tf32),
        "batch_size": a.batch_size,
        "step_ms": med,
        "images_per_sec": a.batch_size / med * 1e3,
        "min_step_ms": min(times),
        "max_step_ms": max(times),
        "steps": a.steps,
        "size": a.size,
        "channels": channels,
        "classes": classes,
        "parameters": params,
        "threads": torch.get_num_threads(),
        "input": source,
        "final_loss": float(loss.item()),
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else (os.uname().machine + f", {os.cpu_count()} cores"),
    }
    if a.json:
        print(json.dumps(r))
    else:
        print(
            f"torch {a.model} {channels} on {a.device} ({r['device_name']}), {a.precision}"
            f"{' (TF32 on)' if a.tf32 else ''}, batch {a.batch_size}x{a.size}x{a.size}x3 u8, "
            f"{params} parameters, {r['threads']} threads, {source}:\n"
            f"  median step {med:.2f} ms (min {r['min_step_ms']:.2f}, max {r['max_step_ms']:.2f}) over {a.steps} steps, "
            f"{r['images_per_sec']:.0f} images/s"
        )


if __name__ == "__main__":
    sys.exit(main())
