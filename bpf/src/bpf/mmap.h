// Library-load hook (tp_btf/sys_exit of mmap): tells the collector at once when a traced process
// maps a CUDA library executable, so its probes are attached before the first call instead of at
// the next periodic rescan of /proc/PID/maps (which stays as the fallback: kernels where this
// program does not load, statically linked runtimes, a full ring buffer).
//
// The dynamic loader maps a library's code with mmap(2) (PROT_EXEC, from a file descriptor), for
// the libraries a program links and for dlopen alike. At syscall exit the mapping exists, so
// /proc/PID/maps shows it when user space reads it. fexit/vm_mmap_pgoff would fire for mmaps only,
// but fentry/fexit programs fail to load (EPERM) on the kernels causeway is tested on, and a
// raw syscall tracepoint needs nothing but BTF. With the host programs on (the default), the
// check runs inside net.h's sys_exit program, which every system call of the machine already
// enters: one comparison of the syscall number more, no second program. With --no-host the
// standalone program below is the only one on sys_exit, and every system call of every process
// takes the kernel's traced exit path to reach its first check: a getppid() took 344 ns instead
// of 229 ns on the 2-core development VM (probe_cost bench, system call table). Where uretprobes
// return through the uretprobe system call (x86-64, Linux >= 6.11), that includes every probed
// call's return: the bench's per-call table with CAUSEWAY_BENCH_NO_MAP_HOOK shows the difference.
//
// Only PROT_EXEC file mappings named libcudart.so*, libcuda.so* or libnccl.so*
// (bpf/src/probes.rs `Library::stem`) by a traced process (any process in all-process mode) are
// reported, each in one small record submitted with a wakeup. Uprobes are per inode, so once a
// file is attached every later mapping of it, in any process, is covered: user space then adds
// the file to `lib_files_seen` and the hook stays quiet for it.
#ifndef CAUSEWAY_MMAP_H
#define CAUSEWAY_MMAP_H

#include "common.h"

#define CW_NR_MMAP 9 /* x86-64 */
#define CW_PROT_EXEC 0x4
#define CW_MAP_ANONYMOUS 0x20
/* Bytes of the file name read: enough for every stem below. */
#define CW_LIB_NAME 16

/* Library files (and in all-process mode program files) user space has looked at (filled by the
 * collector from the records). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* library files, and program files in all-process mode */
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
static __always_inline void cw_report_file(__u32 tgid, __u8 lib, struct file *file)
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
	e->pad = 0;
	e->pid = tgid;
	e->ts = bpf_ktime_get_ns();
	e->file = key;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* Reports a CUDA library mapped by the mmap(2) that is returning (caller checked the number).
 * At exit the registers hold the arguments: mmap(addr, len, prot, flags, fd, off). */
static __always_inline void cw_lib_mapped(struct pt_regs *regs, long ret)
{
	if ((unsigned long)ret >= (unsigned long)-4095 || !(regs->dx & CW_PROT_EXEC) ||
	    (regs->r10 & CW_MAP_ANONYMOUS))
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (uprobes_enrol ? (tgid == self_tgid || tgid == 0) : !cw_is_target(tgid))
		return;
	struct file *file = cw_fd_file(bpf_get_current_task_btf(), regs->r8);
	if (!file)
		return;
	char name[CW_LIB_NAME] = {};
	const unsigned char *n = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (!n || bpf_probe_read_kernel_str(name, sizeof(name), n) < 0)
		return;
	__u8 lib = cw_lib_of(name);
	if (lib)
		cw_report_file(tgid, lib, file);
}

/* All-process mode: a process that is not traced exec'd `bprm`'s program. A program with the
 * CUDA runtime linked statically (nvcc's default) maps no CUDA library, so the hook above never
 * sees it; user space checks each program file once (one hash lookup per exec after that).
 * Traced processes report their execs as events (proc.h), which user space checks the same way. */
static __always_inline void cw_program_execd(__u32 tgid, struct linux_binprm *bprm)
{
	if (!uprobes_enrol || tgid == self_tgid || tgid == 0)
		return;
	struct file *file = BPF_CORE_READ(bprm, file);
	if (file)
		cw_report_file(tgid, CW_LIB_EXEC, file);
}

/* The hook on its own, for traces without the host programs (--no-host). */
SEC("tp_btf/sys_exit")
int BPF_PROG(cw_lib_mmap, struct pt_regs *regs, long ret)
{
	if (regs->orig_ax == CW_NR_MMAP)
		cw_lib_mapped(regs, ret);
	return 0;
}

#endif
