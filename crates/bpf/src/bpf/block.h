// Block I/O programs (tp_btf): requests issued by traced processes, from issue to completion.
//
// Event: timestamp = issue, duration = issue to completion, arg0 = bytes, arg1 = device number
// (kernel dev_t: major << 20 | minor), ret = blk_status_t; op by direction (read/write/discard).
#ifndef CAUSEWAY_BLOCK_H
#define CAUSEWAY_BLOCK_H

#include "common.h"

#define CW_REQ_OP_MASK 0xff
#define CW_REQ_OP_READ 0
#define CW_REQ_OP_WRITE 1
#define CW_REQ_OP_DISCARD 3

struct blk_start {
	__u64 ts;
	__u64 bytes;
	__u64 cgroup_id;
	__u32 pid;
	__u32 tid;
	__u32 dev;
	__u16 op;
	__u16 pad;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct request * */
	__type(value, struct blk_start);
} blk_start SEC(".maps");

SEC("tp_btf/block_rq_issue")
int BPF_PROG(cw_block_rq_issue, struct request *rq)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!cw_is_target(id >> 32))
		return 0;
	__u32 flags = rq->cmd_flags & CW_REQ_OP_MASK;
	__u16 op;
	if (flags == CW_REQ_OP_READ)
		op = OP_BLOCK_READ;
	else if (flags == CW_REQ_OP_WRITE)
		op = OP_BLOCK_WRITE;
	else if (flags == CW_REQ_OP_DISCARD)
		op = OP_BLOCK_DISCARD;
	else
		return 0;
	struct blk_start s = {};
	s.ts = bpf_ktime_get_ns();
	s.bytes = rq->__data_len;
	s.cgroup_id = bpf_get_current_cgroup_id();
	s.pid = id >> 32;
	s.tid = (__u32)id;
	struct block_device *part = rq->part;
	s.dev = part ? part->bd_dev : 0;
	s.op = op;
	bpf_get_current_comm(s.comm, sizeof(s.comm));
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&blk_start, &key, &s, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(cw_block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct blk_start *sp = bpf_map_lookup_elem(&blk_start, &key);
	if (!sp)
		return 0;
	struct blk_start s = *sp;
	bpf_map_delete_elem(&blk_start, &key);
	__u64 dur = bpf_ktime_get_ns() - s.ts;
	if (!cw_account(s.pid, s.op, dur, s.bytes))
		return 0;
	struct cw_event *e = cw_reserve(s.op);
	if (!e)
		return 0;
	e->kind = CW_KIND_IO;
	e->op = s.op;
	e->pid = s.pid;
	e->tid = s.tid;
	e->ret = error;
	e->ts = s.ts;
	e->duration = dur;
	e->arg0 = s.bytes;
	e->arg1 = s.dev;
	e->cgroup_id = s.cgroup_id;
	__builtin_memcpy(e->comm, s.comm, sizeof(e->comm));
	cw_commit(e);
	return 0;
}

#endif
