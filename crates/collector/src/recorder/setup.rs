//! Setting up a recording: probe costs calibrated and forced modes pinned, the always-on
//! programs and the libraries found so far attached, the traced processes enrolled, the
//! symboliser thread and the command started.

use std::collections::HashSet;
use std::process::Child;

use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags};
use tracing::{info, warn};

use super::libs::{Began, attach_map_hook, kernel_file_key, look_python, mark_seen, running_row};
use super::modes::{self, set_op_mode};
use super::{Context, Discovery, map_err};
use crate::attach::{Attached, attach_host, attach_process};
use crate::calibrate::calibrate;
use crate::cost::CostModel;
use crate::discover::{LibFile, cuda_processes};
use crate::error::CollectorError;
use crate::hold::Holds;
use crate::overhead_control::{Controller, Switch};
use crate::sampling::Sampler;
use crate::sink::Ctl;
use crate::stacks::Stacks;
use crate::trace::{MapHookSummary, Mode, spawn};

/// Calibrates the probe costs and pins the forced modes (`--probe-mode`): the controller, the
/// sampling schedule and the number of switches recorded.
pub(super) fn policy(
    ctx: &Context<'_, '_>,
    start_ns: i64,
    multi: bool,
) -> Result<(CostModel, Controller, Sampler, usize), CollectorError> {
    let (args, skel) = (ctx.args, ctx.skel);
    let calibration = calibrate(skel, multi);
    let _ = ctx.sink.ctl.send(Ctl::Costs(calibration.rows()));
    let mut ctl = Controller::new(
        args.overhead_budget,
        calibration.clone(),
        causeway_store::now_ns(),
    );
    if args.exact_counts {
        ctl.exact_counts();
    }
    let mut sampler = Sampler::new(start_ns as u64);
    let forced: Vec<Switch> = args
        .probe_modes
        .iter()
        .map(|&(op, m)| ctl.force(op, m, args.sample_duty / 100.0, causeway_store::now_ns()))
        .collect();
    for s in &forced {
        set_op_mode(skel, s.op, s.to.mode.kernel(), false)?;
        if let Some(d) = s.to.duty {
            sampler.start(s.op, d, causeway_store::now_ns());
        }
    }
    let n = forced.len();
    let _ = ctx
        .sink
        .ctl
        .send(Ctl::Modes(forced.iter().map(Switch::row).collect()));
    Ok((calibration, ctl, sampler, n))
}

/// Attaches the always-on programs (process lifecycle, host events, the library-load hook) and
/// the libraries found before the start; the holds start here too.
pub(super) fn attach_first(
    ctx: &Context<'_, '_>,
    libs: &[LibFile],
    ctl: &mut Controller,
    sampler: &Sampler,
    multi: bool,
) -> Result<(Vec<Link>, Discovery), CollectorError> {
    let (args, skel) = (ctx.args, ctx.skel);
    let mut links = attach_process(skel)?;
    if !args.no_host {
        links.extend(attach_host(skel)?);
    }
    // Before the command starts: its first NVTX call loads the library.
    let nvtx = match ctx.mode {
        Mode::Command(_) => crate::nvtx::prepare(skel).map(|(path, link)| {
            links.push(link);
            path
        }),
        _ => None,
    };
    let mut map_hook = MapHookSummary::default();
    if let Some(link) = attach_map_hook(skel) {
        links.push(link);
        map_hook.active = true;
    }
    let holds = if map_hook.active && matches!(ctx.mode, Mode::Command(_)) && !args.no_hold {
        Holds::start(&skel.maps.held, &skel.maps.hold_ctl, args.hold_timeout)
    } else {
        None
    };
    let mut attached = Attached::new(multi);
    for lib in libs {
        attached.attach_lib(skel, lib, args.nccl, |op| modes::wanted(ctl, sampler, op));
    }
    for (op, kind) in attached.first_insns() {
        ctl.set_first_insn(op, kind);
    }
    let found = Discovery {
        attached,
        mapped_seen: HashSet::new(),
        exes_checked: HashSet::new(),
        objects_checked: HashSet::new(),
        holds,
        map_hook,
        nvtx,
    };
    Ok((links, found))
}

