//! The op table: every op causeway records, with its stored name, ABI id, source, class and the
//! meaning of its arguments. The one place an op is declared; everything else derives from it.
//!
//! Op ids are global (one `u16` space across sources) and stable: the BPF programs emit them
//! (`crates/bpf/src/bpf/events.h`, checked against this table when the BPF crate builds), and stores
//! keep them in `event_data.op_id`, so they must never be renumbered. Names are what people and
//! agents use (`WHERE op = 'cudaLaunchKernel'`); every store's `ops` table is written from here.

/// Where an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// CUDA runtime API (libcudart), uprobes.
    Cuda,
    /// CUDA driver API (libcuda), uprobes.
    Driver,
    /// Host kernel events: scheduler, memory, process lifecycle (tracepoints).
    Host,
    /// Block I/O requests (tracepoints).
    Io,
    /// TCP events (retransmits).
    Tcp,
    /// Socket send/receive syscalls.
    Net,
    /// CUDA graph capture, instantiation and launch (libcudart).
    Graph,
    /// NCCL collectives and point-to-point calls (libnccl).
    Nccl,
}

impl Source {
    /// Every source, in id order.
    pub const ALL: [Source; 8] = [
        Source::Cuda,
        Source::Driver,
        Source::Host,
        Source::Io,
        Source::Tcp,
        Source::Net,
        Source::Graph,
        Source::Nccl,
    ];

    /// The name stored and shown (`CUDA`, `DRIVER`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Source::Cuda => "CUDA",
            Source::Driver => "DRIVER",
            Source::Host => "HOST",
            Source::Io => "IO",
            Source::Tcp => "TCP",
            Source::Net => "NET",
            Source::Graph => "GRAPH",
            Source::Nccl => "NCCL",
        }
    }

    /// Stable numeric id (1-based).
    pub fn id(self) -> u8 {
        Source::ALL.iter().position(|s| *s == self).unwrap_or(0) as u8 + 1
    }

    /// One line saying what the source covers.
    pub fn description(self) -> &'static str {
        match self {
            Source::Cuda => {
                "CUDA runtime API (libcudart), uprobe + uretprobe: duration and return code"
            }
            Source::Driver => {
                "CUDA driver API (libcuda), uprobe + uretprobe: duration and return code"
            }
            Source::Host => {
                "Host kernel: scheduler (off-CPU intervals, wakeups), page allocations, OOM kills, process exec/exit/fork"
            }
            Source::Io => "Block I/O requests, issue to completion: latency, bytes, direction",
            Source::Tcp => "TCP retransmits (IPv4 and IPv6)",
            Source::Net => "Socket send/receive syscalls: duration and bytes",
            Source::Graph => {
                "CUDA graphs: stream capture, instantiation and graph launches (libcudart)"
            }
            Source::Nccl => "NCCL collectives and send/recv (libnccl): bytes, communicator, rank",
        }
    }

    /// Looks a source up by name, case-insensitively.
    pub fn from_name(name: &str) -> Option<Source> {
        Source::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether its ops are probed library calls (uprobes on CUDA runtime, driver, graphs,
    /// NCCL), as opposed to host events seen at kernel tracepoints.
    pub const fn is_call(self) -> bool {
        matches!(
            self,
            Source::Cuda | Source::Driver | Source::Graph | Source::Nccl
        )
    }
}

/// What an op does, for the sets the collector and the engine select by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Hands a kernel or a graph to the GPU.
    Launch,
    /// A host/device or device/device copy (arg1 the direction, except peer copies).
    Copy,
    /// A memset.
    Memset,
    /// The host waits for the GPU.
    Sync,
    /// Device (or managed) memory allocation.
    Alloc,
    /// Device memory free.
    Free,
    /// Finds the function or kernel handle a launch will name.
    Lookup,
    /// Graph capture and instantiation.
    Graph,
    /// An NCCL collective whose completion every rank shares.
    Collective,
    /// An NCCL point-to-point send or receive.
    PointToPoint,
    /// The end of an NCCL group.
    Group,
    /// The scheduler: off-CPU intervals, wakeups.
    Sched,
    /// Host memory: page allocations, reclaim, OOM kills.
    Memory,
    /// Process lifecycle.
    Process,
    /// Block I/O.
    Io,
    /// Network: sockets, TCP.
    Net,
}

