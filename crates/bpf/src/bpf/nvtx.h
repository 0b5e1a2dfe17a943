// NVTX ranges of a traced command: one uprobe on causeway_nvtx_range in causeway's injection
// library (crates/collector/nvtx/inject.c), which the library calls once per range that ended or mark.
//
// The library has timed the range and holds its name and domain in its own buffers while the
// call lasts; the probe copies them into one CW_KIND_RANGE record. No return probe: nothing is
// timed here. A full ring buffer counts the record in the `drops` slot CW_DROP_NVTX.
#ifndef CAUSEWAY_NVTX_H
#define CAUSEWAY_NVTX_H

#include "common.h"

SEC("uprobe")
int cw_nvtx_range(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid = task->tgid;
	/* Every process that maps the library file fires the probe (two recordings may share
	 * the file); only this recording's targets are recorded. */
	if (!cw_is_target(tgid))
		return 0;
	struct cw_range_event *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__u32 k = CW_DROP_NVTX;
		__u64 *n = bpf_map_lookup_elem(&drops, &k);
		if (n)
			*n += 1; /* per-CPU */
		return 0;
	}
	r->kind = CW_KIND_RANGE;
	r->range = (__u8)ctx->r9;
	r->depth = ctx->r8 > 0xffff ? 0xffff : (__u16)ctx->r8;
	r->pid = tgid;
	r->tid = task->pid;
	r->pad = 0;
	r->start = ctx->dx;
	r->end = ctx->cx;
	if (bpf_probe_read_user_str(r->name, sizeof(r->name), (void *)ctx->di) < 0)
		r->name[0] = 0;
	if (bpf_probe_read_user_str(r->domain, sizeof(r->domain), (void *)ctx->si) < 0)
		r->domain[0] = 0;
	bpf_ringbuf_submit(r, cw_wakeup());
	return 0;
}

#endif
