//! The table of probed library functions: which symbol, in which library, records which op.
//!
//! One generic entry/return program pair serves every function; the attach cookie built by
//! [`cookie`] tells the BPF side the op id and, for the cuMemcpy* variants, the copy direction.
//! Op ids are the op table's (crates/ops/src/lib.rs; the collector's tests check the names).

/// A library whose functions are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Library {
    /// The CUDA runtime (libcudart.so*, or an executable linking it statically).
    Cudart,
    /// The CUDA driver (libcuda.so*).
    Cuda,
    /// NCCL (libnccl.so*), opt-in.
    Nccl,
}

impl Library {
    /// The file-name stem that identifies the library (`libcudart.so.12.4` starts with it).
    pub fn stem(self) -> &'static str {
        match self {
            Library::Cudart => "libcudart.so",
            Library::Cuda => "libcuda.so",
            Library::Nccl => "libnccl.so",
        }
    }

    /// Short name: "cudart", "cuda" or "nccl".
    pub fn name(self) -> &'static str {
        match self {
            Library::Cudart => "cudart",
            Library::Cuda => "cuda",
            Library::Nccl => "nccl",
        }
    }

    /// Which library a file name belongs to, if any.
    pub fn from_file_name(name: &str) -> Option<Library> {
        [Library::Cudart, Library::Cuda, Library::Nccl]
            .into_iter()
            .find(|l| name.starts_with(l.stem()))
    }
}

/// One probed function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The library exporting it.
    pub library: Library,
    /// The exported symbol name (versioned symbols attach by the plain name).
    pub symbol: &'static str,
    /// Catalogue op id recorded for it.
    pub op: u16,
    /// Catalogue op name (checked against the catalogue by tests).
    pub op_name: &'static str,
    /// Auxiliary value passed in the cookie (cuMemcpy* copy direction), else 0.
    pub aux: u32,
}

/// The attach cookie for an op: op id in the low 16 bits, `aux` in the high 32 bits.
pub fn cookie(op: u16, aux: u32) -> u64 {
    u64::from(op) | (u64::from(aux) << 32)
}

const fn p(
    library: Library,
    symbol: &'static str,
    op: u16,
    op_name: &'static str,
    aux: u32,
) -> ProbeSpec {
    ProbeSpec {
        library,
        symbol,
        op,
        op_name,
        aux,
    }
}

use Library::{Cuda as D, Cudart as R, Nccl as N};

