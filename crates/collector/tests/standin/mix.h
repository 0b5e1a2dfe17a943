// The call mix of `loader`, the extension module and `workload late` (crates/collector/tests/it/mapped.rs
// `MIX`): 3 cudaMalloc, 2 cudaMemcpy, 200 cudaLaunchKernel, through the functions given (those
// linked in, or those dlsym found). Include after defining dim3.
#ifndef STANDIN_MIX_H
#define STANDIN_MIX_H

#include <stddef.h>

static void standin_mix_kernel(void) {}

static int standin_mix(int (*malloc_fn)(void **, size_t),
		       int (*memcpy_fn)(void *, const void *, size_t, int),
		       int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *))
{
	static char host[4096];
	void *d[3] = { 0 };
	for (int i = 0; i < 3; i++)
		malloc_fn(&d[i], 4096);
	memcpy_fn(d[0], host, 4096, 1);
	memcpy_fn(host, d[0], 4096, 2);
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	for (int i = 0; i < 200; i++)
		launch_fn((const void *)standin_mix_kernel, g, b, NULL, 0, NULL);
	return 0;
}

#endif
