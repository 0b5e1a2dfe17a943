// Stand-in CUDA driver (libcuda.so.1) for tests without a GPU: real names and signatures.
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUfunction;
typedef void *CUstream;
typedef struct CUlaunchConfig {
	unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

typedef void *CUmodule;
typedef void *CUlibrary;
typedef void *CUkernel;

static volatile unsigned long sink;

/* A function or kernel handle, as the driver hands out: an opaque heap pointer. */
struct standin_function { char name[64]; };

static CUresult new_handle(void **out, const char *name)
{
	if (!out || !name)
		return 1;
	struct standin_function *f = calloc(1, sizeof(*f));
	if (!f)
		return 2;
	strncpy(f->name, name, sizeof(f->name) - 1);
	*out = f;
	return 0;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	(void)hmod;
	return new_handle(hfunc, name);
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	(void)library;
	return new_handle(pKernel, name);
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	if (!pFunc || !kernel)
		return 1;
	/* A handle of its own, as the driver's is: only the collector's mapping names it. */
	*pFunc = malloc(1);
	return *pFunc ? 0 : 2;
}
static int sync_delay_ms;

void standinCuSetSyncDelayMs(int ms) { sync_delay_ms = ms; }

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* Exported functions never call each other: a probe on one would count the other's calls. */
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	*dptr = (CUdeviceptr)malloc(bytesize ? bytesize : 1);
	return 0;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	(void)flags;
	*dptr = (CUdeviceptr)malloc(bytesize ? bytesize : 1);
	return 0;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	free((void *)dptr);
	return 0;
}

static CUresult launch(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	sink = (unsigned long)f + gridDimX * gridDimY * gridDimZ + blockDimX * blockDimY * blockDimZ + sharedMemBytes +
	       (unsigned long)hStream + (unsigned long)kernelParams + (unsigned long)extra;
	return 0;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
			      config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
			      kernelParams, extra);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	memmove((void *)dst, (const void *)src, ByteCount);
	return 0;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	memmove((void *)dstDevice, srcHost, ByteCount);
	return 0;
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	memmove(dstHost, (const void *)srcDevice, ByteCount);
	return 0;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	memmove((void *)dstDevice, (const void *)srcDevice, ByteCount);
	return 0;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
	(void)hStream;
	memmove((void *)dstDevice, srcHost, ByteCount);
	return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	(void)hStream;
	memmove(dstHost, (const void *)srcDevice, ByteCount);
	return 0;
}

CUresult cuCtxSynchronize(void)
{
	sleep_ms(sync_delay_ms);
	return 0;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	(void)hStream;
	sleep_ms(sync_delay_ms);
	return 0;
}
