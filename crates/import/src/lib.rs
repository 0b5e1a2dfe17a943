//! Imports trace databases recorded by the reference tool (SQLite, every schema vintage seen:
//! integer or `node:seq` event ids, with or without node/comm/cgroup_id/stack_ips/rank columns
//! and aggregate tables) into a new causeway store, through a temp file renamed on success.
//! PyTorch profiler (Kineto) traces go through [`kineto`], Nsight Systems SQLite exports through
//! [`nsys`]; [`input`] tells the formats apart.

mod input;
pub mod kineto;
pub mod nsys;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

mod counts;

use causeway_store::catalog::{self, op_by_name};
use causeway_store::{
    CgroupInfo, CgroupSchedstat, ChainRow, Event, Frame, OpCount, SessionInfo, SessionRow,
    StoreError, SystemSnapshot, Writer, WriterOptions,
};
use rusqlite::{OpenFlags, types::ValueRef};
use serde::Serialize;

/// DuckDB's memory limit while importing. An import never reads back what it wrote, so the
/// blocks DuckDB would keep cached (up to 80% of RAM by default) are only memory; below the
/// limit, rows not yet in the file go to DuckDB's temporary directory.
const IMPORT_MEMORY: &str = "64MB";

/// What can go wrong importing one source file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The same trace given twice (the same file, or a copy of it).
    #[error(
        "{second}: the same trace as {first} ({how}): importing both would count every event twice"
    )]
    SameTrace {
        /// The first time it was given.
        first: PathBuf,
        /// The second.
        second: PathBuf,
        /// "the same file" or "identical contents".
        how: &'static str,
    },
    /// The path cannot be read.
    #[error("{path}: cannot read: {source}")]
    Unreadable {
        /// The source file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The path is not a regular file (a directory, FIFO, socket or device would hang or fail).
    #[error("{path}: is {kind}, not a file")]
    NotAFile {
        /// The source path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// A column holds values of another type than a trace database's.
    #[error(
        "{path}: column {column} holds {found} values where a trace database has numbers (a different schema, not damage)"
    )]
    WrongSchema {
        /// The source file.
        path: PathBuf,
        /// The column.
        column: String,
        /// The SQLite type found.
        found: String,
    },
    /// The file is not an SQLite database.
    #[error("{path}: not an SQLite database")]
    NotSqlite {
        /// The source file.
        path: PathBuf,
    },
    /// An SQLite database, but not a trace.
    #[error("{path}: not a trace database ({why})")]
    NotATrace {
        /// The source file.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// The file is damaged or cut short.
    #[error("{path}: damaged or truncated trace database ({detail})")]
    Corrupt {
        /// The source file.
        path: PathBuf,
        /// SQLite's message.
        detail: String,
    },
    /// The output would overwrite a source.
    #[error("{path}: the output is also a source")]
    OutputIsSource {
        /// The path given twice.
        path: PathBuf,
    },
    /// A PyTorch profiler trace could not be read.
    #[error(transparent)]
    Kineto(#[from] kineto::KinetoError),
    /// An Nsight Systems export could not be read.
    #[error(transparent)]
    Nsys(#[from] nsys::NsysError),
    /// Writing the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl causeway_hint::Hint for ImportError {
    /// What to do about it, when there is a fix.
    fn hint(&self) -> Option<String> {
        match self {
            Self::SameTrace { .. } => Some("import each trace once".to_string()),
            Self::Unreadable { .. } => Some("check the path and its permissions".to_string()),
            Self::NotAFile { .. } => Some("give the path of a trace database (*.db), an Nsight Systems SQLite export (*.sqlite), a PyTorch profiler trace (*.pt.trace.json[.gz]) or a directory of them".to_string()),
            Self::WrongSchema { .. } => Some("import takes trace databases recorded by the reference tool; check what wrote this file".to_string()),
            Self::NotSqlite { .. } => Some("import takes trace databases recorded by the reference tool (*.db), Nsight Systems SQLite exports (nsys export --type sqlite) and PyTorch profiler traces (*.pt.trace.json[.gz]); open causeway stores directly with --db".to_string()),
            Self::NotATrace { .. } => Some("a trace database has an events table with timestamp, pid, tid, source, op and duration columns; an Nsight Systems export has StringIds and CUPTI_ACTIVITY_KIND_* tables".to_string()),
            Self::Corrupt { .. } => Some("copy the file again from the machine that recorded it".to_string()),
            Self::OutputIsSource { .. } => Some("choose another output path (-o)".to_string()),
            Self::Kineto(e) => e.hint(),
            Self::Nsys(e) => e.hint(),
            Self::Store(e) => e.hint(),
        }
    }
}

causeway_hint::register!(ImportError);

/// Options of one import run.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Node name for every event (overrides names in the files).
    pub node: Option<String>,
    /// The caps JSON traces are read under.
    pub json_limits: kineto::JsonLimits,
}

/// What was imported from one source file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceReport {
    /// The source file.
    pub path: PathBuf,
    /// Schema version the reference tool wrote, if recorded.
    pub reference_version: String,
    /// Nodes the events were stamped with.
    pub nodes: Vec<String>,
    /// Events written.
    pub events: u64,
    /// Events skipped (op unknown to the catalogue), counted in `drops` as `import_skipped`.
    pub skipped: u64,
    /// Events skipped for an impossible value (a timestamp before 1970 or after 2116, a
    /// negative or too large pid or tid), counted in `drops` as `import_invalid`.
    pub invalid: u64,
    /// Distinct stacks written.
    pub stacks: u64,
    /// Causal chains written.
    pub chains: u64,
    /// Sessions written.
    pub sessions: u64,
    /// Processes written.
    pub processes: u64,
    /// System snapshots written.
    pub snapshots: u64,
    /// Per (pid, op) whose counters cannot be right: why (their calls are then the stored
    /// events, so no figure is scaled from them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counter_doubts: Vec<String>,
    /// What a PyTorch profiler trace held beside its calls (None for reference traces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kineto: Option<kineto::KinetoReport>,
    /// What an Nsight Systems export held, table by table (None for other sources).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nsys: Option<nsys::NsysReport>,
}

