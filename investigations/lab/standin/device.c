// The modelled GPU (see device.h for the model and its parameters): device timelines shared
// through /dev/shm, per-stream FIFO queues, kernels and their loading, copies, memory. Compiled
// into libcuda.so.1; the runtime and NCCL reach it through labdevGetTable.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"

#define QMAX 1024
#define MAX_KERNELS 4096
#define STAGE_BYTES (2u << 20)
#define MIB (1024.0 * 1024.0)

/* ---- parameters ---- */

static struct {
	uint64_t launch_ns, ns_per_block, ctx_ns, module_load_ns, jit_ns;
	uint64_t malloc_ns, malloc_ns_per_mib, free_ns, free_ns_per_mib, host_alloc_ns_per_mib;
	double link_bytes_per_ns, d2d_bytes_per_ns;
	uint64_t capacity;
	int devices, eager;
	int visible[LAB_MAX_DEVICES]; /* ordinal -> the machine's device (CUDA_VISIBLE_DEVICES) */
	char machine[64];
} P;

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static void load_params(void)
{
	P.launch_ns = env_u64("LAB_LAUNCH_NS", 5000);
	P.ns_per_block = env_u64("LAB_NS_PER_BLOCK", 1000);
	P.ctx_ns = env_u64("LAB_CTX_NS", 30000000);
	P.module_load_ns = env_u64("LAB_MODULE_LOAD_NS", 400000);
	P.jit_ns = env_u64("LAB_JIT_NS", 60000000);
	P.malloc_ns = env_u64("LAB_MALLOC_NS", 60000);
	P.malloc_ns_per_mib = 8000;
	P.free_ns = 40000;
	P.free_ns_per_mib = 4000;
	P.host_alloc_ns_per_mib = 10000;
	P.link_bytes_per_ns = (double)env_u64("LAB_LINK_GBPS", 24);
	P.d2d_bytes_per_ns = 1000.0;
	P.capacity = 80ull << 30;
	P.devices = (int)env_u64("LAB_DEVICES", 8);
	if (P.devices < 1 || P.devices > LAB_MAX_DEVICES)
		P.devices = LAB_MAX_DEVICES;
	for (int i = 0; i < LAB_MAX_DEVICES; i++)
		P.visible[i] = i;
	/* As CUDA does: the process sees the listed devices, renumbered from 0 (indices only). */
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	if (vis && *vis) {
		int n = 0;
		for (const char *c = vis; *c && n < P.devices;) {
			char *end;
			long v = strtol(c, &end, 10);
			if (end == c || v < 0 || v >= P.devices)
				break; /* CUDA stops at the first invalid entry */
			P.visible[n++] = (int)v;
			c = *end == ',' ? end + 1 : end;
			if (*end != ',')
				break;
		}
		P.devices = n > 0 ? n : 1;
	}
	const char *ml = getenv("CUDA_MODULE_LOADING");
	P.eager = ml && strcmp(ml, "EAGER") == 0;
	const char *m = getenv("LAB_MACHINE");
	snprintf(P.machine, sizeof P.machine, "%s", m && *m ? m : "default");
	for (char *c = P.machine; *c; c++)
		if (*c == '/')
			*c = '_';
}

/* ---- time ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Blocks (off the CPU) until CLOCK_MONOTONIC reaches t: a blocking-sync wait for the device. */
static void sleep_until(uint64_t t)
{
	if (t <= now_ns())
		return;
	struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
	}
}

static void sleep_ns(uint64_t ns) { sleep_until(now_ns() + ns); }

/* Host CPU work of a known cost: a loop calibrated at start-up (best of several runs, so that
 * a preemption during calibration does not make it cheap), so that it costs CPU time, not wall
 * time, and takes longer when the thread is preempted, as a real driver's work does. */
static volatile uint64_t spin_sink;
static double iters_per_ns = 0.5;

static void spin_iters(uint64_t n)
{
	uint64_t a = spin_sink;
	for (uint64_t i = 0; i < n; i++)
		a = a * 6364136223846793005ull + i;
	spin_sink = a;
}

