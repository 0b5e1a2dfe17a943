//! causeway's trace store: one embedded DuckDB file per trace, its schema and op catalogue, the
//! single batched writer (with typed writes for every table) and the locked-down reader that
//! runs only compiled-in or guarded SQL.

mod atomic;
mod batch;
pub mod catalog;
pub mod clock;
mod device;
mod error;
pub mod guarded;
pub mod merge;
mod overhead_log;
pub mod paths;
mod reader;
pub mod received;
mod row;
mod rows;
pub mod sanitize;
pub mod schema;
pub mod steps;
pub mod symbols;
pub mod timeline;
mod writer;

use std::path::Path;

pub use atomic::{remove_unfinished, write_atomically};
pub use device::{Correlation, GpuActivity, GpuKind, Range, Step};
pub use error::{Hinted, Result, StoreError};
pub use guarded::{QueryControl, query_detached};
pub use overhead_log::{
    InSituRow, KernelName, LibraryAttach, ModeSwitch, OverheadWindow, ProbeCost, SampledWindow,
    TaskName,
};
pub use reader::{ColumnInfo, QueryLimits, QueryResult, Reader, ReaderOptions};
pub use row::{FromRow, row};
pub use rows::{
    CgroupInfo, CgroupSchedstat, ChainRow, Event, Frame, HistogramBucket, OpCount, ProcessInfo,
    PythonFrame, PythonStack, SessionInfo, SessionRow, SystemSnapshot,
};
pub use writer::{
    LIVE_READERS, MAX_EVENT_DURATION_NS, MAX_TIMESTAMP_NS, REOPEN_ROWS, SharedReader, Writer,
    WriterOptions,
};

use error::DuckContext;

/// The DuckDB crate this store is built on, for compiled-in queries in sibling crates.
pub use duckdb;

/// The SQL policy for every store: its own relations only, default row caps, and the
/// reference tool's op names refused with ours.
pub fn default_policy() -> causeway_sqlguard::Policy {
    causeway_sqlguard::Policy::new(schema::RELATIONS.iter().copied()).with_renamed(
        catalog::OPS
            .iter()
            .filter(|o| !o.reference_name.is_empty() && o.reference_name != o.name)
            .map(|o| (o.reference_name, o.name)),
    )
}

/// This machine's node name: `CAUSEWAY_NODE`, else the hostname, else "local".
pub fn default_node_name() -> String {
    if let Ok(n) = std::env::var("CAUSEWAY_NODE")
        && !n.trim().is_empty()
    {
        return n.trim().to_string();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "local".into())
}

/// Now, in ns since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Block size of new store files, in bytes (DuckDB's default is 256 KiB). Row groups leave
/// blocks partly filled, and an open index holds a block-sized buffer per node type: with
/// 64 KiB blocks the benchmarks' files are 12-45% smaller, and queries are no slower
/// (docs/benchmarks.md). Files keep the block size they were made with.
const BLOCK_SIZE: &str = "65536";

/// An address in the code of the DuckDB library this build runs: in libduckdb.so, or in this
/// executable when DuckDB is compiled in. The collector finds the library's mappings by it to
/// give back the pages a database opening touched (crates/collector/src/trim.rs).
pub fn duckdb_code_address() -> usize {
    duckdb::ffi::duckdb_open as *const () as usize
}