/// Progress of a running import.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Events done across all sources.
    pub done: u64,
    /// Events in all sources.
    pub total: u64,
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

/// Imports `sources` into a new store at `out` (refusing to replace it unless `force`).
pub fn import(
    sources: &[PathBuf],
    out: &Path,
    force: bool,
    opts: &ImportOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<SourceReport>, ImportError> {
    let out_abs = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    let sources = &input::expand(sources)?;
    refuse_repeats(sources)?;
    let mut files = Vec::new();
    for src in sources {
        if std::path::absolute(src).ok().as_deref() == Some(out_abs.as_path()) {
            return Err(ImportError::OutputIsSource { path: src.clone() });
        }
        files.push(input::Input::open(src, opts)?);
    }
    let total: u64 = files.iter().map(|f| f.event_count()).sum();
    let mut first_error = None;
    let result = causeway_store::write_atomically(out, force, |tmp| {
        let first_node = files
            .first()
            .map(|f| f.default_node(opts))
            .unwrap_or_else(causeway_store::default_node_name);
        let mut writer = Writer::create(
            tmp,
            WriterOptions {
                node: first_node,
                memory_limit: Some(IMPORT_MEMORY.into()),
                ..WriterOptions::default()
            },
        )?;
        let mut done = 0u64;
        let mut reports = Vec::new();
        let mut seen_stacks = HashSet::new();
        for f in &files {
            match f.copy_into(
                &mut writer,
                &mut seen_stacks,
                opts,
                &mut done,
                total,
                progress,
            ) {
                Ok(r) => reports.push(r),
                Err(e) => {
                    first_error = Some(e);
                    return Err(StoreError::Query {
                        message: "import failed".into(),
                        hint: String::new(),
                    });
                }
            }
        }
        writer.finish()?;
        Ok(reports)
    });
    match (result, first_error) {
        (_, Some(e)) => Err(e),
        (Ok(r), None) => Ok(r),
        (Err(e), None) => Err(e.into()),
    }
}

/// Refuses a trace given twice: the same file (by device and inode, so links and other
/// spellings count) or a copy of it (same size, same bytes).
fn refuse_repeats(sources: &[PathBuf]) -> Result<(), ImportError> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<(&PathBuf, std::fs::Metadata)> = Vec::new();
    for src in sources {
        // An unreadable path is reported by the open that follows, with its own message.
        let Ok(meta) = std::fs::metadata(src) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        for (first, m) in &seen {
            let how = if m.dev() == meta.dev() && m.ino() == meta.ino() {
                "the same file"
            } else if m.len() == meta.len() && same_bytes(first, src) {
                "identical contents"
            } else {
                continue;
            };
            return Err(ImportError::SameTrace {
                first: (*first).clone(),
                second: src.clone(),
                how,
            });
        }
        seen.push((src, meta));
    }
    Ok(())
}

