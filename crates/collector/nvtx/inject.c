//! causeway's NVTX injection library: NVTX v3 calls of a traced command end in one probed function.
//
// NVTX v3 is header-only: an application's nvtxRangePushA & co. call through function pointers
// that stay no-ops unless the process names an injection library in NVTX_INJECTION64_PATH. The
// header's loader then dlopens it and calls InitializeInjectionNvtx2 with a getter of its export
// tables; this library fills the CORE and CORE2 function tables with its own handlers. The
// handlers keep each thread's push/pop stack and a table of start/end ranges (which may end on
// another thread), and when a range ends (or at a mark) they call causeway_nvtx_range once, with
// its name, domain, start, end, depth and kind. The collector attaches a uprobe to that function
// in this file (crates/collector/src/nvtx.rs): nothing is written anywhere else,
// and without the probe a range costs two clock reads and a copy of its name.
//
// The ABI below is written down from NVIDIA's public headers (github.com/NVIDIA/NVTX,
// c/include/nvtx3/nvToolsExt.h: nvtxEventAttributes_v2, nvtxMessageType_t;
// nvtxDetail/nvtxTypes.h: NvtxCallbackModule, NvtxCallbackIdCore, NvtxCallbackIdCore2,
// NvtxExportTableID, NvtxExportTableCallbacks), not copied from them.
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wchar.h>

#define CW_EXPORT __attribute__((visibility("default")))
#define CW_PROBED __attribute__((visibility("protected"), noinline, used))

/* nvtxTypes.h: NvtxExportTableID, NvtxCallbackModule. */
#define NVTX_ETID_CALLBACKS 1
#define NVTX_CB_MODULE_CORE 1
#define NVTX_CB_MODULE_CORE2 5

/* nvtxTypes.h: NvtxCallbackIdCore. */
#define CORE_MarkEx 1
#define CORE_MarkA 2
#define CORE_MarkW 3
#define CORE_RangeStartEx 4
#define CORE_RangeStartA 5
#define CORE_RangeStartW 6
#define CORE_RangeEnd 7
#define CORE_RangePushEx 8
#define CORE_RangePushA 9
#define CORE_RangePushW 10
#define CORE_RangePop 11

/* nvtxTypes.h: NvtxCallbackIdCore2. */
#define CORE2_DomainMarkEx 1
#define CORE2_DomainRangeStartEx 2
#define CORE2_DomainRangeEnd 3
#define CORE2_DomainRangePushEx 4
#define CORE2_DomainRangePop 5
#define CORE2_DomainRegisterStringA 10
#define CORE2_DomainRegisterStringW 11
#define CORE2_DomainCreateA 12
#define CORE2_DomainCreateW 13

/* nvToolsExt.h: nvtxMessageType_t. */
#define MSG_ASCII 1
#define MSG_UNICODE 2
#define MSG_REGISTERED 3

typedef void (*nvtx_fn)(void);
typedef const void *(*get_export_table_t)(uint32_t id);
struct export_table_callbacks {
	size_t struct_size;
	int (*get_module_function_table)(int module, nvtx_fn ***out_table, unsigned int *out_size);
};

/* nvToolsExt.h: nvtxEventAttributes_v2 (what matters here: the message). */
struct event_attributes {
	uint16_t version;
	uint16_t size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type;
	int32_t reserved0;
	uint64_t payload;
	int32_t message_type;
	const void *message; /* char *, wchar_t * or a registered string (struct registered *) */
};

/* What the collector reads (crates/bpf/src/bpf/nvtx.h copies at most this much of each). */
#define NAME_MAX_BYTES 256
#define DOMAIN_MAX_BYTES 64

/* A domain handle and a registered-string handle point at these (never freed: a handle stays
 * valid for the process's life, as the NVTX documentation promises). */
struct domain {
	char name[DOMAIN_MAX_BYTES];
};
struct registered {
	char text[NAME_MAX_BYTES];
};

/* What ended (crates/bpf/src/bpf/events.h CW_RANGE_*). */
#define RANGE_PUSH_POP 1
#define RANGE_START_END 2
#define RANGE_MARK 3

