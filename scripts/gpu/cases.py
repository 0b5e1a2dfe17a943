#!/usr/bin/env python3
"""Real PyTorch training loops with one injected problem each, for recording labelled GPU traces
(scripts/gpu/record.sh runs each under `causeway trace`). The ground truth is each case's design:

  input-starvation  a GPU step of several ms fed by a DataLoader with one worker that decodes
                    heavily (zlib and SHA-256 passes per sample, ~60 ms a batch): the main
                    thread waits for batches. healthy: six workers, decompression only (a
                    batch in well under a step).
  sync-storm        after every step the loop reads 16 per-layer gradient norms with .item(),
                    each a device-to-host copy that waits for the step to finish: the host can
                    never run ahead. healthy: the same read every 25 steps.
  empty-cache       torch.cuda.empty_cache() after every step, whose temporaries then come back
                    from cudaMalloc: allocator churn. healthy: no empty_cache().
  cpu-contention    the loop runs pinned to one CPU that busy processes (started by record.sh,
                    pinned to the same CPU) share with it. healthy: the same loop alone.
  host-bound        before every step the main thread spends 30 ms on the CPU in Python (a
                    per-batch preprocessing loop) against a GPU step of a few ms, then reads the
                    loss with .item(): the GPU idles while the host works. healthy: the same
                    step and .item() with no host work.

Every case trains for --seconds after a warm-up and prints one JSON line: the case, the variant,
the steps, and the median step time.

Not here: a multi-rank NCCL job. NCCL refuses two ranks on one GPU ("Duplicate GPU detected",
NCCL 2.28.9 on the lent H200), and the lent machines have one GPU each.
"""

import argparse
import hashlib
import json
import statistics
import sys
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(width=2048, depth=16):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class Decoded(torch.utils.data.Dataset):
    """Samples stored compressed; each is decompressed and hashed `passes` times (CPU work)."""

    def __init__(self, n, width, passes):
        g = torch.Generator().manual_seed(0)
        raw = torch.randn(n, width, generator=g).numpy()
        self.blobs = [zlib.compress(r.tobytes(), 6) for r in raw]
        self.width, self.passes = width, passes

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        data = zlib.decompress(self.blobs[i])
        h = b""
        for _ in range(self.passes):
            h = hashlib.sha256(data + h).digest()
            data = zlib.decompress(zlib.compress(data, 6))
        x = torch.frombuffer(bytearray(data), dtype=torch.float32)
        return x, int(h[0]) % 10 if h else i % 10


def train(step, seconds, warmup, between=None):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times, end = [], time.time() + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        step()
        if between:
            between(len(times))
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return times


def case_input_starvation(a, dev):
    # A GPU step of several milliseconds (wide layers, built on the GPU), so that six light
    # workers keep up with it and one heavy worker cannot.
    with torch.device(dev):
        model = nn.Sequential(nn.Linear(1024, 8192), *[m for _ in range(10) for m in (nn.Linear(8192, 8192), nn.GELU())], nn.Linear(8192, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    workers, passes = (1, 12) if a.variant == "problem" else (6, 0)
    ds = Decoded(4096, 1024, passes)
    dl = torch.utils.data.DataLoader(
        ds, batch_size=64, num_workers=workers, pin_memory=True, persistent_workers=True,
        prefetch_factor=4, shuffle=True,
    )
    it = iter(dl)

    def step():
        nonlocal it
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            x, y = next(it)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return train(step, a.seconds, 5)


def case_sync_storm(a, dev):
    model = mlp().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device=dev)
    y = torch.randint(0, 10, (512,), device=dev)
    every = 1 if a.variant == "problem" else 25
    linears = [m for m in model if isinstance(m, nn.Linear)]

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def log(i):
        if i % every == 0:
            # 16 .item() reads: each a small device-to-host copy that waits for the stream.
            stats = {f"gnorm{j}": m.weight.grad.norm().item() for j, m in enumerate(linears[:16])}
            # Host-side bookkeeping of a logging loop (formatting, a metrics dict).
            json.dumps(stats)

    return train(step, a.seconds, 5, log)


def case_empty_cache(a, dev):
    model = mlp(width=1536, depth=12).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    sizes = [256, 384, 512, 768]

    def step():
        b = sizes[step.i % len(sizes)]
        step.i += 1
        x = torch.randn(b, 1536, device=dev)
        y = torch.randint(0, 10, (b,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if a.variant == "problem":
            torch.cuda.empty_cache()

    step.i = 0
    return train(step, a.seconds, 5)


def case_cpu_contention(a, dev):
    # A launch-heavy loop (many small kernels): its host side is most of the step.
    model = mlp(width=512, depth=24).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(256, 512, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    return train(step, a.seconds, 20)


def case_host_bound(a, dev):
    model = mlp().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device=dev)
    y = torch.randint(0, 10, (512,), device=dev)
    host_s = 0.030 if a.variant == "problem" else 0.0

    def preprocess():
        # Pure-Python per-batch work (on the CPU, no GPU call) for host_s seconds.
        end, acc = time.perf_counter() + host_s, 0
        while time.perf_counter() < end:
            acc += sum(i * i % 7 for i in range(500))
        return acc

    def step():
        preprocess()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    return train(step, a.seconds, 5)


CASES = {
    "input-starvation": case_input_starvation,
    "sync-storm": case_sync_storm,
    "empty-cache": case_empty_cache,
    "cpu-contention": case_cpu_contention,
    "host-bound": case_host_bound,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--variant", choices=["problem", "healthy"], default="problem")
    ap.add_argument("--seconds", type=float, default=8)
    a = ap.parse_args()
    dev = torch.device("cuda")
    times = CASES[a.case](a, dev)
    if times is not None:
        print(json.dumps({"case": a.case, "variant": a.variant, "steps": len(times),
                          "median_ms": round(statistics.median(times), 3)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
