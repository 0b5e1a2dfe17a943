// Network programs (tp_btf): TCP retransmits host-wide, and socket send/recv syscalls of traced threads.
//
// Socket calls are the send/recv family (sendto, recvfrom, sendmsg, recvmsg, sendmmsg, recvmmsg)
// seen at raw syscall entry/exit: duration, bytes (the return value, negative = -errno) and fd.
#ifndef CAUSEWAY_NET_H
#define CAUSEWAY_NET_H

#include "common.h"

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

SEC("tp_btf/sys_enter")
int BPF_PROG(cw_sys_enter, struct pt_regs *regs, long id)
{
	__u16 op;
	if (id == CW_NR_SENDTO || id == CW_NR_SENDMSG || id == CW_NR_SENDMMSG)
		op = OP_NET_SEND;
	else if (id == CW_NR_RECVFROM || id == CW_NR_RECVMSG || id == CW_NR_RECVMMSG)
		op = OP_NET_RECV;
	else
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
	__u32 tgid = pid_tgid >> 32;
	__u64 dur = bpf_ktime_get_ns() - s.ts;
	if (!cw_account(tgid, s.op, dur, ret > 0 ? ret : 0))
		return 0;
	struct cw_event *e = cw_reserve(s.op);
	if (!e)
		return 0;
	e->kind = CW_KIND_NET;
	e->op = s.op;
	e->pid = tgid;
	e->tid = tid;
	e->ret = ret < 0 ? ret : 0;
	e->ts = s.ts;
	e->duration = dur;
	e->arg0 = ret;
	e->arg1 = s.fd;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	cw_commit(e);
	return 0;
}

#endif
