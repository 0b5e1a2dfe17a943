//! Perfetto / Chrome trace-event JSON: a process track per node, a thread track per traced
//! thread, CUDA/driver/host calls as slices, off-CPU intervals drawn where they happened, and
//! causal chains as slices on a findings track joined to their evidence by flow events.
//! Slices on one track are disjoint or properly nested: a slice that overlaps another partially
//! (an async call outliving its caller, an off-CPU span read back from its switch-in stamp) goes
//! to an extra "overlap" track of the same process, and flows follow it there.
//! Output order is deterministic (same trace, same bytes).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use causeway_analysis::Chain;
use causeway_store::sanitize::sanitize_with;

use crate::duck;
use causeway_store::{QueryLimits, Reader, StoreError};
use serde_json::{Value, json};

use crate::ExportError;

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);

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
    /// Extra thread tracks holding slices that overlapped another partially on their thread.
    pub overlap_tracks: usize,
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
/// Each thread's rows in drawing order (start, longer first): the second parameter lists the
/// switch-in nodes as `\x1fnode\x1f...`, whose off-CPU spans start at `timestamp - duration`.
/// Lane assignment needs this order, so the drawn start is computed here and nowhere else.
const EVENTS_SQL: &str = "
WITH w AS (
  SELECT node, seq, pid, tid, comm, op_id, timestamp, duration, arg0, arg1, ret_code, stack_hash
  FROM event_data ORDER BY timestamp, node, seq LIMIT ?),
d AS (
  SELECT w.*, CASE WHEN op_id = 100 AND contains(?, chr(31) || node || chr(31))
    THEN timestamp - duration ELSE timestamp END AS start
  FROM w)
SELECT d.node, d.pid, d.tid, d.comm, o.source, o.op, d.start, d.duration, d.arg0, d.arg1, d.ret_code,
  d.stack_hash
FROM d JOIN ops o ON o.op_id = d.op_id
ORDER BY d.node, d.tid, d.start, d.duration DESC, d.seq";

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
    /// Where the event is drawn from (node clock, ns).
    start: i64,
    dur: i64,
    arg0: i64,
    arg1: i64,
    ret: i32,
    /// events.stack_hash (0: none).
    stack: i64,
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

fn get<T: causeway_store::duckdb::types::FromSql>(
    r: &Reader,
    row: &causeway_store::duckdb::Row<'_>,
    i: usize,
) -> Result<T, StoreError> {
    row.get(i).map_err(duck(r, "reading events"))
}

impl Row {
    /// One row of [`EVENTS_SQL`], in its column order.
    fn read(r: &Reader, row: &causeway_store::duckdb::Row<'_>) -> Result<Self, StoreError> {
        Ok(Row {
            node: get(r, row, 0)?,
            pid: get(r, row, 1)?,
            tid: get(r, row, 2)?,
            source: get(r, row, 4)?,
            op: get(r, row, 5)?,
            start: get(r, row, 6)?,
            dur: get(r, row, 7)?,
            arg0: get(r, row, 8)?,
            arg1: get(r, row, 9)?,
            ret: get(r, row, 10)?,
            stack: get(r, row, 11)?,
        })
    }

    /// The drawn interval `[start, end)` when the row is a slice, `None` for an instant.
    fn span(&self) -> Option<(i64, i64)> {
        if self.op == SWITCH {
            Some((self.start, self.start + self.dur.max(0)))
        } else {
            (self.dur > 0).then_some((self.start, self.start + self.dur))
        }
    }
}

