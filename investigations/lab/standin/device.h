// The lab's modelled GPU: the interface between the stand-in driver (libcuda.so.1, which owns
// the model, device.c), the stand-in runtime (libcudart.so.12) and the stand-in NCCL
// (libnccl.so.2), and the model's parameters.
//
// Why a model and not sleeps: the lab records real programs with the real collector, so the
// stand-in must make a program wait where a GPU would make it wait, for as long as the work
// it queued would take, and nowhere else. Everything below is host behaviour a tracer sees.
//
// THE MODEL (defaults; LAB_* environment variables override them for experiments, the lab's
// cases never do)
//
//   Device timeline. Each device has two engines, compute and copy, each a timeline shared by
//   every process on the machine that uses the device: a small shared-memory file
//   (/dev/shm/lab-<LAB_MACHINE>-gpu<N>) holds each engine's "busy until" time (CLOCK_MONOTONIC,
//   system-wide). An operation of device duration d queued on stream s at time t starts at
//   max(t, the end of s's previous operation, the engine's busy-until) and ends d later; the
//   engine is then busy until that end. Streams are FIFO queues; the legacy default stream
//   (NULL) waits for every blocking stream of the process and they wait for it, as in CUDA.
//   Processes sharing a device are served in the order their work was queued (contention).
//   The schedule is fixed when the work is queued; nothing runs on the host while the "device"
//   works, so the host sees exactly a GPU's asynchrony and no extra threads or wake-ups.
//   LAB_MACHINE names the machine (cases running side by side use different names, two
//   processes of one case share the device by using the same name and device index).
//   CUDA_VISIBLE_DEVICES (device indices) selects and renumbers the devices a process sees,
//   as in CUDA: with CUDA_VISIBLE_DEVICES=1, ordinal 0 is the machine's device 1.
//
//   Kernels. A launch's device duration is its block count (grid x*y*z) times
//   LAB_NS_PER_BLOCK = 1000 ns: the caller chooses the duration through the grid. The launch
//   itself costs LAB_LAUNCH_NS = 5000 ns of CPU on the calling thread (a calibrated busy loop,
//   so CPU contention makes launches slower, as it does NVIDIA's). A stream holds at most
//   LAB_QUEUE_DEPTH = 1024 queued operations; a launch into a full queue blocks until the
//   oldest completes (the host has run too far ahead of a busy GPU).
//   Kernels are the host stubs a module registers with __cudaRegisterFunction (as nvcc's
//   generated code does); launching anything else fails with cudaErrorInvalidDeviceFunction.
//
//   Cold start. The first call of a process creates its context: LAB_CTX_NS = 30 ms, blocked.
//   With CUDA_MODULE_LOADING=LAZY (the default, as in CUDA >= 12.2) the first launch of each
//   kernel on a device loads it: LAB_MODULE_LOAD_NS = 400 us blocked for a module with code
//   for the device (SASS); a PTX-only module (no code for this device) is JIT-compiled
//   instead: LAB_JIT_NS = 60 ms of CPU per kernel on the calling thread. EAGER loads every
//   registered kernel at context creation.
//
//   Synchronisation. cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize,
//   cuCtxSynchronize and cuStreamSynchronize block (sleep) until the modelled end of the work
//   they wait for: blocking sync (cudaDeviceScheduleBlockingSync).
//
//   Copies. Link bandwidth LAB_LINK_GBPS = 24 GB/s (PCIe 4.0 x16 in practice) on the copy
//   engine. Host-to-device from pageable memory (any memory not from cudaHostAlloc /
//   cudaMallocHost / cudaHostRegister) is staged as NVIDIA's driver does: the calling thread
//   memcpys the data into one of two 2 MiB pinned staging buffers (real CPU work, so CPU
//   contention slows it), each chunk is then transferred by the copy engine, and the call
//   returns when the last chunk has arrived, cudaMemcpyAsync included (a pageable async copy
//   is synchronous). From pinned memory, cudaMemcpyAsync is asynchronous copy-engine work
//   (bytes / link bandwidth) and cudaMemcpy waits for it. Device-to-host copies first wait
//   for the stream, then for the transfer, then (pageable destination) memcpy out of staging:
//   so torch's .item() (a 4-byte cudaMemcpyAsync into pageable memory) waits inside the copy.
//   Device memory holds no data (copies move bytes through staging, not into device memory):
//   a device-to-host copy returns zeros.
//
//   Memory. cudaMalloc costs LAB_MALLOC_NS = 60 us + 8 us per MiB (blocked) and reserves
//   address space only (never host memory); 80 GiB per device, shared by its processes.
//   cudaFree first synchronises the device (as NVIDIA's does), then costs 40 us + 4 us per
//   MiB. cudaHostAlloc maps, touches and locks real host memory (it counts against a memory
//   cgroup and cannot be reclaimed) and costs 10 us per MiB more.
//
//   NCCL (nccl.c). Ranks are processes on this machine; ncclCommInitRank connects them over a
//   Unix socket named by the ncclUniqueId (rank 0 listens). A collective meets every rank on
//   the host (rank 0 collects one message per rank, then releases them all), so a rank that
//   calls late makes the others wait inside the call, blocked in a socket read. The message
//   carries when the rank's stream reaches the collective; the transfer (ring all-reduce:
//   2(n-1)/n * bytes at LAB_NCCL_GBPS = 100 GB/s, + 20 us) starts on every rank's device when
//   the last rank's stream has reached it, so a rank whose GPU is behind makes the others'
//   GPUs wait (seen in their next sync), as NCCL's kernels do.
//
// WHERE IT DIFFERS FROM A REAL GPU
//   - Engines run one operation at a time: no concurrent kernels, no time-slicing between
//     processes (their work is served in queue order: a process queuing far ahead delays the
//     other's more than a real GPU's time slices would).
//   - Kernel duration depends on the grid only; no occupancy, clocks, caches or data.
//   - Syncs block; NVIDIA's default (cudaDeviceScheduleAuto) spins while the process has fewer
//     contexts than CPUs, so a real job also burns a core waiting.
//   - Collectives also rendezvous on the host (a real NCCL call returns once the work is
//     queued; its kernel waits on the device, the host later in a sync): here a late caller
//     holds the others inside the call. No data is reduced or moved; the rendezvous is a star.
//   - No unified memory, graphs are counted calls only, no device-side errors.
#ifndef LAB_DEVICE_H
#define LAB_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#define LAB_MAX_DEVICES 8
#define LAB_STREAM_NONBLOCKING 1u