/// Whether two files of equal length hold the same bytes (read in blocks; false when unreadable).
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let Ok(na) = fa.read(&mut ba) else {
            return false;
        };
        if na == 0 {
            return fb.read(&mut bb).is_ok_and(|n| n == 0);
        }
        if fb.read_exact(&mut bb[..na]).is_err() || ba[..na] != bb[..na] {
            return false;
        }
    }
}

struct SqliteTrace {
    path: PathBuf,
    conn: rusqlite::Connection,
    /// A private copy of the source and its pending journal, when SQLite must replay one
    /// (opened there so the source is never written); removed with the import.
    _copy: Option<tempfile::TempDir>,
    event_cols: HashSet<String>,
    event_count: u64,
    tables: HashSet<String>,
}

fn classify(path: &Path, e: rusqlite::Error) -> ImportError {
    match &e {
        rusqlite::Error::InvalidColumnType(_, column, found) => {
            return ImportError::WrongSchema {
                path: path.to_path_buf(),
                column: column.clone(),
                found: found.to_string(),
            };
        }
        rusqlite::Error::IntegralValueOutOfRange(i, v) => {
            return ImportError::WrongSchema {
                path: path.to_path_buf(),
                column: format!("#{i}"),
                found: format!("out-of-range ({v})"),
            };
        }
        _ => {}
    }
    let detail = e.to_string();
    if detail.contains("file is not a database") {
        ImportError::NotSqlite {
            path: path.to_path_buf(),
        }
    } else {
        ImportError::Corrupt {
            path: path.to_path_buf(),
            detail,
        }
    }
}

/// SQLite's integrity report (one problem a line, under a `*** in database main ***` heading)
/// as one line for an error message: the first problems, and how many there are.
fn one_line(report: &str) -> String {
    let problems: Vec<&str> = report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("***"))
        .collect();
    match problems.len() {
        0 => report.trim().to_string(),
        1 | 2 => problems.join("; "),
        n => format!("{}; {} and {} more", problems[0], problems[1], n - 2),
    }
}

/// `path` with `suffix` appended (SQLite's `-wal` and `-journal` files).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn nonempty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// Opens a source without ever writing it or beside it: immutable (no `-wal`/`-shm` created,
/// works on read-only media) when it has nothing to replay; when it has a write-ahead log or
/// a hot journal SQLite must replay, a private copy of the file and that log is opened
/// instead (SQLite cannot replay read-only, and the source must not change).
fn open_source(
    path: &Path,
    header: &[u8; 100],
) -> Result<(rusqlite::Connection, Option<tempfile::TempDir>), ImportError> {
    // Bytes 18-19: file format versions, 2 in WAL mode.
    let wal = header[18] == 2 && header[19] == 2;
    let log = if wal {
        Some(beside(path, "-wal"))
    } else {
        Some(beside(path, "-journal"))
    }
    .filter(|l| nonempty(l));
    let Some(log) = log else {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let conn = rusqlite::Connection::open_with_flags(
            uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, e))?;
        return Ok((conn, None));
    };
    let unreadable = |source| ImportError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let dir = tempfile::Builder::new()
        .prefix("causeway-import-")
        .tempdir()
        .map_err(unreadable)?;
    let copy = dir.path().join("source.db");
    std::fs::copy(path, &copy).map_err(unreadable)?;
    let suffix = if wal { "-wal" } else { "-journal" };
    std::fs::copy(&log, beside(&copy, suffix)).map_err(unreadable)?;
    tracing::info!(source = %path.display(), log = %log.display(), "replaying the source's log in a private copy");
    let conn = rusqlite::Connection::open_with_flags(
        &copy,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| classify(path, e))?;
    Ok((conn, Some(dir)))
}

/// A path for an SQLite `file:` URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = String::new();
    for c in abs.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// An SQLite source, opened read-only and checked whole: its tables, told apart by
