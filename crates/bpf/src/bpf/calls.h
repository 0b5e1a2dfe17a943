// Uprobe/uretprobe programs for CUDA runtime, driver and NCCL calls: entry/exit pairing in the kernel.
//
// One entry and one return program serve every probed function: the entry probe's attach cookie
// says which op (and cuMemcpy direction) a probe belongs to; the return reads it from the frame.
// The entry counts the call (and its bytes) in `stats` in every probe mode, so counts stay exact
// whatever the mode; it saves the start time, arguments, mode, statistics slot and (optionally)
// the user stack in the thread's in-flight frames (an entry-only or ignored call, a frame that
// only holds its place). The return finds its frame by stack pointer, computes the duration,
// reads the return code (rax) and out-pointers, adds the duration to the op's histogram, and in
// full mode emits one CW_KIND_CALL event.
//
// Per call, the work that does not change between calls of a thread is done once per thread:
// whether its process is traced and its statistics slots are kept in the thread's in-flight
// state, and the thread's ids, name and cgroup are read through the task pointer (no helper
// calls). Measured per probe hit (docs/benchmarks.md), a hash lookup or helper call costs 20-60 ns
// here; the in-flight state is therefore found in an array indexed by thread id (a lookup the
// verifier inlines), with task-local storage only for threads whose array slot is taken.
//
// Full-mode events of a thread with an array slot are not reserved in the ring one by one: they
// are written to the thread's batch (`batches`, same slot) and copied into the ring CW_BATCH at a
// time, as one record of CW_BATCH events back to back. A reserve and submit pair cost about
// 80 ns of BPF time on the development VM (the ring's lock and the producer position shared with
// the consumer's CPU; docs/benchmarks.md); one per call was most of what full mode cost above
// aggregate mode. A batch is flushed
// when it is full, at a call whose batch is older than CW_BATCH_AGE_NS, when its thread leaves
// the CPU (`cw_calls_switch`), when the thread exits (proc.h), and by user space at the end of
// the trace, after the programs are detached. A thread keeping its state in task storage submits
// each event directly.
//
// Each program exists twice: as uprobe.multi (one link per library file; detaching it waits for
// one RCU grace period instead of one per probe, kernels >= 6.6) and as a classic uprobe (older
// kernels). User space loads one variant (LoadConfig::multi).
#ifndef CAUSEWAY_CALLS_H
#define CAUSEWAY_CALLS_H

#include "call_args.h"
#include "stacks.h"

/* Calls in flight on one thread, innermost last: the runtime calls the driver, so a thread can
 * be inside several probed functions at once; returns come in reverse order of entries. Kept
 * in the thread's `threads` slot (or its task-local storage): no hashing, no LRU bookkeeping,
 * freed with the thread. */
#define CW_MAX_NESTED 4
/* Statistics slots of the ops a thread called last (a thread calls a handful of ops). */
#define CW_SLOT_CACHE 8
/* A thread checks the ring's fill level (a helper call, 20-60 ns on the machines measured) once
 * per this many events it submits, not at every submit. */
#define CW_WAKE_CHECK_EVERY 32

struct inflight {
	__u64 owner;     /* `threads` slots: tgid << 32 | tid of the thread using it, 0 = free */
	struct call_state calls[CW_MAX_NESTED];
	__u32 depth;
	__u32 target;    /* 1: the thread's process is traced (targets are removed only at exit) */
	__u32 next_cached;
	__u32 since_check; /* events submitted since the thread last checked the ring's fill */
	__u16 cached_op[CW_SLOT_CACHE];
	__u32 cached_slot[CW_SLOT_CACHE];
};

/* In-flight state of traced threads, slot `tid % CW_THREAD_SLOTS`: an array lookup costs no
 * helper call, where task-local storage cost 23-40 ns more per probe hit (docs/benchmarks.md).
 * A slot belongs to the first traced thread that maps to it until that thread exits; a second
 * thread mapping to a taken slot keeps its state in task-local storage (`inflight`). */
