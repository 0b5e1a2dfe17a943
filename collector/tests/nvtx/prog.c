//! An NVTX v3 caller for the collector's NVTX tests: known ranges, nesting, a domain and marks.
//
// NVTX v3's loader is header-only and its headers are not available offline here, so this file
// carries the part of it the injection ABI needs, written after the public headers
// (github.com/NVIDIA/NVTX nvtxDetail/nvtxImpl.h, nvtxInit.h): function-pointer slots that start
// as no-ops, the CORE and CORE2 tables of pointers to those slots, an export-table getter, and
// at the first call: getenv NVTX_INJECTION64_PATH, dlopen, dlsym InitializeInjectionNvtx2, call.
//
// Usage: prog run        the designed ranges (see collector/tests/it/nvtx.rs)
//        prog env FILE   writes NVTX_INJECTION64_PATH (or "unset") to FILE
//        prog bench N F  N push/pop pairs ("bench"), then writes ns per pair to F
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wchar.h>

typedef void (*fnptr)(void);
struct attrs { /* nvtxEventAttributes_v2 */
	uint16_t version, size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type, reserved0;
	uint64_t payload;
	int32_t message_type;
	const void *message;
};

static void noop(void) {}

/* CORE: 1 MarkEx 2 MarkA 3 MarkW 4 StartEx 5 StartA 6 StartW 7 End 8 PushEx 9 PushA 10 PushW
 * 11 Pop 12-15 naming; CORE2: 1 DomainMarkEx 2 StartEx 3 End 4 PushEx 5 Pop 6-9 ... 10
 * RegisterStringA 11 RegisterStringW 12 CreateA 13 CreateW 14 Destroy 15 Initialize. */
static fnptr core[16];
static fnptr core2[16];
static fnptr *core_table[17];
static fnptr *core2_table[17];

static int get_module_table(int module, fnptr ***out, unsigned int *size)
{
	if (module == 1) {
		*out = core_table;
		*size = 16;
		return 1;
	}
	if (module == 5) {
		*out = core2_table;
		*size = 16;
		return 1;
	}
	return 0;
}

static struct {
	size_t size;
	int (*get)(int, fnptr ***, unsigned int *);
} callbacks = {sizeof(callbacks), get_module_table};

static const void *get_export_table(uint32_t id)
{
	return id == 1 ? &callbacks : NULL;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init(void)
{
	for (int i = 0; i < 16; i++) {
		core[i] = noop;
		core2[i] = noop;
		core_table[i] = &core[i];
		core2_table[i] = &core2[i];
	}
	core_table[0] = core2_table[0] = NULL;
	const char *path = getenv("NVTX_INJECTION64_PATH");
	if (!path)
		return;
	void *h = dlopen(path, RTLD_LAZY);
	if (!h)
		return;
	int (*inject)(const void *(*)(uint32_t)) =
		(int (*)(const void *(*)(uint32_t)))dlsym(h, "InitializeInjectionNvtx2");
	if (inject)
		inject(get_export_table);
}
#define INIT() pthread_once(&once, init)
#define NOOP_OR(t, i, T) ((t)[i] == noop ? 0 : ((T)(t)[i]))

static int push_a(const char *m)
{
	INIT();
	int (*f)(const char *) = NOOP_OR(core, 9, int (*)(const char *));
	return f ? f(m) : -1;
}
static int push_w(const wchar_t *m)
{
	INIT();
	int (*f)(const wchar_t *) = NOOP_OR(core, 10, int (*)(const wchar_t *));
	return f ? f(m) : -1;
}
static int pop(void)
{
	INIT();
	int (*f)(void) = NOOP_OR(core, 11, int (*)(void));
	return f ? f() : -1;
}
static uint64_t start_a(const char *m)
{
	INIT();
	uint64_t (*f)(const char *) = NOOP_OR(core, 5, uint64_t (*)(const char *));
	return f ? f(m) : 0;
}
static void end(uint64_t id)
{
	INIT();
	void (*f)(uint64_t) = NOOP_OR(core, 7, void (*)(uint64_t));
	if (f)
		f(id);
}
static void mark_a(const char *m)
{
	INIT();
	void (*f)(const char *) = NOOP_OR(core, 2, void (*)(const char *));
	if (f)
		f(m);
}
static void *domain_create(const char *name)
{
	INIT();
	void *(*f)(const char *) = NOOP_OR(core2, 12, void *(*)(const char *));
	return f ? f(name) : NULL;
}
static void *register_string(void *d, const char *s)
{
	INIT();
	void *(*f)(void *, const char *) = NOOP_OR(core2, 10, void *(*)(void *, const char *));
	return f ? f(d, s) : NULL;
}
static int domain_push(void *d, const struct attrs *a)
{
	INIT();
	int (*f)(void *, const struct attrs *) =
		NOOP_OR(core2, 4, int (*)(void *, const struct attrs *));
	return f ? f(d, a) : -1;
}
static int domain_pop(void *d)
{
	INIT();
	int (*f)(void *) = NOOP_OR(core2, 5, int (*)(void *));
	return f ? f(d) : -1;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

static uint64_t started_id;
static void *ender(void *arg)
{
	(void)arg;
	end(started_id); /* start/end ranges may end on another thread */
	return NULL;
}

/* The design (collector/tests/it/nvtx.rs checks it):
 *   "load" start/end, started on the main thread, ended on another, around everything below
 *   3 x "train_step" (depth 0), each:
 *       "forward" (depth 1, 2 ms)
 *       "backward" (depth 1) > "allreduce" (depth 2, 1 ms)
 *       io:"read_shard" (domain io, registered string, depth 1, 1 ms)
 *       L"wide_é" (depth 1, pushed with the W variant)
 *   mark "checkpoint" after the loop (depth 0) */
static int run(void)
{
	started_id = start_a("load");
	void *io = domain_create("io");
	void *shard = register_string(io, "read_shard");
	struct attrs a = {3, sizeof(struct attrs), 0, 0, 0, 0, 0, 0, 3, shard};
	for (int i = 0; i < 3; i++) {
		if (push_a("train_step") != 0)
			return 2;
		push_a("forward");
		sleep_ms(2);
		pop();
		push_a("backward");
		if (push_a("allreduce") != 2)
			return 3;
		sleep_ms(1);
		pop();
		pop();
		domain_push(io, &a);
		sleep_ms(1);
		domain_pop(io);
		push_w(L"wide_\u00e9");
		pop();
		pop();
	}
	mark_a("checkpoint");
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
		push_a("own");
		pop();
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "bench")) {
		long n = atol(argv[2]);
		push_a("warm");
		pop();
		uint64_t t0 = now();
		for (long i = 0; i < n; i++) {
			push_a("bench");
			pop();
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
