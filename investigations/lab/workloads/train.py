"""The lab's training loop: a DataLoader over files (or a remote sample server), copies to the
device, forward/backward/optimizer launches, periodic .item() logging and checkpoints, each
step an NVTX range ("step N", torch.cuda.nvtx.range_push). Every lab problem of a training job
is one of its options (investigations/lab/*/run).

Prints one JSON line on stderr at the end: steps, seconds, step-time percentiles.
"""

import argparse
import json
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torchlike as tl  # noqa: E402


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--min-epochs", type=float, default=0,
                   help="go on past --seconds until the loader has served this many passes over the dataset")
    p.add_argument("--max-seconds", type=float, default=60, help="stop here whatever --min-epochs asks")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--ptx-only", action="store_true", help="load the PTX-only kernel module (JIT on first use)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--gemm-us", type=int, default=1500)
    p.add_argument("--small-us", type=int, default=40)
    p.add_argument("--extra-small", type=int, default=0, help="extra elementwise kernels per layer and pass")
    p.add_argument("--act-mib", type=int, default=32)
    p.add_argument("--allocs-per-layer", type=int, default=1, help="activation tensors per layer")
    p.add_argument("--variety", action="store_true", help="the extra kernels cycle through the module's kernels")
    p.add_argument("--data", help="sample directory (lab_data.py make); none: a batch already on the host")
    p.add_argument("--remote", help="HOST:PORT of a sample server (lab_data.py serve) instead of local files")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--decode-passes", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sample-kib", type=int, default=256)
    p.add_argument("--pinned-pool-mib", type=int, default=0,
                   help="pinned host memory held for the whole run (PyTorch's pinned-memory cache)")
    p.add_argument("--pin-memory", action="store_true", help="pinned batches, non_blocking copies")
    p.add_argument("--host-ms", type=float, default=0, help="CPU time of each step's Python-side work")
    p.add_argument("--item-every", type=int, default=10, help=".item() the loss every N steps (0: never)")
    p.add_argument("--items-per-step", type=int, default=1, help=".item() calls when logging")
    p.add_argument("--empty-cache-every", type=int, default=0)
    p.add_argument("--checkpoint-every", type=float, default=0, help="seconds between checkpoints (0: none)")
    p.add_argument("--checkpoint-mib", type=int, default=128)
    p.add_argument("--checkpoint-dir")
    p.add_argument("--checkpoint-async", action="store_true", help="write checkpoints from a background thread, no fsync")
    return p.parse_args()


def checkpoint(path, data, sync):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def main():
    a = parse()
    tl.cuda.init(a.device, ptx_only=a.ptx_only)
    model = tl.Model(layers=a.layers, gemm_us=a.gemm_us, small_us=a.small_us, act_bytes=a.act_mib << 20,
                     extra_small=a.extra_small, allocs_per_layer=a.allocs_per_layer, variety=a.variety)
    sample_bytes = a.sample_kib << 10
    pool = tl.HostBuffer(a.pinned_pool_mib << 20, pinned=True) if a.pinned_pool_mib else None
    loader = None
    if a.data or a.remote:
        remote = None
        if a.remote:
            host, port = a.remote.rsplit(":", 1)
            remote = (host, int(port))
        ds = tl.FileDataset(a.data, decode_passes=a.decode_passes, remote=remote)
        loader = tl.DataLoader(ds, a.batch_size, sample_bytes, num_workers=a.workers, prefetch_factor=a.prefetch,
                               pin_memory=a.pin_memory)
        it = iter(loader)
    else:
        host = tl.HostBuffer(a.batch_size * sample_bytes, pinned=a.pin_memory)
    ckpt_host = bytearray(a.checkpoint_mib << 20) if a.checkpoint_every else None
    writer = None
    step_times = []
    t0 = time.monotonic()
    last_ckpt = t0
    step = 0
    nvtx = tl.cuda.nvtx
    # a workload defined by its passes over the data holds on a slow disk too
    min_steps = math.ceil(a.min_epochs * len(ds) / a.batch_size) if loader else 0

    def more():
        t = time.monotonic() - t0
        return t < a.seconds or (step < min_steps and t < a.max_seconds)

    while more():
        ts = time.monotonic()
        # the step as PyTorch code marks it for Nsight Systems (and for causeway): batch to end
        nvtx.range_push(f"step {step}")
        if loader:
            batch, release = next(it)
        else:
            batch, release = host, (lambda: None)
        x = tl.to_device(batch, non_blocking=a.pin_memory)
        release()
        loss = model.step(x)
        x.free()
        if a.item_every and step % a.item_every == 0:
            for _ in range(a.items_per_step):
                loss.item()
        loss.free()
        if a.host_ms:
            tl.host_work(a.host_ms)  # metrics, hooks, logging: what a framework does between steps
        if a.empty_cache_every and step % a.empty_cache_every == 0:
            tl.cuda.empty_cache()
        if ckpt_host is not None and time.monotonic() - last_ckpt >= a.checkpoint_every:
            if writer is not None:
                writer.join()
            # torch.save(model.state_dict()): the parameters come to the host first
            tl._rt.cudaMemcpy(tl.ctypes.addressof((tl.ctypes.c_char * len(ckpt_host)).from_buffer(ckpt_host)),
                              model.params[0].ptr, len(ckpt_host), tl.D2H)
            path = os.path.join(a.checkpoint_dir, f"ckpt-{step}.pt")
            if a.checkpoint_async:
                # the writer has long finished the previous one (checkpoints are seconds apart)
                writer = threading.Thread(target=checkpoint, args=(path, ckpt_host, False))
                writer.start()
            else:
                checkpoint(path, ckpt_host, True)
            last_ckpt = time.monotonic()
        nvtx.range_pop()
        step += 1
        step_times.append(time.monotonic() - ts)
    tl.cuda.synchronize()
    elapsed = time.monotonic() - t0
    if writer is not None:
        writer.join()
    if loader:
        loader.close()
    del pool
    st = sorted(step_times)
    print(json.dumps({"workload": "train", "steps": step, "seconds": round(elapsed, 3),
                      "device_ms_per_step": model.device_us_per_step() / 1000,
                      "step_ms_p50": round(1000 * st[len(st) // 2], 3) if st else None,
                      "step_ms_p99": round(1000 * st[int(len(st) * 0.99)], 3) if st else None}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
