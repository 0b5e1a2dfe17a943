//! Folds the rows of one node's aggregating scan into the shared facts: per-thread totals and
//! per-(pid, op) statistics under the pid filter, warm-up phases, and launches per GPU (for all
//! processes). Pure: no I/O, so every rule here is unit-tested on hand-made rows.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::intervals::sat;
use crate::opsets::{is_gpu_source, is_launch, is_sync};
use crate::scan::ThreadOpRow;
use crate::switches::SWITCH_OP;

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

/// Kernel launches of one process on one GPU.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuLaunches {
    /// Node.
    pub node: String,
    /// GPU id.
    pub gpu_id: i16,
    /// Process.
    pub pid: u32,
    /// Launches.
    pub launches: u64,
    /// First launch (ns).
    pub first_ns: i64,
    /// Last launch start (ns).
    pub last_ns: i64,
}

/// What one node's rows give besides op statistics.
#[derive(Debug, Default)]
pub struct Derived {
    /// Threads under the pid filter, by (pid, tid).
    pub threads: Vec<ThreadFacts>,
    /// Launches per (GPU, pid) with at least [`GPU_MIN_LAUNCHES`], all processes.
    pub gpu_launches: Vec<GpuLaunches>,
    /// Warm-up end per pid under the pid filter.
    pub warm_ends: HashMap<u32, i64>,
    /// First and last event start of every (pid, tid), all processes.
    pub spans: BTreeMap<(u32, u32), (i64, i64)>,
}

/// Wide sums of one thread: GPU call time, off-CPU time, off-CPU time by run state, socket time.
type Sums = (i128, i128, [i128; 3], i128);

/// A process needs this many launches on a GPU to count as using it.
pub const GPU_MIN_LAUNCHES: u64 = 100;

fn keep(pid_filter: i64, pid: u32) -> bool {
    pid_filter < 0 || i64::from(pid) == pid_filter
}

/// process_exit (its duration is the lifetime).
const EXIT_OP: u16 = causeway_ops::id("process_exit");

