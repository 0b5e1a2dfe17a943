//! Libraries and programs that appear while recording: attached the moment the library-load
//! hook (bpf mmap.h) reports that a traced process mapped one or exec'd a program carrying the
//! runtime, else at the periodic rescan of /proc/PID/maps (the fallback where the hook is
//! missing). Processes of the command are held meanwhile (hold.rs).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use causeway_bpf::abi::RawLib;
use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::LibraryAttach;
use tracing::{debug, info, warn};

use super::{Recording, modes::wanted};
use crate::attach::{Attached, OpProbes};
use crate::discover::{LibFile, cuda_files_in_maps, cuda_processes, static_runtime_of};
use crate::host;
use crate::stacks::Stacks;
use crate::trace::{MapAttach, MapHookSummary, Mode};

impl Recording<'_, '_> {
    /// Handles what the poll brought: libraries mapped and programs exec'd by traced processes
    /// (in all-process mode, program files exec'd by any process), then lets held processes go.
    pub(super) fn on_mapped(&mut self) {
        let (args, mode, skel, sink) = (self.ctx.args, self.ctx.mode, self.ctx.skel, self.ctx.sink);
        let (mapped, execs, programs) = {
            let mut st = self.state.borrow_mut();
            (
                std::mem::take(&mut st.mapped),
                std::mem::take(&mut st.execs),
                std::mem::take(&mut st.programs),
            )
        };
        let mut looked_at = !mapped.is_empty();
        let (ctl, sampler) = (&mut self.ctl, &self.sampling.sampler);
        let found = &mut self.found;
        // Each held process's latest hold, read before its files are looked at.
        let to_release: BTreeMap<u32, Option<u64>> =
            found.holds.as_ref().map_or_else(BTreeMap::new, |h| {
                (mapped.iter().map(|m| m.pid))
                    .chain(programs.iter().map(|p| p.pid))
                    .map(|pid| (pid, h.generation(pid)))
                    .collect()
            });
        if let Some(d) = args.stall_attach.filter(|_| !to_release.is_empty()) {
            std::thread::sleep(d);
        }
        let mapped_pids: BTreeSet<u32> = mapped.iter().map(|m| m.pid).collect();
        let attached_before = found.map_hook.attached.len();
        {
            let want = |op| wanted(ctl, sampler, op);
            for m in mapped {
                attach_mapped(
                    skel,
                    mode,
                    &mut found.attached,
                    args.nccl,
                    &want,
                    &m,
                    &mut found.mapped_seen,
                    &mut found.objects_checked,
                    &mut found.map_hook,
                );
            }
        }
        // The interpreter (libpython, or the program) is mapped by now, and a held process has
        // not run any Python yet: its Python frames are walked from its first call on.
        let py_pids: Vec<u32> = mapped_pids
            .iter()
            .copied()
            .chain(execs.iter().map(|(p, _)| *p))
            .collect();
        look_python(skel, self.state.borrow_mut().stacks.as_mut(), py_pids);
        // Once such a file is looked at the kernel stays quiet for it (a process gone too soon
        // to be looked at leaves it unmarked, and the next exec reports it again).
        let programs = programs
            .iter()
            .map(|p| (p.pid, p.ts_mono_ns, Some(p.file_key())));
        for (pid, ts, key) in execs.into_iter().map(|(p, t)| (p, t, None)).chain(programs) {
            looked_at = true;
            let want = |op| wanted(ctl, sampler, op);
            let looked = on_exec(
                skel,
                &mut found.attached,
                &want,
                pid,
                ts,
                &mut found.exes_checked,
                &mut found.map_hook,
            );
            if let Some(key) = key.filter(|_| looked) {
                mark_seen(skel, &key);
            }
        }
        if looked_at {
            for (op, kind) in found.attached.first_insns() {
                ctl.set_first_insn(op, kind);
            }
        }
        if let Some(h) = &found.holds {
            for (pid, seen) in to_release {
                h.release(pid, seen);
            }
        }
        // Kernel stubs in the new files are named from a snapshot of the mappings taken now,
        // after the process was let go (a process that exits at once still has its launches
        // named).
        if let Some(k) = self.state.borrow_mut().kernels.as_mut() {
            for pid in mapped_pids {
                k.maps.refresh(pid);
            }
        }
        if found.map_hook.attached.len() > attached_before {
            let rows = found.map_hook.attached[attached_before..]
                .iter()
                .map(|a| {
                    let how = match &found.holds {
                        Some(h) if h.timed_out(a.pid) => Began::HoldTimeout,
                        Some(_) => Began::Held,
                        None => Began::Mapped,
                    };
                    let mapped = a.attached_ns - (a.latency_us * 1_000) as i64;
                    how.row(a.pid, &a.library, a.attached_ns, Some(mapped), None)
                })
                .collect();
            let _ = sink.ctl.send(crate::sink::Ctl::Attach(rows));
        }
        let pending = self
            .state
            .borrow_mut()
            .stacks
            .as_mut()
            .map(|s| std::mem::take(&mut s.py_pending))
            .unwrap_or_default();
        if !pending.is_empty() {
            look_python(skel, self.state.borrow_mut().stacks.as_mut(), pending);
        }
    }

