//! What a tool runs against: the default trace, the directories of other traces it may open
//! (by name only, never by a path an agent sends), the test-report location, and a cache of
//! open read-only readers so repeated calls do not reopen DuckDB.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use causeway_store::Reader;
use schemars::JsonSchema;
use serde::Serialize;

use crate::check::Checker;
use crate::error::ToolError;
use crate::fleet::FleetHandle;

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
    readers: Mutex<HashMap<PathBuf, Arc<Mutex<Reader>>>>,
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
            readers: Mutex::new(HashMap::new()),
        }
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

    /// Where the self-test report lives.
    pub fn test_report_path(&self) -> &Path {
        &self.test_report
    }

    /// Every trace this server can open: the default first, then the directories' `*.duckdb`
    /// files sorted by name (a name already taken is skipped).
    pub fn traces(&self) -> Vec<TraceEntry> {
        let mut out = vec![entry(&self.default_db, true)];
        let mut found: Vec<PathBuf> = Vec::new();
        for dir in &self.traces_dirs {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "duckdb") && p.is_file() {
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

    /// Serves `reader` for its file from now on: a live recording's reader, which shares the
    /// writer's database (opening the file again would not see the rows still being written).
    pub fn insert_reader(&self, reader: causeway_store::SharedReader) {
        let path = reader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .path()
            .to_path_buf();
        let mut map = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(path, reader);
    }

    /// Runs `f` with the (cached) reader of a trace.
    pub fn with_reader<T>(
        &self,
        trace: Option<&str>,
        f: impl FnOnce(&Reader) -> Result<T, ToolError>,
    ) -> Result<T, ToolError> {
        let path = self.resolve(trace)?;
        let reader = {
            let mut map = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&path) {
                Some(r) => r.clone(),
                None => {
                    let r = Arc::new(Mutex::new(Reader::open(&path)?));
                    map.insert(path.clone(), r.clone());
                    r
                }
            }
        };
        let guard = reader.lock().unwrap_or_else(|p| p.into_inner());
        f(&guard)
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