/// Makes the traced processes targets and records when tracing began for each of their
/// libraries (store: library_attach); says so when no library was found yet.
pub(super) fn enrol(
    ctx: &Context<'_, '_>,
    libs: &[LibFile],
    found: &Discovery,
) -> Result<(), CollectorError> {
    let (skel, mode) = (ctx.skel, ctx.mode);
    let mut rows = Vec::new();
    let attached_at = causeway_store::now_ns();
    let enrol = |pid: u32| {
        skel.maps
            .targets
            .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
    };
    match mode {
        Mode::Pid(pid) => {
            enrol(*pid).map_err(map_err("targets"))?;
            rows.extend(libs.iter().map(|l| running_row(*pid, l, attached_at)));
        }
        Mode::All => {
            for (pid, plibs) in cuda_processes() {
                let _ = enrol(pid);
                rows.extend(plibs.iter().map(|l| running_row(pid, l, attached_at)));
            }
        }
        Mode::Command(_) => {}
    }
    if !rows.is_empty() {
        let _ = ctx.sink.ctl.send(Ctl::Attach(rows));
    }
    if found.attached.probes() == 0 {
        let target = match mode {
            Mode::Pid(p) => format!("pid {p}"),
            Mode::Command(c) => format!("`{}`", c.join(" ")),
            Mode::All => "any process".into(),
        };
        // All-process mode waits for CUDA processes too: libraries are attached when a process
        // maps them (or at the rescan), programs with a static runtime when they are exec'd.
        if found.map_hook.active {
            info!(%target, "no CUDA library found yet; libraries the traced processes load later (dlopen, exec) are attached when they are mapped");
        } else {
            warn!(%target, "no CUDA library found yet; libraries the traced processes load later are found by a rescan every second (calls made before it are missed)");
        }
    }
    Ok(())
}

/// The symboliser thread, with `--stacks`; the interpreters of processes running already are
/// looked for now (a command's when it maps its first file, while held).
pub(super) fn start_stacks(ctx: &Context<'_, '_>) -> Result<Option<Stacks>, CollectorError> {
    let (args, skel) = (ctx.args, ctx.skel);
    if !args.stacks {
        return Ok(None);
    }
    let mut s = Stacks::start(ctx.sink.ctl.clone(), !args.no_python_frames).map_err(|source| {
        CollectorError::Os {
            what: "starting the symboliser thread",
            source,
        }
    })?;
    if let Some(py) = s.python.as_mut() {
        py.force = args
            .python_layout
            .as_deref()
            .and_then(|v| v.strip_prefix("3.")?.parse().ok());
    }
    match ctx.mode {
        Mode::Pid(pid) => look_python(skel, Some(&mut s), [*pid]),
        Mode::All => look_python(
            skel,
            Some(&mut s),
            cuda_processes().into_iter().map(|(p, _)| p),
        ),
        Mode::Command(_) => {}
    }
    Ok(Some(s))
}

/// Starts the command, its libraries attached before it runs (store: library_attach).
pub(super) fn start_command(
    ctx: &Context<'_, '_>,
    libs: &[LibFile],
    nvtx: Option<&std::path::Path>,
) -> Result<Option<Child>, CollectorError> {
    let Mode::Command(cmd) = ctx.mode else {
        return Ok(None);
    };
    // Looked at already (attached, or checked for a static runtime): mapping or exec'ing them
    // holds no process. The NVTX library too: it is ours, and a training loop's first NVTX
    // call, which loads it, should not wait for a check.
    let exe = crate::discover::find_in_path(&cmd[0]);
    let nvtx = nvtx.map(std::path::Path::to_path_buf);
    for path in libs
        .iter()
        .map(|l| l.path.clone())
        .chain(exe)
        .chain(nvtx.clone())
    {
        if let Some(key) = kernel_file_key(&path) {
            mark_seen(ctx.skel, &key);
        }
    }
    let child = spawn(
        cmd,
        ctx.args.json,
        ctx.args.stdio_is_protocol,
        nvtx.as_deref(),
    )?;
    let at = causeway_store::now_ns();
    let rows = libs
        .iter()
        .map(|l| Began::BeforeStart.row(child.id(), &l.path, at, None, None))
        .collect();
    let _ = ctx.sink.ctl.send(Ctl::Attach(rows));
    Ok(Some(child))
}