/// One op of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// Global, stable op id (`event_data.op_id`, the BPF programs' `OP_*` value).
    pub id: u16,
    /// The source it belongs to.
    pub source: Source,
    /// What it does.
    pub class: Class,
    /// The name people and agents query by.
    pub name: &'static str,
    /// Its `#define` in crates/bpf/src/bpf/events.h, or "" when the BPF programs never emit it.
    pub abi: &'static str,
    /// What one event of this op is.
    pub description: &'static str,
    /// What `duration` measures for this op.
    pub duration: &'static str,
    /// Meaning of `arg0`.
    pub arg0: &'static str,
    /// Meaning of `arg1`.
    pub arg1: &'static str,
    /// The name the reference tool used, where it differs (for imports and for readers of its docs).
    pub reference_name: &'static str,
}

impl Op {
    /// Whether it is a probed library call (the overhead controller's ops).
    pub const fn is_call(&self) -> bool {
        self.source.is_call()
    }
}

const CALL: &str = "time from entry to return of the call (ns)";
const UNUSED: &str = "unused (0)";
/// Live traces see socket calls at the kernel's socket tracepoints where it has them (Linux 6.3
/// and later), which do not show a call's start (bpf net.h); older kernels and imports time the
/// whole system call.
const SOCKET: &str = "time blocked in the call (ns): from its first block to its return, 0 if it did not block (on kernels < 6.3 and in imports: entry to return)";

macro_rules! ops {
    ($( $id:literal $src:ident $class:ident $name:literal $ref:literal $abi:literal : $desc:literal ; dur $dur:expr ; a0 $a0:expr ; a1 $a1:expr ;)*) => {
        /// The whole table, in id order.
        pub const OPS: &[Op] = &[ $( Op {
            id: $id, source: Source::$src, class: Class::$class, name: $name, abi: $abi,
            description: $desc, duration: $dur, arg0: $a0, arg1: $a1, reference_name: $ref,
        }, )* ];
    };
}

const DIR: &str = "direction: 0 host-to-host, 1 host-to-device, 2 device-to-host, 3 device-to-device, 4 default (unified addressing)";