/// [`input`] (a reference trace has `events`, an Nsight Systems export `StringIds` and CUPTI
/// tables).
pub(crate) struct SqliteDb {
    pub(crate) conn: rusqlite::Connection,
    /// See [`SqliteTrace::_copy`].
    pub(crate) copy: Option<tempfile::TempDir>,
    pub(crate) tables: HashSet<String>,
}

/// Distinct names an importer counts one by one in its report and drops; the rest together.
const MAX_KINDS: usize = 256;

/// Counts `n` of `key` in `map`, one entry per distinct key up to [`MAX_KINDS`], then
/// `(others)`: a file of made-up call names cannot grow the report without bound.
pub(crate) fn tally(map: &mut std::collections::BTreeMap<String, u64>, key: &str, n: u64) {
    if let Some(v) = map.get_mut(key) {
        *v += n;
    } else if map.len() < MAX_KINDS {
        map.insert(key.to_string(), n);
    } else {
        *map.entry("(others)".to_string()).or_default() += n;
    }
}

/// Records the runtime calls a source held that the op catalogue lacks, one `import_skipped`
/// drop per call name, and returns how many there were.
pub(crate) fn record_skipped(
    w: &mut Writer,
    origin: &str,
    skipped: &std::collections::BTreeMap<String, u64>,
) -> Result<u64, ImportError> {
    let mut total = 0;
    for (name, n) in skipped {
        total += n;
        w.record_drop(
            "import_skipped",
            None,
            *n,
            &format!("{origin}: runtime call {name} is not in the op catalogue"),
        )?;
    }
    Ok(total)
}

/// Opens `path` as an SQLite database without writing it, and reads every page once
/// (`quick_check`), so that a truncated or damaged file fails here, before anything is written.
pub(crate) fn open_sqlite(path: &Path) -> Result<SqliteDb, ImportError> {
    let meta = std::fs::metadata(path).map_err(|source| ImportError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(kind) = causeway_store::paths::not_a_file(&meta) {
        return Err(ImportError::NotAFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    let mut header = [0u8; 100];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|source| ImportError::Unreadable {
            path: path.to_path_buf(),
            source,
        })?;
        if f.read_exact(&mut header).is_err() || &header[..16] != b"SQLite format 3\0" {
            return Err(ImportError::NotSqlite {
                path: path.to_path_buf(),
            });
        }
    }
    let (conn, copy) = open_source(path, &header)?;
    let tables: HashSet<String> = {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .map_err(|e| classify(path, e))?;
        st.query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| classify(path, e))?
    };
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| classify(path, e))?;
    if check != "ok" {
        return Err(ImportError::Corrupt {
            path: path.to_path_buf(),
            detail: one_line(&check),
        });
    }
    Ok(SqliteDb { conn, copy, tables })
}

