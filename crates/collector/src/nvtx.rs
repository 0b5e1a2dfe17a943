//! NVTX ranges of a command `causeway trace` starts: the injection library it hands the command
//! (NVTX_INJECTION64_PATH), the uprobe on the library's one reporting function, and the
//! conversion of its records into `ranges` rows and NVTX `steps`.
//!
//! NVTX v3 is header-only: an application's ranges go nowhere unless the process names an
//! injection library, which NVTX's own loader opens at the first NVTX call. Ours
//! (nvtx/inject.c, built by build.rs and embedded here) times each range and calls
//! `causeway_nvtx_range` when it ends; the probe on that function (crates/bpf/src/bpf/nvtx.h) sends one
//! record per range. Only processes the collector starts get it: a running process's
//! environment cannot be changed, and one that names its own injection library keeps it.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use causeway_bpf::abi::{RangeKind, RawRange};
use causeway_bpf::libbpf_rs::{Link, UprobeOpts};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::{Range, Step, steps};
use tracing::{debug, info, warn};

/// The environment variable NVTX's loader reads (64-bit processes).
pub const INJECTION_VAR: &str = "NVTX_INJECTION64_PATH";
/// The function the injection library calls once per range or mark.
const PROBED: &str = "causeway_nvtx_range";
/// The library, as build.rs compiled it.
static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libcauseway_nvtx.so"));

/// Writes the library and attaches the probe on it (detached when the link is dropped); returns
/// the library's path, for the command's environment. `None` (logged) when the command names an
/// injection library of its own, or when the library could not be written or probed: the trace
/// goes on without NVTX ranges.
pub fn prepare(skel: &CausewaySkel<'_>) -> Option<(PathBuf, Link)> {
    if let Some(own) = std::env::var_os(INJECTION_VAR) {
        info!(
            injection = %Path::new(&own).display(),
            "the command names its own NVTX injection library ({INJECTION_VAR}): kept, NVTX ranges are not recorded"
        );
        return None;
    }
    let path = match install() {
        Ok(p) => p,
        Err(err) => {
            warn!(%err, "NVTX injection library not written: NVTX ranges are not recorded");
            return None;
        }
    };
    match attach(skel, &path) {
        Ok(link) => {
            debug!(lib = %path.display(), "NVTX injection library probed");
            Some((path, link))
        }
        Err(err) => {
            warn!(%err, lib = %path.display(), "NVTX reporting function not probed: NVTX ranges are not recorded");
            None
        }
    }
}

fn attach(skel: &CausewaySkel<'_>, path: &Path) -> std::io::Result<Link> {
    let offsets = crate::elfsyms::function_offsets(path, &[PROBED]);
    let Some(&(offset, _)) = offsets.get(PROBED) else {
        return Err(std::io::Error::other(format!("{PROBED} not found")));
    };
    // Every process mapping the file fires it; the program keeps this recording's targets.
    skel.progs
        .cw_nvtx_range
        .attach_uprobe_with_opts(-1, path, offset, UprobeOpts::default())
        .map_err(std::io::Error::other)
}

/// Directory the library is written to: the user's runtime directory, else a directory of our
/// own under /tmp. Mode 0711: only we can write it, and a command that drops privileges can
/// still load the library from it.
fn private_dir() -> std::io::Result<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("causeway"),
        None => PathBuf::from(format!("/tmp/causeway-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o711).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // A directory someone else made in /tmp (or one others can write) could hand the command
    // their library.
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory only this user can write",
            dir.display()
        )));
    }
    Ok(dir)
}

