//! The facts both metric exports read (Prometheus text and OTLP), gathered once per export:
//! per-(node, pid, op) stored calls classified into both bucket layouts in one scan, the
//! kernel's call counts and log2 histograms, off-CPU time per process and state, drops, nodes
//! and processes. One set of compiled-in queries, so the two exports cannot drift apart.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use causeway_store::{Reader, StoreError};

use crate::duck;

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);

/// Upper bounds of the Prometheus latency buckets in ns: 1 us x 4^k, 1 us .. about 16.8 s
/// (`le` semantics: a call of exactly the bound is in the bucket).
pub const PROM_BUCKETS_NS: [i64; 13] = [
    1_000,
    4_000,
    16_000,
    64_000,
    256_000,
    1_024_000,
    4_096_000,
    16_384_000,
    65_536_000,
    262_144_000,
    1_048_576_000,
    4_194_304_000,
    16_777_216_000,
];

/// Number of log2 buckets: bucket k counts 2^k <= d < 2^(k+1) ns; the last one (40) also holds
/// everything >= 2^40 ns, bucket 0 everything below 2 ns.
pub const LOG2_BUCKETS: usize = 41;

/// The op whose rows are off-CPU intervals rather than calls.
pub const SCHED_SWITCH: &str = "sched_switch";

/// Stored events of one node in a range of sequence numbers, per (pid, op), with the log2
/// bucket (exact over integers: the floating-point `log2` is corrected by shifts) and the
/// Prometheus bucket of each duration. Parameters: node_id, first seq, last seq.
static STORED_SQL: LazyLock<String> = LazyLock::new(|| {
    let prom: Vec<String> = PROM_BUCKETS_NS
        .iter()
        .enumerate()
        .map(|(i, b)| format!("WHEN d.duration <= {b} THEN {i}"))
        .collect();
    format!(
        "WITH c AS (
           SELECT d.pid, o.source, o.op, d.duration,
                  CASE WHEN o.op LIKE '%emcpy%' OR o.op LIKE '%Memset%' THEN d.arg0 ELSE 0 END AS bytes,
                  CASE WHEN d.duration < 2 THEN 0
                       WHEN d.duration >= 1099511627776 THEN 40
                       ELSE floor(log2(d.duration))::INTEGER END AS l2f,
                  CASE {} ELSE {} END AS pb
           FROM event_rows d JOIN ops o ON o.op_id = d.op_id
           WHERE d.node_id = ? AND d.seq BETWEEN ? AND ? AND o.op <> '{SCHED_SWITCH}')
         SELECT pid::BIGINT, source, op,
                CASE WHEN l2f < 40 AND duration >= (2::BIGINT << l2f) THEN l2f + 1
                     WHEN l2f > 0 AND duration < (1::BIGINT << l2f) THEN l2f - 1
                     ELSE l2f END AS l2,
                pb, count(*)::BIGINT, (CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END)::BIGINT, (CASE WHEN sum(bytes) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(bytes) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(bytes) END)::BIGINT,
                min(duration)::BIGINT, max(duration)::BIGINT
         FROM c GROUP BY ALL",
        prom.join(" "),
        PROM_BUCKETS_NS.len()
    )
});

/// Every node with its key in `event_rows`.
const NODE_IDS_SQL: &str =
    "SELECT node_id::BIGINT, node, hostname, cluster FROM nodes ORDER BY node";
/// The newest sequence number of a node at or after a given one (node_id, first seq).
const LAST_SEQ_SQL: &str = "SELECT max(seq)::BIGINT FROM event_rows WHERE node_id = ? AND seq >= ?";
/// Count, newest timestamp and time span of a node's events in a range (node_id, first, last).
const NODE_RANGE_SQL: &str = "SELECT count(*)::BIGINT, max(timestamp)::BIGINT,
    min(timestamp)::BIGINT, (CASE WHEN max(timestamp::HUGEINT + duration) > 9223372036854775807 THEN 9223372036854775807 WHEN max(timestamp::HUGEINT + duration) < -9223372036854775808 THEN -9223372036854775808 ELSE max(timestamp::HUGEINT + duration) END)::BIGINT
  FROM event_rows WHERE node_id = ? AND seq BETWEEN ? AND ?";
/// Off-CPU time of a node's processes in a range (node_id, first, last).
const OFF_CPU_SQL: &str = "SELECT pid::BIGINT,
    CASE arg1 WHEN 0 THEN 'preempted' WHEN 1 THEN 'blocked' ELSE 'other' END AS state,
    (CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END)::BIGINT, count(*)::BIGINT
  FROM event_rows WHERE node_id = ? AND seq BETWEEN ? AND ? AND op_id = 100 GROUP BY ALL";
