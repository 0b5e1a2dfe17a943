//! The reference tool's SQLite traces: events (every schema vintage seen) with the op numbering,
//! arg conventions and inline stacks of the reference tool, and the tables beside them
//! ([`stacks`], [`chains`], [`tables`]).

mod chains;
mod stacks;
mod tables;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use causeway_store::catalog::{self, op_by_name};
use causeway_store::{Event, Writer};
use rusqlite::types::ValueRef;

use crate::skips::{Invalid, invalid_event};
use crate::sqlite::{SqliteDb, classify};
use crate::{ImportError, ImportOptions, Progress, SourceReport, counts};
use stacks::{fnv64, parse_ips};

/// A reference trace, opened and checked: its `events` columns and the tables it has.
pub(crate) struct SqliteTrace {
    path: PathBuf,
    conn: rusqlite::Connection,
    /// See [`SqliteDb::copy`].
    _copy: Option<tempfile::TempDir>,
    event_cols: HashSet<String>,
    pub(crate) event_count: u64,
    tables: HashSet<String>,
}

/// The reference tool's (source, op) numbering, used when a file lacks its own `ops` table.
const REFERENCE_OPS: &[((i64, i64), &str)] = &[
    ((1, 1), "cudaMalloc"),
    ((1, 2), "cudaFree"),
    ((1, 3), "cudaLaunchKernel"),
    ((1, 4), "cudaMemcpy"),
    ((1, 5), "cudaStreamSync"),
    ((1, 6), "cudaDeviceSync"),
    ((1, 7), "cudaMemcpyAsync"),
    ((1, 8), "cudaMallocManaged"),
    ((3, 1), "sched_switch"),
    ((3, 2), "sched_wakeup"),
    ((3, 3), "mm_page_alloc"),
    ((3, 4), "oom_kill"),
    ((3, 5), "process_exec"),
    ((3, 6), "process_exit"),
    ((3, 7), "process_fork"),
    ((3, 10), "pod_restart"),
    ((3, 11), "pod_eviction"),
    ((3, 12), "pod_oom_kill"),
    ((4, 1), "cuLaunchKernel"),
    ((4, 2), "cuMemcpy"),
    ((4, 3), "cuMemcpyAsync"),
    ((4, 4), "cuCtxSynchronize"),
    ((4, 5), "cuMemAlloc"),
    ((4, 6), "cuMemAllocManaged"),
    ((5, 1), "block_read"),
    ((5, 2), "block_write"),
    ((5, 3), "block_discard"),
    ((6, 1), "tcp_retransmit"),
    ((7, 1), "net_send"),
    ((7, 2), "net_recv"),
];

impl SqliteTrace {
    pub(crate) fn open(path: &Path, db: SqliteDb) -> Result<SqliteTrace, ImportError> {
        let SqliteDb { conn, copy, tables } = db;
        if !tables.contains("events") {
            return Err(ImportError::NotATrace {
                path: path.to_path_buf(),
                why: "no events table".into(),
            });
        }
        let event_cols: HashSet<String> = {
            let mut st = conn
                .prepare("SELECT name FROM pragma_table_info('events')")
                .map_err(|e| classify(path, e))?;
            st.query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
                .map_err(|e| classify(path, e))?
        };
        for c in ["timestamp", "pid", "tid", "source", "op", "duration"] {
            if !event_cols.contains(c) {
                return Err(ImportError::NotATrace {
                    path: path.to_path_buf(),
                    why: format!("events has no {c} column"),
                });
            }
        }
        let event_count: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .map_err(|e| classify(path, e))?;
        Ok(SqliteTrace {
            path: path.to_path_buf(),
            conn,
            _copy: copy,
            event_cols,
            event_count: event_count as u64,
            tables,
        })
    }

