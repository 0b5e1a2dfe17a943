//! Attaching programs: the call programs on every probed symbol of a library file (with the op
//! in the attach cookie), and the host tracepoint programs (tp_btf, no tracefs). Links are kept
//! per op and direction, so that an op switched to entry-only mode loses its return probes (their
//! trap is most of a probed call's cost) and gets them back when it returns to a timed mode, and
//! a sampled op loses all its probes between its attached slices (sampling.rs).
//!
//! On kernels with uprobe.multi (>= 6.6) an op gets one entry link and one return link per file,
//! covering its functions there; otherwise one classic link per probe. Detaching a classic
//! uprobe waits for RCU grace periods under a global mutex (about 0.1 s each: 60 probes took 7 s
//! to tear down), a multi link waits once; `drop_links` detaches in parallel.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags, ProgramMut, UprobeMultiOpts, UprobeOpts};
use causeway_bpf::probes::{Library, ProbeSpec, cookie, probes_for};
use causeway_bpf::skel::CausewaySkel;
use tracing::{debug, info, warn};

use crate::cost::FirstInsn;
use crate::discover::{LibFile, file_id};
use crate::elfsyms::function_offsets;
use crate::error::CollectorError;

/// Attaches `prog` at one file offset of `path` (for processes `pid`, -1 = all), as a multi
/// link or a classic uprobe to match the loaded program variant.
pub fn attach_at(
    prog: &ProgramMut<'_>,
    multi: bool,
    pid: i32,
    path: &Path,
    offsets: &[(usize, u64)],
    retprobe: bool,
) -> Result<Link, causeway_bpf::libbpf_rs::Error> {
    if multi {
        let opts = UprobeMultiOpts {
            offsets: offsets.iter().map(|o| o.0).collect(),
            cookies: offsets.iter().map(|o| o.1).collect(),
            retprobe,
            ..Default::default()
        };
        prog.attach_uprobe_multi_with_opts(pid, path, "", opts)
    } else {
        let &[(offset, cookie)] = offsets else {
            return Err(causeway_bpf::libbpf_rs::Error::from(std::io::Error::from(
                std::io::ErrorKind::InvalidInput,
            )));
        };
        let opts = UprobeOpts {
            cookie,
            retprobe,
            ..Default::default()
        };
        prog.attach_uprobe_with_opts(pid, path, offset, opts)
    }
}

/// Detaches links concurrently (multi-link detaches each wait for a grace period of their own;
/// in parallel the waits overlap).
pub fn drop_links(links: Vec<Link>) {
    if links.len() <= 1 {
        return;
    }
    let per_thread = links.len().div_ceil(64);
    let mut links = links;
    std::thread::scope(|s| {
        while !links.is_empty() {
            let chunk: Vec<Link> = links.drain(..per_thread.min(links.len())).collect();
            s.spawn(move || drop(chunk));
        }
    });
}

/// A probed symbol present in a file.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    spec: &'static ProbeSpec,
    offset: usize,
    first: FirstInsn,
}

/// Which of an op's probes are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpProbes {
    /// None (a sampled op between its attached slices).
    Detached,
    /// The entry probe only (entry-only mode).
    Entry,
    /// Entry and return probes (the timed modes).
    EntryAndReturn,
}

/// The links of one file, per op: an op's probes are attached and detached without touching
/// the other ops' (one multi link per op and direction, or one classic link per function).
struct FileProbes {
    lib: LibFile,
    /// The probed symbols the file exports (those whose entry probe could not be attached at
    /// all are left out).
    symbols: Vec<Symbol>,
    /// Entry links per op.
    entries: HashMap<u16, Vec<Link>>,
    /// Return links per op, for the ops whose calls are timed.
    exits: HashMap<u16, Vec<Link>>,
}

impl FileProbes {
    fn ops(&self) -> BTreeSet<u16> {
        self.symbols.iter().map(|s| s.spec.op).collect()
    }

