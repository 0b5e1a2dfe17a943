//! OTLP export of a trace (docs/otlp.md): an `ExportMetricsServiceRequest` with real log2
//! histograms of op latencies, call/byte/off-CPU/drop counters, and an
//! `ExportLogsServiceRequest` with one log record per causal chain, each under resources that
//! name the node, cluster, process and rank. Built from [`crate::gather`] (the data Prometheus
//! reads too) and the `chains` table; sending them is the binary's job.

use std::collections::BTreeMap;

use causeway_analysis::ChainQuery;
use causeway_store::sanitize::sanitize_with;
use causeway_store::{Reader, StoreError};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::duck;
use crate::gather::{Facts, LOG2_BUCKETS, NodeFacts, OpFacts, SCHED_SWITCH, gather};

/// Instrumentation scope name of everything causeway exports.
pub const SCOPE_NAME: &str = "causeway";
/// Histogram of op durations (ns), attributes {op, source}.
pub const OP_DURATION: &str = "causeway.op.duration";
/// Calls (kernel-counted where recorded), attributes {op, source}.
pub const OP_CALLS: &str = "causeway.op.calls";
/// Bytes moved or allocated, attributes {op, source}.
pub const OP_BYTES: &str = "causeway.op.bytes";
/// Off-CPU time of a process (ns), attributes {state}.
pub const OFFCPU_TIME: &str = "causeway.offcpu.time";
/// Events lost on a node, attributes {kind}.
pub const DROPS: &str = "causeway.drops";
/// `event_name` of a causal chain's log record.
pub const CHAIN_EVENT: &str = "causeway.chain";

/// Longest process name exported (names come from the traced machine: sanitised).
const MAX_NAME_CHARS: usize = 256;

/// The histogram bounds: 2^(k+1) ns for k in 0..40 (2 ns .. 2^40 ns), so that bucket k holds
/// 2^k <= d < 2^(k+1) like causeway's log2 buckets, and the last one everything >= 2^40 ns.
pub fn explicit_bounds() -> Vec<f64> {
    (1..LOG2_BUCKETS as i32).map(|k| 2f64.powi(k)).collect()
}

fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

fn s(key: &str, v: &str) -> KeyValue {
    kv(key, Value::StringValue(v.to_string()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, Value::IntValue(v))
}

/// Builds resources: one per node and one per (node, pid), keys omitted when unknown or empty.
struct Resources<'a> {
    nodes: BTreeMap<&'a str, &'a NodeFacts>,
    facts: &'a Facts,
}

impl<'a> Resources<'a> {
    fn new(facts: &'a Facts) -> Self {
        Resources {
            nodes: facts.nodes.iter().map(|n| (n.node.as_str(), n)).collect(),
            facts,
        }
    }

    fn node_attrs(&self, node: &str, process_cluster: &str) -> Vec<KeyValue> {
        let mut a = vec![s("service.name", SCOPE_NAME)];
        if node.is_empty() {
            return a;
        }
        let n = self.nodes.get(node);
        let host = n.map(|n| n.hostname.as_str()).filter(|h| !h.is_empty());
        a.push(s("host.name", host.unwrap_or(node)));
        a.push(s("causeway.node", node));
        let cluster = n
            .map(|n| n.cluster.as_str())
            .filter(|c| !c.is_empty())
            .unwrap_or(process_cluster);
        if !cluster.is_empty() {
            a.push(s("causeway.cluster", cluster));
        }
        a
    }

    fn node(&self, node: &str) -> Resource {
        Resource {
            attributes: self.node_attrs(node, ""),
            ..Resource::default()
        }
    }

    fn process(&self, node: &str, pid: u32) -> Resource {
        let p = self.facts.processes.get(&(node.to_string(), pid));
        let mut a = self.node_attrs(node, p.map_or("", |p| p.cluster.as_str()));
        a.push(i("process.pid", i64::from(pid)));
        if let Some(p) = p {
            let comm = sanitize_with(&p.comm, MAX_NAME_CHARS);
            if !comm.is_empty() {
                a.push(s("process.executable.name", &comm));
            }
            for (k, v) in [
                ("causeway.rank", p.rank),
                ("causeway.local_rank", p.local_rank),
                ("causeway.world_size", p.world_size),
            ] {
                if let Some(v) = v {
                    a.push(i(k, i64::from(v)));
                }
            }
        }
        Resource {
            attributes: a,
            ..Resource::default()
        }
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..InstrumentationScope::default()
    }
}

