//! `causeway check` / `get_check`: what this machine has and lacks for tracing, each missing piece
//! with a hint (rendered by causeway-tools, which shapes the report for people and agents).

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;

use crate::discover::{LibFile, cuda_files_in_maps, cuda_processes, standard_libs};
use crate::host;

/// One checked item.
#[derive(Debug, Clone, Serialize)]
pub struct CheckItem {
    /// What was checked.
    pub name: &'static str,
    /// Whether it is fine.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when not fine (empty when fine).
    pub hint: String,
}

/// A CUDA process found running.
#[derive(Debug, Clone, Serialize)]
pub struct CudaProcess {
    /// Process id.
    pub pid: u32,
    /// Its comm.
    pub comm: String,
    /// The CUDA libraries it maps, and the files it maps that carry the CUDA runtime linked in.
    pub libraries: Vec<LibFile>,
}

/// Everything `causeway check` reports.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Kernel release.
    pub kernel: String,
    /// Checks, in order.
    pub items: Vec<CheckItem>,
    /// NVIDIA driver version ("" without the driver).
    pub nvidia_driver: String,
    /// GPU models.
    pub gpus: Vec<String>,
    /// CUDA libraries in standard locations (site-packages and conda included).
    pub libraries: Vec<LibFile>,
    /// Running processes with a CUDA library mapped.
    pub cuda_processes: Vec<CudaProcess>,
}

impl CheckReport {
    /// Whether everything needed for tracing is there (GPUs and libraries are not required).
    pub fn ready(&self) -> bool {
        self.items.iter().all(|i| i.ok)
    }
}

fn item(name: &'static str, ok: bool, detail: String, hint: &str) -> CheckItem {
    CheckItem {
        name,
        ok,
        detail,
        hint: if ok { String::new() } else { hint.to_string() },
    }
}

fn kernel_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse::<u32>().ok());
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// Effective capability set from /proc/self/status (CapEff).
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Inspects the machine. Never fails: what cannot be read is reported as missing.
pub fn check() -> CheckReport {
    let kernel = host::kernel_release();
    let caps = effective_caps();
    let has = |c: u32| caps & (1u64 << c) != 0;
    let euid = nix::unistd::geteuid().as_raw();
    let privileged = euid == 0 || has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON));
    let tracefs = Path::new("/sys/kernel/tracing/events").exists()
        || Path::new("/sys/kernel/debug/tracing/events").exists();
    let uprobes = Path::new("/sys/bus/event_source/devices/uprobe").exists();
    let items = vec![
        item(
            "kernel",
            kernel_at_least(&kernel, 5, 15),
            kernel.clone(),
            "causeway needs Linux >= 5.15 (BPF ring buffer, tp_btf, uprobe attach cookies)",
        ),
        item(
            "btf",
            Path::new("/sys/kernel/btf/vmlinux").exists(),
            "/sys/kernel/btf/vmlinux".into(),
            "the kernel must be built with CONFIG_DEBUG_INFO_BTF=y",
        ),
        item(
            "privileges",
            privileged,
            format!("euid {euid}, CapEff {caps:#x}"),
            "run as root (sudo causeway trace ...) or grant CAP_BPF and CAP_PERFMON: sudo setcap cap_bpf,cap_perfmon,cap_sys_resource+ep $(command -v causeway)",
        ),
        item(
            "uprobes",
            uprobes,
            "/sys/bus/event_source/devices/uprobe".into(),
            "the kernel needs CONFIG_UPROBE_EVENTS=y for CUDA call probes",
        ),
    ];
    let mut report = CheckReport {
        kernel,
        items,
        nvidia_driver: String::new(),
        gpus: Vec::new(),
        libraries: standard_libs(),
        // Each process's mapped files, with those that carry the runtime linked in (CuPy's
        // extension modules: such a process maps libcuda.so.1 once it uses the GPU).
        cuda_processes: cuda_processes()
            .into_iter()
            .map(|(pid, _)| (pid, cuda_files_in_maps(pid, &mut HashSet::new())))
            .map(|(pid, libraries)| CudaProcess {
                pid,
                comm: std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default(),
                libraries,
            })
            .collect(),
    };
    // tracefs is informational: every causeway program uses tp_btf or uprobes (no tracefs needed).
    report.items.push(CheckItem {
        name: "tracefs",
        ok: true,
        detail: if tracefs {
            "mounted".into()
        } else {
            "not mounted (not needed: causeway uses tp_btf)".into()
        },
        hint: String::new(),
    });
    // Informational too: without these tracepoints (Linux < 6.3) socket calls are timed at
    // system call entry and exit, which every system call on the machine pays.
    report.items.push(CheckItem {
        name: "sockets",
        ok: true,
        detail: if causeway_bpf::load::sock_tracepoints_supported() {
            "sock_send_length and sock_recv_length tracepoints".into()
        } else {
            "absent (Linux < 6.3): socket calls are timed at system call entry and exit, which slows every system call on the machine by ~170 ns; --no-host avoids it".into()
        },
        hint: String::new(),
    });
    // Informational: without them (kernels built without memory cgroups) memory pressure is
    // seen only through page allocations and OOM kills.
    report.items.push(CheckItem {
        name: "reclaim",
        ok: true,
        detail: if causeway_bpf::load::reclaim_tracepoints_supported() {
            "direct and memory-cgroup reclaim tracepoints".into()
        } else {
            "absent: reclaim done by traced threads is not timed; memory pressure shows only as page allocations and OOM kills".into()
        },
        hint: String::new(),
    });
    let (driver, gpus) = host::nvidia();
    report.nvidia_driver = driver;
    report.gpus = gpus;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_kernel_versions() {
        assert!(kernel_at_least("6.18.44-fc-v669", 5, 15));
        assert!(kernel_at_least("5.15.0", 5, 15));
        assert!(!kernel_at_least("5.4.0-150-generic", 5, 15));
    }

    #[test]
    fn failing_items_carry_a_hint() {
        let i = item("btf", false, "x".into(), "do this");
        assert_eq!(i.hint, "do this");
        let r = CheckReport {
            kernel: "6.1".into(),
            items: vec![i],
            nvidia_driver: String::new(),
            gpus: vec![],
            libraries: vec![],
            cuda_processes: vec![],
        };
        assert!(!r.ready());
    }

    #[test]
    fn this_machine_reports_its_kernel() {
        let r = check();
        assert!(!r.kernel.is_empty());
        assert!(r.items.iter().any(|i| i.name == "btf"));
        let sock = r.items.iter().find(|i| i.name == "sockets");
        let sock = sock.expect("sockets item");
        // Linux 6.3 added them; a kernel with BTF lists them there.
        if kernel_at_least(&r.kernel, 6, 3) && Path::new("/sys/kernel/btf/vmlinux").exists() {
            assert_eq!(
                sock.detail,
                "sock_send_length and sock_recv_length tracepoints"
            );
        }
    }
}
