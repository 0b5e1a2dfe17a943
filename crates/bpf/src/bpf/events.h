// The event ABI between the BPF programs and user space (mirrored by crates/bpf/src/abi.rs).
//
// Every ring-buffer record is one `struct cw_event`: a leading kind tag, the catalogue op id
// (crates/ops/src/lib.rs), who, when, and two op-specific arguments whose meaning the catalogue
// documents. Change this file and abi.rs together (a unit test checks the size and offsets).
#ifndef CAUSEWAY_EVENTS_H
#define CAUSEWAY_EVENTS_H

/* Kind tags (first byte of every record). */
#define CW_KIND_CALL 1  /* a paired uprobe/uretprobe call (CUDA runtime, driver, graph, NCCL) */
#define CW_KIND_SCHED 2 /* off-CPU interval or wakeup latency of a traced thread */
#define CW_KIND_PROC 3  /* fork / exec / exit of a traced process */
#define CW_KIND_IO 4    /* block I/O request, issue to completion */
#define CW_KIND_TCP 5   /* TCP retransmit */
#define CW_KIND_NET 6   /* socket send/recv syscall */
#define CW_KIND_OOM 7   /* OOM kill */
#define CW_KIND_STACK 8 /* a user-space call stack seen for the first time (struct cw_stack_event) */
#define CW_KIND_LIB 9   /* a traced process mapped a CUDA library executable (struct cw_lib_event) */
#define CW_KIND_NAME 10 /* the name a driver function or kernel was got by (struct cw_name_event) */
#define CW_KIND_TASK 11 /* a task not traced that took the CPU from a traced thread (struct cw_task_event) */
#define CW_KIND_MEM 12  /* memory reclaim a traced thread did itself */
#define CW_KIND_STACK_BYTES 13 /* the stack memory under a new user stack (struct cw_stack_bytes) */
#define CW_KIND_RANGE 14 /* an NVTX range or mark of a traced command ended (struct cw_range_event) */

/* Libraries of a CW_KIND_LIB record (the file-name stems of crates/bpf/src/probes.rs `Library`). */
#define CW_LIB_CUDART 1 /* libcudart.so* */
#define CW_LIB_CUDA 2   /* libcuda.so* */
#define CW_LIB_NCCL 3   /* libnccl.so* */
#define CW_LIB_EXEC 4   /* not a library: a program file a process exec'd (all-process mode), to be
                         * checked for a CUDA runtime linked statically */
#define CW_LIB_OBJECT 5 /* a file of any other name a traced process mapped executable (a Python
                         * extension module, say), to be checked for a CUDA runtime linked in */