/// One event as a slice (or instant); a call with a stack carries its frames as args.
fn slice(
    row: &Row,
    tracks: &Tracks,
    tid: u32,
    stacks: &BTreeMap<i64, serde_json::Map<String, Value>>,
) -> Value {
    let pid = tracks.pid(&row.node);
    if row.op == SWITCH {
        let name = match row.arg1 {
            0 => "off-CPU: preempted",
            1 => "off-CPU: blocked",
            _ => "off-CPU",
        };
        return json!({"ph": "X", "cat": "sched", "name": name, "pid": pid, "tid": tid,
            "ts": us(tracks.at(&row.node, row.start)), "dur": us(row.dur.max(0)),
            "args": {"next_tid": row.arg0, "state": row.arg1}});
    }
    let mut args = json!({"pid": row.pid, "arg0": row.arg0, "arg1": row.arg1, "ret_code": row.ret});
    if let (Some(frames), Some(a)) = (stacks.get(&row.stack), args.as_object_mut()) {
        a.extend(frames.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let ts = us(tracks.at(&row.node, row.start));
    if row.dur <= 0 {
        json!({"ph": "i", "s": "t", "cat": row.source, "name": row.op, "pid": pid, "tid": tid, "ts": ts, "args": args})
    } else {
        json!({"ph": "X", "cat": row.source, "name": row.op, "pid": pid, "tid": tid, "ts": ts, "dur": us(row.dur), "args": args})
    }
}

/// Synthetic tids of overlap tracks step by this from the thread's own tid (above Linux's
/// largest pid_max, 2^22, so `tid + k * STEP` stays readable and rarely collides).
const LANE_TID_STEP: u64 = 10_000_000;

/// The tracks of the thread being streamed: lane 0 is the thread itself, lane k > 0 an overlap
/// track. Slices arrive by start (longer first) and each goes to the first lane where it nests
/// in the innermost open slice or starts after it ends, so every lane is well nested.
#[derive(Default)]
struct Lanes {
    /// Ends of the open slices of each lane, outermost first.
    open: Vec<Vec<i64>>,
    /// Output tid of each lane.
    tids: Vec<u32>,
    /// Anchors of chain flows on this thread: (ts, output tid of the deepest slice holding it).
    anchors: Vec<(i64, Option<u32>)>,
}

impl Lanes {
    /// The lanes of a thread about to stream: its own track alone, and its anchors unbound.
    fn of_thread(node: &str, tid: u32, bound: &Bindings) -> Self {
        let key = (node.to_string(), tid);
        Lanes {
            open: vec![Vec::new()],
            tids: vec![tid],
            anchors: bound
                .range((key.0.clone(), key.1, i64::MIN)..=(key.0.clone(), key.1, i64::MAX))
                .map(|(k, _)| (k.2, None))
                .collect(),
        }
    }

    /// The lane of the slice `[start, end)`; a new lane when it fits none (its index is
    /// `open.len() - 1` then, and the caller names it).
    fn place(&mut self, start: i64, end: i64) -> usize {
        for (k, stack) in self.open.iter_mut().enumerate() {
            // Perfetto closes a slice at its end, so a slice starting there is a sibling.
            while stack.last().is_some_and(|&e| e <= start) {
                stack.pop();
            }
            if stack.last().is_none_or(|&e| end <= e) {
                stack.push(end);
                return k;
            }
        }
        self.open.push(vec![end]);
        self.open.len() - 1
    }

    /// Flow steps bind to the enclosing slice (`bp: e`), the deepest one open at their ts:
    /// slices come by start, so the last one holding an anchor is that slice.
    fn bind(&mut self, start: i64, end: i64, tid: u32) {
        let from = self.anchors.partition_point(|a| a.0 < start);
        for a in self.anchors[from..].iter_mut().take_while(|a| a.0 < end) {
            a.1 = Some(tid);
        }
    }
}

/// A tid for overlap lane `k` of `tid`, unused by the node's threads and earlier lanes.
fn lane_tid(tid: u32, k: usize, used: &mut BTreeSet<u32>) -> u32 {
    let mut c = u64::from(tid) + k as u64 * LANE_TID_STEP;
    while c <= i32::MAX as u64 && used.contains(&(c as u32)) {
        c += LANE_TID_STEP;
    }
    if c > i32::MAX as u64 {
        // Trace-event readers take tids as 32-bit ints: count down from the top instead.
        c = i32::MAX as u64;
        while used.contains(&(c as u32)) {
            c -= 1;
        }
    }
    used.insert(c as u32);
    c as u32
}

/// The timestamp of the first event `--max-events` leaves out (the parameter is the cap).
const CUTOFF_SQL: &str =
    "SELECT timestamp FROM event_data ORDER BY timestamp, node, seq LIMIT 1 OFFSET ?";

const TID_AT_SQL: &str =
    "SELECT tid FROM event_data WHERE node = ? AND timestamp = ? ORDER BY seq LIMIT 1";

/// Evidence rows of one chain as [`anchors`] reads them: (node, tid, ts, end).
type Anchor = (String, u32, i64, i64);

/// (node, tid, ts) of every anchor -> the output tid of the slice it binds to, if written.
type Bindings = BTreeMap<(String, u32, i64), Option<u32>>;

/// Evidence rows of a chain that name a moment: (node, tid, ts, end), earliest first. Rows
/// without a `tid` column are placed on the thread of the event recorded at that moment.
fn anchors(r: &Reader, c: &Chain, default_node: &str) -> Vec<Anchor> {
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
    let mut out: Vec<Anchor> = res
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

/// A failed write to `out`.
fn io(e: std::io::Error) -> ExportError {
    ExportError::Write(e.to_string())
}

/// What the file is laid out from, read before anything is written.
struct Plan {
    /// Events in the trace, all of them.
    total: i64,
    /// The trace's first and last moments (node clock, ns).
    first: i64,
    last: i64,
    tracks: Tracks,
    /// The first node by the store's order: evidence rows without a node happened there.
    default_node: String,
    /// (node, pid) -> the process's name, for threads whose rows carry none.
    names: BTreeMap<(String, u32), String>,
    /// (node, tid, pid, comm) of every thread among the exported events.
    threads: Vec<(String, u32, u32, String)>,
    /// `max_events` as the queries' LIMIT.
    limit: i64,
    exported: u64,
    cut: u64,
    /// The timestamp of the first event left out (`i64::MAX` when none is).
    cutoff: i64,
}

impl Plan {
    fn read(r: &Reader, opts: &PerfettoOptions) -> Result<Self, ExportError> {
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
        // Evidence from this moment on was cut: an arrow there would land on whatever earlier
        // slice still spans it instead of on the evidence.
        let cutoff = if cut > 0 {
            r.prepare_trusted(CUTOFF_SQL)?
                .query_row([limit], |row| row.get::<_, i64>(0))
                .map_err(duck(r, "finding where --max-events cuts"))?
        } else {
            i64::MAX
        };
        Ok(Plan {
            total,
            first,
            last,
            tracks,
            default_node: nodes.first().map(|n| n.0.clone()).unwrap_or_default(),
            names,
            threads,
            limit,
            exported,
            cut,
            cutoff,
        })
    }
}

/// The thread tracks named so far: overlap tracks extend a thread's name and take tids unused
/// on its process track.
#[derive(Default)]
struct ThreadTracks {
    names: BTreeMap<(String, u32), String>,
    /// perfetto pid -> tids taken on that process track.
    used_tids: BTreeMap<u32, BTreeSet<u32>>,
}

/// What streaming the events wrote.
struct Streamed {
    events: u64,
    overlap_tracks: usize,
}

/// The file being written: the `traceEvents` array separates its elements with commas, so it
/// knows whether one was written yet.
struct TraceFile<'w, W: Write> {
    out: &'w mut W,
    first_item: bool,
}

impl<'w, W: Write> TraceFile<'w, W> {
    /// Opens the document: the trace's provenance (and where `max_events` cut it) in
    /// `otherData`, then the array the rest goes into.
    fn start(out: &'w mut W, r: &Reader, plan: &Plan) -> Result<Self, ExportError> {
        let cut = plan.cut;
        let exported = plan.exported;
        let other = json!({
            "exported_by": concat!("causeway ", env!("CARGO_PKG_VERSION")),
            "trace": r.path().file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
            "t0_ns_since_epoch": plan.first,
            "events_in_trace": plan.total,
            "events_cut": cut,
            "note": if cut > 0 { format!("only the first {exported} events are exported (--max-events)") } else { String::new() },
        });
        writeln!(
            out,
            "{{\"displayTimeUnit\":\"ns\",\"otherData\":{other},\"traceEvents\":["
        )
        .map_err(io)?;
        Ok(TraceFile {
            out,
            first_item: true,
        })
    }

    /// Writes one element of the `traceEvents` array, through the sanitiser's final pass.
    fn item(&mut self, v: &Value) -> Result<(), ExportError> {
        if !self.first_item {
            self.out.write_all(b",\n").map_err(io)?;
        }
        self.first_item = false;
        let cleaned;
        let v = if causeway_store::sanitize::json_is_clean(v) {
            v
        } else {
            let mut c = v.clone();
            causeway_store::sanitize::sanitize_json(&mut c);
            cleaned = c;
            &cleaned
        };
        serde_json::to_writer(&mut *self.out, v).map_err(|e| ExportError::Write(e.to_string()))
    }

    /// A process track per node, labelled with the clock offset merge applied to it.
    fn process_tracks(&mut self, tracks: &Tracks) -> Result<(), ExportError> {
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
            self.item(
                &json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}),
            )?;
            self.item(
                &json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}),
            )?;
        }
        Ok(())
    }

    /// A named track per thread (its process's name where its rows carry no comm).
    fn thread_tracks(&mut self, plan: &Plan) -> Result<ThreadTracks, ExportError> {
        let mut named = ThreadTracks::default();
        for (node, tid, pid, comm) in &plan.threads {
            let comm = if comm.is_empty() {
                plan.names
                    .get(&(node.clone(), *pid))
                    .cloned()
                    .unwrap_or_default()
            } else {
                comm.clone()
            };
            let name = format!("{} (pid {pid}, tid {tid})", sanitize_with(&comm, 32));
            self.item(
                &json!({"ph": "M", "name": "thread_name", "pid": plan.tracks.pid(node), "tid": tid, "args": {"name": name}}),
            )?;
            named
                .used_tids
                .entry(plan.tracks.pid(node))
                .or_default()
                .insert(*tid);
            named.names.insert((node.clone(), *tid), name);
        }
        Ok(named)
    }

    /// Streams the exported events as slices, a thread at a time, splitting partial overlaps
    /// onto overlap tracks and recording in `bound` the track each anchor's slice went to.
    fn events(
        &mut self,
        r: &Reader,
        opts: &PerfettoOptions,
        plan: &Plan,
        threads: &mut ThreadTracks,
        bound: &mut Bindings,
    ) -> Result<Streamed, ExportError> {
        let mut switch_in = String::from("\x1f");
        for n in &opts.switch_in_nodes {
            switch_in.push_str(n);
            switch_in.push('\x1f');
        }
        // Read before the events stream: the connection serves one query at a time.
        let stacks = crate::stacks::stack_args(r, plan.limit)?;
        let mut stmt = r.prepare_trusted(EVENTS_SQL)?;
        let mut rows = stmt
            .query(causeway_store::duckdb::params![plan.limit, switch_in])
            .map_err(duck(r, "reading events"))?;
        let mut streamed = Streamed {
            events: 0,
            overlap_tracks: 0,
        };
        let mut thread: Option<(String, u32)> = None;
        let mut lanes = Lanes::default();
        while let Some(row) = rows.next().map_err(duck(r, "reading events"))? {
            let e = Row::read(r, row)?;
            if thread
                .as_ref()
                .is_none_or(|(n, t)| *n != e.node || *t != e.tid)
            {
                if let Some(key) = thread.take() {
                    keep_bindings(bound, &key, &lanes);
                }
                lanes = Lanes::of_thread(&e.node, e.tid, bound);
                thread = Some((e.node.clone(), e.tid));
            }
            let tid = match e.span() {
                Some((start, end)) => {
                    let k = lanes.place(start, end);
                    if k == lanes.tids.len() {
                        self.overlap_track(&e, k, &plan.tracks, threads, &mut lanes)?;
                        streamed.overlap_tracks += 1;
                    }
                    lanes.bind(start, end, lanes.tids[k]);
                    lanes.tids[k]
                }
                None => e.tid,
            };
            self.item(&slice(&e, &plan.tracks, tid, &stacks))?;
            streamed.events += 1;
        }
        if let Some(key) = thread.take() {
            keep_bindings(bound, &key, &lanes);
        }
        Ok(streamed)
    }

    /// Names overlap lane `k` of `e`'s thread, new to `lanes`, and gives it its tid.
    fn overlap_track(
        &mut self,
        e: &Row,
        k: usize,
        tracks: &Tracks,
        threads: &mut ThreadTracks,
        lanes: &mut Lanes,
    ) -> Result<(), ExportError> {
        let pid = tracks.pid(&e.node);
        let t = lane_tid(e.tid, k, threads.used_tids.entry(pid).or_default());
        lanes.tids.push(t);
        let base = threads
            .names
            .get(&(e.node.clone(), e.tid))
            .map_or("", String::as_str);
        self.item(
            &json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
            "args": {"name": format!("{base} (overlap {})", k + 1)}}),
        )
    }

    /// Chains: one thread per chain on a findings process after the nodes, spanning their
    /// evidence, with flow arrows to the evidence on the threads where it happened. Returns
    /// how many chains got arrows.
    fn chains(
        &mut self,
        chains: &[Chain],
        plan: &Plan,
        marks: &[Vec<Anchor>],
        bound: &Bindings,
    ) -> Result<usize, ExportError> {
        let tracks = &plan.tracks;
        let findings = tracks.nodes.len() as u32 + 1;
        let mut flows = 0usize;
        if !chains.is_empty() {
            self.item(
                &json!({"ph": "M", "name": "process_name", "pid": findings, "tid": 0, "args": {"name": "causeway chains"}}),
            )?;
            self.item(
                &json!({"ph": "M", "name": "process_sort_index", "pid": findings, "tid": 0, "args": {"sort_index": 0}}),
            )?;
        }
        for (i, c) in chains.iter().enumerate() {
            let tid = i as u32 + 1;
            let marks = &marks[i];
            let (start, end) = match (
                marks.iter().map(|m| tracks.at(&m.0, m.2)).min(),
                marks.iter().map(|m| tracks.at(&m.0, m.3.max(m.2))).max(),
            ) {
                (Some(s), Some(e)) => (s, e),
                _ => (0, plan.last - plan.first),
            };
            self.item(&json!({"ph": "M", "name": "thread_name", "pid": findings, "tid": tid,
            "args": {"name": format!("#{} {} [{}]", i + 1, sanitize_with(&c.detector, 40), c.severity.as_str())}}))?;
            self.item(
                &json!({"ph": "X", "cat": "chain", "name": sanitize_with(&c.summary, 200),
                "pid": findings, "tid": tid, "ts": us(start), "dur": us((end - start).max(1)),
                "args": chain_args(c)}),
            )?;
            let linked = flow_steps(marks, plan, bound);
            if linked.is_empty() {
                continue;
            }
            let id = i as u64 + 1;
            self.item(
                &json!({"ph": "s", "cat": "chain", "name": "evidence", "id": id, "pid": findings, "tid": tid, "ts": us(start)}),
            )?;
            for (k, (ts, pid, t)) in linked.iter().enumerate() {
                let ph = if k + 1 == linked.len() { "f" } else { "t" };
                self.item(
                    &json!({"ph": ph, "bp": "e", "cat": "chain", "name": "evidence", "id": id,
                "pid": pid, "tid": t, "ts": us(*ts)}),
                )?;
            }
            flows += 1;
        }
        Ok(flows)
    }

    /// Closes the array and the document.
    fn finish(self) -> Result<(), ExportError> {
        self.out.write_all(b"\n]}\n").map_err(io)
    }
}

