// Shared maps, load-time configuration and helpers of every causeway BPF program.
//
// Targeting: `targets` holds the tgids being traced. Host programs only look at targets; the
// uprobes either require a target (--pid, -- COMMAND) or enrol every caller (all CUDA processes).
// Accounting: every call/event is counted per (pid, op) with a log2 duration histogram before the
// ring buffer is tried, so statistics stay exact when events are dropped or not emitted. The
// counters live in the `stats` array, one slot per (pid, op); `stat_slots` maps a key to its slot.
// The call probes cache their thread's slots in its in-flight state (calls.h): an array slot is
// found without hashing, where a hash lookup per probe hit was a tenth of their cost.
#ifndef CAUSEWAY_COMMON_H
#define CAUSEWAY_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "events.h"

#define BPF_MAP_TYPE_LRU_HASH_ 9

/* Accesses the compiler neither drops nor reorders against each other, and a compiler barrier:
 * for state one thread's programs share with a program that can preempt them on the same CPU
 * (calls.h's batches). */
#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))
#define cw_barrier() asm volatile("" ::: "memory")

/* Load-time configuration (set from user space before load). */
const volatile __u32 self_tgid = 0;       /* the collector itself: never traced (wakeup storm) */
const volatile __u32 spawner_tid = 0;     /* thread that forks `-- COMMAND`: its children are enrolled */
const volatile __u8 uprobes_enrol = 0;    /* 1: any process calling a probed library is enrolled */
const volatile __u8 stacks_enabled = 0;   /* 1: record the user stack of every call in full mode */
const volatile __u32 calib_tid = 0;       /* the collector's calibration thread: probes fire for it */
const volatile __u64 ringbuf_bytes = 8 << 20; /* size of `events` (set with its max_entries) */
const volatile __u8 net_sock_tps = 0;     /* 1: socket calls from sock_{send,recv}_length (net.h) */

/* Dummies so libbpf-cargo emits Rust types for the ABI structs (abi.rs checks the layout). */
struct cw_event cw_event_abi = {};
struct cw_stat cw_stat_abi = {};
struct cw_stat_key cw_stat_key_abi = {};
struct cw_stack_event cw_stack_event_abi = {};
struct cw_stack_bytes cw_stack_bytes_abi = {};
struct cw_lib_event cw_lib_event_abi = {};
struct cw_name_event cw_name_event_abi = {};
struct cw_task_event cw_task_event_abi = {};
struct cw_range_event cw_range_event_abi = {};
struct cw_py_frame cw_py_frame_abi = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* resized by user space before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);  /* tgid */
	__type(value, __u8); /* 1 */
} targets SEC(".maps");

/* Statistics slots: (pid, op) -> index into `stats` (slot 0 is never used). */
#define CW_STAT_SLOTS 16384

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CW_STAT_SLOTS);
	__type(key, struct cw_stat_key);
	__type(value, __u32);
} stat_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CW_STAT_SLOTS);
	__type(key, __u32);
	__type(value, struct cw_stat);
} stats SEC(".maps");

/* Next free slot (slots are never reused: a key deleted by user space leaves its slot behind). */
__u32 stat_next_slot = 1;

/* Ring-buffer reservation failures per op, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CW_MAX_OPS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Per-op probe mode (CW_MODE_*), changed at run time by the collector's overhead controller. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CW_MAX_OPS);
	__type(key, __u32);
	__type(value, __u32);
} op_mode SEC(".maps");

/* The op's `op_mode` value: mode and return-probe generation (events.h). */
static __always_inline __u32 cw_op_word(__u16 op)
{
	__u32 k = op;
	__u32 *word = bpf_map_lookup_elem(&op_mode, &k);
	return word ? *word : CW_MODE_FULL;
}

static __always_inline __u32 cw_op_mode(__u16 op)
{
	return cw_op_word(op) & CW_MODE_MASK;
}