/* Op ids used in the kernel: the op table's (crates/ops/src/lib.rs); crates/bpf/build.rs checks them. */
#define OP_CUDA_MALLOC 1
#define OP_CUDA_FREE 2
#define OP_CUDA_LAUNCH_KERNEL 3
#define OP_CUDA_MEMCPY 4
#define OP_CUDA_STREAM_SYNC 5
#define OP_CUDA_DEVICE_SYNC 6
#define OP_CUDA_MEMCPY_ASYNC 7
#define OP_CUDA_MALLOC_MANAGED 8
#define OP_CUDA_MEMCPY_2D 9
#define OP_CUDA_MEMCPY_2D_ASYNC 10
#define OP_CUDA_MEMCPY_PEER 11
#define OP_CUDA_MEMCPY_PEER_ASYNC 12
#define OP_CUDA_MEMSET_ASYNC 13
#define OP_CUDA_EVENT_SYNC 14
#define OP_CUDA_GET_KERNEL 15
#define OP_GRAPH_LAUNCH 30
#define OP_GRAPH_BEGIN_CAPTURE 31
#define OP_GRAPH_END_CAPTURE 32
#define OP_GRAPH_INSTANTIATE 33
#define OP_CU_LAUNCH_KERNEL 50
#define OP_CU_MEMCPY 51
#define OP_CU_MEMCPY_ASYNC 52
#define OP_CU_CTX_SYNC 53
#define OP_CU_MEM_ALLOC 54
#define OP_CU_MEM_ALLOC_MANAGED 55
#define OP_CU_LAUNCH_KERNEL_EX 56
#define OP_CU_MEM_FREE 57
#define OP_CU_STREAM_SYNC 58
#define OP_CU_MODULE_GET_FUNCTION 59
#define OP_CU_LIBRARY_GET_KERNEL 60
#define OP_CU_KERNEL_GET_FUNCTION 61
#define OP_SCHED_SWITCH 100
#define OP_SCHED_WAKEUP 101
#define OP_MM_PAGE_ALLOC 102
#define OP_OOM_KILL 103
#define OP_PROCESS_EXEC 104
#define OP_PROCESS_EXIT 105
#define OP_PROCESS_FORK 106
#define OP_MM_RECLAIM 110
#define OP_BLOCK_READ 130
#define OP_BLOCK_WRITE 131
#define OP_BLOCK_DISCARD 132
#define OP_TCP_RETRANSMIT 150
#define OP_NET_SEND 170
#define OP_NET_RECV 171
#define OP_NCCL_ALL_REDUCE 200
#define OP_NCCL_BROADCAST 201
#define OP_NCCL_REDUCE 202
#define OP_NCCL_ALL_GATHER 203
#define OP_NCCL_REDUCE_SCATTER 204
#define OP_NCCL_SEND 205
#define OP_NCCL_RECV 206
#define OP_NCCL_GROUP_END 207

/* Op ids index the per-CPU drop array and the op-mode array. */
#define CW_MAX_OPS 256
/* Op id of the collector's own calibration probe (never recorded; see crates/collector/src/calibrate.rs). */
#define OP_CALIBRATE 255
/* Drop-array slot counting stack records lost to a full ring buffer (op 0 is no op). */
#define CW_DROP_STACK 0
/* Drop-array slot counting NVTX range records lost to a full ring buffer (not an op id). */
#define CW_DROP_NVTX 254

/* Probe modes of an op (the op_mode map), chosen by the collector's overhead controller. Calls
 * are counted at entry in every mode, so counts stay exact across mode switches. */
#define CW_MODE_FULL 0       /* entry + return: duration histogram and one event per call */
#define CW_MODE_AGGREGATE 1  /* entry + return: duration histogram only, no ring-buffer events */
#define CW_MODE_ENTRY_ONLY 2 /* entry only (user space detaches the return probe): calls, bytes */
/* Probes attached but ignored: a sampled op's links coming or going, so that its calls are
 * counted exactly over the slice user space times as attached. */
#define CW_MODE_OFF 3
/* An `op_mode` value holds the mode in its low byte and, above it, the op's return-probe
 * generation: user space adds one each time the op's return probes come back (a sampled
 * slice begins, entry-only ends). A call in flight when its return probe went away leaves its
 * frame; a call entered while the op was ignored returns into the probe with none of its own,
 * at the same stack depth. Each frame keeps its generation, and a return pairs only with a
 * frame of the current one. */
#define CW_MODE_MASK 0xff
#define CW_GEN_SHIFT 8

/* Deepest user stack recorded (innermost frames first). */
#define CW_MAX_FRAMES 32
/* Most Python frames recorded per stack (innermost first); deeper stacks are cut and flagged. */
#define CW_MAX_PY_FRAMES 32

/* Flags of a stack's Python frames (struct cw_stack_event.py_flags). */
#define CW_PY_WALKED 1    /* the process runs a known CPython and the thread's state was found */
#define CW_PY_TRUNCATED 2 /* more Python frames than CW_MAX_PY_FRAMES: the outermost are cut */
#define CW_PY_NO_THREAD 4 /* a known CPython, but the calling thread's state was not found */
#define CW_PY_BAD_READ 8  /* a frame could not be read: the frames before it are kept */

