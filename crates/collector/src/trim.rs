//! Gives back the memory that only the tracer's start-up used, once it is recording.
//!
//! Start-up touches far more than recording needs: the dynamic linker reads libduckdb.so's
//! symbol and string tables whole while it relocates the library, and DuckDB runs the start-up code
//! of every extension the prebuilt library carries. Those pages stay counted in the process's
//! RSS until something unmaps them (about a third of libduckdb.so's resident pages at the peak:
//! docs/benchmarks.md, sustained recording). So once the trace is set up, every read-only,
//! file-backed mapping holding no private (copied-on-write) page is dropped from the page
//! tables with `MADV_DONTNEED`: the pages stay in the page cache, and those recording uses come
//! back at their next touch as minor faults. Mappings with private pages (the relocated
//! read-only-after-relocation part of a library) are left alone, since `MADV_DONTNEED` would
//! discard their contents.
//!
//! Opening a database runs DuckDB's start-up code again, so after the writer reopens the store
//! (crates/store/src/writer.rs `maybe_reopen`) the DuckDB library's own mappings are dropped again
//! ([`release_pages_of`]), which is safe while other threads run.
//!
//! No crate does this; it is a few lines over `nix`'s `madvise`.

use std::ffi::c_void;
use std::ptr::NonNull;

use nix::sys::mman::{MmapAdvise, madvise};
use tracing::debug;

/// A mapping of /proc/self/smaps that may be dropped: its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Droppable {
    pub start: usize,
    pub len: usize,
}

/// A file-backed mapping of /proc/self/smaps: its range and file (device and inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    range: Droppable,
    file: (String, String),
    droppable: bool,
}

/// The read-only, file-backed mappings of an smaps text with no anonymous (private copy) page.
/// The vdso, the ring buffer's `anon_inode` and other pseudo-files are not files: skipped.
pub(crate) fn droppable(smaps: &str) -> Vec<Droppable> {
    file_mappings(smaps)
        .into_iter()
        .filter(|m| m.droppable)
        .map(|m| m.range)
        .collect()
}

/// The droppable mappings ([`droppable`]) of the file one of whose mappings holds `addr`.
pub(crate) fn droppable_of(smaps: &str, addr: usize) -> Vec<Droppable> {
    let maps = file_mappings(smaps);
    let Some(file) = maps
        .iter()
        .find(|m| (m.range.start..m.range.start + m.range.len).contains(&addr))
        .map(|m| m.file.clone())
    else {
        return Vec::new();
    };
    maps.into_iter()
        .filter(|m| m.droppable && m.file == file)
        .map(|m| m.range)
        .collect()
}

/// Every mapping of an smaps text backed by a file, and whether it may be dropped: read-only
/// and, by its `Anonymous:` line, holding no private copy.
fn file_mappings(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut cur: Option<Mapping> = None;
    let mut anonymous = None;
    let mut close = |cur: &mut Option<Mapping>, anonymous_kb: Option<u64>| {
        if let Some(mut m) = cur.take() {
            m.droppable &= anonymous_kb == Some(0);
            out.push(m);
        }
    };
    for line in smaps.lines() {
        if let Some(m) = parse_header(line) {
            close(&mut cur, anonymous);
            anonymous = None;
            cur = m;
        } else if let Some(v) = line.strip_prefix("Anonymous:") {
            anonymous = v.trim().trim_end_matches("kB").trim().parse().ok();
        }
    }
    close(&mut cur, anonymous);
    out
}

/// `Some(None)` for a header line of a mapping not backed by a file, `Some(Some(..))` for one
/// backed by a file, `None` for a line that is not a header.
fn parse_header(line: &str) -> Option<Option<Mapping>> {
    let mut f = line.split_ascii_whitespace();
    let range = f.next()?;
    let (a, b) = range.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    );
    let perms = f.next()?;
    if perms.len() != 4 {
        return None;
    }
    let (_offset, dev, inode) = (f.next()?, f.next()?, f.next()?);
    let path = f.collect::<Vec<_>>().join(" ");
    let file = inode != "0" && path.starts_with('/') && end > start;
    let read_only = perms.starts_with('r') && &perms[1..2] == "-";
    Some(file.then(|| Mapping {
        range: Droppable {
            start,
            len: end - start,
        },
        file: (dev.to_string(), inode.to_string()),
        droppable: read_only,
    }))
}

