//! Opening an SQLite source (a reference trace or an Nsight Systems export) read-only and
//! checked whole, and classifying SQLite's errors as [`ImportError`]s a user can act on.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::OpenFlags;

use crate::ImportError;

/// An SQLite source, opened read-only and checked whole: its tables, told apart by
/// [`crate::input`] (a reference trace has `events`, an Nsight Systems export `StringIds` and CUPTI
/// tables).
pub(crate) struct SqliteDb {
    pub(crate) conn: rusqlite::Connection,
    /// A private copy of the source and its pending journal, when SQLite must replay one
    /// (opened there so the source is never written); removed with the import.
    pub(crate) copy: Option<tempfile::TempDir>,
    pub(crate) tables: HashSet<String>,
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

/// `path` with `suffix` appended (SQLite's `-wal` and `-journal` files).
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn nonempty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0)
}

pub(crate) fn classify(path: &Path, e: rusqlite::Error) -> ImportError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