// id source class name reference-name events.h-define : description; duration; arg0; arg1
ops! {
    1 Cuda Alloc "cudaMalloc" "" "OP_CUDA_MALLOC" : "GPU memory allocation"; dur CALL; a0 "bytes requested"; a1 "device pointer returned (0 on failure)";
    2 Cuda Free "cudaFree" "" "OP_CUDA_FREE" : "GPU memory free"; dur CALL; a0 "device pointer freed"; a1 UNUSED;
    3 Cuda Launch "cudaLaunchKernel" "" "OP_CUDA_LAUNCH_KERNEL" : "Kernel launch through the runtime API (enqueue, not execution)"; dur CALL; a0 "the kernel's host stub, or the cudaKernel_t handle of cudaGetKernel (CUDA 13 stubs): kernel_launches names it"; a1 "grid size (x*y*z blocks), 0 when unread";
    4 Cuda Copy "cudaMemcpy" "" "OP_CUDA_MEMCPY" : "Synchronous host/device copy"; dur CALL; a0 "bytes"; a1 DIR;
    5 Cuda Sync "cudaStreamSynchronize" "cudaStreamSync" "OP_CUDA_STREAM_SYNC" : "Host waits for all work in one stream"; dur "time the host thread waited (ns)"; a0 "stream handle"; a1 UNUSED;
    6 Cuda Sync "cudaDeviceSynchronize" "cudaDeviceSync" "OP_CUDA_DEVICE_SYNC" : "Host waits for all work on the device"; dur "time the host thread waited (ns)"; a0 UNUSED; a1 UNUSED;
    7 Cuda Copy "cudaMemcpyAsync" "" "OP_CUDA_MEMCPY_ASYNC" : "Asynchronous host/device copy (enqueue)"; dur CALL; a0 "bytes"; a1 DIR;
    8 Cuda Alloc "cudaMallocManaged" "" "OP_CUDA_MALLOC_MANAGED" : "Unified (managed) memory allocation"; dur CALL; a0 "bytes requested"; a1 "pointer returned (0 on failure)";
    9 Cuda Copy "cudaMemcpy2D" "" "OP_CUDA_MEMCPY_2D" : "Synchronous 2D copy"; dur CALL; a0 "bytes (width * height)"; a1 DIR;
    10 Cuda Copy "cudaMemcpy2DAsync" "" "OP_CUDA_MEMCPY_2D_ASYNC" : "Asynchronous 2D copy (enqueue)"; dur CALL; a0 "bytes (width * height)"; a1 DIR;
    11 Cuda Copy "cudaMemcpyPeer" "" "OP_CUDA_MEMCPY_PEER" : "Synchronous copy between two GPUs"; dur CALL; a0 "bytes"; a1 "destination device";
    12 Cuda Copy "cudaMemcpyPeerAsync" "" "OP_CUDA_MEMCPY_PEER_ASYNC" : "Asynchronous copy between two GPUs (enqueue)"; dur CALL; a0 "bytes"; a1 "destination device";
    13 Cuda Memset "cudaMemsetAsync" "" "OP_CUDA_MEMSET_ASYNC" : "Asynchronous memset (enqueue)"; dur CALL; a0 "bytes"; a1 "value";
    14 Cuda Sync "cudaEventSynchronize" "" "OP_CUDA_EVENT_SYNC" : "Host waits for a CUDA event"; dur "time the host thread waited (ns)"; a0 "event handle"; a1 UNUSED;
    15 Cuda Lookup "cudaGetKernel" "" "OP_CUDA_GET_KERNEL" : "Kernel handle of a host stub (CUDA 13 stubs launch with the handle it returns)"; dur CALL; a0 "the kernel's host stub (entry function)"; a1 "cudaKernel_t handle returned (0 on failure): cudaLaunchKernel's a0 in launches through it";
    30 Graph Launch "cudaGraphLaunch" "" "OP_GRAPH_LAUNCH" : "Launch of an instantiated CUDA graph"; dur CALL; a0 "graph exec handle"; a1 "stream handle";
    31 Graph Graph "cudaStreamBeginCapture" "" "OP_GRAPH_BEGIN_CAPTURE" : "Start of stream capture into a graph"; dur CALL; a0 "stream handle"; a1 "capture mode";
    32 Graph Graph "cudaStreamEndCapture" "" "OP_GRAPH_END_CAPTURE" : "End of stream capture"; dur CALL; a0 "stream handle"; a1 "graph handle returned";
    33 Graph Graph "cudaGraphInstantiate" "" "OP_GRAPH_INSTANTIATE" : "Graph instantiation (costly; should happen once)"; dur CALL; a0 "graph handle"; a1 "graph exec handle returned";
    50 Driver Launch "cuLaunchKernel" "" "OP_CU_LAUNCH_KERNEL" : "Kernel launch through the driver API (cuBLAS/cuDNN/Triton path)"; dur CALL; a0 "CUfunction handle"; a1 "grid size (x*y*z blocks)";
    51 Driver Copy "cuMemcpy" "" "OP_CU_MEMCPY" : "Synchronous copy through the driver API (any cuMemcpy*_v2 variant)"; dur CALL; a0 "bytes"; a1 DIR;
    52 Driver Copy "cuMemcpyAsync" "" "OP_CU_MEMCPY_ASYNC" : "Asynchronous copy through the driver API (any cuMemcpy*Async variant)"; dur CALL; a0 "bytes"; a1 DIR;
    53 Driver Sync "cuCtxSynchronize" "" "OP_CU_CTX_SYNC" : "Host waits for all work in the context"; dur "time the host thread waited (ns)"; a0 UNUSED; a1 UNUSED;
    54 Driver Alloc "cuMemAlloc" "" "OP_CU_MEM_ALLOC" : "GPU memory allocation (cuMemAlloc_v2)"; dur CALL; a0 "bytes requested"; a1 "device pointer returned";
    55 Driver Alloc "cuMemAllocManaged" "" "OP_CU_MEM_ALLOC_MANAGED" : "Unified memory allocation through the driver API"; dur CALL; a0 "bytes requested"; a1 "pointer returned";
    56 Driver Launch "cuLaunchKernelEx" "" "OP_CU_LAUNCH_KERNEL_EX" : "Extended kernel launch (clusters, attributes)"; dur CALL; a0 "CUfunction handle"; a1 "grid size (x*y*z blocks)";
    57 Driver Free "cuMemFree" "" "OP_CU_MEM_FREE" : "GPU memory free (cuMemFree_v2)"; dur CALL; a0 "device pointer freed"; a1 UNUSED;
    58 Driver Sync "cuStreamSynchronize" "" "OP_CU_STREAM_SYNC" : "Host waits for all work in one stream"; dur "time the host thread waited (ns)"; a0 "stream handle"; a1 UNUSED;
    59 Driver Lookup "cuModuleGetFunction" "" "OP_CU_MODULE_GET_FUNCTION" : "Function of a loaded module by name (Triton, CuPy raw kernels, JIT code)"; dur CALL; a0 "address of the name in the process (the collector reads it: kernels)"; a1 "CUfunction returned (0 on failure)";
    60 Driver Lookup "cuLibraryGetKernel" "" "OP_CU_LIBRARY_GET_KERNEL" : "Kernel of a loaded library by name (CUDA 12+ context-independent loading)"; dur CALL; a0 "address of the name in the process (the collector reads it: kernels)"; a1 "CUkernel returned (0 on failure)";
    61 Driver Lookup "cuKernelGetFunction" "" "OP_CU_KERNEL_GET_FUNCTION" : "The function of a CUkernel in the current context"; dur CALL; a0 "CUkernel"; a1 "CUfunction returned (0 on failure)";
    100 Host Sched "sched_switch" "" "OP_SCHED_SWITCH" : "A thread of a traced process was switched out and later back in"; dur "off-CPU time: from switch-out to switch-in (the event's timestamp is the switch-out)"; a0 "thread id (kernel task pid) of the task that ran next on that CPU (0 = idle)"; a1 "0 = preempted while runnable, 1 = blocked/sleeping (voluntary), 2 = other state; its ret_code is 1 when the thread slept in the kernel's I/O wait (io_schedule: a disk read, a page-cache fill, I/O held by cgroup throttling), else 0";
    101 Host Sched "sched_wakeup" "" "OP_SCHED_WAKEUP" : "A traced thread was woken and queued to run"; dur "run-queue latency: from wakeup to running (ns), 0 when unknown"; a0 "thread id (kernel task pid) of the task that woke it; 0 when an interrupt (timer, device, softirq) or the idle task did"; a1 "target CPU";
    102 Host Memory "mm_page_alloc" "" "OP_MM_PAGE_ALLOC" : "Kernel page allocations on behalf of a traced process (aggregated)"; dur "0"; a0 "bytes allocated"; a1 "allocation order";
    103 Host Memory "oom_kill" "" "OP_OOM_KILL" : "The OOM killer killed a process"; dur "0"; a0 "killed pid"; a1 "pages it held (0 when unknown)";
    104 Host Process "process_exec" "" "OP_PROCESS_EXEC" : "A traced process called execve"; dur "0"; a0 "parent pid"; a1 UNUSED;
    105 Host Process "process_exit" "" "OP_PROCESS_EXIT" : "A traced process exited"; dur "process lifetime (ns), 0 when unknown"; a0 "exit code"; a1 "CPU time of the process, user + system (ns); 0 when unknown";
    106 Host Process "process_fork" "" "OP_PROCESS_FORK" : "A traced process forked (the child is traced too)"; dur "0"; a0 "child pid"; a1 UNUSED;
    107 Host Process "pod_restart" "" "" : "Kubernetes container restart detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    108 Host Process "pod_eviction" "" "" : "Kubernetes pod eviction detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    109 Host Memory "pod_oom_kill" "" "" : "Kubernetes pod OOM kill detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    110 Host Memory "mm_reclaim" "" "OP_MM_RECLAIM" : "A traced thread reclaimed memory itself before it could allocate (direct reclaim when the host is short; memory-cgroup reclaim when its cgroup is at its limit)"; dur "time spent reclaiming (ns)"; a0 "bytes reclaimed (pages x 4 KiB)"; a1 "0 = direct (host-wide shortage), 1 = memory cgroup at its limit";
    130 Io Io "block_read" "" "OP_BLOCK_READ" : "Block device read request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    131 Io Io "block_write" "" "OP_BLOCK_WRITE" : "Block device write request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    132 Io Io "block_discard" "" "OP_BLOCK_DISCARD" : "Block device discard/trim request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    150 Tcp Net "tcp_retransmit" "" "OP_TCP_RETRANSMIT" : "TCP segment retransmitted (host-wide: pid is whichever task was current)"; dur "0"; a0 "remote port"; a1 "address family (2 = IPv4, 10 = IPv6)";
    170 Net Net "net_send" "" "OP_NET_SEND" : "Socket send family call (send, sendto, sendmsg, write on a socket)"; dur SOCKET; a0 "bytes sent (negative = error)"; a1 "file descriptor";
    171 Net Net "net_recv" "" "OP_NET_RECV" : "Socket receive family call (recv, recvfrom, recvmsg, read on a socket)"; dur SOCKET; a0 "bytes received (negative = error)"; a1 "file descriptor";
    200 Nccl Collective "ncclAllReduce" "" "OP_NCCL_ALL_REDUCE" : "NCCL all-reduce (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    201 Nccl Collective "ncclBroadcast" "" "OP_NCCL_BROADCAST" : "NCCL broadcast (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    202 Nccl Collective "ncclReduce" "" "OP_NCCL_REDUCE" : "NCCL reduce (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    203 Nccl Collective "ncclAllGather" "" "OP_NCCL_ALL_GATHER" : "NCCL all-gather (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    204 Nccl Collective "ncclReduceScatter" "" "OP_NCCL_REDUCE_SCATTER" : "NCCL reduce-scatter (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    205 Nccl PointToPoint "ncclSend" "" "OP_NCCL_SEND" : "NCCL point-to-point send (enqueue)"; dur CALL; a0 "bytes"; a1 "peer rank";
    206 Nccl PointToPoint "ncclRecv" "" "OP_NCCL_RECV" : "NCCL point-to-point receive (enqueue)"; dur CALL; a0 "bytes"; a1 "peer rank";
    207 Nccl Group "ncclGroupEnd" "" "OP_NCCL_GROUP_END" : "End of an NCCL group (where grouped collectives are issued)"; dur CALL; a0 UNUSED; a1 UNUSED;
}

/// Looks an op up by its stored id.
pub fn by_id(id: u16) -> Option<&'static Op> {
    OPS.iter().find(|o| o.id == id)
}

/// Looks an op up by name (ours, or the reference tool's where it differs), case-sensitively.
pub fn by_name(name: &str) -> Option<&'static Op> {
    OPS.iter().find(|o| o.name == name).or_else(|| {
        OPS.iter()
            .find(|o| !o.reference_name.is_empty() && o.reference_name == name)
    })
}

