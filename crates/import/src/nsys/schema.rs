//! What one nsys export's schema holds: which tables and columns exist (they differ between
//! nsys versions and with what was traced), the SQL that reads a column or NULL where the
//! version lacks it, and the small tables read whole: metadata, names, enum labels, GPUs.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::NsysError;
use crate::ImportError;
use crate::sqlite::classify;

/// Columns each mapped table must have, when the table is present. Everything else is read
/// when present and NULL otherwise.
const REQUIRED: &[(&str, &[&str])] = &[
    (
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        &["start", "end", "globalTid", "nameId"],
    ),
    (
        "CUPTI_ACTIVITY_KIND_DRIVER",
        &["start", "end", "globalTid", "nameId"],
    ),
    (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        &["start", "end", "deviceId", "streamId", "demangledName"],
    ),
    (
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        &["start", "end", "deviceId", "streamId", "bytes", "copyKind"],
    ),
    (
        "CUPTI_ACTIVITY_KIND_MEMSET",
        &["start", "end", "deviceId", "streamId", "bytes"],
    ),
    (
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        &["start", "end", "deviceId", "streamId"],
    ),
    ("NVTX_EVENTS", &["start", "end", "eventType", "globalTid"]),
    ("OSRT_API", &["start", "end", "globalTid", "nameId"]),
    ("StringIds", &["id", "value"]),
    ("ThreadNames", &["nameId", "globalTid"]),
];

/// CUPTI's memcpy kinds (`ENUM_CUDA_MEMCPY_OPER` labels, used when the export lacks the table).
pub const MEMCPY_KINDS: &[(i64, &str)] = &[
    (0, "Unknown"),
    (1, "Host-to-Device"),
    (2, "Device-to-Host"),
    (3, "Host-to-Array"),
    (4, "Array-to-Host"),
    (5, "Array-to-Array"),
    (6, "Array-to-Device"),
    (7, "Device-to-Array"),
    (8, "Device-to-Device"),
    (9, "Host-to-Host"),
    (10, "Peer-to-Peer"),
    (11, "Unified Host-to-Device"),
    (12, "Unified Device-to-Host"),
    (13, "Unified Device-to-Device"),
];

/// CUPTI's memory kinds (`ENUM_CUDA_MEM_KIND`).
pub const MEM_KINDS: &[(i64, &str)] = &[
    (0, "Pageable"),
    (1, "Pinned"),
    (2, "Device"),
    (3, "Array"),
    (4, "Managed"),
    (5, "Device Static"),
    (6, "Managed Static"),
    (7, "Unknown"),
];

/// CUPTI's synchronisation types (`ENUM_CUPTI_SYNC_TYPE`).
pub const SYNC_TYPES: &[(i64, &str)] = &[
    (0, "Unknown"),
    (1, "Event sync"),
    (2, "Stream wait sync"),
    (3, "Stream sync"),
    (4, "Context sync"),
];

/// nsys event classes of `CUPTI_ACTIVITY_KIND_RUNTIME` rows (`ENUM_NSYS_EVENT_CLASS`): 0 and 1
/// are calls; 67 repeats a call to carry its backtrace.
pub const EVENT_CLASSES: &[(i64, &str)] = &[
    (0, "CUDA runtime"),
    (1, "CUDA driver"),
    (67, "CUDA backtrace"),
];

/// nsys event types of `NVTX_EVENTS` rows (`ENUM_NSYS_EVENT_TYPE`).
pub const NVTX_TYPES: &[(i64, &str)] = &[
    (33, "NvtxCategory"),
    (34, "NvtxMark"),
    (39, "NvtxThread"),
    (59, "NvtxPushPopRange"),
    (60, "NvtxStartEndRange"),
    (75, "NvtxDomainCreate"),
    (76, "NvtxDomainDestroy"),
];

/// `NVTX_EVENTS.eventType` of push/pop ranges.
pub const NVTX_PUSH_POP: i64 = 59;
/// `NVTX_EVENTS.eventType` of start/end ranges.
pub const NVTX_START_END: i64 = 60;
/// `NVTX_EVENTS.eventType` of a domain's creation (its name, and its `domainId`).
pub const NVTX_DOMAIN_CREATE: i64 = 75;

/// The tables and columns of one export.
#[derive(Debug)]
pub struct Schema {
    cols: HashMap<String, HashSet<String>>,
}

fn columns(conn: &rusqlite::Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info(?)")?;
    st.query_map([table], |r| r.get::<_, String>(0))?.collect()
}