/// Kernel call counts per (node, pid, op), over every window. Read whole at each update: one
/// row per window and active op (far fewer than events), and a collected store replaces a
/// node's latest snapshot rows in place, so these tables are not append-only.
const KERNEL_SQL: &str = "SELECT c.node, c.pid::BIGINT, o.source, o.op, (CASE WHEN sum(c.calls) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(c.calls) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(c.calls) END)::BIGINT,
    (CASE WHEN sum(c.stored) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(c.stored) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(c.stored) END)::BIGINT, (CASE WHEN sum(c.total_ns) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(c.total_ns) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(c.total_ns) END)::BIGINT, (CASE WHEN sum(c.bytes) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(c.bytes) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(c.bytes) END)::BIGINT,
    min(c.window_start_ns)::BIGINT, max(c.window_end_ns)::BIGINT
  FROM op_counts c JOIN ops o ON o.op_id = c.op_id GROUP BY ALL";
/// Kernel histogram buckets per (node, pid, op), over every window (read whole, as above).
const HIST_SQL: &str = "SELECT h.node, h.pid::BIGINT, o.source, o.op,
    least(h.log2_bucket, 40)::INTEGER, (CASE WHEN sum(h.count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(h.count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(h.count) END)::BIGINT,
    min(h.window_start_ns)::BIGINT, max(h.window_end_ns)::BIGINT
  FROM op_histograms h JOIN ops o ON o.op_id = h.op_id GROUP BY ALL";
const DROPS_SQL: &str = "SELECT node, kind, (CASE WHEN sum(count) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(count) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(count) END)::BIGINT FROM drops GROUP BY ALL ORDER BY 1, 2";
const NODES_SQL: &str = "SELECT n.node, n.hostname, n.cluster, coalesce(e.n, 0)::BIGINT, e.last
  FROM nodes n LEFT JOIN (SELECT node, count(*)::BIGINT AS n, max(timestamp)::BIGINT AS last
                          FROM event_data GROUP BY 1) e ON e.node = n.node
  ORDER BY 1";
const PROCESSES_SQL: &str = "SELECT node, pid::BIGINT, comm, rank, local_rank, world_size, cluster,
    '', '', '', '', '', '', 0::UBIGINT
  FROM processes ORDER BY 1, 2";
/// Schema 9 and later also know each process's container and pod.
const PROCESSES_PLACED_SQL: &str = "SELECT p.node, p.pid::BIGINT, p.comm, p.rank, p.local_rank,
    p.world_size, p.cluster, coalesce(c.container_id, ''), coalesce(c.runtime, ''),
    coalesce(c.pod_name, ''), coalesce(c.namespace, ''), coalesce(c.pod_uid, ''),
    coalesce(c.container_name, ''), CASE WHEN c.node IS NULL THEN 0 ELSE p.cgroup_id END
  FROM processes p LEFT JOIN cgroups c ON c.node = p.node AND c.cgroup_id = p.cgroup_id
  ORDER BY 1, 2";
const SPAN_SQL: &str = "SELECT min(s)::BIGINT, max(e)::BIGINT FROM (
    SELECT min(timestamp) AS s, (CASE WHEN max(timestamp::HUGEINT + duration) > 9223372036854775807 THEN 9223372036854775807 WHEN max(timestamp::HUGEINT + duration) < -9223372036854775808 THEN -9223372036854775808 ELSE max(timestamp::HUGEINT + duration) END) AS e FROM event_rows
    UNION ALL SELECT min(window_start_ns), max(window_end_ns) FROM op_counts
    UNION ALL SELECT min(window_start_ns), max(window_end_ns) FROM op_histograms)";

/// Which process and op a set of facts is about (ordered node, pid, source, op).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpKey {
    /// Node name.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Source of the op (cuda, driver, nccl, host, ...).
    pub source: String,
    /// Op name.
    pub op: String,
}

/// The calls of one (node, pid, op) that are stored as events: exact over those events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCalls {
    /// Stored events.
    pub count: u64,
    /// Sum of their durations (ns).
    pub sum_ns: i64,
    /// Bytes moved by memcpy/memset-family calls (their arg0); 0 for other ops.
    pub bytes: i64,
    /// Shortest duration (ns).
    pub min_ns: i64,
    /// Longest duration (ns).
    pub max_ns: i64,
    /// Events per log2 bucket ([`LOG2_BUCKETS`]).
    pub log2: [u64; LOG2_BUCKETS],
    /// Events per Prometheus bucket: index i counts durations in (bound[i-1], bound[i]], the
    /// last index those above every bound (not cumulative).
    pub prom: [u64; PROM_BUCKETS_NS.len() + 1],
}

