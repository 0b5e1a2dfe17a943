// CPython frames of the calling thread at a recorded call (`--stacks`), walked in the kernel.
//
// User space puts a process's interpreter layout into `py_procs` once it has found CPython in
// it (crates/collector/src/python.rs: where _PyRuntime and PyCode_Type are, and the struct offsets of
// its version, from _Py_DebugOffsets where the interpreter publishes them). The calling thread's
// PyThreadState is the one in the main interpreter's thread list whose thread_id (CPython's
// PyThread_get_thread_ident: pthread_self, which glibc keeps in the FS base) equals the task's
// FS base: never another thread's. It is cached per thread and checked again at every use. The
// walk records (code object, instruction) pairs only; user space reads and validates the code
// objects, so a wrong table yields frames it rejects (counted), not wrong names.
#ifndef CAUSEWAY_PYTHON_H
#define CAUSEWAY_PYTHON_H

#include "common.h"

/* An offset a version does not have. */
#define CW_PY_NONE 0xffff
/* Bytes of a frame read at once (3.10's PyFrameObject needs f_lasti at 96). */
#define CW_PY_FRAME_READ 104
/* Threads of an interpreter looked at to find the caller's state. */
#define CW_PY_MAX_THREADS 64
/* Frames stepped over per walk: recorded ones plus the C-stack shims of 3.12+. */
#define CW_PY_MAX_STEPS (CW_MAX_PY_FRAMES + 8)
/* _PyInterpreterFrame.owner of a shim frame that belongs to a C call (3.12+): not Python code. */
#define CW_PY_OWNED_BY_CSTACK 3

/* One process's interpreter (crates/collector/src/python.rs `Layout`). */
struct cw_py_proc {
	__u64 runtime;             /* address of _PyRuntime */
	__u16 interpreters_head;   /* _PyRuntimeState.interpreters.head */
	__u16 threads_head;        /* PyInterpreterState.threads.head (3.10: tstate_head) */
	__u16 tstate_next;         /* PyThreadState.next */
	__u16 tstate_thread_id;    /* PyThreadState.thread_id */
	__u16 tstate_frame;        /* PyThreadState.frame / .cframe / .current_frame */
	__u16 cframe_current;      /* _PyCFrame.current_frame (3.11, 3.12), else CW_PY_NONE */
	__u16 frame_code;          /* f_code / f_executable */
	__u16 frame_previous;      /* f_back / previous */
	__u16 frame_instr;         /* f_lasti / prev_instr / instr_ptr */
	__u16 frame_owner;         /* owner (3.11+), else CW_PY_NONE */
	__u16 frame_read;          /* bytes of a frame to read, <= CW_PY_FRAME_READ */
	__u16 frame_entry;         /* is_entry (3.11), else CW_PY_NONE: 3.12+ mark the frame a C
	                            * call entered with a shim frame below it */
};
struct cw_py_proc cw_py_proc_abi = {}; /* so libbpf-cargo emits the Rust type (abi.rs) */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct cw_py_proc);
} py_procs SEC(".maps");

/* A thread's PyThreadState, from its last walk (checked against the FS base before use). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 16384);
	__type(key, __u64); /* tgid << 32 | tid */
	__type(value, __u64);
} py_tstates SEC(".maps");

/* Walks at recorded calls by outcome (CW_PYC_*), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CW_PYC_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} py_counts SEC(".maps");

static __always_inline void cw_py_count(__u32 slot)
{
	__u64 *n = bpf_map_lookup_elem(&py_counts, &slot);
	if (n)
		*n += 1; /* per-CPU */
}

/* A pointer-sized field at `off` of `base`; 0 when unreadable. */
static __always_inline __u64 cw_py_ptr(__u64 base, __u16 off)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(base + off)) < 0)
		return 0;
	return v;
}

/* Per-CPU scratch of a walk: the frames found and the bytes of the frame being read. */
struct cw_stack_py {
	struct cw_py_frame py[CW_MAX_PY_FRAMES];
	__u32 entry; /* bit i: frame i is the first frame of its C-level eval call */
	__u8 buf[CW_PY_FRAME_READ];
};

/* A field of the frame bytes read into `buf`; 0 past the bytes read. */
static __always_inline __u64 cw_py_field(const __u8 *buf, __u32 off)
{
	if (off > CW_PY_FRAME_READ - 8)
		return 0;
	return *(const __u64 *)(buf + off);
}

/* State of the thread-list search (a bpf_loop callback: the verifier checks one step once,
 * where an unrolled loop of them made the call probe too large to load). */
struct cw_py_find {
	struct cw_py_proc *p;
	__u64 fsbase;
	__u64 ts;    /* the thread state looked at */
	__u64 found;
};

static long cw_py_find_step(__u64 i, void *data)
{
	struct cw_py_find *f = data;
	struct cw_py_proc *p = f->p;
	if (!f->ts || !p)
		return 1;
	if (cw_py_ptr(f->ts, p->tstate_thread_id) == f->fsbase) {
		f->found = f->ts;
		return 1;
	}
	f->ts = cw_py_ptr(f->ts, p->tstate_next);
	return 0;
}

