// Test workloads calling the stand-in CUDA runtime and driver in known patterns (one mode per run).
//
//   calls OUT          fixed mix of runtime and driver calls (counts, sizes, directions below)
//   sync MS            cudaDeviceSynchronize, cudaStreamSynchronize, cuCtxSynchronize sleeping MS each
//   syncs N MS         N rounds of one cudaStreamSynchronize sleeping MS, then MS of ones that do
//                      not sleep, back to back (the thread is nearly always inside one, a long
//                      one or a short one, at the same stack depth)
//   preempt OUT MS     a "victim" thread and a "busy" thread pinned to CPU 0 spin for MS; OUT gets tids
//   hog NAME MS        names itself NAME (prctl) and spins on CPU 0 for MS, calling nothing: a
//                      process outside the trace that takes a traced thread's CPU
//   fork N M           parent launches N kernels, a forked child M kernels; parent waits
//   rate N [OUT [T [R]]] N cudaLaunchKernel calls on each of T threads (default 1), back to back
//                      or paced to R calls/s in all (default 0: unpaced); ns per call on stdout,
//                      "N ns cpu" in OUT (N = all calls, ns = wall time, cpu = process CPU ns)
//   hold MS            cudaMalloc once, then keep calling cudaLaunchKernel every ms for MS
//   logged R MS OUT    cudaLaunchKernel paced to R calls/s for MS; after the first call and every
//                      50th, appends "CALLS REALTIME_NS" to OUT (unbuffered), so a test knows
//                      how many calls were made by when
//   stacks N           N launches from each of two call paths (stack_root -> stack_mid ->
//                      stack_leaf, and stack_root -> stack_leaf), then lives on for 100 ms
//   phases HOT IDLE N  back-to-back launches for HOT ms, idle for IDLE ms, then N launches 1 ms apart
//   spin N MS          N cudaLaunchKernel calls, then MS ms on the CPU without a system call
//   net MS OUT         socket calls in a known pattern (see mode_net); OUT gets the main thread's
//                      tid, the helper's tid and the socket pair's descriptors
//   late MS            wait MS from the start, then 3 cudaMalloc, 2 cudaMemcpy, 200 cudaLaunchKernel
//                      (the mix of loader.c), for a wrapper that execs this program
//   steps N L US OUT [DEPTH [MB]]  N steps of L launches between US of CPU work (walking MB
//                      of memory, default 0) and one cudaStreamSynchronize, DEPTH frames deep
//                      (default 0); OUT gets the median step time (ns) of the second half and
//                      of all steps
//   syscalls N OUT     N getppid system calls back to back; "N ns cpu" in OUT as for rate
//   mmaps N OUT        N anonymous one-page mmap + munmap pairs (each takes and releases the
//                      process's mmap lock); "N ns cpu" in OUT as for rate
//   files DIR N RECENT ROUNDS FIRST  creates N one-byte files in DIR and maps each executable
//                      once (mmap PROT_EXEC of its descriptor, then munmap), 1,000 at a time
//                      with 200 ms between; then maps the last RECENT of them ROUNDS times
//                      more; then the first FIRST twice (1 s between phases)
//   collide N SLOTS MS OUT  the main thread and a second thread whose tid equals it modulo SLOTS
//                      (threads are created and joined until one does) each make N launches
//                      and one cudaStreamSynchronize sleeping MS, the second while the first is
//                      alive; OUT gets both tids
#define _GNU_SOURCE
#include <sys/prctl.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct dim3 { unsigned int x, y, z; } dim3;
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, void *stream);
int cudaMemcpy(void *dst, const void *src, size_t n, int kind);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
int cudaStreamSynchronize(void *stream);
int cudaDeviceSynchronize(void);
void standinSetSyncDelayMs(int ms);
int cuMemAlloc_v2(unsigned long long *p, size_t n);
int cuMemFree_v2(unsigned long long p);
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n);
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n);
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		   unsigned shmem, void *stream, void **params, void **extra);
int cuCtxSynchronize(void);
void standinCuSetSyncDelayMs(int ms);
int cuModuleGetFunction(void **hfunc, void *hmod, const char *name);
int cuLibraryGetKernel(void **kernel, void *library, const char *name);
int cuKernelGetFunction(void **hfunc, void *kernel);

