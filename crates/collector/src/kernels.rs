//! Kernel names: `cudaLaunchKernel`'s first argument (stored as the event's arg0) is the host
//! stub of the kernel launched, a function whose symbol is the kernel's mangled name. The poll
//! thread locates each new (process, address) in the process's mappings while it is alive; a
//! naming thread reads the symbol from the module's file (blazesym, cached per file) and hands
//! (pid, address, kernel) rows to the writer (`kernels` table). The probes only store the address.
//! CUDA 13's stubs launch with a handle instead (`__cudaLaunchKernel(handle, ...)`, a thunk into
//! cudaLaunchKernel): `cudaGetKernel` events map each handle to its stub, and the handle's
//! launches are named after the stub's kernel. Kernels loaded through the driver (Triton, CuPy raw
//! kernels, anything JIT-compiled) have no stub: when `cuModuleGetFunction`/`cuLibraryGetKernel`
//! return, the BPF side sends the name and the handle (a `cw_name_event`: the caller's string may
//! be gone by the time user space could read it); `cuKernelGetFunction` maps a kernel to its
//! function; `cuLaunchKernel`'s handle is then named directly.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use causeway_store::KernelName;
use crossbeam_channel::{Receiver, Sender, unbounded};
use serde::Serialize;
use tracing::debug;

use crate::sink::Ctl;
use crate::stacks::MapsCache;

/// Longest demangled kernel name stored (template arguments can run to kilobytes).
const MAX_NAME: usize = 1024;
/// Longest raw symbol stored: the driver path's records hold up to 4,095 bytes
/// (causeway_bpf::abi::NAME_LEN); demangling reads it whole.
const MAX_SYMBOL: usize = 4096;

/// One launch address to name: located in its module, or named by the driver already.
#[derive(Debug)]
struct Job {
    pid: u32,
    address: u64,
    what: What,
}

#[derive(Debug)]
enum What {
    Stub(PathBuf, u64),
    Named(String),
}

/// The poll thread's side: which (process, address) pairs were handed over already, and the
/// processes' mappings.
#[derive(Debug)]
pub struct Kernels {
    /// Mappings of processes that launch kernels (refreshed when they map new files).
    pub maps: MapsCache,
    sent: HashSet<(u32, u64)>,
    /// Handle -> host stub, per process (cudaGetKernel).
    handles: HashMap<(u32, u64), u64>,
    /// Driver handles (CUfunction, CUkernel) -> the name they were got by, per process.
    names: HashMap<(u32, u64), String>,
    /// Launch addresses in no file mapping and of no known handle yet (a handle whose
    /// cudaGetKernel event is still in another thread's batch).
    unresolved: HashSet<(u32, u64)>,
    jobs: Option<Sender<Job>>,
    join: Option<JoinHandle<NamerStats>>,
    launches: u64,
    poll_time: Duration,
}

/// What kernel naming did over a trace.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelSummary {
    /// Launch events seen.
    pub launches: u64,
    /// Distinct (process, address) pairs located.
    pub addresses: u64,
    /// Of them, named.
    pub named: u64,
    /// Distinct kernels (module, symbol).
    pub kernels: u64,
    /// Time the poll thread spent on launches (lookups, locating new addresses), µs.
    pub poll_us: u64,
    /// Time the naming thread spent reading symbols, µs.
    pub naming_us: u64,
}

#[derive(Debug, Default)]
struct NamerStats {
    named: u64,
    kernels: u64,
    time: Duration,
}

impl Kernels {
    /// Starts the naming thread; names go to the writer as `Ctl::Kernels`.
    pub fn start(ctl: Sender<Ctl>) -> std::io::Result<Kernels> {
        let (tx, rx) = unbounded();
        let join = std::thread::Builder::new()
            .name("causeway-kernels".into())
            .spawn(move || run(rx, ctl))?;
        Ok(Kernels {
            maps: MapsCache::default(),
            sent: HashSet::new(),
            handles: HashMap::new(),
            names: HashMap::new(),
            unresolved: HashSet::new(),
            jobs: Some(tx),
            join: Some(join),
            launches: 0,
            poll_time: Duration::ZERO,
        })
    }