impl SqliteTrace {
    fn open(path: &Path, db: SqliteDb) -> Result<SqliteTrace, ImportError> {
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

    fn default_node(&self, opts: &ImportOptions) -> String {
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

    fn copy_into(
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

    fn copy_stacks(
        &self,
        w: &mut Writer,
        ip_stacks: &HashMap<i64, Vec<u64>>,
        seen: &mut HashSet<i64>,
    ) -> Result<u64, ImportError> {
        let mut stacks: Vec<(i64, Vec<Frame>)> = Vec::new();
        if self.tables.contains("stack_traces") {
            let mut st = self.sq(self
                .conn
                .prepare("SELECT hash, ips, frames FROM stack_traces"))?;
            let rows: Vec<(i64, String, String)> = self.sq(st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect()))?;
            for (hash, ips, frames) in rows {
                if !seen.insert(hash) {
                    continue;
                }
                let ips = parse_ips(&ips);
                let parsed: Vec<serde_json::Value> =
                    serde_json::from_str(&frames).unwrap_or_default();
                let depth = ips.len().max(parsed.len());
                let frames = (0..depth)
                    .map(|d| {
                        let f = parsed.get(d);
                        let text = |k: &str| {
                            f.and_then(|f| f.get(k))
                                .and_then(|v| v.as_str())
                                .unwrap_or("")
                                .to_string()
                        };
                        let symbol = text("s");
                        Frame {
                            ip: ips
                                .get(d)
                                .copied()
                                .or_else(|| parse_hex(&text("i")))
                                .unwrap_or(0),
                            offset: symbol
                                .rsplit_once("+0x")
                                .and_then(|(_, o)| u64::from_str_radix(o, 16).ok())
                                .unwrap_or(0),
                            symbol,
                            module: text("f"),
                        }
                    })
                    .collect();
                stacks.push((hash, frames));
            }
        }
        for (hash, ips) in ip_stacks {
            if !seen.insert(*hash) {
                continue;
            }
            let frames = ips
                .iter()
                .map(|&ip| Frame {
                    ip,
                    ..Frame::default()
                })
                .collect();
            stacks.push((*hash, frames));
        }
        Ok(w.add_new_stacks(stacks.iter().map(|(h, f)| (*h, f.as_slice())))?)
    }

    fn copy_chains(
        &self,
        w: &mut Writer,
        node: &str,
        origin: &str,
        opts: &ImportOptions,
    ) -> Result<u64, ImportError> {
        if !self.tables.contains("causal_chains") {
            return Ok(0);
        }
        let node_expr = if opts.node.is_none() && self.has_col("causal_chains", "node") {
            "node"
        } else {
            "''"
        };
        let sql = format!(
            "SELECT id, detected_at, severity, summary, root_cause, explanation, recommendations,
                    cuda_op, cuda_p99_us, cuda_p50_us, tail_ratio, timeline, {node_expr}
             FROM causal_chains ORDER BY detected_at"
        );
        let mut st = self.sq(self.conn.prepare(&sql))?;
        let chains: Vec<ChainRow> = self.sq(st
            .query_map([], |r| {
                let row_node: String = r.get(12)?;
                let recs: String = r.get(6)?;
                let op: String = r.get(7)?;
                let (p99_us, p50_us): (i64, i64) = (r.get(8)?, r.get(9)?);
                let id: String = r.get(0)?;
                Ok(reference_chain(
                    id,
                    row_node,
                    node,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    &recs,
                    &op,
                    p50_us,
                    p99_us,
                    r.get(10)?,
                    &r.get::<_, String>(11)?,
                    origin,
                ))
            })
            .and_then(|rows| rows.collect()))?;
        w.add_chains(&chains)?;
        Ok(chains.len() as u64)
    }

    fn copy_sessions(
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

    fn copy_processes(
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

    fn copy_host_tables(&self, w: &mut Writer, node: &str) -> Result<u64, ImportError> {
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
    fn copy_counts(
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

/// A reference chain as ours: recommendations as a JSON array, our op names, times in ns, and
/// evidence SQL that returns the op's slowest calls on its node.
#[allow(clippy::too_many_arguments)]
fn reference_chain(
    id: String,
    row_node: String,
    file_node: &str,
    detected_ns: i64,
    severity: String,
    summary: String,
    root_cause: String,
    explanation: String,
    recs: &str,
    op: &str,
    p50_us: i64,
    p99_us: i64,
    tail_ratio: f64,
    timeline: &str,
    origin: &str,
) -> ChainRow {
    let node = if row_node.is_empty() {
        file_node.to_string()
    } else {
        row_node
    };
    let recommendations = if recs.trim_start().starts_with('[') {
        recs.to_string()
    } else {
        serde_json::to_string(&[recs]).unwrap_or_default()
    };
    // The reference tool's op names are ours where they differ (cudaDeviceSync).
    let op = op_by_name(op).map_or(op, |o| o.name).to_string();
    let evidence_sql = if op.is_empty() {
        String::new()
    } else {
        format!(
            "SELECT * FROM events WHERE op = '{}' AND node = '{}' ORDER BY duration DESC LIMIT 20",
            op.replace('\'', "''"),
            node.replace('\'', "''")
        )
    };
    ChainRow {
        detector: reference_detector(&id),
        chain_id: id,
        node,
        detected_ns,
        severity,
        summary,
        root_cause,
        explanation,
        recommendations,
        timeline: convert_timeline(timeline),
        evidence_sql,
        time_lost_ns: 0,
        cuda_op: op,
        p50_ns: p50_us * 1000,
        p99_ns: p99_us * 1000,
        tail_ratio,
        origin: origin.to_string(),
    }
}

/// The reference tool's host events use other arg conventions; map them onto the catalogue's.
/// The largest pid or tid Linux hands out (`PID_MAX_LIMIT`, 2^22).
const MAX_PID: i64 = 1 << 22;

/// Why an event cannot be stored as it is, if it cannot.
fn invalid_event(timestamp: i64, pid: i64, tid: i64) -> Option<String> {
    if !(0..=causeway_store::MAX_TIMESTAMP_NS).contains(&timestamp) {
        Some(format!("timestamp {timestamp} ns"))
    } else if !(0..=MAX_PID).contains(&pid) {
        Some(format!("pid {pid}"))
    } else if !(0..=MAX_PID).contains(&tid) {
        Some(format!("tid {tid}"))
    } else {
        None
    }
}

/// Events skipped for an impossible value: how many, and the first with why.
#[derive(Debug, Default)]
struct Invalid {
    count: u64,
    first: Option<(i64, String)>,
}

impl Invalid {
    fn note(&mut self, rowid: i64, why: String) {
        self.count += 1;
        self.first.get_or_insert((rowid, why));
    }

    /// Stores the count as an `import_invalid` drop naming the first (`place` says where it is
    /// in the source); returns the count.
    fn store(
        &self,
        w: &mut Writer,
        origin: &str,
        place: impl Fn(i64) -> String,
    ) -> Result<u64, StoreError> {
        if let Some((first, why)) = &self.first {
            w.record_drop(
                "import_invalid",
                None,
                self.count,
                &format!(
                    "{origin}: events with an impossible value were skipped (the first: {}, {why})",
                    place(*first)
                ),
            )?;
        }
        Ok(self.count)
    }
}

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

fn reference_detector(id: &str) -> String {
    let descriptor = id.rsplit(':').next().unwrap_or(id);
    let kind = descriptor.split('-').next().unwrap_or("");
    match kind {
        "tail" => "tail_latency".into(),
        "drop" => "throughput_drop".into(),
        "" => "imported".into(),
        other => other.replace('-', "_"),
    }
}

fn convert_timeline(text: &str) -> String {
    let Ok(items) = serde_json::from_str::<Vec<serde_json::Value>>(text) else {
        return "[]".into();
    };
    let out: Vec<serde_json::Value> = items
        .into_iter()
        .map(|it| {
            let s = |k: &str| it.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
            let dur_us = it.get("dur_us").and_then(|v| v.as_i64()).unwrap_or(0);
            serde_json::json!({
                "layer": s("layer"),
                "op": catalog::op_by_name(&s("op")).map(|o| o.name.to_string()).unwrap_or_else(|| s("op")),
                "detail": s("detail"),
                "duration_ns": dur_us * 1000,
            })
        })
        .collect();
    serde_json::to_string(&out).unwrap_or_else(|_| "[]".into())
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn parse_ips(text: &str) -> Vec<u64> {
    serde_json::from_str::<Vec<String>>(text)
        .unwrap_or_default()
        .iter()
        .filter_map(|s| parse_hex(s))
        .collect()
}

/// FNV-1a 64 over the little-endian bytes of the IPs (the reference tool's stack hash).
fn fnv64(ips: &[u64]) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for ip in ips {
        for b in ip.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detectors_from_reference_ids() {
        assert_eq!(
            reference_detector("tail-medium-cudaLaunchKernel"),
            "tail_latency"
        );
        assert_eq!(
            reference_detector("gpu-node-01:drop-high-cuLaunchKernel"),
            "throughput_drop"
        );
    }

    #[test]
    fn timeline_units_become_ns() {
        let t = convert_timeline(
            r#"[{"layer":"CUDA","op":"cudaDeviceSync","detail":"x","dur_us":13}]"#,
        );
        assert_eq!(
            t,
            r#"[{"detail":"x","duration_ns":13000,"layer":"CUDA","op":"cudaDeviceSynchronize"}]"#
        );
    }

    #[test]
    fn integrity_reports_read_in_one_line() {
        let report = "*** in database main ***\nTree 157 page 264: btreeInitPage() returns error code 11\nTree 158 page 265: btreeInitPage() returns error code 11\nTree 159 page 266: x";
        assert_eq!(
            one_line(report),
            "Tree 157 page 264: btreeInitPage() returns error code 11; Tree 158 page 265: btreeInitPage() returns error code 11 and 1 more"
        );
        assert_eq!(
            one_line("row 3 missing from index i"),
            "row 3 missing from index i"
        );
    }

    #[test]
    fn ips_parse() {
        assert_eq!(parse_ips(r#"["0x10","0xff"]"#), vec![16, 255]);
        assert!(parse_ips("").is_empty());
    }
}
