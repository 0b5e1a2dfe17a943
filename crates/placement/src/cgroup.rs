//! A process's cgroup (v2): its path from /proc, its id (the directory's inode, what
//! bpf_get_current_cgroup_id returns and events.cgroup_id holds) and what its path says about
//! the container runtime, container id, pod and systemd unit.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The container runtime a cgroup path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// containerd's CRI plugin (`cri-containerd-<id>.scope`).
    Containerd,
    /// CRI-O (`crio-<id>.scope`).
    CriO,
    /// Docker (`docker-<id>.scope`, `/docker/<id>`).
    Docker,
    /// Podman (`libpod-<id>.scope`, `/libpod_parent/libpod-<id>`).
    Podman,
    /// A Kubernetes pod's container under the cgroupfs driver: the path has the pod and the
    /// container id but not the runtime.
    Kubernetes,
    /// A systemd unit that is not a container (a service, a login session).
    Systemd,
    /// A plain cgroup, or the root.
    None,
}

impl Runtime {
    /// The name stored in `cgroups.runtime`.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Kubernetes => "kubernetes",
            Runtime::Systemd => "systemd",
            Runtime::None => "",
        }
    }
}

/// What a cgroup path says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathFacts {
    /// The runtime, when the path names one.
    pub runtime: Runtime,
    /// The container id (64 lowercase hex digits), or "".
    pub container_id: String,
    /// The Kubernetes pod uid (dashed form), or "".
    pub pod_uid: String,
    /// The innermost systemd unit (`nginx.service`, `session-3.scope`), or "".
    pub unit: String,
}

/// Reads what a cgroup path (as in /proc/PID/cgroup, relative to the cgroup2 mount) says.
/// Container ids are recognised only as 64 hex digits, the form every runtime above uses, so a
/// unit that merely looks like one (`docker-compose.service`) is not taken for a container.
pub fn classify(path: &str) -> PathFacts {
    let mut facts = PathFacts {
        runtime: Runtime::None,
        container_id: String::new(),
        pod_uid: String::new(),
        unit: String::new(),
    };
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        if let Some(uid) = pod_uid_of(part) {
            facts.pod_uid = uid;
            continue;
        }
        // conmon (the container monitor) has its own scope: it is not the container.
        if part.contains("-conmon-") {
            continue;
        }
        let scoped = [
            ("cri-containerd-", Runtime::Containerd),
            ("crio-", Runtime::CriO),
            ("docker-", Runtime::Docker),
            ("libpod-", Runtime::Podman),
        ];
        if let Some((id, runtime)) = scoped.iter().find_map(|(prefix, rt)| {
            let rest = part.strip_prefix(prefix)?;
            let id = rest.strip_suffix(".scope").unwrap_or(rest);
            is_container_id(id).then_some((id, *rt))
        }) {
            facts.runtime = runtime;
            facts.container_id = id.to_string();
            continue;
        }
        // cgroupfs driver: the parent names the runtime, or a pod directory holds it.
        let parent = i.checked_sub(1).map_or("", |p| parts[p]);
        if is_container_id(part) && (parent == "docker" || !facts.pod_uid.is_empty()) {
            facts.runtime = if parent == "docker" {
                Runtime::Docker
            } else {
                Runtime::Kubernetes
            };
            facts.container_id = part.to_string();
            continue;
        }
        if part.ends_with(".service") || part.ends_with(".scope") {
            facts.unit = part.to_string();
        }
    }
    if facts.runtime == Runtime::None && !facts.unit.is_empty() {
        facts.runtime = Runtime::Systemd;
    }
    facts
}