    /// The periodic rescan: library copies that appeared in traced processes since the last one.
    pub(super) fn rescan(&mut self) {
        let (mode, skel) = (self.ctx.mode, self.ctx.skel);
        let (ctl, sampler) = (&mut self.ctl, &self.sampling.sampler);
        let found = rescan(
            skel,
            mode,
            &mut self.found.attached,
            self.ctx.args.nccl,
            &|op| wanted(ctl, sampler, op),
            &mut self.found.objects_checked,
        );
        if !found.is_empty() {
            let now = causeway_store::now_ns();
            let rows = found
                .iter()
                .map(|(pid, l)| Began::Rescan.row(*pid, &l.path, now, None, None))
                .collect();
            let _ = self.ctx.sink.ctl.send(crate::sink::Ctl::Attach(rows));
        }
        for (op, kind) in self.found.attached.first_insns() {
            ctl.set_first_insn(op, kind);
        }
        self.clock.scan = std::time::Instant::now();
    }
}
/// Looks for CPython in `pids` and gives the kernel the layout of each one found (bpf python.h);
/// a process found not to run one (any more: it exec'd or exited) loses its entry.
pub(super) fn look_python(
    skel: &CausewaySkel<'_>,
    stacks: Option<&mut Stacks>,
    pids: impl IntoIterator<Item = u32>,
) {
    let Some(py) = stacks.and_then(|s| s.python.as_mut()) else {
        return;
    };
    for pid in pids {
        let key = pid.to_ne_bytes();
        match py.look(pid) {
            Some(walk) => match skel
                .maps
                .py_procs
                .update(&key, &walk.to_bytes(), MapFlags::ANY)
            {
                Ok(()) => info!(
                    pid,
                    "CPython found: Python frames are recorded with the stacks"
                ),
                Err(err) => {
                    warn!(pid, %err, "Python frames not recorded for this process: py_procs is full")
                }
            },
            None if py.get(pid).is_none() => {
                let _ = skel.maps.py_procs.delete(&key);
            }
            None => {}
        }
    }
}

/// Attaches the library-load hook; `None` (logged once) where it was not loaded or does not
/// attach: new libraries are then found by the periodic rescan only.
pub(super) fn attach_map_hook(skel: &CausewaySkel<'_>) -> Option<Link> {
    let prog = &skel.progs.cw_lib_mmap;
    if !prog.autoload() {
        debug!(
            "library-load hook not loaded; libraries mapped later are found by the periodic rescan"
        );
        return None;
    }
    match prog.attach() {
        Ok(link) => Some(link),
        Err(err) => {
            info!(%err, "library-load hook (tp_btf/mmap_lock_released) not attached; libraries mapped later are found by the periodic rescan");
            None
        }
    }
}

