//! Refusing a trace given twice to one import, which would count every event twice.

use std::path::{Path, PathBuf};

use crate::ImportError;

/// Refuses a trace given twice: the same file (by device and inode, so links and other
/// spellings count) or a copy of it (same size, same bytes).
pub(crate) fn refuse_repeats(sources: &[PathBuf]) -> Result<(), ImportError> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<(&PathBuf, std::fs::Metadata)> = Vec::new();
    for src in sources {
        // An unreadable path is reported by the open that follows, with its own message.
        let Ok(meta) = std::fs::metadata(src) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        for (first, m) in &seen {
            let how = if m.dev() == meta.dev() && m.ino() == meta.ino() {
                "the same file"
            } else if m.len() == meta.len() && same_bytes(first, src) {
                "identical contents"
            } else {
                continue;
            };
            return Err(ImportError::SameTrace {
                first: (*first).clone(),
                second: src.clone(),
                how,
            });
        }
        seen.push((src, meta));
    }
    Ok(())
}

/// Whether two files of equal length hold the same bytes (read in blocks; false when unreadable).
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let Ok(na) = fa.read(&mut ba) else {
            return false;
        };
        if na == 0 {
            return fb.read(&mut bb).is_ok_and(|n| n == 0);
        }
        if fb.read_exact(&mut bb[..na]).is_err() || ba[..na] != bb[..na] {
            return false;
        }
    }
}