static void calibrate(void)
{
	double best = 0;
	for (int r = 0; r < 7; r++) {
		uint64_t t0 = now_ns();
		spin_iters(20000);
		uint64_t dt = now_ns() - t0;
		double rate = dt ? 20000.0 / (double)dt : 0;
		if (rate > best)
			best = rate;
	}
	if (best > 0)
		iters_per_ns = best;
}

static void spin_ns(uint64_t ns) { spin_iters((uint64_t)((double)ns * iters_per_ns)); }

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Long CPU work (JIT compilation): measured in the thread's own CPU time. */
static void burn_cpu_ns(uint64_t ns)
{
	uint64_t end = thread_cpu_ns() + ns;
	while (thread_cpu_ns() < end)
		spin_ns(50000);
}

/* ---- the shared device ---- */

struct lab_shm {
	_Atomic uint64_t busy_until[2]; /* per engine, CLOCK_MONOTONIC ns */
	_Atomic uint64_t busy_ns[2];    /* device time served, for diagnostics */
	_Atomic uint64_t processes;
};

struct lab_stream {
	int dev;
	unsigned flags;
	uint64_t tail;  /* end of the last queued operation */
	uint64_t floor; /* cudaStreamWaitEvent: nothing starts before this */
	uint64_t ring[QMAX];
	unsigned head, count;
	struct lab_stream *next;
};

struct lab_event {
	uint64_t t;
	int recorded;
};

struct device {
	pthread_mutex_t lock;
	int ready;
	struct lab_shm *shm;
	struct lab_stream legacy;
	struct lab_stream *streams;
	size_t mem_used;
	void *stage[2];
	uint64_t stage_free[2];
	pthread_mutex_t stage_lock;
	_Atomic unsigned char loaded[MAX_KERNELS];
};

static struct device devs[LAB_MAX_DEVICES];
static __thread int cur_dev;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
	load_params();
	calibrate();
	for (int i = 0; i < LAB_MAX_DEVICES; i++) {
		pthread_mutex_init(&devs[i].lock, NULL);
		pthread_mutex_init(&devs[i].stage_lock, NULL);
		devs[i].legacy.dev = i;
	}
}

/* ---- kernel registry (filled by __cudaRegisterFunction through the runtime) ---- */

struct module {
	int ptx_only;
};