#define CW_THREAD_SLOTS 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CW_THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct inflight);
} threads SEC(".maps");

/* Full-mode events per batch record, and the oldest a batch may get before a call flushes it
 * (a thread that keeps calling without leaving the CPU; one that stops calling is flushed when
 * it leaves the CPU). */
#define CW_BATCH 8
#define CW_BATCH_AGE_NS 100000000ULL

/* Full-mode events of the owner of the same `threads` slot not yet in the ring. Only the owning
 * thread writes its batch: its return probe appends, and its switch-out and exit flush. On
 * preemptible kernels the thread can be switched out while its return probe is appending:
 * `busy` tells the switch-out to leave the batch alone then. User space reads what is left at
 * the end of the trace (abi.rs `decode_batch`). */
struct cw_batch {
	__u32 n;          /* events in `ev` */
	__u32 busy;       /* 1 while the return probe appends */
	__u64 since;      /* bpf_ktime_get_ns() when the first of them was appended */
	__u32 slot[CW_BATCH]; /* statistics slot of each event (`stored` is undone for a drop) */
	struct cw_event ev[CW_BATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CW_THREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct cw_batch);
} batches SEC(".maps");
struct cw_batch cw_batch_abi = {}; /* so libbpf-cargo emits the Rust type (abi.rs) */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

static __always_inline struct inflight *cw_thread_slot(__u32 tid)
{
	__u32 k = tid % CW_THREAD_SLOTS;
	return bpf_map_lookup_elem(&threads, &k);
}

/* The in-flight state of the current thread (`id` = tgid << 32 | tid); NULL when it has none. */
static __always_inline struct inflight *cw_inflight(struct task_struct *task, __u64 id)
{
	struct inflight *fl = cw_thread_slot((__u32)id);
	if (fl && fl->owner == id)
		return fl;
	fl = bpf_task_storage_get(&inflight, task, 0, 0);
	return fl && fl->target ? fl : NULL;
}

static __always_inline struct cw_batch *cw_batch_of(__u32 tid)
{
	__u32 k = tid % CW_THREAD_SLOTS;
	return bpf_map_lookup_elem(&batches, &k);
}

/* Copies the batch's events into the ring as one record. They were counted stored when they
 * were appended; when the ring is full they become drops instead. */
static __always_inline void cw_flush(struct cw_batch *b)
{
	__u32 n = b->n;
	b->n = 0;
	if (n == 0 || n > CW_BATCH)
		return;
	if (!bpf_ringbuf_output(&events, b->ev, n * sizeof(struct cw_event), cw_wakeup_above()))
		return;
	for (__u32 i = 0; i < CW_BATCH; i++) {
		if (i >= n)
			break;
		__u32 k = b->ev[i].op;
		__u64 *d = bpf_map_lookup_elem(&drops, &k);
		if (d)
			*d += 1; /* per-CPU */
		struct cw_stat *st = cw_stat_at(b->slot[i]);
		if (st)
			__sync_fetch_and_add(&st->stored, (__u64)-1);
	}
}

/* Creates the in-flight state of a traced thread: its array slot when free, else task storage. */
static __always_inline struct inflight *cw_inflight_new(struct task_struct *task, __u64 id)
{
	struct inflight *fl = cw_thread_slot((__u32)id);
	if (fl && __sync_val_compare_and_swap(&fl->owner, 0, id) == 0) {
		/* Forget what an earlier owner left: its frames and cached statistics slots (its
		 * batch was flushed when it exited). */
		fl->depth = 0;
		fl->next_cached = 0;
		fl->since_check = 0;
		for (int i = 0; i < CW_SLOT_CACHE; i++)
			fl->cached_slot[i] = 0;
		struct cw_batch *b = cw_batch_of((__u32)id);
		if (b) {
			b->n = 0;
			b->busy = 0;
		}
	} else {
		fl = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	}
	if (fl)
		fl->target = 1;
	return fl;
}

