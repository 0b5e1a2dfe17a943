// The lab's stand-in CUDA driver (libcuda.so.1): the driver API's real names and signatures
// over the modelled device (device.c, linked into the same library). Exported functions never
// call each other (a probe on one would count the other's calls): they all go to the model.
#include <stddef.h>
#include <stdint.h>

#include "device.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;

static const struct lab_dev_api *api(void)
{
	static const struct lab_dev_api *a;
	if (!a)
		a = labdevGetTable(LAB_DEV_API_VERSION);
	return a;
}

/* The model's status as a CUresult (the numbers that differ: invalid function -> invalid
 * handle, 400). */
static CUresult cu(int rc) { return rc == LAB_ERR_INVALID_FUNCTION ? 400 : rc; }

CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return cu(api()->init());
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return 0;
}

CUresult cuDeviceGetCount(int *count)
{
	*count = api()->device_count();
	return 0;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (ordinal < 0 || ordinal >= api()->device_count())
		return 101;
	*device = ordinal;
	return 0;
}

CUresult cuCtxSynchronize(void) { return cu(api()->device_sync()); }

CUresult cuStreamSynchronize(CUstream hStream) { return cu(api()->stream_sync(hStream)); }

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	void *p = NULL;
	int rc = api()->malloc(&p, bytesize);
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return cu(rc);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return cu(api()->free((void *)(uintptr_t)dptr)); }

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return cu(api()->memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount, LAB_H2D, NULL, 0));
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return cu(api()->memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount, LAB_D2H, NULL, 0));
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
	return cu(api()->memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount, LAB_H2D, hStream, 1));
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	return cu(api()->memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount, LAB_D2H, hStream, 1));
}

/* In the lab a CUfunction is the host stub a module registered (what cuModuleGetFunction
 * would return for its name). */
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	(void)blockDimX;
	(void)blockDimY;
	(void)blockDimZ;
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	uint64_t blocks = (uint64_t)gridDimX * gridDimY * gridDimZ;
	return cu(api()->launch(f, blocks, hStream));
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	switch (error) {
	case 0:
		*pStr = "no error";
		break;
	case 2:
		*pStr = "out of memory";
		break;
	case 400:
		*pStr = "invalid resource handle";
		break;
	case 600:
		*pStr = "device not ready";
		break;
	default:
		*pStr = "unknown error";
	}
	return 0;
}