struct kernel {
	const void *host_fun;
	const char *name;
	struct module *module;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel kernels[MAX_KERNELS];
static int n_kernels;
static int slots[2 * MAX_KERNELS]; /* open addressing: host_fun -> index + 1 */

static unsigned slot_of(const void *p) { return (unsigned)(((uintptr_t)p >> 4) * 2654435761u) % (2 * MAX_KERNELS); }

static int kernel_index(const void *f)
{
	pthread_mutex_lock(&reg_lock);
	int found = -1;
	for (unsigned s = slot_of(f), i = 0; i < 2 * MAX_KERNELS; i++, s = (s + 1) % (2 * MAX_KERNELS)) {
		int k = slots[s];
		if (!k)
			break;
		if (kernels[k - 1].host_fun == f) {
			found = k - 1;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

static void *api_register_module(int ptx_only)
{
	struct module *m = calloc(1, sizeof *m);
	if (m)
		m->ptx_only = ptx_only;
	return m;
}

static void api_register_function(void *module, const void *host_fun, const char *name)
{
	pthread_once(&once, global_init);
	if (kernel_index(host_fun) >= 0)
		return;
	pthread_mutex_lock(&reg_lock);
	if (n_kernels < MAX_KERNELS) {
		kernels[n_kernels] = (struct kernel){ host_fun, name, module };
		unsigned s = slot_of(host_fun);
		while (slots[s])
			s = (s + 1) % (2 * MAX_KERNELS);
		slots[s] = ++n_kernels;
	}
	pthread_mutex_unlock(&reg_lock);
}

/* Loads kernel k on device d (lazy loading), paying the module-load or JIT cost once. */
static void load_kernel(struct device *d, int k)
{
	unsigned char expected = 0;
	if (!atomic_compare_exchange_strong(&d->loaded[k], &expected, 1))
		return;
	if (kernels[k].module && kernels[k].module->ptx_only)
		burn_cpu_ns(P.jit_ns);
	else
		sleep_ns(P.module_load_ns);
}

/* ---- contexts ---- */

static struct lab_shm *open_shm(int dev)
{
	char path[128];
	snprintf(path, sizeof path, "/dev/shm/lab-%s-gpu%d", P.machine, P.visible[dev]);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof(struct lab_shm) &&
	    ftruncate(fd, sizeof(struct lab_shm)) != 0) {
		close(fd);
		return NULL;
	}
	void *p = mmap(NULL, sizeof(struct lab_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* Context creation on first use of a device by this process. */
static struct device *ctx(void)
{
	pthread_once(&once, global_init);
	struct device *d = &devs[cur_dev];
	if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE))
		return d;
	pthread_mutex_lock(&d->lock);
	if (!d->ready) {
		d->shm = open_shm(cur_dev);
		if (!d->shm) {
			static struct lab_shm private_shm[LAB_MAX_DEVICES];
			fprintf(stderr, "lab device: cannot open its shared timeline, using a private one\n");
			d->shm = &private_shm[cur_dev];
		}
		atomic_fetch_add(&d->shm->processes, 1);
		for (int i = 0; i < 2; i++) {
			d->stage[i] = aligned_alloc(4096, STAGE_BYTES);
			memset(d->stage[i], 0, STAGE_BYTES);
			mlock(d->stage[i], STAGE_BYTES);
		}
		sleep_ns(P.ctx_ns);
		if (P.eager)
			for (int k = 0; k < n_kernels; k++)
				load_kernel(d, k);
		__atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->lock);
	return d;
}

static struct lab_stream *resolve(struct device *d, struct lab_stream *s)
{
	/* NULL, cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2) are the default stream. */
	return (uintptr_t)s <= 2 ? &d->legacy : s;
}

/* The device a stream belongs to (the current one for the default stream); a stream exists only
 * on a device whose context was created. */
static struct device *dev_of(struct lab_stream *s) { return (uintptr_t)s <= 2 ? ctx() : &devs[s->dev]; }

/* ---- queues ---- */

/* When the next operation on s may start: after s's last operation, and after the default
 * stream (or, for the default stream, after every blocking stream): CUDA's legacy semantics. */
static uint64_t deps(struct device *d, struct lab_stream *s)
{
	uint64_t t = s->tail > s->floor ? s->tail : s->floor;
	if (s == &d->legacy) {
		for (struct lab_stream *o = d->streams; o; o = o->next)
			if (!(o->flags & LAB_STREAM_NONBLOCKING) && o->tail > t)
				t = o->tail;
	} else if (!(s->flags & LAB_STREAM_NONBLOCKING) && d->legacy.tail > t) {
		t = d->legacy.tail;
	}
	return t;
}

static void retire(struct lab_stream *s, uint64_t now)
{
	while (s->count && s->ring[s->head] <= now) {
		s->head = (s->head + 1) % QMAX;
		s->count--;
	}
}

/* Queues dur_ns of work on engine e of s's device, starting no earlier than not_before; returns
 * when it will end. A full queue blocks the caller until its oldest operation completes (the
 * lock is released meanwhile). */
static uint64_t queue_op_at(struct device *d, struct lab_stream *s, enum lab_engine e, uint64_t dur_ns,
			    uint64_t not_before)
{
	pthread_mutex_lock(&d->lock);
	for (;;) {
		uint64_t now = now_ns();
		retire(s, now);
		if (s->count < QMAX)
			break;
		uint64_t oldest = s->ring[s->head];
		pthread_mutex_unlock(&d->lock);
		sleep_until(oldest);
		pthread_mutex_lock(&d->lock);
	}
	uint64_t start = deps(d, s);
	uint64_t now = now_ns();
	if (start < now)
		start = now;
	if (start < not_before)
		start = not_before;
	uint64_t busy = atomic_load(&d->shm->busy_until[e]);
	uint64_t begin;
	do {
		begin = busy > start ? busy : start;
	} while (!atomic_compare_exchange_weak(&d->shm->busy_until[e], &busy, begin + dur_ns));
	atomic_fetch_add(&d->shm->busy_ns[e], dur_ns);
	uint64_t end = begin + dur_ns;
	s->tail = end;
	s->ring[(s->head + s->count) % QMAX] = end;
	s->count++;
	pthread_mutex_unlock(&d->lock);
	return end;
}

static uint64_t queue_op(struct device *d, struct lab_stream *s, enum lab_engine e, uint64_t dur_ns)
{
	return queue_op_at(d, s, e, dur_ns, 0);
}

static uint64_t stream_tail(struct device *d, struct lab_stream *s)
{
	pthread_mutex_lock(&d->lock);
	uint64_t t = deps(d, s);
	pthread_mutex_unlock(&d->lock);
	return t;
}

static uint64_t device_tail(struct device *d)
{
	pthread_mutex_lock(&d->lock);
	uint64_t t = d->legacy.tail;
	for (struct lab_stream *o = d->streams; o; o = o->next)
		if (o->tail > t)
			t = o->tail;
	pthread_mutex_unlock(&d->lock);
	return t;
}

/* ---- memory ---- */

struct range {
	uintptr_t start;
	size_t len;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *dev_allocs, *pinned;
static size_t n_dev_allocs, cap_dev_allocs, n_pinned, cap_pinned;

static int add_range(struct range **v, size_t *n, size_t *cap, uintptr_t start, size_t len)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct range *nv = realloc(*v, nc * sizeof **v);
		if (!nv)
			return -1;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct range){ start, len };
	return 0;
}

/* Removes the range starting at p; returns its length, or 0 when p starts none. */
static size_t remove_range(struct range *v, size_t *n, uintptr_t p)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i].start == p) {
			size_t len = v[i].len;
			v[i] = v[--*n];
			return len;
		}
	return 0;
}

