//! The caller's side of NVTX v3: what a program's nvtxRangePushA & co. do before and after an injection library is loaded.
//
// NVTX v3's loader is header-only and its headers are not available offline here, so this file
// carries the part of it the injection ABI needs, written after the public headers
// (github.com/NVIDIA/NVTX nvtxDetail/nvtxImpl.h, nvtxInit.h): function-pointer slots that start
// as no-ops, the CORE and CORE2 tables of pointers to those slots, an export-table getter, and
// at the first call: getenv NVTX_INJECTION64_PATH, dlopen, dlsym InitializeInjectionNvtx2, call.
// It sits beside inject.c (the injection side of the same ABI) and is included by both callers
// that stand in for an NVTX user: the collector's test program (tests/nvtx/prog.c) and the
// workload lab's libnvToolsExt (investigations/lab/standin/nvtx.c), so there is one copy.
// Without NVTX_INJECTION64_PATH a call is a once-check and a compare, as with the real headers.
#ifndef CAUSEWAY_NVTX_LOADER_H
#define CAUSEWAY_NVTX_LOADER_H

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <wchar.h>

typedef void (*nvtx_fnptr)(void);
struct nvtx_attrs { /* nvtxEventAttributes_v2 */
	uint16_t version, size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type, reserved0;
	uint64_t payload;
	int32_t message_type;
	const void *message;
};

static void nvtx_noop(void) {}

/* CORE: 1 MarkEx 2 MarkA 3 MarkW 4 StartEx 5 StartA 6 StartW 7 End 8 PushEx 9 PushA 10 PushW
 * 11 Pop 12-15 naming; CORE2: 1 DomainMarkEx 2 StartEx 3 End 4 PushEx 5 Pop 6-9 ... 10
 * RegisterStringA 11 RegisterStringW 12 CreateA 13 CreateW 14 Destroy 15 Initialize. */
static nvtx_fnptr nvtx_core[16];
static nvtx_fnptr nvtx_core2[16];
static nvtx_fnptr *nvtx_core_table[17];
static nvtx_fnptr *nvtx_core2_table[17];

static int nvtx_get_module_table(int module, nvtx_fnptr ***out, unsigned int *size)
{
	if (module == 1) {
		*out = nvtx_core_table;
		*size = 16;
		return 1;
	}
	if (module == 5) {
		*out = nvtx_core2_table;
		*size = 16;
		return 1;
	}
	return 0;
}

static struct {
	size_t size;
	int (*get)(int, nvtx_fnptr ***, unsigned int *);
} nvtx_callbacks = {sizeof(nvtx_callbacks), nvtx_get_module_table};

static const void *nvtx_get_export_table(uint32_t id)
{
	return id == 1 ? &nvtx_callbacks : NULL;
}

static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static void nvtx_init(void)
{
	for (int i = 0; i < 16; i++) {
		nvtx_core[i] = nvtx_noop;
		nvtx_core2[i] = nvtx_noop;
		nvtx_core_table[i] = &nvtx_core[i];
		nvtx_core2_table[i] = &nvtx_core2[i];
	}
	nvtx_core_table[0] = nvtx_core2_table[0] = NULL;
	const char *path = getenv("NVTX_INJECTION64_PATH");
	if (!path)
		return;
	void *h = dlopen(path, RTLD_LAZY);
	if (!h)
		return;
	int (*inject)(const void *(*)(uint32_t)) =
		(int (*)(const void *(*)(uint32_t)))dlsym(h, "InitializeInjectionNvtx2");
	if (inject)
		inject(nvtx_get_export_table);
}
#define NVTX_INIT() pthread_once(&nvtx_once, nvtx_init)
/* The slot's handler, or 0 while it is still the no-op (no injection library). */
#define NVTX_SLOT(t, i, T) ((t)[i] == nvtx_noop ? 0 : ((T)(t)[i]))

/* The calls, with NVTX's return values when nothing is injected (-1, 0, NULL). Inline so that a
 * caller using a few of them compiles without unused-function warnings. */
static inline int nvtx_push_a(const char *m)
{
	NVTX_INIT();
	int (*f)(const char *) = NVTX_SLOT(nvtx_core, 9, int (*)(const char *));
	return f ? f(m) : -1;
}
static inline int nvtx_push_w(const wchar_t *m)
{
	NVTX_INIT();
	int (*f)(const wchar_t *) = NVTX_SLOT(nvtx_core, 10, int (*)(const wchar_t *));
	return f ? f(m) : -1;
}
static inline int nvtx_pop(void)
{
	NVTX_INIT();
	int (*f)(void) = NVTX_SLOT(nvtx_core, 11, int (*)(void));
	return f ? f() : -1;
}
static inline uint64_t nvtx_start_a(const char *m)
{
	NVTX_INIT();
	uint64_t (*f)(const char *) = NVTX_SLOT(nvtx_core, 5, uint64_t (*)(const char *));
	return f ? f(m) : 0;
}
static inline void nvtx_end(uint64_t id)
{
	NVTX_INIT();
	void (*f)(uint64_t) = NVTX_SLOT(nvtx_core, 7, void (*)(uint64_t));
	if (f)
		f(id);
}
static inline void nvtx_mark_a(const char *m)
{
	NVTX_INIT();
	void (*f)(const char *) = NVTX_SLOT(nvtx_core, 2, void (*)(const char *));
	if (f)
		f(m);
}
static inline void *nvtx_domain_create(const char *name)
{
	NVTX_INIT();
	void *(*f)(const char *) = NVTX_SLOT(nvtx_core2, 12, void *(*)(const char *));
	return f ? f(name) : NULL;
}
static inline void *nvtx_register_string(void *d, const char *s)
{
	NVTX_INIT();
	void *(*f)(void *, const char *) = NVTX_SLOT(nvtx_core2, 10, void *(*)(void *, const char *));
	return f ? f(d, s) : NULL;
}
static inline int nvtx_domain_push(void *d, const struct nvtx_attrs *a)
{
	NVTX_INIT();
	int (*f)(void *, const struct nvtx_attrs *) =
		NVTX_SLOT(nvtx_core2, 4, int (*)(void *, const struct nvtx_attrs *));
	return f ? f(d, a) : -1;
}
static inline int nvtx_domain_pop(void *d)
{
	NVTX_INIT();
	int (*f)(void *) = NVTX_SLOT(nvtx_core2, 5, int (*)(void *));
	return f ? f(d) : -1;
}

#endif
