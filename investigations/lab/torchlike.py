"""torchlike: the lab's thin torch-like layer over the stand-in CUDA stack (ctypes).

It makes the calls PyTorch makes, in the same order and from the same kind of threads and
processes, so that a recording of a lab workload looks like a recording of a PyTorch job:
a caching allocator (cudaMalloc once, reuse, cudaFree only in empty_cache()), kernel launches
through the kernels' host stubs (kernel<<<...>>>), .item() as a 4-byte cudaMemcpyAsync into
pageable memory followed by cudaStreamSynchronize, pinned host buffers from cudaHostAlloc, a
multiprocessing DataLoader whose worker processes decode real files and hand batches over in
shared memory, a pin-memory thread, NCCL process groups, and torch.cuda.nvtx's ranges (over
the stand-in libnvToolsExt, whose calls are no-ops unless a tool injects NVTX handlers).

Device time is chosen by the caller: a kernel of `us` microseconds is launched with a grid of
`us` blocks (the model's 1 us per block, standin/device.h).
"""

import contextlib
import ctypes
import mmap
import os
import queue
import sys
import threading
import time
import zlib
import hashlib
import multiprocessing as mp

# ---------------------------------------------------------------------------------------------
# The libraries, from the environment's site-packages (as PyTorch loads pip's CUDA wheels).

_SITE = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "nvidia")))
_RT_PATH = os.path.join(_SITE, "nvidia", "cuda_runtime", "lib", "libcudart.so.12")
_NCCL_PATH = os.path.join(_SITE, "nvidia", "nccl", "lib", "libnccl.so.2")
_NVTX_PATH = os.path.join(_SITE, "nvidia", "nvtx", "lib", "libnvToolsExt.so.1")


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


_rt = None
_kernels = {}
_kernel_lib = None
_libc = ctypes.CDLL(None, use_errno=True)

H2D, D2H = 1, 2


def set_thread_name(name):
    """Names the calling thread (its comm), as PyTorch names its worker threads."""
    _libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def host_work(ms):
    """ms of the calling thread's CPU time in Python: the host-side work of a step (collating a
    batch, a framework's hooks, metrics and logging). CPU time, so a contended thread takes
    longer."""
    end = time.thread_time() + ms / 1000
    acc = 0
    while time.thread_time() < end:
        for i in range(2000):
            acc += i * i
    return acc


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"CUDA error {rc} in {what}: {_rt.cudaGetErrorString(rc).decode()}")


def _load(ptx_only=False):
    """Loads the runtime and the kernel module (the PTX-only build: the cold-start case)."""
    global _rt, _kernel_lib
    if _rt is not None:
        return
    _rt = ctypes.CDLL(_RT_PATH, mode=ctypes.RTLD_GLOBAL)
    _rt.cudaGetErrorString.restype = ctypes.c_char_p
    _rt.__cudaPushCallConfiguration.argtypes = [dim3, dim3, ctypes.c_size_t, ctypes.c_void_p]
    _rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                    ctypes.c_void_p]
    _rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    _rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    _rt.cudaFree.argtypes = [ctypes.c_void_p]
    _rt.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
    _rt.cudaFreeHost.argtypes = [ctypes.c_void_p]
    _rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    name = "liblab_kernels_ptx.so" if ptx_only else "liblab_kernels.so"
    _kernel_lib = ctypes.CDLL(os.path.join(_SITE, "lab_kernels", name))
    _kernel_lib.lab_kernels_alias.restype = ctypes.c_char_p
    _kernel_lib.lab_kernels_name.restype = ctypes.c_char_p
    for i in range(_kernel_lib.lab_kernels_count()):
        alias = _kernel_lib.lab_kernels_alias(i).decode()
        stub = getattr(_kernel_lib, _kernel_lib.lab_kernels_name(i).decode())
        stub.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        _kernels[alias] = stub


def kernel_names():
    return sorted(_kernels)


# ---------------------------------------------------------------------------------------------
# cuda: devices, the caching allocator, synchronisation.