/* Flushes the batch of an exiting thread and frees its array slot (proc.h's exit program, every
 * thread, in the exiting thread's context). */
static __always_inline void cw_inflight_exit(__u32 tgid, __u32 tid)
{
	struct inflight *fl = cw_thread_slot(tid);
	if (!fl || fl->owner != ((__u64)tgid << 32 | tid))
		return;
	struct cw_batch *b = cw_batch_of(tid);
	if (b && b->n)
		cw_flush(b);
	fl->owner = 0;
}

static __always_inline bool cw_uprobe_target(__u32 tgid, __u32 tid)
{
	if (tgid == self_tgid)
		return calib_tid && tid == calib_tid;
	if (bpf_map_lookup_elem(&targets, &tgid))
		return true;
	if (!uprobes_enrol)
		return false;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);
	return true;
}

/* The statistics slot of (tgid, op) through the thread's cache. */
static __always_inline __u32 cw_cached_slot(struct inflight *fl, __u32 tgid, __u16 op)
{
	for (int i = 0; i < CW_SLOT_CACHE; i++) {
		if (fl->cached_op[i] == op && fl->cached_slot[i])
			return fl->cached_slot[i];
	}
	__u32 slot = cw_slot_of(tgid, op);
	if (slot) {
		__u32 i = fl->next_cached % CW_SLOT_CACHE;
		fl->cached_op[i] = op;
		fl->cached_slot[i] = slot;
		fl->next_cached = i + 1;
	}
	return slot;
}

/* Inode numbers of the CUDA runtime files attached (libcudart.so*, or a program with the runtime
 * linked statically), filled by user space at attach (attach.rs). The inode number alone, not
 * (dev, ino): a file in an overlay file system is attached and stat'ed through the overlay, while
 * a mapping's file is the one underneath, with the same inode number and another device. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} runtime_files SEC(".maps");

static long cw_vma_in_runtime(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	__u64 ino = BPF_CORE_READ(vma, vm_file, f_inode, i_ino);
	if (ino && bpf_map_lookup_elem(&runtime_files, &ino))
		*(bool *)data = true;
	return 0;
}

/* Whether a driver call was made by the CUDA runtime on behalf of a runtime call (cudaLaunchKernel
 * calls cuLaunchKernel, cudaMemcpyAsync cuMemcpyAsync, ...: seen with NVIDIA's libcudart.so.13,
 * every runtime call of PyTorch was counted twice). Such a call returns into the runtime's code:
 * at entry the return address is on top of the user stack. Those calls are the runtime call's
 * work, counted and stored once, under the runtime's op; the driver ops keep the calls made to
 * the driver directly (cuBLAS, Triton, CuPy, a program's own). */
static __always_inline bool cw_called_by_runtime(struct pt_regs *ctx, struct task_struct *task)
{
	__u64 ret = 0;
	bool in_runtime = false;
	/* bpf_find_vma came with Linux 5.17: on 5.15 and 5.16 libbpf resolves this to false at load
	 * and the verifier never sees the call; the runtime's driver calls are then counted too. */
	if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_find_vma))
		return false;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)ctx->sp) < 0)
		return false;
	bpf_find_vma(task, ret, cw_vma_in_runtime, &in_runtime, 0);
	return in_runtime;
}

