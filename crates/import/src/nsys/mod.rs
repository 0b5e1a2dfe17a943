//! Imports Nsight Systems SQLite exports (`nsys export --type sqlite`): CUDA runtime and driver
//! calls into `events` (catalogue op names, correlation ids in `correlations`), kernels, copies,
//! memsets and synchronisations into `gpu_activity`, NVTX and OS runtime ranges into `ranges`,
//! thread and process names, the GPU model and the capture's wall-clock start. docs/import.md
//! has the mapping.
//!
//! nsys's tables and columns differ between versions (and tables are created only for what was
//! traced), so the schema is read from the file: a table the import needs that is absent, or a
//! column it needs that a table lacks, is named in the error.

mod load;
mod schema;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sqlite::{SqliteDb, classify};
use crate::{ImportError, ImportOptions};
use schema::Schema;

/// What can go wrong reading an Nsight Systems export.
#[derive(Debug, thiserror::Error)]
pub enum NsysError {
    /// A table every export the importer reads has is absent (another nsys version, or not nsys).
    #[error("{path}: nsys export lacks table {table}")]
    MissingTable {
        /// The source file.
        path: PathBuf,
        /// The table.
        table: &'static str,
    },
    /// A table the import reads lacks a column it needs.
    #[error("{path}: nsys export's table {table} lacks column {column}")]
    MissingColumn {
        /// The source file.
        path: PathBuf,
        /// The table.
        table: &'static str,
        /// The column (or the alternatives, `text or textId`).
        column: &'static str,
    },
    /// No table the import maps holds a row.
    #[error("{path}: nsys export holds no CUDA, NVTX or OS runtime trace (nothing to import)")]
    Empty {
        /// The source file.
        path: PathBuf,
    },
}

impl causeway_hint::Hint for NsysError {
    /// What to do about it.
    fn hint(&self) -> Option<String> {
        Some(
            match self {
                Self::MissingTable { .. } | Self::MissingColumn { .. } => {
                    "export the report again with `nsys export --type sqlite REPORT.nsys-rep`; nvprof databases are not read. The file's nsys version is in its META_DATA_EXPORT (or EXPORT_META_DATA) table"
                }
                Self::Empty { .. } => {
                    "profile with CUDA tracing on (`nsys profile -t cuda,nvtx,osrt ...`) and export again"
                }
            }
            .to_string(),
        )
    }
}

causeway_hint::register!(NsysError);

/// What the nsys importer found in one export, beside [`crate::SourceReport`]'s counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NsysReport {
    /// `EXPORT_PRODUCT_VERSION` of the export's metadata (the nsys that exported it).
    pub version: String,
    /// `EXPORT_SCHEMA_VERSION` of the export's metadata.
    pub schema_version: String,
    /// `TARGET_INFO_SESSION_START_TIME.utcEpochNs`, added to every timestamp (None: absent, so
    /// times are ns since the capture's start).
    pub session_start_ns: Option<i64>,
    /// Rows of each table read.
    pub tables: BTreeMap<String, u64>,
    /// CUDA runtime and driver calls in the file (stored as events, or skipped for an op unknown
    /// to the catalogue, or invalid).
    pub runtime_calls: u64,
    /// Kernels stored in `gpu_activity`.
    pub kernels: u64,
    /// Copies stored in `gpu_activity`.
    pub memcpys: u64,
    /// Memsets stored in `gpu_activity`.
    pub memsets: u64,
    /// Device-side synchronisations stored in `gpu_activity`.
    pub syncs: u64,
    /// NVTX ranges stored in `ranges`.
    pub nvtx_ranges: u64,
    /// NVTX `ProfilerStep#N` ranges stored as `steps` (source `nvtx`).
    pub steps: u64,
    /// OS runtime calls stored in `ranges`.
    pub osrt_ranges: u64,
    /// Ranges written out of start order on their thread.
    pub ranges_out_of_order: u64,
    /// Rows not imported: whole tables by name (`SCHED_EVENTS`), rows of read tables by
    /// `TABLE/why` (`CUPTI_ACTIVITY_KIND_RUNTIME/eventClass 67`, `NVTX_EVENTS/NvtxMark`).
    pub not_imported: BTreeMap<String, u64>,
}

/// Tables whose rows become store rows.
const MAPPED: &[&str] = &[
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
];

/// Whether an SQLite file with these tables is an nsys export rather than a reference trace:
/// no `events` table, and nsys's string table or one of its trace tables.
pub(crate) fn is_nsys(tables: &HashSet<String>) -> bool {
    !tables.contains("events")
        && tables.iter().any(|t| {
            t == "StringIds"
                || t == "NVTX_EVENTS"
                || t == "ThreadNames"
                || t.starts_with("CUPTI_ACTIVITY_KIND_")
                || t.starts_with("TARGET_INFO_")
        })
}

