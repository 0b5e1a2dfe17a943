// User-space call stacks at CUDA calls (optional: `stacks_enabled`), interned by hash.
//
// The entry program walks the caller's user stack (frame pointers) with bpf_get_stack, hashes the
// instruction pointers together with the process id (addresses mean something only within one
// address space), and sends the frames once per hash as a CW_KIND_STACK record; call events carry
// only the hash. A stack whose record was lost to a full ring buffer is not marked as sent, so
// its next occurrence sends it again. User space symbolises the frames (crates/collector/src/stacks.rs);
// stack records wake it at once, so it can read the process's mappings while the process runs.
// In a CPython process the thread's Python frames (python.h) go into the same record and hash;
// they are recorded even where the native walk fails (code built without frame pointers). With a
// new stack go its registers and stack memory (cw_stack_bytes), so that user space can unwind
// through such code with the files' .eh_frame and place the Python frames among native ones.
#ifndef CAUSEWAY_STACKS_H
#define CAUSEWAY_STACKS_H

#include "common.h"
#include "python.h"

struct cw_stack_scratch {
	__u64 ips[CW_MAX_FRAMES];
	struct cw_stack_py py;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cw_stack_scratch);
} stack_scratch SEC(".maps");

/* Hashes already sent to user space (an evicted one is merely sent again). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} stacks_sent SEC(".maps");

/* Sends the registers and stack memory of a new stack (struct cw_stack_bytes), read in chunks
 * up to the first unreadable one (the top of the thread's stack). A lost record only costs the
 * frames the frame-pointer walk misses (the trace summary counts the stacks unwound). */
static __always_inline void cw_stack_bytes(struct pt_regs *ctx, __u32 tgid, __u64 hash)
{
	struct cw_stack_bytes *b = bpf_ringbuf_reserve(&events, sizeof(*b), 0);
	if (!b)
		return;
	b->kind = CW_KIND_STACK_BYTES;
	b->pad = 0;
	b->pid = tgid;
	b->hash = hash;
	b->ip = ctx->ip;
	b->sp = ctx->sp;
	b->bp = ctx->bp;
	__u16 chunks = 0;
#pragma unroll
	for (__u32 i = 0; i < CW_STACK_CHUNKS; i++) {
		if (bpf_probe_read_user(&b->bytes[i * CW_STACK_CHUNK], CW_STACK_CHUNK,
					(void *)(ctx->sp + i * CW_STACK_CHUNK)) < 0)
			break;
		chunks = i + 1;
	}
	b->chunks = chunks;
	bpf_ringbuf_submit(b, 0);
}

/* The hash of the current user stack (sending its frames if new); 0 when it cannot be read. */
static __always_inline __u64 cw_user_stack(struct pt_regs *ctx, struct task_struct *task,
					   __u32 tgid)
{
	__u32 zero = 0;
	struct cw_stack_scratch *sc = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!sc)
		return 0;
	__u64 *ips = sc->ips;
	__u16 py_flags = 0;
	__u64 py_hash = 0;
	__u32 npy = cw_py_walk(task, tgid, &sc->py, &py_flags, &py_hash);
	/* Walked into ips[1..]: ips[1] is the probed function's first instruction. The probe sits
	 * there, before any frame is set up, so the caller's return address is at [sp]; unwinders
	 * that do not recognise a function entry miss it (the walk resumes at the caller's caller).
	 * Then it goes into ips[1] and the stack starts at ips[0]. */
	long n = bpf_get_stack(ctx, &ips[1], (CW_MAX_FRAMES - 1) * sizeof(__u64), BPF_F_USER_STACK);
	if (n <= 0 && npy == 0)
		return 0;
	__u32 got = n > 0 ? n / sizeof(__u64) : 0;
	__u32 first = 1, nframes = got;
	__u64 ret = 0;
	if (got > 0 && bpf_probe_read_user(&ret, sizeof(ret), (void *)ctx->sp) == 0 && ret &&
	    (got < 2 || ips[2] != ret)) {
		ips[0] = ips[1];
		ips[1] = ret;
		first = 0;
		nframes = got + 1;
	}
	__u64 h = 0xcbf29ce484222325ULL ^ tgid;
	for (__u32 i = 0; i < CW_MAX_FRAMES; i++) {
		__u32 j = first + i;
		if (i >= nframes || j >= CW_MAX_FRAMES)
			break;
		h = (h ^ ips[j]) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	h ^= py_hash;
	/* A thread whose state was not found, or a cut walk, is another stack than a full one. */
	h ^= (__u64)py_flags << 48;
	/* Final avalanche (splitmix64), so that every bit depends on every frame. */
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	if (h == 0)
		h = 1;
	if (bpf_map_lookup_elem(&stacks_sent, &h))
		return h;

	cw_stack_bytes(ctx, tgid, h);
	struct cw_stack_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 k = CW_DROP_STACK;
		__u64 *d = bpf_map_lookup_elem(&drops, &k);
		if (d)
			*d += 1;
		return h;
	}
	e->kind = CW_KIND_STACK;
	e->pad = 0;
	e->nframes = nframes;
	e->pid = tgid;
	e->hash = h;
	for (__u32 i = 0; i < CW_MAX_FRAMES; i++) {
		__u32 j = first + i;
		e->ips[i] = (i < nframes && j < CW_MAX_FRAMES) ? ips[j] : 0;
	}
	e->npy = npy;
	e->py_flags = py_flags;
	e->tid = task->pid;
	/* Entries past npy are what an earlier walk left: user space reads npy of them. */
	__builtin_memcpy(e->py, sc->py.py, sizeof(e->py));
	e->py_entry = npy ? sc->py.entry : 0;
	e->pad2 = 0;
	/* Wake the consumer now (new stacks are rare): it reads the process's mappings while the
	 * process is surely still alive. */
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	__u8 one = 1;
	bpf_map_update_elem(&stacks_sent, &h, &one, BPF_ANY);
	return h;
}

#endif