/// Derives the per-thread facts, warm-up ends and GPU launch groups of `node`.
pub fn derive(
    node: &str,
    rows: &[ThreadOpRow],
    names: &HashMap<u16, (String, String)>,
    pid_filter: i64,
) -> Derived {
    let mut threads: BTreeMap<(u32, u32), (ThreadFacts, Sums)> = BTreeMap::new();
    let mut gpus: BTreeMap<(i16, u32), GpuLaunches> = BTreeMap::new();
    let mut warm: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    let mut spans: BTreeMap<(u32, u32), (i64, i64)> = BTreeMap::new();
    // When each thread's chosen name was last seen: the latest name wins (a process held
    // before its exec has the launcher's name on its first events).
    let mut named: HashMap<(u32, u32), i64> = HashMap::new();
    for row in rows {
        let span = spans
            .entry((row.pid, row.tid))
            .or_insert((i64::MAX, i64::MIN));
        *span = (span.0.min(row.first_ts), span.1.max(row.last_ts));
        let Some((source, op)) = names.get(&row.op_id) else {
            continue;
        };
        let (gpu, launch) = (is_gpu_source(source), is_launch(op));
        if launch && row.gpu_id >= 0 {
            let g = gpus.entry((row.gpu_id, row.pid)).or_insert(GpuLaunches {
                node: node.to_string(),
                gpu_id: row.gpu_id,
                pid: row.pid,
                launches: 0,
                first_ns: i64::MAX,
                last_ns: i64::MIN,
            });
            g.launches += row.count;
            g.first_ns = g.first_ns.min(row.first_ts);
            g.last_ns = g.last_ns.max(row.last_ts);
        }
        if !keep(pid_filter, row.pid) {
            continue;
        }
        if gpu && !is_sync(op) {
            let w = warm.entry(row.pid).or_insert((i64::MAX, i64::MIN));
            *w = (w.0.min(row.first_ts), w.1.max(row.last_ts));
        }
        let (t, (gpu_ns, off_ns, state_ns, net_ns)) =
            threads.entry((row.pid, row.tid)).or_insert_with(|| {
                let t = ThreadFacts {
                    node: node.to_string(),
                    pid: row.pid,
                    tid: row.tid,
                    comm: row.comm.clone(),
                    first_ns: i64::MAX,
                    last_ns: i64::MIN,
                    ..ThreadFacts::default()
                };
                (t, (0, 0, [0; 3], 0))
            });
        let seen = named.entry((row.pid, row.tid)).or_insert(row.last_ts);
        if row.last_ts > *seen || (row.last_ts == *seen && row.comm < t.comm) {
            *seen = row.last_ts;
            t.comm.clone_from(&row.comm);
        }
        t.first_ns = t.first_ns.min(row.first_ts);
        // A process_exit's duration is the process's lifetime, not time after the event.
        let end = if row.op_id == EXIT_OP {
            row.last_ts
        } else {
            row.last_end
        };
        t.last_ns = t.last_ns.max(end);
        if launch {
            t.launches += row.count;
        }
        if gpu {
            t.gpu_calls += row.count;
            *gpu_ns += row.dur_sum;
        }
        if row.op_id == SWITCH_OP {
            t.switches += row.count;
            *off_ns += row.dur_sum;
            state_ns[row.state.clamp(0, 2) as usize] += row.dur_sum;
        }
        match source.as_str() {
            "NET" => *net_ns += row.dur_sum,
            "IO" => t.io_requests += row.count,
            _ => {}
        }
    }
    let threads = threads
        .into_values()
        .map(|(mut t, (gpu_ns, off_ns, state_ns, net_ns))| {
            t.comm = causeway_store::sanitize::sanitize(&t.comm);
            t.gpu_call_ns = sat(gpu_ns);
            t.off_ns = sat(off_ns);
            t.preempted_ns = sat(state_ns[0]);
            t.blocked_ns = sat(state_ns[1]);
            t.unknown_ns = sat(state_ns[2]);
            t.net_ns = sat(net_ns);
            t
        })
        .collect();
    Derived {
        threads,
        gpu_launches: gpus
            .into_values()
            .filter(|g| g.launches >= GPU_MIN_LAUNCHES)
            .collect(),
        warm_ends: warm
            .into_iter()
            .map(|(pid, (a, b))| (pid, a + 1_000_000_000.max((b - a) / 20)))
            .collect(),
        spans,
    }
}

