//! The op catalogue as the store sees it: the op table (causeway-ops) under the names the store's
//! users know, and the op sets its queries name.
//!
//! Every store's `ops` lookup table is written from the op table (schema.rs); ids are stable.

pub use causeway_ops::{
    Class, OPS, Op as OpInfo, Source, by_id as op_by_id, by_name as op_by_name,
};

/// Collective calls whose completion every rank shares (the merge's clock alignment and the
/// straggler detector pair them with the waits that observe it), as an SQL list.
pub const COLLECTIVES_SQL: &str = causeway_ops::sql_list!(COLLECTIVES);
const COLLECTIVES: [&str; 5] = causeway_ops::names(Class::Collective);

/// The waits that observe a collective's completion on the host, as an SQL list.
pub const SYNCS_SQL: &str = causeway_ops::sql_list!(SYNCS);
/// The sync class, in the order evidence queries have always shown it.
const SYNCS: [&str; 5] = [
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
];
const _: () = assert!(causeway_ops::is_class(&SYNCS, Class::Sync));

#[cfg(test)]
mod tests {
    use super::*;

    /// A new store's `ops` table holds exactly the ops it held before the op table moved to
    /// causeway-ops: (id, source, name), captured from the catalogue of e1a38a3.
    #[test]
    fn a_new_stores_ops_are_the_old_catalogue() {
        let old: &[(u16, &str, &str)] = &[
            (1, "CUDA", "cudaMalloc"),
            (2, "CUDA", "cudaFree"),
            (3, "CUDA", "cudaLaunchKernel"),
            (4, "CUDA", "cudaMemcpy"),
            (5, "CUDA", "cudaStreamSynchronize"),
            (6, "CUDA", "cudaDeviceSynchronize"),
            (7, "CUDA", "cudaMemcpyAsync"),
            (8, "CUDA", "cudaMallocManaged"),
            (9, "CUDA", "cudaMemcpy2D"),
            (10, "CUDA", "cudaMemcpy2DAsync"),
            (11, "CUDA", "cudaMemcpyPeer"),
            (12, "CUDA", "cudaMemcpyPeerAsync"),
            (13, "CUDA", "cudaMemsetAsync"),
            (14, "CUDA", "cudaEventSynchronize"),
            (15, "CUDA", "cudaGetKernel"),
            (30, "GRAPH", "cudaGraphLaunch"),
            (31, "GRAPH", "cudaStreamBeginCapture"),
            (32, "GRAPH", "cudaStreamEndCapture"),
            (33, "GRAPH", "cudaGraphInstantiate"),
            (50, "DRIVER", "cuLaunchKernel"),
            (51, "DRIVER", "cuMemcpy"),
            (52, "DRIVER", "cuMemcpyAsync"),
            (53, "DRIVER", "cuCtxSynchronize"),
            (54, "DRIVER", "cuMemAlloc"),
            (55, "DRIVER", "cuMemAllocManaged"),
            (56, "DRIVER", "cuLaunchKernelEx"),
            (57, "DRIVER", "cuMemFree"),
            (58, "DRIVER", "cuStreamSynchronize"),
            (59, "DRIVER", "cuModuleGetFunction"),
            (60, "DRIVER", "cuLibraryGetKernel"),
            (61, "DRIVER", "cuKernelGetFunction"),
            (100, "HOST", "sched_switch"),
            (101, "HOST", "sched_wakeup"),
            (102, "HOST", "mm_page_alloc"),
            (103, "HOST", "oom_kill"),
            (104, "HOST", "process_exec"),
            (105, "HOST", "process_exit"),
            (106, "HOST", "process_fork"),
            (107, "HOST", "pod_restart"),
            (108, "HOST", "pod_eviction"),
            (109, "HOST", "pod_oom_kill"),
            (110, "HOST", "mm_reclaim"),
            (130, "IO", "block_read"),
            (131, "IO", "block_write"),
            (132, "IO", "block_discard"),
            (150, "TCP", "tcp_retransmit"),
            (170, "NET", "net_send"),
            (171, "NET", "net_recv"),
            (200, "NCCL", "ncclAllReduce"),
            (201, "NCCL", "ncclBroadcast"),
            (202, "NCCL", "ncclReduce"),
            (203, "NCCL", "ncclAllGather"),
            (204, "NCCL", "ncclReduceScatter"),
            (205, "NCCL", "ncclSend"),
            (206, "NCCL", "ncclRecv"),
            (207, "NCCL", "ncclGroupEnd"),
        ];
        let conn = duckdb::Connection::open_in_memory().unwrap();
        crate::schema::create(&conn).unwrap();
        let mut q = conn
            .prepare("SELECT op_id, source, op FROM ops ORDER BY op_id")
            .unwrap();
        let rows: Vec<(u16, String, String)> = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let old: Vec<(u16, String, String)> = old
            .iter()
            .map(|&(id, s, n)| (id, s.to_string(), n.to_string()))
            .collect();
        assert_eq!(rows, old);
    }

    /// The lists as they were written out before the op table.
    #[test]
    fn sql_lists_are_the_old_ones() {
        assert_eq!(
            COLLECTIVES_SQL,
            "'ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather', 'ncclReduceScatter'"
        );
        assert_eq!(
            SYNCS_SQL,
            "'cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize', 'cuStreamSynchronize', 'cuCtxSynchronize'"
        );
    }
}
