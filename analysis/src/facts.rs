//! The facts every detector starts from, computed once per `explain` by a few aggregating
//! queries (DuckDB does the heavy lifting): the window, the nodes and how their sched_switch
//! rows are timestamped, per-thread call and off-CPU totals, and exact per-(pid, op) statistics.

use std::collections::HashMap;

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::Serialize;

use crate::chains::ChainQuery;
use crate::window::Window;

/// Ops that hand work to the GPU (kernel launches).
pub const LAUNCH_OPS: &str =
    "('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaGraphLaunch')";
/// Ops whose job is to wait for the GPU.
pub const SYNC_OPS: [&str; 5] = [
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cudaEventSynchronize",
];

/// Totals of one thread in the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadFacts {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name (data from the traced machine).
    pub comm: String,
    /// Kernel launches.
    pub launches: u64,
    /// CUDA/driver/graph/NCCL calls.
    pub gpu_calls: u64,
    /// Time inside those calls (ns).
    pub gpu_call_ns: i64,
    /// First and last event of the thread (ns).
    pub first_ns: i64,
    /// Last event end (ns).
    pub last_ns: i64,
    /// Context switches.
    pub switches: u64,
    /// Off-CPU total (ns).
    pub off_ns: i64,
    /// Off-CPU while runnable (ns).
    pub preempted_ns: i64,
    /// Off-CPU while sleeping (ns).
    pub blocked_ns: i64,
    /// Off-CPU in an unknown state (ns).
    pub unknown_ns: i64,
    /// Time in socket send/receive calls (ns).
    pub net_ns: i64,
    /// Block I/O requests issued.
    pub io_requests: u64,
}

/// Exact statistics of one (node, pid, op) in the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpFacts {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Source name.
    pub source: String,
    /// Op name.
    pub op: String,
    /// Calls.
    pub count: u64,
    /// Nearest-rank p50 (ns).
    pub p50_ns: i64,
    /// Nearest-rank p99 (ns).
    pub p99_ns: i64,
    /// Max (ns).
    pub max_ns: i64,
    /// Sum of durations (ns).
    pub total_ns: i64,
    /// Sum of arg0 (bytes for memory and I/O ops).
    pub arg0_sum: i64,
}

/// Facts shared by all detectors.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The store.
    pub r: &'a Reader,
    /// Absolute window.
    pub window: Window,
    /// pid filter (-1 = all).
    pub pid: i64,
    /// node filter ('' = all).
    pub node: String,
    /// Nodes with events in the window.
    pub nodes: Vec<String>,
    /// Nodes whose sched_switch timestamps are switch-in times (reference imports), as
    /// `\x1fnode\x1f...` for SQL.
    pub resume_nodes: String,
    /// Per thread.
    pub threads: Vec<ThreadFacts>,
    /// Per (node, pid, op).
    pub ops: Vec<OpFacts>,
    /// Process names by (node, pid).
    pub names: HashMap<(String, u32), String>,
    /// Parent pids by (node, pid).
    pub parents: HashMap<(String, u32), u32>,
}

pub(crate) fn duck<'r>(
    r: &'r Reader,
    action: &'static str,
) -> impl Fn(duckdb::Error) -> StoreError + 'r {
    move |source| StoreError::Duck {
        path: r.path().to_path_buf(),
        action,
        source,
    }
}

const SPAN_SQL: &str =
    "SELECT coalesce(min(timestamp), 0), coalesce(max(timestamp), 0) FROM event_data";

const THREADS_SQL: &str = "
SELECT e.node, e.pid, e.tid, min(e.comm),
  count(*) FILTER (WHERE o.op IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaGraphLaunch'))::BIGINT,
  count(*) FILTER (WHERE o.source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL'))::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE o.source IN ('CUDA', 'DRIVER', 'GRAPH', 'NCCL')), 0)::BIGINT,
  min(e.timestamp), max(e.timestamp + e.duration),
  count(*) FILTER (WHERE e.op_id = 100)::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE e.op_id = 100), 0)::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE e.op_id = 100 AND e.arg1 = 0), 0)::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE e.op_id = 100 AND e.arg1 = 1), 0)::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE e.op_id = 100 AND e.arg1 NOT IN (0, 1)), 0)::BIGINT,
  coalesce(sum(e.duration) FILTER (WHERE o.source = 'NET'), 0)::BIGINT,
  count(*) FILTER (WHERE o.source = 'IO')::BIGINT
