//! Opening, configuring and loading the BPF object (the skeleton stays on the calling thread).

use std::mem::MaybeUninit;

use libbpf_rs::OpenObject;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use thiserror::Error;

use crate::skel::{CausewaySkel, CausewaySkelBuilder};

/// Default ring-buffer size: 2 MiB (about 23k events of 80 bytes plus an 8-byte header). The
/// consumer maps it twice, so it counts twice in the collector's RSS (4 MiB; the earlier 4 MiB
/// ring counted 8); the consumer is woken at a quarter full, and 2 MiB recorded 400k events/s asked with no
/// drops (probe_cost's sustained run with CAUSEWAY_BENCH_RATE=400000: docs/benchmarks.md).
pub const DEFAULT_RINGBUF_BYTES: u32 = 2 << 20;

/// Load-time configuration (`const volatile` globals and map sizes).
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The collector's own tgid: never traced (avoids the ring-buffer wakeup storm).
    pub self_tgid: u32,
    /// Thread that spawns `-- COMMAND`: processes it forks are enrolled as targets (0: none).
    pub spawner_tid: u32,
    /// Enrol every process that calls a probed library (all-CUDA-processes mode).
    pub uprobes_enrol: bool,
    /// Ring-buffer size in bytes (a power of two, at least one page).
    pub ringbuf_bytes: u32,
    /// Load the host programs (scheduler, process, block, network).
    pub host: bool,
    /// Load the empty pair (`cw_bare_entry`/`cw_bare_exit`) the calibration and benchmark use.
    pub bare: bool,
    /// Record the user stack of every call made in full mode.
    pub stacks: bool,
    /// A thread of the collector for which the call probes fire (calibration), 0 = none.
    pub calib_tid: u32,
    /// Load the uprobe.multi variants of the call programs (kernels >= 6.6) instead of the
    /// classic uprobe ones; see [`uprobe_multi_supported`].
    pub multi: bool,
    /// Report CUDA libraries mapped by traced processes (mmap.h, `cw_lib_mmap` on
    /// `tp_btf/mmap_lock_released`). Where it fails to load, load again without it: the
    /// collector then finds new libraries by its periodic rescan only.
    pub map_hook: bool,
    /// Time socket calls at the sock_send_length/sock_recv_length tracepoints (net.h) rather
    /// than at sys_enter/sys_exit; see [`sock_tracepoints_supported`].
    pub sock_tracepoints: bool,
    /// Time the memory reclaim traced threads do themselves (`mm_vmscan_*_reclaim_*`); see
    /// [`reclaim_tracepoints_supported`].
    pub reclaim_tracepoints: bool,
}

/// Whether this kernel has the sock_send_length/sock_recv_length tracepoints (Linux >= 6.3).
pub fn sock_tracepoints_supported() -> bool {
    btf_has(&["btf_trace_sock_send_length", "btf_trace_sock_recv_length"])
}

/// Whether this kernel has the direct and memory-cgroup reclaim tracepoints (absent where the
/// kernel is built without memory cgroups).
pub fn reclaim_tracepoints_supported() -> bool {
    btf_has(&[
        "btf_trace_mm_vmscan_direct_reclaim_begin",
        "btf_trace_mm_vmscan_direct_reclaim_end",
        "btf_trace_mm_vmscan_memcg_reclaim_begin",
        "btf_trace_mm_vmscan_memcg_reclaim_end",
    ])
}

fn btf_has(names: &[&str]) -> bool {
    libbpf_rs::btf::Btf::from_vmlinux().is_ok_and(|btf| {
        names.iter().all(|name| {
            btf.type_by_name::<libbpf_rs::btf::BtfType<'_>>(name)
                .is_some()
        })
    })
}

/// Whether this kernel attaches uprobe.multi links (Linux >= 6.6).
pub fn uprobe_multi_supported() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 6)
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            self_tgid: std::process::id(),
            spawner_tid: 0,
            uprobes_enrol: false,
            ringbuf_bytes: DEFAULT_RINGBUF_BYTES,
            host: true,
            bare: false,
            stacks: false,
            calib_tid: 0,
            multi: uprobe_multi_supported(),
            map_hook: true,
            sock_tracepoints: sock_tracepoints_supported(),
            reclaim_tracepoints: reclaim_tracepoints_supported(),
        }
    }
}