#include "mix.h"

static void kernel_a(void) {}

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) static void launch(int n)
{
	dim3 g = { 4, 2, 1 }, b = { 128, 1, 1 };
	for (int i = 0; i < n; i++)
		cudaLaunchKernel((const void *)kernel_a, g, b, NULL, 0, NULL);
}

static int mode_calls(const char *out)
{
	void *d = NULL, *big = NULL;
	static char host[1 << 16];
	cudaMalloc(&d, 1 << 20);
	launch(100);
	cudaMemcpy(d, host, 1024, 1);
	cudaMemcpy(host, d, 2048, 2);
	cudaMemcpy(d, (char *)d + 8192, 4096, 3);
	cudaMemcpyAsync(d, host, 512, 1, NULL);
	int bad = cudaMalloc(&big, (size_t)1 << 41);
	cudaFree(d);
	unsigned long long dp = 0;
	cuMemAlloc_v2(&dp, 4096);
	cuMemcpyHtoD_v2(dp, host, 256);
	cuMemcpyDtoH_v2(host, dp, 128);
	for (int i = 0; i < 5; i++)
		cuLaunchKernel((void *)kernel_a, 2, 3, 4, 32, 1, 1, 0, NULL, NULL, NULL);
	cuMemFree_v2(dp);
	cuCtxSynchronize();
	FILE *f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "%p %p %d\n", d, (void *)kernel_a, bad);
	fclose(f);
	return 0;
}

static int mode_sync(int ms)
{
	standinSetSyncDelayMs(ms);
	standinCuSetSyncDelayMs(ms);
	cudaDeviceSynchronize();
	cudaStreamSynchronize((void *)0x5);
	cuCtxSynchronize();
	return 0;
}

static int mode_syncs(long n, int ms)
{
	for (long i = 0; i < n; i++) {
		standinSetSyncDelayMs(ms);
		cudaStreamSynchronize((void *)0x5);
		standinSetSyncDelayMs(0);
		long until = now_ns() + ms * 1000000L;
		while (now_ns() < until)
			cudaStreamSynchronize((void *)0x5);
	}
	return 0;
}

static int pin_cpu0(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static volatile int stop_spin;
static long spin_ms;

static void *busy(void *arg)
{
	(void)arg;
	pin_cpu0();
	pthread_setname_np(pthread_self(), "busy");
	long end = now_ns() + spin_ms * 1000000L;
	volatile unsigned long x = 0;
	while (now_ns() < end)
		x++;
	return NULL;
}

static void *busy_named(void *arg)
{
	FILE *f = fopen((const char *)arg, "a");
	if (f) {
		fprintf(f, "busy %ld\n", (long)syscall(SYS_gettid));
		fclose(f);
	}
	return busy(NULL);
}

static int mode_preempt(const char *out, int ms)
{
	FILE *f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "victim %ld\n", (long)syscall(SYS_gettid));
	fclose(f);
	pin_cpu0();
	pthread_setname_np(pthread_self(), "victim");
	spin_ms = ms;
	pthread_t t;
	pthread_create(&t, NULL, busy_named, (void *)out);
	long end = now_ns() + (long)ms * 1000000L;
	while (now_ns() < end)
		launch(1);
	pthread_join(t, NULL);
	return 0;
}

static int mode_hog(const char *name, int ms)
{
	prctl(PR_SET_NAME, name, 0, 0, 0);
	pin_cpu0();
	long end = now_ns() + (long)ms * 1000000L;
	volatile unsigned long x = 0;
	while (now_ns() < end)
		x++;
	return 0;
}

/* fork N M [LINGER_MS]: the parent launches N kernels, a forked child M; both stay alive
 * LINGER_MS after their launches (as a training process does), default 0. */
