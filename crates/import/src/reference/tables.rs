//! The reference trace's tables beside events and chains: sessions, processes, host tables
//! (system snapshots, cgroups, schedstat) and per-minute counters, with numbers read the way
//! DuckDB casts them.

use std::collections::HashMap;

use causeway_store::catalog;
use causeway_store::{
    CgroupInfo, CgroupSchedstat, OpCount, SessionInfo, SessionRow, SystemSnapshot, Writer,
};
use rusqlite::types::ValueRef;

use super::SqliteTrace;
use crate::{ImportError, ImportOptions, counts};

impl SqliteTrace {
    pub(super) fn copy_sessions(
        &self,
        w: &mut Writer,
        node: &str,
        origin: &str,
        opts: &ImportOptions,
    ) -> Result<u64, ImportError> {
        if !self.tables.contains("sessions") {
            return Ok(0);
        }
        let opt = |c: &str, d: &str| {
            if self.has_col("sessions", c) {
                c.to_string()
            } else {
                d.to_string()
            }
        };
        let node_expr = if opts.node.is_none() {
            opt("node", "''")
        } else {
            "''".into()
        };
        let sql = format!(
            "SELECT id, started_at, stopped_at, gpu_model, gpu_driver, cpu_model, cpu_cores, mem_total,
                    kernel, os_release, cuda_ver, python_ver, ingero_ver, pid_filter, flags, {node_expr},
                    {}, {}, {} FROM sessions ORDER BY id",
            opt("rank", "NULL"),
            opt("local_rank", "NULL"),
            opt("world_size", "NULL")
        );
        let mut st = self.sq(self.conn.prepare(&sql))?;
        let mut rows = self.sq(st.query([]))?;
        let mut n = 0;
        while let Some(r) = self.sq(rows.next())? {
            let s = |i: usize| -> Result<String, ImportError> { self.sq(r.get(i)) };
            let i = |i: usize| -> Result<i64, ImportError> { self.sq(r.get(i)) };
            let rank = |i: usize| -> Result<Option<i32>, ImportError> {
                Ok(self.sq(r.get::<_, Option<i64>>(i))?.map(|v| v as i32))
            };
            let row_node = s(15)?;
            w.add_session(&SessionRow {
                session_id: i(0)?,
                node: if row_node.is_empty() {
                    node.to_string()
                } else {
                    row_node
                },
                stopped_ns: i(2)?,
                info: SessionInfo {
                    started_ns: i(1)?,
                    // The recording host's name is not in the reference schema.
                    hostname: String::new(),
                    kernel: s(8)?,
                    os_release: s(9)?,
                    cpu_model: s(5)?,
                    cpu_cores: i(6)? as i32,
                    mem_total_mb: i(7)?,
                    gpu_model: s(3)?,
                    gpu_driver: s(4)?,
                    cuda_version: s(10)?,
                    python_version: s(11)?,
                    tool_version: s(12)?,
                    pid_filter: s(13)?,
                    flags: s(14)?,
                    rank: rank(16)?,
                    local_rank: rank(17)?,
                    world_size: rank(18)?,
                    origin: origin.to_string(),
                },
            })?;
            n += 1;
        }
        Ok(n)
    }