/// The evidence anchors of every chain, read before the events stream so that its flow steps
/// can be bound, while the events stream, to the slice (and track) they land in.
fn chain_anchors(r: &Reader, chains: &[Chain], default_node: &str) -> Vec<Vec<Anchor>> {
    chains
        .iter()
        .map(|c| {
            let node = if c.node.is_empty() {
                default_node
            } else {
                &c.node
            };
            anchors(r, c, node)
        })
        .collect()
}

/// Every anchor placed on a thread, bound to no slice yet.
fn unbound(marks: &[Vec<Anchor>]) -> Bindings {
    marks
        .iter()
        .flatten()
        .filter(|m| m.1 != 0)
        .map(|m| ((m.0.clone(), m.1, m.2), None))
        .collect()
}

/// The args of a chain's slice: what it found and the SQL that shows it.
fn chain_args(c: &Chain) -> Value {
    let mut args = json!({"id": sanitize_with(&c.id, 80), "severity": c.severity.as_str(),
             "root_cause": sanitize_with(&c.root_cause, 600),
             "time_lost_ns": c.time_lost_ns, "evidence_sql": sanitize_with(&c.evidence_sql, 2000)});
    // Where in the program the finding's calls come from (traces recorded with stacks).
    if let (Some(cs), Some(a)) = (&c.call_sites, args.as_object_mut()) {
        let sites: Vec<String> = cs
            .sites
            .iter()
            .map(|s| {
                format!(
                    "{} of {}: {}",
                    s.calls,
                    cs.calls,
                    sanitize_with(&s.words(), 400)
                )
            })
            .collect();
        a.insert("call_sites".into(), json!(sites));
    }
    args
}

