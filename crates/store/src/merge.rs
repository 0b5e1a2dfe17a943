//! `causeway merge`: combines the stores of several nodes (air-gapped clusters) into one file,
//! keeping every event, stack (deduplicated), chain, session, histogram and drop counter with
//! its node, then estimates each node's clock offset from collective completions and records
//! it in `nodes` (raw timestamps are never rewritten). Bulk-copied inside DuckDB: the sources
//! are attached read-only to the new file's connection.

use std::path::{Path, PathBuf};

use duckdb::Connection;
use serde::Serialize;

use crate::catalog::{COLLECTIVES_SQL as COLLECTIVES, SYNCS_SQL as SYNCS};
use crate::clock::{OffsetEstimate, estimate};
use crate::error::{DuckContext, Result, StoreError};
use crate::schema;

/// What one source contributed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SourceCounts {
    /// The source file.
    pub path: PathBuf,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Events copied.
    pub events: u64,
    /// Stacks it brought that no earlier source had.
    pub new_stacks: u64,
    /// Chains copied.
    pub chains: u64,
    /// Sessions copied.
    pub sessions: u64,
}

/// A node's estimated clock offset against the reference node.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeOffset {
    /// The node.
    pub node: String,
    /// The node the offset is relative to.
    pub reference: String,
    /// `node_time - reference_time` in ns.
    pub offset_ns: i64,
    /// 1.4826 x MAD of the per-call differences, in ns.
    pub uncertainty_ns: i64,
    /// Collective calls paired.
    pub samples: usize,
}

/// What `merge` did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MergeReport {
    /// The merged file.
    pub out: PathBuf,
    /// Per source, in the order given.
    pub sources: Vec<SourceCounts>,
    /// Events in the merged file.
    pub events: u64,
    /// Offsets recorded in `nodes.clock_offset_ns` (nodes without collectives have none).
    pub clock_offsets: Vec<NodeOffset>,
}

/// Tables copied as they are: every row carries its node, and node names are unique.
const PER_NODE_TABLES: &[&str] = &[
    "sessions",
    "processes",
    "chains",
    "op_counts",
    "op_histograms",
    "drops",
    "system_snapshots",
    "cgroups",
    "cgroup_schedstat",
    "probe_costs",
    "probe_modes",
    "probe_overhead",
];