/// The pod uid in a kubepods path component: `pod<uid>` (cgroupfs) or
/// `kubepods-<qos>-pod<uid_with_underscores>.slice` (systemd driver).
fn pod_uid_of(part: &str) -> Option<String> {
    let raw = if let Some(rest) = part.strip_prefix("pod") {
        rest
    } else if part.starts_with("kubepods") && part.ends_with(".slice") {
        let inner = part.strip_suffix(".slice")?;
        &inner[inner.rfind("-pod")? + 4..]
    } else {
        return None;
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() == 36
        && uid.chars().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    ok.then(|| uid.to_ascii_lowercase())
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The cgroup2 path of a process (the `0::` line of /proc/PID/cgroup), or None when it has
/// exited or the kernel has no cgroup v2 hierarchy.
pub fn path_of(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&text)
}

/// The `0::PATH` line of a /proc/PID/cgroup text.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_string())
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` on unified systems,
/// `/sys/fs/cgroup/unified` on hybrid ones), from /proc/self/mountinfo.
pub fn mount_point() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mountinfo(&text)
}

/// The mount point of the first cgroup2 filesystem in a mountinfo text.
pub fn parse_mountinfo(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let mount = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(mount)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the cgroup namespace of a process is rooted in the hierarchy mounted at `root`: a
/// process in a private cgroup namespace (a pod's default under cgroup v2) sees every path in
/// /proc/PID/cgroup relative to its own namespace's root (`/../../kubepods.slice/...` for
/// another pod), while `root` is the host's hierarchy (a hostPath mount). `pid` is the process
/// as `cgroup.procs` files list it to us and `own_path` the path it sees for itself; the
/// directory listing `pid` is found by walking the hierarchy (once: the caller keeps it).
/// Where the path reads as it is (no private namespace), that is `/`, found without a walk.
pub fn namespace_root(root: &Path, pid: u32, own_path: &str) -> Option<String> {
    let pid_text = pid.to_string();
    if lists(&root.join(own_path.trim_start_matches('/')), &pid_text) {
        return Some("/".into());
    }
    let own = find_procs(root, root, &pid_text)?;
    let mut parts: Vec<&str> = own.split('/').filter(|p| !p.is_empty()).collect();
    let below: Vec<&str> = own_path.split('/').filter(|p| !p.is_empty()).collect();
    if below.contains(&"..") || below.len() > parts.len() {
        return None;
    }
    if !parts.ends_with(&below) {
        return None;
    }
    parts.truncate(parts.len() - below.len());
    Some(format!("/{}", parts.join("/")))
}

/// The cgroup directory under `dir` whose `cgroup.procs` lists `pid`, as a path relative to
/// `root` with a leading `/`.
fn find_procs(root: &Path, dir: &Path, pid: &str) -> Option<String> {
    if lists(dir, pid) {
        let rel = dir.strip_prefix(root).ok()?;
        return Some(format!("/{}", rel.display()));
    }
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| find_procs(root, &e.path(), pid))
}

/// Whether the cgroup directory `dir` lists `pid` in its `cgroup.procs`.
fn lists(dir: &Path, pid: &str) -> bool {
    fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|procs| procs.lines().any(|l| l == pid))
}

/// A path as a process in a cgroup namespace rooted at `ns_root` sees it, in the hierarchy's
/// own terms: `..` components climb out of the namespace's root.
pub fn in_hierarchy(ns_root: &str, path: &str) -> String {
    let mut parts: Vec<&str> = ns_root.split('/').filter(|p| !p.is_empty()).collect();
    for p in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if p == ".." {
            parts.pop();
        } else {
            parts.push(p);
        }
    }
    format!("/{}", parts.join("/"))
}

/// The id of the cgroup at `path` under the cgroup2 mount `root`: its directory's inode.
pub fn id_of(root: &Path, path: &str) -> Option<u64> {
    let dir = root.join(path.trim_start_matches('/'));
    fs::metadata(dir).ok().map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_finds_unified_and_hybrid_mounts() {
        let unified =
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_mountinfo(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        let hybrid = "25 24 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_mountinfo(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            parse_mountinfo("25 24 0:22 / /sys rw - sysfs sysfs rw\n"),
            None
        );
        assert_eq!(
            parse_mountinfo("1 2 0:1 / /a\\040b rw - cgroup2 none rw\n"),
            Some(PathBuf::from("/a b"))
        );
    }

    #[test]
    fn proc_cgroup_takes_the_v2_line() {
        let hybrid = "9:name=systemd:/\n4:memory:/x\n0::/kubepods/pod1\n";
        assert_eq!(parse_proc_cgroup(hybrid).as_deref(), Some("/kubepods/pod1"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
    }
}
