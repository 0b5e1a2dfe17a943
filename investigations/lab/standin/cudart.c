// The lab's stand-in CUDA runtime (libcudart.so.12): the runtime API's real names and
// signatures, and the registration entry points nvcc's generated code calls
// (__cudaRegisterFatBinary, __cudaRegisterFunction, __cudaPush/PopCallConfiguration).
//
// Like NVIDIA's runtime it loads the driver (libcuda.so.1) with dlopen on first use and does
// the work there: the modelled device lives in the driver (device.c). It reaches the model
// through the driver's private table, never through a probed cu* function, so that every
// traced call is counted once, as the call the program made. Exported functions never call
// each other for the same reason.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef struct dim3 {
	unsigned int x, y, z;
} dim3;
typedef dim3 uint3;

enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorInitializationError = 3,
	cudaErrorInsufficientDriver = 35,
	cudaErrorMissingConfiguration = 52,
};

static const struct lab_dev_api *A;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread cudaError_t last_error;

/* Registrations made before the driver is loaded (module constructors run at load time). */
struct pending {
	const void *host_fun;
	const char *name;
	struct rt_module *module;
};

struct rt_module {
	int ptx_only;
	void *drv; /* the driver's module, once loaded */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pend;
static size_t n_pend, cap_pend;

static void load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	const struct lab_dev_api *(*get)(int) = h ? (const struct lab_dev_api *(*)(int))dlsym(h, "labdevGetTable") : NULL;
	if (!get || !(A = get(LAB_DEV_API_VERSION))) {
		fprintf(stderr, "libcudart (lab): cannot load the lab's libcuda.so.1: %s\n", dlerror());
		return;
	}
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < n_pend; i++) {
		struct rt_module *m = pend[i].module;
		if (!m->drv)
			m->drv = A->register_module(m->ptx_only);
		A->register_function(m->drv, pend[i].host_fun, pend[i].name);
	}
	free(pend);
	pend = NULL;
	n_pend = cap_pend = 0;
	pthread_mutex_unlock(&reg_lock);
}

/* The driver's model, loading it on first use; NULL (and the error set) when unavailable. */
static const struct lab_dev_api *api(void)
{
	pthread_once(&once, load_driver);
	return A;
}

static cudaError_t ret(int rc)
{
	if (rc)
		last_error = rc;
	return rc;
}

#define API_OR_FAIL()                                                                   \
	const struct lab_dev_api *a = api();                                            \
	if (!a)                                                                         \
		return ret(cudaErrorInsufficientDriver)

/* ---- registration (called from the constructors nvcc generates) ---- */

struct fatbin_wrapper {
	int magic; /* 0x466243b1 */
	int version;
	const void *data;
	void *filename_or_fatbins;
};

/* The head of a fat binary, with the lab's field: whether it carries code for the device
 * (SASS) or only PTX, which the driver must JIT-compile before first use. */
struct lab_fatbin_header {
	unsigned int magic; /* 0xBA55ED50 */
	unsigned short version, header_size;
	unsigned long long fat_size;
	unsigned int ptx_only;
};

void **__cudaRegisterFatBinary(void *fatCubin)
{
	const struct fatbin_wrapper *w = fatCubin;
	struct rt_module *m = calloc(1, sizeof *m);
	void **handle = calloc(1, sizeof(void *));
	if (!m || !handle)
		abort();
	if (w && w->magic == 0x466243b1 && w->data) {
		const struct lab_fatbin_header *h = w->data;
		m->ptx_only = h->magic == 0xBA55ED50u && h->ptx_only;
	}
	*handle = m;
	return handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

void __cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	(void)deviceFun;
	(void)thread_limit;
	(void)tid;
	(void)bid;
	(void)bDim;
	(void)gDim;
	(void)wSize;
	struct rt_module *m = *fatCubinHandle;
	pthread_mutex_lock(&reg_lock);
	if (A) {
		if (!m->drv)
			m->drv = A->register_module(m->ptx_only);
		A->register_function(m->drv, hostFun, deviceName);
	} else {
		if (n_pend == cap_pend) {
			cap_pend = cap_pend ? cap_pend * 2 : 64;
			pend = realloc(pend, cap_pend * sizeof *pend);
			if (!pend)
				abort();
		}
		pend[n_pend++] = (struct pending){ hostFun, deviceName, m };
	}
	pthread_mutex_unlock(&reg_lock);
}

