// Stand-in for a Python extension module with the CUDA runtime linked in, as CuPy builds its
// `cupy_backends/cuda/api/runtime.*.so`: built with cudart.c and a version script that exports
// only standinExtensionRun, so the runtime's functions are local symbols (`t` in nm) and no
// libcudart is ever mapped.
//
//   standinExtensionRun()   3 cudaMalloc, 2 cudaMemcpy, 200 cudaLaunchKernel (mix.h)
#include <stddef.h>

typedef struct dim3 { unsigned int x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);

#include "mix.h"

int standinExtensionRun(void)
{
	return standin_mix(cudaMalloc, cudaMemcpy, cudaLaunchKernel);
}
