#!/usr/bin/env python3
"""A PyTorch training loop whose step times measure causeway's overhead on a real GPU.

Two workloads:
  gpt  a small GPT (6 layers, width 768, sequence 512, batch 16, bf16 autocast, AdamW): a
       typical training step of tens of milliseconds, several hundred kernel launches;
  mlp  a deep narrow MLP (24 layers of 512, batch 256, float32, SGD): launch-bound steps of a
       few milliseconds, the worst case for per-call probes.

Each step copies its batch from pinned host memory (cudaMemcpyAsync), runs forward, backward
and the optimizer, and reads the loss back (a synchronising copy), as training loops that log
do. After --warmup steps, --steps steps are timed with the host clock (the loss read makes
every step end synchronised). One JSON line goes to stdout:
  {"workload", "steps", "median_ms", "mean_ms", "p90_ms", "step_ms": [...]}
With --seconds, one process trains for that long and reports each step's end time, so that a
tracer attached and detached while it runs (`causeway trace --pid`) is compared with the same
process untraced (scripts/gpu/overhead.sh).
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=8192, d=768, layers=6, heads=12, seq=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def gpt_step_fn(dev):
    torch.manual_seed(0)
    model = Gpt().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    batch, seq, vocab = 16, 512, 8192
    host = torch.randint(0, vocab, (batch, seq + 1)).pin_memory()

    def step():
        data = host.to(dev, non_blocking=True)
        x, y = data[:, :-1], data[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def mlp_step_fn(dev):
    torch.manual_seed(0)
    width, depth, batch = 512, 24, 256
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    xs = torch.randn(batch, width).pin_memory()
    ys = torch.randint(0, 10, (batch,)).pin_memory()

    def step():
        x = xs.to(dev, non_blocking=True)
        y = ys.to(dev, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["gpt", "mlp"], required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument(
        "--seconds",
        type=float,
        help="instead of --steps: train this long after the warm-up, print 'ready' on stderr "
        "when timing starts, and print every step as [end time (Unix s), step ms]",
    )
    ap.add_argument("--stop-file", help="with --seconds: stop early once this file exists")
    a = ap.parse_args()
    dev = torch.device("cuda")
    step = (gpt_step_fn if a.workload == "gpt" else mlp_step_fn)(dev)
    for _ in range(a.warmup):
        loss = step()
    if a.seconds:
        print("ready", file=sys.stderr, flush=True)
        steps, end = [], time.time() + a.seconds
        while True:
            t0 = time.perf_counter()
            loss = step()
            now = time.time()
            steps.append([round(now, 4), round((time.perf_counter() - t0) * 1e3, 4)])
            if now >= end or (a.stop_file and os.path.exists(a.stop_file)):
                break
        print(json.dumps({"workload": a.workload, "steps": steps}), flush=True)
        return
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)
    assert loss == loss, "loss is NaN"
    q = statistics.quantiles(times, n=10)
    print(
        json.dumps(
            {
                "workload": a.workload,
                "steps": a.steps,
                "median_ms": statistics.median(times),
                "mean_ms": statistics.fmean(times),
                "p90_ms": q[8],
                "step_ms": [round(t, 4) for t in times],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