/* kernel<<<grid, block, shmem, stream>>>(args) pushes its configuration, then calls the host
 * stub, which pops it and calls cudaLaunchKernel with its own address. */
struct call_config {
	dim3 grid, block;
	size_t shmem;
	void *stream;
};

static __thread struct call_config configs[16];
static __thread int n_configs;

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream)
{
	if (n_configs == 16)
		return cudaErrorInvalidValue;
	configs[n_configs++] = (struct call_config){ gridDim, blockDim, sharedMem, stream };
	return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	if (!n_configs)
		return ret(cudaErrorMissingConfiguration);
	struct call_config c = configs[--n_configs];
	*gridDim = c.grid;
	*blockDim = c.block;
	*sharedMem = c.shmem;
	*(void **)stream = c.stream;
	return cudaSuccess;
}

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
	API_OR_FAIL();
	*count = a->device_count();
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	API_OR_FAIL();
	return ret(a->set_device(device));
}

cudaError_t cudaGetDevice(int *device)
{
	API_OR_FAIL();
	*device = a->get_device();
	return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
	API_OR_FAIL();
	return ret(a->set_flags(flags));
}

cudaError_t cudaDeviceSynchronize(void)
{
	API_OR_FAIL();
	return ret(a->device_sync());
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	*v = 12040;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	*v = api() ? 12040 : 0;
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = 0;
	return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case 0:
		return "no error";
	case 1:
		return "invalid argument";
	case 2:
		return "out of memory";
	case 35:
		return "CUDA driver version is insufficient for CUDA runtime version";
	case 98:
		return "invalid device function";
	case 101:
		return "invalid device ordinal";
	case 600:
		return "device not ready";
	default:
		return "unknown error";
	}
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	API_OR_FAIL();
	return ret(a->malloc(devPtr, size));
}

/* cudaFree(0) is the idiom that creates the context. */
cudaError_t cudaFree(void *devPtr)
{
	API_OR_FAIL();
	if (!devPtr)
		return ret(a->init());
	return ret(a->free(devPtr));
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	API_OR_FAIL();
	return ret(a->host_alloc(ptr, size));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	(void)flags;
	API_OR_FAIL();
	return ret(a->host_alloc(pHost, size));
}

cudaError_t cudaFreeHost(void *ptr)
{
	API_OR_FAIL();
	return ret(a->host_free(ptr));
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	(void)flags;
	API_OR_FAIL();
	return ret(a->host_register(ptr, size));
}

cudaError_t cudaHostUnregister(void *ptr)
{
	API_OR_FAIL();
	return ret(a->host_unregister(ptr));
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	API_OR_FAIL();
	return ret(a->mem_info(free_b, total_b));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	API_OR_FAIL();
	return ret(a->memcpy(dst, src, count, kind, NULL, 0));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, cudaStream_t stream)
{
	API_OR_FAIL();
	return ret(a->memcpy(dst, src, count, kind, stream, 1));
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	API_OR_FAIL();
	return ret(a->memset(devPtr, value, count, stream));
}

/* ---- kernels ---- */

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			     cudaStream_t stream)
{
	(void)blockDim;
	(void)args;
	(void)sharedMem;
	API_OR_FAIL();
	return ret(a->launch(func, (unsigned long long)gridDim.x * gridDim.y * gridDim.z, stream));
}

/* ---- streams and events ---- */

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	API_OR_FAIL();
	return ret(a->stream_create((struct lab_stream **)pStream, 0));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	API_OR_FAIL();
	return ret(a->stream_create((struct lab_stream **)pStream, flags));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	(void)priority;
	API_OR_FAIL();
	return ret(a->stream_create((struct lab_stream **)pStream, flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	API_OR_FAIL();
	return ret(a->stream_destroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	API_OR_FAIL();
	return ret(a->stream_sync(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	API_OR_FAIL();
	return a->stream_query(stream);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	(void)flags;
	API_OR_FAIL();
	return ret(a->stream_wait_event(stream, event));
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	API_OR_FAIL();
	return ret(a->event_create((struct lab_event **)event));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	(void)flags;
	API_OR_FAIL();
	return ret(a->event_create((struct lab_event **)event));
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	API_OR_FAIL();
	return ret(a->event_destroy(event));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	API_OR_FAIL();
	return ret(a->event_record(event, stream));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	API_OR_FAIL();
	return ret(a->event_sync(event));
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	API_OR_FAIL();
	return a->event_query(event);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	API_OR_FAIL();
	return ret(a->event_elapsed(ms, start, end));
}