FROM event_data e JOIN ops o ON o.op_id = e.op_id
WHERE e.timestamp BETWEEN ? AND ? AND (?::BIGINT < 0 OR e.pid = ?::BIGINT) AND (?::VARCHAR = '' OR e.node = ?::VARCHAR)
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3";

const OPS_SQL: &str = "
WITH g AS (
  SELECT node, pid, op_id, count(*)::BIGINT n, quantile_disc(duration, 0.5) p50, quantile_disc(duration, 0.99) p99,
         max(duration) mx, sum(duration)::BIGINT tot, sum(arg0)::BIGINT a0
  FROM event_data
  WHERE timestamp BETWEEN ? AND ? AND (?::BIGINT < 0 OR pid = ?::BIGINT) AND (?::VARCHAR = '' OR node = ?::VARCHAR)
    AND op_id <> 100
  GROUP BY ALL)
SELECT g.node, g.pid, o.source, o.op, g.n, g.p50, g.p99, g.mx, g.tot, g.a0
FROM g JOIN ops o ON o.op_id = g.op_id ORDER BY 1, 2, 3, 4";

const NAMES_SQL: &str = "SELECT node, pid, comm, ppid FROM processes";

/// Imported reference traces stamp sched_switch at switch-in; the catalogue (and our collector)
/// at switch-out. A thread cannot start a call while off the CPU, so per imported node the
/// convention with fewer impossible call starts wins (0 of 586 vs 586 on the vLLM trace).
const CONVENTION_SQL: &str = "
WITH imp AS (SELECT node FROM nodes WHERE origin LIKE 'imported:%'),
c AS (SELECT node, tid, timestamp t FROM event_data
      WHERE node IN (SELECT node FROM imp) AND op_id IN (SELECT op_id FROM ops WHERE source IN ('CUDA', 'DRIVER', 'NET', 'GRAPH', 'NCCL'))),
s AS (SELECT node, tid, timestamp ts, duration d FROM event_data WHERE op_id = 100 AND node IN (SELECT node FROM imp))
SELECT c.node,
  count(*) FILTER (WHERE c.t > s.ts AND c.t < s.ts + s.d)::BIGINT AS if_switch_out,
  count(*) FILTER (WHERE c.t > s.ts - s.d AND c.t < s.ts)::BIGINT AS if_switch_in
FROM c JOIN s ON c.node = s.node AND c.tid = s.tid AND c.t BETWEEN s.ts - s.d AND s.ts + s.d
GROUP BY 1 ORDER BY 1";