    /// The (offset, cookie) of every function of `op`.
    fn points(&self, op: u16) -> Vec<(usize, u64)> {
        self.symbols
            .iter()
            .filter(|s| s.spec.op == op)
            .map(|s| (s.offset, cookie(s.spec.op, s.spec.aux)))
            .collect()
    }
}

/// Attached probes, one entry per library file (keyed by inode so copies attach once).
pub struct Attached {
    by_file: HashMap<(u64, u64), FileProbes>,
    multi: bool,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("files", &self.by_file.len())
            .field("multi", &self.multi)
            .finish()
    }
}

impl Attached {
    /// Attachments for the loaded program variant (`LoadConfig::multi`).
    pub fn new(multi: bool) -> Attached {
        Attached {
            by_file: HashMap::new(),
            multi,
        }
    }

    /// Whether a file is already attached.
    pub fn contains(&self, lib: &LibFile) -> bool {
        file_id(&lib.path).is_some_and(|id| self.by_file.contains_key(&id))
    }

    /// Number of attached files.
    pub fn files(&self) -> usize {
        self.by_file.len()
    }

    /// Number of attached probes (entry and return probes counted separately).
    pub fn probes(&self) -> usize {
        self.by_file
            .values()
            .flat_map(|f| {
                f.symbols.iter().map(|s| {
                    usize::from(f.entries.contains_key(&s.spec.op))
                        + usize::from(f.exits.contains_key(&s.spec.op))
                })
            })
            .sum()
    }

    /// The kind of first instruction of every probed symbol, per op (all files).
    pub fn first_insns(&self) -> Vec<(u16, FirstInsn)> {
        self.by_file
            .values()
            .flat_map(|f| f.symbols.iter().map(|s| (s.spec.op, s.first)))
            .collect()
    }

    /// The attached files.
    pub fn libs(&self) -> Vec<LibFile> {
        self.by_file.values().map(|f| f.lib.clone()).collect()
    }

    /// Attaches the entry (`ret` false) or return links of `op` in a file: the links, and the
    /// offsets that could not be attached. Errors are logged.
    fn attach_op(
        &self,
        skel: &CausewaySkel<'_>,
        f: &FileProbes,
        op: u16,
        ret: bool,
    ) -> (Vec<Link>, Vec<usize>) {
        let prog = match (self.multi, ret) {
            (true, false) => &skel.progs.cw_call_entry_multi,
            (true, true) => &skel.progs.cw_call_exit_multi,
            (false, false) => &skel.progs.cw_call_entry,
            (false, true) => &skel.progs.cw_call_exit,
        };
        let points = f.points(op);
        let what = if ret { "return probe" } else { "probe" };
        if self.multi {
            return match attach_at(prog, true, -1, &f.lib.path, &points, ret) {
                Ok(l) => (vec![l], Vec::new()),
                Err(err) => {
                    debug!(op, lib = %f.lib.path.display(), %err, "{what} not attached");
                    (Vec::new(), points.iter().map(|p| p.0).collect())
                }
            };
        }
        let (mut links, mut failed) = (Vec::new(), Vec::new());
        for p in points {
            match attach_at(prog, false, -1, &f.lib.path, &[p], ret) {
                Ok(l) => links.push(l),
                Err(err) => {
                    debug!(op, offset = p.0, lib = %f.lib.path.display(), %err, "{what} not attached");
                    failed.push(p.0);
                }
            }
        }
        (links, failed)
    }

