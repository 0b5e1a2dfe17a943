//! Perfetto / Chrome trace-event JSON: a process track per node, a thread track per traced
//! thread, CUDA/driver/host calls as slices, off-CPU intervals drawn where they happened, and
//! causal chains as slices on a findings track joined to their evidence by flow events.
//! Output order is deterministic (same trace, same bytes).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use causeway_analysis::Chain;
use causeway_store::sanitize::sanitize_with;

use crate::duck;
use causeway_store::{QueryLimits, Reader, StoreError};
use serde_json::{Value, json};

use crate::ExportError;

/// What to put in the file.
#[derive(Debug, Clone)]
pub struct PerfettoOptions {
    /// Most trace events to export (the earliest are kept; the file says when it was cut).
    pub max_events: usize,
    /// Nodes whose sched_switch rows are stamped at switch-in (imported reference traces):
    /// their off-CPU interval is `[timestamp - duration, timestamp]`, else `[timestamp, +duration]`.
    pub switch_in_nodes: BTreeSet<String>,
    /// Causal chains to draw, ranked.
    pub chains: Vec<Chain>,
}

impl Default for PerfettoOptions {
    fn default() -> Self {
        PerfettoOptions {
            max_events: 1_000_000,
            switch_in_nodes: BTreeSet::new(),
            chains: Vec::new(),
        }
    }
}

/// What was exported.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PerfettoSummary {
    /// Trace events written as slices or instants.
    pub events: u64,
    /// Events left out by `max_events`.
    pub events_cut: u64,
    /// Process tracks (nodes).
    pub nodes: usize,
    /// Thread tracks.
    pub threads: usize,
    /// Chains drawn.
    pub chains: usize,
    /// Flow arrows from chains to evidence.
    pub flows: usize,
}

/// The timeline starts early enough for off-CPU spans read as `[timestamp - duration, ...]`
/// (op 100 is sched_switch).
const SPAN_SQL: &str = "SELECT count(*)::BIGINT,
  coalesce(min(timestamp - CASE WHEN op_id = 100 THEN duration ELSE 0 END), 0),
  coalesce(max(timestamp + duration), 0) FROM event_data";
const NODES_SQL: &str = "SELECT node, coalesce(clock_offset_ns, 0) FROM nodes WHERE node IN (SELECT DISTINCT node FROM event_data) ORDER BY node";
const NAMES_SQL: &str = "SELECT node, pid, comm FROM processes ORDER BY node, pid";
const THREADS_SQL: &str = "
WITH w AS (SELECT node, seq, pid, tid, comm FROM event_data ORDER BY timestamp, node, seq LIMIT ?)
SELECT node, tid, min(pid), arg_min(comm, seq) FROM w GROUP BY node, tid ORDER BY node, tid";
const EVENTS_SQL: &str = "
WITH w AS (
  SELECT node, seq, pid, tid, comm, op_id, timestamp, duration, arg0, arg1, ret_code
  FROM event_data ORDER BY timestamp, node, seq LIMIT ?)
SELECT w.node, w.pid, w.tid, w.comm, o.source, o.op, w.timestamp, w.duration, w.arg0, w.arg1, w.ret_code
FROM w JOIN ops o ON o.op_id = w.op_id
ORDER BY w.node, w.tid, w.timestamp, w.seq";

/// The op whose duration is off-CPU time.
const SWITCH: &str = "sched_switch";
/// Flow anchors drawn per chain.
const MAX_ANCHORS: usize = 8;

/// One row of the events query.
struct Row {
    node: String,
    pid: u32,
    tid: u32,
    source: String,
    op: String,
    ts: i64,
    dur: i64,
    arg0: i64,
    arg1: i64,
    ret: i32,
}

/// Microseconds (the format's unit) relative to the trace start, with ns precision.
fn us(ns: i64) -> Value {
    json!((ns as f64) / 1000.0)
}

