//! What each source of `causeway import` is, told by content rather than by name: a reference
//! trace (SQLite with an `events` table), an Nsight Systems export (SQLite with nsys's tables), a
//! PyTorch profiler trace (Kineto JSON, plain or gzipped), or a directory of profiler traces (one
//! per rank).

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use causeway_store::Writer;

use crate::kineto::{self, KinetoError, KinetoTrace};
use crate::nsys::{self, NsysTrace};
use crate::reference::SqliteTrace;
use crate::{ImportError, ImportOptions, Progress, SourceReport};

/// One source, opened and checked.
pub(crate) enum Input {
    /// The reference tool's SQLite trace.
    Sqlite(SqliteTrace),
    /// A PyTorch profiler trace.
    Kineto(KinetoTrace),
    /// An Nsight Systems SQLite export.
    Nsys(NsysTrace),
}

/// The first bytes of a file, as many as it has up to 16.
fn head(path: &Path) -> Option<Vec<u8>> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 16];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    buf.truncate(n);
    Some(buf)
}

/// The sources with each directory replaced by the profiler traces in it (by content, in name
/// order; other files there are left out).
pub(crate) fn expand(sources: &[PathBuf]) -> Result<Vec<PathBuf>, ImportError> {
    let mut out = Vec::new();
    for src in sources {
        if !src.is_dir() {
            out.push(src.clone());
            continue;
        }
        let entries = std::fs::read_dir(src).map_err(|source| ImportError::Unreadable {
            path: src.clone(),
            source,
        })?;
        let mut traces: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .filter(|p| head(p).is_some_and(|h| kineto::sniff(&h).is_some()))
            .collect();
        if traces.is_empty() {
            return Err(KinetoError::EmptyDirectory { path: src.clone() }.into());
        }
        traces.sort();
        tracing::info!(dir = %src.display(), traces = traces.len(), "importing the profiler traces of a directory");
        out.extend(traces);
    }
    Ok(out)
}

impl Input {
    /// Opens `path` as what its content says it is.
    pub(crate) fn open(path: &Path, opts: &ImportOptions) -> Result<Input, ImportError> {
        let is_file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        if is_file && let Some(container) = head(path).as_deref().and_then(kineto::sniff) {
            return Ok(Input::Kineto(KinetoTrace::open(
                path,
                container,
                opts.json_limits,
            )?));
        }
        // Everything else is judged (and named) by the SQLite reader; both SQLite formats start
        // `SQLite format 3`, so their tables tell them apart.
        let db = crate::sqlite::open_sqlite(path)?;
        if nsys::is_nsys(&db.tables) {
            return Ok(Input::Nsys(NsysTrace::open(path, db)?));
        }
        Ok(Input::Sqlite(SqliteTrace::open(path, db)?))
    }

    /// Events (SQLite), trace events (Kineto) or rows of the tables read (nsys) to go through,
    /// for progress.
    pub(crate) fn event_count(&self) -> u64 {
        match self {
            Input::Sqlite(s) => s.event_count,
            Input::Kineto(k) => k.event_count(),
            Input::Nsys(n) => n.row_count(),
        }
    }

    /// The node the source's rows get unless they name their own.
    pub(crate) fn default_node(&self, opts: &ImportOptions) -> String {
        match self {
            Input::Sqlite(s) => s.default_node(opts),
            Input::Kineto(k) => k.default_node(opts),
            Input::Nsys(n) => n.default_node(opts),
        }
    }

    /// Writes the source into `w`.
    pub(crate) fn copy_into(
        &self,
        w: &mut Writer,
        seen_stacks: &mut HashSet<i64>,
        opts: &ImportOptions,
        done: &mut u64,
        total: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SourceReport, ImportError> {
        match self {
            Input::Sqlite(s) => s.copy_into(w, seen_stacks, opts, done, total, progress),
            Input::Kineto(k) => k.copy_into(w, opts, done, total, progress),
            Input::Nsys(n) => n.copy_into(w, opts, done, total, progress),
        }
    }
}