    /// Attaches one op's probes in one file as `want` says (return links first, so that no
    /// call entered with its entry probe misses its return), the links not already there.
    fn attach_probes(&self, skel: &CausewaySkel<'_>, f: &mut FileProbes, op: u16, want: OpProbes) {
        if want == OpProbes::EntryAndReturn && !f.exits.contains_key(&op) {
            let (links, _) = self.attach_op(skel, f, op, true);
            if links.is_empty() {
                warn!(op, lib = %f.lib.path.display(), "return probes not attached: these calls are counted, not timed");
            } else {
                f.exits.insert(op, links);
            }
        }
        if want != OpProbes::Detached && !f.entries.contains_key(&op) {
            let (links, failed) = self.attach_op(skel, f, op, false);
            f.symbols
                .retain(|s| s.spec.op != op || !failed.contains(&s.offset));
            if !links.is_empty() {
                f.entries.insert(op, links);
            }
        }
    }

    /// Attaches our entry program to every probed symbol the file exports, and the return
    /// program, as `want(op)` says. Returns the number of functions with probes attached (0
    /// when the file was already attached or exports none).
    pub fn attach_lib(
        &mut self,
        skel: &CausewaySkel<'_>,
        lib: &LibFile,
        nccl: bool,
        want: impl Fn(u16) -> OpProbes,
    ) -> usize {
        if lib.library == Library::Nccl && !nccl {
            return 0;
        }
        let Some(id) = file_id(&lib.path) else {
            return 0;
        };
        if self.by_file.contains_key(&id) {
            return 0;
        }
        if lib.library == Library::Cudart {
            // Driver calls that return into this file are the runtime's own (calls.h
            // `cw_called_by_runtime`): listed before the probes exist, so none is counted twice.
            if let Err(err) =
                skel.maps
                    .runtime_files
                    .update(&id.1.to_ne_bytes(), &[1u8], MapFlags::ANY)
            {
                warn!(lib = %lib.path.display(), %err, "runtime file not listed: its driver calls are counted twice");
            }
        }
        let specs: Vec<&'static ProbeSpec> = probes_for(lib.library).collect();
        let names: Vec<&str> = specs.iter().map(|s| s.symbol).collect();
        let offsets = function_offsets(&lib.path, &names);
        let mut f = FileProbes {
            lib: lib.clone(),
            symbols: specs
                .iter()
                .filter_map(|s| {
                    offsets.get(s.symbol).map(|&(offset, first)| Symbol {
                        spec: s,
                        offset,
                        first,
                    })
                })
                .collect(),
            entries: HashMap::new(),
            exits: HashMap::new(),
        };
        for op in f.ops() {
            self.attach_probes(skel, &mut f, op, want(op));
        }
        let functions = f
            .symbols
            .iter()
            .filter(|s| f.entries.contains_key(&s.spec.op))
            .count();
        if functions > 0 {
            info!(lib = %lib.path.display(), library = ?lib.library, functions, multi = self.multi, "attached");
        } else if !f.symbols.is_empty() {
            warn!(lib = %lib.path.display(), "probes not attached");
        }
        self.by_file.insert(id, f);
        functions
    }

    /// Attaches (`on`) or detaches the return probes of every function recording `op` whose
    /// entry probe is attached. Returns the number of files changed.
    pub fn set_return_probes(&mut self, skel: &CausewaySkel<'_>, op: u16, on: bool) -> usize {
        let mut old = Vec::new();
        let mut changed = 0;
        let ids: Vec<(u64, u64)> = self.by_file.keys().copied().collect();
        for id in ids {
            let mut f = self.by_file.remove(&id).expect("present");
            if f.entries.contains_key(&op) && f.exits.contains_key(&op) != on {
                if on {
                    self.attach_probes(skel, &mut f, op, OpProbes::EntryAndReturn);
                } else {
                    old.extend(f.exits.remove(&op).unwrap_or_default());
                }
                changed += 1;
            }
            self.by_file.insert(id, f);
        }
        drop_links(old);
        changed
    }

    /// Attaches the probes of `op` that `want` asks for (entry only, or entry and return) in
    /// every file exporting it; probes already attached stay.
    pub fn attach_op_probes(&mut self, skel: &CausewaySkel<'_>, op: u16, want: OpProbes) {
        let ids: Vec<(u64, u64)> = self.by_file.keys().copied().collect();
        for id in ids {
            let mut f = self.by_file.remove(&id).expect("present");
            if f.symbols.iter().any(|s| s.spec.op == op) {
                self.attach_probes(skel, &mut f, op, want);
            }
            self.by_file.insert(id, f);
        }
    }