/// Handles one library-load record: rescans that process now (the periodic rescan's path, for
/// one pid) and marks the file seen in the kernel, so that later mappings of it (covered by the
/// same per-inode probes) do not wake us again.
#[allow(clippy::too_many_arguments)]
fn attach_mapped(
    skel: &CausewaySkel<'_>,
    mode: &Mode,
    attached: &mut Attached,
    nccl: bool,
    want: &dyn Fn(u16) -> OpProbes,
    m: &RawLib,
    seen: &mut HashSet<(u64, u64)>,
    objects_checked: &mut HashSet<(u64, u64)>,
    summary: &mut MapHookSummary,
) {
    summary.records += 1;
    // Several mappings of one file can be in the ring before the map update below lands, and
    // the kernel's map forgets its oldest files when full: marked again, looked at once.
    if !seen.insert(m.file) {
        mark_seen(skel, &m.file_key());
        return;
    }
    // A file of another name, with its descriptor still open (the process is held): only that
    // file needs a look, not every mapping of the process.
    let one =
        m.fd.filter(|_| m.library.is_none())
            .and_then(|fd| std::fs::read_link(format!("/proc/{}/fd/{fd}", m.pid)).ok())
            .and_then(|p| p.to_str().map(|p| crate::discover::path_here(m.pid, p)));
    let found = match one {
        Some(path) => {
            let fresh = objects_checked.insert(m.file);
            let lib = LibFile {
                library: causeway_bpf::probes::Library::Cudart,
                path,
            };
            if fresh
                && crate::discover::links_cudart_statically(&lib.path)
                && !attached.contains(&lib)
                && attached.attach_lib(skel, &lib, nccl, want) > 0
            {
                vec![lib]
            } else {
                Vec::new()
            }
        }
        None => rescan_pid(skel, mode, attached, nccl, want, m.pid, objects_checked),
    };
    for lib in found {
        let latency_us = host::monotonic_ns().saturating_sub(m.ts_mono_ns) / 1_000;
        info!(pid = m.pid, lib = %lib.path.display(), latency_us, "library attached when mapped");
        summary.attached.push(MapAttach {
            pid: m.pid,
            library: lib.path,
            latency_us,
            attached_ns: causeway_store::now_ns(),
        });
    }
    // Seen even when nothing was attached: the file was attached before, is NCCL without
    // --nccl, or its process is gone (then the periodic rescan still finds other mappers).
    mark_seen(skel, &m.file_key());
}

/// The `lib_files_seen` key of a file: its device as the kernel encodes it (MAJOR << 20 | MINOR)
/// and its inode. A file seen through an overlay may have another key in the kernel: then it is
/// reported (and looked at) once more, no harm done.
pub(super) fn kernel_file_key(
    path: &std::path::Path,
) -> Option<[u8; causeway_bpf::abi::FILE_KEY_SIZE]> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    let dev = m.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let mut k = [0u8; causeway_bpf::abi::FILE_KEY_SIZE];
    k[..8].copy_from_slice(&(major << 20 | minor).to_le_bytes());
    k[8..].copy_from_slice(&m.ino().to_le_bytes());
    Some(k)
}

/// Tells the kernel that user space has looked at a library or program file, so that it is
/// not reported again.
pub(super) fn mark_seen(skel: &CausewaySkel<'_>, key: &[u8]) {
    if let Err(err) = skel.maps.lib_files_seen.update(key, &[1u8], MapFlags::ANY) {
        debug!(%err, "marking a file seen failed: the kernel reports that file again");
    }
}

/// Handles the exec of a new program by a traced process (or, in all-process mode, by any
/// process): a program that carries the CUDA runtime linked statically (nvcc's default) maps
/// no CUDA library, so neither the library-load hook nor the maps rescan would find it. Each
/// program file is checked once. False when the process was gone before it could be looked at.
fn on_exec(
    skel: &CausewaySkel<'_>,
    attached: &mut Attached,
    want: &dyn Fn(u16) -> OpProbes,
    pid: u32,
    exec_mono_ns: u64,
    checked: &mut HashSet<(u64, u64)>,
    summary: &mut MapHookSummary,
) -> bool {
    let Some(found) = static_runtime_of(pid, checked) else {
        return false;
    };
    let Some(lib) = found else { return true };
    if attached.contains(&lib) || attached.attach_lib(skel, &lib, false, want) == 0 {
        return true;
    }
    let latency_us = host::monotonic_ns().saturating_sub(exec_mono_ns) / 1_000;
    info!(pid, exe = %lib.path.display(), latency_us, "statically linked CUDA runtime attached at exec");
    summary.attached.push(MapAttach {
        pid,
        library: lib.path,
        latency_us,
        attached_ns: causeway_store::now_ns(),
    });
    true
}