    pub(super) fn copy_processes(
        &self,
        w: &mut Writer,
        nodes: &[String],
        names: &HashMap<i64, String>,
    ) -> Result<u64, ImportError> {
        let seen: HashMap<i64, i64> = if self.tables.contains("process_names") {
            let mut st = self.sq(self.conn.prepare("SELECT pid, seen_at FROM process_names"))?;
            self.sq(st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|r| r.collect()))?
        } else {
            HashMap::new()
        };
        // A process belongs to the node(s) whose events carry its pid.
        let mut n = 0;
        for node in nodes {
            for mut info in w.processes_in_events(node)? {
                let pid = info.pid as i64;
                if let Some(name) = names.get(&pid) {
                    info.comm = name.clone();
                }
                if let Some(&at) = seen.get(&pid) {
                    info.last_seen_ns = info.last_seen_ns.max(at);
                }
                w.upsert_process_of(node, &info)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every row of `select`, each read by `row` (numbers as SQLite stored them, converted).
    fn rows<T>(
        &self,
        table: &str,
        select: &str,
        row: impl Fn(&[Num]) -> T,
    ) -> Result<Vec<T>, ImportError> {
        if !self.tables.contains(table) {
            return Ok(Vec::new());
        }
        let mut st = self.sq(self.conn.prepare(select))?;
        let width = st.column_count();
        self.sq(st
            .query_map([], |r| {
                let values: Vec<Num> = (0..width)
                    .map(|i| r.get_ref(i).map(Num::from))
                    .collect::<rusqlite::Result<_>>()?;
                Ok(row(&values))
            })
            .and_then(|r| r.collect()))
    }

    pub(super) fn copy_host_tables(&self, w: &mut Writer, node: &str) -> Result<u64, ImportError> {
        let snapshots = self.rows(
            "system_snapshots",
            "SELECT timestamp, cpu_pct, mem_pct, mem_avail, swap_mb, load_avg FROM system_snapshots ORDER BY timestamp",
            |v| SystemSnapshot {
                ts_ns: v[0].int(),
                cpu_pct: v[1].real(),
                mem_pct: v[2].real(),
                mem_avail_mb: v[3].int(),
                swap_mb: v[4].int(),
                load_avg: v[5].real(),
            },
        )?;
        w.add_system_snapshots(node, &snapshots)?;
        let cgroups = self.rows(
            "cgroup_metadata",
            "SELECT cgroup_id, container_id, cgroup_path, pod_name, namespace FROM cgroup_metadata",
            |v| {
                // The runtime and pod uid are read from the path as the recorder reads ours.
                let path = v[2].text();
                let facts = causeway_placement::classify(&path);
                let container_id = v[1].text();
                CgroupInfo {
                    cgroup_id: v[0].int() as u64,
                    container_id: if container_id.is_empty() {
                        facts.container_id
                    } else {
                        container_id
                    },
                    cgroup_path: path,
                    pod_name: v[3].text(),
                    namespace: v[4].text(),
                    runtime: facts.runtime.as_str().to_string(),
                    pod_uid: facts.pod_uid,
                    ..CgroupInfo::default()
                }
            },
        )?;
        w.add_cgroups(node, &cgroups)?;
        let schedstat = self.rows(
            "cgroup_schedstat",
            "SELECT cgroup_id, window_start, window_end, p99_off_cpu, total_off_cpu, event_count FROM cgroup_schedstat",
            |v| CgroupSchedstat {
                cgroup_id: v[0].int() as u64,
                window_start_ns: v[1].int(),
                window_end_ns: v[2].int(),
                p99_off_cpu_ns: v[3].int(),
                total_off_cpu_ns: v[4].int(),
                events: v[5].int(),
            },
        )?;
        w.add_cgroup_schedstat(node, &schedstat)?;
        Ok(snapshots.len() as u64)
    }

    /// The per-minute counters, with `stored` from the events imported ([`counts`]); returns
    /// what was said of counters that cannot be right.
    pub(super) fn copy_counts(
        &self,
        w: &mut Writer,
        node: &str,
        ops: &HashMap<(i64, i64), u16>,
        stored: &counts::Stored,
    ) -> Result<Vec<String>, ImportError> {
        // The source's own `stored` column is not read: the store's is counted from the events.
        let rows: Vec<OpCount> = self
            .rows(
                "event_aggregates",
                "SELECT bucket, source, op, pid, count, sum_dur, sum_arg0 FROM event_aggregates",
                |v| {
                    let bucket = v[0].int();
                    Some(OpCount {
                        pid: v[3].int() as u32,
                        op_id: *ops.get(&(v[1].int(), v[2].int()))?,
                        window_start_ns: bucket,
                        window_end_ns: bucket + counts::BUCKET_NS,
                        calls: v[4].int() as u64,
                        stored: 0,
                        total_ns: v[5].int() as u64,
                        bytes: v[6].int() as u64,
                    })
                },
            )?
            .into_iter()
            .flatten()
            .collect();
        let (rows, doubts) = counts::reconcile(rows, stored);
        w.record_op_counts_of(node, &rows)?;
        Ok(doubts
            .iter()
            .map(|(pid, op, d)| {
                let name = catalog::op_by_id(*op).map_or("?", |o| o.name);
                d.describe(*pid, name)
            })
            .collect())
    }
}

/// One value of a host table as SQLite stored it: SQLite keeps whatever type was written, so
/// numbers are converted the way DuckDB casts them (text parsed, NULL as zero).
#[derive(Debug, Clone)]
enum Num {
    Int(i64),
    Real(f64),
    Text(String),
    Null,
}

impl From<ValueRef<'_>> for Num {
    fn from(v: ValueRef<'_>) -> Num {
        match v {
            ValueRef::Null | ValueRef::Blob(_) => Num::Null,
            ValueRef::Integer(i) => Num::Int(i),
            ValueRef::Real(f) => Num::Real(f),
            ValueRef::Text(t) => Num::Text(String::from_utf8_lossy(t).into_owned()),
        }
    }
}

impl Num {
    fn int(&self) -> i64 {
        match self {
            Num::Int(i) => *i,
            Num::Real(f) => f.round() as i64,
            Num::Text(t) => t.trim().parse::<f64>().map_or(0, |f| f.round() as i64),
            Num::Null => 0,
        }
    }

    fn real(&self) -> f64 {
        match self {
            Num::Int(i) => *i as f64,
            Num::Real(f) => *f,
            Num::Text(t) => t.trim().parse().unwrap_or(0.0),
            Num::Null => 0.0,
        }
    }

    fn text(&self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Real(f) => f.to_string(),
            Num::Text(t) => t.clone(),
            Num::Null => String::new(),
        }
    }
}
