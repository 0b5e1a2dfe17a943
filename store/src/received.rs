//! The cluster store of `causeway collect`: writes what agents sent over OTLP (already decoded
//! into rows by causeway-ingest) in one transaction per batch: nodes and processes upserted,
//! cumulative op counters and histograms and drop counters replacing their previous snapshot,
//! chains upserted per (node, chain_id), everything else appended to `metric_points` and
//! `log_records`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use duckdb::arrow::array::{
    ArrayRef, Float64Array, Float64Builder, Int64Array, ListBuilder, StringArray, UInt32Array,
    UInt64Array, UInt64Builder,
};
use duckdb::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::{Connection, params};

use crate::error::{DuckContext, Result, StoreError};
use crate::writer::{Writer, WriterOptions};

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

/// One causal chain (a `chains` row, origin `collected`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainRow {
    /// Node name.
    pub node: String,
    /// causeway.chain.id.
    pub chain_id: String,
    /// Detector.
    pub detector: String,
    /// time_unix_nano.
    pub detected_ns: i64,
    /// HIGH, MEDIUM, LOW.
    pub severity: String,
    /// Body.
    pub summary: String,
    /// Root cause.
    pub root_cause: String,
    /// Explanation.
    pub explanation: String,
    /// JSON array of strings.
    pub recommendations: String,
    /// JSON timeline as stored by the sender.
    pub timeline: String,
    /// Evidence query.
    pub evidence_sql: String,
    /// Time lost (ns).
    pub time_lost_ns: i64,
    /// CUDA op.
    pub cuda_op: String,
    /// p50 (ns).
    pub p50_ns: i64,
    /// p99 (ns).
    pub p99_ns: i64,
    /// p99 / p50.
    pub tail_ratio: f64,
}

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

/// Snapshot state of one (node, pid, op, start) as last written.
#[derive(Debug, Clone, Default)]
struct OpState {
    time_ns: i64,
    calls: u64,
    total_ns: u64,
    bytes: u64,
    buckets: Vec<u64>,
}

type OpKey = (String, u32, u16, i64);

/// The cluster store: one writer connection, caches of what was written so that unchanged
/// nodes and processes are not rewritten and snapshots merge field by field.
pub struct CollectedStore {
    w: Writer,
    interned: Interned,
    nodes: HashMap<String, NodeRow>,
    processes: HashMap<(String, u32), ProcessRow>,
    ops: HashMap<OpKey, OpState>,
    drops: HashMap<(String, String, i64), i64>,
    stored_items: u64,
}

impl std::fmt::Debug for CollectedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectedStore")
            .field("path", &self.w.path())
            .field("stored_items", &self.stored_items)
            .finish()
    }
}

fn metric_rows_schema() -> SchemaRef {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    Arc::new(Schema::new(vec![
        Field::new("resource_id", DataType::UInt32, false),
        Field::new("metric_id", DataType::UInt32, false),
        Field::new("attributes", DataType::Utf8, false),
        Field::new("start_ns", DataType::Int64, false),
        Field::new("time_ns", DataType::Int64, false),
        Field::new("value", DataType::Float64, true),
        Field::new("count", DataType::UInt64, true),
        Field::new("sum", DataType::Float64, true),
        Field::new("min", DataType::Float64, true),
        Field::new("max", DataType::Float64, true),
        Field::new("bucket_counts", list(DataType::UInt64), true),
        Field::new("bounds", list(DataType::Float64), true),
        Field::new("bucket_values", list(DataType::Float64), true),
        Field::new("received_ns", DataType::Int64, false),
    ]))
}