/// FNV-1a: names the file by its content, so that builds of different libraries never share
/// a file and one build's recordings reuse one.
fn content_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes the library once (temp file, then rename) and returns its path.
fn install() -> std::io::Result<PathBuf> {
    let dir = private_dir()?;
    let path = dir.join(format!(
        "libcauseway_nvtx-{:016x}.so",
        content_hash(LIBRARY)
    ));
    if std::fs::read(&path).is_ok_and(|have| have == LIBRARY) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".libcauseway_nvtx.{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&tmp)?;
    f.write_all(LIBRARY)?;
    f.sync_all()?;
    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The stored kind of a range record.
fn kind(k: RangeKind) -> &'static str {
    match k {
        RangeKind::PushPop | RangeKind::StartEnd => "nvtx",
        RangeKind::Mark => "nvtx_mark",
    }
}

/// One record as a `ranges` row, times in Unix ns (`offset_ns` from CLOCK_MONOTONIC). The
/// domain prefixes the name as the Nsight Systems importer writes it (`domain:name`).
pub fn range_row(r: &RawRange, offset_ns: i64) -> Range {
    let name = if r.domain.is_empty() {
        r.name.clone()
    } else {
        format!("{}:{}", r.domain, r.name)
    };
    let start = r.start_mono_ns as i64 + offset_ns;
    Range {
        pid: r.pid,
        tid: r.tid,
        name,
        kind: kind(r.kind),
        start_ns: start,
        end_ns: (r.end_mono_ns as i64 + offset_ns).max(start),
        depth: r.depth,
    }
}

/// Top-level NVTX push/pop ranges of each thread, kept until the recording ends to find its
/// steps by the store's rule ([`causeway_store::steps`]), which the importers apply too.
#[derive(Debug, Default)]
pub struct StepFinder(steps::StepFinder);

impl StepFinder {
    /// Notes one stored range.
    pub fn push(&mut self, r: &Range, raw: &RawRange) {
        if raw.kind != RangeKind::PushPop || raw.depth != 0 {
            return;
        }
        self.0.push(r.pid, r.tid, &raw.name, r.start_ns, r.end_ns);
    }

    /// The steps, source `nvtx`.
    pub fn steps(&self) -> Vec<Step> {
        self.0.steps("nvtx")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(name: &str, domain: &str, depth: u16, kind: RangeKind, s: u64, e: u64) -> RawRange {
        RawRange {
            pid: 1,
            tid: 2,
            kind,
            depth,
            start_mono_ns: s,
            end_mono_ns: e,
            name: name.into(),
            domain: domain.into(),
        }
    }

    #[test]
    fn a_domain_prefixes_the_name_and_times_move_to_unix() {
        let r = range_row(&raw("fwd", "train", 1, RangeKind::PushPop, 10, 30), 1000);
        assert_eq!((r.name.as_str(), r.kind), ("train:fwd", "nvtx"));
        assert_eq!((r.start_ns, r.end_ns, r.depth), (1010, 1030, 1));
        let m = range_row(&raw("ckpt", "", 0, RangeKind::Mark, 5, 5), 0);
        assert_eq!(
            (m.name.as_str(), m.kind, m.end_ns),
            ("ckpt", "nvtx_mark", 5)
        );
    }

    #[test]
    fn repeated_outermost_ranges_of_one_name_are_steps_and_others_are_not() {
        let mut f = StepFinder::default();
        for (i, name) in ["iter", "iter", "iter"].iter().enumerate() {
            let x = raw(
                name,
                "",
                0,
                RangeKind::PushPop,
                i as u64 * 10,
                i as u64 * 10 + 5,
            );
            f.push(&range_row(&x, 0), &x);
        }
        // Nested ranges and start/end ranges do not count.
        let inner = raw("fwd", "", 1, RangeKind::PushPop, 1, 2);
        f.push(&range_row(&inner, 0), &inner);
        let steps = f.steps();
        assert_eq!(steps.len(), 3);
        assert_eq!(
            (steps[2].step, steps[2].start_ns, steps[2].source),
            (2, 20, "nvtx")
        );

        let mut g = StepFinder::default();
        for name in ["load", "train"] {
            let x = raw(name, "", 0, RangeKind::PushPop, 0, 1);
            g.push(&range_row(&x, 0), &x);
        }
        assert!(g.steps().is_empty());
    }
}
