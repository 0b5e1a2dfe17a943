// Uprobe/uretprobe programs for CUDA runtime, driver and NCCL calls: entry/exit pairing in the kernel.
//
// One entry and one return program serve every probed function: the attach cookie says which op
// (and cuMemcpy direction) a probe belongs to. The entry saves the start time and arguments keyed
// by (tid, op); the return computes the duration, reads the return code (rax) and out-pointers,
// counts the call in `stats`, and emits one CW_KIND_CALL event unless the op is counters-only.
#ifndef CAUSEWAY_CALLS_H
#define CAUSEWAY_CALLS_H

#include "call_args.h"

struct call_key {
	__u32 tid;
	__u32 op;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 65536);
	__type(key, struct call_key);
	__type(value, struct call_state);
} inflight SEC(".maps");

static __always_inline bool cw_uprobe_target(__u32 tgid)
{
	if (tgid == self_tgid)
		return false;
	if (bpf_map_lookup_elem(&targets, &tgid))
		return true;
	if (!uprobes_enrol)
		return false;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);
	return true;
}

SEC("uprobe")
int cw_call_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!cw_uprobe_target(id >> 32))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct call_key key = { .tid = (__u32)id, .op = cookie & 0xffff };
	struct call_state st = {};
	cw_read_args(ctx, key.op, cookie >> 32, &st);
	st.ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&inflight, &key, &st, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int cw_call_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct call_key key = { .tid = (__u32)id, .op = cookie & 0xffff };
	struct call_state *st = bpf_map_lookup_elem(&inflight, &key);
	if (!st)
		return 0;
	struct call_state s = *st;
	bpf_map_delete_elem(&inflight, &key);

	__s32 ret = (__s32)ctx->ax;
	if (s.out_ptr && ret == 0) {
		__u64 v = 0;
		bpf_probe_read_user(&v, sizeof(v), (void *)s.out_ptr);
		s.arg1 = v;
	}
	__u64 dur = now - s.ts;
	if (!cw_account(tgid, key.op, dur, s.bytes))
		return 0;

	struct cw_event *e = cw_reserve(key.op);
	if (!e)
		return 0;
	e->kind = CW_KIND_CALL;
	e->op = key.op;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->ret = ret;
	e->ts = s.ts;
	e->duration = dur;
	e->arg0 = s.arg0;
	e->arg1 = s.arg1;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	cw_commit(e);
	return 0;
}

/* The bare pair the benchmark compares against: the same attach points, no work at all. */
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