/* The calling thread's PyThreadState, 0 when not found. */
static __always_inline __u64 cw_py_tstate(struct cw_py_proc *p, struct task_struct *task,
					  __u32 tgid)
{
	__u64 fsbase = task->thread.fsbase;
	__u64 key = (__u64)tgid << 32 | (__u32)task->pid;
	if (!fsbase)
		return 0;
	__u64 *cached = bpf_map_lookup_elem(&py_tstates, &key);
	if (cached && *cached && cw_py_ptr(*cached, p->tstate_thread_id) == fsbase)
		return *cached;
	__u64 interp = cw_py_ptr(p->runtime, p->interpreters_head);
	struct cw_py_find f = {
		.p = p,
		.fsbase = fsbase,
		.ts = interp ? cw_py_ptr(interp, p->threads_head) : 0,
		.found = 0,
	};
	bpf_loop(CW_PY_MAX_THREADS, cw_py_find_step, &f, 0);
	if (f.found)
		bpf_map_update_elem(&py_tstates, &key, &f.found, BPF_ANY);
	return f.found;
}

/* State of a frame walk (a bpf_loop callback, as above). */
struct cw_py_walker {
	struct cw_py_proc *p;
	struct cw_stack_py *out;
	__u64 frame;  /* the next frame to read */
	__u64 hash;   /* folded over the recorded (code, instruction) pairs */
	__u32 n;      /* frames recorded */
	__u32 size;   /* bytes of a frame to read */
	__u16 flags;
};

static long cw_py_step(__u64 i, void *data)
{
	struct cw_py_walker *w = data;
	struct cw_py_proc *p = w->p;
	struct cw_stack_py *out = w->out;
	if (!w->frame || !p || !out)
		return 1;
	__u32 n = w->n;
	if (n >= CW_MAX_PY_FRAMES) {
		w->flags |= CW_PY_TRUNCATED;
		return 1;
	}
	__u32 size = w->size;
	if (size > CW_PY_FRAME_READ)
		size = CW_PY_FRAME_READ;
	if (bpf_probe_read_user(out->buf, size, (void *)w->frame) < 0) {
		w->flags |= CW_PY_BAD_READ;
		return 1;
	}
	__u64 prev = cw_py_field(out->buf, p->frame_previous);
	__u32 owner = p->frame_owner;
	if (owner < CW_PY_FRAME_READ && out->buf[owner] == CW_PY_OWNED_BY_CSTACK) {
		/* The frame recorded before the shim is the one the C call entered. */
		if (n > 0)
			out->entry |= 1U << ((n - 1) & 31);
		w->frame = prev;
		return 0;
	}
	__u32 is_entry = p->frame_entry;
	if (is_entry < CW_PY_FRAME_READ && out->buf[is_entry])
		out->entry |= 1U << (n & 31);
	__u64 code = cw_py_field(out->buf, p->frame_code);
	__u64 instr = cw_py_field(out->buf, p->frame_instr);
	out->py[n].code = code;
	out->py[n].instr = instr;
	w->hash = (w->hash ^ code) * 0x100000001b3ULL;
	w->hash = (w->hash ^ instr) * 0x100000001b3ULL;
	w->hash ^= w->hash >> 29;
	w->n = n + 1;
	w->frame = prev;
	return 0;
}

/* Walks the calling thread's Python frames into `out->py` (innermost first); returns how many,
 * sets `flags` (CW_PY_*) and folds the frames into `hash`. Needs bpf_loop (Linux 5.17): on
 * older kernels libbpf resolves the check to false and no Python frames are recorded. */
static __always_inline __u32 cw_py_walk(struct task_struct *task, __u32 tgid,
					struct cw_stack_py *out, __u16 *flags, __u64 *hash)
{
	*flags = 0;
	if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_loop))
		return 0;
	struct cw_py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	__u64 ts = cw_py_tstate(p, task, tgid);
	if (!ts) {
		*flags = CW_PY_NO_THREAD;
		cw_py_count(CW_PYC_NO_THREAD);
		return 0;
	}
	out->entry = 0;
	__u64 frame = cw_py_ptr(ts, p->tstate_frame);
	if (frame && p->cframe_current != CW_PY_NONE)
		frame = cw_py_ptr(frame, p->cframe_current);
	struct cw_py_walker w = {
		.p = p,
		.out = out,
		.frame = frame,
		.hash = *hash,
		.n = 0,
		.size = p->frame_read,
		.flags = CW_PY_WALKED,
	};
	bpf_loop(CW_PY_MAX_STEPS, cw_py_step, &w, 0);
	/* Steps ran out with frames left (a run of shims): cut too. */
	if (w.frame && !(w.flags & (CW_PY_TRUNCATED | CW_PY_BAD_READ)))
		w.flags |= CW_PY_TRUNCATED;
	*flags = w.flags;
	*hash = w.hash;
	cw_py_count(CW_PYC_WALKED);
	if (w.flags & CW_PY_TRUNCATED)
		cw_py_count(CW_PYC_TRUNCATED);
	if (w.flags & CW_PY_BAD_READ)
		cw_py_count(CW_PYC_BAD_READ);
	return w.n;
}

#endif