/// Data points of one resource, by metric.
#[derive(Default)]
struct Points {
    durations: Vec<HistogramDataPoint>,
    calls: Vec<NumberDataPoint>,
    bytes: Vec<NumberDataPoint>,
    off_cpu: Vec<NumberDataPoint>,
    drops: Vec<NumberDataPoint>,
}

fn sum_metric(name: &str, unit: &str, description: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        description: description.into(),
        unit: unit.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

impl Points {
    fn into_metrics(self) -> Vec<Metric> {
        let mut m = Vec::new();
        if !self.durations.is_empty() {
            m.push(Metric {
                name: OP_DURATION.into(),
                description: "Duration of calls: the kernel's log2 histogram of every call where \
                              recorded, else the stored events"
                    .into(),
                unit: "ns".into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: self.durations,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Metric::default()
            });
        }
        for (name, unit, description, points) in [
            (
                OP_CALLS,
                "{call}",
                "Calls, counted in the kernel where recorded (also those not stored), else stored",
                self.calls,
            ),
            (
                OP_BYTES,
                "By",
                "Bytes moved or allocated by the calls",
                self.bytes,
            ),
            (
                OFFCPU_TIME,
                "ns",
                "Time the process's threads spent off the CPU, by state at switch-out",
                self.off_cpu,
            ),
            (DROPS, "{event}", "Events lost, by kind", self.drops),
        ] {
            if !points.is_empty() {
                m.push(sum_metric(name, unit, description, points));
            }
        }
        m
    }
}

/// The histogram data point of one op, from the kernel's histogram when there is one, else
/// from the stored events; None when neither timed a call.
fn duration_point(o: &OpFacts, attrs: &[KeyValue], span: (u64, u64)) -> Option<HistogramDataPoint> {
    let (buckets, sum, min_max) = match (&o.kernel_hist, &o.stored) {
        (Some(h), stored) => {
            let sum = match (&o.kernel, stored) {
                (Some(k), _) => k.total_ns as f64,
                (None, Some(st)) => st.sum_ns as f64,
                (None, None) => 0.0,
            };
            (h, sum, None)
        }
        (None, Some(st)) => (
            &st.log2,
            st.sum_ns as f64,
            Some((st.min_ns as f64, st.max_ns as f64)),
        ),
        (None, None) => return None,
    };
    let count: u64 = buckets.iter().sum();
    if count == 0 {
        return None;
    }
    Some(HistogramDataPoint {
        attributes: attrs.to_vec(),
        start_time_unix_nano: span.0,
        time_unix_nano: span.1,
        count,
        sum: Some(sum),
        bucket_counts: buckets.to_vec(),
        explicit_bounds: explicit_bounds(),
        min: min_max.map(|m| m.0),
        max: min_max.map(|m| m.1),
        ..HistogramDataPoint::default()
    })
}

fn int_point(attrs: Vec<KeyValue>, span: (u64, u64), v: i64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: span.0,
        time_unix_nano: span.1,
        value: Some(number_data_point::Value::AsInt(v)),
        ..NumberDataPoint::default()
    }
}