impl Schema {
    /// Reads the columns of every table the import uses and checks the ones it needs.
    pub fn read(
        path: &Path,
        conn: &rusqlite::Connection,
        tables: &HashSet<String>,
    ) -> Result<Schema, ImportError> {
        if !tables.contains("StringIds") {
            return Err(NsysError::MissingTable {
                path: path.to_path_buf(),
                table: "StringIds",
            }
            .into());
        }
        let mut cols = HashMap::new();
        for t in tables {
            if t.starts_with("sqlite_") {
                continue;
            }
            cols.insert(t.clone(), columns(conn, t).map_err(|e| classify(path, e))?);
        }
        for (table, required) in REQUIRED {
            let Some(have) = cols.get(*table) else {
                continue;
            };
            if let Some(c) = required.iter().find(|c| !have.contains(**c)) {
                return Err(NsysError::MissingColumn {
                    path: path.to_path_buf(),
                    table,
                    column: c,
                }
                .into());
            }
        }
        if let Some(have) = cols.get("NVTX_EVENTS")
            && !have.contains("text")
            && !have.contains("textId")
        {
            return Err(NsysError::MissingColumn {
                path: path.to_path_buf(),
                table: "NVTX_EVENTS",
                column: "text or textId",
            }
            .into());
        }
        Ok(Schema { cols })
    }

    /// Whether the export has `table`.
    pub fn has(&self, table: &str) -> bool {
        self.cols.contains_key(table)
    }

    /// Whether `table` has `column`.
    pub fn has_col(&self, table: &str, column: &str) -> bool {
        self.cols.get(table).is_some_and(|c| c.contains(column))
    }

    /// `alias.column` when the table has it, else `NULL` (a column another version lacks).
    pub fn col(&self, table: &str, alias: &str, column: &str) -> String {
        if self.has_col(table, column) {
            format!("{alias}.\"{column}\"")
        } else {
            "NULL".into()
        }
    }

    /// The export's metadata, name -> value (`META_DATA_EXPORT` in newer nsys,
    /// `EXPORT_META_DATA` in older).
    pub fn meta(&self, conn: &rusqlite::Connection) -> rusqlite::Result<HashMap<String, String>> {
        for t in ["META_DATA_EXPORT", "EXPORT_META_DATA"] {
            if self.has_col(t, "name") && self.has_col(t, "value") {
                let mut st = conn.prepare(&format!(
                    "SELECT name, CAST(value AS TEXT) FROM \"{t}\" WHERE value IS NOT NULL"
                ))?;
                return st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect();
            }
        }
        Ok(HashMap::new())
    }

    /// The capture's start in ns since the Unix epoch (`TARGET_INFO_SESSION_START_TIME`), which
    /// every nsys timestamp is relative to.
    pub fn session_start(&self, conn: &rusqlite::Connection) -> rusqlite::Result<Option<i64>> {
        if !self.has_col("TARGET_INFO_SESSION_START_TIME", "utcEpochNs") {
            return Ok(None);
        }
        let v: Option<Option<i64>> = conn
            .query_row(
                "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
                [],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        Ok(v.flatten())
    }

    /// The profiled host's name (`TARGET_INFO_SYSTEM_ENV`'s Hostname).
    pub fn host(&self, conn: &rusqlite::Connection) -> rusqlite::Result<Option<String>> {
        if !(self.has_col("TARGET_INFO_SYSTEM_ENV", "name")
            && self.has_col("TARGET_INFO_SYSTEM_ENV", "value"))
        {
            return Ok(None);
        }
        let mut st = conn.prepare(
            "SELECT CAST(value AS TEXT) FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1",
        )?;
        let mut rows = st.query([])?;
        Ok(match rows.next()? {
            Some(r) => r.get(0)?,
            None => None,
        })
    }

    /// Labels of an enum: the export's own `ENUM_*` table when it has one (newer nsys), over
    /// the built-in list (the same labels, for exports without it).
    pub fn labels(
        &self,
        conn: &rusqlite::Connection,
        table: &str,
        builtin: &[(i64, &str)],
        column: &str,
    ) -> rusqlite::Result<HashMap<i64, String>> {
        let mut out: HashMap<i64, String> =
            builtin.iter().map(|(k, v)| (*k, v.to_string())).collect();
        if self.has_col(table, "id") && self.has_col(table, column) {
            let mut st = conn.prepare(&format!(
                "SELECT id, CAST(\"{column}\" AS TEXT) FROM \"{table}\" WHERE \"{column}\" IS NOT NULL"
            ))?;
            for row in st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
                let (k, v) = row?;
                out.insert(k, v);
            }
        }
        Ok(out)
    }