/// The id of the op named `name`, at compile time (a `const` naming an op not in the table
/// fails the build).
pub const fn id(name: &str) -> u16 {
    match find(name) {
        Some(o) => o.id,
        None => panic!("no op of that name in the op table"),
    }
}

/// How many ops are of `class`.
pub const fn count(class: Class) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < OPS.len() {
        n += (OPS[i].class as u8 == class as u8) as usize;
        i += 1;
    }
    n
}

/// The names of the ops of `class`, in id order; `N` must be [`count`] of it (a mismatch fails
/// the build where the set is a `const`).
pub const fn names<const N: usize>(class: Class) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < OPS.len() {
        if OPS[i].class as u8 == class as u8 {
            assert!(n < N, "more ops of the class than the set holds");
            out[n] = OPS[i].name;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "fewer ops of the class than the set holds");
    out
}

/// Whether `names` are exactly the ops of `class` (each once, in any order): sets kept as
/// explicit lists, where their order shows in queries people read, are checked with it.
pub const fn is_class(names: &[&str], class: Class) -> bool {
    if names.len() != count(class) {
        return false;
    }
    let mut i = 0;
    while i < names.len() {
        let mut j = 0;
        while j < i {
            if str_eq(names[i], names[j]) {
                return false;
            }
            j += 1;
        }
        if !matches!(find(names[i]), Some(o) if o.class as u8 == class as u8) {
            return false;
        }
        i += 1;
    }
    true
}

