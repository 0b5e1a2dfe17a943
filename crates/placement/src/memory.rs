//! The memory limit a process runs under: the smallest limit of its memory cgroup and the
//! cgroups above it (cgroup v2 `memory.max` where the unified hierarchy has the memory
//! controller, else v1 `memory.limit_in_bytes`), read once with its other /proc facts. A job at
//! its limit reclaims its own page cache (the `mm_reclaim` events); the limit says how much it
//! had.

use std::fs;
use std::path::{Path, PathBuf};

/// v1 `memory.limit_in_bytes` reads a page-rounded i64::MAX when no limit is set; anything this
/// large is no limit.
const UNLIMITED_FROM: u64 = 1 << 62;

/// The smallest limit on the chain of cgroup directories from `dir` up to `root` (both
/// included), reading `file` in each; 0 when none of them sets one.
pub fn limit_on_chain(root: &Path, dir: &Path, file: &str) -> u64 {
    let mut best = 0u64;
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.starts_with(root) {
            break;
        }
        if let Some(v) = fs::read_to_string(d.join(file))
            .ok()
            .and_then(|t| parse_limit(&t))
        {
            best = if best == 0 { v } else { best.min(v) };
        }
        if d == root {
            break;
        }
        at = d.parent();
    }
    best
}

/// A limit file's value: bytes, or None for `max` and the v1 "unlimited" value.
pub fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < UNLIMITED_FROM).then_some(v)
}

/// Whether the cgroup2 hierarchy at `root` has the memory controller.
pub fn v2_has_memory(root: &Path) -> bool {
    fs::read_to_string(root.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
}

/// The v1 memory controller's path of a process (the `N:...memory...:PATH` line of
/// /proc/PID/cgroup).
pub fn v1_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.trim_end().to_string())
    })
}

/// Where the v1 memory controller is mounted, from a mountinfo text.
pub fn v1_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _, options) = (r.next()?, r.next()?, r.next()?);
        let mount = left.split_whitespace().nth(4)?;
        (fstype == "cgroup" && options.split(',').any(|o| o == "memory"))
            .then(|| PathBuf::from(mount))
    })
}

/// The memory limit of `pid` in bytes, 0 when it has none (or it could not be read). `v2`:
/// the cgroup2 mount and the process's path in it (in the hierarchy's terms) where the unified
/// hierarchy has the memory controller.
pub fn limit_of(pid: u32, v2: Option<(&Path, &str)>) -> u64 {
    if let Some((root, path)) = v2 {
        let dir = root.join(path.trim_start_matches('/'));
        return limit_on_chain(root, &dir, "memory.max");
    }
    let Some(path) = fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|t| v1_path(&t))
    else {
        return 0;
    };
    let Some(root) = fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|t| v1_mount(&t))
    else {
        return 0;
    };
    let dir = root.join(path.trim_start_matches('/'));
    limit_on_chain(&root, &dir, "memory.limit_in_bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_limit_on_the_way_up_is_the_limit() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let pod = root.join("kubepods/pod1");
        let ctr = pod.join("ctr");
        fs::create_dir_all(&ctr).unwrap();
        fs::write(root.join("kubepods/memory.max"), "8589934592\n").unwrap();
        fs::write(pod.join("memory.max"), "335544320\n").unwrap();
        fs::write(ctr.join("memory.max"), "max\n").unwrap();
        assert_eq!(limit_on_chain(root, &ctr, "memory.max"), 320 << 20);
        // Nothing set anywhere: no limit.
        let free = root.join("free");
        fs::create_dir_all(&free).unwrap();
        fs::write(free.join("memory.max"), "max\n").unwrap();
        assert_eq!(limit_on_chain(&root.join("free"), &free, "memory.max"), 0);
        // v1's "unlimited" is no limit.
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("16777216\n"), Some(16 << 20));
    }

    #[test]
    fn v1_memory_lines_and_mounts_are_found() {
        let cg = "9:name=systemd:/\n4:memory:/process_api/14ad\n3:cpuset:/\n0::/\n";
        assert_eq!(v1_path(cg).as_deref(), Some("/process_api/14ad"));
        assert_eq!(v1_path("0::/user.slice\n"), None);
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                  31 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(v1_mount(mi), Some(PathBuf::from("/sys/fs/cgroup/memory")));
    }
}
