//! The rows `causeway collect` writes, as decoded from OTLP by causeway-ingest: sending nodes
//! and processes, generic points and log records, causeway's op and drop snapshots and chains.

use std::sync::Arc;

/// Node recorded for a resource that names none.
pub const UNKNOWN_NODE: &str = "unknown";

/// A machine that sent data (a `nodes` row with origin `collected`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeRow {
    /// Node name (causeway.node, else host.name).
    pub node: String,
    /// host.name.
    pub hostname: String,
    /// causeway.cluster.
    pub cluster: String,
}

/// A process of a sending node (a `processes` row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessRow {
    /// Node name.
    pub node: String,
    /// process.pid.
    pub pid: u32,
    /// process.executable.name.
    pub comm: String,
    /// causeway.rank.
    pub rank: Option<i32>,
    /// causeway.local_rank.
    pub local_rank: Option<i32>,
    /// causeway.world_size.
    pub world_size: Option<i32>,
    /// causeway.cluster.
    pub cluster: String,
    /// Earliest point time seen for the process (ns).
    pub first_seen_ns: i64,
    /// Latest point time seen (ns).
    pub last_seen_ns: i64,
    /// causeway.cgroup_id with container.* and k8s.*: where the process ran, when the sender
    /// knew (cgroup_id 0 otherwise).
    pub cgroup: crate::CgroupInfo,
}

/// One data point kept generically in `metric_points`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricPoint {
    /// Node name.
    pub node: String,
    /// Resource attributes, JSON object.
    pub resource: Arc<str>,
    /// Instrumentation scope name.
    pub scope: Arc<str>,
    /// Metric name.
    pub metric: Arc<str>,
    /// Unit.
    pub unit: Arc<str>,
    /// gauge, sum, histogram, exponential_histogram, summary.
    pub kind: &'static str,
    /// Sums: monotonic.
    pub monotonic: Option<bool>,
    /// cumulative, delta or ''.
    pub temporality: &'static str,
    /// Point attributes, JSON object.
    pub attributes: String,
    /// Interval start (ns).
    pub start_ns: i64,
    /// Point time (ns).
    pub time_ns: i64,
    /// Gauge/sum value.
    pub value: Option<f64>,
    /// Histogram/summary count.
    pub count: Option<u64>,
    /// Histogram/summary sum.
    pub sum: Option<f64>,
    /// Histogram min.
    pub min: Option<f64>,
    /// Histogram max.
    pub max: Option<f64>,
    /// Histogram bucket counts (None for gauges and sums).
    pub bucket_counts: Option<Vec<u64>>,
    /// Explicit bounds or summary quantiles.
    pub bounds: Option<Vec<f64>>,
    /// Summary quantile values.
    pub bucket_values: Option<Vec<f64>>,
}

/// One log record kept generically in `log_records`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRow {
    /// Node name.
    pub node: String,
    /// Resource attributes, JSON object.
    pub resource: Arc<str>,
    /// Scope name.
    pub scope: Arc<str>,
    /// Event time (ns).
    pub time_ns: i64,
    /// Observed time (ns).
    pub observed_ns: i64,
    /// OTLP severity number.
    pub severity_number: i32,
    /// Severity text.
    pub severity_text: String,
    /// Event name.
    pub event_name: String,
    /// Body (strings as is, other values as JSON).
    pub body: String,
    /// Attributes, JSON object.
    pub attributes: String,
    /// Trace id, hex.
    pub trace_id: String,
    /// Span id, hex.
    pub span_id: String,
}

/// A cumulative snapshot of one (node, pid, op) since `start_ns`: what causeway.op.calls,
/// causeway.op.duration and causeway.op.bytes carried. Fields not sent stay as they were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpSnapshot {
    /// Node name.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Catalogue op id.
    pub op_id: u16,
    /// start_time_unix_nano (ns): the snapshot's identity together with node, pid and op.
    pub start_ns: i64,
    /// time_unix_nano (ns).
    pub time_ns: i64,
    /// causeway.op.calls.
    pub calls: Option<u64>,
    /// causeway.op.duration sum (ns).
    pub total_ns: Option<u64>,
    /// causeway.op.bytes.
    pub bytes: Option<u64>,
    /// causeway.op.duration buckets, as causeway log2 buckets (index = log2 bucket).
    pub buckets: Option<Vec<u64>>,
}

/// A cumulative drop counter of one (node, kind) since `start_ns` (causeway.drops).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropSnapshot {
    /// Node name.
    pub node: String,
    /// Drop kind.
    pub kind: String,
    /// Counting since (ns).
    pub start_ns: i64,
    /// Point time (ns).
    pub time_ns: i64,
    /// Events lost.
    pub count: u64,
}

/// One causal chain (a `chains` row; `collect` stores it with origin `collected`).
pub use crate::rows::ChainRow;

/// Everything decoded from one or more OTLP requests, written together.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// Sending nodes.
    pub nodes: Vec<NodeRow>,
    /// Their processes.
    pub processes: Vec<ProcessRow>,
    /// Generic data points.
    pub points: Vec<MetricPoint>,
    /// Generic log records.
    pub logs: Vec<LogRow>,
    /// causeway op counter/histogram snapshots.
    pub ops: Vec<OpSnapshot>,
    /// causeway drop counters.
    pub drops: Vec<DropSnapshot>,
    /// causeway chains.
    pub chains: Vec<ChainRow>,
}

impl Received {
    /// Data points and log records this holds (each snapshot field counts as the point it came
    /// from): what a sender counted as sent.
    pub fn items(&self) -> u64 {
        let op_points: usize = self
            .ops
            .iter()
            .map(|o| {
                usize::from(o.calls.is_some())
                    + usize::from(o.buckets.is_some() || o.total_ns.is_some())
                    + usize::from(o.bytes.is_some())
            })
            .sum();
        (self.points.len() + self.logs.len() + op_points + self.drops.len() + self.chains.len())
            as u64
    }

    /// Appends another batch.
    pub fn extend(&mut self, other: Received) {
        self.nodes.extend(other.nodes);
        self.processes.extend(other.processes);
        self.points.extend(other.points);
        self.logs.extend(other.logs);
        self.ops.extend(other.ops);
        self.drops.extend(other.drops);
        self.chains.extend(other.chains);
    }
}
