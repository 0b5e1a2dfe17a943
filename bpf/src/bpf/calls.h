// Uprobe/uretprobe programs for CUDA runtime, driver and NCCL calls: entry/exit pairing in the kernel.
//
// One entry and one return program serve every probed function: the attach cookie says which op
// (and cuMemcpy direction) a probe belongs to. The entry counts the call (and its bytes) in
// `stats` in every probe mode, so counts stay exact whatever the mode; unless the op runs
// entry-only it saves the start time, arguments, mode and (optionally) the user stack keyed by
// (tid, op). The return computes the duration, reads the return code (rax) and out-pointers,
// adds the duration to the op's histogram, and in full mode emits one CW_KIND_CALL event.
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
 * in task-local storage: no hashing, no LRU bookkeeping, freed with the thread. */
#define CW_MAX_NESTED 4

struct inflight {
	struct call_state calls[CW_MAX_NESTED];
	__u16 ops[CW_MAX_NESTED];
	__u32 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

static __always_inline bool cw_uprobe_target(__u64 id)
{
	__u32 tgid = id >> 32;
	if (tgid == self_tgid)
		return calib_tid && (__u32)id == calib_tid;
	if (bpf_map_lookup_elem(&targets, &tgid))
		return true;
	if (!uprobes_enrol)
		return false;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);
	return true;
}

static __always_inline int cw_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!cw_uprobe_target(id))
		return 0;
	__u32 tgid = id >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u16 op = cookie & 0xffff;
	struct inflight *fl = NULL;
	__u32 mode = cw_op_mode(op);
	if (mode != CW_MODE_ENTRY_ONLY) {
		fl = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
					  BPF_LOCAL_STORAGE_GET_F_CREATE);
	}
	struct call_state st = {};
	cw_read_args(ctx, op, cookie >> 32, &st);
	struct cw_stat *s = cw_stat_of(tgid, op);
	if (s) {
		__sync_fetch_and_add(&s->calls, 1);
		__sync_fetch_and_add(&s->bytes, st.bytes);
	}
	if (!fl)
		return 0;
	/* Full: a frame whose return was never seen (its return probe went away) is in the way;
	 * start over (the calls below lose their duration, never their count). */
	__u32 d = fl->depth;
	if (d >= CW_MAX_NESTED)
		d = 0;
	st.mode = mode;
	if (stacks_enabled && mode == CW_MODE_FULL)
		st.stack_hash = cw_user_stack(ctx, tgid);
	st.ts = bpf_ktime_get_ns();
	fl->calls[d] = st;
	fl->ops[d] = op;
	fl->depth = d + 1;
	return 0;
}

static __always_inline int cw_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u16 op = cookie & 0xffff;
	struct inflight *fl = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!fl)
		return 0;
	/* The innermost frame of this op; frames above it missed their returns and go too. */
	__u32 d = fl->depth;
	int found = -1;
	for (int i = CW_MAX_NESTED - 1; i >= 0; i--) {
		if ((__u32)i < d && fl->ops[i] == op) {
			found = i;
			break;
		}
	}
	if (found < 0)
		return 0; /* entered entry-only, or before the trace started */
	struct call_state s = fl->calls[found];
	fl->depth = found;

	__s32 ret = (__s32)ctx->ax;
	if (s.out_ptr && ret == 0) {
		__u64 v = 0;
		bpf_probe_read_user(&v, sizeof(v), (void *)s.out_ptr);
		s.arg1 = v;
	}
	__u64 dur = now - s.ts;
	struct cw_stat *st = cw_stat_of(tgid, op);
	if (st)
		cw_time(st, dur);
	if (s.mode != CW_MODE_FULL)
		return 0;

	struct cw_event *e = cw_reserve(op);
	if (!e)
		return 0;
	e->kind = CW_KIND_CALL;
	e->op = op;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->ret = ret;
	e->ts = s.ts;
	e->duration = dur;
	e->arg0 = s.arg0;
	e->arg1 = s.arg1;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->stack_hash = s.stack_hash;
	bpf_ringbuf_submit(e, cw_wakeup());
	if (st)
		__sync_fetch_and_add(&st->stored, 1);
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
