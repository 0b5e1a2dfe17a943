#!/usr/bin/env python3
"""Calls every CUDA runtime, driver and NCCL function causeway probes, a known number of times,
on a real GPU, and prints what it did as one JSON line: {"did": {op: calls}, "bytes": {...},
"skipped": {part: reason}}. scripts/gpu/overhead.sh runs it under `causeway trace --nccl` and
compares each count with the calls the kernel counted (op_counts): a probe that misses calls
shows there.

The runtime calls go through CuPy's thin wrappers (one wrapper call, one runtime call), the
driver calls through ctypes on libcuda.so.1, CUDA graphs through PyTorch (which instantiates
with cudaGraphInstantiateWithFlags) and CuPy, NCCL through torch.distributed with one rank,
except ncclReduceScatter: PyTorch makes no NCCL call for reduce_scatter_tensor on one rank
(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs none; PyTorch 2.11, NCCL 2.28.9), so that one is
called through ctypes on the libnccl PyTorch loaded, with a one-rank communicator of its own.
"""

import ctypes
import json
import os
import sys

import numpy as np

N = 25  # calls of each function
did, nbytes, skipped = {}, {}, {}


def count(op, n=N, b=None):
    did[op] = did.get(op, 0) + n
    if b is not None:
        nbytes[op] = b


def runtime_calls():
    import cupy
    from cupy.cuda import runtime as rt

    cupy.cuda.Device(0).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    s = stream.ptr
    size = 1 << 20
    host = np.ones(size, dtype=np.uint8)
    h = host.ctypes.data

    ptrs = [rt.malloc(size) for _ in range(N)]
    count("cudaMalloc", b=size)
    d = ptrs[0]
    for _ in range(N):
        rt.memcpy(d, h, size, 1)  # host to device
    count("cudaMemcpy", b=size)
    for _ in range(N):
        rt.memcpyAsync(h, d, size, 2, s)  # device to host
    count("cudaMemcpyAsync", b=size)
    rt.streamSynchronize(s)
    for _ in range(N):
        rt.memsetAsync(d, 7, size, s)
    count("cudaMemsetAsync", b=size)
    for _ in range(N):
        rt.memcpy2D(ptrs[1], 1024, d, 1024, 512, 256, 3)
    count("cudaMemcpy2D", b=512 * 256)
    for _ in range(N):
        rt.memcpy2DAsync(ptrs[1], 1024, d, 1024, 512, 256, 3, s)
    count("cudaMemcpy2DAsync", b=512 * 256)
    for _ in range(N):
        rt.memcpyPeer(ptrs[2], 0, d, 0, size)
    count("cudaMemcpyPeer", b=size)
    for _ in range(N):
        rt.memcpyPeerAsync(ptrs[2], 0, d, 0, size, s)
    count("cudaMemcpyPeerAsync", b=size)
    for _ in range(N):
        rt.streamSynchronize(s)
    count("cudaStreamSynchronize")
    ev = rt.eventCreate()
    for _ in range(N):
        rt.eventRecord(ev, s)
        rt.eventSynchronize(ev)
    count("cudaEventSynchronize")
    for _ in range(N):
        rt.deviceSynchronize()
    count("cudaDeviceSynchronize")
    managed = [rt.mallocManaged(4096) for _ in range(N)]
    count("cudaMallocManaged", b=4096)
    for p in ptrs + managed:
        rt.free(p)
    count("cudaFree", 2 * N)

    # A graph captured from one memset, instantiated with cudaGraphInstantiate, launched N times.
    buf = rt.malloc(size)
    rt.streamBeginCapture(s, 0)
    rt.memsetAsync(buf, 1, size, s)
    graph = rt.streamEndCapture(s)
    count("cudaStreamBeginCapture", 1)
    count("cudaStreamEndCapture", 1)
    count("cudaMemsetAsync", 1)
    exe = rt.graphInstantiate(graph)
    count("cudaGraphInstantiate", 1)
    for _ in range(N):
        rt.graphLaunch(exe, s)
    count("cudaGraphLaunch")
    rt.streamSynchronize(s)
    count("cudaStreamSynchronize", 1)
    rt.free(buf)
    count("cudaFree", 1)