class _Allocator:
    """PyTorch's caching allocator, reduced: blocks rounded to 2 MiB (small ones to 512 B)
    are kept when freed and reused for the same size; empty_cache() returns them with cudaFree."""

    def __init__(self):
        self.cached = {}
        self.allocated = 0

    @staticmethod
    def _round(n):
        return (n + 511) // 512 * 512 if n <= (1 << 20) else (n + (2 << 20) - 1) // (2 << 20) * (2 << 20)

    def alloc(self, nbytes):
        size = self._round(max(nbytes, 1))
        blocks = self.cached.get(size)
        if blocks:
            return blocks.pop(), size
        p = ctypes.c_void_p()
        _check(_rt.cudaMalloc(ctypes.byref(p), size), "cudaMalloc")
        self.allocated += size
        return p.value, size

    def release(self, ptr, size):
        self.cached.setdefault(size, []).append(ptr)

    def empty_cache(self):
        for size, blocks in self.cached.items():
            for p in blocks:
                _check(_rt.cudaFree(p), "cudaFree")
                self.allocated -= size
        self.cached = {}


class _Nvtx:
    """torch.cuda.nvtx: range_push/range_pop/mark and the range() context manager, through
    nvtxRangePushA, nvtxRangePop and nvtxMarkA of libnvToolsExt (as torch._C._nvtx calls them).
    Without an injection library (NVTX_INJECTION64_PATH) each call is a ctypes call into a no-op;
    under `causeway trace` the ranges are recorded, and repeated outermost ones are the steps."""

    def __init__(self):
        self._lib = None

    def _nvtx(self):
        if self._lib is None:
            lib = ctypes.CDLL(_NVTX_PATH)
            lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
            lib.nvtxMarkA.argtypes = [ctypes.c_char_p]
            lib.nvtxMarkA.restype = None
            self._lib = lib
        return self._lib

    def range_push(self, msg):
        """Opens a range on the calling thread; its depth (0: outermost), or -1 when no tool listens."""
        return self._nvtx().nvtxRangePushA(msg.encode())

    def range_pop(self):
        """Closes the calling thread's innermost range."""
        return self._nvtx().nvtxRangePop()

    def mark(self, msg):
        self._nvtx().nvtxMarkA(msg.encode())

    @contextlib.contextmanager
    def range(self, msg):
        """`with nvtx.range("step 3"):` a range around the block."""
        self.range_push(msg)
        try:
            yield
        finally:
            self.range_pop()


class _Cuda:
    def __init__(self):
        self.allocator = None
        self.device = 0
        self.nvtx = _Nvtx()

    def init(self, device=0, ptx_only=False, warmup_s=0.3):
        """Loads the stack, creates the context (cudaFree(0)) and waits warmup_s so that a
        tracer that attaches when the library is mapped is in place before the work starts."""
        _load(ptx_only)
        self.device = device
        _check(_rt.cudaSetDevice(device), "cudaSetDevice")
        _check(_rt.cudaFree(None), "cudaFree(0)")
        self.allocator = _Allocator()
        time.sleep(warmup_s)

    def synchronize(self):
        _check(_rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def empty_cache(self):
        self.allocator.empty_cache()

    def memory_allocated(self):
        return self.allocator.allocated


cuda = _Cuda()


class Tensor:
    """A device tensor: a block of the caching allocator."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.ptr, self._size = cuda.allocator.alloc(nbytes)

    def free(self):
        if self.ptr is not None:
            cuda.allocator.release(self.ptr, self._size)
            self.ptr = None

    def item(self):
        """A 4-byte copy into pageable memory and a stream sync: torch's .item()."""
        out = ctypes.c_float()
        _check(_rt.cudaMemcpyAsync(ctypes.byref(out), self.ptr, 4, D2H, None), "cudaMemcpyAsync")
        _check(_rt.cudaStreamSynchronize(None), "cudaStreamSynchronize")
        return out.value


def launch(kernel, us, out=None, inp=None, stream=None):
    """kernel<<<us blocks, 256 threads, 0, stream>>>(out, inp): `us` microseconds of device time."""
    blocks = max(int(us), 1)
    _rt.__cudaPushCallConfiguration(dim3(blocks, 1, 1), dim3(256, 1, 1), 0, stream)
    rc = _kernels[kernel](out, inp)
    if rc:
        _check(rc, kernel)


def memset(t, value=0, stream=None):
    _check(_rt.cudaMemsetAsync(t.ptr, value, t.nbytes, stream), "cudaMemsetAsync")


class HostBuffer:
    """Host memory for a batch: pageable (an anonymous mapping) or pinned (cudaHostAlloc)."""

    def __init__(self, nbytes, pinned=False):
        self.nbytes = nbytes
        self.pinned = pinned
        if pinned:
            p = ctypes.c_void_p()
            _check(_rt.cudaHostAlloc(ctypes.byref(p), nbytes, 0), "cudaHostAlloc")
            self.addr = p.value
            self._keep = None
        else:
            self._keep = mmap.mmap(-1, nbytes)
            self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self._keep))

    def fill_from(self, view):
        ctypes.memmove(self.addr, (ctypes.c_char * len(view)).from_buffer(view), len(view))