/// The Arrow batch of `metric_rows` for `points`, whose interned ids are in `ids`.
fn points_batch(points: &[&MetricPoint], ids: &[(u32, u32)], received_ns: i64) -> Result<RecordBatch> {
    let mut counts = ListBuilder::new(UInt64Builder::new());
    let mut bounds = ListBuilder::new(Float64Builder::new());
    let mut values = ListBuilder::new(Float64Builder::new());
    for p in points {
        match &p.bucket_counts {
            Some(b) => {
                counts.values().append_slice(b);
                counts.append(true);
            }
            None => counts.append(false),
        }
        match &p.bounds {
            Some(b) => {
                bounds.values().append_slice(b);
                bounds.append(true);
            }
            None => bounds.append(false),
        }
        match &p.bucket_values {
            Some(b) => {
                values.values().append_slice(b);
                values.append(true);
            }
            None => values.append(false),
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(ids.iter().map(|i| i.0))),
        Arc::new(UInt32Array::from_iter_values(ids.iter().map(|i| i.1))),
        Arc::new(StringArray::from_iter_values(
            points.iter().map(|p| p.attributes.as_str()),
        )),
        Arc::new(Int64Array::from_iter_values(points.iter().map(|p| p.start_ns))),
        Arc::new(Int64Array::from_iter_values(points.iter().map(|p| p.time_ns))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.value))),
        Arc::new(UInt64Array::from_iter(points.iter().map(|p| p.count))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.sum))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.min))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.max))),
        Arc::new(counts.finish()),
        Arc::new(bounds.finish()),
        Arc::new(values.finish()),
        Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
            received_ns,
            points.len(),
        ))),
    ];
    RecordBatch::try_new(metric_rows_schema(), columns).map_err(|e| StoreError::Query {
        message: format!("building the metric_rows batch: {e}"),
        hint: "this is a bug in causeway; please report it".into(),
    })
}

/// What identifies a metric description in `otlp_metrics`.
type MetricKey = (Arc<str>, Arc<str>, Arc<str>, &'static str, Option<bool>, &'static str);

fn metric_key(p: &MetricPoint) -> MetricKey {
    (
        p.scope.clone(),
        p.metric.clone(),
        p.unit.clone(),
        p.kind,
        p.monotonic,
        p.temporality,
    )
}

fn static_kind(k: &str) -> &'static str {
    ["gauge", "sum", "histogram", "exponential_histogram", "summary", "delta", "cumulative"]
        .into_iter()
        .find(|x| *x == k)
        .unwrap_or("")
}

/// Interned resources and metric descriptions of the file.
#[derive(Debug, Default)]
struct Interned {
    resources: HashMap<(String, Arc<str>), u32>,
    metrics: HashMap<MetricKey, u32>,
}

impl Interned {
    fn load(conn: &Connection, path: &Path) -> Result<Interned> {
        let mut i = Interned::default();
        let mut st = conn
            .prepare("SELECT resource_id, node, attributes FROM otlp_resources")
            .ctx(path, "reading interned resources")?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
            .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
            .ctx(path, "reading interned resources")?;
        for (id, node, attrs) in rows {
            i.resources.insert((node, Arc::from(attrs)), id);
        }
        let mut st = conn
            .prepare("SELECT metric_id, scope, metric, unit, kind, monotonic, temporality FROM otlp_metrics")
            .ctx(path, "reading interned metrics")?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<bool>>(5)?,
                    r.get::<_, String>(6)?,
                ))
            })
            .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
            .ctx(path, "reading interned metrics")?;
        for (id, scope, metric, unit, kind, mono, temp) in rows {
            i.metrics.insert(
                (
                    Arc::from(scope),
                    Arc::from(metric),
                    Arc::from(unit),
                    static_kind(&kind),
                    mono,
                    static_kind(&temp),
                ),
                id,
            );
        }
        Ok(i)
    }

    /// Ids for every point; new resources and metrics are appended in the caller's transaction.
    fn ids(&mut self, conn: &Connection, path: &Path, points: &[&MetricPoint]) -> Result<Vec<(u32, u32)>> {
        let mut out = Vec::with_capacity(points.len());
        let mut new_res: Vec<(u32, String, Arc<str>)> = Vec::new();
        let mut new_met: Vec<(u32, MetricKey)> = Vec::new();
        let mut last: Option<(&MetricPoint, (u32, u32))> = None;
        for p in points {
            // Points of one metric come together: reuse the previous point's ids.
            if let Some((q, ids)) = last
                && Arc::ptr_eq(&q.resource, &p.resource)
                && q.node == p.node
                && Arc::ptr_eq(&q.metric, &p.metric)
                && Arc::ptr_eq(&q.scope, &p.scope)
                && Arc::ptr_eq(&q.unit, &p.unit)
                && q.kind == p.kind
                && q.monotonic == p.monotonic
                && q.temporality == p.temporality
            {
                out.push(ids);
                continue;
            }
            let rkey = (p.node.clone(), p.resource.clone());
            let next_r = self.resources.len() as u32 + 1;
            let rid = *self.resources.entry(rkey).or_insert_with(|| {
                new_res.push((next_r, p.node.clone(), p.resource.clone()));
                next_r
            });
            let mkey = metric_key(p);
            let next_m = self.metrics.len() as u32 + 1;
            let mid = *self.metrics.entry(mkey.clone()).or_insert_with(|| {
                new_met.push((next_m, mkey));
                next_m
            });
            out.push((rid, mid));
            last = Some((p, (rid, mid)));
        }
        if !new_res.is_empty() {
            let mut app = conn
                .appender("otlp_resources")
                .ctx(path, "opening the otlp_resources appender")?;
            for (id, node, attrs) in &new_res {
                app.append_row(params![id, node, &**attrs])
                    .ctx(path, "recording a resource")?;
            }
            app.flush().ctx(path, "flushing resources")?;
        }
        if !new_met.is_empty() {
            let mut app = conn
                .appender("otlp_metrics")
                .ctx(path, "opening the otlp_metrics appender")?;
            for (id, (scope, metric, unit, kind, mono, temp)) in &new_met {
                app.append_row(params![id, &**scope, &**metric, &**unit, kind, mono, temp])
                    .ctx(path, "recording a metric")?;
            }
            app.flush().ctx(path, "flushing metrics")?;
        }
        Ok(out)
    }
}