def torch_graph():
    import torch

    x = torch.ones(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2  # warm-up outside the capture, as PyTorch asks
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    count("cudaStreamBeginCapture", 1)
    count("cudaStreamEndCapture", 1)
    count("cudaGraphInstantiate", 1)
    for _ in range(N):
        g.replay()
    count("cudaGraphLaunch")
    torch.cuda.synchronize()
    assert float(y[0]) == 3.0


KERNEL = r"""
extern "C" __global__ void bump(int *p) { p[blockIdx.x * blockDim.x + threadIdx.x] += 1; }
"""


class LaunchConfig(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("nattrs", ctypes.c_uint),
    ]


def driver_calls():
    import cupy

    cu = ctypes.CDLL("libcuda.so.1")

    def ck(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    ck(cu.cuInit(0), "cuInit")
    size = 1 << 20
    host = np.ones(size, dtype=np.uint8)
    h = ctypes.c_void_p(host.ctypes.data)
    ptrs = []
    for _ in range(N):
        p = ctypes.c_uint64()
        ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "cuMemAlloc_v2")
        ptrs.append(p.value)
    count("cuMemAlloc", b=size)
    d, d2 = ctypes.c_uint64(ptrs[0]), ctypes.c_uint64(ptrs[1])
    sz = ctypes.c_size_t(size)
    for _ in range(N):
        ck(cu.cuMemcpyHtoD_v2(d, h, sz), "cuMemcpyHtoD_v2")
        ck(cu.cuMemcpyDtoH_v2(h, d, sz), "cuMemcpyDtoH_v2")
        ck(cu.cuMemcpyDtoD_v2(d2, d, sz), "cuMemcpyDtoD_v2")
        ck(cu.cuMemcpy(d2, d, sz), "cuMemcpy")
    count("cuMemcpy", 4 * N, b=size)
    for _ in range(N):
        ck(cu.cuMemcpyHtoDAsync_v2(d, h, sz, None), "cuMemcpyHtoDAsync_v2")
        ck(cu.cuMemcpyDtoHAsync_v2(h, d, sz, None), "cuMemcpyDtoHAsync_v2")
        ck(cu.cuMemcpyDtoDAsync_v2(d2, d, sz, None), "cuMemcpyDtoDAsync_v2")
        ck(cu.cuMemcpyAsync(d2, d, sz, None), "cuMemcpyAsync")
    count("cuMemcpyAsync", 4 * N, b=size)
    for _ in range(N):
        ck(cu.cuStreamSynchronize(None), "cuStreamSynchronize")
    count("cuStreamSynchronize")
    for _ in range(N):
        ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    count("cuCtxSynchronize")
    managed = []
    for _ in range(N):
        p = ctypes.c_uint64()
        ck(cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(4096), 1), "cuMemAllocManaged")
        managed.append(p.value)
    count("cuMemAllocManaged", b=4096)

    # Kernels: compiled by CuPy (NVRTC), launched here through the driver with 8 blocks of 128.
    fn = cupy.RawKernel(KERNEL, "bump").kernel.ptr
    arg = ctypes.c_uint64(ptrs[2])
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    cu.cuMemsetD8_v2(ctypes.c_uint64(ptrs[2]), 0, sz)
    for _ in range(N):
        ck(cu.cuLaunchKernel(ctypes.c_void_p(fn), 8, 1, 1, 128, 1, 1, 0, None, params, None), "cuLaunchKernel")
    count("cuLaunchKernel")
    cfg = LaunchConfig(8, 1, 1, 128, 1, 1, 0, None, None, 0)
    for _ in range(N):
        ck(cu.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(fn), params, None), "cuLaunchKernelEx")
    count("cuLaunchKernelEx")
    ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    count("cuCtxSynchronize", 1)
    out = np.zeros(1024, dtype=np.int32)
    ck(cu.cuMemcpyDtoH_v2(ctypes.c_void_p(out.ctypes.data), ctypes.c_uint64(ptrs[2]), ctypes.c_size_t(4096)), "cuMemcpyDtoH_v2")
    count("cuMemcpy", 1)
    assert (out == 2 * N).all(), f"kernel ran {out[0]} times, not {2 * N}"
    for p in ptrs + managed:
        ck(cu.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
    count("cuMemFree", 2 * N)


def torch_kernels():
    import torch

    x = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    for _ in range(N):
        x.add_(1)  # one elementwise kernel each, through cudaLaunchKernel
    torch.cuda.synchronize()
    count("cudaLaunchKernel")
    assert float(x[0]) == 1 + N


def nccl_calls():
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    t = torch.ones(1 << 18, device="cuda")
    out = torch.empty_like(t)
    for _ in range(N):
        dist.all_reduce(t)
    count("ncclAllReduce", b=t.numel() * 4)
    for _ in range(N):
        dist.broadcast(t, 0)
    count("ncclBroadcast", b=t.numel() * 4)
    for _ in range(N):
        dist.reduce(t, 0)
    count("ncclReduce", b=t.numel() * 4)
    for _ in range(N):
        dist.all_gather_into_tensor(out, t)
    count("ncclAllGather")
    torch.cuda.synchronize()
    dist.destroy_process_group()

    # ncclReduceScatter itself, on the library already mapped (the one the probes are on).
    path = next(line.split()[-1] for line in open("/proc/self/maps") if "libnccl.so" in line)
    nccl = ctypes.CDLL(path)

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]

    uid, comm = UniqueId(), ctypes.c_void_p()
    for name, rc in (
        ("ncclGetUniqueId", nccl.ncclGetUniqueId(ctypes.byref(uid))),
        ("ncclCommInitRank", nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)),
    ):
        if rc != 0:
            raise RuntimeError(f"{name} returned {rc}")
    n = t.numel()
    for _ in range(N):
        # (sendbuff, recvbuff, recvcount, ncclFloat32 = 7, ncclSum = 0, comm, default stream)
        rc = nccl.ncclReduceScatter(
            ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_size_t(n),
            7, 0, comm, ctypes.c_void_p(0),
        )
        if rc != 0:
            raise RuntimeError(f"ncclReduceScatter returned {rc}")
    torch.cuda.synchronize()
    count("ncclReduceScatter", b=n * 4)
    nccl.ncclCommDestroy(comm)


for part in (runtime_calls, torch_graph, driver_calls, torch_kernels, nccl_calls):
    try:
        part()
    except Exception as e:  # keep going: report what could not run
        skipped[part.__name__] = f"{type(e).__name__}: {e}"
print(json.dumps({"did": did, "bytes": nbytes, "skipped": skipped}), flush=True)
sys.exit(0)