/// Attaches the library copies mapped by `pid` that are not attached yet, and the files it maps
/// that carry the CUDA runtime linked in (each looked at once per `objects_checked`); returns
/// them. In all-process mode the process becomes a target.
fn rescan_pid(
    skel: &CausewaySkel<'_>,
    mode: &Mode,
    attached: &mut Attached,
    nccl: bool,
    want: &dyn Fn(u16) -> OpProbes,
    pid: u32,
    objects_checked: &mut HashSet<(u64, u64)>,
) -> Vec<LibFile> {
    let mut new = Vec::new();
    for lib in cuda_files_in_maps(pid, objects_checked) {
        if !attached.contains(&lib) && attached.attach_lib(skel, &lib, nccl, want) > 0 {
            new.push(lib);
        }
    }
    if matches!(mode, Mode::All) {
        let _ = skel
            .maps
            .targets
            .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY);
    }
    new
}

/// How tracing began for a process and library (`library_attach.how`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Began {
    /// Attached before the command started.
    BeforeStart,
    /// The process was stopped from its mapping until the attach.
    Held,
    /// Held, then let go by the watchdog before the attach.
    HoldTimeout,
    /// Attached when the mapping was seen, the process not held.
    Mapped,
    /// Found by the periodic rescan.
    Rescan,
    /// Mapped by a process already running when the trace began.
    Running,
}

impl Began {
    fn name(self) -> &'static str {
        match self {
            Began::BeforeStart => "before_start",
            Began::Held => "held",
            Began::HoldTimeout => "hold_timeout",
            Began::Mapped => "mapped",
            Began::Rescan => "rescan",
            Began::Running => "running",
        }
    }

    pub(super) fn row(
        self,
        pid: u32,
        library: &std::path::Path,
        attached_ns: i64,
        mapped_ns: Option<i64>,
        process_start_ns: Option<i64>,
    ) -> LibraryAttach {
        LibraryAttach {
            pid,
            library: library.display().to_string(),
            how: self.name(),
            process_start_ns,
            mapped_ns,
            attached_ns,
            // Only then can no call of the process into the library precede its probes.
            complete: matches!(self, Began::BeforeStart | Began::Held),
        }
    }
}

/// The row of a library already mapped by a process running when the trace began.
pub(super) fn running_row(pid: u32, lib: &LibFile, attached_ns: i64) -> LibraryAttach {
    let started = host::cpu_and_start(pid).map(|(_, since_boot)| {
        attached_ns - (host::boottime_ns().saturating_sub(since_boot)) as i64
    });
    Began::Running.row(pid, &lib.path, attached_ns, None, started)
}

/// Attaches library copies that appeared in traced processes since the last scan; returns
/// them with their processes.
fn rescan(
    skel: &CausewaySkel<'_>,
    mode: &Mode,
    attached: &mut Attached,
    nccl: bool,
    want: &dyn Fn(u16) -> OpProbes,
    objects_checked: &mut HashSet<(u64, u64)>,
) -> Vec<(u32, LibFile)> {
    let mut found = Vec::new();
    let pids: Vec<u32> = match mode {
        Mode::All => cuda_processes().into_iter().map(|(p, _)| p).collect(),
        _ => skel
            .maps
            .targets
            .keys()
            .filter_map(|k| k.try_into().ok().map(u32::from_ne_bytes))
            .collect(),
    };
    for pid in pids {
        for lib in rescan_pid(skel, mode, attached, nccl, want, pid, objects_checked) {
            info!(pid, lib = %lib.path.display(), "new library copy attached");
            found.push((pid, lib));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key user space computes for a file is the one the kernel reports: the device in
    /// /proc/PID/maps (MAJOR:MINOR, hex) is the kernel's.
    #[test]
    fn a_file_key_is_the_kernel_s() {
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.ends_with(exe.to_str().unwrap()))
            .unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let (major, minor) = f[3].split_once(':').unwrap();
        let dev =
            u64::from_str_radix(major, 16).unwrap() << 20 | u64::from_str_radix(minor, 16).unwrap();
        let ino: u64 = f[4].parse().unwrap();
        let key = kernel_file_key(&exe).unwrap();
        assert_eq!(
            (
                u64::from_le_bytes(key[..8].try_into().unwrap()),
                u64::from_le_bytes(key[8..].try_into().unwrap())
            ),
            (dev, ino)
        );
    }
}
