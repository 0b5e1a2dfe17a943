// Scheduler programs (tp_btf, no tracefs needed): off-CPU intervals and wakeup latency of traced threads.
//
// At switch-out of a traced thread (current == prev) we remember when, which task ran next, the
// state class, the comm and the cgroup; at its switch-in we emit one sched_switch event
// (timestamp = switch-out, duration = off-CPU time, arg0 = next task's pid (kernel pid = thread
// id), arg1 = 0 preempted while runnable / 1 blocked / 2 other, ret = 1 when the thread slept in
// the kernel's I/O wait (io_schedule: a disk read, a page cache fill, a write-back throttle; set
// before any block request exists, so a read held by cgroup I/O throttling counts too), else 0)
// and, when a wakeup was seen, one
// sched_wakeup event (timestamp = wakeup, duration = run-queue latency, arg0 = waker thread id,
// 0 when an interrupt woke it, arg1 = target CPU).
#ifndef CAUSEWAY_SCHED_H
#define CAUSEWAY_SCHED_H

#include "common.h"
#include "net.h" /* cw_net_blocking */

struct offcpu {
	__u64 ts;
	__u64 cgroup_id;
	__u32 next_pid;
	__u32 state;
	__u32 iowait;
	char comm[16];
};

struct wakeup {
	__u64 ts;
	__u32 waker;
	__s32 cpu;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct offcpu);
} offcpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct wakeup);
} wakeups SEC(".maps");

/* Tasks not traced already named to user space (a CW_KIND_TASK record each). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, __u8);
} tasks_seen SEC(".maps");

/* Names `next`, a task that is not traced, the first time it takes a traced thread's CPU. */
static __always_inline void cw_name_task(struct task_struct *next, __u64 now)
{
	__u32 tid = next->pid;
	if (!tid || bpf_map_lookup_elem(&tasks_seen, &tid))
		return;
	__u8 one = 1;
	bpf_map_update_elem(&tasks_seen, &tid, &one, BPF_ANY);
	struct cw_task_event *te = bpf_ringbuf_reserve(&events, sizeof(*te), 0);
	if (!te)
		return;
	te->kind = CW_KIND_TASK;
	te->pad = 0;
	te->pad2 = 0;
	te->tid = tid;
	te->tgid = next->tgid;
	te->pad3 = 0;
	te->ts = now;
	if (bpf_probe_read_kernel_str(te->comm, sizeof(te->comm), next->comm) < 0)
		te->comm[0] = 0;
	bpf_ringbuf_submit(te, 0);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(cw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	/* The clock is read only for a traced thread: this runs at every context switch of the
	 * machine, and a clock read costs ~55 ns on the development VM (docs/benchmarks.md). */
	__u64 now = 0;
	__u32 ptid = prev->pid, ptgid = prev->tgid;
	if (ptid && cw_is_target(ptgid)) {
		now = bpf_ktime_get_ns();
		struct offcpu o = {};
		o.ts = now;
		o.next_pid = next->pid;
		o.state = (preempt || prev_state == 0) ? 0 : ((prev_state & 3) ? 1 : 2);
		o.iowait = o.state ? BPF_CORE_READ_BITFIELD(prev, in_iowait) : 0;
		o.cgroup_id = bpf_get_current_cgroup_id();
		bpf_get_current_comm(o.comm, sizeof(o.comm));
		bpf_map_update_elem(&offcpu, &ptid, &o, BPF_ANY);
		if (o.state == 1)
			cw_net_blocking(prev, ptid, now);
		if (!cw_is_target(next->tgid))
			cw_name_task(next, now);
	}

	__u32 ntid = next->pid, ntgid = next->tgid;
	if (!ntid || !cw_is_target(ntgid))
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();

	struct offcpu *op = bpf_map_lookup_elem(&offcpu, &ntid);
	if (op) {
		struct offcpu o = *op;
		bpf_map_delete_elem(&offcpu, &ntid);
		__u64 dur = now - o.ts;
		if (cw_account(ntgid, OP_SCHED_SWITCH, dur, 0)) {
			struct cw_event *e = cw_reserve(OP_SCHED_SWITCH);
			if (e) {
				e->kind = CW_KIND_SCHED;
				e->op = OP_SCHED_SWITCH;
				e->pid = ntgid;
				e->tid = ntid;
				e->ret = o.iowait;
				e->ts = o.ts;
				e->duration = dur;
				e->arg0 = o.next_pid;
				e->arg1 = o.state;
				e->cgroup_id = o.cgroup_id;
				__builtin_memcpy(e->comm, o.comm, sizeof(e->comm));
				cw_commit(e);
			}
		}
	}

	struct wakeup *wp = bpf_map_lookup_elem(&wakeups, &ntid);
	if (wp) {
		struct wakeup w = *wp;
		bpf_map_delete_elem(&wakeups, &ntid);
		__u64 dur = now - w.ts;
		if (cw_account(ntgid, OP_SCHED_WAKEUP, dur, 0)) {
			struct cw_event *e = cw_reserve(OP_SCHED_WAKEUP);
			if (e) {
				e->kind = CW_KIND_SCHED;
				e->op = OP_SCHED_WAKEUP;
				e->pid = ntgid;
				e->tid = ntid;
				e->ret = 0;
				e->ts = w.ts;
				e->duration = dur;
				e->arg0 = w.waker;
				e->arg1 = w.cpu;
				e->cgroup_id = 0;
				bpf_probe_read_kernel(e->comm, sizeof(e->comm), next->comm);
				cw_commit(e);
			}
		}
	}
	return 0;
}

/* The waker of a wakeup made now: the current thread's id when a task asked for it (a pipe or
 * futex write, a lock release), 0 when an interrupt did (a timer, a device, a softirq), where the
 * current task is only the one it interrupted. The preempt count that says so is a per-CPU
 * variable the kernel may not resolve (no data symbols in kallsyms), so x86-64's entry code
 * tells instead: an interrupt of kernel code runs on the CPU's interrupt stack, and one of user
 * code on the task's stack above user registers whose orig_ax is -1, where a system call's
 * holds its number. */
struct task_struct___stack {
	void *stack;
} __attribute__((preserve_access_index));

static __always_inline __u32 cw_waker(void)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 here = (__u64)(long)&tid;
	__u64 lo = (__u64)(long)((struct task_struct___stack *)cur)->stack;
	struct pt_regs *user = (struct pt_regs *)bpf_task_pt_regs(cur);
	if (!user || here <= lo || here >= (__u64)(long)user)
		return 0;
	return (long)user->orig_ax < 0 ? 0 : tid;
}

/* sched_waking, not sched_wakeup: it runs in the waker's context, where sched_wakeup of a task
 * queued to an idle CPU runs on that CPU from the inter-processor interrupt. */
SEC("tp_btf/sched_waking")
int BPF_PROG(cw_sched_waking, struct task_struct *p)
{
	__u32 tid = p->pid;
	if (!tid || !cw_is_target(p->tgid))
		return 0;
	struct wakeup w = {};
	w.ts = bpf_ktime_get_ns();
	w.waker = cw_waker();
	w.cpu = p->wake_cpu;
	bpf_map_update_elem(&wakeups, &tid, &w, BPF_ANY);
	return 0;
}

#endif