/// Why the BPF object could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    /// libbpf could not open the embedded object.
    #[error("opening the BPF object failed: {0}")]
    Open(#[source] libbpf_rs::Error),
    /// The ring-buffer size is not a power of two of at least 4096 bytes.
    #[error("ring buffer size {0} is not a power of two >= 4096")]
    RingSize(u32),
    /// Setting a map size or program option failed.
    #[error("configuring the BPF object failed: {0}")]
    Config(#[source] libbpf_rs::Error),
    /// The kernel refused the programs (permissions, BTF, verifier).
    #[error("loading the BPF programs failed: {0}")]
    Load(#[source] libbpf_rs::Error),
}

impl causeway_hint::Hint for LoadError {
    /// What to do about it, when there is a fix.
    fn hint(&self) -> Option<String> {
        match self {
            Self::RingSize(..) => Some("use e.g. 4096, 65536 or 8388608".to_string()),
            Self::Load(..) => Some("run as root (or with CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE) on a kernel >= 5.15 with BTF (/sys/kernel/btf/vmlinux); `causeway check` says what is missing".to_string()),
            _ => None,
        }
    }
}

causeway_hint::register!(LoadError);

/// Opens the object, applies `cfg` and loads it into the kernel. `storage` must outlive the skeleton.
pub fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    cfg: &LoadConfig,
) -> Result<CausewaySkel<'obj>, LoadError> {
    if !cfg.ringbuf_bytes.is_power_of_two() || cfg.ringbuf_bytes < 4096 {
        return Err(LoadError::RingSize(cfg.ringbuf_bytes));
    }
    let mut open = CausewaySkelBuilder::default()
        .open(storage)
        .map_err(LoadError::Open)?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.self_tgid = cfg.self_tgid;
        ro.spawner_tid = cfg.spawner_tid;
        ro.uprobes_enrol = u8::from(cfg.uprobes_enrol);
        ro.stacks_enabled = u8::from(cfg.stacks);
        ro.calib_tid = cfg.calib_tid;
        ro.ringbuf_bytes = u64::from(cfg.ringbuf_bytes);
        ro.net_sock_tps = u8::from(cfg.sock_tracepoints);
    }
    open.maps
        .events
        .set_max_entries(cfg.ringbuf_bytes)
        .map_err(LoadError::Config)?;
    let progs = &mut open.progs;
    for prog in [&mut progs.cw_call_entry, &mut progs.cw_call_exit] {
        prog.set_autoload(!cfg.multi);
    }
    for prog in [
        &mut progs.cw_call_entry_multi,
        &mut progs.cw_call_exit_multi,
    ] {
        prog.set_autoload(cfg.multi);
    }
    for prog in [&mut progs.cw_bare_entry, &mut progs.cw_bare_exit] {
        prog.set_autoload(cfg.bare && !cfg.multi);
    }
    for prog in [
        &mut progs.cw_bare_entry_multi,
        &mut progs.cw_bare_exit_multi,
    ] {
        prog.set_autoload(cfg.bare && cfg.multi);
    }
    for prog in [
        &mut progs.cw_sched_switch,
        &mut progs.cw_sched_waking,
        &mut progs.cw_mm_page_alloc,
        &mut progs.cw_oom_kill,
        &mut progs.cw_block_rq_issue,
        &mut progs.cw_block_rq_complete,
        &mut progs.cw_tcp_retransmit,
    ] {
        prog.set_autoload(cfg.host);
    }
    for prog in [&mut progs.cw_sock_send, &mut progs.cw_sock_recv] {
        prog.set_autoload(cfg.host && cfg.sock_tracepoints);
    }
    for prog in [
        &mut progs.cw_direct_reclaim_begin,
        &mut progs.cw_direct_reclaim_end,
        &mut progs.cw_memcg_reclaim_begin,
        &mut progs.cw_memcg_reclaim_end,
    ] {
        prog.set_autoload(cfg.host && cfg.reclaim_tracepoints);
    }
    for prog in [&mut progs.cw_sys_enter, &mut progs.cw_sys_exit] {
        prog.set_autoload(cfg.host && !cfg.sock_tracepoints);
    }
    progs.cw_lib_mmap.set_autoload(cfg.map_hook);
    open.load().map_err(LoadError::Load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_slots_match_the_compiled_map() {
        let mut storage = MaybeUninit::uninit();
        let open = CausewaySkelBuilder::default().open(&mut storage).unwrap();
        assert_eq!(open.maps.threads.max_entries(), crate::abi::THREAD_SLOTS);
    }
}