static int mode_fork(int n, int m, int linger_ms)
{
	pid_t child = fork();
	if (child == 0) {
		launch(m);
		usleep(linger_ms * 1000);
		_exit(0);
	}
	launch(n);
	usleep(linger_ms * 1000);
	int status = 0;
	waitpid(child, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static long rate_calls;
static long rate_gap_ns; /* per thread, 0 = back to back */

static void *rate_thread(void *arg)
{
	(void)arg;
	dim3 g = { 1, 1, 1 }, b = { 1, 1, 1 };
	long next = now_ns();
	for (long i = 0; i < rate_calls; i++) {
		if (rate_gap_ns) {
			while (now_ns() < next)
				;
			next += rate_gap_ns;
		}
		cudaLaunchKernel((const void *)kernel_a, g, b, NULL, 0, NULL);
	}
	return NULL;
}

/* Writes "calls wall-ns process-cpu-ns" to `out` (the rate file the benchmark reads). */
static void write_rate(const char *out, long total, long wall_ns)
{
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	FILE *f = out ? fopen(out, "w") : NULL;
	if (f) {
		fprintf(f, "%ld %ld %ld\n", total, wall_ns, cpu.tv_sec * 1000000000L + cpu.tv_nsec);
		fclose(f);
	}
}

static int mode_syscalls(long n, const char *out)
{
	long t0 = now_ns();
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	write_rate(out, n, now_ns() - t0);
	return 0;
}

static int mode_mmaps(long n, const char *out)
{
	long t0 = now_ns();
	for (long i = 0; i < n; i++) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		munmap(p, 4096);
	}
	write_rate(out, n, now_ns() - t0);
	return 0;
}

/* Maps file `i` of `dir` executable and unmaps it; creates it first (one byte) if `create`. */
static int map_file(const char *dir, long i, int create)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/f%ld", dir, i);
	int fd = open(path, create ? O_RDWR | O_CREAT | O_EXCL : O_RDONLY, 0644);
	if (fd < 0 || (create && write(fd, "x", 1) != 1))
		return 1;
	void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return 1;
	munmap(p, 4096);
	return 0;
}

static int map_files(const char *dir, long from, long to)
{
	for (long i = from; i < to; i++) {
		if (map_file(dir, i, 0))
			return 1;
	}
	usleep(1000000);
	return 0;
}

static int mode_files(const char *dir, long n, long recent, long rounds, long first)
{
	for (long i = 0; i < n; i++) {
		if (map_file(dir, i, 1))
			return 1;
		if (i % 1000 == 999)
			usleep(200000);
	}
	usleep(1000000);
	for (long r = 0; r < rounds; r++) {
		if (map_files(dir, n - recent, n))
			return 1;
	}
	return map_files(dir, 0, first) || map_files(dir, 0, first);
}

static int mode_rate(long n, const char *out, int threads, long per_s)
{
	pthread_t t[64];
	if (threads < 1 || threads > 64)
		return 2;
	rate_calls = n;
	rate_gap_ns = per_s > 0 ? 1000000000L * threads / per_s : 0;
	long t0 = now_ns();
	for (int i = 1; i < threads; i++)
		pthread_create(&t[i], NULL, rate_thread, NULL);
	rate_thread(NULL);
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], NULL);
	long t1 = now_ns();
	long total = n * threads;
	printf("%.1f\n", (double)(t1 - t0) / (double)total);
	write_rate(out, total, t1 - t0);
	return 0;
}