/// Length of [`sql_bytes`] of `names`.
pub const fn sql_len(names: &[&str]) -> usize {
    let (mut i, mut len) = (0, 0);
    while i < names.len() {
        len += names[i].len() + if i == 0 { 2 } else { 4 };
        i += 1;
    }
    len
}

/// `names` as an SQL list (`'a', 'b'`); see [`sql_list!`].
pub const fn sql_bytes<const N: usize>(names: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let (mut i, mut at) = (0, 0);
    while i < names.len() {
        let name = names[i].as_bytes();
        if i > 0 {
            out[at] = b',';
            out[at + 1] = b' ';
            at += 2;
        }
        out[at] = b'\'';
        let mut j = 0;
        while j < name.len() {
            out[at + 1 + j] = name[j];
            j += 1;
        }
        out[at + 1 + name.len()] = b'\'';
        at += name.len() + 2;
        i += 1;
    }
    out
}

/// A `const` array of op names as an SQL list (`'a', 'b'`), a `&'static str` usable in a
/// `const` (queries are formatted with it where they are written).
#[macro_export]
macro_rules! sql_list {
    ($names:expr) => {{
        const BYTES: [u8; $crate::sql_len(&$names)] = $crate::sql_bytes(&$names);
        match ::core::str::from_utf8(&BYTES) {
            Ok(s) => s,
            Err(_) => panic!("op names are ASCII"),
        }
    }};
}