/* The probed function: the collector's uprobe reads its arguments (a mark has start == end).
 * On x86-64 it is written in assembly so that its first instruction is a one-byte nop: the
 * kernel emulates a probe on a nop (about 0.2-0.5 us per hit on the development VM), where a
 * `ret` or `endbr64` first (what the compiler emits for an empty function) is single-stepped, 21
 * us per hit there (the calibration's instruction kinds, docs/benchmarks.md). Protected: exported
 * for the probe, called directly (not through the PLT) from here. */
void causeway_nvtx_range(const char *name, const char *domain, uint64_t start_ns,
			 uint64_t end_ns, uint32_t depth, uint32_t kind);
#if defined(__x86_64__)
__asm__(".text\n"
	".globl causeway_nvtx_range\n"
	".protected causeway_nvtx_range\n"
	".type causeway_nvtx_range, @function\n"
	"causeway_nvtx_range:\n"
	"\tnop\n"
	"\tret\n"
	".size causeway_nvtx_range, .-causeway_nvtx_range\n");
#else
CW_PROBED void causeway_nvtx_range(const char *name, const char *domain, uint64_t start_ns,
				   uint64_t end_ns, uint32_t depth, uint32_t kind)
{
	__asm__ volatile("" ::"r"(name), "r"(domain), "r"(start_ns), "r"(end_ns), "r"(depth),
			 "r"(kind)
			 : "memory");
}
#endif

/* CLOCK_MONOTONIC: the clock of bpf_ktime_get_ns, which every other event of a trace uses. */
static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* UTF-8 of a wide string, cut to fit. */
static void copy_wide(char *dst, size_t cap, const wchar_t *src)
{
	size_t n = 0;
	for (; src && *src; src++) {
		uint32_t c = (uint32_t)*src;
		unsigned char b[4];
		size_t k;
		if (c < 0x80) {
			b[0] = (unsigned char)c;
			k = 1;
		} else if (c < 0x800) {
			b[0] = (unsigned char)(0xc0 | (c >> 6));
			b[1] = (unsigned char)(0x80 | (c & 0x3f));
			k = 2;
		} else if (c < 0x10000) {
			b[0] = (unsigned char)(0xe0 | (c >> 12));
			b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
			b[2] = (unsigned char)(0x80 | (c & 0x3f));
			k = 3;
		} else if (c < 0x110000) {
			b[0] = (unsigned char)(0xf0 | (c >> 18));
			b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
			b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
			b[3] = (unsigned char)(0x80 | (c & 0x3f));
			k = 4;
		} else {
			continue;
		}
		if (n + k >= cap)
			break;
		memcpy(dst + n, b, k);
		n += k;
	}
	dst[n] = 0;
}

static void copy_ascii(char *dst, size_t cap, const char *src)
{
	size_t n = 0;
	if (src)
		for (; n + 1 < cap && src[n]; n++)
			dst[n] = src[n];
	dst[n] = 0;
}

/* The message of an attributes struct; empty when it has none we can read. */
static void copy_message(char *dst, size_t cap, const struct event_attributes *a)
{
	dst[0] = 0;
	if (!a || a->size < offsetof(struct event_attributes, message) + sizeof(void *))
		return;
	switch (a->message_type) {
	case MSG_ASCII:
		copy_ascii(dst, cap, (const char *)a->message);
		break;
	case MSG_UNICODE:
		copy_wide(dst, cap, (const wchar_t *)a->message);
		break;
	case MSG_REGISTERED:
		if (a->message)
			copy_ascii(dst, cap, ((const struct registered *)a->message)->text);
		break;
	}
}

static const char *domain_name(const void *d)
{
	return d ? ((const struct domain *)d)->name : "";
}

/* ---- push/pop: one stack per thread (all domains; a domain's pop ends its innermost range) ---- */

#define STACK_MAX 64
struct open_range {
	const void *domain;
	uint64_t start;
	char name[NAME_MAX_BYTES];
};
static __thread struct open_range stack[STACK_MAX];
/* Ranges open on this thread; above STACK_MAX they are counted but not recorded. */
static __thread int depth;