/* Three real functions (not inlined, frame pointers kept) whose names the stacks test expects. */
__attribute__((noinline)) void stack_leaf(int n)
{
	launch(n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void stack_mid(int n)
{
	stack_leaf(n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void stack_root(int n, int direct)
{
	if (direct)
		stack_leaf(n);
	else
		stack_mid(n);
	__asm__ volatile("" ::: "memory");
}

static int mode_stacks(int n)
{
	stack_root(n, 0);
	stack_root(n, 1);
	usleep(100 * 1000);
	return 0;
}

static int mode_phases(int hot_ms, int idle_ms, int n)
{
	long end = now_ns() + (long)hot_ms * 1000000L;
	while (now_ns() < end)
		launch(1);
	usleep((useconds_t)idle_ms * 1000);
	for (int i = 0; i < n; i++) {
		launch(1);
		usleep(1000);
	}
	return 0;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* A launch-bound training loop: `steps` steps of `launches` kernel launches and `compute_us` of
 * CPU work each (as a framework's Python and dispatch code between launches), and a stream
 * synchronisation that ends the step (as reading the loss does). Writes the median
 * step time (ns) of the second half of the steps, once a tracer's controller has settled, and of
 * all of them, to `out`. */
/* Runs the loop `depth` frames deep (as a framework's launches are, under the interpreter and
 * the dispatcher): a user stack walk (--stacks) at each launch has that many frames to read. */
static int mode_steps(long steps, int launches, long compute_us, const char *out);

/* Memory the steps' CPU work walks through (page and cache line strides), evicting the caches
 * and TLB entries a probe hit would otherwise find warm, as a real job's data does. */
static volatile char *footprint;
static size_t footprint_len, footprint_at;

__attribute__((noinline)) static int deep_steps(int depth, long steps, int launches, long compute_us,
						 const char *out)
{
	if (depth <= 0)
		return mode_steps(steps, launches, compute_us, out);
	int rc = deep_steps(depth - 1, steps, launches, compute_us, out);
	__asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
	return rc;
}

static int mode_steps(long steps, int launches, long compute_us, const char *out)
{
	long *t = malloc(sizeof(long) * (size_t)steps);
	if (!t || steps < 2)
		return 2;
	long per_launch = compute_us * 1000 / (launches > 0 ? launches : 1);
	for (long i = 0; i < steps; i++) {
		long t0 = now_ns();
		for (int k = 0; k < launches; k++) {
			long until = now_ns() + per_launch;
			while (now_ns() < until)
				if (footprint_len) {
					footprint[footprint_at] += 1;
					footprint_at = (footprint_at + 4160) % footprint_len;
				}
			launch(1);
		}
		cudaStreamSynchronize(0);
		t[i] = now_ns() - t0;
	}
	qsort(t + steps / 2, (size_t)(steps - steps / 2), sizeof(long), cmp_long);
	long late = t[steps / 2 + (steps - steps / 2) / 2];
	qsort(t, (size_t)steps, sizeof(long), cmp_long);
	FILE *f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "%ld %ld\n", late, t[steps / 2]);
	fclose(f);
	free(t);
	return 0;
}

static int mode_hold(int ms)
{
	void *d = NULL;
	cudaMalloc(&d, 64);
	long end = now_ns() + (long)ms * 1000000L;
	while (now_ns() < end) {
		launch(1);
		usleep(1000);
	}
	return 0;
}

static int mode_logged(long per_s, int ms, const char *out)
{
	int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0 || per_s <= 0)
		return 2;
	long gap = 1000000000L / per_s;
	long start = now_ns(), end = start + (long)ms * 1000000L;
	for (long i = 1;; i++) {
		long due = start + (i - 1) * gap;
		if (due >= end)
			break;
		struct timespec at = {due / 1000000000L, due % 1000000000L};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
		launch(1);
		if (i == 1 || i % 50 == 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			char line[64];
			int len = snprintf(line, sizeof line, "%ld %ld\n", i,
					   ts.tv_sec * 1000000000L + ts.tv_nsec);
			if (write(fd, line, (size_t)len) != len)
				return 3;
		}
	}
	close(fd);
	return 0;
}

static int mode_spin(int n, int ms)
{
	launch(n);
	long end = now_ns() + (long)ms * 1000000L;
	while (now_ns() < end)
		;
	return 0;
}

static int net_fd[2];
static int net_ms;
static pid_t net_helper_tid;

static void *net_helper(void *arg)
{
	(void)arg;
	char buf[1000];
	memset(buf, 'x', sizeof(buf));
	net_helper_tid = (pid_t)syscall(SYS_gettid);
	usleep((useconds_t)net_ms * 1000);
	send(net_fd[1], buf, sizeof(buf), 0);   /* wakes the main thread's recv after net_ms */
	char in[300];
	long got = 0;
	while (got < (long)sizeof(in)) {        /* read(2) on a socket: a receive */
		long r = read(net_fd[1], in + got, sizeof(in) - got);
		if (r <= 0)
			break;
		got += r;
	}
	return NULL;
}

/* A socket pair: the main thread blocks in recv(2) for net_ms until the helper sends 1000
 * bytes, then write(2)s 300 bytes the helper read(2)s; a UDP datagram of 64 bytes goes out with
 * sendto(2) and comes back with recvfrom(2); 512 bytes of a file go out on a second pair with
 * sendfile(2) and are recv(2)'d; a pipe carries bytes too (not a socket: not counted). Socket
 * calls: 4 sends (1000, 300, 64, 512 bytes), receives of 1000, 300, 64 and 512 bytes. */
static int mode_net(int ms, const char *out)
{
	net_ms = ms;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, net_fd))
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, net_helper, NULL);
	char buf[1000];
	long got = 0;
	while (got < (long)sizeof(buf)) {
		long r = recv(net_fd[0], buf + got, sizeof(buf) - got, 0);
		if (r <= 0)
			return 1;
		got += r;
	}
	char reply[300];
	memset(reply, 'y', sizeof(reply));
	if (write(net_fd[0], reply, sizeof(reply)) != (long)sizeof(reply))
		return 1;
	pthread_join(t, NULL);

	int u = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (u < 0 || bind(u, (struct sockaddr *)&a, sizeof(a)) || getsockname(u, (struct sockaddr *)&a, &len))
		return 1;
	char dgram[64] = { 0 };
	if (sendto(u, dgram, sizeof(dgram), 0, (struct sockaddr *)&a, sizeof(a)) != (long)sizeof(dgram) ||
	    recvfrom(u, dgram, sizeof(dgram), 0, NULL, NULL) != (long)sizeof(dgram))
		return 1;

	int sp[2];
	FILE *tmp = tmpfile();
	char chunk[512] = { 0 };
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) || !tmp || fwrite(chunk, 1, sizeof(chunk), tmp) != sizeof(chunk) ||
	    fflush(tmp) || sendfile(sp[0], fileno(tmp), &(off_t){ 0 }, sizeof(chunk)) != (long)sizeof(chunk) ||
	    recv(sp[1], chunk, sizeof(chunk), MSG_WAITALL) != (long)sizeof(chunk))
		return 1;

	int p[2];
	if (pipe(p) || write(p[1], dgram, 8) != 8 || read(p[0], dgram, 8) != 8)
		return 1;
	FILE *f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "%ld %d %d %d\n", (long)syscall(SYS_gettid), (int)net_helper_tid, net_fd[0], net_fd[1]);
	fclose(f);
	return 0;
}