impl CollectedStore {
    /// Creates `path` (which must not exist) as a new cluster store.
    pub fn create(path: &Path, opts: WriterOptions) -> Result<CollectedStore> {
        Self::wrap(Writer::create_unregistered(path, opts)?)
    }

    /// Opens an existing store (upgrading its schema) to add received data to it.
    pub fn open(path: &Path, opts: WriterOptions) -> Result<CollectedStore> {
        Self::wrap(Writer::open_unregistered(path, opts)?)
    }

    fn wrap(w: Writer) -> Result<CollectedStore> {
        let interned = Interned::load(w.conn(), w.path())?;
        Ok(CollectedStore {
            w,
            interned,
            nodes: HashMap::new(),
            processes: HashMap::new(),
            ops: HashMap::new(),
            drops: HashMap::new(),
            stored_items: 0,
        })
    }

    /// A reader that sees the committed rows while this store is written (live serving).
    pub fn live_reader(&self) -> Result<crate::Reader> {
        self.w.live_reader()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.w.path()
    }

    /// Items (points, records, snapshot fields) committed so far.
    pub fn stored_items(&self) -> u64 {
        self.stored_items
    }

    /// Writes one batch in one transaction: all of it is committed, or none of it.
    pub fn store(&mut self, r: &Received) -> Result<()> {
        self.store_all(&[r])
    }

