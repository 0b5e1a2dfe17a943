//! Attaching programs: the call programs on every probed symbol of a library file (with the op
//! in the attach cookie), and the host tracepoint programs (tp_btf, no tracefs). Return probes
//! are kept per op so that an op switched to entry-only mode loses them (their trap is most of a
//! probed call's cost) and gets them back when it returns to a timed mode.
//!
//! On kernels with uprobe.multi (>= 6.6) a file gets one entry link and one return link covering
//! all its symbols; otherwise one classic link per probe. Detaching a classic uprobe waits for
//! RCU grace periods under a global mutex (about 0.1 s each: 60 probes took 7 s to tear down),
//! a multi link waits once.

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

/// The links of one file.
struct FileProbes {
    lib: LibFile,
    symbols: Vec<Symbol>,
    /// Entry links (one multi link, or one per symbol).
    entries: Vec<Link>,
    /// Return links: multi: one link for all timed ops (key u16::MAX); classic: per op.
    exits: HashMap<u16, Vec<Link>>,
    /// Ops whose return probes are attached.
    timed: BTreeSet<u16>,
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

/// Key of the one return link of a file in multi mode.
const ALL: u16 = u16::MAX;

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
            .map(|f| {
                let timed = f
                    .symbols
                    .iter()
                    .filter(|s| f.timed.contains(&s.spec.op))
                    .count();
                if f.entries.is_empty() {
                    0
                } else {
                    f.symbols.len() + timed
                }
            })
            .sum()
    }

    /// The kind of first instruction of every attached symbol, per op (all files).
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

    /// Attaches the return links of `ops` in a file; errors are logged and leave them out.
    fn attach_exits(
        &self,
        skel: &CausewaySkel<'_>,
        f: &FileProbes,
        ops: &BTreeSet<u16>,
    ) -> HashMap<u16, Vec<Link>> {
        let exit = if self.multi {
            &skel.progs.cw_call_exit_multi
        } else {
            &skel.progs.cw_call_exit
        };
        let of = |op: Option<u16>| -> Vec<(usize, u64)> {
            f.symbols
                .iter()
                .filter(|s| ops.contains(&s.spec.op) && op.is_none_or(|o| o == s.spec.op))
                .map(|s| (s.offset, cookie(s.spec.op, s.spec.aux)))
                .collect()
        };
        let mut out = HashMap::new();
        if self.multi {
            let offs = of(None);
            if !offs.is_empty() {
                match attach_at(exit, true, -1, &f.lib.path, &offs, true) {
                    Ok(l) => {
                        out.insert(ALL, vec![l]);
                    }
                    Err(err) => {
                        warn!(lib = %f.lib.path.display(), %err, "return probes not attached")
                    }
                }
            }
            return out;
        }
        for &op in ops {
            let links: Vec<Link> = of(Some(op))
                .into_iter()
                .filter_map(|o| match attach_at(exit, false, -1, &f.lib.path, &[o], true) {
                    Ok(l) => Some(l),
                    Err(err) => {
                        warn!(op, lib = %f.lib.path.display(), %err, "return probe not attached");
                        None
                    }
                })
                .collect();
            out.insert(op, links);
        }
        out
    }

    /// Attaches our entry program to every probed symbol the file exports, and the return
    /// program where `timed(op)` says the op's mode needs it. Returns the number of functions
    /// attached (0 when the file was already attached or exports none).
    pub fn attach_lib(
        &mut self,
        skel: &CausewaySkel<'_>,
        lib: &LibFile,
        nccl: bool,
        timed: impl Fn(u16) -> bool,
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
        let symbols: Vec<Symbol> = specs
            .iter()
            .filter_map(|s| {
                offsets.get(s.symbol).map(|&(offset, first)| Symbol {
                    spec: s,
                    offset,
                    first,
                })
            })
            .collect();
        let entry = if self.multi {
            &skel.progs.cw_call_entry_multi
        } else {
            &skel.progs.cw_call_entry
        };
        let points: Vec<(usize, u64)> = symbols
            .iter()
            .map(|s| (s.offset, cookie(s.spec.op, s.spec.aux)))
            .collect();
        let mut entries = Vec::new();
        if self.multi && !points.is_empty() {
            match attach_at(entry, true, -1, &lib.path, &points, false) {
                Ok(l) => entries.push(l),
                Err(err) => warn!(lib = %lib.path.display(), %err, "probes not attached"),
            }
        } else {
            for (p, s) in points.iter().zip(&symbols) {
                match attach_at(entry, false, -1, &lib.path, &[*p], false) {
                    Ok(l) => entries.push(l),
                    Err(err) => {
                        debug!(symbol = s.spec.symbol, lib = %lib.path.display(), %err, "symbol not attached")
                    }
                }
            }
        }
        let mut f = FileProbes {
            lib: lib.clone(),
            symbols: if entries.is_empty() {
                Vec::new()
            } else {
                symbols
            },
            entries,
            exits: HashMap::new(),
            timed: BTreeSet::new(),
        };
        f.timed = f
            .symbols
            .iter()
            .map(|s| s.spec.op)
            .filter(|&op| timed(op))
            .collect();
        f.exits = self.attach_exits(skel, &f, &f.timed);
        let functions = f.symbols.len();
        if functions > 0 {
            info!(lib = %lib.path.display(), library = ?lib.library, functions, multi = self.multi, "attached");
        }
        self.by_file.insert(id, f);
        functions
    }

    /// Attaches (`on`) or detaches the return probes of every symbol recording `op`. Returns the
    /// number of files changed. In multi mode a file's return link is replaced by one with the
    /// new set of ops, the new one attached before the old one goes (a return seen by both
    /// finds its entry state once: no call is counted twice).
    pub fn set_return_probes(&mut self, skel: &CausewaySkel<'_>, op: u16, on: bool) -> usize {
        let mut old = Vec::new();
        let mut changed = 0;
        let ids: Vec<(u64, u64)> = self.by_file.keys().copied().collect();
        for id in ids {
            let f = &self.by_file[&id];
            if !f.symbols.iter().any(|s| s.spec.op == op) || f.timed.contains(&op) == on {
                continue;
            }
            let mut timed = f.timed.clone();
            if on {
                timed.insert(op);
            } else {
                timed.remove(&op);
            }
            let (new_exits, drop_keys): (HashMap<u16, Vec<Link>>, Vec<u16>) = if self.multi {
                (self.attach_exits(skel, f, &timed), vec![ALL])
            } else if on {
                (
                    self.attach_exits(skel, f, &BTreeSet::from([op])),
                    Vec::new(),
                )
            } else {
                (HashMap::new(), vec![op])
            };
            let f = self.by_file.get_mut(&id).expect("present");
            for k in drop_keys {
                old.extend(f.exits.remove(&k).unwrap_or_default());
            }
            f.exits.extend(new_exits);
            f.timed = timed;
            changed += 1;
        }
        drop_links(old);
        changed
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let links = self
            .by_file
            .drain()
            .flat_map(|(_, f)| f.entries.into_iter().chain(f.exits.into_values().flatten()))
            .collect();
        drop_links(links);
    }
}

/// Host program links (kept alive for the trace).
pub fn attach_host(skel: &CausewaySkel<'_>) -> Result<Vec<Link>, CollectorError> {
    let p = &skel.progs;
    let required = [
        ("sched_switch", &p.cw_sched_switch),
        ("sched_wakeup", &p.cw_sched_wakeup),
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