/* The name of JIT kernel i: triton_poi_fused_add_I, except that every fifth is a mangled C++
 * name as long as PyTorch's (at::native::triton_poi_fused_add_I_xx...()): 300 bytes, or 3,000
 * for every tenth. */
static void jit_name(char *out, size_t cap, int i)
{
	if (i % 5 != 4) {
		snprintf(out, cap, "triton_poi_fused_add_%d", i);
		return;
	}
	char ident[3100];
	int len = snprintf(ident, sizeof(ident), "triton_poi_fused_add_%d_", i);
	size_t want = i % 10 == 9 ? 3000 : 300;
	while ((size_t)len < want && (size_t)len + 1 < sizeof(ident))
		ident[len++] = 'x';
	ident[len] = 0;
	snprintf(out, cap, "_ZN2at6native%d%sEv", len, ident);
}

/* JIT-style kernels (as Triton loads them): N functions got by name through the driver, the even
 * ones with cuModuleGetFunction, the odd ones with cuLibraryGetKernel + cuKernelGetFunction, then
 * each launched with cuLaunchKernel ROUNDS x (1 + i % 3) times. */
static int mode_jit(int n, int rounds)
{
	static char names[256][3200];
	void *funcs[256];
	if (n > 256)
		return 2;
	for (int i = 0; i < n; i++) {
		jit_name(names[i], sizeof(names[i]), i);
		if (i % 2 == 0) {
			if (cuModuleGetFunction(&funcs[i], NULL, names[i]))
				return 1;
		} else {
			void *k = NULL;
			if (cuLibraryGetKernel(&k, NULL, names[i]) || cuKernelGetFunction(&funcs[i], k))
				return 1;
		}
	}
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < n; i++)
			for (int j = 0; j <= i % 3; j++)
				cuLaunchKernel(funcs[i], 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	return 0;
}

