//! The op catalogue: every source and op causeway records, with the meaning of arg0/arg1.
//!
//! Op ids are global (one `u16` space across sources) and stable: they are stored in
//! `event_data.op_id` and must never be renumbered. Names are what people and agents use
//! (`WHERE op = 'cudaLaunchKernel'`); the `ops` lookup table in every store is written from here.

use serde::Serialize;

/// Where an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
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
}

/// One op of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OpInfo {
    /// Global, stable op id (`event_data.op_id`).
    pub id: u16,
    /// The source it belongs to.
    pub source: Source,
    /// The name people and agents query by.
    pub name: &'static str,
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

const CALL: &str = "time from entry to return of the call (ns)";
const UNUSED: &str = "unused (0)";
/// Live traces see socket calls at the kernel's socket tracepoints where it has them (Linux 6.3
/// and later), which do not show a call's start (bpf net.h); older kernels and imports time the
/// whole system call.
const SOCKET: &str = "time blocked in the call (ns): from its first block to its return, 0 if it did not block (on kernels < 6.3 and in imports: entry to return)";

macro_rules! ops {
    ($( $id:literal $src:ident $name:literal $ref:literal : $desc:literal ; dur $dur:expr ; a0 $a0:expr ; a1 $a1:expr ;)*) => {
        /// The whole catalogue, in id order.
        pub const OPS: &[OpInfo] = &[ $( OpInfo {
            id: $id, source: Source::$src, name: $name, description: $desc,
            duration: $dur, arg0: $a0, arg1: $a1, reference_name: $ref,
        }, )* ];
    };
}

const DIR: &str = "direction: 0 host-to-host, 1 host-to-device, 2 device-to-host, 3 device-to-device, 4 default (unified addressing)";