    /// Writes several batches in one transaction (a group commit).
    pub fn store_all(&mut self, batches: &[&Received]) -> Result<()> {
        let path = self.w.path().to_path_buf();
        let conn = self.w.conn();
        conn.execute_batch("BEGIN TRANSACTION")
            .ctx(&path, "starting a transaction")?;
        let (interned, nodes, processes, op_cache, drops) = (
            &mut self.interned,
            &mut self.nodes,
            &mut self.processes,
            &mut self.ops,
            &mut self.drops,
        );
        let result = (|| {
            for r in batches {
                write_nodes(conn, &path, nodes, &r.nodes)?;
                write_processes(conn, &path, processes, &r.processes)?;
            }
            let now = crate::now_ns();
            let points: Vec<&MetricPoint> = batches.iter().flat_map(|r| &r.points).collect();
            if !points.is_empty() {
                let ids = interned.ids(conn, &path, &points)?;
                let batch = points_batch(&points, &ids, now)?;
                let mut app = conn
                    .appender("metric_rows")
                    .ctx(&path, "opening the metric_rows appender")?;
                app.append_record_batch(batch)
                    .ctx(&path, "appending metric points")?;
                app.flush().ctx(&path, "flushing metric points")?;
            }
            if batches.iter().any(|r| !r.logs.is_empty()) {
                let mut app = conn
                    .appender("log_records")
                    .ctx(&path, "opening the log_records appender")?;
                for l in batches.iter().flat_map(|r| &r.logs) {
                    app.append_row(params![
                        l.node,
                        &*l.resource,
                        &*l.scope,
                        l.time_ns,
                        l.observed_ns,
                        l.severity_number,
                        l.severity_text,
                        l.event_name,
                        l.body,
                        l.attributes,
                        l.trace_id,
                        l.span_id,
                        now
                    ])
                    .ctx(&path, "appending a log record")?;
                }
                app.flush().ctx(&path, "flushing log records")?;
            }
            let ops: Vec<&OpSnapshot> = batches.iter().flat_map(|r| &r.ops).collect();
            write_ops(conn, &path, op_cache, &ops)?;
            for r in batches {
                write_drops(conn, &path, drops, &r.drops)?;
                write_chains(conn, &path, &r.chains)?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                if let Err(e) = conn.execute_batch("COMMIT").ctx(&path, "committing") {
                    self.forget();
                    return Err(e);
                }
                self.stored_items += batches.iter().map(|r| r.items()).sum::<u64>();
                Ok(())
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                // The caches may hold what was rolled back: start over from what is sent next.
                self.forget();
                Err(e)
            }
        }
    }

    fn forget(&mut self) {
        self.interned = Interned::load(self.w.conn(), self.w.path()).unwrap_or_default();
        self.nodes.clear();
        self.processes.clear();
        self.ops.clear();
        self.drops.clear();
    }

    /// Checkpoints and closes: the file is complete afterwards.
    pub fn finish(self) -> Result<()> {
        self.w.finish()
    }
}

fn write_nodes(
    conn: &Connection,
    path: &PathBuf,
    cache: &mut HashMap<String, NodeRow>,
    rows: &[NodeRow],
) -> Result<()> {
    for n in rows {
        if cache.get(&n.node) == Some(n) {
            continue;
        }
        conn.execute(
            "INSERT INTO nodes (node, node_id, hostname, cluster, origin)
             SELECT ?, coalesce(max(node_id) + 1, 1), ?, ?, 'collected' FROM nodes
             ON CONFLICT (node) DO UPDATE SET
               hostname = CASE WHEN excluded.hostname = '' THEN nodes.hostname ELSE excluded.hostname END,
               cluster = CASE WHEN excluded.cluster = '' THEN nodes.cluster ELSE excluded.cluster END",
            params![n.node, n.hostname, n.cluster],
        )
        .ctx(path, "recording a node")?;
        cache.insert(n.node.clone(), n.clone());
    }
    Ok(())
}

fn write_processes(
    conn: &Connection,
    path: &PathBuf,
    cache: &mut HashMap<(String, u32), ProcessRow>,
    rows: &[ProcessRow],
) -> Result<()> {
    for p in rows {
        let key = (p.node.clone(), p.pid);
        if let Some(old) = cache.get(&key)
            && old.comm == p.comm
            && old.rank == p.rank
            && old.local_rank == p.local_rank
            && old.world_size == p.world_size
            && old.cluster == p.cluster
            && old.first_seen_ns <= p.first_seen_ns
            && old.last_seen_ns >= p.last_seen_ns
        {
            continue;
        }
        conn.execute(
            "INSERT INTO processes (node, pid, comm, first_seen_ns, last_seen_ns, rank, local_rank, world_size, cluster)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (node, pid) DO UPDATE SET
               comm = CASE WHEN excluded.comm = '' THEN processes.comm ELSE excluded.comm END,
               first_seen_ns = least(processes.first_seen_ns, excluded.first_seen_ns),
               last_seen_ns = greatest(processes.last_seen_ns, excluded.last_seen_ns),
               rank = coalesce(excluded.rank, processes.rank),
               local_rank = coalesce(excluded.local_rank, processes.local_rank),
               world_size = coalesce(excluded.world_size, processes.world_size),
               cluster = CASE WHEN excluded.cluster = '' THEN processes.cluster ELSE excluded.cluster END",
            params![
                p.node,
                p.pid,
                p.comm,
                p.first_seen_ns,
                p.last_seen_ns,
                p.rank,
                p.local_rank,
                p.world_size,
                p.cluster
            ],
        )
        .ctx(path, "recording a process")?;
        let merged = match cache.get(&key) {
            Some(old) => ProcessRow {
                first_seen_ns: old.first_seen_ns.min(p.first_seen_ns),
                last_seen_ns: old.last_seen_ns.max(p.last_seen_ns),
                ..p.clone()
            },
            None => p.clone(),
        };
        cache.insert(key, merged);
    }
    Ok(())
}

/// Merges the new snapshots into the cache (a stale snapshot, older than the one stored, is
/// ignored), then replaces the stored rows of every touched key with the merged snapshot.
fn write_ops(
    conn: &Connection,
    path: &PathBuf,
    cache: &mut HashMap<OpKey, OpState>,
    rows: &[&OpSnapshot],
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut touched: Vec<OpKey> = Vec::new();
    let mut seen = HashSet::new();
    for s in rows {
        let key = (s.node.clone(), s.pid, s.op_id, s.start_ns);
        let st = cache.entry(key.clone()).or_default();
        if s.time_ns < st.time_ns {
            continue;
        }
        st.time_ns = s.time_ns;
        if let Some(c) = s.calls {
            st.calls = c;
        }
        if let Some(t) = s.total_ns {
            st.total_ns = t;
        }
        if let Some(b) = s.bytes {
            st.bytes = b;
        }
        if let Some(b) = &s.buckets {
            st.buckets = b.clone();
        }
        if seen.insert(key.clone()) {
            touched.push(key);
        }
    }
    if touched.is_empty() {
        return Ok(());
    }
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS _touched_ops (node VARCHAR, pid UINTEGER, op_id USMALLINT, start_ns BIGINT);
         DELETE FROM _touched_ops;",
    )
    .ctx(path, "staging snapshot keys")?;
    {
        let mut app = conn
            .appender("_touched_ops")
            .ctx(path, "opening the snapshot key appender")?;
        for (node, pid, op_id, start) in &touched {
            app.append_row(params![node, pid, op_id, start])
                .ctx(path, "staging a snapshot key")?;
        }
        app.flush().ctx(path, "staging snapshot keys")?;
    }
    for table in ["op_counts", "op_histograms"] {
        conn.execute_batch(&format!(
            "DELETE FROM {table} USING _touched_ops t
             WHERE {table}.node = t.node AND {table}.pid = t.pid AND {table}.op_id = t.op_id
               AND {table}.window_start_ns = t.start_ns"
        ))
        .ctx(path, "replacing the previous snapshot")?;
    }
    let mut counts = conn
        .appender("op_counts")
        .ctx(path, "opening the op_counts appender")?;
    let mut hist = conn
        .appender("op_histograms")
        .ctx(path, "opening the op_histograms appender")?;
    for key in &touched {
        let st = &cache[key];
        let (node, pid, op_id, start) = key;
        // stored = 0: a collected store holds no event rows; every call is counted only.
        counts
            .append_row(params![
                node,
                pid,
                op_id,
                start,
                st.time_ns,
                st.calls,
                0u64,
                st.total_ns,
                st.bytes
            ])
            .ctx(path, "recording op counts")?;
        for (b, c) in st.buckets.iter().enumerate() {
            if *c > 0 {
                hist.append_row(params![node, pid, op_id, start, st.time_ns, b as u8, c])
                    .ctx(path, "recording a histogram")?;
            }
        }
    }
    counts.flush().ctx(path, "flushing op counts")?;
    hist.flush().ctx(path, "flushing histograms")?;
    Ok(())
}