static __always_inline int cw_entry(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid = task->tgid;
	__u64 id = (__u64)tgid << 32 | (__u32)task->pid;
	struct inflight *fl = cw_inflight(task, id);
	if (!fl) {
		if (!cw_uprobe_target(tgid, task->pid))
			return 0;
		fl = cw_inflight_new(task, id);
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u16 op = cookie & 0xffff;
	if (op >= OP_CU_LAUNCH_KERNEL && op <= OP_CU_STREAM_SYNC && cw_called_by_runtime(ctx, task)) {
		/* Not a call, but the trap was paid: the overhead controller costs it. */
		struct cw_stat *n = cw_stat_at(fl ? cw_cached_slot(fl, tgid, op) : cw_slot_of(tgid, op));
		if (n)
			__sync_fetch_and_add(&n->nested, 1);
		return 0;
	}
	__u32 word = cw_op_word(op);
	__u32 mode = word & CW_MODE_MASK;
	struct call_state st = {};
	__u32 slot = 0;
	if (mode != CW_MODE_OFF) {
		cw_read_args(ctx, op, cookie >> 32, &st);
		slot = fl ? cw_cached_slot(fl, tgid, op) : cw_slot_of(tgid, op);
		struct cw_stat *s = cw_stat_at(slot);
		if (s) {
			__sync_fetch_and_add(&s->calls, 1);
			if (st.bytes)
				__sync_fetch_and_add(&s->bytes, st.bytes);
		}
	}
	if (!fl)
		return 0;
	/* Every call whose return may come into a probe gets a frame, an ignored (off) or
	 * entry-only call one that only holds its place: its return must not take the frame of an
	 * earlier call at the same depth that missed its own. A frame whose return was never seen
	 * (its return probe went away) is in the way: start over (the calls below lose their
	 * duration, never their count). */
	__u32 d = fl->depth;
	if (d >= CW_MAX_NESTED)
		d = 0;
	st.mode = mode;
	st.op = op;
	st.slot = slot;
	st.gen = word >> CW_GEN_SHIFT;
	st.sp = ctx->sp;
	if (stacks_enabled && mode == CW_MODE_FULL)
		st.stack_hash = cw_user_stack(ctx, task, tgid);
	if (mode == CW_MODE_FULL || mode == CW_MODE_AGGREGATE)
		st.ts = bpf_ktime_get_ns();
	fl->calls[d] = st;
	fl->depth = d + 1;
	return 0;
}

static __always_inline int cw_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct task_struct *task = bpf_get_current_task_btf();
	struct inflight *fl = cw_inflight(task, (__u64)task->tgid << 32 | (__u32)task->pid);
	if (!fl)
		return 0;
	/* The returning call's frame: entered with the stack pointer at its return address, so
	 * 8 bytes below the stack pointer now. Frames deeper than that missed their returns and
	 * go too; a frame further out belongs to a call still running (this call was entered
	 * entry-only, or before the trace started) and stays. */
	__u64 sp = ctx->sp;
	__u32 d = fl->depth;
	int found = -1;
	for (int i = CW_MAX_NESTED - 1; i >= 0; i--) {
		if ((__u32)i < d && fl->calls[i].sp + 8 >= sp) {
			if (fl->calls[i].sp + 8 == sp)
				found = i;
			break;
		}
	}
	if (found < 0)
		return 0;
	struct call_state s = fl->calls[found];
	fl->depth = found;
	/* Left from before the op's return probes last came back (not this call's frame), or the
	 * frame of a call entered while ignored or entry-only. */
	if (s.gen != cw_op_word(s.op) >> CW_GEN_SHIFT || s.mode == CW_MODE_OFF ||
	    s.mode == CW_MODE_ENTRY_ONLY)
		return 0;

	__s32 ret = (__s32)ctx->ax;
	if (s.out_ptr && ret == 0) {
		__u64 v = 0;
		bpf_probe_read_user(&v, sizeof(v), (void *)s.out_ptr);
		s.arg1 = v;
	}
	if ((s.op == OP_CU_MODULE_GET_FUNCTION || s.op == OP_CU_LIBRARY_GET_KERNEL) && ret == 0 &&
	    s.arg1) {
		/* Kernel names of JIT-compiled code (kernels.rs): rare calls, sent at once. */
		struct cw_name_event *ne = bpf_ringbuf_reserve(&events, sizeof(*ne), 0);
		if (ne) {
			ne->kind = CW_KIND_NAME;
			ne->pad = 0;
			ne->op = s.op;
			ne->pid = task->tgid;
			ne->handle = s.arg1;
			if (bpf_probe_read_user_str(ne->name, sizeof(ne->name), (void *)s.arg0) < 0)
				ne->name[0] = 0;
			bpf_ringbuf_submit(ne, 0);
		}
	}
	__u64 dur = now - s.ts;
	struct cw_stat *st = cw_stat_at(s.slot);
	if (st)
		cw_time(st, dur);
	if (s.mode != CW_MODE_FULL)
		return 0;

	__u16 op = s.op;
	struct cw_batch *b = NULL;
	struct cw_event *e;
	__u32 n = 0;
	if (fl->owner) {
		/* An array slot: append to the thread's batch. */
		b = cw_batch_of(task->pid);
		if (!b)
			return 0;
		WRITE_ONCE(b->busy, 1);
		cw_barrier();
		n = b->n;
		if (n >= CW_BATCH)
			n = 0; /* not reached: a full batch is flushed at once */
		if (n == 0)
			b->since = now;
		b->slot[n] = s.slot;
		e = &b->ev[n];
		e->flags = 0;
	} else {
		e = cw_reserve(op);
		if (!e)
			return 0;
	}
	e->kind = CW_KIND_CALL;
	e->op = op;
	e->pid = task->tgid;
	e->tid = task->pid;
	e->ret = ret;
	e->ts = s.ts;
	e->duration = dur;
	e->arg0 = s.arg0;
	e->arg1 = s.arg1;
	e->cgroup_id = cw_task_cgroup(task);
	cw_task_comm(e->comm, task);
	e->stack_hash = s.stack_hash;
	if (b) {
		if (st)
			__sync_fetch_and_add(&st->stored, 1);
		b->n = ++n;
		if (n >= CW_BATCH || now - b->since > CW_BATCH_AGE_NS)
			cw_flush(b);
		cw_barrier();
		WRITE_ONCE(b->busy, 0);
		return 0;
	}
	__u64 wake = BPF_RB_NO_WAKEUP;
	if (++fl->since_check >= CW_WAKE_CHECK_EVERY) {
		fl->since_check = 0;
		wake = cw_wakeup_above();
	}
	bpf_ringbuf_submit(e, wake);
	if (st)
		__sync_fetch_and_add(&st->stored, 1);
	return 0;
}

