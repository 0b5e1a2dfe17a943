//! User stacks (`--stacks`): the BPF side sends each distinct stack once (pid, hash, addresses);
//! here the addresses are located in the process's mappings while it is alive (a /proc/PID/maps
//! snapshot taken when the process is first seen, refreshed on a miss), and a symboliser thread
//! turns (file, file offset) pairs into symbol names with blazesym. Working from files rather
//! than the live process lets stacks of processes that already exited be symbolised too.
//! CPython frames in the same record are named here, on the poll thread, from the code objects
//! in the live process (python.rs), and go to the writer at once.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use causeway_bpf::abi::{RawStack, RawStackBytes};
use causeway_store::{Frame, PythonStack};
use crossbeam_channel::{Receiver, Sender, unbounded};
use tracing::debug;

use crate::python::{Interpreters, Rejected};
use crate::sink::Ctl;
use crate::unwind::Unwinding;

/// Stack copies kept while their stack records are awaited (they come just after, from the same
/// program; a copy whose stack never came is dropped with the rest past this many).
const MAX_PENDING_COPIES: usize = 256;

/// Longest symbol name stored (C++ template names can be very long).
const MAX_SYMBOL: usize = 512;

/// One file-backed mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: PathBuf,
    /// Mapped executable (code: its file's unwind tables apply).
    pub exec: bool,
}

/// Parses /proc/PID/maps text: file-backed mappings, with paths valid in our mount namespace.
fn parse_maps(pid: u32, text: &str) -> Vec<Mapping> {
    let mut resolved: HashMap<&str, PathBuf> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(perms), Some(off), Some(inode), Some(path)) =
            (f.first(), f.get(1), f.get(2), f.get(4), f.get(5))
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let (Some((lo, hi)), Ok(offset)) = (range.split_once('-'), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
        else {
            continue;
        };
        let path = resolved
            .entry(path)
            .or_insert_with(|| {
                // The same inode at the same path means the same file in our namespace too.
                let same = std::fs::metadata(path)
                    .is_ok_and(|m| inode.parse::<u64>().is_ok_and(|i| i == m.ino()));
                if same {
                    PathBuf::from(path)
                } else {
                    PathBuf::from(format!("/proc/{pid}/root{path}"))
                }
            })
            .clone();
        out.push(Mapping {
            start,
            end,
            offset,
            path,
            exec: perms.contains('x'),
        });
    }
    out
}

/// /proc/PID/maps snapshots of the traced processes.
#[derive(Debug, Default)]
pub struct MapsCache {
    /// Shared with the unwinder built from it: a new snapshot is a new Arc.
    procs: HashMap<u32, Arc<Vec<Mapping>>>,
}

impl MapsCache {
    /// Takes a snapshot of a process's mappings unless one exists.
    pub fn remember(&mut self, pid: u32) {
        if !self.procs.contains_key(&pid) {
            self.refresh(pid);
        }
    }

    /// Takes a new snapshot (the process mapped a new file).
    pub fn refresh(&mut self, pid: u32) {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            let maps = parse_maps(pid, &text);
            // The same mappings keep their snapshot, and the unwinder built from it.
            if self.procs.get(&pid).is_none_or(|old| **old != maps) {
                self.procs.insert(pid, Arc::new(maps));
            }
        }
    }

    /// Forgets a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    fn locate_in(maps: &[Mapping], ip: u64) -> Option<(PathBuf, u64)> {
        maps.iter()
            .find(|m| (m.start..m.end).contains(&ip))
            .map(|m| (m.path.clone(), ip - m.start + m.offset))
    }

    /// (file, file offset) of every address, re-reading the maps once if one is not covered
    /// (a library loaded since the snapshot).
    pub fn locate(&mut self, pid: u32, ips: &[u64]) -> Vec<Option<(PathBuf, u64)>> {
        let covered = |c: &MapsCache| {
            c.procs
                .get(&pid)
                .is_some_and(|m| ips.iter().all(|ip| Self::locate_in(m, *ip).is_some()))
        };
        if !covered(self) {
            self.refresh(pid);
        }
        let maps = self
            .procs
            .get(&pid)
            .map(|m| m.as_slice())
            .unwrap_or_default();
        ips.iter().map(|ip| Self::locate_in(maps, *ip)).collect()
    }

    /// The snapshot of a process's mappings, taken now if there is none or if it does not
    /// cover `ip`.
    fn covering(&mut self, pid: u32, ip: u64) -> Option<Arc<Vec<Mapping>>> {
        if (self.procs.get(&pid)).is_none_or(|m| Self::locate_in(m, ip).is_none()) {
            self.refresh(pid);
        }
        self.procs.get(&pid).cloned()
    }
}

