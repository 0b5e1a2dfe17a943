// Process lifecycle and memory programs (tp_btf): fork (children are enrolled), exec, exit, page
// allocations (counted in the kernel only) and OOM kills.
#ifndef CAUSEWAY_PROC_H
#define CAUSEWAY_PROC_H

#include "common.h"
#include "calls.h" /* cw_inflight_exit */
#include "mmap.h" /* all-process mode: program files exec'd are reported like library files */

static __always_inline void cw_emit_proc(__u16 op, __u8 kind, __u32 pid, __u32 tid, __u64 ts,
					 __u64 dur, __s64 a0, __s64 a1, struct task_struct *t)
{
	if (!cw_account(pid, op, dur, 0))
		return;
	struct cw_event *e = cw_reserve(op);
	if (!e)
		return;
	e->kind = kind;
	e->op = op;
	e->pid = pid;
	e->tid = tid;
	e->ret = 0;
	e->ts = ts;
	e->duration = dur;
	e->arg0 = a0;
	e->arg1 = a1;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_probe_read_kernel(e->comm, sizeof(e->comm), t->comm);
	/* An exec wakes the collector at once: the new program may carry the CUDA runtime linked
	 * statically, which no library mapping reveals (mmap.h), and call it right away. */
	cw_commit_flags(e, op == OP_PROCESS_EXEC ? BPF_RB_FORCE_WAKEUP : cw_wakeup());
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(cw_process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ctgid = child->tgid, cpid = child->pid, ptgid = parent->tgid;
	if (cpid != ctgid)
		return 0; /* a new thread: its process is already (or not) traced */
	bool traced = cw_is_target(ptgid);
	bool spawned = spawner_tid && (__u32)parent->pid == spawner_tid;
	if (!traced && !spawned)
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	if (traced)
		cw_emit_proc(OP_PROCESS_FORK, CW_KIND_PROC, ptgid, parent->pid, bpf_ktime_get_ns(), 0,
			     ctgid, 0, parent);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(cw_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	if (!cw_is_target(tgid)) {
		cw_program_execd(tgid, false, bprm);
		return 0;
	}
	/* Held until user space has checked the program (mmap.h); the event still records the exec. */
	cw_program_execd(tgid, true, bprm);
	cw_emit_proc(OP_PROCESS_EXEC, CW_KIND_PROC, tgid, p->pid, bpf_ktime_get_ns(), 0,
		     p->real_parent->tgid, 0, p);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(cw_process_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = p->tgid, tid = p->pid;
	cw_inflight_exit(tgid, tid);
	if (!cw_is_target(tgid))
		return 0;
	if (!group_dead)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 start = p->start_time;
	int code = p->exit_code;
	__s64 status = (code & 0x7f) ? 128 + (code & 0x7f) : ((code >> 8) & 0xff);
	/* CPU time of the whole process: threads already gone are summed in signal, plus this one. */
	__u64 cpu_ns = p->se.sum_exec_runtime + BPF_CORE_READ(p, signal, sum_sched_runtime);
	cw_emit_proc(OP_PROCESS_EXIT, CW_KIND_PROC, tgid, tid, now, start && start < now ? now - start : 0,
		     status, cpu_ns, p);
	bpf_map_delete_elem(&targets, &tgid);
	return 0;
}

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(cw_mm_page_alloc, struct page *page, unsigned int order, gfp_t gfp, int migratetype)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!cw_is_target(tgid))
		return 0;
	/* Aggregated only: counted per process in `stats`, never emitted (op_mode not consulted). */
	struct cw_stat *st = cw_stat_of(tgid, OP_MM_PAGE_ALLOC);
	if (!st)
		return 0;
	__sync_fetch_and_add(&st->calls, 1);
	__sync_fetch_and_add(&st->bytes, 4096ULL << (order & 31));
	__sync_fetch_and_add(&st->hist[0], 1);
	return 0;
}

/* Reclaim a traced thread does itself, begin time per thread: it allocated memory that was not
 * there (direct: the host is short; memcg: the thread's cgroup is at its limit) and the kernel
 * made it free pages first, evicting page cache the job may read again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* tid */
	__type(value, __u64); /* begin, ns */
} reclaim_start SEC(".maps");

static __always_inline int cw_reclaim_begin(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!cw_is_target(id >> 32))
		return 0;
	__u32 tid = (__u32)id;
	__u64 ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&reclaim_start, &tid, &ts, BPF_ANY);
	return 0;
}

static __always_inline int cw_reclaim_end(__u64 pages, __s64 memcg)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32, tid = (__u32)id;
	__u64 *sp = bpf_map_lookup_elem(&reclaim_start, &tid);
	if (!sp)
		return 0;
	__u64 ts = *sp;
	bpf_map_delete_elem(&reclaim_start, &tid);
	__u64 dur = bpf_ktime_get_ns() - ts;
	__u64 bytes = pages << 12;
	if (!cw_account(pid, OP_MM_RECLAIM, dur, bytes))
		return 0;
	struct cw_event *e = cw_reserve(OP_MM_RECLAIM);
	if (!e)
		return 0;
	e->kind = CW_KIND_MEM;
	e->op = OP_MM_RECLAIM;
	e->pid = pid;
	e->tid = tid;
	e->ret = 0;
	e->ts = ts;
	e->duration = dur;
	e->arg0 = bytes;
	e->arg1 = memcg;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	cw_commit(e);
	return 0;
}

/* Arguments are not read at begin: only the time matters there, and the begin tracepoints
 * have not kept the same arguments across kernel versions. */
SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(cw_direct_reclaim_begin)
{
	return cw_reclaim_begin();
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(cw_direct_reclaim_end, unsigned long nr_reclaimed)
{
	return cw_reclaim_end(nr_reclaimed, 0);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(cw_memcg_reclaim_begin)
{
	return cw_reclaim_begin();
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(cw_memcg_reclaim_end, unsigned long nr_reclaimed)
{
	return cw_reclaim_end(nr_reclaimed, 1);
}

SEC("tp_btf/mark_victim")
int BPF_PROG(cw_oom_kill, struct task_struct *task, uid_t uid)
{
	/* Host-wide: an OOM kill anywhere matters to every traced job. */
	__u64 id = bpf_get_current_pid_tgid();
	cw_emit_proc(OP_OOM_KILL, CW_KIND_OOM, id >> 32, (__u32)id, bpf_ktime_get_ns(), 0,
		     task->tgid, 0, task);
	return 0;
}

#endif