static __always_inline bool cw_is_target(__u32 tgid)
{
	if (tgid == self_tgid || tgid == 0)
		return false;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline __u32 cw_log2(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r >= CW_HIST_BUCKETS ? CW_HIST_BUCKETS - 1 : r;
}

/* The statistics slot of (pid, op), created on first use; 0 only when every slot is taken. */
static __always_inline __u32 cw_slot_of(__u32 pid, __u16 op)
{
	struct cw_stat_key key = { .pid = pid, .op = op };
	__u32 *slot = bpf_map_lookup_elem(&stat_slots, &key);
	if (slot)
		return *slot;
	__u32 fresh = __sync_fetch_and_add(&stat_next_slot, 1);
	if (fresh == 0 || fresh >= CW_STAT_SLOTS)
		return 0;
	/* A fresh slot is all zeros (array maps start zeroed, slots are never reused). Another CPU
	 * may have created the key meanwhile: its slot wins and `fresh` stays unused. */
	bpf_map_update_elem(&stat_slots, &key, &fresh, BPF_NOEXIST);
	slot = bpf_map_lookup_elem(&stat_slots, &key);
	return slot ? *slot : 0;
}

/* The counters in `slot`; NULL for slot 0 (none). */
static __always_inline struct cw_stat *cw_stat_at(__u32 slot)
{
	if (slot == 0)
		return NULL;
	return bpf_map_lookup_elem(&stats, &slot);
}

/* The statistics of (pid, op), created on first use; NULL only when the map is full. */
static __always_inline struct cw_stat *cw_stat_of(__u32 pid, __u16 op)
{
	return cw_stat_at(cw_slot_of(pid, op));
}

/* Adds one measured duration (total and log2 histogram). */
static __always_inline void cw_time(struct cw_stat *st, __u64 dur)
{
	__sync_fetch_and_add(&st->total_ns, dur);
	__u32 b = cw_log2(dur);
	if (b < CW_HIST_BUCKETS)
		__sync_fetch_and_add(&st->hist[b], 1);
}

/* Counts one host event of `op` for `pid`; returns true when an event should be emitted. */
static __always_inline bool cw_account(__u32 pid, __u16 op, __u64 dur, __u64 bytes)
{
	struct cw_stat *st = cw_stat_of(pid, op);
	if (!st)
		return true;
	__sync_fetch_and_add(&st->calls, 1);
	__sync_fetch_and_add(&st->bytes, bytes);
	cw_time(st, dur);
	return cw_op_mode(op) == CW_MODE_FULL;
}

static __always_inline void cw_count_stored(__u32 pid, __u16 op)
{
	struct cw_stat_key key = { .pid = pid, .op = op };
	__u32 *slot = bpf_map_lookup_elem(&stat_slots, &key);
	struct cw_stat *st = slot ? cw_stat_at(*slot) : NULL;
	if (st)
		__sync_fetch_and_add(&st->stored, 1);
}

/* Reserves one event; counts a drop for `op` when the ring buffer is full. */
static __always_inline struct cw_event *cw_reserve(__u16 op)
{
	struct cw_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 k = op;
		__u64 *n = bpf_map_lookup_elem(&drops, &k);
		if (n)
			*n += 1;
		return NULL;
	}
	e->flags = 0;
	return e;
}

/* Unread bytes above a quarter of the ring within which a submit wakes the consumer. */
#define CW_WAKE_BAND (16 << 10)

/* Wakeup flag for a submit: none (the consumer polls on a timer) unless the ring is filling up:
 * the submits that cross a quarter full wake the consumer. Only those: once awake it drains
 * until the ring is empty (and finds unread data when it polls again), so further wakeups are
 * wasted, and waking it on every submit above a quarter (as before) made each traced call of a
 * hot thread pay an interrupt until the consumer had drained the ring. */
static __always_inline __u64 cw_wakeup(void)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 mark = ringbuf_bytes / 4;
	if (avail > mark && avail <= mark + CW_WAKE_BAND)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* Wakeup flag for a submit that checks the fill level only now and then (the call probes, every
 * CW_WAKE_CHECK_EVERY events of a thread): wake the consumer whenever the ring is above a
 * quarter full, since the submits crossing the mark are not all checked. */
static __always_inline __u64 cw_wakeup_above(void)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	return avail > ringbuf_bytes / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* The cgroup v2 id of `t` (what bpf_get_current_cgroup_id returns for the current task), read
 * through BTF pointers: no helper call. */
static __always_inline __u64 cw_task_cgroup(struct task_struct *t)
{
	struct css_set *cs = t->cgroups;
	if (!cs)
		return 0;
	struct cgroup *cg = cs->dfl_cgrp;
	if (!cg)
		return 0;
	struct kernfs_node *kn = cg->kn;
	return kn ? kn->id : 0;
}

/* Copies the 16-byte comm of `t` (NUL-padded in the kernel) without a helper call. */
static __always_inline void cw_task_comm(char *dst, struct task_struct *t)
{
	__u64 *d = (__u64 *)dst;
	d[0] = *(__u64 *)&t->comm[0];
	d[1] = *(__u64 *)&t->comm[8];
}

/* Submits a host event with the given wakeup flag and counts it as stored. */
static __always_inline void cw_commit_flags(struct cw_event *e, __u64 flags)
{
	__u32 pid = e->pid;
	__u16 op = e->op;
	e->stack_hash = 0;
	bpf_ringbuf_submit(e, flags);
	cw_count_stored(pid, op);
}

/* Submits a host event and counts it as stored. */
static __always_inline void cw_commit(struct cw_event *e)
{
	cw_commit_flags(e, cw_wakeup());
}

#endif
