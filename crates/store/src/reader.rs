//! Read-only access to a trace store: a locked-down connection (read-only, no external access,
//! no extension loading, configuration locked, memory and thread caps) that runs only
//! compiled-in queries or [`GuardedSql`], with a timeout, row and byte caps, and sanitised cells.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_sqlguard::{GuardedSql, Policy};
use duckdb::types::{TimeUnit, ValueRef};
use duckdb::{AccessMode, Config, Connection, Statement};
use serde::{Deserialize, Serialize};

use crate::error::{DuckContext, Result, StoreError};
use crate::guarded::{QueryControl, Watchdog};
use crate::sanitize::{sanitize, sanitize_with};

/// Limits for one query from outside.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    /// Interrupt the query after this long.
    pub timeout: Duration,
    /// Stop adding rows once the JSON size of the result passes this many bytes.
    pub max_bytes: usize,
    /// Interrupt the query when the process's resident memory passes this many bytes (None:
    /// [`crate::guarded::default_rss_ceiling`]). DuckDB's memory limit covers what its buffer
    /// manager holds; this also catches what it allocates outside it.
    pub max_rss_bytes: Option<u64>,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_bytes: 1 << 20,
            max_rss_bytes: None,
        }
    }
}

/// How a reader connection is capped.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// DuckDB memory limit (e.g. "1GB").
    pub memory_limit: String,
    /// DuckDB worker threads.
    pub threads: i64,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            memory_limit: "2GB".into(),
            threads: 2,
        }
    }
}

/// One column of a result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// DuckDB type.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// The rows of a guarded query (also read back from a node's query API by fleet fan-out).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryResult {
    /// Columns in order.
    pub columns: Vec<ColumnInfo>,
    /// Rows of JSON values (strings sanitised).
    pub rows: Vec<Vec<serde_json::Value>>,
    /// Whether rows were cut by the row or byte cap.
    pub truncated: bool,
    /// Why rows were cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_reason: Option<String>,
    /// Wall time of the query.
    pub elapsed_ms: f64,
}

/// A read-only, locked-down view of one trace file.
pub struct Reader {
    /// `None` only while a live writer reopens the database, and after a reopen that failed.
    conn: Option<Connection>,
    path: PathBuf,
    policy: Policy,
    /// Shares the database instance of the live writer (see [`Reader::from_writer_connection`]).
    live: bool,
    schema_version: u32,
    /// What interrupts the current connection's query, readable without the reader's lock:
    /// a live writer that needs the memory a query holds stops it ([`Reader::interrupter`]).
    interrupter: Interrupter,
}

/// The interrupt handle of a reader's current connection, shared with its live writer.
pub(crate) type Interrupter = Arc<Mutex<Option<Arc<duckdb::InterruptHandle>>>>;

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("path", &self.path).finish()
    }
}

impl Reader {
    /// Opens `path` read-only with the default caps.
    pub fn open(path: &Path) -> Result<Reader> {
        Self::open_with(path, &ReaderOptions::default())
    }

    /// Opens `path` read-only with explicit caps. Never writes or migrates the file.
    pub fn open_with(path: &Path, opts: &ReaderOptions) -> Result<Reader> {
        // A FIFO or device would block the open (or read forever): refused first.
        crate::paths::check_input(path, true)?;
        if path.is_dir() {
            // An agent's data directory: its closed segments as one trace.
            let conn = crate::timeline::open_dir(path, opts)?;
            let schema_version = crate::check_schema(&conn, path)?;
            conn.execute_batch("SET lock_configuration = true")
                .ctx(path, "locking the configuration")?;
            return Ok(Reader {
                conn: Some(conn),
                path: path.to_path_buf(),
                policy: crate::default_policy(),
                live: false,
                schema_version,
                interrupter: Interrupter::default(),
            });
        }
        if !path.exists() {
            return Err(StoreError::Missing {
                path: path.to_path_buf(),
            });
        }
        crate::sniff(path)?;
        let config = Config::default()
            .access_mode(AccessMode::ReadOnly)
            .and_then(|c| c.enable_external_access(false))
            .and_then(|c| c.enable_autoload_extension(false))
            .and_then(|c| c.with("autoinstall_known_extensions", "false"))
            .and_then(|c| c.max_memory(&opts.memory_limit))
            .and_then(|c| c.threads(opts.threads))
            .ctx(path, "configuring a read-only connection")?;
        let conn = Connection::open_with_flags(path, config).map_err(|e| {
            let msg = e.to_string();
            if msg.contains("not a valid DuckDB database file") || msg.contains("database file") {
                StoreError::NotAStore {
                    path: path.to_path_buf(),
                    why: "not a DuckDB file".into(),
                }
            } else {
                StoreError::Duck {
                    path: path.to_path_buf(),
                    action: "opening read-only",
                    source: e,
                }
            }
        })?;
        let schema_version = crate::check_schema(&conn, path)?;
        // No spilling (a query is bounded by the memory limit, never by the disk), then no
        // setting changes at all.
        conn.execute_batch("SET max_temp_directory_size = '0B'; SET lock_configuration = true")
            .ctx(path, "locking the configuration")?;
        // A read-only open succeeds only while no process writes the file.
        crate::remove_stale_temp_dir(path);
        Ok(Reader {
            conn: Some(conn),
            path: path.to_path_buf(),
            policy: crate::default_policy(),
            live: false,
            schema_version,
            interrupter: Interrupter::default(),
        })
    }