/// What the kernel counted for one (node, pid, op): every call, also those not stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelCalls {
    /// Calls counted.
    pub calls: u64,
    /// Of those, stored as events.
    pub stored: u64,
    /// Sum of the timed calls' durations (ns).
    pub total_ns: u64,
    /// Bytes moved or allocated, as the kernel counts them for the op.
    pub bytes: u64,
}

/// Everything known about one (node, pid, op).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpFacts {
    /// From the stored events, when there are any.
    pub stored: Option<StoredCalls>,
    /// From the kernel's counters (`op_counts`), when recorded.
    pub kernel: Option<KernelCalls>,
    /// The kernel's log2 histogram (`op_histograms`), when recorded.
    pub kernel_hist: Option<[u64; LOG2_BUCKETS]>,
}

/// A node of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// Node name.
    pub node: String,
    /// Host name ('' when unknown).
    pub hostname: String,
    /// Cluster ('' when unknown).
    pub cluster: String,
    /// Events stored for the node (every op, off-CPU intervals included).
    pub events: i64,
    /// Timestamp of its newest event (ns), when it has any.
    pub last_event_ns: Option<i64>,
}

/// A traced process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    /// Process name ('' when unknown).
    pub comm: String,
    /// torchrun RANK.
    pub rank: Option<i32>,
    /// torchrun LOCAL_RANK.
    pub local_rank: Option<i32>,
    /// torchrun WORLD_SIZE.
    pub world_size: Option<i32>,
    /// Cluster ('' when unknown).
    pub cluster: String,
    /// Container id ('' when not in a container).
    pub container_id: String,
    /// Container runtime.
    pub runtime: String,
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod uid.
    pub pod_uid: String,
    /// Container name within the pod.
    pub container_name: String,
    /// Its cgroup (0 when unknown or not described).
    pub cgroup_id: u64,
}

/// Off-CPU time of one process in one state at switch-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffCpu {
    /// Node name.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// preempted, blocked or other.
    pub state: String,
    /// Time off the CPU (ns).
    pub ns: i64,
    /// Switches.
    pub switches: i64,
}

/// Events lost on one node, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drops {
    /// Node name.
    pub node: String,
    /// ringbuf_full, channel_full, write_failed, sampled, import_skipped, ...
    pub kind: String,
    /// Events lost.
    pub count: i64,
}

/// Everything the metric exports need from one trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// First event or window start and last event end or window end (ns), when not empty.
    pub span: Option<(i64, i64)>,
    /// Every node, by name.
    pub nodes: Vec<NodeFacts>,
    /// Processes by (node, pid).
    pub processes: BTreeMap<(String, u32), ProcessFacts>,
    /// Per-(node, pid, op) facts (sched_switch appears only with kernel counts).
    pub ops: BTreeMap<OpKey, OpFacts>,
    /// Off-CPU time per (node, pid, state).
    pub off_cpu: Vec<OffCpu>,
    /// Drops per (node, kind).
    pub drops: Vec<Drops>,
}