/* Engines of a device. */
enum lab_engine { LAB_COMPUTE = 0, LAB_COPY = 1 };

/* Directions, numbered as cudaMemcpyKind. */
enum lab_dir { LAB_H2H = 0, LAB_H2D = 1, LAB_D2H = 2, LAB_D2D = 3, LAB_DEFAULT = 4 };

/* Return codes shared by the three libraries (the runtime's numbering; the driver maps them). */
enum lab_status {
	LAB_OK = 0,
	LAB_ERR_INVALID_VALUE = 1,
	LAB_ERR_MEMORY = 2,
	LAB_ERR_INIT = 3,
	LAB_ERR_INVALID_DEVICE = 101,
	LAB_ERR_INVALID_FUNCTION = 98,
	LAB_ERR_NOT_READY = 600,
};

struct lab_stream;
struct lab_event;

/* The model's entry points, exported by libcuda.so.1 as one table (labdevGetTable) so that the
 * runtime and NCCL reach the device without calling probed driver functions: a traced call is
 * then counted once, under the name the program called. */
struct lab_dev_api {
	int version;
	int (*init)(void);
	int (*device_count)(void);
	int (*set_device)(int dev);
	int (*get_device)(void);
	int (*set_flags)(unsigned flags);
	/* kernels: registration (module flags: bit 0 = PTX only) and launch */
	void *(*register_module)(int ptx_only);
	void (*register_function)(void *module, const void *host_fun, const char *name);
	int (*launch)(const void *func, uint64_t blocks, struct lab_stream *s);
	/* raw device work (NCCL transfers), starting no earlier than not_before (CLOCK_MONOTONIC) */
	int (*enqueue)(struct lab_stream *s, enum lab_engine e, uint64_t dur_ns, uint64_t not_before);
	uint64_t (*stream_ready)(struct lab_stream *s);
	int (*memcpy)(void *dst, const void *src, size_t n, int dir, struct lab_stream *s, int async);
	int (*memset)(void *dst, int v, size_t n, struct lab_stream *s);
	int (*malloc)(void **p, size_t n);
	int (*free)(void *p);
	int (*host_alloc)(void **p, size_t n);
	int (*host_free)(void *p);
	int (*host_register)(void *p, size_t n);
	int (*host_unregister)(void *p);
	int (*mem_info)(size_t *free_b, size_t *total_b);
	int (*stream_create)(struct lab_stream **s, unsigned flags);
	int (*stream_destroy)(struct lab_stream *s);
	int (*stream_sync)(struct lab_stream *s);
	int (*stream_query)(struct lab_stream *s);
	int (*device_sync)(void);
	int (*event_create)(struct lab_event **e);
	int (*event_destroy)(struct lab_event *e);
	int (*event_record)(struct lab_event *e, struct lab_stream *s);
	int (*event_sync)(struct lab_event *e);
	int (*event_query)(struct lab_event *e);
	int (*event_elapsed)(float *ms, struct lab_event *a, struct lab_event *b);
	int (*stream_wait_event)(struct lab_stream *s, struct lab_event *e);
	/* helpers for NCCL */
	uint64_t (*now_ns)(void);
	void (*sleep_until)(uint64_t t);
};

#define LAB_DEV_API_VERSION 2

/* Exported by libcuda.so.1. */
const struct lab_dev_api *labdevGetTable(int version);

#endif