    /// A reader on the database instance a live writer holds (DuckDB lets one process write a
    /// file, and a second instance in the same process would not see later writes). The
    /// instance already has external access and extension autoloading off; this locks its
    /// configuration, and since the file cannot be opened read-only, every guarded query runs
    /// in a transaction that is rolled back, so nothing an outside query does can persist.
    pub(crate) fn from_writer_connection(conn: Connection, path: &Path) -> Result<Reader> {
        let schema_version = crate::check_schema(&conn, path)?;
        // Once per database: a second reader finds it locked, and setting it again would fail.
        let locked: bool = conn
            .query_row("SELECT current_setting('lock_configuration')", [], |r| {
                r.get(0)
            })
            .ctx(path, "reading whether the configuration is locked")?;
        if !locked {
            conn.execute_batch("SET lock_configuration = true")
                .ctx(path, "locking the configuration")?;
        }
        let handle = conn.interrupt_handle();
        Ok(Reader {
            conn: Some(conn),
            path: path.to_path_buf(),
            policy: crate::default_policy(),
            live: true,
            schema_version,
            interrupter: Arc::new(Mutex::new(Some(handle))),
        })
    }

    /// What interrupts the query running on this reader's connection.
    pub fn interrupt_handle(&self) -> Result<std::sync::Arc<duckdb::InterruptHandle>> {
        Ok(self.conn()?.interrupt_handle())
    }

    /// Another connection on the same database (a pool of readers shares one DuckDB instance:
    /// its cache and its memory limit).
    pub fn try_clone(&self) -> Result<Reader> {
        let conn = self
            .conn()?
            .try_clone()
            .ctx(&self.path, "opening another connection")?;
        Ok(Reader {
            conn: Some(conn),
            path: self.path.clone(),
            policy: self.policy.clone(),
            live: self.live,
            schema_version: self.schema_version,
            interrupter: Interrupter::default(),
        })
    }

    /// The connection; an error when a live writer could not reopen the database.
    fn conn(&self) -> Result<&Connection> {
        self.conn.as_ref().ok_or_else(|| StoreError::Closed {
            path: self.path.clone(),
        })
    }

    /// Takes the live reader's connection away (while its writer closes the database) or gives
    /// it one on the database opened again; returns the one it had.
    pub(crate) fn swap_conn(&mut self, conn: Option<Connection>) -> Option<Connection> {
        *self.interrupter.lock().unwrap_or_else(|p| p.into_inner()) =
            conn.as_ref().map(Connection::interrupt_handle);
        std::mem::replace(&mut self.conn, conn)
    }

