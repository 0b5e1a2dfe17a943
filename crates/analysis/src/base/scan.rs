//! The aggregating scans that the per-thread and per-op facts are derived from, one node at a
//! time (a constant node filter is cheaper than grouping by the node string): one GROUP BY per
//! (pid, tid, op, GPU, thread name, run state) and one for exact per-(pid, op) percentiles,
//! plus a columnar reader for the queries that hand many rows to the interval sweeps.

use std::collections::HashMap;

use causeway_store::duckdb::arrow::array::{Array, Int64Array};
use causeway_store::duckdb::{self, Params};
use causeway_store::{Reader, StoreError};

use crate::base::errors::duck;
use crate::window::Window;

// Op ids written into this file's SQL as literals.
causeway_ops::sql_id!("sched_switch", 100);

/// One group of the per-node scan: events of one (pid, tid, op, gpu, comm, run state).
#[derive(Debug, Clone)]
pub struct ThreadOpRow {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Op id.
    pub op_id: u16,
    /// GPU id (-1 when none).
    pub gpu_id: i16,
    /// Thread name as recorded (unsanitised).
    pub comm: String,
    /// For sched_switch: 0 preempted, 1 blocked, 2 unknown; 0 for other ops.
    pub state: i8,
    /// Events.
    pub count: u64,
    /// Sum of durations (ns).
    pub dur_sum: i128,
    /// First timestamp (ns).
    pub first_ts: i64,
    /// Last timestamp (ns).
    pub last_ts: i64,
    /// Last end, timestamp + duration (ns).
    pub last_end: i64,
    /// Longest duration (ns).
    pub max_dur: i64,
    /// Sum of arg0.
    pub arg0_sum: i128,
}

/// One node of the window, for the per-node queries' `(?::BOOLEAN OR node = ?)` filter:
/// `only` (the window holds no other node) makes the string comparison unnecessary.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'a> {
    /// Node name.
    pub name: &'a str,
    /// Whether it is the only node with events in the window.
    pub only: bool,
}

const NODES_SQL: &str =
    "SELECT DISTINCT node FROM event_data WHERE timestamp BETWEEN ? AND ? ORDER BY node";

// The last end saturates row by row (the same as saturating the exact maximum, and a third of
// the scan's time cheaper than adding in 128 bits).
pub(crate) const THREAD_OPS_SQL: &str = "
SELECT pid, tid, op_id, gpu_id, comm,
       CASE WHEN op_id = 100 THEN (CASE arg1 WHEN 0 THEN 0 WHEN 1 THEN 1 ELSE 2 END) ELSE 0 END AS state,
       count(*)::BIGINT, (CASE WHEN sum(duration) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(duration) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(duration) END), min(timestamp), max(timestamp), max(CASE WHEN duration > 0 AND timestamp > 9223372036854775807 - duration THEN 9223372036854775807 WHEN duration < 0 AND timestamp < -9223372036854775808 - duration THEN -9223372036854775808 ELSE timestamp + duration END),
       max(duration), (CASE WHEN sum(arg0) > 9223372036854775807 THEN 9223372036854775807 WHEN sum(arg0) < -9223372036854775808 THEN -9223372036854775808 ELSE sum(arg0) END)
FROM event_data WHERE (?::BOOLEAN OR node = ?) AND timestamp BETWEEN ? AND ?
GROUP BY ALL";

const QUANTILES_SQL: &str = "
SELECT pid, op_id, q[1], q[2] FROM (
  SELECT pid, op_id, quantile_disc(duration, [0.5, 0.99]) AS q
  FROM event_rows
  WHERE (?::BOOLEAN OR node_id = (SELECT node_id FROM nodes WHERE node = ?)) AND timestamp BETWEEN ? AND ?
    AND (?::BIGINT < 0 OR pid = ?::BIGINT) AND op_id <> 100
  GROUP BY ALL)";

const OPS_SQL: &str = "SELECT op_id, source, op FROM ops";