/// A stack to symbolise: its hash and each frame's address and location.
#[derive(Debug)]
struct Job {
    hash: u64,
    frames: Vec<(u64, Option<(PathBuf, u64)>)>,
}

/// The poll thread's side of stack handling: maps snapshots and the symboliser thread.
#[derive(Debug)]
pub struct Stacks {
    /// Mappings of the traced processes.
    pub maps: MapsCache,
    sent: HashSet<u64>,
    jobs: Option<Sender<Job>>,
    join: Option<JoinHandle<()>>,
    /// Distinct stacks handed to the symboliser.
    pub distinct: u64,
    /// CPython interpreters of the traced processes; None with Python frames off.
    pub python: Option<Interpreters>,
    /// Processes to look at for an interpreter (their stacks came before it was known).
    pub py_pending: Vec<u32>,
    /// Distinct stacks by the status of their Python frames.
    pub py_statuses: std::collections::BTreeMap<&'static str, u64>,
    /// Distinct stacks per process recorded before its interpreter was in the kernel (they
    /// have no Python frames; counted as missing once the process is found to run CPython).
    py_early: HashMap<u32, u64>,
    /// Registers and stack memory of new stacks, by hash, until their stack record comes.
    copies: HashMap<u64, RawStackBytes>,
    unwinding: Unwinding,
    /// Distinct stacks whose native frames were unwound from their copied stack memory
    /// (deeper than the frame-pointer walk).
    pub unwound: u64,
    ctl: Sender<Ctl>,
}

impl Stacks {
    /// Starts the symboliser thread; symbolised stacks go to the writer as `Ctl::Stack`.
    /// With `python`, CPython frames are named too.
    pub fn start(ctl: Sender<Ctl>, python: bool) -> std::io::Result<Stacks> {
        let (tx, rx) = unbounded();
        let to_writer = ctl.clone();
        let join = std::thread::Builder::new()
            .name("causeway-symbols".into())
            .spawn(move || run(rx, to_writer))?;
        Ok(Stacks {
            maps: MapsCache::default(),
            sent: HashSet::new(),
            jobs: Some(tx),
            join: Some(join),
            distinct: 0,
            python: python.then(Interpreters::default),
            py_pending: Vec::new(),
            py_statuses: std::collections::BTreeMap::new(),
            py_early: HashMap::new(),
            copies: HashMap::new(),
            unwinding: Unwinding::default(),
            unwound: 0,
            ctl,
        })
    }

    /// Names the Python frames of a new stack (reading the live process) and sends them.
    fn python_frames(&mut self, s: &RawStack) {
        let Some(py) = self.python.as_mut() else {
            return;
        };
        let f = s.py_flags;
        if !f.walked() && !f.no_thread() {
            // Not (yet) known as CPython in the kernel: look at the process.
            if !py.looked_at(s.pid) {
                self.py_pending.push(s.pid);
            }
            *self.py_early.entry(s.pid).or_default() += 1;
            return;
        }
        let (status, frames) = if f.no_thread() {
            ("no_thread", Vec::new())
        } else {
            let named = match py.get(s.pid).cloned() {
                Some(interp) => (py.symbols.frames(s.pid, &interp, &s.py)).map(|mut frames| {
                    // 3.10 runs each Python frame in a C-level eval call of its own.
                    let all = interp.layout.version < (3, 11);
                    for (i, fr) in frames.iter_mut().enumerate() {
                        fr.entry = all || (i < 32 && s.py_entry & (1 << i) != 0);
                    }
                    frames
                }),
                None => Err(Rejected::Invalid),
            };
            match named {
                Ok(frames) if f.truncated() => ("truncated", frames),
                Ok(frames) if f.bad_read() => ("partial", frames),
                Ok(frames) => ("ok", frames),
                Err(Rejected::Invalid) => ("rejected", Vec::new()),
                Err(Rejected::Unreadable) => ("unreadable", Vec::new()),
            }
        };
        *self.py_statuses.entry(status).or_default() += 1;
        let stack = PythonStack {
            tid: s.tid,
            status,
            frames,
        };
        let _ = self.ctl.send(Ctl::PyStack(s.hash as i64, stack));
    }

