//! Writing a file all or nothing: build it under a temporary sibling name
//! (`.NAME.tmp-PID`) and rename it into place on success. What a run that was killed left is
//! recognised by the next run in the same directory (its PID is gone) and removed, and a
//! process that catches SIGINT/SIGTERM removes its own with [`remove_unfinished`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Result, StoreError};

/// Temporary files being built by this process.
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary file this process is building (and DuckDB's files beside them):
/// for a signal handler, just before the process exits. Returns how many it removed.
pub fn remove_unfinished() -> usize {
    let list = std::mem::take(&mut *UNFINISHED.lock().unwrap_or_else(|p| p.into_inner()));
    for tmp in &list {
        remove_with_companions(tmp);
    }
    list.len()
}

/// A file and what DuckDB keeps beside it (`.wal`, the `.tmp` directory).
fn remove_with_companions(path: &Path) {
    let _ = std::fs::remove_file(path);
    let with = |suffix: &str| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let _ = std::fs::remove_file(with(".wal"));
    let _ = std::fs::remove_dir_all(with(".tmp"));
}

/// The PID in `file` when it is one of our temporary names for `name`: `.NAME.tmp-PID`, or
/// DuckDB's `.wal` file or `.tmp` directory beside it (a run killed early may leave only those).
fn leftover_pid(file: &str, name: &str) -> Option<u32> {
    let rest = file.strip_prefix(&format!(".{name}.tmp-"))?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    match &rest[digits..] {
        "" | ".wal" | ".tmp" => rest[..digits].parse().ok(),
        _ => None,
    }
}

/// Removes the `.NAME.tmp-PID` files in `dir` (and their companions) whose process is gone (a
/// killed earlier run).
fn remove_leftovers(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = leftover_pid(&e.file_name().to_string_lossy(), name) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(file = %e.path().display(), "removing what a killed earlier run left");
            remove_with_companions(&dir.join(format!(".{name}.tmp-{pid}")));
        }
    }
}

/// Writes a new file through a temporary sibling and renames it into place only on success,
/// so a failure leaves nothing behind. `build` receives the temporary path.
pub fn write_atomically<T>(
    out: &Path,
    force: bool,
    build: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.duckdb".into());
    // Before any refusal: a run told "already exists" still clears what a killed one left.
    remove_leftovers(&dir, &name);
    crate::paths::check_output(out, force)?;
    if !dir.is_dir() {
        return Err(StoreError::Io {
            path: dir.clone(),
            action: "the output directory does not exist",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    remove_with_companions(&tmp);
    UNFINISHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(tmp.clone());
    let outcome = build(&tmp).and_then(|v| {
        std::fs::rename(&tmp, out)
            .map(|()| v)
            .map_err(|source| StoreError::Io {
                path: out.to_path_buf(),
                action: "moving the finished file into place",
                source,
            })
    });
    if outcome.is_err() {
        remove_with_companions(&tmp);
    }
    UNFINISHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|p| p != &tmp);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both tests look at the process-wide list of unfinished files: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn a_killed_runs_file_is_removed_by_the_next_run() {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.duckdb");
        // PID 1 is init (alive); a PID above the kernel's maximum is never alive.
        let dead = dir.path().join(".t.duckdb.tmp-4294967");
        let alive = dir.path().join(".t.duckdb.tmp-1");
        let other = dir.path().join(".u.duckdb.tmp-4294967");
        for f in [&dead, &alive, &other] {
            std::fs::write(f, "x").unwrap();
        }
        std::fs::write(dir.path().join(".t.duckdb.tmp-4294967.wal"), "x").unwrap();
        // A run killed before its file existed leaves only DuckDB's companions.
        let lone_wal = dir.path().join(".t.duckdb.tmp-4294968.wal");
        let lone_tmp = dir.path().join(".t.duckdb.tmp-4294968.tmp");
        std::fs::write(&lone_wal, "x").unwrap();
        std::fs::create_dir(&lone_tmp).unwrap();
        // Not our naming: kept.
        let foreign = dir.path().join(".t.duckdb.tmp-4294968.bak");
        std::fs::write(&foreign, "x").unwrap();
        write_atomically(&out, false, |tmp| {
            std::fs::write(tmp, "done").unwrap();
            assert_eq!(UNFINISHED.lock().unwrap().as_slice(), [tmp.to_path_buf()]);
            Ok(())
        })
        .unwrap();
        assert!(!dead.exists() && alive.exists() && other.exists());
        assert!(!lone_wal.exists() && !lone_tmp.exists() && foreign.exists());
        assert!(!dir.path().join(".t.duckdb.tmp-4294967.wal").exists());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "done");
        assert!(UNFINISHED.lock().unwrap().is_empty());
    }

    #[test]
    fn unfinished_files_are_removed_on_request() {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.duckdb");
        let err = write_atomically(&out, false, |tmp| -> Result<()> {
            std::fs::write(tmp, "half").unwrap();
            assert_eq!(remove_unfinished(), 1);
            assert!(!tmp.exists());
            Err(StoreError::Closed { path: tmp.into() })
        });
        assert!(err.is_err() && !out.exists());
    }
}
