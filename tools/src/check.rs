//! `get_check`: can this machine trace? Kernel, BTF, capabilities, tracefs, uprobe support,
//! NVIDIA driver and GPUs, CUDA runtime/driver/NCCL libraries (system paths and Python
//! site-packages) and running CUDA processes, read from /proc and /sys without privileges.

use std::path::{Path, PathBuf};

use causeway_store::sanitize::sanitize_with;
use schemars::JsonSchema;
use serde::Serialize;

/// What `get_check` reports.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CheckReport {
    /// True when nothing below blocks `causeway trace`.
    pub can_trace: bool,
    /// Kernel release.
    pub kernel: String,
    /// /sys/kernel/btf/vmlinux present.
    pub btf: bool,
    /// Effective capabilities that matter: root, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN.
    pub capabilities: Vec<String>,
    /// tracefs mounted (needed by classic tracepoints only).
    pub tracefs: bool,
    /// The kernel's uprobe PMU exists.
    pub uprobes: bool,
    /// NVIDIA driver version, if loaded.
    pub nvidia_driver: Option<String>,
    /// GPUs the driver lists (PCI ids).
    pub gpus: Vec<String>,
    /// CUDA runtime/driver/NCCL libraries found.
    pub libraries: Vec<LibraryOut>,
    /// Processes with a CUDA library mapped (pid and name, data from the machine).
    pub cuda_processes: Vec<String>,
    /// What blocks or limits tracing, each with its fix.
    pub problems: Vec<String>,
}

/// A CUDA-related library file.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibraryOut {
    /// libcudart, libcuda or libnccl.
    pub kind: String,
    /// Path.
    pub path: String,
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const MAX_LIBS: usize = 20;
const MAX_PROCS: usize = 20;

fn read(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn effective_caps() -> u64 {
    read("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn lib_kind(name: &str) -> Option<&'static str> {
    let name = name.rsplit('/').next().unwrap_or(name);
    if name.starts_with("libcudart.so") {
        Some("libcudart")
    } else if name.starts_with("libcuda.so") {
        Some("libcuda")
    } else if name.starts_with("libnccl.so") {
        Some("libnccl")
    } else {
        None
    }
}

/// Library directories: the system's, CUDA toolkits', and Python site-packages' nvidia/torch.
fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/cuda/lib64",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut site = Vec::new();
    for root in ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"] {
        let Ok(rd) = std::fs::read_dir(root) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("python3") {
                site.push(e.path().join("site-packages"));
                site.push(e.path().join("dist-packages"));
            }
        }
    }
    for s in site {
        dirs.push(s.join("torch/lib"));
        for sub in ["cuda_runtime", "nccl", "cuda_nvrtc"] {
            dirs.push(s.join("nvidia").join(sub).join("lib"));
        }
    }
    dirs
}

fn libraries() -> Vec<LibraryOut> {
    let mut out = Vec::new();
    for dir in library_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(kind) = lib_kind(&name) {
                out.push(LibraryOut {
                    kind: kind.into(),
                    path: sanitize_with(&e.path().display().to_string(), 200),
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out.truncate(MAX_LIBS);
    out
}

fn cuda_processes() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut pids: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let Some(maps) = read(format!("/proc/{pid}/maps")) else {
            continue;
        };
        if maps
            .lines()
            .any(|l| l.split_whitespace().nth(5).and_then(lib_kind).is_some())
        {
            let comm = read(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push(format!("{pid} {}", sanitize_with(comm.trim(), 32)));
            if out.len() == MAX_PROCS {
                break;
            }
        }
    }
    out
}

/// Inspects this machine.
pub fn check() -> CheckReport {
    let caps = effective_caps();
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    let mut capabilities = Vec::new();
    if nix_is_root() {
        capabilities.push("root".to_string());
    }
    for (bit, name) in [
        (CAP_BPF, "CAP_BPF"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ] {
        if has(bit) {
            capabilities.push(name.to_string());
        }
    }
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    let tracefs = Path::new("/sys/kernel/tracing/events").exists()
        || Path::new("/sys/kernel/debug/tracing/events").exists();
    let uprobes = Path::new("/sys/bus/event_source/devices/uprobe").exists();
    let nvidia_driver = read("/proc/driver/nvidia/version").and_then(|v| {
        v.lines().next().and_then(|l| {
            l.split_whitespace()
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
                .map(str::to_string)
        })
    });
    let mut gpus: Vec<String> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    gpus.sort();
    let libraries = libraries();
    let mut problems = Vec::new();
    let privileged = has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON));
    if !privileged {
        problems.push("missing CAP_BPF+CAP_PERFMON (or root); hint: run as root or `setcap cap_bpf,cap_perfmon+ep $(which causeway)`".into());
    }
    if !btf {
        problems.push("no kernel BTF (/sys/kernel/btf/vmlinux); hint: use a kernel built with CONFIG_DEBUG_INFO_BTF=y".into());
    }
    if !uprobes {
        problems.push("no uprobe support; hint: a kernel with CONFIG_UPROBE_EVENTS=y is needed for CUDA probes".into());
    }
    if !tracefs {
        problems.push("tracefs not mounted (classic tracepoints unavailable); hint: mount -t tracefs tracefs /sys/kernel/tracing".into());
    }
    if !libraries
        .iter()
        .any(|l| l.kind == "libcudart" || l.kind == "libcuda")
    {
        problems.push("no CUDA library found; hint: install the NVIDIA driver / CUDA runtime, or point causeway trace at the process (it reads /proc/PID/maps)".into());
    }
    CheckReport {
        can_trace: privileged && btf && uprobes,
        kernel: read("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        btf,
        capabilities,
        tracefs,
        uprobes,
        nvidia_driver,
        gpus,
        libraries,
        cuda_processes: cuda_processes(),
        problems,
    }
}

fn nix_is_root() -> bool {
    read("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_cuda_libraries() {
        assert_eq!(lib_kind("/usr/lib/libcudart.so.12.4.1"), Some("libcudart"));
        assert_eq!(lib_kind("libcuda.so.1"), Some("libcuda"));
        assert_eq!(lib_kind("libnccl.so.2"), Some("libnccl"));
        assert_eq!(lib_kind("libcudnn.so.9"), None);
    }

    #[test]
    fn reports_this_kernel() {
        let r = check();
        assert!(!r.kernel.is_empty());
        assert_eq!(
            r.can_trace,
            r.problems.iter().all(|p| !p.starts_with("missing")
                && !p.starts_with("no kernel BTF")
                && !p.starts_with("no uprobe"))
        );
    }
}
