// Stand-in CUDA runtime (libcudart.so.12) for tests without a GPU: real names and signatures.
//
// "Device memory" is host memory; copies are memcpy; kernel launches do a little work; the
// synchronize calls sleep for the delay set with standinSetSyncDelayMs (default 0).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
typedef struct dim3 { unsigned int x, y, z; } dim3;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
		      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0 };

static volatile unsigned long sink;
static int sync_delay_ms;

void standinSetSyncDelayMs(int ms) { sync_delay_ms = ms; }

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* Exported functions never call each other (a probe on one would count the other's calls),
 * except cudaMalloc, which calls the driver as the real runtime does. */
static cudaError_t do_malloc(void **devPtr, size_t size)
{
	if (size > ((size_t)1 << 40)) {
		*devPtr = 0;
		return 2; /* cudaErrorMemoryAllocation */
	}
	*devPtr = malloc(size ? size : 1);
	return 0;
}

/* Like NVIDIA's runtime, allocates through the driver when one is loaded (the real runtime
 * loads libcuda.so.1 and asks it for its entry points): cuMemAlloc_v2, looked up at run time,
 * is then called from here, a driver call made by the runtime, which causeway counts once,
 * as the cudaMalloc. */
cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	static int (*cu_alloc)(unsigned long long *, size_t);
	static int looked;
	if (!looked) {
		cu_alloc = (int (*)(unsigned long long *, size_t))dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
		looked = 1;
	}
	if (!cu_alloc || size > ((size_t)1 << 40))
		return do_malloc(devPtr, size);
	unsigned long long p = 0;
	int rc = cu_alloc(&p, size);
	*devPtr = (void *)p;
	return rc;
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	(void)flags;
	return do_malloc(devPtr, size);
}

cudaError_t cudaFree(void *devPtr)
{
	free(devPtr);
	return 0;
}

/* The handle of a kernel, as CUDA 13's runtime hands out for a host stub: an opaque pointer of its
 * own (a heap address, not the stub's). */
typedef struct standin_kernel { const void *entry; } *cudaKernel_t;

/* Shared by both entry points, as in NVIDIA's runtimes (neither calls the other). */
static cudaError_t get_kernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	if (!kernelPtr || !entryFuncAddr)
		return 1;
	cudaKernel_t k = malloc(sizeof(*k));
	if (!k)
		return 2;
	k->entry = entryFuncAddr;
	*kernelPtr = k;
	return 0;
}

cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return get_kernel(kernelPtr, entryFuncAddr);
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return get_kernel(kernelPtr, entryFuncAddr);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			     cudaStream_t stream);

/* As in NVIDIA's runtimes: a thunk into cudaLaunchKernel, which gets the handle as its function. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream)
{
	return cudaLaunchKernel(kernel, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			     cudaStream_t stream)
{
	unsigned long acc = (unsigned long)func + (unsigned long)args + sharedMem + (unsigned long)stream;
	for (unsigned int i = 0; i < gridDim.x * gridDim.y * gridDim.z + blockDim.x; i++)
		acc = acc * 31 + i;
	sink = acc;
	return 0;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	(void)kind;
	memmove(dst, src, count);
	return 0;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	(void)stream;
	(void)kind;
	memmove(dst, src, count);
	return 0;
}

static void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height)
{
	for (size_t r = 0; r < height; r++)
		memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			 enum cudaMemcpyKind kind)
{
	(void)kind;
	copy2d(dst, dpitch, src, spitch, width, height);
	return 0;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	(void)stream;
	(void)kind;
	copy2d(dst, dpitch, src, spitch, width, height);
	return 0;
}

cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
	(void)dstDevice;
	(void)srcDevice;
	memmove(dst, src, count);
	return 0;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
				cudaStream_t stream)
{
	(void)stream;
	(void)dstDevice;
	(void)srcDevice;
	memmove(dst, src, count);
	return 0;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	(void)stream;
	memset(devPtr, value, count);
	return 0;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	(void)stream;
	sleep_ms(sync_delay_ms);
	return 0;
}

cudaError_t cudaDeviceSynchronize(void)
{
	sleep_ms(sync_delay_ms);
	return 0;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	(void)event;
	sleep_ms(sync_delay_ms);
	return 0;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	(void)stream;
	(void)mode;
	return 0;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	(void)stream;
	*pGraph = (cudaGraph_t)0x6a0000;
	return 0;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	(void)flags;
	*pGraphExec = (cudaGraphExec_t)((unsigned long)graph + 1);
	return 0;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	sink = (unsigned long)graphExec + (unsigned long)stream;
	return 0;
}
