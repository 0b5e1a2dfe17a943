//! The cluster store of `causeway collect`: writes what agents sent over OTLP (already decoded
//! into rows by causeway-ingest) in one transaction per batch: nodes and processes upserted,
//! cumulative op counters and histograms and drop counters replacing their previous snapshot,
//! chains upserted per (node, chain_id), everything else appended to `metric_points` and
//! `log_records`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use duckdb::{Connection, params};

use crate::error::{DuckContext, Result};
use crate::rows::{HistogramBucket, OpCount};
use crate::writer::{Writer, WriterOptions};

mod intern;
mod rows;

use intern::{Interned, points_batch};
pub use rows::*;

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
    pub fn live_reader(&self) -> Result<crate::SharedReader> {
        self.w.live_reader()
    }

    /// [`crate::LIVE_READERS`] live readers, for serving tool calls side by side.
    pub fn live_readers(&self) -> Result<Vec<crate::SharedReader>> {
        self.w.live_readers()
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
                let appended = batches
                    .iter()
                    .map(|r| r.points.len() + r.logs.len())
                    .sum::<usize>();
                self.w.count_rows(appended as u64);
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

    /// Closes the database and opens it again once [`WriterOptions::reopen_rows`] metric points
    /// and log records were appended since it was opened, so that DuckDB's metadata of the row
    /// groups written does not grow for as long as the store collects
    /// ([`Writer::maybe_reopen`]: the live readers move along). What was sent and cached stays
    /// valid: the interned names and the snapshots are rows of the same file. On failure the
    /// store is gone; everything committed is in the file.
    pub fn maybe_reopen(mut self) -> Result<CollectedStore> {
        self.w = self.w.maybe_reopen()?;
        Ok(self)
    }

    /// Times the database was closed and opened again ([`CollectedStore::maybe_reopen`]).
    pub fn reopens(&self) -> u64 {
        self.w.reopens()
    }

    /// Checkpoints and closes: the file is complete afterwards.
    pub fn finish(self) -> Result<()> {
        self.w.finish()
    }
}

fn write_nodes(
    conn: &Connection,
    path: &Path,
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
    path: &Path,
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
            && old.cgroup == p.cgroup
            && old.first_seen_ns <= p.first_seen_ns
            && old.last_seen_ns >= p.last_seen_ns
        {
            continue;
        }
        let info = crate::ProcessInfo {
            pid: p.pid,
            comm: p.comm.clone(),
            first_seen_ns: p.first_seen_ns,
            last_seen_ns: p.last_seen_ns,
            rank: p.rank,
            local_rank: p.local_rank,
            world_size: p.world_size,
            cluster: p.cluster.clone(),
            cgroup_id: p.cgroup.cgroup_id,
            ..crate::ProcessInfo::default()
        };
        crate::rows::upsert_process(conn, path, &p.node, &info)?;
        if p.cgroup.cgroup_id != 0 {
            crate::rows::upsert_cgroups(conn, path, &p.node, std::slice::from_ref(&p.cgroup))?;
        }
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
    path: &Path,
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
    // stored = 0: a collected store holds no event rows; every call is counted only.
    let mut counts = Vec::with_capacity(touched.len());
    let mut buckets = Vec::new();
    for key in &touched {
        let st = &cache[key];
        let (node, pid, op_id, start) = key;
        let count = OpCount {
            pid: *pid,
            op_id: *op_id,
            window_start_ns: *start,
            window_end_ns: st.time_ns,
            calls: st.calls,
            stored: 0,
            total_ns: st.total_ns,
            bytes: st.bytes,
        };
        counts.push((node.as_str(), count));
        for (b, c) in st.buckets.iter().enumerate() {
            if *c > 0 {
                let bucket = HistogramBucket {
                    pid: *pid,
                    op_id: *op_id,
                    window_start_ns: *start,
                    window_end_ns: st.time_ns,
                    log2_bucket: b as u8,
                    count: *c,
                };
                buckets.push((node.as_str(), bucket));
            }
        }
    }
    crate::rows::append_op_counts(conn, path, counts.iter().map(|(n, r)| (*n, r)))?;
    crate::rows::append_histograms(conn, path, buckets.iter().map(|(n, r)| (*n, r)))?;
    Ok(())
}

fn write_drops(
    conn: &Connection,
    path: &Path,
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

fn write_chains(conn: &Connection, path: &Path, rows: &[ChainRow]) -> Result<()> {
    crate::rows::insert_chains(
        conn,
        path,
        rows,
        crate::rows::OnConflict::Replace,
        Some("collected"),
    )
}