fn pid(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn key(row: &causeway_store::duckdb::Row<'_>) -> causeway_store::duckdb::Result<OpKey> {
    Ok(OpKey {
        node: row.get(0)?,
        pid: pid(row.get(1)?),
        source: row.get(2)?,
        op: row.get(3)?,
    })
}

/// Only the trace's span and nodes (what log resources need), the rest left empty.
pub fn nodes_and_span(r: &Reader) -> Result<Facts, StoreError> {
    let mut f = Facts::default();
    let span: (Option<i64>, Option<i64>) = r
        .prepare_trusted(SPAN_SQL)?
        .query_row([], causeway_store::row)
        .map_err(duck(r, "reading the trace span"))?;
    f.span = span.0.zip(span.1);
    f.nodes = r
        .prepare_trusted(NODES_SQL)?
        .query_map([], |row| {
            Ok(NodeFacts {
                node: row.get(0)?,
                hostname: row.get(1)?,
                cluster: row.get(2)?,
                events: row.get(3)?,
                last_event_ns: row.get(4)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "counting events per node"))?;
    Ok(f)
}

/// Reads the facts of the trace `r` reads (a finished file or a live recording) in one go.
/// A caller that asks again and again (a live exporter) keeps a [`Gatherer`] instead.
pub fn gather(r: &Reader) -> Result<Facts, StoreError> {
    Gatherer::default().update(r)
}

/// What a [`Gatherer`] has read of one node's events.
#[derive(Debug, Default, Clone)]
struct NodeProgress {
    /// First sequence number not read yet.
    next_seq: i64,
    /// Events read.
    events: i64,
    /// Newest timestamp read.
    last_event_ns: Option<i64>,
}

/// Facts kept up to date across calls. Each [`Gatherer::update`] reads only the event rows
/// written since the previous one (by each node's sequence numbers) and adds them to what it
/// had; the kernel's per-window counters and the small tables (nodes, processes, drops) are
/// read whole. So a live exporter pushing every few seconds pays for the new events, not for
/// the length of the recording (the `gather::incremental_timing` test of causeway-export
/// compares the two).
///
/// It relies on the writer's contract: event rows are appended with increasing sequence
/// numbers per node and committed in that order, and never deleted.
#[derive(Debug, Default, Clone)]
pub struct Gatherer {
    /// Event-derived and kernel-derived facts so far (nodes, processes and drops are refreshed).
    acc: Facts,
    /// Per node_id.
    nodes: BTreeMap<i64, NodeProgress>,
    /// Off-CPU (ns, switches) per (node, pid, state).
    off_cpu: BTreeMap<(String, u32, String), (i64, i64)>,
    /// Time span of the events read.
    event_span: Option<(i64, i64)>,
}

fn widen(span: &mut Option<(i64, i64)>, lo: Option<i64>, hi: Option<i64>) {
    if let (Some(lo), Some(hi)) = (lo, hi) {
        *span = Some(match *span {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }
}

impl Gatherer {
    /// Reads what was written since the last update and returns the facts of the whole trace.
    pub fn update(&mut self, r: &Reader) -> Result<Facts, StoreError> {
        let nodes: Vec<(i64, String, String, String)> = r
            .prepare_trusted(NODE_IDS_SQL)?
            .query_map([], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading the nodes"))?;
        let mut node_facts = Vec::with_capacity(nodes.len());
        for (id, node, hostname, cluster) in nodes {
            let p = self.read_node_events(r, id, &node)?;
            node_facts.push(NodeFacts {
                node,
                hostname,
                cluster,
                events: p.events,
                last_event_ns: p.last_event_ns,
            });
        }
        let mut f = self.acc.clone();
        f.nodes = node_facts;
        f.span = self.event_span;
        read_kernel(r, &mut f)?;
        f.off_cpu = self
            .off_cpu
            .iter()
            .map(|((node, pid, state), &(ns, switches))| OffCpu {
                node: node.clone(),
                pid: *pid,
                state: state.clone(),
                ns,
                switches,
            })
            .collect();
        f.drops = r
            .prepare_trusted(DROPS_SQL)?
            .query_map([], |row| {
                Ok(Drops {
                    node: row.get(0)?,
                    kind: row.get(1)?,
                    count: row.get(2)?,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading drop counters"))?;
        let processes_sql = if r.schema_version() >= 9 {
            PROCESSES_PLACED_SQL
        } else {
            PROCESSES_SQL
        };
        let processes: Vec<((String, u32), ProcessFacts)> = r
            .prepare_trusted(processes_sql)?
            .query_map([], |row| {
                Ok((
                    (row.get(0)?, pid(row.get(1)?)),
                    ProcessFacts {
                        comm: row.get(2)?,
                        rank: row.get(3)?,
                        local_rank: row.get(4)?,
                        world_size: row.get(5)?,
                        cluster: row.get(6)?,
                        container_id: row.get(7)?,
                        runtime: row.get(8)?,
                        pod_name: row.get(9)?,
                        namespace: row.get(10)?,
                        pod_uid: row.get(11)?,
                        container_name: row.get(12)?,
                        cgroup_id: row.get(13)?,
                    },
                ))
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "reading processes"))?;
        f.processes = processes.into_iter().collect();
        Ok(f)
    }

    /// Adds the node's events from its first unread sequence number up to its newest one now
    /// (rows committed while this runs are left for the next update).
    fn read_node_events(
        &mut self,
        r: &Reader,
        id: i64,
        node: &str,
    ) -> Result<NodeProgress, StoreError> {
        let mut p = self.nodes.get(&id).cloned().unwrap_or_default();
        let last: Option<i64> = r
            .prepare_trusted_ints(LAST_SEQ_SQL, &[id, p.next_seq])?
            .query_row([], |row| row.get(0))
            .map_err(duck(r, "finding new events"))?;
        let Some(last) = last else {
            return Ok(p);
        };
        let range = [id, p.next_seq, last];

        type Counts = (i64, Option<i64>, Option<i64>, Option<i64>);
        let (n, newest, lo, hi): Counts = r
            .prepare_trusted_ints(NODE_RANGE_SQL, &range)?
            .query_row([], causeway_store::row)
            .map_err(duck(r, "counting events per node"))?;
        p.events += n;
        p.last_event_ns = p.last_event_ns.max(newest);
        widen(&mut self.event_span, lo, hi);

        type StoredRow = (i64, String, String, i32, i32, [i64; 5]);
        let stored: Vec<StoredRow> = r
            .prepare_trusted_ints(STORED_SQL.as_str(), &range)?
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    [
                        row.get(5)?,
                        row.get(6)?,
                        row.get(7)?,
                        row.get(8)?,
                        row.get(9)?,
                    ],
                ))
            })
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "computing per-op metrics"))?;
        for (p_id, source, op, l2, pb, [n, sum, bytes, min, max]) in stored {
            let k = OpKey {
                node: node.to_string(),
                pid: pid(p_id),
                source,
                op,
            };
            let s = self
                .acc
                .ops
                .entry(k)
                .or_default()
                .stored
                .get_or_insert(StoredCalls {
                    count: 0,
                    sum_ns: 0,
                    bytes: 0,
                    min_ns: i64::MAX,
                    max_ns: i64::MIN,
                    log2: [0; LOG2_BUCKETS],
                    prom: [0; PROM_BUCKETS_NS.len() + 1],
                });
            let n = n.max(0) as u64;
            s.count += n;
            s.sum_ns += sum;
            s.bytes += bytes;
            s.min_ns = s.min_ns.min(min);
            s.max_ns = s.max_ns.max(max);
            s.log2[l2.clamp(0, LOG2_BUCKETS as i32 - 1) as usize] += n;
            s.prom[pb.clamp(0, PROM_BUCKETS_NS.len() as i32) as usize] += n;
        }

        let off: Vec<(i64, String, i64, i64)> = r
            .prepare_trusted_ints(OFF_CPU_SQL, &range)?
            .query_map([], causeway_store::row)
            .and_then(|rows| rows.collect())
            .map_err(duck(r, "summing off-CPU time"))?;
        for (p_id, state, ns, switches) in off {
            let e = self
                .off_cpu
                .entry((node.to_string(), pid(p_id), state))
                .or_default();
            e.0 += ns;
            e.1 += switches;
        }
        p.next_seq = last + 1;
        self.nodes.insert(id, p.clone());
        Ok(p)
    }
}

/// Adds the kernel's counters and histograms (every window) and their windows' span to `f`.
fn read_kernel(r: &Reader, f: &mut Facts) -> Result<(), StoreError> {
    type KernelRow = (OpKey, [i64; 4], Option<i64>, Option<i64>);
    let kernel: Vec<KernelRow> = r
        .prepare_trusted(KERNEL_SQL)?
        .query_map([], |row| {
            Ok((
                key(row)?,
                [row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?],
                row.get(8)?,
                row.get(9)?,
            ))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading counted calls"))?;
    for (k, [calls, stored, total_ns, bytes], lo, hi) in kernel {
        f.ops.entry(k).or_default().kernel = Some(KernelCalls {
            calls: calls.max(0) as u64,
            stored: stored.max(0) as u64,
            total_ns: total_ns.max(0) as u64,
            bytes: bytes.max(0) as u64,
        });
        widen(&mut f.span, lo, hi);
    }
    type HistRow = (OpKey, i32, i64, Option<i64>, Option<i64>);
    let hist: Vec<HistRow> = r
        .prepare_trusted(HIST_SQL)?
        .query_map([], |row| {
            Ok((
                key(row)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
            ))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the kernel's histograms"))?;
    for (k, b, n, lo, hi) in hist {
        let h = f
            .ops
            .entry(k)
            .or_default()
            .kernel_hist
            .get_or_insert([0; LOG2_BUCKETS]);
        h[b.clamp(0, LOG2_BUCKETS as i32 - 1) as usize] += n.max(0) as u64;
        widen(&mut f.span, lo, hi);
    }
    Ok(())
}
