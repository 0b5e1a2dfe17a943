//! What a tool runs against: the default trace, the directories of other traces it may open
//! (by name only, never by a path an agent sends), the test-report location, and a pool of
//! read connections per trace (`pool.rs`) so calls run side by side without reopening DuckDB.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use causeway_store::{QueryControl, QueryLimits, QueryResult, Reader, ReaderOptions};
use schemars::JsonSchema;
use serde::Serialize;

use crate::check::Checker;
use crate::error::ToolError;
use crate::fleet::FleetHandle;
use crate::pool::{ACQUIRE_WAIT, Pool};

thread_local! {
    /// The control of the tool call running on this thread ([`with_control`]): readers taken
    /// during the call attach their connection to it, so cancelling the call interrupts them.
    static CONTROL: RefCell<Option<Arc<QueryControl>>> = const { RefCell::new(None) };
}

/// Runs `f` (one tool call) with `control` as the current call's control.
pub fn with_control<T>(control: Arc<QueryControl>, f: impl FnOnce() -> T) -> T {
    let previous = CONTROL.with(|c| c.replace(Some(control)));
    let out = f();
    CONTROL.with(|c| *c.borrow_mut() = previous);
    out
}

fn current_control() -> Option<Arc<QueryControl>> {
    CONTROL.with(|c| c.borrow().clone())
}

/// One trace this server can open.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq)]
pub struct TraceEntry {
    /// Name to pass as `trace`.
    pub name: String,
    /// File path.
    pub path: String,
    /// File size in bytes.
    pub size_bytes: u64,
    /// True for the server's --db trace (used when `trace` is omitted).
    pub default: bool,
}

/// The environment of every tool call.
pub struct Context {
    default_db: PathBuf,
    traces_dirs: Vec<PathBuf>,
    test_report: PathBuf,
    checker: Option<Checker>,
    fleet: Option<FleetHandle>,
    pools: Mutex<HashMap<PathBuf, Arc<Pool>>>,
    sql_limits: QueryLimits,
    reader_options: ReaderOptions,
    prices: causeway_analysis::cost::Prices,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("default_db", &self.default_db)
            .field("traces_dirs", &self.traces_dirs)
            .field("test_report", &self.test_report)
            .field("checker", &self.checker.is_some())
            .field("fleet", &self.fleet)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context serving `default_db`, plus every `*.duckdb` file in `traces_dirs`.
    pub fn new(default_db: PathBuf, traces_dirs: Vec<PathBuf>) -> Context {
        Context {
            default_db,
            traces_dirs,
            test_report: crate::report::default_path(),
            checker: None,
            fleet: None,
            pools: Mutex::new(HashMap::new()),
            sql_limits: crate::sql::agent_limits(),
            // One DuckDB thread per connection: concurrent calls then share the cores through
            // the kernel's scheduler instead of queueing in one DuckDB task queue.
            reader_options: ReaderOptions {
                threads: 1,
                ..ReaderOptions::default()
            },
            prices: causeway_analysis::cost::Prices::default(),
        }
    }

    /// Sets the prices per GPU-hour the findings' cost is priced at (`[cost]` of the config).
    pub fn with_prices(mut self, prices: causeway_analysis::cost::Prices) -> Context {
        self.prices = prices;
        self
    }

    /// The prices per GPU-hour of the findings' cost.
    pub fn prices(&self) -> &causeway_analysis::cost::Prices {
        &self.prices
    }

    /// Sets the limits of SQL from outside (`run_sql`): time, result bytes, memory ceiling.
    pub fn with_sql_limits(mut self, limits: QueryLimits) -> Context {
        self.sql_limits = limits;
        self
    }

    /// The limits of SQL from outside.
    pub fn sql_limits(&self) -> &QueryLimits {
        &self.sql_limits
    }

    /// What the traces' readers are opened with (the served queries' DuckDB memory).
    pub fn reader_options(&self) -> &ReaderOptions {
        &self.reader_options
    }

    /// Sets how the connections to finished recordings are opened (DuckDB memory limit).
    pub fn with_reader_options(mut self, options: ReaderOptions) -> Context {
        self.reader_options = options;
        self
    }

    /// Overrides where the self-test report is read from.
    pub fn with_test_report(mut self, path: PathBuf) -> Context {
        self.test_report = path;
        self
    }

    /// Sets what inspects the machine for `get_check` (the collector's check, from the binary).
    pub fn with_checker(mut self, checker: Checker) -> Context {
        self.checker = Some(checker);
        self
    }

    /// What inspects the machine, if this context has it.
    pub fn checker(&self) -> Option<&Checker> {
        self.checker.as_ref()
    }

    /// Sets the fleet `query_fleet` fans out to (the binary's HTTP client); without one the
    /// tool is not listed.
    pub fn with_fleet(mut self, fleet: FleetHandle) -> Context {
        self.fleet = Some(fleet);
        self
    }

    /// The fleet, if this server was started with one.
    pub fn fleet(&self) -> Option<&FleetHandle> {
        self.fleet.as_ref()
    }

