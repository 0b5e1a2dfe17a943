//! Errors of the trace store, each with what failed and, where there is one, the fix.

use std::path::PathBuf;

/// Everything the store can fail at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// DuckDB refused an operation on a trace file.
    #[error("{path}: {action} failed: {source}")]
    Duck {
        /// The trace file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// DuckDB's own error.
        #[source]
        source: duckdb::Error,
    },
    /// A live reader whose recording could not reopen the database (its log says why).
    #[error(
        "{path}: the recording closed this store and could not open it again (its log says why)"
    )]
    Closed {
        /// The trace file.
        path: PathBuf,
    },
    /// The file exists but is not a causeway trace store.
    #[error("{path}: not a causeway trace store ({why})")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What was missing.
        why: String,
    },
    /// A trace recorded by the reference tool (SQLite): it must be imported first.
    #[error(
        "{path}: this is a reference trace (SQLite), not a causeway store: run causeway import first"
    )]
    ReferenceTrace {
        /// The file.
        path: PathBuf,
    },
    /// The store was written by a newer causeway.
    #[error("{path}: schema version {found} is newer than this causeway supports ({supported})")]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// The store was written by an older causeway, with a layout this build does not read.
    #[error("{path}: schema version {found} is older than this causeway reads ({supported})")]
    OlderSchema {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build writes.
        supported: u32,
    },
    /// The trace file does not exist.
    #[error("{path}: no such trace file")]
    Missing {
        /// The path given.
        path: PathBuf,
    },
    /// Refusing to overwrite an existing file.
    #[error("{path}: already exists")]
    Exists {
        /// The path given.
        path: PathBuf,
    },
    /// An output path names a FIFO, device, socket or directory: only regular files are
    /// replaced, even with --force.
    #[error("{path}: {kind}, not a regular file: only a regular file is ever replaced")]
    NotReplaceable {
        /// The path given.
        path: PathBuf,
        /// What it is ("a FIFO", "a device", ...).
        kind: &'static str,
    },
    /// A trace path names a FIFO, device or socket (or a directory where a file is expected):
    /// refused before opening, which could block forever.
    #[error("{path}: {kind}, not a regular file")]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is ("a FIFO", "a device", ...).
        kind: &'static str,
    },
    /// A filesystem operation failed.
    #[error("{path}: {action}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A query was refused by the SQL guard.
    #[error("query refused: {0}")]
    Rejected(#[from] causeway_sqlguard::Rejection),
    /// A query ran longer than its time limit and was interrupted.
    #[error("query interrupted after {limit_ms} ms (time limit)")]
    Timeout {
        /// The limit that was hit.
        limit_ms: u64,
    },
    /// A query did not stop within 0.75 s of its interrupt: the caller was answered and the
    /// query left to finish on its own (its connection is not reused until then).
    #[error(
        "query stopped answering after {limit_ms} ms (time limit) and did not stop when interrupted; it was abandoned"
    )]
    Abandoned {
        /// The limit that was hit.
        limit_ms: u64,
    },
    /// The process's memory passed the ceiling while a query ran, and the query was stopped.
    #[error("query stopped: the server's memory passed {limit_mib} MiB while it ran")]
    MemoryLimit {
        /// The ceiling, in MiB.
        limit_mib: u64,
    },
    /// The client went away or cancelled the request, and its query was interrupted.
    #[error("query cancelled by the client")]
    Cancelled,
    /// Too many earlier queries ignored their interrupt and still run.
    #[error("{running} earlier queries that ignored their time limit are still running")]
    Busy {
        /// How many are still running.
        running: usize,
    },
    /// A query failed inside DuckDB.
    #[error("query failed: {message}")]
    Query {
        /// DuckDB's message.
        message: String,
        /// What to try.
        hint: String,
    },
    /// Unknown op name given by the caller.
    #[error("unknown op '{0}'")]
    UnknownOp(String),
    /// A request that cannot be answered as asked (a window outside the trace, an unknown
    /// process or node, no rows asked for).
    #[error("{message}")]
    Invalid {
        /// What is wrong with it.
        message: String,
        /// How to ask instead.
        hint: String,
    },
    /// The inputs cannot be combined as given (merge).
    #[error("{message}")]
    Conflict {
        /// What clashes.
        message: String,
        /// How to resolve it.
        hint: String,
    },
}

impl causeway_hint::Hint for StoreError {
    /// What to do about it, when there is a fix.
    fn hint(&self) -> Option<String> {
        match self {
            Self::Closed { .. } => Some("the file holds everything committed before that: open it again with `causeway query --db` or restart the server".to_string()),
            Self::NotAStore { .. } => Some("create one with `causeway import` or `causeway trace`, or pass the right --db".to_string()),
            Self::ReferenceTrace { path, .. } => Some(format!("causeway import {path} -o NEW.duckdb, then pass --db NEW.duckdb", path = path.display())),
            Self::NewerSchema { .. } => Some("upgrade causeway".to_string()),
            Self::OlderSchema { .. } => Some("import the source trace again (`causeway import SRC.db -o NEW.duckdb`) or record it again".to_string()),
            Self::Missing { .. } => Some("list traces with `causeway traces`, or make one with `causeway import` / `causeway trace`".to_string()),
            Self::Exists { .. } => Some("pass --force to replace it, or choose another path".to_string()),
            Self::NotReplaceable { .. } => Some("choose a path that does not exist yet or is a regular file".to_string()),
            Self::NotAFile { .. } => Some("pass a trace file (*.duckdb) or an agent's data directory".to_string()),
            Self::Timeout { .. } => Some("add a WHERE on timestamp or pid, aggregate instead of listing rows, or raise --timeout".to_string()),
            Self::Abandoned { .. } => Some("ask a cheaper question: filter on timestamp or pid first, avoid long strings in per-row functions".to_string()),
            Self::MemoryLimit { .. } => Some("aggregate or filter before building lists or long strings; select fewer columns".to_string()),
            Self::Busy { .. } => Some("try again in a minute, with a cheaper query".to_string()),
            Self::Query { hint, .. } => Some(hint.clone()),
            Self::UnknownOp(..) => Some("the ops table lists every op: SELECT op, source, description FROM ops".to_string()),
            Self::Invalid { hint, .. } => Some(hint.clone()),
            Self::Conflict { hint, .. } => Some(hint.clone()),
            Self::Rejected(r) => Some(r.hint.clone()),
            Self::Duck { source, .. } => {
                let m = source.to_string();
                if m.contains("nterrupt") {
                    Some("a recording that serves while it records stops queries to write its events: ask again, or narrow the window or pid".to_string())
                } else if m.contains("Out of Memory") || m.contains("failed to pin block") {
                    Some("narrow the window or pid, or give the served queries more memory ([serve] query_memory, --query-memory)".to_string())
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

causeway_hint::register!(StoreError);

pub use causeway_hint::Hinted;

/// Shorthand used across the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub(crate) trait DuckContext<T> {
    fn ctx(self, path: &std::path::Path, action: &'static str) -> Result<T>;
}

impl<T> DuckContext<T> for duckdb::Result<T> {
    fn ctx(self, path: &std::path::Path, action: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Duck {
            path: path.to_path_buf(),
            action,
            source,
        })
    }
}