/* A traced thread leaving the CPU flushes its batch, unless its return probe was preempted
 * while appending (it is flushed at the next switch-out, or when full). */
SEC("tp_btf/sched_switch")
int BPF_PROG(cw_calls_switch, bool preempt, struct task_struct *prev)
{
	__u32 tid = prev->pid;
	struct cw_batch *b = cw_batch_of(tid);
	if (!b || !b->n || READ_ONCE(b->busy))
		return 0;
	struct inflight *fl = cw_thread_slot(tid);
	if (fl && fl->owner == ((__u64)prev->tgid << 32 | tid))
		cw_flush(b);
	return 0;
}

SEC("uprobe.multi")
int cw_call_entry_multi(struct pt_regs *ctx)
{
	return cw_entry(ctx);
}

SEC("uretprobe.multi")
int cw_call_exit_multi(struct pt_regs *ctx)
{
	return cw_exit(ctx);
}

SEC("uprobe")
int cw_call_entry(struct pt_regs *ctx)
{
	return cw_entry(ctx);
}

SEC("uretprobe")
int cw_call_exit(struct pt_regs *ctx)
{
	return cw_exit(ctx);
}

/* The bare pair the calibration and the benchmark compare against: the same attach points and
 * attach mechanism, no work at all. */
SEC("uprobe.multi")
int cw_bare_entry_multi(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe.multi")
int cw_bare_exit_multi(struct pt_regs *ctx)
{
	return 0;
}

SEC("uprobe")
int cw_bare_entry(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int cw_bare_exit(struct pt_regs *ctx)
{
	return 0;
}

#endif