/// Nodes with events in the window, sorted.
pub fn nodes(r: &Reader, w: Window) -> Result<Vec<String>, StoreError> {
    r.prepare_trusted(NODES_SQL)?
        .query_map(duckdb::params![w.from_ns, w.until_ns], |row| row.get(0))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "listing the nodes in the window"))
}

/// The store's op table: id -> (source, op).
pub fn op_names(r: &Reader) -> Result<HashMap<u16, (String, String)>, StoreError> {
    let rows: Vec<(u16, String, String)> = r
        .prepare_trusted(OPS_SQL)?
        .query_map([], causeway_store::row)
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading the op table"))?;
    Ok(rows.into_iter().map(|(id, s, o)| (id, (s, o))).collect())
}

/// Every (pid, tid, op, gpu, comm, state) group of one node in the window, all processes.
pub fn thread_ops(
    r: &Reader,
    node: &NodeRef<'_>,
    w: Window,
) -> Result<Vec<ThreadOpRow>, StoreError> {
    let p = duckdb::params![node.only, node.name, w.from_ns, w.until_ns];
    r.prepare_trusted(THREAD_OPS_SQL)?
        .query_map(p, |row| {
            Ok(ThreadOpRow {
                pid: row.get(0)?,
                tid: row.get(1)?,
                op_id: row.get(2)?,
                gpu_id: row.get(3)?,
                comm: row.get(4)?,
                state: row.get(5)?,
                count: row.get::<_, i64>(6)? as u64,
                dur_sum: row.get(7)?,
                first_ts: row.get(8)?,
                last_ts: row.get(9)?,
                last_end: row.get(10)?,
                max_dur: row.get(11)?,
                arg0_sum: row.get(12)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "computing per-thread totals"))
}

/// Exact nearest-rank p50 and p99 of every (pid, op) of one node (sched_switch excepted).
pub fn quantiles(
    r: &Reader,
    node: &NodeRef<'_>,
    w: Window,
    pid: i64,
) -> Result<Vec<(u32, u16, i64, i64)>, StoreError> {
    r.prepare_trusted(QUANTILES_SQL)?
        .query_map(
            duckdb::params![node.only, node.name, w.from_ns, w.until_ns, pid, pid],
            causeway_store::row,
        )
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "computing per-process op statistics"))
}

/// Runs a trusted query whose `N` columns are all non-null BIGINT and hands them to `f` one
/// batch at a time, column by column (through Arrow: far cheaper than row by row for the large
/// candidate sets, and no copy of the whole result).
pub fn for_each_batch<const N: usize>(
    r: &Reader,
    sql: &'static str,
    params: impl Params,
    action: &'static str,
    mut f: impl FnMut([&[i64]; N]),
) -> Result<(), StoreError> {
    let mut st = r.prepare_trusted(sql)?;
    for batch in st.query_arrow(params).map_err(duck(r, action))? {
        let mut cols: [&[i64]; N] = [&[]; N];
        for (i, col) in cols.iter_mut().enumerate() {
            let a = batch
                .column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .filter(|a| a.null_count() == 0)
                .ok_or_else(|| {
                    let t = duckdb::types::Type::Null;
                    duck(r, action)(duckdb::Error::InvalidColumnType(i, "BIGINT".into(), t))
                })?;
            *col = a.values();
        }
        f(cols);
    }
    Ok(())
}

/// [`for_each_batch`], collected: the `N` columns of the whole result.
pub fn columns<const N: usize>(
    r: &Reader,
    sql: &'static str,
    params: impl Params,
    action: &'static str,
) -> Result<[Vec<i64>; N], StoreError> {
    let mut out: [Vec<i64>; N] = std::array::from_fn(|_| Vec::new());
    for_each_batch::<N>(r, sql, params, action, |cols| {
        for (o, c) in out.iter_mut().zip(cols) {
            o.extend_from_slice(c);
        }
    })?;
    Ok(out)
}