def to_device(host, nbytes=None, non_blocking=False, out=None):
    """host (a HostBuffer or a writable buffer) -> a device Tensor, as tensor.to('cuda') copies:
    cudaMemcpyAsync on the current stream, followed by a sync unless non_blocking (from
    pageable memory the copy is synchronous anyway)."""
    if isinstance(host, HostBuffer):
        addr, n = host.addr, nbytes or host.nbytes
    else:
        n = nbytes or len(host)
        addr = ctypes.addressof((ctypes.c_char * n).from_buffer(host))
    t = out or Tensor(n)
    _check(_rt.cudaMemcpyAsync(t.ptr, addr, n, H2D, None), "cudaMemcpyAsync")
    if not non_blocking:
        _check(_rt.cudaStreamSynchronize(None), "cudaStreamSynchronize")
    return t


# ---------------------------------------------------------------------------------------------
# A model: a step is a forward, a backward and an optimizer step's worth of launches.


class Model:
    """`layers` blocks of (GEMM, bias add, GELU, dropout) forward and twice the GEMM work
    backward, a loss, and a fused Adam step; activations come from the caching allocator and
    go back to it at the end of the step, as autograd frees them.

    gemm_us: device time of a forward GEMM; small_us: of each elementwise kernel; act_bytes:
    activation bytes per layer (what empty_cache() gives back and the next step re-allocates)."""

    def __init__(self, layers=4, gemm_us=1500, small_us=40, act_bytes=32 << 20, extra_small=0, allocs_per_layer=1,
                 variety=False):
        self.layers = layers
        self.gemm_us = gemm_us
        self.small_us = small_us
        self.act_bytes = act_bytes
        self.extra_small = extra_small
        self.allocs_per_layer = max(allocs_per_layer, 1)
        # variety: the extra kernels cycle through every kernel of the module (a model using
        # many different kernels: each one's first launch loads it)
        self.cycle = [k for k in kernel_names() if not k.startswith("gemm")] if variety else ["mul_bf16"]
        self.next_kernel = 0
        self.params = [Tensor(4 << 20) for _ in range(layers)]
        self.grads = [Tensor(4 << 20) for _ in range(layers)]
        self.step_marker = Tensor(4096)

    def device_us_per_step(self):
        """The device time one step queues (the lab's checks use it to turn steps into GPU time)."""
        fwd = self.layers * (self.gemm_us + 3 * self.small_us + self.extra_small * self.small_us) + 2 * self.small_us
        bwd = self.small_us + self.layers * (self.extra_small * self.small_us + 3 * self.small_us + 2 * self.gemm_us)
        return fwd + bwd + self.small_us * self.layers

    def _extra(self, a):
        for _ in range(self.extra_small):
            launch(self.cycle[self.next_kernel % len(self.cycle)], self.small_us, a.ptr, a.ptr)
            self.next_kernel += 1

    def forward(self, x):
        acts = []
        for i in range(self.layers):
            # activations of different sizes, as a layer's intermediate tensors are
            for k in range(self.allocs_per_layer - 1):
                acts.append(Tensor(self.act_bytes // (k + 2)))
            a = Tensor(self.act_bytes)
            acts.append(a)
            launch("gemm_fwd", self.gemm_us, a.ptr, x.ptr)
            launch("add_bf16", self.small_us, a.ptr, self.params[i].ptr)
            launch("gelu_bf16", self.small_us, a.ptr, a.ptr)
            launch("dropout", self.small_us, a.ptr, a.ptr)
            self._extra(a)
            x = a
        loss = Tensor(4)
        launch("softmax_fwd", self.small_us, x.ptr, x.ptr)
        launch("nll_loss", self.small_us, loss.ptr, x.ptr)
        return loss, acts

    def backward(self, loss, acts):
        launch("softmax_bwd", self.small_us, acts[-1].ptr, loss.ptr)
        for i in reversed(range(self.layers)):
            a = acts[(i + 1) * self.allocs_per_layer - 1]
            self._extra(a)
            launch("mul_generic", self.small_us, a.ptr, a.ptr)  # dropout mask
            launch("mul_bf16", self.small_us, a.ptr, a.ptr)  # gelu backward
            launch("gemm_dgrad", self.gemm_us, a.ptr, self.params[i].ptr)
            launch("gemm_wgrad", self.gemm_us, self.grads[i].ptr, a.ptr)
            launch("sum_bf16", self.small_us, self.grads[i].ptr, a.ptr)  # bias grad
        for a in acts:
            a.free()

    def optimizer_step(self):
        launch("adam", self.small_us * self.layers, self.params[0].ptr, self.grads[0].ptr)
        # zero_grad(set_to_none=False): one memset per step, the lab's step marker in recordings
        memset(self.step_marker)

    def step(self, x):
        loss, acts = self.forward(x)
        self.backward(loss, acts)
        self.optimizer_step()
        return loss


# ---------------------------------------------------------------------------------------------
# The input pipeline: a multiprocessing DataLoader over files on disk.


class FileDataset:
    """Samples are files in `root` (written by lab_data.py): zlib-compressed (.z) or stored as
    they are (.raw, as arrays saved with numpy are). Loading one reads the file, decompresses
    it (.z) and runs `decode_passes` passes of a hash over it (the CPU work of decoding and
    augmenting an image) into the batch's slot; a .raw sample is read straight into the slot."""

    def __init__(self, root, decode_passes=1, remote=None):
        self.root = root
        self.files = sorted(f for f in os.listdir(root) if f.endswith((".z", ".raw")))
        self.decode_passes = decode_passes
        self.remote = remote
        self._sock = None

    def __len__(self):
        return len(self.files)

    def _read(self, name):
        if self.remote is None:
            with open(os.path.join(self.root, name), "rb") as f:
                return f.read()
        return self._fetch(name)

    def _fetch(self, name):
        """From the remote sample server (lab_data.py serve): 'GET name\\n' -> length + bytes."""
        import socket
        if self._sock is None:
            self._sock = socket.create_connection(self.remote)
        self._sock.sendall(b"GET " + name.encode() + b"\n")
        head = self._recv_exact(8)
        return self._recv_exact(int.from_bytes(head, "little"))

    def _recv_exact(self, n):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            r = self._sock.recv_into(view[got:], n - got)
            if r == 0:
                raise ConnectionError("sample server closed the connection")
            got += r
        return bytes(buf)

    def load_into(self, i, out):
        """Sample i into the writable buffer `out` (its first len(out) bytes)."""
        name = self.files[i % len(self.files)]
        if name.endswith(".raw") and self.remote is None:
            with open(os.path.join(self.root, name), "rb", buffering=0) as f:
                f.readinto(out)
            data = out
        else:
            data = zlib.decompress(self._read(name))
            n = min(len(data), len(out))
            out[:n] = data[:n]
        for _ in range(self.decode_passes):
            hashlib.blake2b(data).digest()


def _worker_loop(dataset, slots, index_q, done_q, worker_id):
    set_thread_name("pt_data_worker")
    while True:
        job = index_q.get()
        if job is None:
            return
        batch_no, slot, indices = job
        view = slots.view(slot)
        for k, i in enumerate(indices):
            dataset.load_into(i, view[k * slots.sample_bytes:(k + 1) * slots.sample_bytes])
        done_q.put((batch_no, slot))


class _Slots:
    """Shared memory that workers write batches into (PyTorch passes tensors in shared memory
    too): one slot per batch in flight."""

    def __init__(self, n, batch_size, sample_bytes):
        self.sample_bytes = sample_bytes
        self.slot_bytes = batch_size * sample_bytes
        self.buf = mmap.mmap(-1, n * self.slot_bytes)

    def view(self, slot):
        return memoryview(self.buf)[slot * self.slot_bytes:(slot + 1) * self.slot_bytes]


class DataLoader:
    """torch.utils.data.DataLoader, reduced: `num_workers` forked worker processes, each with
    `prefetch_factor` batches in flight, batches returned in order; with pin_memory a thread
    copies each batch into a pinned buffer (as PyTorch's pin-memory thread does)."""

    def __init__(self, dataset, batch_size, sample_bytes, num_workers=2, prefetch_factor=2, pin_memory=False,
                 batches=None):
        self.dataset = dataset
        self.batch_size = batch_size
        self.sample_bytes = sample_bytes
        self.num_workers = max(num_workers, 1)
        self.prefetch = self.num_workers * prefetch_factor
        self.pin_memory = pin_memory
        self.batches = batches
        ctx = mp.get_context("fork")
        self.slots = _Slots(self.prefetch + 1, batch_size, sample_bytes)
        self.free_slots = list(range(self.prefetch + 1))
        self.index_qs = [ctx.Queue() for _ in range(self.num_workers)]
        self.done_q = ctx.Queue()
        self.workers = [ctx.Process(target=_worker_loop, args=(dataset, self.slots, self.index_qs[w], self.done_q, w),
                                    daemon=True) for w in range(self.num_workers)]
        for w in self.workers:
            w.start()
        self.sent = 0
        self.next = 0
        self.ready = {}
        self.pinned_q = None
        if pin_memory:
            self.pinned = [HostBuffer(self.slots.slot_bytes, pinned=True) for _ in range(2)]
            self.pinned_free = queue.Queue()
            for i in range(2):
                self.pinned_free.put(i)
            self.pinned_q = queue.Queue(maxsize=1)
            self.pin_thread = threading.Thread(target=self._pin_loop, daemon=True)
            self.pin_thread.start()

    def _send(self):
        while self.free_slots and self.sent - self.next < self.prefetch and \
                (self.batches is None or self.sent < self.batches):
            slot = self.free_slots.pop()
            first = self.sent * self.batch_size
            indices = [(first + k) % len(self.dataset) for k in range(self.batch_size)]
            self.index_qs[self.sent % self.num_workers].put((self.sent, slot, indices))
            self.sent += 1

    def _next_slot(self):
        """The next batch's slot, in order (the main thread waits here when input is late)."""
        self._send()
        while self.next not in self.ready:
            b, slot = self.done_q.get()
            self.ready[b] = slot
        slot = self.ready.pop(self.next)
        self.next += 1
        return slot

    def _pin_loop(self):
        set_thread_name("pt_pin_memory")
        while True:
            slot = self._next_slot()
            i = self.pinned_free.get()
            self.pinned[i].fill_from(self.slots.view(slot))
            self.free_slots.append(slot)
            self.pinned_q.put(i)

    def __iter__(self):
        return self

    def __next__(self):
        """A batch: (HostBuffer, release) for pinned batches, else (memoryview, release)."""
        if self.batches is not None and self.next >= self.batches and not self.pin_memory:
            raise StopIteration
        if self.pin_memory:
            i = self.pinned_q.get()
            return self.pinned[i], lambda: self.pinned_free.put(i)
        slot = self._next_slot()
        return self.slots.view(slot), lambda: self.free_slots.append(slot)

    def close(self):
        for q in self.index_qs:
            q.put(None)
        for w in self.workers:
            w.join(timeout=2)
            if w.is_alive():
                w.terminate()


# ---------------------------------------------------------------------------------------------
# torch.distributed over NCCL.


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class ProcessGroup:
    def __init__(self, rank, world, unique_id):
        self.nccl = ctypes.CDLL(_NCCL_PATH)
        self.nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.comm = ctypes.c_void_p()
        uid = ncclUniqueId()
        uid.internal = unique_id.encode()
        rc = self.nccl.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank)
        if rc:
            raise RuntimeError(f"ncclCommInitRank: {rc}")

    def all_reduce(self, t):
        rc = self.nccl.ncclAllReduce(t.ptr, t.ptr, t.nbytes // 4, 7, 0, self.comm, None)  # float32, sum
        if rc:
            raise RuntimeError(f"ncclAllReduce: {rc}")


def new_unique_id():
    return f"lab-nccl-{os.getpid()}-{time.monotonic_ns()}"
