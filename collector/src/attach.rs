//! Attaching programs: uprobe/uretprobe pairs on every probed symbol of a library file (by name,
//! with the op in the attach cookie), and the host tracepoint programs (tp_btf, no tracefs).

use std::collections::HashMap;
use std::path::Path;

use causeway_bpf::libbpf_rs::{Link, ProgramMut, UprobeOpts};
use causeway_bpf::probes::{Library, ProbeSpec, cookie, probes_for};
use causeway_bpf::skel::CausewaySkel;
use tracing::{debug, info, warn};

use crate::discover::{LibFile, file_id};
use crate::error::CollectorError;

/// Attached probes, one entry per library file (keyed by inode so copies attach once).
#[derive(Default)]
pub struct Attached {
    by_file: HashMap<(u64, u64), (LibFile, Vec<Link>)>,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("files", &self.by_file.len())
            .finish()
    }
}

fn attach_one(
    entry: &ProgramMut<'_>,
    exit: &ProgramMut<'_>,
    path: &Path,
    spec: &ProbeSpec,
) -> Result<(Link, Link), causeway_bpf::libbpf_rs::Error> {
    let opts = |retprobe| UprobeOpts {
        cookie: cookie(spec.op, spec.aux),
        retprobe,
        func_name: Some(spec.symbol.to_string()),
        ..Default::default()
    };
    let e = entry.attach_uprobe_with_opts(-1, path, 0, opts(false))?;
    let x = exit.attach_uprobe_with_opts(-1, path, 0, opts(true))?;
    Ok((e, x))
}

impl Attached {
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
        self.by_file.values().map(|(_, l)| l.len()).sum()
    }

    /// The attached files.
    pub fn libs(&self) -> Vec<LibFile> {
        self.by_file.values().map(|(l, _)| l.clone()).collect()
    }

    /// Attaches our entry/return programs to every probed symbol the file exports. Returns the
    /// number of functions attached (0 when the file was already attached or exports none).
    pub fn attach_lib(&mut self, skel: &CausewaySkel<'_>, lib: &LibFile, nccl: bool) -> usize {
        self.attach_with(
            &skel.progs.cw_call_entry,
            &skel.progs.cw_call_exit,
            lib,
            nccl,
        )
    }

    /// Attaches the given entry/return pair (the benchmark passes the empty pair).
    pub fn attach_with(
        &mut self,
        entry: &ProgramMut<'_>,
        exit: &ProgramMut<'_>,
        lib: &LibFile,
        nccl: bool,
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
        let mut links = Vec::new();
        let mut functions = 0;
        for spec in probes_for(lib.library) {
            match attach_one(entry, exit, &lib.path, spec) {
                Ok((e, x)) => {
                    links.push(e);
                    links.push(x);
                    functions += 1;
                }
                Err(err) => {
                    debug!(symbol = spec.symbol, lib = %lib.path.display(), %err, "symbol not attached")
                }
            }
        }
        if functions > 0 {
            info!(lib = %lib.path.display(), library = ?lib.library, functions, "attached");
        }
        self.by_file.insert(id, (lib.clone(), links));
        functions
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
    for (name, prog) in optional {
        match prog.attach() {
            Ok(l) => links.push(l),
            Err(err) => {
                warn!(tracepoint = name, %err, "host tracepoint not attached; its events are missing")
            }
        }
    }
    Ok(links)
}

/// Process lifecycle links: always attached (forks must be followed even with --no-host).
pub fn attach_process(skel: &CausewaySkel<'_>) -> Result<Vec<Link>, CollectorError> {
    let p = &skel.progs;
    [
        ("sched_process_fork", &p.cw_process_fork),
        ("sched_process_exec", &p.cw_process_exec),
        ("sched_process_exit", &p.cw_process_exit),
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