/// An Nsight Systems export, checked and ready to import.
#[derive(Debug)]
pub struct NsysTrace {
    path: PathBuf,
    conn: rusqlite::Connection,
    /// A private copy when SQLite had a log to replay (see the reference reader).
    _copy: Option<tempfile::TempDir>,
    schema: Schema,
    /// Rows of every table the import maps.
    rows: BTreeMap<String, u64>,
    /// Rows of the tables it does not read, when any.
    unread: BTreeMap<String, u64>,
    /// Export metadata (`META_DATA_EXPORT` / `EXPORT_META_DATA`): name -> value.
    meta: HashMap<String, String>,
    /// `TARGET_INFO_SESSION_START_TIME.utcEpochNs`.
    session_start: Option<i64>,
    /// The profiled host (`TARGET_INFO_SYSTEM_ENV` Hostname).
    host: Option<String>,
}

/// Tables read for names, metadata or lookups (not counted as "not imported").
const LOOKUPS: &[&str] = &[
    "StringIds",
    "ThreadNames",
    "PROCESSES",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
];

impl NsysTrace {
    /// Reads the export's schema and metadata; fails on a file the import cannot read whole,
    /// before anything is written.
    pub(crate) fn open(path: &Path, db: SqliteDb) -> Result<NsysTrace, ImportError> {
        let SqliteDb { conn, copy, tables } = db;
        let sq = |e| classify(path, e);
        // The import sorts each table by start and joins calls to their device rows; the
        // bundled SQLite keeps such temporary tables in memory, which would grow with the
        // export: on disk (TMPDIR) they stay within SQLite's page cache.
        conn.pragma_update(None, "temp_store", "FILE").map_err(sq)?;
        let schema = Schema::read(path, &conn, &tables)?;
        let mut rows = BTreeMap::new();
        let mut unread = BTreeMap::new();
        let mut names: Vec<&String> = tables.iter().collect();
        names.sort();
        for t in names {
            // Lookup and enum tables are small and read as needed; SQLite's own are not data.
            if LOOKUPS.contains(&t.as_str()) || t.starts_with("ENUM_") || t.starts_with("sqlite_") {
                continue;
            }
            let n: i64 = conn
                .query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get(0))
                .map_err(sq)?;
            if MAPPED.contains(&t.as_str()) {
                rows.insert(t.clone(), n as u64);
            } else if n > 0 {
                unread.insert(t.clone(), n as u64);
            }
        }
        if rows.values().all(|n| *n == 0) {
            return Err(NsysError::Empty {
                path: path.to_path_buf(),
            }
            .into());
        }
        let meta = schema.meta(&conn).map_err(sq)?;
        let session_start = schema.session_start(&conn).map_err(sq)?;
        let host = schema.host(&conn).map_err(sq)?;
        Ok(NsysTrace {
            path: path.to_path_buf(),
            conn,
            _copy: copy,
            schema,
            rows,
            unread,
            meta,
            session_start,
            host,
        })
    }

    /// Rows of the tables the import maps, for progress.
    pub fn row_count(&self) -> u64 {
        self.rows.values().sum()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The node its rows get: `--node`, else the profiled host's name, else the file's name
    /// without its extension.
    pub fn default_node(&self, opts: &ImportOptions) -> String {
        if let Some(n) = &opts.node {
            return n.clone();
        }
        if let Some(h) = self.host.as_ref().filter(|h| !h.trim().is_empty()) {
            return h.trim().to_string();
        }
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "imported".into())
    }

    /// `nsys VERSION (export schema S)`, as far as the metadata says.
    fn tool_version(&self) -> String {
        let v = self.meta_value("EXPORT_PRODUCT_VERSION");
        let s = self.meta_value("EXPORT_SCHEMA_VERSION");
        match (v.is_empty(), s.is_empty()) {
            (false, false) => format!("nsys {v} (export schema {s})"),
            (false, true) => format!("nsys {v}"),
            (true, false) => format!("nsys (export schema {s})"),
            (true, true) => "nsys".into(),
        }
    }

    fn meta_value(&self, key: &str) -> String {
        self.meta.get(key).cloned().unwrap_or_default()
    }
}

/// pid of an nsys serialized global thread or process id: bits 24-47 (the export
/// documentation's "Serialized process and thread identifiers": `(globalTid >> 24) & 0xFFFFFF`).
pub(crate) fn global_pid(global: i64) -> i64 {
    (global >> 24) & 0xFF_FFFF
}

/// tid of an nsys serialized global thread id: its low 24 bits.
pub(crate) fn global_tid(global: i64) -> i64 {
    global & 0xFF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_split_as_documented() {
        // From a real export: the thread "MPI Rank 0" of process 1230493.
        let g = 302_119_224_788_637;
        assert_eq!((global_pid(g), global_tid(g)), (1_230_493, 1_230_493));
        // Its process's globalPid has the thread bits clear.
        assert_eq!(global_pid(302_119_223_558_144), 1_230_493);
        assert_eq!(global_tid(302_119_223_558_144), 0);
    }

    #[test]
    fn nsys_is_told_from_reference_traces_by_tables() {
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        assert!(is_nsys(&set(&["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL"])));
        assert!(is_nsys(&set(&["CUPTI_ACTIVITY_KIND_RUNTIME"])));
        assert!(!is_nsys(&set(&["events", "sessions", "ops"])));
        assert!(!is_nsys(&set(&["people"])));
    }
}