/// Opens a read-write connection with autoloading and external access off, new files in
/// [`BLOCK_SIZE`] blocks, and the DuckDB settings of `opts` (memory limit, threads).
pub(crate) fn open_rw(path: &Path, opts: &WriterOptions) -> Result<duckdb::Connection> {
    // The temporary directory stays DuckDB's default (`PATH.tmp`, removed on close): rows
    // committed in pieces smaller than a row group stay in memory until a checkpoint writes
    // them, and without a place to spill them a writer under `memory_limit` fails its commits
    // (seen at ~25k events/s on a 16-core machine; `small_commits_stay_under_the_memory_limit`).
    let config = duckdb::Config::default()
        .with("default_block_size", BLOCK_SIZE)
        .and_then(|c| c.enable_autoload_extension(false))
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        // A timeline's segments are attached first; file access is turned off right after.
        .and_then(|c| c.enable_external_access(!opts.timeline.is_empty()))
        .and_then(|c| match &opts.memory_limit {
            Some(m) => c.max_memory(m),
            None => Ok(c),
        })
        .and_then(|c| match opts.threads {
            Some(n) => c.threads(i64::from(n)),
            None => Ok(c),
        })
        .ctx(path, "configuring the writer")?;
    let conn =
        duckdb::Connection::open_with_flags(path, config).ctx(path, "opening for writing")?;
    if !opts.timeline.is_empty() {
        timeline::attach_to_live(&conn, path, &opts.timeline)?;
        conn.execute_batch("SET enable_external_access = false")
            .ctx(path, "turning file access off")?;
    }
    remove_stale_temp_dir(path);
    Ok(conn)
}

/// DuckDB's temporary directory of a store (`PATH.tmp`): only a writer uses it (readers do not
/// spill), and DuckDB removes it when the database closes.
pub(crate) fn temp_dir_of(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".tmp");
    std::path::PathBuf::from(p)
}

/// Removes the temporary directory a killed writer left. Called once this process holds the
/// file (a writer's lock, or a read-only open that no writer blocks), when nobody else can be
/// using the directory.
pub(crate) fn remove_stale_temp_dir(path: &Path) {
    let tmp = temp_dir_of(path);
    if tmp.is_dir() {
        match std::fs::remove_dir_all(&tmp) {
            Ok(()) => {
                tracing::info!(dir = %tmp.display(), "removed the temporary directory a killed writer left")
            }
            Err(e) => {
                tracing::warn!(dir = %tmp.display(), error = %e, "cannot remove a stale temporary directory")
            }
        }
    }
}

/// Looks at a file's header before DuckDB does: a reference trace (SQLite) gets its own error
/// (DuckDB would answer "loading external extensions is disabled", trying its SQLite scanner),
/// and any other file that is not DuckDB's is named as such.
pub(crate) fn sniff(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            action: "reading the file header",
            source,
        })?;
    if head.starts_with(b"SQLite format 3\0") {
        return Err(StoreError::ReferenceTrace {
            path: path.to_path_buf(),
        });
    }
    // DuckDB's main header: an 8-byte checksum, then the magic "DUCK".
    if n >= 12 && &head[8..12] != b"DUCK" || (n > 0 && n < 12) {
        return Err(StoreError::NotAStore {
            path: path.to_path_buf(),
            why: "not a DuckDB file".into(),
        });
    }
    Ok(())
}

/// Whether `path` is a DuckDB file (by its header; nothing is opened with DuckDB).
pub fn looks_like_store(path: &Path) -> bool {
    sniff(path).is_ok() && std::fs::metadata(path).is_ok_and(|m| m.len() >= 12)
}

/// Verifies the file is a causeway store of a version this build reads (from
/// [`schema::MIN_VERSION`], the event layout this build knows, up to [`schema::SCHEMA_VERSION`]);
/// returns its version.
pub(crate) fn check_schema(conn: &duckdb::Connection, path: &Path) -> Result<u32> {
    let version: std::result::Result<String, _> = conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    );
    let version = version.map_err(|_| StoreError::NotAStore {
        path: path.to_path_buf(),
        why: "no meta.schema_version".into(),
    })?;
    let found: u32 = version.parse().map_err(|_| StoreError::NotAStore {
        path: path.to_path_buf(),
        why: format!("schema_version '{version}' is not a number"),
    })?;
    if found > schema::SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: schema::SCHEMA_VERSION,
        });
    }
    if found < schema::MIN_VERSION {
        return Err(StoreError::OlderSchema {
            path: path.to_path_buf(),
            found,
            supported: schema::SCHEMA_VERSION,
        });
    }
    Ok(found)
}