ops! {
    1 Cuda "cudaMalloc" "" : "GPU memory allocation"; dur CALL; a0 "bytes requested"; a1 "device pointer returned (0 on failure)";
    2 Cuda "cudaFree" "" : "GPU memory free"; dur CALL; a0 "device pointer freed"; a1 UNUSED;
    3 Cuda "cudaLaunchKernel" "" : "Kernel launch through the runtime API (enqueue, not execution)"; dur CALL; a0 "the kernel's host stub, or the cudaKernel_t handle of cudaGetKernel (CUDA 13 stubs): kernel_launches names it"; a1 "grid size (x*y*z blocks), 0 when unread";
    4 Cuda "cudaMemcpy" "" : "Synchronous host/device copy"; dur CALL; a0 "bytes"; a1 DIR;
    5 Cuda "cudaStreamSynchronize" "cudaStreamSync" : "Host waits for all work in one stream"; dur "time the host thread waited (ns)"; a0 "stream handle"; a1 UNUSED;
    6 Cuda "cudaDeviceSynchronize" "cudaDeviceSync" : "Host waits for all work on the device"; dur "time the host thread waited (ns)"; a0 UNUSED; a1 UNUSED;
    7 Cuda "cudaMemcpyAsync" "" : "Asynchronous host/device copy (enqueue)"; dur CALL; a0 "bytes"; a1 DIR;
    8 Cuda "cudaMallocManaged" "" : "Unified (managed) memory allocation"; dur CALL; a0 "bytes requested"; a1 "pointer returned (0 on failure)";
    9 Cuda "cudaMemcpy2D" "" : "Synchronous 2D copy"; dur CALL; a0 "bytes (width * height)"; a1 DIR;
    10 Cuda "cudaMemcpy2DAsync" "" : "Asynchronous 2D copy (enqueue)"; dur CALL; a0 "bytes (width * height)"; a1 DIR;
    11 Cuda "cudaMemcpyPeer" "" : "Synchronous copy between two GPUs"; dur CALL; a0 "bytes"; a1 "destination device";
    12 Cuda "cudaMemcpyPeerAsync" "" : "Asynchronous copy between two GPUs (enqueue)"; dur CALL; a0 "bytes"; a1 "destination device";
    13 Cuda "cudaMemsetAsync" "" : "Asynchronous memset (enqueue)"; dur CALL; a0 "bytes"; a1 "value";
    14 Cuda "cudaEventSynchronize" "" : "Host waits for a CUDA event"; dur "time the host thread waited (ns)"; a0 "event handle"; a1 UNUSED;
    15 Cuda "cudaGetKernel" "" : "Kernel handle of a host stub (CUDA 13 stubs launch with the handle it returns)"; dur CALL; a0 "the kernel's host stub (entry function)"; a1 "cudaKernel_t handle returned (0 on failure): cudaLaunchKernel's a0 in launches through it";
    30 Graph "cudaGraphLaunch" "" : "Launch of an instantiated CUDA graph"; dur CALL; a0 "graph exec handle"; a1 "stream handle";
    31 Graph "cudaStreamBeginCapture" "" : "Start of stream capture into a graph"; dur CALL; a0 "stream handle"; a1 "capture mode";
    32 Graph "cudaStreamEndCapture" "" : "End of stream capture"; dur CALL; a0 "stream handle"; a1 "graph handle returned";
    33 Graph "cudaGraphInstantiate" "" : "Graph instantiation (costly; should happen once)"; dur CALL; a0 "graph handle"; a1 "graph exec handle returned";
    50 Driver "cuLaunchKernel" "" : "Kernel launch through the driver API (cuBLAS/cuDNN/Triton path)"; dur CALL; a0 "CUfunction handle"; a1 "grid size (x*y*z blocks)";
    51 Driver "cuMemcpy" "" : "Synchronous copy through the driver API (any cuMemcpy*_v2 variant)"; dur CALL; a0 "bytes"; a1 DIR;
    52 Driver "cuMemcpyAsync" "" : "Asynchronous copy through the driver API (any cuMemcpy*Async variant)"; dur CALL; a0 "bytes"; a1 DIR;
    53 Driver "cuCtxSynchronize" "" : "Host waits for all work in the context"; dur "time the host thread waited (ns)"; a0 UNUSED; a1 UNUSED;
    54 Driver "cuMemAlloc" "" : "GPU memory allocation (cuMemAlloc_v2)"; dur CALL; a0 "bytes requested"; a1 "device pointer returned";
    55 Driver "cuMemAllocManaged" "" : "Unified memory allocation through the driver API"; dur CALL; a0 "bytes requested"; a1 "pointer returned";
    56 Driver "cuLaunchKernelEx" "" : "Extended kernel launch (clusters, attributes)"; dur CALL; a0 "CUfunction handle"; a1 "grid size (x*y*z blocks)";
    57 Driver "cuMemFree" "" : "GPU memory free (cuMemFree_v2)"; dur CALL; a0 "device pointer freed"; a1 UNUSED;
    58 Driver "cuStreamSynchronize" "" : "Host waits for all work in one stream"; dur "time the host thread waited (ns)"; a0 "stream handle"; a1 UNUSED;
    59 Driver "cuModuleGetFunction" "" : "Function of a loaded module by name (Triton, CuPy raw kernels, JIT code)"; dur CALL; a0 "address of the name in the process (the collector reads it: kernels)"; a1 "CUfunction returned (0 on failure)";
    60 Driver "cuLibraryGetKernel" "" : "Kernel of a loaded library by name (CUDA 12+ context-independent loading)"; dur CALL; a0 "address of the name in the process (the collector reads it: kernels)"; a1 "CUkernel returned (0 on failure)";
    61 Driver "cuKernelGetFunction" "" : "The function of a CUkernel in the current context"; dur CALL; a0 "CUkernel"; a1 "CUfunction returned (0 on failure)";
    100 Host "sched_switch" "" : "A thread of a traced process was switched out and later back in"; dur "off-CPU time: from switch-out to switch-in (the event's timestamp is the switch-out)"; a0 "thread id (kernel task pid) of the task that ran next on that CPU (0 = idle)"; a1 "0 = preempted while runnable, 1 = blocked/sleeping (voluntary), 2 = other state";
    101 Host "sched_wakeup" "" : "A traced thread was woken and queued to run"; dur "run-queue latency: from wakeup to running (ns), 0 when unknown"; a0 "thread id (kernel task pid) of the task that woke it; 0 when an interrupt (timer, device, softirq) or the idle task did"; a1 "target CPU";
    102 Host "mm_page_alloc" "" : "Kernel page allocations on behalf of a traced process (aggregated)"; dur "0"; a0 "bytes allocated"; a1 "allocation order";
    103 Host "oom_kill" "" : "The OOM killer killed a process"; dur "0"; a0 "killed pid"; a1 "pages it held (0 when unknown)";
    104 Host "process_exec" "" : "A traced process called execve"; dur "0"; a0 "parent pid"; a1 UNUSED;
    105 Host "process_exit" "" : "A traced process exited"; dur "process lifetime (ns), 0 when unknown"; a0 "exit code"; a1 "CPU time of the process, user + system (ns); 0 when unknown";
    106 Host "process_fork" "" : "A traced process forked (the child is traced too)"; dur "0"; a0 "child pid"; a1 UNUSED;
    107 Host "pod_restart" "" : "Kubernetes container restart detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    108 Host "pod_eviction" "" : "Kubernetes pod eviction detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    109 Host "pod_oom_kill" "" : "Kubernetes pod OOM kill detected"; dur "0"; a0 UNUSED; a1 UNUSED;
    110 Host "mm_reclaim" "" : "A traced thread reclaimed memory itself before it could allocate (direct reclaim when the host is short; memory-cgroup reclaim when its cgroup is at its limit)"; dur "time spent reclaiming (ns)"; a0 "bytes reclaimed (pages x 4 KiB)"; a1 "0 = direct (host-wide shortage), 1 = memory cgroup at its limit";
    130 Io "block_read" "" : "Block device read request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    131 Io "block_write" "" : "Block device write request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    132 Io "block_discard" "" : "Block device discard/trim request"; dur "issue to completion (ns)"; a0 "bytes"; a1 "device number (major << 20 | minor)";
    150 Tcp "tcp_retransmit" "" : "TCP segment retransmitted (host-wide: pid is whichever task was current)"; dur "0"; a0 "remote port"; a1 "address family (2 = IPv4, 10 = IPv6)";
    170 Net "net_send" "" : "Socket send family call (send, sendto, sendmsg, write on a socket)"; dur SOCKET; a0 "bytes sent (negative = error)"; a1 "file descriptor";
    171 Net "net_recv" "" : "Socket receive family call (recv, recvfrom, recvmsg, read on a socket)"; dur SOCKET; a0 "bytes received (negative = error)"; a1 "file descriptor";
    200 Nccl "ncclAllReduce" "" : "NCCL all-reduce (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    201 Nccl "ncclBroadcast" "" : "NCCL broadcast (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    202 Nccl "ncclReduce" "" : "NCCL reduce (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    203 Nccl "ncclAllGather" "" : "NCCL all-gather (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    204 Nccl "ncclReduceScatter" "" : "NCCL reduce-scatter (enqueue)"; dur CALL; a0 "bytes"; a1 "communicator handle";
    205 Nccl "ncclSend" "" : "NCCL point-to-point send (enqueue)"; dur CALL; a0 "bytes"; a1 "peer rank";
    206 Nccl "ncclRecv" "" : "NCCL point-to-point receive (enqueue)"; dur CALL; a0 "bytes"; a1 "peer rank";
    207 Nccl "ncclGroupEnd" "" : "End of an NCCL group (where grouped collectives are issued)"; dur CALL; a0 UNUSED; a1 UNUSED;
}

/// Looks an op up by its stored id.
pub fn op_by_id(id: u16) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.id == id)
}