/// Per-(pid, op) statistics of `node` under the pid filter (sched_switch excepted), ordered
/// by pid, source and op; `quantiles` holds (pid, op_id, p50, p99).
pub fn op_facts(
    node: &str,
    rows: &[ThreadOpRow],
    quantiles: &[(u32, u16, i64, i64)],
    names: &HashMap<u16, (String, String)>,
    pid_filter: i64,
) -> Vec<OpFacts> {
    let q: HashMap<(u32, u16), (i64, i64)> = quantiles
        .iter()
        .map(|&(p, o, p50, p99)| ((p, o), (p50, p99)))
        .collect();
    let mut by: HashMap<(u32, u16), (OpFacts, i128, i128)> = HashMap::new();
    for row in rows {
        if row.op_id == SWITCH_OP || !keep(pid_filter, row.pid) {
            continue;
        }
        let Some((source, op)) = names.get(&row.op_id) else {
            continue;
        };
        let (o, total, arg0) = by.entry((row.pid, row.op_id)).or_insert_with(|| {
            let (p50_ns, p99_ns) = q.get(&(row.pid, row.op_id)).copied().unwrap_or_default();
            let o = OpFacts {
                node: node.to_string(),
                pid: row.pid,
                source: source.clone(),
                op: op.clone(),
                p50_ns,
                p99_ns,
                max_ns: i64::MIN,
                ..OpFacts::default()
            };
            (o, 0, 0)
        });
        o.count += row.count;
        o.max_ns = o.max_ns.max(row.max_dur);
        *total += row.dur_sum;
        *arg0 += row.arg0_sum;
    }
    let mut out: Vec<OpFacts> = by
        .into_values()
        .map(|(mut o, total, arg0)| {
            o.total_ns = sat(total);
            o.arg0_sum = sat(arg0);
            o
        })
        .collect();
    out.sort_by(|a, b| (a.pid, &a.source, &a.op).cmp(&(b.pid, &b.source, &b.op)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, tid: u32, op_id: u16, state: i8, count: u64, dur: i128) -> ThreadOpRow {
        ThreadOpRow {
            pid,
            tid,
            op_id,
            gpu_id: 0,
            comm: format!("t{tid}"),
            state,
            count,
            dur_sum: dur,
            first_ts: 10,
            last_ts: 20,
            last_end: 25,
            max_dur: 7,
            arg0_sum: i128::from(i64::MAX) * 2,
        }
    }

    fn names() -> HashMap<u16, (String, String)> {
        causeway_store::catalog::OPS
            .iter()
            .map(|o| (o.id, (o.source.name().to_string(), o.name.to_string())))
            .collect()
    }

    #[test]
    fn a_thread_is_named_by_its_latest_name() {
        // `trace -- CMD` holds the command's process before its exec: its first switch has the
        // launcher's name ("causeway" sorts before "python3").
        let mut held = row(1, 1, 100, 1, 1, 50);
        held.comm = "causeway".into();
        held.last_ts = 5;
        let mut launches = row(1, 1, 3, 0, 150, 1500);
        launches.comm = "python3".into();
        for rows in [vec![held.clone(), launches.clone()], vec![launches, held]] {
            let d = derive("n", &rows, &names(), -1);
            assert_eq!(d.threads[0].comm, "python3");
        }
    }

    #[test]
    fn folds_rows_into_threads_ops_and_gpus() {
        let rows = vec![
            row(1, 1, 3, 0, 150, 1500),
            row(1, 1, 5, 0, 2, 900),
            row(1, 1, 100, 0, 3, 30),
            row(1, 1, 100, 1, 1, 50),
            row(1, 1, 100, 2, 1, 70),
            row(2, 7, 130, 0, 4, 400),
            row(2, 7, 9999, 0, 4, 400),
        ];
        let d = derive("n", &rows, &names(), -1);
        assert_eq!(d.threads.len(), 2);
        let t = &d.threads[0];
        assert_eq!((t.launches, t.gpu_calls, t.gpu_call_ns), (150, 152, 2400));
        assert_eq!((t.switches, t.off_ns), (5, 150));
        assert_eq!((t.preempted_ns, t.blocked_ns, t.unknown_ns), (30, 50, 70));
        assert_eq!((t.first_ns, t.last_ns), (10, 25));
        assert_eq!(d.threads[1].io_requests, 4);
        assert_eq!(d.gpu_launches.len(), 1);
        assert_eq!(d.warm_ends[&1], 10 + 1_000_000_000);
        assert_eq!(
            d.spans[&(2, 7)],
            (10, 20),
            "unknown ops still mark activity"
        );
        let only2 = derive("n", &rows, &names(), 2);
        assert_eq!(only2.threads.len(), 1);
        assert_eq!(
            only2.gpu_launches.len(),
            1,
            "GPU groups ignore the pid filter"
        );

        let ops = op_facts("n", &rows, &[(1, 3, 9, 11)], &names(), -1);
        let names: Vec<&str> = ops.iter().map(|o| o.op.as_str()).collect();
        assert_eq!(
            names,
            ["cudaLaunchKernel", "cudaStreamSynchronize", "block_read"]
        );
        assert_eq!((ops[0].p50_ns, ops[0].p99_ns, ops[0].count), (9, 11, 150));
        assert_eq!(ops[0].arg0_sum, i64::MAX, "saturates");
    }
}
