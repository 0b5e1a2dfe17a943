// Library-load hook (tp_btf/mmap_lock_released): tells the collector at once when a traced
// process maps a CUDA library executable, so its probes are attached before the first call
// instead of at the next periodic rescan of /proc/PID/maps (which stays as the fallback: kernels
// where this program does not load, statically linked runtimes, a full ring buffer).
//
// The dynamic loader maps a library's code with mmap(2) (PROT_EXEC, from a file descriptor), for
// the libraries a program links and for dlopen alike. mmap(2) creates the mapping with the
// process's mmap lock held for writing and releases it before returning, so when this tracepoint
// fires inside that system call the mapping exists and /proc/PID/maps shows it to user space.
// The system call's arguments are in the task's saved user registers.
//
// Why this tracepoint and not the mmap system call's exit: a program on sys_exit (raw or
// per-syscall tracepoint) sends every system call of every process through the kernel's traced
// exit path, and where uretprobes return through the uretprobe system call (x86-64, Linux
// >= 6.11) that includes every probed call's return. The probe_cost bench measured a getppid()
// at 309-361 ns with such a hook against 225-280 ns untraced on the 2-core development VM.
// The mmap lock is released by far fewer paths (mmap, munmap, mprotect, brk and the page
// faults that fall back to the lock), each of which costs microseconds itself. fentry/fexit on
// the kernel's mmap functions would be narrower still, but fail to load (EPERM) on the kernels
// causeway is tested on. The program reads no tracepoint argument: their list changed across
// kernels (a memcg path was dropped in 6.x).
//
// PROT_EXEC file mappings named libcudart.so*, libcuda.so* or libnccl.so* (crates/bpf/src/probes.rs
// `Library::stem`) by a traced process (any process in all-process mode) are reported, each in
// one small record submitted with a wakeup. A traced process's other executable file mappings
// are reported too (CW_LIB_OBJECT): CuPy links the CUDA runtime into its Python extension
// modules, and only user space can read a file's symbols. In all-process mode those are left to
// the periodic rescan of the processes that map a CUDA library (every process maps libc). Uprobes are per inode, so once a
// file is attached every later mapping of it, in any process, is covered: user space then adds
// the file to `lib_files_seen` and the hook stays quiet for it.
//
// Holding (`hold_ctl`, set by user space when causeway started the command): reporting is not enough, a program
// can call into a library within microseconds of mapping it, long before user space has attached
// the probes (~20 ms). So the reporting process is stopped (SIGSTOP, taken on its return to user
// space, before any instruction of the new code runs) and noted in `held`; user space attaches,
// then deletes the entry and sends SIGCONT. A watchdog thread in user space releases any process
// held longer than a timeout, so a stuck collector never freezes the job.
#ifndef CAUSEWAY_MMAP_H
#define CAUSEWAY_MMAP_H

#include "common.h"

#define CW_NR_MMAP 9 /* x86-64 */
#define CW_PROT_EXEC 0x4
#define CW_MAP_ANONYMOUS 0x20
/* Bytes of the file name read: enough for every stem below. */
#define CW_LIB_NAME 16
#define CW_SIGSTOP 19

/* Processes stopped until user space has looked at the file they mapped or exec'd: tgid ->
 * bpf_ktime_get_ns() of the latest hold (a new value tells user space a hold came in while it was
 * attaching, mmap.h's comment at the top). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} held SEC(".maps");

/* hold_ctl[0]: 1 while user space holds processes (set after load, cleared before the last
 * release at the end of a trace). A map rather than a load-time constant so that it can end. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8);
} hold_ctl SEC(".maps");

static __always_inline bool cw_holding(void)
{
	__u32 k = 0;
	__u8 *on = bpf_map_lookup_elem(&hold_ctl, &k);
	return on && *on;
}

/* Library files (and in all-process mode program files) user space has looked at (filled by the
 * collector from the records). LRU: a job that maps more files than this (a long session
 * loading extension modules, a machine exec'ing many programs) evicts the oldest, which are
 * then reported once more and marked again, instead of every file after the first 16,384
 * being reported at each mapping. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH_);
	__uint(max_entries, 16384);
	__type(key, struct cw_file_key);
	__type(value, __u8); /* 1 */
} lib_files_seen SEC(".maps");