    /// The interrupt handle of whatever connection this reader holds, kept current across
    /// [`Reader::swap_conn`], for a writer that stops queries without taking the reader's lock.
    pub(crate) fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    /// Whether this reader shares a live writer's database (the trace is still growing).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The file's `meta.schema_version` (tables added by later versions are absent below it).
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The SQL policy of this store (its relations and row limits).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Prepares a compiled-in query. Only `'static` text is accepted, so SQL from outside
    /// cannot reach this path; it must go through [`Reader::query`] as [`GuardedSql`].
    pub fn prepare_trusted(&self, sql: &'static str) -> Result<Statement<'_>> {
        self.conn()?
            .prepare(sql)
            .ctx(&self.path, "preparing an internal query")
    }

    /// Prepares a compiled-in query with integers written into its text: each `?` of `sql`
    /// becomes the next of `ints` as a literal. For filters DuckDB must see as constants to skip
    /// row groups by their min/max (a bound parameter is not pushed into the scan: a range of
    /// sequence numbers read 15x slower as a parameter, printed by causeway-export's
    /// `gather::incremental_timing`). Integers cannot carry SQL, and the text is still only
    /// compiled-in.
    pub fn prepare_trusted_ints(&self, sql: &'static str, ints: &[i64]) -> Result<Statement<'_>> {
        let mut text = String::with_capacity(sql.len() + 20 * ints.len());
        let mut values = ints.iter();
        for part in sql.split_inclusive('?') {
            match part.strip_suffix('?') {
                Some(head) => {
                    text.push_str(head);
                    let v = values
                        .next()
                        .expect("prepare_trusted_ints: fewer integers than placeholders");
                    text.push_str(&v.to_string());
                }
                None => text.push_str(part),
            }
        }
        assert!(
            values.next().is_none(),
            "prepare_trusted_ints: more integers than placeholders"
        );
        self.conn()?
            .prepare(&text)
            .ctx(&self.path, "preparing an internal query")
    }

    /// Runs a guarded query with limits. The guard runs again here (defence in depth).
    pub fn query(&self, sql: &GuardedSql, limits: &QueryLimits) -> Result<QueryResult> {
        self.query_controlled(sql, limits, None)
    }

    /// [`Reader::query`], cancellable from another thread through `control` (a client that
    /// went away). A watchdog interrupts the query at its time limit and when the process's
    /// memory passes the ceiling.
    pub fn query_controlled(
        &self,
        sql: &GuardedSql,
        limits: &QueryLimits,
        control: Option<&QueryControl>,
    ) -> Result<QueryResult> {
        let again = causeway_sqlguard::guard(sql.as_str(), &self.policy, Some(sql.row_limit()))?;
        let row_limit = again.row_limit().min(sql.row_limit()) as usize;
        if control.is_some_and(QueryControl::is_cancelled) {
            return Err(StoreError::Cancelled);
        }
        let started = Instant::now();
        let handle = self.conn()?.interrupt_handle();
        if let Some(c) = control {
            c.attach(handle.clone());
        }
        let watchdog = Watchdog::start(handle, limits);
        let outcome = if self.live {
            self.run_rolled_back(&again, row_limit, limits.max_bytes)
        } else {
            self.run(&again, row_limit, limits.max_bytes)
        };
        let stopped = watchdog.finish();
        if let Some(c) = control {
            c.detach();
        }
        match (outcome, stopped) {
            // A stop that came after DuckDB finished is moot.
            (Ok(mut r), _) => {
                r.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
                Ok(r)
            }
            (Err(_), Some(stop)) => Err(stop),
            (Err(_), None) if control.is_some_and(QueryControl::is_cancelled) => {
                Err(StoreError::Cancelled)
            }
            (Err(e), None) => Err(e),
        }
    }

    fn run_rolled_back(
        &self,
        sql: &GuardedSql,
        row_limit: usize,
        max_bytes: usize,
    ) -> Result<QueryResult> {
        let conn = self.conn()?;
        conn.execute_batch("BEGIN TRANSACTION")
            .map_err(|e| query_error(&e))?;
        let outcome = self.run(sql, row_limit, max_bytes);
        conn.execute_batch("ROLLBACK")
            .map_err(|e| query_error(&e))?;
        outcome
    }

    fn run(&self, sql: &GuardedSql, row_limit: usize, max_bytes: usize) -> Result<QueryResult> {
        let to_err = |e: duckdb::Error| query_error(&e);
        let mut stmt = self.conn()?.prepare(sql.as_str()).map_err(to_err)?;
        let mut rows = stmt.query([]).map_err(to_err)?;
        let columns: Vec<ColumnInfo> = {
            let st = rows.as_ref().ok_or_else(|| StoreError::Query {
                message: "the statement returned no result set".into(),
                hint: "send a query that returns rows".into(),
            })?;
            (0..st.column_count())
                .map(|i| ColumnInfo {
                    name: sanitize(st.column_name(i).map(String::as_str).unwrap_or("?")),
                    type_name: format!("{:?}", st.column_type(i)),
                })
                .collect()
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut truncated_reason = None;
        while let Some(row) = rows.next().map_err(to_err)? {
            if out.len() == row_limit {
                truncated_reason = Some(format!(
                    "more than {row_limit} rows; add LIMIT/OFFSET or aggregate"
                ));
                break;
            }
            let mut cells = Vec::with_capacity(columns.len());
            for i in 0..columns.len() {
                let v = to_json(row.get_ref(i).map_err(to_err)?);
                bytes += json_len(&v);
                cells.push(v);
            }
            if bytes > max_bytes {
                truncated_reason = Some(format!(
                    "result passed {max_bytes} bytes; select fewer columns or rows"
                ));
                break;
            }
            out.push(cells);
        }
        Ok(QueryResult {
            columns,
            truncated: truncated_reason.is_some(),
            truncated_reason,
            rows: out,
            elapsed_ms: 0.0,
        })
    }
}

/// DuckDB's message about a failed query, quoted as data: it may carry text from the trace
/// (`SELECT error(comm) FROM processes` makes a process name the whole message), which must not
/// read as the server's own words.
fn query_error(e: &duckdb::Error) -> StoreError {
    let said = sanitize_with(&e.to_string(), 400);
    let message = format!(
        "DuckDB said {}",
        serde_json::to_string(&said).unwrap_or_default()
    );
    let hint = if message.contains("INTERRUPT") || message.contains("nterrupted") {
        "the query was interrupted; narrow it with WHERE on timestamp or pid"
    } else if message.contains("memory") {
        "the query needs more memory than allowed; aggregate or filter first"
    } else if message.contains("Catalog Error") || message.contains("Binder Error") {
        "check table and column names: SELECT table_name, column_name, meaning FROM schema_columns"
    } else {
        "check the SQL; the schema_columns and ops tables document every column and op"
    };
    StoreError::Query {
        message,
        hint: hint.into(),
    }
}

fn json_len(v: &serde_json::Value) -> usize {
    let n = match v {
        serde_json::Value::String(s) => s.len() + 2,
        serde_json::Value::Null => 4,
        other => other.to_string().len(),
    };
    n + 1
}

fn ts_to_string(unit: TimeUnit, v: i64) -> String {
    let ns: i128 = match unit {
        TimeUnit::Second => v as i128 * 1_000_000_000,
        TimeUnit::Millisecond => v as i128 * 1_000_000,
        TimeUnit::Microsecond => v as i128 * 1_000,
        TimeUnit::Nanosecond => v as i128,
    };
    let secs = ns.div_euclid(1_000_000_000) as i64;
    let sub = ns.rem_euclid(1_000_000_000) as u32;
    match std::time::UNIX_EPOCH.checked_add(Duration::new(secs.max(0) as u64, sub)) {
        Some(t) if secs >= 0 => humantime::format_rfc3339_nanos(t).to_string(),
        _ => format!("{ns}ns"),
    }
}

/// Converts one DuckDB cell to JSON; strings are sanitised.
fn to_json(v: ValueRef<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        ValueRef::Null => J::Null,
        ValueRef::Boolean(b) => J::Bool(b),
        ValueRef::TinyInt(i) => J::from(i),
        ValueRef::SmallInt(i) => J::from(i),
        ValueRef::Int(i) => J::from(i),
        ValueRef::BigInt(i) => J::from(i),
        ValueRef::HugeInt(i) => i64::try_from(i)
            .map(J::from)
            .unwrap_or_else(|_| J::String(i.to_string())),
        ValueRef::UTinyInt(i) => J::from(i),
        ValueRef::USmallInt(i) => J::from(i),
        ValueRef::UInt(i) => J::from(i),
        ValueRef::UBigInt(i) => J::from(i),
        ValueRef::Float(f) => serde_json::Number::from_f64(f as f64)
            .map(J::Number)
            .unwrap_or(J::Null),
        ValueRef::Double(f) => serde_json::Number::from_f64(f)
            .map(J::Number)
            .unwrap_or(J::Null),
        ValueRef::Text(t) => J::String(sanitize(&String::from_utf8_lossy(t))),
        ValueRef::Blob(b) => J::String(format!("<{} bytes>", b.len())),
        ValueRef::Timestamp(unit, v) => J::String(ts_to_string(unit, v)),
        other => {
            let owned: duckdb::types::Value = other.to_owned();
            J::String(sanitize(&value_to_string(&owned)))
        }
    }
}

fn value_to_string(v: &duckdb::types::Value) -> String {
    use duckdb::types::Value as V;
    match v {
        V::Null => "NULL".into(),
        V::Text(s) => s.clone(),
        V::Enum(s) => s.clone(),
        V::List(items) | V::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(value_to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => format!("{other:?}"),
    }
}