impl<'a> Ctx<'a> {
    /// Gathers the facts for `q`.
    pub fn load(r: &'a Reader, q: &ChainQuery) -> Result<Ctx<'a>, StoreError> {
        let (first, last): (i64, i64) = r
            .prepare_trusted(SPAN_SQL)?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(duck(r, "reading the trace span"))?;
        let window = q.window.resolve(first, last);
        let pid = q.pid.map_or(-1, i64::from);
        let node = q.node.clone().unwrap_or_default();
        let p = duckdb::params![window.from_ns, window.until_ns, pid, pid, node, node];

        let threads: Vec<ThreadFacts> = r
            .prepare_trusted(THREADS_SQL)?
            .query_map(p, |row| {
                Ok(ThreadFacts {
                    node: row.get(0)?,
                    pid: row.get(1)?,
                    tid: row.get(2)?,
                    comm: causeway_store::sanitize::sanitize(&row.get::<_, String>(3)?),
                    launches: row.get::<_, i64>(4)? as u64,
                    gpu_calls: row.get::<_, i64>(5)? as u64,
                    gpu_call_ns: row.get(6)?,
                    first_ns: row.get(7)?,
                    last_ns: row.get(8)?,
                    switches: row.get::<_, i64>(9)? as u64,
                    off_ns: row.get(10)?,
                    preempted_ns: row.get(11)?,
                    blocked_ns: row.get(12)?,
                    unknown_ns: row.get(13)?,
                    net_ns: row.get(14)?,
                    io_requests: row.get::<_, i64>(15)? as u64,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "computing per-thread totals"))?;

        let ops: Vec<OpFacts> = r
            .prepare_trusted(OPS_SQL)?
            .query_map(p, |row| {
                Ok(OpFacts {
                    node: row.get(0)?,
                    pid: row.get(1)?,
                    source: row.get(2)?,
                    op: row.get(3)?,
                    count: row.get::<_, i64>(4)? as u64,
                    p50_ns: row.get(5)?,
                    p99_ns: row.get(6)?,
                    max_ns: row.get(7)?,
                    total_ns: row.get(8)?,
                    arg0_sum: row.get(9)?,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "computing per-process op statistics"))?;

        let procs: Vec<(String, u32, String, u32)> = r
            .prepare_trusted(NAMES_SQL)?
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading process names"))?;
        let mut names = HashMap::new();
        let mut parents = HashMap::new();
        for (n, pid, comm, ppid) in procs {
            if !comm.is_empty() {
                names.insert((n.clone(), pid), causeway_store::sanitize::sanitize(&comm));
            }
            parents.insert((n, pid), ppid);
        }

        let votes: Vec<(String, i64, i64)> = r
            .prepare_trusted(CONVENTION_SQL)?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "checking how sched_switch is timestamped"))?;
        let mut resume_nodes = String::from("\x1f");
        for (n, out, inn) in votes {
            if inn < out {
                resume_nodes.push_str(&n);
                resume_nodes.push('\x1f');
            }
        }
        let mut nodes: Vec<String> = threads.iter().map(|t| t.node.clone()).collect();
        nodes.dedup();
        Ok(Ctx {
            r,
            window,
            pid,
            node,
            nodes,
            resume_nodes,
            threads,
            ops,
            names,
            parents,
        })
    }

    /// Window length in ns (at least 1).
    pub fn window_ns(&self) -> i64 {
        (self.window.until_ns - self.window.from_ns).max(1)
    }

    /// Span of events of one node in the window (ns, at least 1).
    pub fn node_span_ns(&self, node: &str) -> i64 {
        let ts = self.threads.iter().filter(|t| t.node == node);
        let (a, b) = ts.fold((i64::MAX, i64::MIN), |(a, b), t| {
            (a.min(t.first_ns), b.max(t.last_ns))
        });
        if a > b { 1 } else { (b - a).max(1) }
    }

    /// Whether a node's sched_switch timestamps are switch-in times.
    pub fn resume_convention(&self, node: &str) -> bool {
        self.resume_nodes.contains(&format!("\x1f{node}\x1f"))
    }

    /// The process name of (node, pid), falling back to the thread names seen.
    pub fn name(&self, node: &str, pid: u32) -> String {
        if pid == 0 {
            return "idle".into();
        }
        self.names
            .get(&(node.to_string(), pid))
            .cloned()
            .or_else(|| {
                self.threads
                    .iter()
                    .find(|t| t.node == node && t.pid == pid)
                    .map(|t| t.comm.clone())
            })
            .unwrap_or_else(|| "?".into())
    }

    /// Threads that launch kernels (the GPU-feeding threads), busiest first.
    pub fn feeders(&self) -> Vec<&ThreadFacts> {
        let mut f: Vec<&ThreadFacts> = self.threads.iter().filter(|t| t.launches > 0).collect();
        f.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.tid.cmp(&b.tid)));
        f
    }

    /// Statistics of one op of one process.
    pub fn op(&self, node: &str, pid: u32, op: &str) -> Option<&OpFacts> {
        self.ops
            .iter()
            .find(|o| o.node == node && o.pid == pid && o.op == op)
    }

    /// Whether (node, pid) made any GPU call.
    pub fn is_gpu_process(&self, node: &str, pid: u32) -> bool {
        self.threads
            .iter()
            .any(|t| t.node == node && t.pid == pid && t.gpu_calls > 0)
    }
}