static int in_ranges(const struct range *v, size_t n, uintptr_t p)
{
	for (size_t i = 0; i < n; i++)
		if (p >= v[i].start && p < v[i].start + v[i].len)
			return 1;
	return 0;
}

static int is_pinned(const void *p)
{
	pthread_mutex_lock(&mem_lock);
	int r = in_ranges(pinned, n_pinned, (uintptr_t)p);
	pthread_mutex_unlock(&mem_lock);
	return r;
}

static int is_device(const void *p)
{
	pthread_mutex_lock(&mem_lock);
	int r = in_ranges(dev_allocs, n_dev_allocs, (uintptr_t)p);
	pthread_mutex_unlock(&mem_lock);
	return r;
}

static int api_malloc(void **p, size_t n)
{
	struct device *d = ctx();
	*p = NULL;
	if (n > P.capacity - d->mem_used)
		return LAB_ERR_MEMORY;
	/* Address space only: a device pointer faults if the host touches it, as a real one does. */
	void *m = mmap(NULL, n ? n : 1, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return LAB_ERR_MEMORY;
	pthread_mutex_lock(&mem_lock);
	int rc = add_range(&dev_allocs, &n_dev_allocs, &cap_dev_allocs, (uintptr_t)m, n ? n : 1);
	d->mem_used += n;
	pthread_mutex_unlock(&mem_lock);
	if (rc) {
		munmap(m, n ? n : 1);
		return LAB_ERR_MEMORY;
	}
	sleep_ns(P.malloc_ns + (uint64_t)((double)n / MIB * (double)P.malloc_ns_per_mib));
	*p = m;
	return LAB_OK;
}

static int api_device_sync(void);

static int api_free(void *p)
{
	struct device *d = ctx();
	if (!p)
		return LAB_OK;
	/* NVIDIA's cudaFree synchronises the device before it frees. */
	api_device_sync();
	pthread_mutex_lock(&mem_lock);
	size_t n = remove_range(dev_allocs, &n_dev_allocs, (uintptr_t)p);
	d->mem_used -= n < d->mem_used ? n : d->mem_used;
	pthread_mutex_unlock(&mem_lock);
	if (!n)
		return LAB_ERR_INVALID_VALUE;
	munmap(p, n);
	sleep_ns(P.free_ns + (uint64_t)((double)n / MIB * (double)P.free_ns_per_mib));
	return LAB_OK;
}

static int api_host_alloc(void **p, size_t n)
{
	ctx();
	*p = NULL;
	size_t len = n ? n : 1;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		return LAB_ERR_MEMORY;
	mlock(m, len); /* page-locked: counted in a memory cgroup, never reclaimed */
	pthread_mutex_lock(&mem_lock);
	int rc = add_range(&pinned, &n_pinned, &cap_pinned, (uintptr_t)m, len);
	pthread_mutex_unlock(&mem_lock);
	if (rc) {
		munmap(m, len);
		return LAB_ERR_MEMORY;
	}
	sleep_ns((uint64_t)((double)len / MIB * (double)P.host_alloc_ns_per_mib));
	*p = m;
	return LAB_OK;
}

static int api_host_free(void *p)
{
	if (!p)
		return LAB_OK;
	pthread_mutex_lock(&mem_lock);
	size_t n = remove_range(pinned, &n_pinned, (uintptr_t)p);
	pthread_mutex_unlock(&mem_lock);
	if (!n)
		return LAB_ERR_INVALID_VALUE;
	munmap(p, n);
	return LAB_OK;
}

static int api_host_register(void *p, size_t n)
{
	ctx();
	mlock(p, n);
	pthread_mutex_lock(&mem_lock);
	int rc = add_range(&pinned, &n_pinned, &cap_pinned, (uintptr_t)p, n);
	pthread_mutex_unlock(&mem_lock);
	sleep_ns((uint64_t)((double)n / MIB * (double)P.host_alloc_ns_per_mib));
	return rc ? LAB_ERR_MEMORY : LAB_OK;
}

static int api_host_unregister(void *p)
{
	pthread_mutex_lock(&mem_lock);
	size_t n = remove_range(pinned, &n_pinned, (uintptr_t)p);
	pthread_mutex_unlock(&mem_lock);
	if (n)
		munlock(p, n);
	return n ? LAB_OK : LAB_ERR_INVALID_VALUE;
}

static int api_mem_info(size_t *free_b, size_t *total_b)
{
	struct device *d = ctx();
	*total_b = P.capacity;
	*free_b = P.capacity - d->mem_used;
	return LAB_OK;
}

/* ---- copies ---- */

static uint64_t link_ns(size_t n) { return (uint64_t)((double)n / P.link_bytes_per_ns) + 2000; }

/* Host to device from pageable memory, staged through two pinned buffers: the calling thread
 * copies each chunk (CPU work), the copy engine transfers it, and the call returns once the
 * last chunk has arrived. */
static void h2d_staged(struct device *d, struct lab_stream *s, const void *src, size_t n)
{
	pthread_mutex_lock(&d->stage_lock);
	uint64_t last = now_ns();
	for (size_t off = 0, i = 0; off < n; i++) {
		size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
		int b = (int)(i % 2);
		sleep_until(d->stage_free[b]);
		memcpy(d->stage[b], (const char *)src + off, len);
		last = queue_op(d, s, LAB_COPY, link_ns(len));
		d->stage_free[b] = last;
		off += len;
	}
	pthread_mutex_unlock(&d->stage_lock);
	sleep_until(last);
}

/* Device to host into pageable memory: each chunk is transferred into staging (after the
 * stream's earlier work), then copied out by the calling thread. */
static void d2h_staged(struct device *d, struct lab_stream *s, void *dst, size_t n)
{
	pthread_mutex_lock(&d->stage_lock);
	for (size_t off = 0; off < n;) {
		size_t len = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
		sleep_until(queue_op(d, s, LAB_COPY, link_ns(len)));
		memcpy((char *)dst + off, d->stage[0], len);
		off += len;
	}
	pthread_mutex_unlock(&d->stage_lock);
}

static int api_memcpy(void *dst, const void *src, size_t n, int dir, struct lab_stream *s0, int async)
{
	struct device *d = dev_of(s0);
	struct lab_stream *s = resolve(d, s0);
	if (dir == LAB_DEFAULT) {
		int dd = is_device(dst), sd = is_device(src);
		dir = dd && sd ? LAB_D2D : dd ? LAB_H2D : sd ? LAB_D2H : LAB_H2H;
	}
	switch (dir) {
	case LAB_H2H:
		sleep_until(stream_tail(d, s));
		memmove(dst, src, n);
		return LAB_OK;
	case LAB_H2D:
		if (is_pinned(src)) {
			uint64_t end = queue_op(d, s, LAB_COPY, link_ns(n));
			if (!async)
				sleep_until(end);
		} else {
			h2d_staged(d, s, src, n);
		}
		return LAB_OK;
	case LAB_D2H:
		if (is_pinned(dst)) {
			uint64_t end = queue_op(d, s, LAB_COPY, link_ns(n));
			if (!async)
				sleep_until(end);
		} else {
			d2h_staged(d, s, dst, n);
		}
		return LAB_OK;
	case LAB_D2D:
		queue_op(d, s, LAB_COMPUTE, (uint64_t)((double)n / P.d2d_bytes_per_ns) + 2000);
		return LAB_OK;
	default:
		return LAB_ERR_INVALID_VALUE;
	}
}

static int api_memset(void *dst, int v, size_t n, struct lab_stream *s0)
{
	(void)dst;
	(void)v;
	struct device *d = dev_of(s0);
	spin_ns(P.launch_ns);
	queue_op(d, resolve(d, s0), LAB_COMPUTE, (uint64_t)((double)n / P.d2d_bytes_per_ns) + 2000);
	return LAB_OK;
}

/* ---- kernels ---- */

static int api_launch(const void *func, uint64_t blocks, struct lab_stream *s0)
{
	struct device *d = dev_of(s0);
	int k = kernel_index(func);
	if (k < 0)
		return LAB_ERR_INVALID_FUNCTION;
	load_kernel(d, k);
	spin_ns(P.launch_ns);
	queue_op(d, resolve(d, s0), LAB_COMPUTE, blocks * P.ns_per_block);
	return LAB_OK;
}

static int api_enqueue(struct lab_stream *s0, enum lab_engine e, uint64_t dur_ns, uint64_t not_before)
{
	struct device *d = dev_of(s0);
	queue_op_at(d, resolve(d, s0), e, dur_ns, not_before);
	return LAB_OK;
}

/* When work queued now on s could start (NCCL: a collective's arrival on the device). */
static uint64_t api_stream_ready(struct lab_stream *s0)
{
	struct device *d = dev_of(s0);
	uint64_t t = stream_tail(d, resolve(d, s0)), now = now_ns();
	return t > now ? t : now;
}

/* ---- streams, events, synchronisation ---- */

static int api_stream_create(struct lab_stream **out, unsigned flags)
{
	struct device *d = ctx();
	struct lab_stream *s = calloc(1, sizeof *s);
	if (!s)
		return LAB_ERR_MEMORY;
	s->dev = cur_dev;
	s->flags = flags;
	pthread_mutex_lock(&d->lock);
	s->next = d->streams;
	d->streams = s;
	pthread_mutex_unlock(&d->lock);
	*out = s;
	return LAB_OK;
}

static int api_stream_destroy(struct lab_stream *s)
{
	if ((uintptr_t)s <= 2)
		return LAB_ERR_INVALID_VALUE;
	struct device *d = &devs[s->dev];
	/* Work already queued completes; the stream object stays valid for the timeline (the
	 * device-wide waits still see its tail), so it is unlinked only once drained. */
	sleep_until(s->tail);
	pthread_mutex_lock(&d->lock);
	for (struct lab_stream **pp = &d->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&d->lock);
	free(s);
	return LAB_OK;
}

static int api_stream_sync(struct lab_stream *s0)
{
	struct device *d = dev_of(s0);
	sleep_until(stream_tail(d, resolve(d, s0)));
	return LAB_OK;
}

static int api_stream_query(struct lab_stream *s0)
{
	struct device *d = dev_of(s0);
	return stream_tail(d, resolve(d, s0)) <= now_ns() ? LAB_OK : LAB_ERR_NOT_READY;
}

static int api_device_sync(void)
{
	struct device *d = ctx();
	sleep_until(device_tail(d));
	return LAB_OK;
}

static int api_event_create(struct lab_event **e)
{
	*e = calloc(1, sizeof **e);
	return *e ? LAB_OK : LAB_ERR_MEMORY;
}

static int api_event_destroy(struct lab_event *e)
{
	free(e);
	return LAB_OK;
}

static int api_event_record(struct lab_event *e, struct lab_stream *s0)
{
	struct device *d = dev_of(s0);
	uint64_t t = stream_tail(d, resolve(d, s0));
	uint64_t now = now_ns();
	e->t = t > now ? t : now;
	e->recorded = 1;
	return LAB_OK;
}

static int api_event_sync(struct lab_event *e)
{
	sleep_until(e->t);
	return LAB_OK;
}

static int api_event_query(struct lab_event *e) { return e->t <= now_ns() ? LAB_OK : LAB_ERR_NOT_READY; }

static int api_event_elapsed(float *ms, struct lab_event *a, struct lab_event *b)
{
	if (!a->recorded || !b->recorded)
		return LAB_ERR_INVALID_VALUE;
	*ms = (float)((double)((int64_t)b->t - (int64_t)a->t) / 1e6);
	return LAB_OK;
}

static int api_stream_wait_event(struct lab_stream *s0, struct lab_event *e)
{
	struct device *d = dev_of(s0);
	struct lab_stream *s = resolve(d, s0);
	pthread_mutex_lock(&d->lock);
	if (e->t > s->floor)
		s->floor = e->t;
	pthread_mutex_unlock(&d->lock);
	return LAB_OK;
}

/* ---- devices ---- */

static int api_init(void)
{
	ctx();
	return LAB_OK;
}

static int api_device_count(void)
{
	pthread_once(&once, global_init);
	return P.devices;
}

static int api_set_device(int dev)
{
	pthread_once(&once, global_init);
	if (dev < 0 || dev >= P.devices)
		return LAB_ERR_INVALID_DEVICE;
	cur_dev = dev;
	return LAB_OK;
}

static int api_get_device(void) { return cur_dev; }

static int api_set_flags(unsigned flags)
{
	(void)flags; /* every sync blocks (device.h) */
	return LAB_OK;
}

static const struct lab_dev_api API = {
	.version = LAB_DEV_API_VERSION,
	.init = api_init,
	.device_count = api_device_count,
	.set_device = api_set_device,
	.get_device = api_get_device,
	.set_flags = api_set_flags,
	.register_module = api_register_module,
	.register_function = api_register_function,
	.launch = api_launch,
	.enqueue = api_enqueue,
	.stream_ready = api_stream_ready,
	.memcpy = api_memcpy,
	.memset = api_memset,
	.malloc = api_malloc,
	.free = api_free,
	.host_alloc = api_host_alloc,
	.host_free = api_host_free,
	.host_register = api_host_register,
	.host_unregister = api_host_unregister,
	.mem_info = api_mem_info,
	.stream_create = api_stream_create,
	.stream_destroy = api_stream_destroy,
	.stream_sync = api_stream_sync,
	.stream_query = api_stream_query,
	.device_sync = api_device_sync,
	.event_create = api_event_create,
	.event_destroy = api_event_destroy,
	.event_record = api_event_record,
	.event_sync = api_event_sync,
	.event_query = api_event_query,
	.event_elapsed = api_event_elapsed,
	.stream_wait_event = api_stream_wait_event,
	.now_ns = now_ns,
	.sleep_until = sleep_until,
};

const struct lab_dev_api *labdevGetTable(int version)
{
	return version == LAB_DEV_API_VERSION ? &API : NULL;
}
