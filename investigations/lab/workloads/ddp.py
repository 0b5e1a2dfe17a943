"""The lab's data-parallel job: `ddp.py --world N` starts N rank processes the way torchrun does
(RANK, LOCAL_RANK, WORLD_SIZE in their environment, each on its own device), each pinned to its
CPUs; a rank prepares its batch on the host (CPU work), runs forward and backward, all-reduces
its gradients in buckets over the stand-in NCCL and steps the optimizer, for a fixed number of
steps (every rank makes the same collectives), each step an NVTX range ("step N").

Prints one JSON line per rank on stderr at the end.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torchlike as tl  # noqa: E402


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--rank-cpus", default="", help="per rank CPU lists separated by ';' ('-': no pinning)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--host-ms", type=float, default=2.0, help="CPU time of each step's batch preparation")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--gemm-us", type=int, default=1500)
    p.add_argument("--small-us", type=int, default=40)
    p.add_argument("--buckets", type=int, default=4)
    p.add_argument("--bucket-mib", type=int, default=25)
    p.add_argument("--item-every", type=int, default=10)
    return p.parse_args()


def rank_main(a):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tl.cuda.init(int(os.environ["LOCAL_RANK"]))
    pg = tl.ProcessGroup(rank, world, os.environ["LAB_NCCL_ID"])
    model = tl.Model(layers=a.layers, gemm_us=a.gemm_us, small_us=a.small_us, act_bytes=8 << 20)
    host = tl.HostBuffer(4 << 20, pinned=True)
    buckets = [tl.Tensor(a.bucket_mib << 20) for _ in range(a.buckets)]
    t0 = time.monotonic()
    for step in range(a.steps):
        # each rank's step as PyTorch code marks it (torch.cuda.nvtx.range)
        with tl.cuda.nvtx.range(f"step {step}"):
            tl.host_work(a.host_ms)  # collating and tokenizing the batch
            x = tl.to_device(host, non_blocking=True)
            loss, acts = model.forward(x)
            model.backward(loss, acts)
            for b in buckets:
                pg.all_reduce(b)
            model.optimizer_step()
            if a.item_every and step % a.item_every == 0:
                loss.item()
            loss.free()
            x.free()
    tl.cuda.synchronize()
    print(json.dumps({"workload": "ddp", "rank": rank, "steps": a.steps,
                      "seconds": round(time.monotonic() - t0, 3)}), file=sys.stderr)


def launcher(a):
    cpus = [c.strip() for c in a.rank_cpus.split(";")] if a.rank_cpus else []
    uid = tl.new_unique_id()
    procs = []
    for r in range(a.world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.world), LAB_NCCL_ID=uid)
        c = cpus[r] if r < len(cpus) else "-"
        mask = None if c in ("", "-") else {int(x) for x in c.split(",")}
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env,
                                      preexec_fn=(lambda m=mask: m and os.sched_setaffinity(0, m))))
    rc = 0
    for p in procs:
        rc = rc or p.wait()
    return rc


if __name__ == "__main__":
    args = parse()
    if "RANK" in os.environ:
        rank_main(args)
    else:
        sys.exit(launcher(args))