    /// Keeps a new stack's registers and memory until its stack record comes.
    pub fn copied(&mut self, b: RawStackBytes) {
        if self.copies.len() >= MAX_PENDING_COPIES {
            self.copies.clear();
        }
        self.copies.insert(b.hash, b);
    }

    /// Handles a stack record: locates its frames now (the process may exit soon) and queues it.
    pub fn push(&mut self, s: RawStack) {
        let copy = self.copies.remove(&s.hash);
        if !self.sent.insert(s.hash) {
            return;
        }
        self.python_frames(&s);
        let located = self.maps.locate(s.pid, &s.ips);
        let mut frames: Vec<(u64, Option<(PathBuf, u64)>)> =
            s.ips.into_iter().zip(located).collect();
        trim_broken(&mut frames);
        // The copied stack unwound with the files' tables goes where the frame-pointer walk
        // stopped (code without frame pointers); the walk stays where it went as deep.
        if let Some(b) = copy
            && let Some(maps) = self.maps.covering(b.pid, b.ip)
        {
            let ips = self.unwinding.unwind(&maps, &b);
            let located = self.maps.locate(b.pid, &ips);
            let mut unwound: Vec<_> = ips.into_iter().zip(located).collect();
            trim_broken(&mut unwound);
            if unwound.len() > frames.len() {
                frames = unwound;
                self.unwound += 1;
            }
        }
        if let Some(tx) = &self.jobs {
            let _ = tx.send(Job {
                hash: s.hash,
                frames,
            });
            self.distinct += 1;
        }
    }

    /// Forgets an exited process's unwinder.
    pub fn forget_unwinder(&mut self, pid: u32) {
        self.unwinding.forget(pid);
    }

    /// Distinct stacks of CPython processes recorded before their interpreter was found.
    pub fn py_early(&self) -> u64 {
        let Some(py) = self.python.as_ref() else {
            return 0;
        };
        (self.py_early.iter())
            .filter(|(pid, _)| py.was_found(**pid))
            .map(|(_, n)| n)
            .sum()
    }