struct Tracks {
    /// node -> (perfetto pid, clock offset ns)
    nodes: BTreeMap<String, (u32, i64)>,
    t0: i64,
}

impl Tracks {
    fn pid(&self, node: &str) -> u32 {
        self.nodes.get(node).map_or(0, |n| n.0)
    }

    /// A node's timestamp on the common timeline (clock offset from merge applied).
    fn at(&self, node: &str, ts: i64) -> i64 {
        ts - self.nodes.get(node).map_or(0, |n| n.1) - self.t0
    }
}

fn slice(row: &Row, tracks: &Tracks, switch_in: bool) -> Value {
    let pid = tracks.pid(&row.node);
    if row.op == SWITCH {
        let start = if switch_in { row.ts - row.dur } else { row.ts };
        let name = match row.arg1 {
            0 => "off-CPU: preempted",
            1 => "off-CPU: blocked",
            _ => "off-CPU",
        };
        return json!({"ph": "X", "cat": "sched", "name": name, "pid": pid, "tid": row.tid,
            "ts": us(tracks.at(&row.node, start)), "dur": us(row.dur.max(0)),
            "args": {"next_tid": row.arg0, "state": row.arg1}});
    }
    let args = json!({"pid": row.pid, "arg0": row.arg0, "arg1": row.arg1, "ret_code": row.ret});
    let ts = us(tracks.at(&row.node, row.ts));
    if row.dur <= 0 {
        json!({"ph": "i", "s": "t", "cat": row.source, "name": row.op, "pid": pid, "tid": row.tid, "ts": ts, "args": args})
    } else {
        json!({"ph": "X", "cat": row.source, "name": row.op, "pid": pid, "tid": row.tid, "ts": ts, "dur": us(row.dur), "args": args})
    }
}

const TID_AT_SQL: &str =
    "SELECT tid FROM event_data WHERE node = ? AND timestamp = ? ORDER BY seq LIMIT 1";

/// Evidence rows of a chain that name a moment: (node, tid, ts, end), earliest first. Rows
/// without a `tid` column are placed on the thread of the event recorded at that moment.
fn anchors(r: &Reader, c: &Chain, default_node: &str) -> Vec<(String, u32, i64, i64)> {
    let Ok(g) = causeway_sqlguard::guard(&c.evidence_sql, r.policy(), Some(200)) else {
        return Vec::new();
    };
    let Ok(res) = r.query(&g, &QueryLimits::default()) else {
        return Vec::new();
    };
    let col = |name: &str| res.columns.iter().position(|c| c.name == name);
    let Some(ts_i) = col("timestamp") else {
        return Vec::new();
    };
    let dur_i = col("duration").or_else(|| col("call_ns"));
    let (tid_i, node_i) = (col("tid"), col("node"));
    let mut out: Vec<(String, u32, i64, i64)> = res
        .rows
        .iter()
        .filter_map(|row| {
            let ts = row.get(ts_i)?.as_i64()?;
            let end = ts + dur_i.and_then(|i| row[i].as_i64()).unwrap_or(0).max(0);
            let tid = tid_i.and_then(|i| row[i].as_u64()).map(|t| t as u32);
            let node = node_i
                .and_then(|i| row[i].as_str().map(str::to_string))
                .unwrap_or_else(|| default_node.to_string());
            Some((node, tid.unwrap_or(0), ts, end))
        })
        .collect();
    out.sort_by_key(|a| (a.2, a.0.clone(), a.1));
    out.truncate(MAX_ANCHORS);
    if let Ok(mut stmt) = r.prepare_trusted(TID_AT_SQL) {
        for a in out.iter_mut().filter(|a| a.1 == 0) {
            if let Ok(tid) = stmt.query_row(causeway_store::duckdb::params![a.0, a.2], |row| {
                row.get::<_, u32>(0)
            }) {
                a.1 = tid;
            }
        }
    }
    out
}