    /// Takes every link of `op` out, to be detached by the caller: (entry links, return
    /// links). Dropping waits for RCU grace periods, which the caller does off its loop, the
    /// entry links first: a call entered before they go is still timed by its return probe, and
    /// a call entered after is not counted at all, never counted without its return.
    pub fn detach_op_probes(&mut self, op: u16) -> (Vec<Link>, Vec<Link>) {
        let (mut entries, mut exits) = (Vec::new(), Vec::new());
        for f in self.by_file.values_mut() {
            entries.extend(f.entries.remove(&op).unwrap_or_default());
            exits.extend(f.exits.remove(&op).unwrap_or_default());
        }
        (entries, exits)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let links = self
            .by_file
            .drain()
            .flat_map(|(_, f)| {
                f.entries
                    .into_values()
                    .chain(f.exits.into_values())
                    .flatten()
            })
            .collect();
        drop_links(links);
    }
}

/// Host program links (kept alive for the trace).
pub fn attach_host(skel: &CausewaySkel<'_>) -> Result<Vec<Link>, CollectorError> {
    let p = &skel.progs;
    let required = [
        ("sched_switch", &p.cw_sched_switch),
        ("sched_waking", &p.cw_sched_waking),
    ];
    let optional = [
        ("mm_page_alloc", &p.cw_mm_page_alloc),
        ("mark_victim", &p.cw_oom_kill),
        ("block_rq_issue", &p.cw_block_rq_issue),
        ("block_rq_complete", &p.cw_block_rq_complete),
        ("tcp_retransmit_skb", &p.cw_tcp_retransmit),
        ("sock_send_length", &p.cw_sock_send),
        ("sock_recv_length", &p.cw_sock_recv),
        ("sys_enter", &p.cw_sys_enter),
        ("sys_exit", &p.cw_sys_exit),
        ("mm_vmscan_direct_reclaim_begin", &p.cw_direct_reclaim_begin),
        ("mm_vmscan_direct_reclaim_end", &p.cw_direct_reclaim_end),
        ("mm_vmscan_memcg_reclaim_begin", &p.cw_memcg_reclaim_begin),
        ("mm_vmscan_memcg_reclaim_end", &p.cw_memcg_reclaim_end),
    ];
    let mut links = Vec::new();
    for (name, prog) in required {
        links.push(prog.attach().map_err(|source| CollectorError::Attach {
            what: format!("tp_btf/{name}"),
            source,
        })?);
    }
    // Socket calls come from one pair or the other (LoadConfig::sock_tracepoints).
    for (name, prog) in optional.into_iter().filter(|(_, p)| p.autoload()) {
        match prog.attach() {
            Ok(l) => links.push(l),
            Err(err) => {
                warn!(tracepoint = name, %err, "host tracepoint not attached; its events are missing")
            }
        }
    }
    Ok(links)
}

/// Process lifecycle links and the batch flush at switch-out: always attached (forks must be
/// followed even with --no-host).
pub fn attach_process(skel: &CausewaySkel<'_>) -> Result<Vec<Link>, CollectorError> {
    let p = &skel.progs;
    [
        ("sched_process_fork", &p.cw_process_fork),
        ("sched_process_exec", &p.cw_process_exec),
        ("sched_process_exit", &p.cw_process_exit),
        // Flushes the full-mode event batch of a traced thread leaving the CPU (calls.h).
        ("sched_switch", &p.cw_calls_switch),
    ]
    .into_iter()
    .map(|(name, prog)| {
        prog.attach().map_err(|source| CollectorError::Attach {
            what: format!("tp_btf/{name}"),
            source,
        })
    })
    .collect()
}