fn write_drops(
    conn: &Connection,
    path: &PathBuf,
    cache: &mut HashMap<(String, String, i64), i64>,
    rows: &[DropSnapshot],
) -> Result<()> {
    for d in rows {
        let key = (d.node.clone(), d.kind.clone(), d.start_ns);
        if cache.get(&key).is_some_and(|t| *t > d.time_ns) {
            continue;
        }
        let detail = format!("collected: cumulative since {}", d.start_ns);
        conn.execute(
            "DELETE FROM drops WHERE node = ? AND kind = ? AND detail = ?",
            params![d.node, d.kind, detail],
        )
        .ctx(path, "replacing a drop counter")?;
        conn.execute(
            "INSERT INTO drops VALUES (?, ?, ?, NULL, ?, ?)",
            params![d.node, d.time_ns, d.kind, d.count, detail],
        )
        .ctx(path, "recording a drop counter")?;
        cache.insert(key, d.time_ns);
    }
    Ok(())
}

fn write_chains(conn: &Connection, path: &PathBuf, rows: &[ChainRow]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut st = conn
        .prepare(
            "INSERT OR REPLACE INTO chains VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'collected')",
        )
        .ctx(path, "preparing the chain upsert")?;
    for c in rows {
        st.execute(params![
            c.chain_id,
            c.node,
            c.detector,
            c.detected_ns,
            c.severity,
            c.summary,
            c.root_cause,
            c.explanation,
            c.recommendations,
            c.timeline,
            c.evidence_sql,
            c.time_lost_ns,
            c.cuda_op,
            c.p50_ns,
            c.p99_ns,
            c.tail_ratio
        ])
        .ctx(path, "recording a chain")?;
    }
    Ok(())
}