fn ns(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The metrics of the trace `r` reads (a finished file or a live recording), cumulative over
/// the whole trace.
pub fn metrics_request(r: &Reader) -> Result<ExportMetricsServiceRequest, StoreError> {
    Ok(metrics_from(&gather(r)?, causeway_store::now_ns()))
}

/// The metrics of already gathered facts; `now_ns` stands in for the times of an empty trace.
pub fn metrics_from(f: &Facts, now_ns: i64) -> ExportMetricsServiceRequest {
    let (start, end) = f.span.unwrap_or((now_ns, now_ns));
    let span = (ns(start), ns(end.max(start)));
    let mut procs: BTreeMap<(&str, u32), Points> = BTreeMap::new();
    let mut nodes: BTreeMap<&str, Points> = BTreeMap::new();
    for (k, o) in &f.ops {
        if k.op == SCHED_SWITCH {
            continue;
        }
        let attrs = vec![s("op", &k.op), s("source", &k.source)];
        let p = procs.entry((k.node.as_str(), k.pid)).or_default();
        if let Some(dp) = duration_point(o, &attrs, span) {
            p.durations.push(dp);
        }
        let calls = match (&o.kernel, &o.stored) {
            (Some(c), _) => clamp(c.calls),
            (None, Some(st)) => clamp(st.count),
            (None, None) => 0,
        };
        p.calls.push(int_point(attrs.clone(), span, calls));
        let bytes = match (&o.kernel, &o.stored) {
            (Some(c), _) if c.bytes > 0 => clamp(c.bytes),
            (_, Some(st)) => st.bytes,
            _ => 0,
        };
        if bytes > 0 {
            p.bytes.push(int_point(attrs, span, bytes));
        }
    }
    for x in &f.off_cpu {
        procs
            .entry((x.node.as_str(), x.pid))
            .or_default()
            .off_cpu
            .push(int_point(vec![s("state", &x.state)], span, x.ns));
    }
    for d in &f.drops {
        nodes
            .entry(d.node.as_str())
            .or_default()
            .drops
            .push(int_point(vec![s("kind", &d.kind)], span, d.count));
    }
    let res = Resources::new(f);
    let mut out = Vec::new();
    let mut push = |resource: Resource, points: Points| {
        let metrics = points.into_metrics();
        if !metrics.is_empty() {
            out.push(ResourceMetrics {
                resource: Some(resource),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope()),
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            });
        }
    };
    for ((node, pid), points) in procs {
        push(res.process(node, pid), points);
    }
    for (node, points) in nodes {
        push(res.node(node), points);
    }
    ExportMetricsServiceRequest {
        resource_metrics: out,
    }
}

/// What the logs export reads besides the trace.
#[derive(Debug, Clone, Copy)]
pub struct LogsOptions {
    /// `observed_time_unix_nano` of every record: the export time.
    pub observed_ns: i64,
    /// When the `chains` table is empty (a recording, a demo), run the analysis engine and
    /// export its chains; off, such a trace exports no records.
    pub engine_when_none: bool,
}

impl Default for LogsOptions {
    fn default() -> Self {
        LogsOptions {
            observed_ns: causeway_store::now_ns(),
            engine_when_none: true,
        }
    }
}

/// One chain as exported: the `chains` table's columns (unknown ones None for engine chains).
#[derive(Debug, Clone, Default)]
struct ChainRow {
    id: String,
    node: String,
    detector: String,
    detected_ns: i64,
    severity: String,
    summary: String,
    root_cause: String,
    explanation: String,
    recommendations: Vec<String>,
    timeline: String,
    evidence_sql: String,
    time_lost_ns: i64,
    cuda_op: Option<String>,
    p50_ns: Option<i64>,
    p99_ns: Option<i64>,
    tail_ratio: Option<f64>,
}

const CHAINS_SQL: &str = "SELECT chain_id, node, detector, detected_ns, severity, summary,
    root_cause, explanation, recommendations, timeline, evidence_sql, time_lost_ns, cuda_op,
    p50_ns, p99_ns, tail_ratio
  FROM chains ORDER BY node, time_lost_ns DESC, chain_id";

/// A stored JSON array of strings; text that is not one is kept as a single entry.
fn recommendations(raw: &str) -> Vec<String> {
    serde_json::from_str(raw).unwrap_or_else(|_| {
        if raw.trim().is_empty() {
            Vec::new()
        } else {
            vec![raw.to_string()]
        }
    })
}