/* Slots of the per-CPU `py_counts` array: walks at recorded calls, by outcome. */
#define CW_PYC_WALKED 0
#define CW_PYC_NO_THREAD 1
#define CW_PYC_TRUNCATED 2
#define CW_PYC_BAD_READ 3
#define CW_PYC_SLOTS 4
/* log2 histogram buckets of durations in ns (bucket i counts [2^i, 2^(i+1)), bucket 0 also 0). */
#define CW_HIST_BUCKETS 40

struct cw_event {
	__u8 kind;          /* CW_KIND_* */
	__u8 flags;         /* reserved, 0 */
	__u16 op;           /* catalogue op id */
	__u32 pid;          /* process id (tgid) */
	__u32 tid;          /* thread id */
	__s32 ret;          /* return code of the call, 0 for host events */
	__u64 ts;           /* CLOCK_MONOTONIC ns (bpf_ktime_get_ns) of the start */
	__u64 duration;     /* ns, meaning per op (catalogue) */
	__s64 arg0;         /* per op (catalogue) */
	__s64 arg1;         /* per op (catalogue) */
	__u64 cgroup_id;    /* cgroup v2 id of the task */
	char comm[16];      /* task comm (thread name) */
	__u64 stack_hash;   /* user stack at the call (struct cw_stack_event.hash), 0 = none */
};

/* One CPython frame: its code object and where in it the thread is (3.11+: the instruction
 * pointer; 3.10: f_lasti, an instruction index). User space reads the code object. */
struct cw_py_frame {
	__u64 code;
	__u64 instr;
};

/* A user stack, sent once per distinct (process, frames) hash; events refer to it by hash. The
 * hash covers the Python frames too: one native stack runs many Python lines. */
struct cw_stack_event {
	__u8 kind;          /* CW_KIND_STACK */
	__u8 pad;
	__u16 nframes;      /* valid entries of ips */
	__u32 pid;          /* process (tgid) whose address space the ips belong to */
	__u64 hash;         /* never 0 */
	__u64 ips[CW_MAX_FRAMES];
	__u16 npy;          /* valid entries of py */
	__u16 py_flags;     /* CW_PY_* */
	__u32 tid;          /* the calling thread */
	struct cw_py_frame py[CW_MAX_PY_FRAMES];
	__u32 py_entry;     /* bit i: Python frame i is the first its C-level eval call ran */
	__u32 pad2;
};

/* Stack memory copied from the stack pointer up, in chunks, at most this much. */
#define CW_STACK_CHUNK 1024
#define CW_STACK_CHUNKS 16

/* The registers and stack memory of a call whose user stack is new, sent just before its struct
 * cw_stack_event: user space unwinds it with the files' unwind tables (.eh_frame), through code
 * built without frame pointers, where the kernel's frame-pointer walk stops. */
struct cw_stack_bytes {
	__u8 kind;          /* CW_KIND_STACK_BYTES */
	__u8 pad;
	__u16 chunks;       /* CW_STACK_CHUNK-byte chunks of `bytes` read, from the stack pointer */
	__u32 pid;
	__u64 hash;         /* struct cw_stack_event.hash of the stack */
	__u64 ip;           /* the probed function's first instruction */
	__u64 sp;
	__u64 bp;
	__u8 bytes[CW_STACK_CHUNK * CW_STACK_CHUNKS];
};

/* The name cuModuleGetFunction / cuLibraryGetKernel got a handle by, read when the call returns
 * (the caller's string may be gone by the time user space could read it). Mangled C++ kernel
 * names run to hundreds of bytes (PyTorch's elementwise kernels, CUTLASS templates); the calls
 * are rare (once per kernel), so a record holds up to 4 KiB. */
