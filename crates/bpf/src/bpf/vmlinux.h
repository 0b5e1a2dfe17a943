// Minimal kernel type definitions for causeway's BPF programs (CO-RE: offsets are relocated at load).
//
// Only the types and fields the programs read are declared. Every record carries
// preserve_access_index, so libbpf matches fields by name against the running kernel's BTF
// (/sys/kernel/btf/vmlinux) and the layout written here never has to match it. pt_regs is the
// x86-64 UAPI layout (stable ABI) and is what uprobe programs receive as context.
#ifndef CAUSEWAY_VMLINUX_H
#define CAUSEWAY_VMLINUX_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
typedef int pid_t;
typedef unsigned int uid_t;
typedef __u32 dev_t;
typedef __u32 blk_opf_t;
typedef __u8 blk_status_t;
typedef unsigned int gfp_t;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

/* Helpers whose presence the programs check at load time (bpf_core_enum_value_exists). */
enum bpf_func_id {
	BPF_FUNC_find_vma = 180,
	BPF_FUNC_loop = 181,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_F_USER_STACK = 256,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
};

/* x86-64 user/kernel register frame (UAPI layout, not relocated). */
struct pt_regs {
	unsigned long r15;
	unsigned long r14;
	unsigned long r13;
	unsigned long r12;
	unsigned long bp;
	unsigned long bx;
	unsigned long r11;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long ax;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
	unsigned long ss;
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct sched_entity {
	u64 sum_exec_runtime;
};

struct signal_struct {
	unsigned long long sum_sched_runtime;
};

struct kernfs_node {
	u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp;
};

/* x86-64: the thread's FS base, which is glibc's pthread_self() (CPython's thread ident). */
struct thread_struct {
	unsigned long fsbase;
};

struct task_struct {
	struct sched_entity se;
	struct thread_struct thread;
	struct signal_struct *signal;
	int wake_cpu;
	int exit_code;
	pid_t pid;
	pid_t tgid;
	struct task_struct *real_parent;
	u64 start_time;
	char comm[16];
	struct files_struct *files;
	struct css_set *cgroups;
	unsigned int in_iowait: 1; /* read with BPF_CORE_READ_BITFIELD: relocated by name */
};

struct block_device {
	dev_t bd_dev;
};

struct request {
	blk_opf_t cmd_flags;
	unsigned int __data_len;
	struct block_device *part;
};

struct sock_common {
	__be16 skc_dport;
	unsigned short skc_family;
};

struct sock {
	struct sock_common __sk_common;
};

struct sk_buff {
	unsigned int len;
};

struct page {
	unsigned long flags;
};

/* A mapped file, found from its descriptor: its name and identity (mmap.h). In the kernel,
 * d_name and f_path sit in anonymous unions; CO-RE finds them by name there. */
struct qstr {
	const unsigned char *name;
};

struct dentry {
	struct qstr d_name;
};

struct path {
	struct dentry *dentry;
};

struct super_block {
	dev_t s_dev;
};

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct file {
	struct path f_path;
	struct inode *f_inode;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct linux_binprm {
	struct file *file;
};

/* A mapping of a process: the file behind the code a probed driver call returns into (calls.h). */
struct vm_area_struct {
	struct file *vm_file;
};

#pragma clang attribute pop

#endif
