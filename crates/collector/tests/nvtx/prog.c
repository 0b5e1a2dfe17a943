//! An NVTX v3 caller for the collector's NVTX tests: known ranges, nesting, a domain and marks.
//
// The NVTX v3 loader (no-op slots until NVTX_INJECTION64_PATH is loaded) is ../../nvtx/loader.h,
// shared with the workload lab's stand-in libnvToolsExt.
//
// Usage: prog run        the designed ranges (see crates/collector/tests/it/nvtx.rs)
//        prog env FILE   writes NVTX_INJECTION64_PATH (or "unset") to FILE
//        prog bench N F  N push/pop pairs ("bench"), then writes ns per pair to F
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wchar.h>

#include "../../nvtx/loader.h"

static void sleep_ms(int ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

static uint64_t started_id;
static void *ender(void *arg)
{
	(void)arg;
	nvtx_end(started_id); /* start/end ranges may end on another thread */
	return NULL;
}

/* The design (crates/collector/tests/it/nvtx.rs checks it):
 *   "load" start/end, started on the main thread, ended on another, around everything below
 *   3 x "train_step" (depth 0), each:
 *       "forward" (depth 1, 2 ms)
 *       "backward" (depth 1) > "allreduce" (depth 2, 1 ms)
 *       io:"read_shard" (domain io, registered string, depth 1, 1 ms)
 *       L"wide_é" (depth 1, pushed with the W variant)
 *   mark "checkpoint" after the loop (depth 0) */
static int run(void)
{
	started_id = nvtx_start_a("load");
	void *io = nvtx_domain_create("io");
	void *shard = nvtx_register_string(io, "read_shard");
	struct nvtx_attrs a = {3, sizeof(struct nvtx_attrs), 0, 0, 0, 0, 0, 0, 3, shard};
	for (int i = 0; i < 3; i++) {
		if (nvtx_push_a("train_step") != 0)
			return 2;
		nvtx_push_a("forward");
		sleep_ms(2);
		nvtx_pop();
		nvtx_push_a("backward");
		if (nvtx_push_a("allreduce") != 2)
			return 3;
		sleep_ms(1);
		nvtx_pop();
		nvtx_pop();
		nvtx_domain_push(io, &a);
		sleep_ms(1);
		nvtx_domain_pop(io);
		nvtx_push_w(L"wide_\u00e9");
		nvtx_pop();
		nvtx_pop();
	}
	nvtx_mark_a("checkpoint");
	pthread_t t;
	pthread_create(&t, NULL, ender, NULL);
	pthread_join(t, NULL);
	return 0;
}

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return run();
	if (argc >= 3 && !strcmp(argv[1], "env")) {
		FILE *f = fopen(argv[2], "w");
		if (!f)
			return 1;
		const char *v = getenv("NVTX_INJECTION64_PATH");
		fprintf(f, "%s", v ? v : "unset");
		fclose(f);
		nvtx_push_a("own");
		nvtx_pop();
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "bench")) {
		long n = atol(argv[2]);
		nvtx_push_a("warm");
		nvtx_pop();
		uint64_t t0 = now();
		for (long i = 0; i < n; i++) {
			nvtx_push_a("bench");
			nvtx_pop();
		}
		uint64_t t1 = now();
		FILE *f = fopen(argv[3], "w");
		if (!f)
			return 1;
		fprintf(f, "%.1f\n", (double)(t1 - t0) / (double)n);
		fclose(f);
		return 0;
	}
	fprintf(stderr, "usage: prog run | env FILE | bench N FILE\n");
	return 1;
}