/// Looks an op up by name (ours, or the reference tool's where it differs), case-sensitively.
pub fn op_by_name(name: &str) -> Option<&'static OpInfo> {
    OPS.iter().find(|o| o.name == name).or_else(|| {
        OPS.iter()
            .find(|o| !o.reference_name.is_empty() && o.reference_name == name)
    })
}

/// Collective calls whose completion every rank shares (the merge's clock alignment and the
/// straggler detector pair them with the waits that observe it), as an SQL list.
pub const COLLECTIVES_SQL: &str =
    "'ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather', 'ncclReduceScatter'";

/// The waits that observe a collective's completion on the host, as an SQL list.
pub const SYNCS_SQL: &str = "'cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize', 'cuStreamSynchronize', 'cuCtxSynchronize'";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_and_names_are_unique() {
        let ids: HashSet<_> = OPS.iter().map(|o| o.id).collect();
        let names: HashSet<_> = OPS.iter().map(|o| o.name).collect();
        assert_eq!(ids.len(), OPS.len());
        assert_eq!(names.len(), OPS.len());
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
            op_by_name("cudaDeviceSync").unwrap().name,
            "cudaDeviceSynchronize"
        );
        assert_eq!(op_by_name("cudaLaunchKernel").unwrap().id, 3);
    }
}