    /// Waits until every queued stack is symbolised and handed to the writer.
    pub fn finish(mut self) {
        drop(self.jobs.take());
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Keeps the frames before the first address outside every mapped file. A frame-pointer walk
/// through code built without frame pointers (libtorch_cuda.so on a real GPU) reads such
/// addresses (`0x0`, non-canonical ones) and then stale words that may point into code: nothing
/// from there on is a caller. Code in anonymous memory (a JIT) ends the stack too.
fn trim_broken(frames: &mut Vec<(u64, Option<(PathBuf, u64)>)>) {
    if let Some(i) = frames.iter().position(|(_, loc)| loc.is_none()) {
        frames.truncate(i.max(1));
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Symbolises the located frames of one stack, file by file.
fn symbolise(sym: &Symbolizer, job: &Job) -> Vec<Frame> {
    let mut frames: Vec<Frame> = job
        .frames
        .iter()
        .map(|(ip, loc)| Frame {
            ip: *ip,
            module: loc.as_ref().map(|(p, _)| file_name(p)).unwrap_or_default(),
            ..Frame::default()
        })
        .collect();
    let mut by_file: HashMap<&PathBuf, Vec<(usize, u64)>> = HashMap::new();
    for (i, (_, loc)) in job.frames.iter().enumerate() {
        if let Some((path, off)) = loc {
            by_file.entry(path).or_default().push((i, *off));
        }
    }
    for (path, idx) in by_file {
        let src = Source::Elf(Elf {
            debug_syms: false,
            ..Elf::new(path.clone())
        });
        let offs: Vec<u64> = idx.iter().map(|(_, o)| *o).collect();
        let Ok(syms) = sym.symbolize(&src, Input::FileOffset(&offs)) else {
            debug!(file = %path.display(), "symbolisation failed");
            continue;
        };
        for ((i, _), s) in idx.iter().zip(syms) {
            if let Symbolized::Sym(s) = s {
                let mut name: String = s.name.chars().take(MAX_SYMBOL).collect();
                if s.offset > 0 {
                    name.push_str(&format!("+0x{:x}", s.offset));
                }
                frames[*i].symbol = name;
                frames[*i].offset = s.offset as u64;
            }
        }
    }
    frames
}

fn run(rx: Receiver<Job>, ctl: Sender<Ctl>) {
    // The raw symbol is stored, for exact matching; readers demangle it for display.
    let sym = Symbolizer::builder().enable_demangling(false).build();
    for job in rx {
        let frames = symbolise(&sym, &job);
        let _ = ctl.send(Ctl::Stack(job.hash as i64, frames));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_ends_at_the_first_address_outside_every_mapped_file() {
        let at = |o: u64| Some((PathBuf::from("/lib/libtorch_cuda.so"), o));
        // As recorded on an H100: cudaStreamSynchronize, two libtorch_cuda frames, then 0x0,
        // a non-canonical word and a stale address inside libc10.so.
        let mut f = vec![
            (0x7f00_0000_1000, at(0x1000)),
            (0x7f00_0000_2000, at(0x2000)),
            (0x7f00_0000_3000, at(0x3000)),
            (0, None),
            (0x8000_0001_0000_0001, None),
            (0x7f00_0000_4000, at(0x4000)),
        ];
        trim_broken(&mut f);
        assert_eq!(
            f.iter().map(|x| x.0).collect::<Vec<_>>(),
            [0x7f00_0000_1000, 0x7f00_0000_2000, 0x7f00_0000_3000]
        );
        let mut whole = vec![(1, at(1)), (2, at(2))];
        trim_broken(&mut whole);
        assert_eq!(whole.len(), 2);
        let mut first = vec![(0, None), (2, at(2))];
        trim_broken(&mut first);
        assert_eq!(first.len(), 1, "the probed function's own frame stays");
    }

    #[test]
    fn maps_lines_become_file_mappings() {
        let exe = std::env::current_exe().unwrap();
        let ino = std::fs::metadata(&exe).unwrap().ino();
        let text = format!(
            "00400000-00452000 r-xp 00001000 08:02 {ino} {}\n\
             7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n\
             7f000000-7f001000 r--p 00002000 08:02 1 /nonexistent/lib.so\n",
            exe.display()
        );
        let m = parse_maps(4242, &text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].path, exe);
        assert_eq!((m[0].start, m[0].offset), (0x400000, 0x1000));
        // A file that is not ours at that path is reached through the process's root.
        assert_eq!(
            m[1].path,
            PathBuf::from("/proc/4242/root/nonexistent/lib.so")
        );
        assert_eq!(
            MapsCache::locate_in(&m, 0x400010),
            Some((exe.clone(), 0x1010))
        );
        assert_eq!(MapsCache::locate_in(&m, 0x10), None);
    }

    #[test]
    fn our_own_function_is_symbolised_from_its_file_offset() {
        let mut cache = MapsCache::default();
        let me = std::process::id();
        let ip = our_own_function_is_symbolised_from_its_file_offset as fn() as usize as u64;
        let located = cache.locate(me, &[ip, 1]);
        assert!(located[0].is_some() && located[1].is_none(), "{located:?}");
        let job = Job {
            hash: 1,
            frames: vec![(ip, located[0].clone()), (1, None)],
        };
        let frames = symbolise(
            &Symbolizer::builder().enable_demangling(false).build(),
            &job,
        );
        assert!(
            frames[0]
                .symbol
                .contains("our_own_function_is_symbolised_from_its_file_offset"),
            "{frames:?}"
        );
        assert!(!frames[0].module.is_empty());
        assert_eq!((frames[1].ip, frames[1].symbol.as_str()), (1, ""));
    }
}
