// A program calling NVIDIA's real CUDA runtime (libcudart.so.12 or libcudart_static.a from the
// PyPI wheel, see scripts/deps.sh) in a known pattern, for the collector's tests on the real
// library. Without a GPU driver every call fails (cudaErrorInsufficientDriver) after entering and
// leaving the real function, which is all the probes need. The prototypes are the runtime's
// (cudaError_t is an int enum; dim3 is passed by value).
//
//   real OUT N [MS]  after MS ms (default 0): 3 cudaMalloc (1, 2, 3 MiB), 2 cudaMemcpy (4096
//                    bytes, host to device), N cudaLaunchKernel (func 0x1234, grid 2x3x4, block
//                    32x1x1), cudaStreamSynchronize, cudaDeviceSynchronize, cudaFree; writes
//                    "op return-code" per call to OUT; then one call of each other probed
//                    runtime function with distinct arguments (fake stream 0x5151, event
//                    0x7171, graph 0x6161: the runtime fails before it looks at them).
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
	unsigned x, y, z;
} dim3;

extern int cudaMalloc(void **devPtr, size_t size);
extern int cudaFree(void *devPtr);
extern int cudaMemcpy(void *dst, const void *src, size_t count, int kind);
extern int cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			    size_t sharedMem, void *stream);
extern int cudaStreamSynchronize(void *stream);
extern int cudaDeviceSynchronize(void);
extern int cudaMallocManaged(void **devPtr, size_t size, unsigned flags);
extern int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, void *stream);
extern int cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			size_t height, int kind);
extern int cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
			     size_t width, size_t height, int kind, void *stream);
extern int cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count);
extern int cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
			       size_t count, void *stream);
extern int cudaMemsetAsync(void *devPtr, int value, size_t count, void *stream);
extern int cudaEventSynchronize(void *event);
extern int cudaGraphLaunch(void *graphExec, void *stream);
extern int cudaStreamBeginCapture(void *stream, int mode);
extern int cudaStreamEndCapture(void *stream, void **pGraph);
extern int cudaGraphInstantiate(void **pGraphExec, void *graph, unsigned long long flags);

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: real OUT N [MS]\n");
		return 2;
	}
	FILE *out = fopen(argv[1], "w");
	if (!out)
		return 1;
	int n = atoi(argv[2]);
	int ms = argc > 3 ? atoi(argv[3]) : 0;
	struct timespec wait = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&wait, 0);
	static char host[4096];
	void *dev = 0;
	for (int i = 1; i <= 3; i++)
		fprintf(out, "cudaMalloc %d\n", cudaMalloc(&dev, (size_t)i << 20));
	for (int i = 0; i < 2; i++)
		fprintf(out, "cudaMemcpy %d\n", cudaMemcpy(dev, host, sizeof(host), 1));
	dim3 grid = {2, 3, 4}, block = {32, 1, 1};
	for (int i = 0; i < n; i++)
		fprintf(out, "cudaLaunchKernel %d\n",
			cudaLaunchKernel((const void *)0x1234, grid, block, 0, 0, 0));
	fprintf(out, "cudaStreamSynchronize %d\n", cudaStreamSynchronize(0));
	fprintf(out, "cudaDeviceSynchronize %d\n", cudaDeviceSynchronize());
	fprintf(out, "cudaFree %d\n", cudaFree(dev));

	void *stream = (void *)0x5151, *event = (void *)0x7171, *graph = (void *)0x6161;
	void *made = 0;
	fprintf(out, "cudaMallocManaged %d\n", cudaMallocManaged(&made, 5 << 20, 1));
	fprintf(out, "cudaMemcpyAsync %d\n", cudaMemcpyAsync(host, host, 4096, 2, stream));
	fprintf(out, "cudaMemcpy2D %d\n", cudaMemcpy2D(host, 256, host, 256, 64, 8, 1));
	fprintf(out, "cudaMemcpy2DAsync %d\n",
		cudaMemcpy2DAsync(host, 256, host, 256, 32, 4, 3, stream));
	fprintf(out, "cudaMemcpyPeer %d\n", cudaMemcpyPeer(host, 1, host, 0, 65536));
	fprintf(out, "cudaMemcpyPeerAsync %d\n", cudaMemcpyPeerAsync(host, 2, host, 0, 1024, stream));
	fprintf(out, "cudaMemsetAsync %d\n", cudaMemsetAsync(host, 7, 2048, stream));
	fprintf(out, "cudaEventSynchronize %d\n", cudaEventSynchronize(event));
	fprintf(out, "cudaGraphLaunch %d\n", cudaGraphLaunch(graph, stream));
	fprintf(out, "cudaStreamBeginCapture %d\n", cudaStreamBeginCapture(stream, 2));
	fprintf(out, "cudaStreamEndCapture %d\n", cudaStreamEndCapture(stream, &made));
	fprintf(out, "cudaGraphInstantiate %d\n", cudaGraphInstantiate(&made, graph, 0));
	return fclose(out) == 0 ? 0 : 1;
}