    /// Thread names by (pid, tid), from `ThreadNames` and `StringIds`.
    pub fn thread_names(
        &self,
        conn: &rusqlite::Connection,
    ) -> rusqlite::Result<HashMap<(i64, i64), String>> {
        let mut out = HashMap::new();
        if !self.has("ThreadNames") {
            return Ok(out);
        }
        let mut st = conn.prepare(
            "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId
             WHERE t.globalTid IS NOT NULL",
        )?;
        for row in st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
            let (g, name) = row?;
            out.insert((super::global_pid(g), super::global_tid(g)), name);
        }
        Ok(out)
    }

    /// Process names by pid: `PROCESSES.name`, else the name of the thread whose tid is the
    /// pid (the main thread).
    pub fn process_names(
        &self,
        conn: &rusqlite::Connection,
        threads: &HashMap<(i64, i64), String>,
    ) -> rusqlite::Result<HashMap<i64, String>> {
        let mut out: HashMap<i64, String> = threads
            .iter()
            .filter(|((p, t), _)| p == t)
            .map(|((p, _), n)| (*p, n.clone()))
            .collect();
        if self.has_col("PROCESSES", "pid") && self.has_col("PROCESSES", "name") {
            let mut st = conn.prepare(
                "SELECT pid, CAST(name AS TEXT) FROM PROCESSES WHERE pid IS NOT NULL AND name IS NOT NULL",
            )?;
            for row in st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
                let (p, n) = row?;
                if !n.is_empty() {
                    out.insert(p, n);
                }
            }
        }
        Ok(out)
    }

    /// The name of the GPU that CUDA device `device` of process `pid` is:
    /// `TARGET_INFO_CUDA_DEVICE` maps a process's CUDA device (`cudaId`) to its GPU (`gpuId`,
    /// so that `CUDA_VISIBLE_DEVICES` renumbering is followed), `TARGET_INFO_GPU` names it;
    /// without the map, the GPU whose `cuDevice` (else `id`) is the device, else the first.
    pub fn gpu_model(
        &self,
        conn: &rusqlite::Connection,
        device: Option<i64>,
        pid: u32,
    ) -> rusqlite::Result<Option<String>> {
        const GPU: &str = "TARGET_INFO_GPU";
        const MAP: &str = "TARGET_INFO_CUDA_DEVICE";
        if !self.has_col(GPU, "name") {
            return Ok(None);
        }
        let first =
            |sql: &str, params: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<Option<String>> {
                let mut st = conn.prepare(sql)?;
                let mut rows = st.query(params)?;
                Ok(match rows.next()? {
                    Some(r) => r.get::<_, Option<String>>(0)?,
                    None => None,
                })
            };
        if let Some(d) = device {
            if self.has_col(GPU, "id") && self.has_col(MAP, "cudaId") && self.has_col(MAP, "gpuId")
            {
                // The profiled process's own row first: each process has its numbering.
                let pid_col = if self.has_col(MAP, "pid") {
                    "c.pid"
                } else {
                    "NULL"
                };
                let sql = format!(
                    "SELECT CAST(g.name AS TEXT) FROM {MAP} c JOIN {GPU} g ON g.id = c.gpuId
                     WHERE c.cudaId = ?1 AND g.name IS NOT NULL
                     ORDER BY {pid_col} IS ?2 DESC LIMIT 1"
                );
                if let Some(n) = first(&sql, &[&d, &pid])? {
                    return Ok(Some(n));
                }
            }
            for id in ["cuDevice", "id"] {
                if self.has_col(GPU, id) {
                    let sql = format!(
                        "SELECT CAST(name AS TEXT) FROM {GPU} WHERE \"{id}\" = ?1 AND name IS NOT NULL LIMIT 1"
                    );
                    if let Some(n) = first(&sql, &[&d])? {
                        return Ok(Some(n));
                    }
                }
            }
        }
        first(
            &format!(
                "SELECT CAST(name AS TEXT) FROM {GPU} WHERE name IS NOT NULL ORDER BY rowid LIMIT 1"
            ),
            &[],
        )
    }
}

/// The `cudaMemcpyKind` a copy's CUPTI kind corresponds to (the catalogue's direction, `arg1`
/// of copies): 0 host-to-host, 1 host-to-device, 2 device-to-host, 3 device-to-device, 4 for an
/// unknown kind (`cudaMemcpyDefault`: the runtime decides).
pub fn copy_direction(kind: i64) -> i64 {
    match kind {
        9 => 0,
        1 | 3 | 11 => 1,
        2 | 4 | 12 => 2,
        5..=8 | 10 | 13 => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_kinds_become_the_catalogue_direction() {
        let label = |k: i64| MEMCPY_KINDS.iter().find(|(i, _)| *i == k).map(|(_, l)| *l);
        assert_eq!(label(1), Some("Host-to-Device"));
        assert_eq!(copy_direction(1), 1);
        assert_eq!(copy_direction(2), 2);
        assert_eq!(copy_direction(8), 3);
        assert_eq!(copy_direction(10), 3);
        assert_eq!(copy_direction(9), 0);
        assert_eq!(copy_direction(0), 4);
    }
}