/// Drops start-up pages (module comment); returns the bytes of mappings advised. Best effort:
/// a failure costs memory, never correctness, so it is logged and ignored.
///
/// Called before the threads that map and unmap files while recording (the symboliser) start:
/// a file mapping unmapped between the read of smaps and the `madvise` could otherwise be
/// replaced by a writable mapping at the same address. The writer thread and DuckDB read and
/// write files with system calls and map anonymous memory only.
pub(crate) fn release_startup_pages() -> usize {
    match std::fs::read_to_string("/proc/self/smaps") {
        Ok(smaps) => drop_pages(&droppable(&smaps)),
        Err(e) => {
            debug!(%e, "reading /proc/self/smaps");
            0
        }
    }
}

/// Drops the pages of the file mapped at `addr` that the process no longer needs (same rule as
/// at start-up); returns the bytes of mappings advised. For the DuckDB library after the writer
/// reopened the store: opening a database runs the start-up code of every extension again,
/// which brought libduckdb.so's resident pages back up by about a third (docs/benchmarks.md,
/// sustained recording). Safe while other threads run, unlike [`release_startup_pages`], as long
/// as `addr` is in a file that stays mapped for the life of the process (the executable or a
/// library it was linked with): its mappings cannot be replaced between the smaps read and the madvise.
pub(crate) fn release_pages_of(addr: usize) -> usize {
    match std::fs::read_to_string("/proc/self/smaps") {
        Ok(smaps) => drop_pages(&droppable_of(&smaps, addr)),
        Err(e) => {
            debug!(%e, "reading /proc/self/smaps");
            0
        }
    }
}