fn canonical(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn count(conn: &Connection, path: &Path, sql: &str) -> Result<u64> {
    conn.query_row(sql, [], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .ctx(path, "counting merged rows")
}

/// Merges `sources` (causeway stores of this schema version) into a new store at `out`.
/// Refuses to write over a source, and to merge two sources that contain the same node.
pub fn merge(sources: &[PathBuf], out: &Path, force: bool) -> Result<MergeReport> {
    if sources.len() < 2 {
        return Err(StoreError::Conflict {
            message: format!("merge needs at least two sources, got {}", sources.len()),
            hint: "pass the stores of every node: causeway merge a.duckdb b.duckdb ... -o cluster.duckdb".into(),
        });
    }
    let out_canon = canonical(out);
    for s in sources {
        if !s.exists() {
            return Err(StoreError::Missing { path: s.clone() });
        }
        if out_canon.is_some() && canonical(s) == out_canon {
            return Err(StoreError::Conflict {
                message: format!("{}: the output is one of the sources", out.display()),
                hint: "write the merged store to a new file with -o".into(),
            });
        }
    }
    // Validate every source before writing anything.
    for s in sources {
        drop(crate::Reader::open(s)?);
    }
    crate::write_atomically(out, force, |tmp| build(sources, tmp, out))
}

fn build(sources: &[PathBuf], tmp: &Path, out: &Path) -> Result<MergeReport> {
    // External access stays on for this connection only: ATTACH of the named source files is
    // how the rows are bulk-copied. No SQL from outside ever runs here.
    let config = duckdb::Config::default()
        .enable_autoload_extension(false)
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        .ctx(tmp, "configuring the merge")?;
    let conn = Connection::open_with_flags(tmp, config).ctx(tmp, "creating the merged store")?;
    schema::create(&conn).ctx(tmp, "creating the schema")?;
    let mut report = MergeReport {
        out: out.to_path_buf(),
        sources: Vec::new(),
        events: 0,
        clock_offsets: Vec::new(),
    };
    for (i, src) in sources.iter().enumerate() {
        report.sources.push(copy_source(&conn, tmp, src, i)?);
    }
    report.events = count(&conn, tmp, "SELECT count(*) FROM event_rows")?;
    report.clock_offsets = record_offsets(&conn, tmp)?;
    conn.execute_batch("CHECKPOINT")
        .ctx(tmp, "checkpointing the merged store")?;
    Ok(report)
}

fn copy_source(conn: &Connection, tmp: &Path, src: &Path, i: usize) -> Result<SourceCounts> {
    let alias = format!("src{i}");
    let path_lit = sql_str(&src.to_string_lossy());
    conn.execute_batch(&format!("ATTACH {path_lit} AS {alias} (READ_ONLY)"))
        .ctx(src, "attaching the source")?;
    let nodes: Vec<String> = conn
        .prepare(&format!("SELECT node FROM {alias}.nodes ORDER BY node"))
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .ctx(src, "reading its nodes")?;
    for n in &nodes {
        let clash: i64 = conn
            .query_row("SELECT count(*) FROM nodes WHERE node = ?", [n], |r| {
                r.get(0)
            })
            .ctx(tmp, "checking node names")?;
        if clash > 0 {
            let _ = conn.execute_batch(&format!("DETACH {alias}"));
            return Err(StoreError::Conflict {
                message: format!(
                    "{}: node '{}' is also in an earlier source",
                    src.display(),
                    crate::sanitize::sanitize_with(n, 80)
                ),
                hint: "each node may come from one source; re-import or re-record one of them with --node NAME".into(),
            });
        }
    }
    let before_stacks = count(
        conn,
        tmp,
        "SELECT count(DISTINCT stack_hash) FROM stack_frames",
    )?;
    let before_events = count(conn, tmp, "SELECT count(*) FROM event_rows")?;
    let version: String = conn
        .query_row(
            &format!("SELECT value FROM {alias}.meta WHERE key = 'schema_version'"),
            [],
            |r| r.get(0),
        )
        .ctx(src, "reading its schema version")?;
    // Tables a source older than the schema that brought them lacks.
    let version = version.parse::<u32>().unwrap_or(0);
    let newer = [
        (4, "probe_sampling"),
        (5, "probe_in_situ"),
        (7, "library_attach"),
        (7, "kernels"),
        (8, "tasks"),
        (13, "gpu_activity"),
        (13, "ranges"),
        (13, "steps"),
        (13, "correlations"),
    ]
    .into_iter()
    .filter(|(v, _)| version >= *v)
    .map(|(_, t)| t);
    // Python frames are interned by stack hash, like stack_frames (schema 10).
    let python = if version >= 10 {
        format!(
            "INSERT INTO python_stacks SELECT * FROM {alias}.python_stacks
               WHERE stack_hash NOT IN (SELECT stack_hash FROM main.python_stacks);
             INSERT INTO python_frames BY NAME SELECT * FROM {alias}.python_frames
               WHERE stack_hash NOT IN (SELECT stack_hash FROM main.python_frames);"
        )
    } else {
        String::new()
    };
    let per_node: Vec<String> = PER_NODE_TABLES
        .iter()
        .copied()
        .chain(newer)
        // By name: a column added later (probe_sampling.switching_ns, schema 6) gets its
        // default from a source that lacks it.
        .map(|t| format!("INSERT INTO {t} BY NAME SELECT * FROM {alias}.{t};"))
        .collect();
    conn.execute_batch(&format!(
        "BEGIN TRANSACTION;
         CREATE OR REPLACE TEMP TABLE node_map AS
           SELECT node_id AS old_id,
                  (SELECT coalesce(max(node_id) + 1, 0) FROM main.nodes) + row_number() OVER (ORDER BY node_id) - 1 AS new_id
           FROM {alias}.nodes;
         INSERT INTO nodes (node, node_id, hostname, cluster, clock_offset_ns, clock_uncertainty_ns, origin)
           SELECT n.node, m.new_id, n.hostname, n.cluster, NULL, NULL, n.origin
           FROM {alias}.nodes n JOIN node_map m ON m.old_id = n.node_id;
         INSERT INTO comms
           SELECT (SELECT max(comm_id) FROM main.comms) + row_number() OVER (ORDER BY s.comm), s.comm
           FROM {alias}.comms s WHERE s.comm NOT IN (SELECT comm FROM main.comms);
         CREATE OR REPLACE TEMP TABLE comm_map AS
           SELECT s.comm_id AS old_id, c.comm_id AS new_id
           FROM {alias}.comms s JOIN main.comms c ON c.comm = s.comm;
         INSERT INTO event_rows
           SELECT m.new_id, r.seq, r.timestamp, r.duration, r.pid, r.tid, cm.new_id, r.op_id,
                  r.arg0, r.arg1, r.ret_code, r.gpu_id, r.stack_hash, r.cgroup_id, r.rank
           FROM {alias}.event_rows r
           JOIN node_map m ON m.old_id = r.node_id
           JOIN comm_map cm ON cm.old_id = r.comm_id;
         INSERT INTO stack_frames
           SELECT * FROM {alias}.stack_frames
           WHERE stack_hash NOT IN (SELECT stack_hash FROM main.stack_frames);
         {}
         {}
         COMMIT;",
        per_node.join("\n"),
        python

    ))
    .inspect_err(|_| {
        let _ = conn.execute_batch("ROLLBACK");
    })
    .ctx(src, "copying its rows")?;
    let counts = SourceCounts {
        path: src.to_path_buf(),
        events: count(conn, tmp, "SELECT count(*) FROM event_rows")? - before_events,
        new_stacks: count(
            conn,
            tmp,
            "SELECT count(DISTINCT stack_hash) FROM stack_frames",
        )? - before_stacks,
        chains: count(conn, tmp, &format!("SELECT count(*) FROM {alias}.chains"))?,
        sessions: count(conn, tmp, &format!("SELECT count(*) FROM {alias}.sessions"))?,
        nodes,
    };
    conn.execute_batch(&format!("DETACH {alias}"))
        .ctx(src, "detaching the source")?;
    tracing::info!(source = %src.display(), events = counts.events, "merged");
    Ok(counts)
}

/// Per node, the moments its busiest collective-calling process saw each collective complete:
/// the end of the first wait (stream/device/event/context sync) on the same thread after the
/// call, or the call's own return when nothing waits on it (blocking collectives).
fn completions(conn: &Connection, tmp: &Path) -> Result<Vec<(String, Vec<i64>)>> {
    let sql = format!(
        "WITH c AS (
           SELECT node, pid, tid, timestamp AS t, timestamp + duration AS ret
           FROM event_data WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ({COLLECTIVES}))),
         s AS (
           SELECT node, tid, timestamp AS t, timestamp + duration AS e
           FROM event_data WHERE op_id IN (SELECT op_id FROM ops WHERE op IN ({SYNCS}))),
         w AS (
           SELECT c.node, c.pid, c.t, coalesce(s.e, c.ret) AS done
           FROM c ASOF LEFT JOIN s ON c.node = s.node AND c.tid = s.tid AND s.t >= c.t),
         busiest AS (
           SELECT node, arg_max(pid, n) AS pid FROM (SELECT node, pid, count(*) AS n FROM w GROUP BY ALL) GROUP BY node)
         SELECT w.node, list(w.done ORDER BY w.t)
         FROM w JOIN busiest b ON b.node = w.node AND b.pid = w.pid
         GROUP BY w.node ORDER BY w.node"
    );
    conn.prepare(&sql)
        .and_then(|mut st| {
            st.query_map([], |r| {
                let node: String = r.get(0)?;
                let list: duckdb::types::Value = r.get(1)?;
                let times = match list {
                    duckdb::types::Value::List(v) => v
                        .into_iter()
                        .filter_map(|x| match x {
                            duckdb::types::Value::BigInt(t) => Some(t),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                Ok((node, times))
            })?
            .collect()
        })
        .ctx(tmp, "reading collective completions")
}

/// Estimates every node's offset against the first node (by name) that has collectives, and
/// records it (the reference itself gets 0 +- 0).
fn record_offsets(conn: &Connection, tmp: &Path) -> Result<Vec<NodeOffset>> {
    let per_node = completions(conn, tmp)?;
    let Some((reference, ref_times)) = per_node.first().cloned() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (node, times) in &per_node {
        let e = if *node == reference {
            Some(OffsetEstimate {
                offset_ns: 0,
                uncertainty_ns: 0,
                samples: times.len(),
            })
        } else {
            estimate(&ref_times, times)
        };
        let Some(e) = e else { continue };
        conn.execute(
            "UPDATE nodes SET clock_offset_ns = ?, clock_uncertainty_ns = ? WHERE node = ?",
            duckdb::params![e.offset_ns, e.uncertainty_ns, node],
        )
        .ctx(tmp, "recording clock offsets")?;
        out.push(NodeOffset {
            node: node.clone(),
            reference: reference.clone(),
            offset_ns: e.offset_ns,
            uncertainty_ns: e.uncertainty_ns,
            samples: e.samples,
        });
    }
    Ok(out)
}
