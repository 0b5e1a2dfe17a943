// Stand-in for a Python extension module with the CUDA runtime linked in, as CuPy builds its
// `cupy_backends/cuda/api/runtime.*.so`: built with cudart.c and a version script that exports
// only standinExtensionRun, so the runtime's functions are local symbols (`t` in nm) and no
// libcudart is ever mapped.
//
//   standinExtensionRun()   3 cudaMalloc, 2 cudaMemcpy, 200 cudaLaunchKernel (loader.c's mix)
#include <stddef.h>

typedef struct dim3 { unsigned int x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);

static void kernel_a(void) {}

int standinExtensionRun(void)
{
	static char host[4096];
	void *d[3] = { 0 };
	for (int i = 0; i < 3; i++)
		cudaMalloc(&d[i], 4096);
	cudaMemcpy(d[0], host, 4096, 1);
	cudaMemcpy(host, d[0], 4096, 2);
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	for (int i = 0; i < 200; i++)
		cudaLaunchKernel((const void *)kernel_a, g, b, NULL, 0, NULL);
	return 0;
}
