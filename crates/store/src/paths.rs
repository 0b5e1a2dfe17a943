//! What a path must be before the store reads or replaces it: a trace to open is a regular file
//! (or an agent's directory of segments), and an output is replaced only when it is a regular
//! file. Opening a FIFO blocks until a writer comes, and renaming over a device node (as root,
//! `/dev/null`) destroys it: both are refused before anything is opened or written.

use std::path::Path;

use crate::error::{Result, StoreError};

/// What `meta` describes when it is not a regular file ("a FIFO", "a directory", ...); None for
/// a regular file.
pub fn not_a_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// Refuses an output path that exists and is not a regular file (even with `force`), and one
/// that exists at all without `force`. Symbolic links are followed: a link to a device is
/// refused like the device.
pub fn check_output(out: &Path, force: bool) -> Result<()> {
    let Ok(meta) = std::fs::metadata(out) else {
        return Ok(());
    };
    if let Some(kind) = not_a_file(&meta) {
        return Err(StoreError::NotReplaceable {
            path: out.to_path_buf(),
            kind,
        });
    }
    if !force {
        return Err(StoreError::Exists {
            path: out.to_path_buf(),
        });
    }
    Ok(())
}

/// Refuses a trace path that exists and is neither a regular file nor (when `dir_ok`) a
/// directory, before anything opens it. A missing path passes: the caller says it is missing.
pub fn check_input(path: &Path, dir_ok: bool) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    match not_a_file(&meta) {
        None => Ok(()),
        Some(_) if dir_ok && meta.is_dir() => Ok(()),
        Some(kind) => Err(StoreError::NotAFile {
            path: path.to_path_buf(),
            kind,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_never_outputs_or_traces() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let file = dir.path().join("t.duckdb");
        std::fs::write(&file, "x").unwrap();
        for force in [false, true] {
            for p in [fifo.as_path(), Path::new("/dev/null"), dir.path()] {
                assert!(
                    matches!(
                        check_output(p, force),
                        Err(StoreError::NotReplaceable { .. })
                    ),
                    "{}",
                    p.display()
                );
            }
        }
        assert!(matches!(
            check_output(&file, false),
            Err(StoreError::Exists { .. })
        ));
        assert!(check_output(&file, true).is_ok());
        assert!(check_output(&dir.path().join("new"), false).is_ok());
        let e = check_input(&fifo, true).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: a FIFO, not a regular file", fifo.display())
        );
        assert!(check_input(Path::new("/dev/null"), true).is_err());
        assert!(check_input(dir.path(), false).is_err());
        assert!(check_input(dir.path(), true).is_ok());
        assert!(check_input(&file, false).is_ok());
    }
}