    /// The default trace file.
    pub fn default_db(&self) -> &Path {
        &self.default_db
    }

    /// The directories searched for more traces.
    pub fn traces_dirs(&self) -> &[PathBuf] {
        &self.traces_dirs
    }

    /// Where the self-test report lives.
    pub fn test_report_path(&self) -> &Path {
        &self.test_report
    }

    /// Every trace this server can open: the default first, then the directories' `*.duckdb`
    /// files sorted by name (a name already taken is skipped).
    pub fn traces(&self) -> Vec<TraceEntry> {
        // The CLI's `traces` may have no default (an empty path).
        let mut out: Vec<TraceEntry> = (!self.default_db.as_os_str().is_empty())
            .then(|| entry(&self.default_db, true))
            .into_iter()
            .collect();
        let mut found: Vec<PathBuf> = Vec::new();
        for dir in &self.traces_dirs {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                // Only files DuckDB would open: a stray or half-copied file is not a trace.
                if p.extension().is_some_and(|x| x == "duckdb")
                    && p.is_file()
                    && causeway_store::looks_like_store(&p)
                {
                    found.push(p);
                }
            }
        }
        found.sort();
        for p in found {
            let e = entry(&p, false);
            let same_file = same(&p, &self.default_db);
            if !same_file && !out.iter().any(|o| o.name == e.name) {
                out.push(e);
            }
        }
        out
    }

    /// Resolves a trace name (None = the default trace) to its file.
    pub fn resolve(&self, trace: Option<&str>) -> Result<PathBuf, ToolError> {
        let Some(name) = trace.filter(|t| !t.is_empty()) else {
            return Ok(self.default_db.clone());
        };
        self.traces()
            .into_iter()
            .find(|t| t.name == name)
            .map(|t| PathBuf::from(t.path))
            .ok_or_else(|| {
                ToolError::failed(
                    format!(
                        "no trace named '{}'",
                        causeway_store::sanitize::sanitize_with(name, 80)
                    ),
                    "call list_traces for the names this server can open",
                )
            })
    }

    /// Serves a live recording's `readers` for their file from now on (opening the file again
    /// would not see the rows still being written).
    pub fn insert_readers(&self, readers: Vec<causeway_store::SharedReader>) {
        let pool = Pool::live(readers);
        let Some(path) = pool.path() else { return };
        let mut map = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(path, Arc::new(pool));
    }

    /// Serves a live recording's `readers` as the trace at `path` (the agent's data
    /// directory, whose open segment changes as the recording rolls).
    pub fn insert_readers_as(&self, path: PathBuf, readers: Vec<causeway_store::SharedReader>) {
        let pool = Pool::live(readers);
        let mut map = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(path, Arc::new(pool));
    }

    /// The pool of a trace, opened on first use.
    fn pool(&self, trace: Option<&str>) -> Result<Arc<Pool>, ToolError> {
        let path = self.resolve(trace)?;
        let mut map = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(&path) {
            return Ok(p.clone());
        }
        let pool = Arc::new(Pool::open(&path, &self.reader_options)?);
        map.insert(path, pool.clone());
        Ok(pool)
    }

    /// Runs `f` with a connection of a trace to itself. Cancelling the current call (see
    /// [`with_control`]) interrupts what `f` runs on it.
    pub fn with_reader<T>(
        &self,
        trace: Option<&str>,
        f: impl FnOnce(&Reader) -> Result<T, ToolError>,
    ) -> Result<T, ToolError> {
        let lease = self.pool(trace)?.acquire(ACQUIRE_WAIT)?;
        let reader = lease.lock().unwrap_or_else(|p| p.into_inner());
        let control = current_control();
        if let Some(c) = &control {
            if c.is_cancelled() {
                return Err(causeway_store::StoreError::Cancelled.into());
            }
            c.attach(reader.interrupt_handle()?);
        }
        let out = f(&reader);
        if let Some(c) = &control {
            c.detach();
        }
        out
    }

    /// Runs SQL from outside: guarded, on a connection of its own, on its own thread, answered
    /// within `limits.timeout` plus 0.75 s whatever DuckDB does (a query that ignores its
    /// interrupt is abandoned), stopped when the current call is cancelled. What `run_sql`
    /// and `causeway query` share.
    pub fn run_guarded(
        &self,
        trace: Option<&str>,
        sql: &str,
        limit: Option<u64>,
        limits: &QueryLimits,
    ) -> Result<QueryResult, ToolError> {
        let guarded = causeway_sqlguard::guard(sql, &causeway_store::default_policy(), limit)?;
        let lease = self.pool(trace)?.acquire(ACQUIRE_WAIT)?;
        let control = current_control().unwrap_or_default();
        Ok(causeway_store::query_detached(
            lease,
            guarded,
            limits.clone(),
            control,
        )?)
    }
}

fn entry(p: &Path, default: bool) -> TraceEntry {
    TraceEntry {
        name: p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into()),
        path: p.display().to_string(),
        size_bytes: std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        default,
    }
}

fn same(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}
