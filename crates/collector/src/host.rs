//! Facts read from /proc and /sys: process details for the `processes` table, host facts for
//! the session row and `check`, and the monotonic-to-wall-clock offset for event timestamps.

use std::fs;
use std::path::Path;

use causeway_store::{ProcessInfo, SessionInfo};
use nix::time::{ClockId, clock_gettime};

/// ns to add to a CLOCK_MONOTONIC timestamp (bpf_ktime_get_ns) to get ns since the Unix epoch.
pub fn mono_to_unix_offset() -> i64 {
    let ns = |id| {
        clock_gettime(id)
            .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
            .unwrap_or(0)
    };
    let m1 = ns(ClockId::CLOCK_MONOTONIC);
    let r = ns(ClockId::CLOCK_REALTIME);
    let m2 = ns(ClockId::CLOCK_MONOTONIC);
    r - (m1 + (m2 - m1) / 2)
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The parent pid from /proc/PID/stat.
pub fn ppid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time (user + system) of a process and its start time since boot, both in ns, from
/// /proc/PID/stat (clock-tick resolution).
pub fn cpu_and_start(pid: u32) -> Option<(u64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ns = 1_000_000_000 / clock_ticks_per_s();
    Some(((ticks(11)? + ticks(12)?) * ns, ticks(19)? * ns))
}

/// Clock ticks per second of /proc times (USER_HZ, 100 on Linux).
pub fn clock_ticks_per_s() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .map_or(100, |t| t as u64)
}

/// CLOCK_MONOTONIC now in ns (the clock of bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() * 1_000_000_000 + t.tv_nsec()) as u64)
        .unwrap_or(0)
}

/// ns since boot (CLOCK_BOOTTIME, the clock of /proc/PID/stat start times).
pub fn boottime_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| (t.tv_sec() * 1_000_000_000 + t.tv_nsec()) as u64)
        .unwrap_or(0)
}

/// Resident set size of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn env_var(environ: &[u8], key: &str) -> Option<i32> {
    environ.split(|&b| b == 0).find_map(|kv| {
        let s = std::str::from_utf8(kv).ok()?;
        let (k, v) = s.split_once('=')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

fn env_str<'a>(environ: &'a [u8], key: &str) -> Option<&'a str> {
    environ.split(|&b| b == 0).find_map(|kv| {
        let (k, v) = std::str::from_utf8(kv).ok()?.split_once('=')?;
        (k == key).then_some(v.trim())
    })
}

/// The cluster id given to `causeway trace --cluster` (or $CAUSEWAY_CLUSTER): processes whose
/// environment names none belong to it. Set once when a recording starts.
static DEFAULT_CLUSTER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the cluster id of processes that name none (first call wins).
pub fn set_default_cluster(cluster: &str) {
    let _ = DEFAULT_CLUSTER.set(cluster.to_string());
}

/// The cluster (job) a process belongs to: its $CAUSEWAY_CLUSTER, else torchrun's
/// $TORCHELASTIC_RUN_ID (the rendezvous id every rank of a job shares; "none" is torchrun's
/// placeholder), else the recording's default.
pub fn cluster_of(environ: &[u8]) -> String {
    env_str(environ, "CAUSEWAY_CLUSTER")
        .filter(|v| !v.is_empty())
        .or_else(|| {
            env_str(environ, "TORCHELASTIC_RUN_ID").filter(|v| !v.is_empty() && *v != "none")
        })
        .map(str::to_string)
        .or_else(|| DEFAULT_CLUSTER.get().cloned())
        .unwrap_or_default()
}

/// Distributed-training identity of a process from its environment block (RANK, LOCAL_RANK,
/// WORLD_SIZE).
pub fn ranks_of(env: &[u8]) -> (Option<i32>, Option<i32>, Option<i32>) {
    (
        env_var(env, "RANK"),
        env_var(env, "LOCAL_RANK"),
        env_var(env, "WORLD_SIZE"),
    )
}

/// What /proc says about a process now (`comm_hint` is used when it has already exited).
pub fn process_info(pid: u32, comm_hint: &str, seen_ns: i64) -> ProcessInfo {
    process_facts(pid, comm_hint, seen_ns).0
}

