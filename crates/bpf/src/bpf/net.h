// Network programs (tp_btf): TCP retransmits host-wide, and socket send/recv calls of traced threads.
//
// Socket calls: every send or receive on a socket by a traced thread (send, sendto, sendmsg,
// sendmmsg, recv, recvfrom, recvmsg, recvmmsg, and read/write/readv/writev/sendfile on a
// socket), seen where the kernel's sock_sendmsg/sock_recvmsg return (the sock_send_length and
// sock_recv_length tracepoints, Linux >= 6.3): bytes (the return value, negative = -errno), the
// descriptor, and how long the call was blocked: from the first time its thread blocked inside
// it (sched.h's switch-out program checks the blocking thread's system call) to its return, 0
// for a call that did not block. A call's on-CPU time before it blocks (microseconds of copying)
// is not counted.
//
// Why not the raw sys_enter/sys_exit tracepoints, which time the whole system call: a program
// there sends every system call of every process on the machine through the kernel's traced
// entry and exit paths, and where uretprobes return through a system call (x86-64, Linux
// >= 6.11) every probed call's return too: a getppid() took ~350 ns instead of ~180 ns on the
// development VM (probe_cost bench, system call table). They remain the fallback on kernels
// without the socket tracepoints (`net_sock_tps` = 0).
#ifndef CAUSEWAY_NET_H
#define CAUSEWAY_NET_H

#include "common.h"
#include "mmap.h" /* cw_fd_file */

#define CW_NR_READ 0
#define CW_NR_WRITE 1
#define CW_NR_READV 19
#define CW_NR_WRITEV 20
#define CW_NR_SENDFILE 40
#define CW_NR_SENDTO 44
#define CW_NR_RECVFROM 45
#define CW_NR_SENDMSG 46
#define CW_NR_RECVMSG 47
#define CW_NR_RECVMMSG 299
#define CW_NR_SENDMMSG 307

struct net_start {
	__u64 ts;
	__u64 fd;
	__u16 op;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct net_start);
} net_start SEC(".maps");

/* Send (OP_NET_SEND) or receive (OP_NET_RECV) for a send/recv family system call `nr`, else 0. */
static __always_inline __u16 cw_sock_family_op(long nr)
{
	if (nr == CW_NR_SENDTO || nr == CW_NR_SENDMSG || nr == CW_NR_SENDMMSG)
		return OP_NET_SEND;
	if (nr == CW_NR_RECVFROM || nr == CW_NR_RECVMSG || nr == CW_NR_RECVMMSG)
		return OP_NET_RECV;
	return 0;
}

/* Send (OP_NET_SEND) or receive (OP_NET_RECV) for the socket system call `nr`, 0 for other
 * calls; read/write/readv/writev/sendfile count when `fd` (their first argument) of `t` is a
 * socket. */
static __always_inline __u16 cw_sock_op(struct task_struct *t, long nr, __u64 fd)
{
	__u16 op = cw_sock_family_op(nr);
	if (op)
		return op;
	if (nr != CW_NR_READ && nr != CW_NR_WRITE && nr != CW_NR_READV && nr != CW_NR_WRITEV &&
	    nr != CW_NR_SENDFILE)
		return 0;
	struct file *f = cw_fd_file(t, fd);
	if (!f || (BPF_CORE_READ(f, f_inode, i_mode) & 0170000) != 0140000) /* S_ISSOCK */
		return 0;
	return (nr == CW_NR_READ || nr == CW_NR_READV) ? OP_NET_RECV : OP_NET_SEND;
}

/* sched.h: traced thread `t` (current) is blocking; if inside a socket call, its blocked time
 * starts now (the first block of the call counts). */
static __always_inline void cw_net_blocking(struct task_struct *t, __u32 tid, __u64 now)
{
	if (!net_sock_tps)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return;
	__u64 fd = regs->di;
	__u16 op = cw_sock_op(t, regs->orig_ax, fd);
	if (!op)
		return;
	struct net_start s = { .ts = now, .fd = fd, .op = op };
	bpf_map_update_elem(&net_start, &tid, &s, BPF_NOEXIST);
}

/* Counts one socket call of thread `tid` of `tgid` (started at `ts`, `dur` ns, returned `ret`,
 * on descriptor `fd`) and emits its event. */
static __always_inline void cw_emit_net(__u32 tgid, __u32 tid, __u16 op, __u64 ts, __u64 dur,
					long ret, __s64 fd)
{
	if (!cw_account(tgid, op, dur, ret > 0 ? ret : 0))
		return;
	struct cw_event *e = cw_reserve(op);
	if (!e)
		return;
	e->kind = CW_KIND_NET;
	e->op = op;
	e->pid = tgid;
	e->tid = tid;
	e->ret = ret < 0 ? ret : 0;
	e->ts = ts;
	e->duration = dur;
	e->arg0 = ret;
	e->arg1 = fd;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	cw_commit(e);
}

/* A socket send or receive of the current thread returned `ret`. */
static __always_inline void cw_sock_done(__u16 op, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!cw_is_target(tgid))
		return;
	__u64 now = bpf_ktime_get_ns(), ts = now;
	__s64 fd = -1;
	struct net_start *sp = bpf_map_lookup_elem(&net_start, &tid);
	if (sp) {
		if (sp->op == op) {
			ts = sp->ts;
			fd = sp->fd;
		}
		bpf_map_delete_elem(&net_start, &tid);
	}
	if (fd < 0) {
		struct task_struct *t = bpf_get_current_task_btf();
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
		if (regs && cw_sock_op(t, regs->orig_ax, regs->di))
			fd = regs->di;
	}
	cw_emit_net(tgid, tid, op, ts, now - ts, ret, fd);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(cw_sock_send, struct sock *sk, int ret, int flags)
{
	cw_sock_done(OP_NET_SEND, ret);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(cw_sock_recv, struct sock *sk, int ret, int flags)
{
	cw_sock_done(OP_NET_RECV, ret);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(cw_tcp_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u16 dport = sk->__sk_common.skc_dport;
	__u16 family = sk->__sk_common.skc_family;
	cw_account(id >> 32, OP_TCP_RETRANSMIT, 0, 0);
	struct cw_event *e = cw_reserve(OP_TCP_RETRANSMIT);
	if (!e)
		return 0;
	e->kind = CW_KIND_TCP;
	e->op = OP_TCP_RETRANSMIT;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->ret = 0;
	e->ts = bpf_ktime_get_ns();
	e->duration = 0;
	e->arg0 = bpf_ntohs(dport);
	e->arg1 = family;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	cw_commit(e);
	return 0;
}

/* Fallback where the socket tracepoints do not exist: the whole system call, timed from entry
 * to exit (send/recv family only). */
SEC("tp_btf/sys_enter")
int BPF_PROG(cw_sys_enter, struct pt_regs *regs, long id)
{
	__u16 op = cw_sock_family_op(id);
	if (!op)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!cw_is_target(pid_tgid >> 32))
		return 0;
	__u32 tid = (__u32)pid_tgid;
	struct net_start s = {};
	s.ts = bpf_ktime_get_ns();
	s.fd = regs->di;
	s.op = op;
	bpf_map_update_elem(&net_start, &tid, &s, BPF_ANY);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(cw_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct net_start *sp = bpf_map_lookup_elem(&net_start, &tid);
	if (!sp)
		return 0;
	struct net_start s = *sp;
	bpf_map_delete_elem(&net_start, &tid);
	cw_emit_net(pid_tgid >> 32, tid, s.op, s.ts, bpf_ktime_get_ns() - s.ts, ret, s.fd);
	return 0;
}

#endif