static __always_inline bool cw_has_prefix(const char *s, const char *p, int n)
{
	for (int i = 0; i < n; i++) {
		if (s[i] != p[i])
			return false;
	}
	return true;
}

/* CW_LIB_* of a file name, 0 for any other file. */
static __always_inline __u8 cw_lib_of(const char *name)
{
	if (cw_has_prefix(name, "libcudart.so", 12))
		return CW_LIB_CUDART;
	if (cw_has_prefix(name, "libcuda.so", 10))
		return CW_LIB_CUDA;
	if (cw_has_prefix(name, "libnccl.so", 10))
		return CW_LIB_NCCL;
	return 0;
}

/* The open file behind descriptor `fd` of `t`, NULL if none. */
static __always_inline struct file *cw_fd_file(struct task_struct *t, __u64 fd)
{
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = NULL;
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) < 0)
		return NULL;
	return f;
}

/* Sends one CW_KIND_LIB record for `file` (library tag `lib`) unless user space has seen the
 * file, with a wakeup: the process may call into it within milliseconds. */
static __always_inline void cw_report_file(__u32 tgid, __u8 lib, struct file *file, __u16 fd1)
{
	struct cw_file_key key = {
		.dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev),
		.ino = BPF_CORE_READ(file, f_inode, i_ino),
	};
	if (bpf_map_lookup_elem(&lib_files_seen, &key))
		return;
	struct cw_lib_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return; /* ring full: the periodic rescan finds a library (not a static program) */
	e->kind = CW_KIND_LIB;
	e->library = lib;
	e->fd1 = fd1;
	e->pid = tgid;
	e->ts = bpf_ktime_get_ns();
	e->file = key;
	if (cw_holding()) {
		/* Noted before the stop and the record, so user space never misses a held process. */
		__u64 now = e->ts;
		bpf_map_update_elem(&held, &tgid, &now, BPF_ANY);
		bpf_send_signal(CW_SIGSTOP);
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* Reports a CUDA library mapped by the mmap(2) the current thread is in, if any. The saved user
 * registers hold the system call's number and arguments: mmap(addr, len, prot, flags, fd, off).
 * A failed mmap is reported too (its result is not known yet): user space then finds nothing. */
static __always_inline void cw_lib_mapped(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (uprobes_enrol ? (tgid == self_tgid || tgid == 0) : !cw_is_target(tgid))
		return;
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs || regs->orig_ax != CW_NR_MMAP || !(regs->dx & CW_PROT_EXEC) ||
	    (regs->r10 & CW_MAP_ANONYMOUS))
		return;
	struct file *file = cw_fd_file(task, regs->r8);
	if (!file)
		return;
	char name[CW_LIB_NAME] = {};
	const unsigned char *n = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (!n || bpf_probe_read_kernel_str(name, sizeof(name), n) < 0)
		return;
	__u8 lib = cw_lib_of(name);
	if (!lib && !uprobes_enrol)
		lib = CW_LIB_OBJECT;
	if (lib)
		cw_report_file(tgid, lib, file, regs->r8 < 65535 ? (__u16)(regs->r8 + 1) : 0);
}

/* A process exec'd `bprm`'s program: all-process mode, any process that is not traced; with
 * holding, a traced one. A program with the CUDA runtime linked statically (nvcc's default) maps
 * no CUDA library, so the hook above never sees it; user space checks each program file once (one
 * hash lookup per exec after that). Without holding, traced processes report their execs as events
 * (proc.h), which user space checks the same way. */
static __always_inline void cw_program_execd(__u32 tgid, bool traced, struct linux_binprm *bprm)
{
	if (!(traced ? cw_holding() : uprobes_enrol) || tgid == self_tgid || tgid == 0)
		return;
	struct file *file = BPF_CORE_READ(bprm, file);
	if (file)
		cw_report_file(tgid, CW_LIB_EXEC, file, 0);
}

SEC("tp_btf/mmap_lock_released")
int cw_lib_mmap(void *ctx)
{
	cw_lib_mapped();
	return 0;
}

#endif