static int push(const void *domain, const struct event_attributes *a, const char *ascii,
		const wchar_t *wide)
{
	int level = depth++;
	if (level >= STACK_MAX)
		return level;
	struct open_range *r = &stack[level];
	r->domain = domain;
	if (a)
		copy_message(r->name, sizeof(r->name), a);
	else if (wide)
		copy_wide(r->name, sizeof(r->name), wide);
	else
		copy_ascii(r->name, sizeof(r->name), ascii);
	r->start = now_ns();
	return level;
}

static int pop(const void *domain)
{
	uint64_t end = now_ns();
	if (depth <= 0)
		return -1;
	int top = depth - 1;
	if (top >= STACK_MAX) {
		depth--;
		return top;
	}
	/* The innermost range of this domain; ranges of other domains opened inside it stay. */
	int i = top;
	while (i >= 0 && stack[i].domain != domain)
		i--;
	if (i < 0)
		return -1;
	causeway_nvtx_range(stack[i].name, domain_name(domain), stack[i].start, end, (uint32_t)i,
			    RANGE_PUSH_POP);
	for (int j = i; j < top; j++)
		stack[j] = stack[j + 1];
	depth--;
	return i;
}

/* ---- start/end: ranges by id, any thread may end them ---- */

#define TABLE_SIZE 4096
struct started {
	uint64_t id; /* 0 = free */
	const void *domain;
	uint64_t start;
	char name[NAME_MAX_BYTES];
};
static struct started table[TABLE_SIZE];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_id = 1;

static uint64_t start(const void *domain, const struct event_attributes *a, const char *ascii,
		      const wchar_t *wide)
{
	struct started s;
	s.domain = domain;
	if (a)
		copy_message(s.name, sizeof(s.name), a);
	else if (wide)
		copy_wide(s.name, sizeof(s.name), wide);
	else
		copy_ascii(s.name, sizeof(s.name), ascii);
	s.start = now_ns();
	pthread_mutex_lock(&table_lock);
	s.id = next_id++;
	/* A slot still held by a range started TABLE_SIZE ids ago and never ended is reused: that
	 * range is not recorded (as a profiler drops a range without an end). */
	table[s.id % TABLE_SIZE] = s;
	pthread_mutex_unlock(&table_lock);
	return s.id;
}

static void end(uint64_t id)
{
	uint64_t t = now_ns();
	struct started s;
	pthread_mutex_lock(&table_lock);
	struct started *slot = &table[id % TABLE_SIZE];
	int found = id != 0 && slot->id == id;
	if (found) {
		s = *slot;
		slot->id = 0;
	}
	pthread_mutex_unlock(&table_lock);
	if (found)
		causeway_nvtx_range(s.name, domain_name(s.domain), s.start, t, 0, RANGE_START_END);
}

static void mark(const void *domain, const struct event_attributes *a, const char *ascii,
		 const wchar_t *wide)
{
	char name[NAME_MAX_BYTES];
	if (a)
		copy_message(name, sizeof(name), a);
	else if (wide)
		copy_wide(name, sizeof(name), wide);
	else
		copy_ascii(name, sizeof(name), ascii);
	uint64_t t = now_ns();
	causeway_nvtx_range(name, domain_name(domain), t, t, (uint32_t)(depth > 0 ? depth : 0),
			    RANGE_MARK);
}

/* ---- the handlers the function tables point at ---- */

static void h_mark_ex(const struct event_attributes *a) { mark(NULL, a, NULL, NULL); }
static void h_mark_a(const char *m) { mark(NULL, NULL, m, NULL); }
static void h_mark_w(const wchar_t *m) { mark(NULL, NULL, NULL, m); }
static uint64_t h_start_ex(const struct event_attributes *a) { return start(NULL, a, NULL, NULL); }
static uint64_t h_start_a(const char *m) { return start(NULL, NULL, m, NULL); }
static uint64_t h_start_w(const wchar_t *m) { return start(NULL, NULL, NULL, m); }
static void h_end(uint64_t id) { end(id); }
static int h_push_ex(const struct event_attributes *a) { return push(NULL, a, NULL, NULL); }
static int h_push_a(const char *m) { return push(NULL, NULL, m, NULL); }
static int h_push_w(const wchar_t *m) { return push(NULL, NULL, NULL, m); }
static int h_pop(void) { return pop(NULL); }