/// Writes one element of the `traceEvents` array, through the sanitiser's final pass.
fn item(out: &mut impl Write, first: &mut bool, v: &Value) -> Result<(), ExportError> {
    let w = |e: std::io::Error| ExportError::Write(e.to_string());
    if !*first {
        out.write_all(b",\n").map_err(w)?;
    }
    *first = false;
    let cleaned;
    let v = if causeway_store::sanitize::json_is_clean(v) {
        v
    } else {
        let mut c = v.clone();
        causeway_store::sanitize::sanitize_json(&mut c);
        cleaned = c;
        &cleaned
    };
    serde_json::to_writer(&mut *out, v).map_err(|e| ExportError::Write(e.to_string()))
}

fn get<T: causeway_store::duckdb::types::FromSql>(
    r: &Reader,
    row: &causeway_store::duckdb::Row<'_>,
    i: usize,
) -> Result<T, StoreError> {
    row.get(i).map_err(duck(r, "reading events"))
}

/// Writes the trace as trace-event JSON to `out`, streaming the events (memory stays flat).
pub fn write_perfetto(
    r: &Reader,
    opts: &PerfettoOptions,
    out: &mut impl Write,
) -> Result<PerfettoSummary, ExportError> {
    let (total, first, last): (i64, i64, i64) = r
        .prepare_trusted(SPAN_SQL)?
        .query_row([], causeway_store::row)
        .map_err(duck(r, "reading the trace span"))?;
    let nodes: Vec<(String, i64)> = r
        .prepare_trusted(NODES_SQL)?
        .query_map([], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "listing nodes"))?;
    let tracks = Tracks {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, (n, off))| (n.clone(), (i as u32 + 1, *off)))
            .collect(),
        t0: first,
    };
    let names: BTreeMap<(String, u32), String> = r
        .prepare_trusted(NAMES_SQL)?
        .query_map([], |row| Ok(((row.get(0)?, row.get(1)?), row.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading process names"))?;
    let limit = opts.max_events as i64;
    let threads: Vec<(String, u32, u32, String)> = r
        .prepare_trusted(THREADS_SQL)?
        .query_map([limit], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "listing threads"))?;
    let exported = (total.max(0) as u64).min(opts.max_events as u64);
    let cut = (total.max(0) as u64) - exported;

    let w = |e: std::io::Error| ExportError::Write(e.to_string());
    let other = json!({
        "exported_by": concat!("causeway ", env!("CARGO_PKG_VERSION")),
        "trace": r.path().file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        "t0_ns_since_epoch": first,
        "events_in_trace": total,
        "events_cut": cut,
        "note": if cut > 0 { format!("only the first {exported} events are exported (--max-events)") } else { String::new() },
    });
    writeln!(
        out,
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{other},\"traceEvents\":["
    )
    .map_err(w)?;
    let mut first_item = true;
    for (node, (pid, off)) in &tracks.nodes {
        let label = if *off == 0 {
            format!("node {}", sanitize_with(node, 80))
        } else {
            format!(
                "node {} (clock offset {} ns applied)",
                sanitize_with(node, 80),
                off
            )
        };
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}),
        )?;
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}),
        )?;
    }
    for (node, tid, pid, comm) in &threads {
        let comm = if comm.is_empty() {
            names
                .get(&(node.clone(), *pid))
                .cloned()
                .unwrap_or_default()
        } else {
            comm.clone()
        };
        let name = format!("{} (pid {pid}, tid {tid})", sanitize_with(&comm, 32));
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "thread_name", "pid": tracks.pid(node), "tid": tid, "args": {"name": name}}),
        )?;
    }

    let mut stmt = r.prepare_trusted(EVENTS_SQL)?;
    let mut rows = stmt.query([limit]).map_err(duck(r, "reading events"))?;
    let mut written = 0u64;
    while let Some(row) = rows.next().map_err(duck(r, "reading events"))? {
        let e = Row {
            node: get(r, row, 0)?,
            pid: get(r, row, 1)?,
            tid: get(r, row, 2)?,
            source: get(r, row, 4)?,
            op: get(r, row, 5)?,
            ts: get(r, row, 6)?,
            dur: get(r, row, 7)?,
            arg0: get(r, row, 8)?,
            arg1: get(r, row, 9)?,
            ret: get(r, row, 10)?,
        };
        item(
            out,
            &mut first_item,
            &slice(&e, &tracks, opts.switch_in_nodes.contains(&e.node)),
        )?;
        written += 1;
    }
    drop(rows);
    drop(stmt);

    // Chains: one thread per chain on a findings process after the nodes, spanning their
    // evidence, with flow arrows to the evidence on the threads where it happened.
    let findings = tracks.nodes.len() as u32 + 1;
    let default_node = nodes.first().map(|n| n.0.clone()).unwrap_or_default();
    let mut flows = 0usize;
    if !opts.chains.is_empty() {
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "process_name", "pid": findings, "tid": 0, "args": {"name": "causeway chains"}}),
        )?;
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "process_sort_index", "pid": findings, "tid": 0, "args": {"sort_index": 0}}),
        )?;
    }
    for (i, c) in opts.chains.iter().enumerate() {
        let tid = i as u32 + 1;
        let node = if c.node.is_empty() {
            &default_node
        } else {
            &c.node
        };
        let marks = anchors(r, c, node);
        let (start, end) = match (
            marks.iter().map(|m| tracks.at(&m.0, m.2)).min(),
            marks.iter().map(|m| tracks.at(&m.0, m.3.max(m.2))).max(),
        ) {
            (Some(s), Some(e)) => (s, e),
            _ => (0, last - first),
        };
        item(
            out,
            &mut first_item,
            &json!({"ph": "M", "name": "thread_name", "pid": findings, "tid": tid,
            "args": {"name": format!("#{} {} [{}]", i + 1, sanitize_with(&c.detector, 40), c.severity.as_str())}}),
        )?;
        item(
            out,
            &mut first_item,
            &json!({"ph": "X", "cat": "chain", "name": sanitize_with(&c.summary, 200),
            "pid": findings, "tid": tid, "ts": us(start), "dur": us((end - start).max(1)),
            "args": {"id": sanitize_with(&c.id, 80), "severity": c.severity.as_str(),
                     "root_cause": sanitize_with(&c.root_cause, 600),
                     "time_lost_ns": c.time_lost_ns, "evidence_sql": sanitize_with(&c.evidence_sql, 2000)}}),
        )?;
        let mut linked: Vec<(i64, u32, u32)> = marks
            .iter()
            .filter(|m| m.1 != 0 && tracks.nodes.contains_key(&m.0))
            .take(MAX_ANCHORS)
            .map(|m| (tracks.at(&m.0, m.2), tracks.pid(&m.0), m.1))
            .collect();
        linked.sort();
        if linked.is_empty() {
            continue;
        }
        let id = i as u64 + 1;
        item(
            out,
            &mut first_item,
            &json!({"ph": "s", "cat": "chain", "name": "evidence", "id": id, "pid": findings, "tid": tid, "ts": us(start)}),
        )?;
        for (k, (ts, pid, t)) in linked.iter().enumerate() {
            let ph = if k + 1 == linked.len() { "f" } else { "t" };
            item(
                out,
                &mut first_item,
                &json!({"ph": ph, "bp": "e", "cat": "chain", "name": "evidence", "id": id,
                "pid": pid, "tid": t, "ts": us(*ts)}),
            )?;
        }
        flows += 1;
    }
    out.write_all(b"\n]}\n").map_err(w)?;
    Ok(PerfettoSummary {
        events: written,
        events_cut: cut,
        nodes: tracks.nodes.len(),
        threads: threads.len(),
        chains: opts.chains.len(),
        flows,
    })
}
