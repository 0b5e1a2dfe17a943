//! Imports traces into a new causeway store, through a temp file renamed on success: trace
//! databases recorded by the reference tool (SQLite, every schema vintage seen: integer or
//! `node:seq` event ids, with or without node/comm/cgroup_id/stack_ips/rank columns and aggregate
//! tables) through the `reference` module, PyTorch profiler (Kineto) traces through [`kineto`],
//! Nsight Systems SQLite exports through [`nsys`]; `input` tells the formats apart. This file is
//! the entry point ([`import`]), its options, reports and errors.

mod counts;
mod input;
pub mod kineto;
pub mod nsys;
mod reference;
mod repeats;
mod skips;
mod sqlite;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use causeway_store::{StoreError, Writer, WriterOptions};
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
    repeats::refuse_repeats(sources)?;
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