#define CW_NAME_LEN 4096
struct cw_name_event {
	__u8 kind;          /* CW_KIND_NAME */
	__u8 pad;
	__u16 op;           /* the call's op id */
	__u32 pid;          /* process (tgid) */
	__u64 handle;       /* the CUfunction / CUkernel returned */
	char name[CW_NAME_LEN]; /* NUL-terminated, cut at CW_NAME_LEN - 1 bytes */
};

/* An NVTX range (or mark) that ended in a traced process, as causeway's injection library
 * (crates/collector/nvtx/inject.c) reported it: its name and domain are copied when it ends, from the
 * library's own buffers. Times are CLOCK_MONOTONIC ns, read by the library. */
#define CW_RANGE_NAME_LEN 256
#define CW_RANGE_DOMAIN_LEN 64
#define CW_RANGE_PUSH_POP 1  /* nvtxRangePush/Pop (depth: its nesting on the thread) */
#define CW_RANGE_START_END 2 /* nvtxRangeStart/End (depth 0; may end on another thread) */
#define CW_RANGE_MARK 3      /* nvtxMark: start == end, depth: the ranges open around it */
struct cw_range_event {
	__u8 kind;          /* CW_KIND_RANGE */
	__u8 range;         /* CW_RANGE_* */
	__u16 depth;        /* 0 = outermost range open on the thread */
	__u32 pid;          /* process (tgid) */
	__u32 tid;          /* thread that ended it */
	__u32 pad;
	__u64 start;        /* CLOCK_MONOTONIC ns */
	__u64 end;
	char name[CW_RANGE_NAME_LEN];     /* NUL-terminated, cut */
	char domain[CW_RANGE_DOMAIN_LEN]; /* empty for the default domain */
};

/* A task that is not traced ran when a traced thread was switched out (a preemptor), sent the
 * first time it is seen: the sched_switch events name it by thread id only, and it may be gone
 * (or its thread id reused) by the time user space could read /proc. */
struct cw_task_event {
	__u8 kind;          /* CW_KIND_TASK */
	__u8 pad;
	__u16 pad2;
	__u32 tid;          /* kernel pid of the task: the thread id (sched_switch arg0) */
	__u32 tgid;         /* its process */
	__u32 pad3;
	__u64 ts;           /* boot-time ns of the switch */
	char comm[16];      /* its thread name */
};

/* Identity of a mapped file: the kernel's dev_t of its file system (MAJOR << 20 | MINOR, not
 * the st_dev encoding of stat) and its inode number. */
struct cw_file_key {
	__u64 dev;
	__u64 ino;
};

/* A traced process mapped a CUDA library (or, CW_LIB_OBJECT, another file) with PROT_EXEC, or
 * (CW_LIB_EXEC, all-process mode)
 * some process exec'd a program file (sent with a wakeup, once per file until user space marks
 * the file seen in `lib_files_seen`). */
struct cw_lib_event {
	__u8 kind;          /* CW_KIND_LIB */
	__u8 library;       /* CW_LIB_* */
	__u16 fd1;          /* the descriptor mmap(2) mapped it from, + 1 (0: unknown, an exec, >= 65535) */
	__u32 pid;          /* process (tgid) that mapped it */
	__u64 ts;           /* CLOCK_MONOTONIC ns (bpf_ktime_get_ns) when the mapping existed */
	struct cw_file_key file;
};

/* Key and value of the per-(process, op) statistics map (exact counts, whatever is dropped). */
struct cw_stat_key {
	__u32 pid;
	__u16 op;
	__u16 pad;
};

struct cw_stat {
	__u64 calls;        /* calls entered / events seen in the kernel */
	__u64 stored;       /* of which submitted to the ring buffer */
	__u64 total_ns;     /* sum of measured durations (calls timed: the sum of hist) */
	__u64 bytes;        /* sum of byte arguments (copies, allocations, I/O, page allocations) */
	__u64 hist[CW_HIST_BUCKETS];
	__u64 nested;       /* driver entries made by the runtime itself: they trap, are not calls */
};

#endif