    fn has_col(&self, table: &str, col: &str) -> bool {
        if table == "events" {
            return self.event_cols.contains(col);
        }
        self.conn
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') WHERE name = ?"
            ))
            .and_then(|mut st| st.exists([col]))
            .unwrap_or(false)
    }

    fn stem(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "imported".into())
    }

    pub(crate) fn default_node(&self, opts: &ImportOptions) -> String {
        if let Some(n) = &opts.node {
            return n.clone();
        }
        if self.tables.contains("sessions") && self.has_col("sessions", "node") {
            let n: Option<String> = self
                .conn
                .query_row(
                    "SELECT node FROM sessions WHERE node != '' ORDER BY id LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .ok();
            if let Some(n) = n {
                return n;
            }
        }
        self.stem()
    }

    fn origin(&self) -> String {
        format!(
            "imported:{}",
            self.path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        )
    }

    fn sq<T>(&self, r: rusqlite::Result<T>) -> Result<T, ImportError> {
        r.map_err(|e| classify(&self.path, e))
    }

    /// (source id, op id) -> catalogue op id, from the file's own `ops` table when it has one.
    fn op_map(&self) -> Result<HashMap<(i64, i64), u16>, ImportError> {
        let mut names: Vec<((i64, i64), String)> = REFERENCE_OPS
            .iter()
            .map(|(k, n)| (*k, n.to_string()))
            .collect();
        if self.tables.contains("ops") {
            let mut st = self.sq(self.conn.prepare("SELECT source_id, op_id, name FROM ops"))?;
            let rows: Vec<((i64, i64), String)> = self.sq(st
                .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
                .and_then(|rows| rows.collect()))?;
            names.extend(rows);
        }
        Ok(names
            .into_iter()
            .filter_map(|(k, n)| op_by_name(&n).map(|o| (k, o.id)))
            .collect())
    }

    pub(crate) fn copy_into(
        &self,
        w: &mut Writer,
        seen_stacks: &mut HashSet<i64>,
        opts: &ImportOptions,
        done: &mut u64,
        total: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SourceReport, ImportError> {
        let file_node = self.default_node(opts);
        let origin = self.origin();
        let ops = self.op_map()?;
        let names = self.process_names()?;
        let mut report = SourceReport {
            path: self.path.clone(),
            reference_version: self.meta_value("version"),
            ..SourceReport::default()
        };

        let col = |c: &str, default: &str| -> String {
            if self.event_cols.contains(c) {
                c.to_string()
            } else {
                default.to_string()
            }
        };
        let node_expr = if opts.node.is_none() && self.event_cols.contains("node") {
            "node".to_string()
        } else {
            "''".to_string()
        };
        let sql = format!(
            "SELECT {node_expr}, timestamp, duration, pid, tid, source, op, {}, {}, {}, {}, {}, {}, {}, {}, {}
             FROM events ORDER BY 1, timestamp, rowid",
            col("arg0", "0"),
            col("arg1", "0"),
            col("ret_code", "0"),
            col("gpu_id", "0"),
            col("stack_hash", "0"),
            col("cgroup_id", "0"),
            col("rank", "NULL"),
            col("comm", "''"),
            col("stack_ips", "''"),
        );
        let sql = sql.replace(" FROM events ", ", rowid FROM events ");
        let mut st = self.sq(self.conn.prepare(&sql))?;
        let mut rows = self.sq(st.query([]))?;
        let mut current_node: Option<String> = None;
        let mut skipped: HashMap<(i64, i64), u64> = HashMap::new();
        let mut invalid = Invalid::default();
        let mut ip_stacks: HashMap<i64, Vec<u64>> = HashMap::new();
        let mut stored = counts::Stored::new();
        while let Some(r) = self.sq(rows.next())? {
            let node: String = {
                let n: String = self.sq(r.get(0))?;
                if n.is_empty() { file_node.clone() } else { n }
            };
            if current_node.as_deref() != Some(node.as_str()) {
                w.set_node(&node, &origin, "")?;
                if !report.nodes.contains(&node) {
                    report.nodes.push(node.clone());
                }
                current_node = Some(node);
            }
            let source: i64 = self.sq(r.get(5))?;
            let op: i64 = self.sq(r.get(6))?;
            *done += 1;
            if (*done).is_multiple_of(4096) {
                progress(Progress { done: *done, total });
            }
            let Some(&op_id) = ops.get(&(source, op)) else {
                *skipped.entry((source, op)).or_default() += 1;
                continue;
            };
            let pid: i64 = self.sq(r.get(3))?;
            let tid: i64 = self.sq(r.get(4))?;
            let timestamp: i64 = self.sq(r.get(1))?;
            if let Some(why) = invalid_event(timestamp, pid, tid) {
                invalid.note(self.sq(r.get(16))?, why);
                continue;
            }
            let mut ev = Event {
                timestamp,
                // Outside 0..=MAX_EVENT_DURATION_NS the writer clamps it and counts it.
                duration: self.sq(r.get(2))?,
                pid: pid as u32,
                tid: tid as u32,
                comm: String::new(),
                op_id,
                arg0: self.sq(r.get(7))?,
                arg1: self.sq(r.get(8))?,
                ret_code: self.sq(r.get::<_, i64>(9))? as i32,
                gpu_id: self.sq(r.get::<_, i64>(10))? as i16,
                stack_hash: self.sq(r.get(11))?,
                cgroup_id: self.sq(r.get::<_, i64>(12))? as u64,
                rank: self.sq(r.get::<_, Option<i64>>(13))?.map(|v| v as i32),
            };
            let comm: String = match r.get_ref(14) {
                Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                _ => String::new(),
            };
            ev.comm = if comm.is_empty() {
                names.get(&pid).cloned().unwrap_or_default()
            } else {
                comm
            };
            normalise_reference_args(&mut ev);
            if ev.stack_hash == 0
                && let Ok(ValueRef::Text(t)) = r.get_ref(15)
                && !t.is_empty()
            {
                let ips = parse_ips(&String::from_utf8_lossy(t));
                if !ips.is_empty() {
                    let h = fnv64(&ips);
                    ev.stack_hash = h;
                    ip_stacks.entry(h).or_insert(ips);
                }
            }
            w.append(&ev)?;
            report.events += 1;
            *stored
                .entry((ev.pid, op_id, counts::bucket(timestamp)))
                .or_default() += 1;
        }
        progress(Progress { done: *done, total });
        w.flush()?;
        report.invalid = invalid.store(w, &origin, |first| format!("events.rowid {first}"))?;
        for ((s, o), n) in &skipped {
            report.skipped += n;
            w.record_drop(
                "import_skipped",
                None,
                *n,
                &format!(
                    "{}: reference source {s} op {o} is not in the op catalogue",
                    origin
                ),
            )?;
        }
        // One transaction for the small tables: per-statement commits would each sync the WAL.
        w.in_transaction(|w| -> Result<(), ImportError> {
            report.stacks = self.copy_stacks(w, &ip_stacks, seen_stacks)?;
            report.chains = self.copy_chains(w, &file_node, &origin, opts)?;
            report.sessions = self.copy_sessions(w, &file_node, &origin, opts)?;
            report.processes = self.copy_processes(w, &report.nodes, &names)?;
            report.snapshots = self.copy_host_tables(w, &file_node)?;
            report.counter_doubts = self.copy_counts(w, &file_node, &ops, &stored)?;
            Ok(())
        })?;
        Ok(report)
    }

    fn meta_value(&self, key: &str) -> String {
        if !self.tables.contains("schema_info") {
            return String::new();
        }
        self.conn
            .query_row("SELECT value FROM schema_info WHERE key = ?", [key], |r| {
                r.get(0)
            })
            .unwrap_or_default()
    }

    fn process_names(&self) -> Result<HashMap<i64, String>, ImportError> {
        if !self.tables.contains("process_names") {
            return Ok(HashMap::new());
        }
        let mut st = self.sq(self.conn.prepare("SELECT pid, name FROM process_names"))?;
        self.sq(st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect()))
    }
}

/// The reference tool's host events use other arg conventions; map them onto the catalogue's.
fn normalise_reference_args(ev: &mut Event) {
    match catalog::op_by_id(ev.op_id).map(|o| o.name) {
        // Reference: arg1 = the switched task's pid, no next task, no run state, no I/O wait.
        Some("sched_switch") => {
            ev.arg0 = 0;
            ev.arg1 = 2;
            ev.ret_code = 0;
        }
        // Reference: arg1 = child pid.
        Some("process_fork") => {
            ev.arg0 = ev.arg1;
            ev.arg1 = 0;
        }
        _ => {}
    }
}