static void h_domain_mark_ex(const void *d, const struct event_attributes *a) { mark(d, a, NULL, NULL); }
static uint64_t h_domain_start_ex(const void *d, const struct event_attributes *a)
{
	return start(d, a, NULL, NULL);
}
static void h_domain_end(const void *d, uint64_t id)
{
	(void)d;
	end(id);
}
static int h_domain_push_ex(const void *d, const struct event_attributes *a) { return push(d, a, NULL, NULL); }
static int h_domain_pop(const void *d) { return pop(d); }

static void *h_register_a(const void *d, const char *s)
{
	(void)d;
	struct registered *r = calloc(1, sizeof(*r));
	if (r)
		copy_ascii(r->text, sizeof(r->text), s);
	return r;
}
static void *h_register_w(const void *d, const wchar_t *s)
{
	(void)d;
	struct registered *r = calloc(1, sizeof(*r));
	if (r)
		copy_wide(r->text, sizeof(r->text), s);
	return r;
}
static void *h_domain_create_a(const char *name)
{
	struct domain *d = calloc(1, sizeof(*d));
	if (d)
		copy_ascii(d->name, sizeof(d->name), name);
	return d;
}
static void *h_domain_create_w(const wchar_t *name)
{
	struct domain *d = calloc(1, sizeof(*d));
	if (d)
		copy_wide(d->name, sizeof(d->name), name);
	return d;
}

static void set(nvtx_fn **table, unsigned int size, unsigned int id, nvtx_fn fn)
{
	if (id < size && table[id])
		*table[id] = fn;
}

/* Called once by the NVTX loader of each module that uses NVTX; returns 1 on success (0 makes
 * the loader leave its calls as no-ops). */
CW_EXPORT int InitializeInjectionNvtx2(get_export_table_t get_export_table)
{
	if (!get_export_table)
		return 0;
	const struct export_table_callbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
	if (!cb || cb->struct_size < sizeof(*cb) || !cb->get_module_function_table)
		return 0;
	nvtx_fn **t = NULL;
	unsigned int n = 0;
	if (!cb->get_module_function_table(NVTX_CB_MODULE_CORE, &t, &n) || !t)
		return 0;
	set(t, n, CORE_MarkEx, (nvtx_fn)h_mark_ex);
	set(t, n, CORE_MarkA, (nvtx_fn)h_mark_a);
	set(t, n, CORE_MarkW, (nvtx_fn)h_mark_w);
	set(t, n, CORE_RangeStartEx, (nvtx_fn)h_start_ex);
	set(t, n, CORE_RangeStartA, (nvtx_fn)h_start_a);
	set(t, n, CORE_RangeStartW, (nvtx_fn)h_start_w);
	set(t, n, CORE_RangeEnd, (nvtx_fn)h_end);
	set(t, n, CORE_RangePushEx, (nvtx_fn)h_push_ex);
	set(t, n, CORE_RangePushA, (nvtx_fn)h_push_a);
	set(t, n, CORE_RangePushW, (nvtx_fn)h_push_w);
	set(t, n, CORE_RangePop, (nvtx_fn)h_pop);
	t = NULL;
	n = 0;
	/* Older loaders have no CORE2 module: the core calls are recorded all the same. */
	if (cb->get_module_function_table(NVTX_CB_MODULE_CORE2, &t, &n) && t) {
		set(t, n, CORE2_DomainMarkEx, (nvtx_fn)h_domain_mark_ex);
		set(t, n, CORE2_DomainRangeStartEx, (nvtx_fn)h_domain_start_ex);
		set(t, n, CORE2_DomainRangeEnd, (nvtx_fn)h_domain_end);
		set(t, n, CORE2_DomainRangePushEx, (nvtx_fn)h_domain_push_ex);
		set(t, n, CORE2_DomainRangePop, (nvtx_fn)h_domain_pop);
		set(t, n, CORE2_DomainRegisterStringA, (nvtx_fn)h_register_a);
		set(t, n, CORE2_DomainRegisterStringW, (nvtx_fn)h_register_w);
		set(t, n, CORE2_DomainCreateA, (nvtx_fn)h_domain_create_a);
		set(t, n, CORE2_DomainCreateW, (nvtx_fn)h_domain_create_w);
	}
	return 1;
}
