// Test program that loads the stand-in CUDA runtime with dlopen once it runs (as Python does), and
// links no CUDA library itself: nothing to attach before it starts.
//
//   loader LIB MS         dlopen LIB, wait MS, then 3 cudaMalloc, 2 cudaMemcpy, 200 cudaLaunchKernel
//   loader LIB MS ENTRY   dlopen LIB, wait MS, then call its ENTRY (extension.c's makes that mix)
//   loader fork LIB MS    fork; the child does `loader LIB MS`, the parent waits for it
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct dim3 { unsigned int x, y, z; } dim3;
typedef int (*malloc_fn)(void **p, size_t n);
typedef int (*memcpy_fn)(void *dst, const void *src, size_t n, int kind);
typedef int (*launch_fn)(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);

#include "mix.h"

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

int main(int argc, char **argv)
{
	if (argc > 3 && !strcmp(argv[1], "fork")) {
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child > 0) {
			int status = 0;
			waitpid(child, &status, 0);
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		}
		argv++;
		argc--;
	}
	if (argc < 3)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "loader: %s\n", dlerror());
		return 1;
	}
	if (argc > 3) {
		int (*entry)(void) = (int (*)(void))dlsym(h, argv[3]);
		if (!entry)
			return 1;
		sleep_ms(atoi(argv[2]));
		return entry();
	}
	malloc_fn cuda_malloc = (malloc_fn)dlsym(h, "cudaMalloc");
	memcpy_fn cuda_memcpy = (memcpy_fn)dlsym(h, "cudaMemcpy");
	launch_fn cuda_launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
	if (!cuda_malloc || !cuda_memcpy || !cuda_launch)
		return 1;
	sleep_ms(atoi(argv[2]));
	return standin_mix(cuda_malloc, cuda_memcpy, cuda_launch);
}