/// [`process_info`] and the environment block it was read from (read once).
pub fn process_facts(pid: u32, comm_hint: &str, seen_ns: i64) -> (ProcessInfo, Vec<u8>) {
    let comm = read_trim(format!("/proc/{pid}/comm")).unwrap_or_else(|| comm_hint.to_string());
    let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let (rank, local_rank, world_size) = ranks_of(&environ);
    let cluster = cluster_of(&environ);
    let info = ProcessInfo {
        pid,
        ppid: ppid(pid).unwrap_or(0),
        comm,
        cmdline,
        first_seen_ns: seen_ns,
        last_seen_ns: seen_ns,
        rank,
        local_rank,
        world_size,
        cluster,
        ..ProcessInfo::default()
    };
    (info, environ)
}

/// Kernel release (`uname -r`).
pub fn kernel_release() -> String {
    read_trim("/proc/sys/kernel/osrelease").unwrap_or_default()
}

/// PRETTY_NAME from /etc/os-release.
pub fn os_release() -> String {
    fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_default()
}

/// NVIDIA driver version and GPU models from /proc/driver/nvidia (empty without the driver).
pub fn nvidia() -> (String, Vec<String>) {
    let driver = fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|s| {
            let l = s.lines().next()?.to_string();
            l.split_whitespace()
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
                .map(str::to_string)
        })
        .unwrap_or_default();
    let mut gpus = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc/driver/nvidia/gpus") {
        for e in rd.flatten() {
            if let Ok(info) = fs::read_to_string(e.path().join("information"))
                && let Some(m) = info.lines().find_map(|l| l.strip_prefix("Model:"))
            {
                gpus.push(m.trim().to_string());
            }
        }
    }
    (driver, gpus)
}

/// The session row's host facts.
pub fn session_info(started_ns: i64, pid_filter: String, flags: String) -> SessionInfo {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let mem_total_mb = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<i64>()
                .ok()
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0);
    let (gpu_driver, gpus) = nvidia();
    SessionInfo {
        started_ns,
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
        kernel: kernel_release(),
        os_release: os_release(),
        cpu_model,
        cpu_cores: std::thread::available_parallelism()
            .map(|n| n.get() as i32)
            .unwrap_or(0),
        mem_total_mb,
        gpu_model: gpus.first().cloned().unwrap_or_default(),
        gpu_driver,
        cuda_version: String::new(),
        python_version: String::new(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        pid_filter,
        flags,
        rank: None,
        local_rank: None,
        world_size: None,
        origin: "recorded".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_close_to_boot_time() {
        let off = mono_to_unix_offset();
        // Monotonic starts near boot: the offset is a wall-clock instant after 2020.
        assert!(off > 1_577_836_800_000_000_000, "{off}");
    }

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let p = process_info(me, "x", 1);
        assert_eq!(p.pid, me);
        assert!(p.ppid > 0);
        assert!(!p.comm.is_empty());
        let (_, start) = cpu_and_start(me).unwrap();
        assert!(start > 0 && start <= boottime_ns(), "{start}");
        assert!(rss_kib(me).unwrap() > 0);
    }

    #[test]
    fn parses_rank_variables() {
        let env = b"A=1\0RANK=3\0WORLD_SIZE=8\0";
        assert_eq!(env_var(env, "RANK"), Some(3));
        assert_eq!(env_var(env, "WORLD_SIZE"), Some(8));
        assert_eq!(env_var(env, "LOCAL_RANK"), None);
    }

    #[test]
    fn cluster_prefers_ours_then_torchruns_run_id() {
        assert_eq!(
            cluster_of(b"TORCHELASTIC_RUN_ID=job-7\0CAUSEWAY_CLUSTER=c1\0"),
            "c1"
        );
        assert_eq!(cluster_of(b"TORCHELASTIC_RUN_ID=job-7\0"), "job-7");
        // torchrun's placeholder names no job.
        assert_eq!(cluster_of(b"TORCHELASTIC_RUN_ID=none\0"), "");
    }
}