/// Checks at compile time that an op id written as a literal into SQL (`op_id = 100`, kept
/// literal where a query is read as written) is the op table's id of `name`: a renumbered op
/// fails the build there. `tests/sql_ids.rs` finds literal ids without such a check.
#[macro_export]
macro_rules! sql_id {
    ($name:literal, $id:literal) => {
        const _: () = assert!(
            $crate::id($name) == $id,
            concat!(
                "SQL here says ",
                $name,
                " is op ",
                stringify!($id),
                "; the op table says otherwise"
            )
        );
    };
}

const fn find(name: &str) -> Option<&'static Op> {
    let mut i = 0;
    while i < OPS.len() {
        if str_eq(OPS[i].name, name) {
            return Some(&OPS[i]);
        }
        i += 1;
    }
    None
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_names_and_defines_are_unique() {
        let ids: HashSet<_> = OPS.iter().map(|o| o.id).collect();
        let names: HashSet<_> = OPS.iter().map(|o| o.name).collect();
        let abis: Vec<_> = OPS
            .iter()
            .map(|o| o.abi)
            .filter(|a| !a.is_empty())
            .collect();
        assert_eq!(ids.len(), OPS.len());
        assert_eq!(names.len(), OPS.len());
        assert_eq!(abis.iter().collect::<HashSet<_>>().len(), abis.len());
        assert!(OPS.windows(2).all(|w| w[0].id < w[1].id), "in id order");
    }

    #[test]
    fn every_source_has_ops() {
        for s in Source::ALL {
            assert!(OPS.iter().any(|o| o.source == s), "{s:?} has no op");
        }
    }

    #[test]
    fn reference_names_resolve() {
        assert_eq!(
            by_name("cudaDeviceSync").unwrap().name,
            "cudaDeviceSynchronize"
        );
        assert_eq!(by_name("cudaLaunchKernel").unwrap().id, 3);
        assert_eq!(id("cuLaunchKernelEx"), 56);
    }

    #[test]
    fn calls_are_the_ids_outside_the_host_range() {
        // What the collector's overhead controller answered before the table: every op id but
        // the host events' 100..200 is a probed call.
        for o in OPS {
            assert_eq!(o.is_call(), !(100..200).contains(&o.id), "{}", o.name);
        }
    }

    #[test]
    fn sets_by_class() {
        const SYNCS: [&str; count(Class::Sync)] = names(Class::Sync);
        assert_eq!(
            SYNCS,
            [
                "cudaStreamSynchronize",
                "cudaDeviceSynchronize",
                "cudaEventSynchronize",
                "cuCtxSynchronize",
                "cuStreamSynchronize"
            ]
        );
        const COLLECTIVES: [&str; 5] = names(Class::Collective);
        assert_eq!(
            sql_list!(COLLECTIVES),
            "'ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather', 'ncclReduceScatter'"
        );
        assert!(is_class(
            &[
                "cuCtxSynchronize",
                "cudaStreamSynchronize",
                "cudaDeviceSynchronize",
                "cudaEventSynchronize",
                "cuStreamSynchronize"
            ],
            Class::Sync
        ));
        assert!(!is_class(&SYNCS[..4], Class::Sync));
        assert!(!is_class(
            &[
                "cudaMalloc",
                "cudaMalloc",
                "cuMemAlloc",
                "cuMemAllocManaged"
            ],
            Class::Alloc
        ));
    }
}