    /// A launch of the stub at `address` by `pid`: located now (the process may exit soon) and
    /// named on the naming thread, once per (pid, address).
    pub fn launched(&mut self, pid: u32, address: u64) {
        let t = Instant::now();
        self.launches += 1;
        self.locate(pid, address);
        self.poll_time += t.elapsed();
    }

    /// A handle `cudaGetKernel` returned for the stub at `stub`.
    pub fn handle(&mut self, pid: u32, handle: u64, stub: u64) {
        if handle == 0 || stub == 0 {
            return;
        }
        self.handles.insert((pid, handle), stub);
        if self.unresolved.remove(&(pid, handle)) {
            self.send(pid, handle, stub);
        }
    }

    /// A driver handle (`cuModuleGetFunction`'s CUfunction, `cuLibraryGetKernel`'s CUkernel)
    /// got by `name`; names that are not printable text are not kept.
    pub fn named_handle(&mut self, pid: u32, handle: u64, name: String) {
        if handle == 0 || name.is_empty() || !name.chars().all(|c| c.is_ascii_graphic()) {
            debug!(pid, handle, "a driver kernel handle without a usable name");
            return;
        }
        self.name_handle(pid, handle, name);
    }

    /// `cuKernelGetFunction`: `function` is `kernel`'s function.
    pub fn kernel_function(&mut self, pid: u32, kernel: u64, function: u64) {
        if let Some(name) = self.names.get(&(pid, kernel)).cloned() {
            self.name_handle(pid, function, name);
        }
    }

    fn name_handle(&mut self, pid: u32, handle: u64, name: String) {
        if self.unresolved.remove(&(pid, handle))
            && let Some(tx) = &self.jobs
        {
            let _ = tx.send(Job {
                pid,
                address: handle,
                what: What::Named(name.clone()),
            });
        }
        self.names.insert((pid, handle), name);
    }

    fn locate(&mut self, pid: u32, address: u64) {
        if address == 0 || !self.sent.insert((pid, address)) {
            return;
        }
        if let Some(name) = self.names.get(&(pid, address)).cloned() {
            if let Some(tx) = &self.jobs {
                let _ = tx.send(Job {
                    pid,
                    address,
                    what: What::Named(name),
                });
            }
            return;
        }
        let stub = self
            .handles
            .get(&(pid, address))
            .copied()
            .unwrap_or(address);
        if !self.send(pid, address, stub) {
            self.unresolved.insert((pid, address));
        }
    }

    /// Queues `address` to be named after the function at `stub`; false if `stub` is in no
    /// file mapping of the process.
    fn send(&mut self, pid: u32, address: u64, stub: u64) -> bool {
        let Some(Some((path, offset))) = self.maps.locate(pid, &[stub]).pop() else {
            debug!(
                pid,
                address, stub, "a launch address outside the process's file mappings"
            );
            return false;
        };
        if let Some(tx) = &self.jobs {
            let _ = tx.send(Job {
                pid,
                address,
                what: What::Stub(path, offset),
            });
        }
        true
    }

    /// Waits until every queued address is named and handed to the writer.
    pub fn finish(mut self) -> KernelSummary {
        drop(self.jobs.take());
        let namer = self
            .join
            .take()
            .and_then(|j| j.join().ok())
            .unwrap_or_default();
        KernelSummary {
            launches: self.launches,
            addresses: self.sent.len() as u64,
            named: namer.named,
            kernels: namer.kernels,
            poll_us: self.poll_time.as_micros() as u64,
            naming_us: namer.time.as_micros() as u64,
        }
    }
}

/// Names located addresses: per file, the symbol covering each offset (raw, then demangled).
/// Kernel ids are given per (module, symbol), so one kernel launched by several processes or
/// from several addresses keeps one id.
struct Namer {
    sym: Symbolizer,
    ids: HashMap<(String, String), u32>,
}