/// Every probed function. Symbols missing from a given library file are skipped at attach time.
pub const PROBES: &[ProbeSpec] = &[
    p(R, "cudaMalloc", 1, "cudaMalloc", 0),
    p(R, "cudaFree", 2, "cudaFree", 0),
    p(R, "cudaLaunchKernel", 3, "cudaLaunchKernel", 0),
    p(R, "cudaLaunchKernel_ptsz", 3, "cudaLaunchKernel", 0),
    // CUDA 13's stubs get a handle once and launch with `__cudaLaunchKernel(handle, ...)`, which
    // in NVIDIA's 12.9 and 13.x runtimes is a thunk that jumps to cudaLaunchKernel (probed above,
    // so not probed itself: each launch would count twice).
    p(R, "__cudaGetKernel", 15, "cudaGetKernel", 0),
    p(R, "cudaGetKernel", 15, "cudaGetKernel", 0),
    p(R, "cudaMemcpy", 4, "cudaMemcpy", 0),
    p(R, "cudaMemcpy_ptds", 4, "cudaMemcpy", 0),
    p(R, "cudaStreamSynchronize", 5, "cudaStreamSynchronize", 0),
    p(
        R,
        "cudaStreamSynchronize_ptsz",
        5,
        "cudaStreamSynchronize",
        0,
    ),
    p(R, "cudaDeviceSynchronize", 6, "cudaDeviceSynchronize", 0),
    p(R, "cudaMemcpyAsync", 7, "cudaMemcpyAsync", 0),
    p(R, "cudaMemcpyAsync_ptsz", 7, "cudaMemcpyAsync", 0),
    p(R, "cudaMallocManaged", 8, "cudaMallocManaged", 0),
    p(R, "cudaMemcpy2D", 9, "cudaMemcpy2D", 0),
    p(R, "cudaMemcpy2DAsync", 10, "cudaMemcpy2DAsync", 0),
    p(R, "cudaMemcpy2DAsync_ptsz", 10, "cudaMemcpy2DAsync", 0),
    p(R, "cudaMemcpyPeer", 11, "cudaMemcpyPeer", 0),
    p(R, "cudaMemcpyPeerAsync", 12, "cudaMemcpyPeerAsync", 0),
    p(R, "cudaMemsetAsync", 13, "cudaMemsetAsync", 0),
    p(R, "cudaMemsetAsync_ptsz", 13, "cudaMemsetAsync", 0),
    p(R, "cudaEventSynchronize", 14, "cudaEventSynchronize", 0),
    p(R, "cudaGraphLaunch", 30, "cudaGraphLaunch", 0),
    p(R, "cudaGraphLaunch_ptsz", 30, "cudaGraphLaunch", 0),
    p(R, "cudaStreamBeginCapture", 31, "cudaStreamBeginCapture", 0),
    p(
        R,
        "cudaStreamBeginCapture_ptsz",
        31,
        "cudaStreamBeginCapture",
        0,
    ),
    p(R, "cudaStreamEndCapture", 32, "cudaStreamEndCapture", 0),
    p(
        R,
        "cudaStreamEndCapture_ptsz",
        32,
        "cudaStreamEndCapture",
        0,
    ),
    p(R, "cudaGraphInstantiate", 33, "cudaGraphInstantiate", 0),
    // PyTorch instantiates its CUDA graphs with the flags variant (same arguments in registers).
    p(
        R,
        "cudaGraphInstantiateWithFlags",
        33,
        "cudaGraphInstantiate",
        0,
    ),
    p(D, "cuLaunchKernel", 50, "cuLaunchKernel", 0),
    p(D, "cuLaunchKernel_ptsz", 50, "cuLaunchKernel", 0),
    p(D, "cuMemcpy", 51, "cuMemcpy", 4),
    p(D, "cuMemcpyHtoD_v2", 51, "cuMemcpy", 1),
    p(D, "cuMemcpyDtoH_v2", 51, "cuMemcpy", 2),
    p(D, "cuMemcpyDtoD_v2", 51, "cuMemcpy", 3),
    p(D, "cuMemcpyAsync", 52, "cuMemcpyAsync", 4),
    p(D, "cuMemcpyHtoDAsync_v2", 52, "cuMemcpyAsync", 1),
    p(D, "cuMemcpyDtoHAsync_v2", 52, "cuMemcpyAsync", 2),
    p(D, "cuMemcpyDtoDAsync_v2", 52, "cuMemcpyAsync", 3),
    p(D, "cuCtxSynchronize", 53, "cuCtxSynchronize", 0),
    p(D, "cuMemAlloc_v2", 54, "cuMemAlloc", 0),
    p(D, "cuMemAllocManaged", 55, "cuMemAllocManaged", 0),
    p(D, "cuLaunchKernelEx", 56, "cuLaunchKernelEx", 0),
    p(D, "cuMemFree_v2", 57, "cuMemFree", 0),
    p(D, "cuStreamSynchronize", 58, "cuStreamSynchronize", 0),
    // Names of JIT-compiled kernels (Triton, CuPy raw kernels): the launches' CUfunction.
    p(D, "cuModuleGetFunction", 59, "cuModuleGetFunction", 0),
    p(D, "cuLibraryGetKernel", 60, "cuLibraryGetKernel", 0),
    p(D, "cuKernelGetFunction", 61, "cuKernelGetFunction", 0),
    p(N, "ncclAllReduce", 200, "ncclAllReduce", 0),
    p(N, "ncclBroadcast", 201, "ncclBroadcast", 0),
    p(N, "ncclReduce", 202, "ncclReduce", 0),
    p(N, "ncclAllGather", 203, "ncclAllGather", 0),
    p(N, "ncclReduceScatter", 204, "ncclReduceScatter", 0),
    p(N, "ncclSend", 205, "ncclSend", 0),
    p(N, "ncclRecv", 206, "ncclRecv", 0),
    p(N, "ncclGroupEnd", 207, "ncclGroupEnd", 0),
];

/// Host ops the kernel programs record (id, catalogue name), checked against the catalogue by tests.
pub const HOST_OPS: &[(u16, &str)] = &[
    (100, "sched_switch"),
    (101, "sched_wakeup"),
    (102, "mm_page_alloc"),
    (103, "oom_kill"),
    (104, "process_exec"),
    (105, "process_exit"),
    (106, "process_fork"),
    (110, "mm_reclaim"),
    (130, "block_read"),
    (131, "block_write"),
    (132, "block_discard"),
    (150, "tcp_retransmit"),
    (170, "net_send"),
    (171, "net_recv"),
];

/// The probes of one library.
pub fn probes_for(library: Library) -> impl Iterator<Item = &'static ProbeSpec> {
    PROBES.iter().filter(move |s| s.library == library)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_packs_op_and_direction() {
        assert_eq!(cookie(51, 2), 51 | (2 << 32));
        assert_eq!(cookie(3, 0), 3);
    }

    #[test]
    fn libraries_are_recognised_by_file_name() {
        assert_eq!(
            Library::from_file_name("libcudart.so.12.4.127"),
            Some(Library::Cudart)
        );
        assert_eq!(Library::from_file_name("libcuda.so.1"), Some(Library::Cuda));
        assert_eq!(Library::from_file_name("libnccl.so.2"), Some(Library::Nccl));
        assert_eq!(Library::from_file_name("libcublas.so.12"), None);
    }

    #[test]
    fn symbols_are_unique() {
        let mut seen = std::collections::HashSet::new();
        assert!(PROBES.iter().all(|p| seen.insert((p.library, p.symbol))));
    }
}