fn stored_chains(r: &Reader) -> Result<Vec<ChainRow>, StoreError> {
    r.prepare_trusted(CHAINS_SQL)?
        .query_map([], |row| {
            Ok(ChainRow {
                id: row.get(0)?,
                node: row.get(1)?,
                detector: row.get(2)?,
                detected_ns: row.get(3)?,
                severity: row.get(4)?,
                summary: row.get(5)?,
                root_cause: row.get(6)?,
                explanation: row.get(7)?,
                recommendations: recommendations(&row.get::<_, String>(8)?),
                timeline: row.get(9)?,
                evidence_sql: row.get(10)?,
                time_lost_ns: row.get(11)?,
                cuda_op: Some(row.get(12)?),
                p50_ns: Some(row.get(13)?),
                p99_ns: Some(row.get(14)?),
                tail_ratio: Some(row.get(15)?),
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the chains"))
}

/// The analysis engine's chains, stamped with the end of the trace.
fn engine_chains(r: &Reader, detected_ns: i64) -> Result<Vec<ChainRow>, StoreError> {
    let found = causeway_analysis::explain(r, &ChainQuery::default())?;
    Ok(found
        .chains
        .into_iter()
        .map(|c| ChainRow {
            timeline: serde_json::to_string(&c.timeline).unwrap_or_else(|_| "[]".into()),
            id: c.id,
            node: c.node,
            detector: c.detector,
            detected_ns,
            severity: c.severity.as_str().into(),
            summary: c.summary,
            root_cause: c.root_cause,
            explanation: c.explanation,
            recommendations: c.recommendations,
            evidence_sql: c.evidence_sql,
            time_lost_ns: c.time_lost_ns,
            ..ChainRow::default()
        })
        .collect())
}

/// (severity_number, severity_text) of a stored severity: HIGH ERROR, MEDIUM WARN, LOW INFO.
pub fn severity(stored: &str) -> (SeverityNumber, &'static str) {
    match causeway_analysis::Severity::parse(stored) {
        causeway_analysis::Severity::High => (SeverityNumber::Error, "HIGH"),
        causeway_analysis::Severity::Medium => (SeverityNumber::Warn, "MEDIUM"),
        causeway_analysis::Severity::Low => (SeverityNumber::Info, "LOW"),
    }
}

fn record(c: ChainRow, observed_ns: i64) -> LogRecord {
    let (number, text) = severity(&c.severity);
    let p = |k: &str| format!("causeway.chain.{k}");
    let mut a = vec![
        s(&p("id"), &c.id),
        s(&p("detector"), &c.detector),
        s(&p("root_cause"), &c.root_cause),
        s(&p("explanation"), &c.explanation),
        i(&p("time_lost_ns"), c.time_lost_ns),
    ];
    if let Some(op) = &c.cuda_op {
        a.push(s(&p("cuda_op"), op));
    }
    if let Some(v) = c.p50_ns {
        a.push(i(&p("p50_ns"), v));
    }
    if let Some(v) = c.p99_ns {
        a.push(i(&p("p99_ns"), v));
    }
    if let Some(v) = c.tail_ratio {
        a.push(kv(&p("tail_ratio"), Value::DoubleValue(v)));
    }
    a.push(kv(
        &p("recommendations"),
        Value::ArrayValue(ArrayValue {
            values: c
                .recommendations
                .into_iter()
                .map(|r| AnyValue {
                    value: Some(Value::StringValue(r)),
                })
                .collect(),
        }),
    ));
    a.push(s(&p("timeline"), &c.timeline));
    a.push(s(&p("evidence_sql"), &c.evidence_sql));
    LogRecord {
        time_unix_nano: ns(c.detected_ns),
        observed_time_unix_nano: ns(observed_ns),
        severity_number: number as i32,
        severity_text: text.into(),
        body: Some(AnyValue {
            value: Some(Value::StringValue(c.summary)),
        }),
        attributes: a,
        event_name: CHAIN_EVENT.into(),
        ..LogRecord::default()
    }
}

/// The causal chains of the trace as log records, one resource per node (chains about the
/// whole trace, with no node, under a resource without node attributes).
pub fn logs_request(
    r: &Reader,
    opts: &LogsOptions,
) -> Result<ExportLogsServiceRequest, StoreError> {
    let mut chains = stored_chains(r)?;
    let facts_nodes = crate::gather::nodes_and_span(r)?;
    if chains.is_empty() && opts.engine_when_none {
        let end = facts_nodes.span.map_or(opts.observed_ns, |s| s.1);
        chains = engine_chains(r, end)?;
    }
    let res = Resources::new(&facts_nodes);
    let mut by_node: BTreeMap<String, Vec<LogRecord>> = BTreeMap::new();
    for c in chains {
        by_node
            .entry(c.node.clone())
            .or_default()
            .push(record(c, opts.observed_ns));
    }
    Ok(ExportLogsServiceRequest {
        resource_logs: by_node
            .into_iter()
            .map(|(node, records)| ResourceLogs {
                resource: Some(res.node(&node)),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope()),
                    log_records: records,
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            })
            .collect(),
    })
}