impl Namer {
    fn new() -> Namer {
        Namer {
            sym: Symbolizer::builder().enable_demangling(false).build(),
            ids: HashMap::new(),
        }
    }

    fn id(&mut self, module: &str, symbol: &str) -> u32 {
        let next = self.ids.len() as u32 + 1;
        *self
            .ids
            .entry((module.to_string(), symbol.to_string()))
            .or_insert(next)
    }

    fn row(&mut self, j: &Job, module: &str, symbol: &str) -> KernelName {
        let name = causeway_store::symbols::demangle(symbol)
            .chars()
            .take(MAX_NAME)
            .collect();
        let symbol: String = symbol.chars().take(MAX_SYMBOL).collect();
        KernelName {
            pid: j.pid,
            address: j.address as i64,
            kernel_id: self.id(module, &symbol),
            name,
            symbol,
            module: module.to_string(),
        }
    }

    fn name(&mut self, jobs: &[Job]) -> Vec<KernelName> {
        let mut out = Vec::new();
        let mut by_file: HashMap<&PathBuf, Vec<(&Job, u64)>> = HashMap::new();
        for j in jobs {
            match &j.what {
                What::Stub(path, offset) => by_file.entry(path).or_default().push((j, *offset)),
                // Loaded through the driver from memory: no module file.
                What::Named(name) => out.push(self.row(j, "", name)),
            }
        }
        for (path, js) in by_file {
            let src = Source::Elf(Elf {
                debug_syms: false,
                ..Elf::new(path.clone())
            });
            let offs: Vec<u64> = js.iter().map(|(_, o)| *o).collect();
            let Ok(syms) = self.sym.symbolize(&src, Input::FileOffset(&offs)) else {
                debug!(file = %path.display(), "kernel stubs could not be named");
                continue;
            };
            let syms: Vec<Option<String>> = syms
                .into_iter()
                .map(|s| match s {
                    Symbolized::Sym(s) => Some(s.name.to_string()),
                    _ => None,
                })
                .collect();
            let module = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for ((j, _), s) in js.iter().zip(syms) {
                if let Some(s) = s {
                    out.push(self.row(j, &module, &s));
                }
            }
        }
        out
    }
}

fn run(rx: Receiver<Job>, ctl: Sender<Ctl>) -> NamerStats {
    let mut namer = Namer::new();
    let mut stats = NamerStats::default();
    while let Ok(first) = rx.recv() {
        let t = Instant::now();
        // Whatever else is queued is named with it: one pass per file.
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let names = namer.name(&jobs);
        stats.named += names.len() as u64;
        stats.time += t.elapsed();
        if !names.is_empty() {
            let _ = ctl.send(Ctl::Kernels(names));
        }
    }
    stats.kernels = namer.ids.len() as u64;
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_symbols_are_demangled_without_parameters() {
        use causeway_store::symbols::demangle;
        assert_eq!(
            demangle(
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
            ),
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, (unsigned long)1> >"
        );
        assert_eq!(demangle("my_c_kernel"), "my_c_kernel");
    }

    /// A function of this test binary, launched "by" this process: named from its file.
    #[test]
    fn a_stub_in_a_mapped_file_is_named_from_its_symbol() {
        let me = std::process::id();
        let f = a_stub_in_a_mapped_file_is_named_from_its_symbol as fn() as usize as u64;
        let mut maps = MapsCache::default();
        let loc = maps.locate(me, &[f]).pop().flatten().unwrap();
        let mut namer = Namer::new();
        let names = namer.name(&[
            Job {
                pid: me,
                address: f,
                what: What::Stub(loc.0.clone(), loc.1),
            },
            Job {
                pid: me + 1,
                address: f + 1,
                what: What::Stub(loc.0, loc.1 + 1),
            },
        ]);
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names[0]
                .name
                .contains("a_stub_in_a_mapped_file_is_named_from_its_symbol"),
            "{names:?}"
        );
        // One kernel, one id, whichever process or address launched it.
        assert_eq!(names[0].kernel_id, names[1].kernel_id);
        assert_eq!(names[0].name, names[1].name);
    }
}