/// A chain's flow steps, (ts, pid, tid) by time. Only steps that land in a written slice,
/// before the cut: an arrow to nothing (an event cut by --max-events, an instant) would dangle.
fn flow_steps(marks: &[Anchor], plan: &Plan, bound: &Bindings) -> Vec<(i64, u32, u32)> {
    let tracks = &plan.tracks;
    let mut linked: Vec<(i64, u32, u32)> = marks
        .iter()
        .filter(|m| m.1 != 0 && m.2 < plan.cutoff && tracks.nodes.contains_key(&m.0))
        .filter_map(|m| {
            let t = (*bound.get(&(m.0.clone(), m.1, m.2))?)?;
            Some((tracks.at(&m.0, m.2), tracks.pid(&m.0), t))
        })
        .take(MAX_ANCHORS)
        .collect();
    linked.sort();
    linked
}

/// Writes the trace as trace-event JSON to `out`, streaming the events (memory stays flat).
pub fn write_perfetto(
    r: &Reader,
    opts: &PerfettoOptions,
    out: &mut impl Write,
) -> Result<PerfettoSummary, ExportError> {
    let plan = Plan::read(r, opts)?;
    let mut file = TraceFile::start(out, r, &plan)?;
    file.process_tracks(&plan.tracks)?;
    let mut threads = file.thread_tracks(&plan)?;
    let marks = chain_anchors(r, &opts.chains, &plan.default_node);
    let mut bound = unbound(&marks);
    let streamed = file.events(r, opts, &plan, &mut threads, &mut bound)?;
    let flows = file.chains(&opts.chains, &plan, &marks, &bound)?;
    file.finish()?;
    Ok(PerfettoSummary {
        events: streamed.events,
        events_cut: plan.cut,
        nodes: plan.tracks.nodes.len(),
        threads: plan.threads.len(),
        chains: opts.chains.len(),
        flows,
        overlap_tracks: streamed.overlap_tracks,
    })
}

/// Stores where the anchors of the thread just streamed were bound.
fn keep_bindings(bound: &mut Bindings, key: &(String, u32), lanes: &Lanes) {
    for &(ts, tid) in &lanes.anchors {
        if tid.is_some() {
            bound.insert((key.0.clone(), key.1, ts), tid);
        }
    }
}