/// `MADV_DONTNEED` on each range (mappings found by [`droppable`]); returns the bytes advised.
fn drop_pages(ranges: &[Droppable]) -> usize {
    let mut advised = 0;
    for d in ranges {
        let Some(addr) = NonNull::new(d.start as *mut c_void) else {
            continue;
        };
        #[allow(unsafe_code)]
        // SAFETY (unsafe_code allowed for this call only): the range is one whole mapping that
        // is read-only and backed by a file, and held no private page when smaps was read (and
        // it is still that mapping: no thread unmaps files meanwhile, see
        // release_startup_pages, or it belongs to a file never unmapped, see
        // release_pages_of). Nothing in this process
        // can write to it (that would take an mprotect, which none of our code or libraries
        // does after start-up), so every page dropped is an unmodified page of the file and
        // reads back identical from it at the next touch, as long as the file is not rewritten
        // in place while we run: the same condition every page not yet faulted in already
        // depends on (installers replace files by rename, which leaves the mapped file intact).
        let r = unsafe { madvise(addr, d.len, MmapAdvise::MADV_DONTNEED) };
        match r {
            Ok(()) => advised += d.len,
            Err(e) => debug!(start = d.start, len = d.len, %e, "madvise"),
        }
    }
    advised
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5555d000-5555e000 r--p 00000000 08:01 1234 /usr/lib/libduckdb.so
Rss:                   4 kB
Anonymous:             0 kB
5555e000-55560000 r-xp 00001000 08:01 1234 /usr/lib/libduckdb.so
Anonymous:             0 kB
55560000-55561000 r--p 00003000 08:01 1234 /usr/lib/libduckdb.so
Anonymous:             4 kB
55561000-55562000 rw-p 00004000 08:01 1234 /usr/lib/libduckdb.so
Anonymous:             0 kB
55562000-55563000 r--s 00000000 00:0e 99 anon_inode:bpf-map
Anonymous:             0 kB
7ffd0000-7ffd2000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7f000000-7f001000 r--p 00000000 08:01 77 /opt/with space/lib.so
Anonymous:             0 kB
7f100000-7f102000 r--s 00000000 08:01 78 /usr/lib/libcuda.so.1
Anonymous:             0 kB
";

    #[test]
    fn only_read_only_file_mappings_without_private_copies_are_dropped() {
        assert_eq!(
            droppable(SMAPS),
            vec![
                Droppable {
                    start: 0x5555d000,
                    len: 0x1000
                },
                Droppable {
                    start: 0x5555e000,
                    len: 0x2000
                },
                Droppable {
                    start: 0x7f000000,
                    len: 0x1000
                },
                Droppable {
                    start: 0x7f100000,
                    len: 0x2000
                },
            ]
        );
    }

    #[test]
    fn only_the_droppable_mappings_of_the_file_holding_the_address_are_dropped() {
        let duckdb = vec![
            Droppable {
                start: 0x5555d000,
                len: 0x1000,
            },
            Droppable {
                start: 0x5555e000,
                len: 0x2000,
            },
        ];
        // Any address of the file: its code, its private-copy part, its writable data.
        for addr in [0x5555e800, 0x55560000, 0x55561fff] {
            assert_eq!(droppable_of(SMAPS, addr), duckdb, "{addr:x}");
        }
        // Not in a file: nothing.
        for addr in [0x55562000, 0x7ffd0000, 0x1000] {
            assert!(droppable_of(SMAPS, addr).is_empty(), "{addr:x}");
        }
    }

    #[test]
    fn the_duckdb_address_is_in_duckdb_code() {
        let addr = causeway_store::duckdb_code_address();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let header = smaps
            .lines()
            .filter(|l| parse_header(l).is_some())
            .find(|l| {
                let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
                let (a, b) = (
                    usize::from_str_radix(a, 16).unwrap(),
                    usize::from_str_radix(b, 16).unwrap(),
                );
                (a..b).contains(&addr)
            })
            .expect("the address is mapped");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(
            header
                .split_ascii_whitespace()
                .nth(1)
                .unwrap()
                .contains('x'),
            "{header}"
        );
        assert!(
            header.ends_with("libduckdb.so") || header.ends_with(exe.to_str().unwrap()),
            "{header}"
        );
        assert!(!droppable_of(&smaps, addr).is_empty());
    }

    #[test]
    fn a_mapping_without_an_anonymous_line_is_kept() {
        assert!(droppable("5555d000-5555e000 r--p 00000000 08:01 1234 /lib/x.so\n").is_empty());
    }

    /// The Rss of the mapping starting at `start`, in kB.
    fn rss_kb_at(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{start:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        assert!(lines.next().is_some(), "mapping {head} not in smaps");
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        rss[4..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn dropped_pages_leave_rss_and_read_back_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let bytes: Vec<u8> = (0..256 * 1024).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let map = crate::elfsyms::map_elf(&path).unwrap();
        let start = map.as_ptr() as usize;
        assert_eq!(&map[..], &bytes[..]);
        assert_eq!(rss_kb_at(start), 256);

        // Only this test's own mapping: other tests' threads map and unmap files meanwhile.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let ours: Vec<Droppable> = droppable(&smaps)
            .into_iter()
            .filter(|d| d.start == start)
            .collect();
        assert_eq!(ours.len(), 1, "the mapped file is droppable");
        assert_eq!(drop_pages(&ours), bytes.len());
        assert_eq!(rss_kb_at(start), 0);
        assert_eq!(&map[..], &bytes[..]);
        assert_eq!(rss_kb_at(start), 256);

        // The same through the file's address (the test's file is mapped once).
        assert_eq!(release_pages_of(start + 4096), bytes.len());
        assert_eq!(rss_kb_at(start), 0);
        assert_eq!(&map[..], &bytes[..]);
    }
}