static int mode_late(int ms)
{
	usleep((useconds_t)ms * 1000);
	return standin_mix(cudaMalloc, cudaMemcpy, cudaLaunchKernel);
}

static long collide_slots, collide_tid;
static int collide_n;

static void collide_calls(void)
{
	launch(collide_n);
	cudaStreamSynchronize((void *)0x7);
}

/* A thread that does the calls only if its tid collides with the main thread's. */
static void *collide_thread(void *arg)
{
	long tid = syscall(SYS_gettid);
	if (tid % collide_slots != collide_tid % collide_slots)
		return NULL;
	*(long *)arg = tid;
	collide_calls();
	return NULL;
}

static int mode_collide(int n, long slots, int ms, const char *out)
{
	collide_slots = slots;
	collide_tid = syscall(SYS_gettid);
	collide_n = n;
	standinSetSyncDelayMs(ms);
	collide_calls();
	long other = 0;
	/* Thread ids are handed out in order: one in SLOTS (and a few more for other processes'
	 * new tasks) collides. */
	for (long i = 0; i < 100 * slots && !other; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, collide_thread, &other))
			return 1;
		pthread_join(t, NULL);
	}
	if (!other)
		return 3;
	collide_calls();
	FILE *f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "%ld %ld\n", collide_tid, other);
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *m = argv[1];
	if (!strcmp(m, "calls") && argc > 2)
		return mode_calls(argv[2]);
	if (!strcmp(m, "sync") && argc > 2)
		return mode_sync(atoi(argv[2]));
	if (!strcmp(m, "preempt") && argc > 3)
		return mode_preempt(argv[2], atoi(argv[3]));
	if (!strcmp(m, "hog") && argc > 3)
		return mode_hog(argv[2], atoi(argv[3]));
	if (!strcmp(m, "fork") && argc > 3)
		return mode_fork(atoi(argv[2]), atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 0);
	if (!strcmp(m, "rate") && argc > 2)
		return mode_rate(atol(argv[2]), argc > 3 ? argv[3] : NULL, argc > 4 ? atoi(argv[4]) : 1,
				 argc > 5 ? atol(argv[5]) : 0);
	if (!strcmp(m, "stacks") && argc > 2)
		return mode_stacks(atoi(argv[2]));
	if (!strcmp(m, "phases") && argc > 4)
		return mode_phases(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(m, "steps") && argc > 5) {
		footprint_len = argc > 7 ? (size_t)atol(argv[7]) << 20 : 0;
		if (footprint_len && !(footprint = calloc(footprint_len, 1)))
			return 2;
		return deep_steps(argc > 6 ? atoi(argv[6]) : 0, atol(argv[2]), atoi(argv[3]),
				  atol(argv[4]), argv[5]);
	}
	if (!strcmp(m, "hold") && argc > 2)
		return mode_hold(atoi(argv[2]));
	if (!strcmp(m, "logged") && argc > 4)
		return mode_logged(atol(argv[2]), atoi(argv[3]), argv[4]);
	if (!strcmp(m, "spin") && argc > 3)
		return mode_spin(atoi(argv[2]), atoi(argv[3]));
	if (!strcmp(m, "net") && argc > 3)
		return mode_net(atoi(argv[2]), argv[3]);
	if (!strcmp(m, "jit") && argc > 3)
		return mode_jit(atoi(argv[2]), atoi(argv[3]));
	if (!strcmp(m, "syncs") && argc > 3)
		return mode_syncs(atol(argv[2]), atoi(argv[3]));
	if (!strcmp(m, "late") && argc > 2)
		return mode_late(atoi(argv[2]));
	if (!strcmp(m, "collide") && argc > 5)
		return mode_collide(atoi(argv[2]), atol(argv[3]), atoi(argv[4]), argv[5]);
	if (!strcmp(m, "syscalls") && argc > 3)
		return mode_syscalls(atol(argv[2]), argv[3]);
	if (!strcmp(m, "files") && argc > 6)
		return mode_files(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]), atol(argv[6]));
	if (!strcmp(m, "mmaps") && argc > 3)
		return mode_mmaps(atol(argv[2]), argv[3]);
	return 2;
}
