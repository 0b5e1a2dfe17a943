//! The recording loop of `causeway trace`, on one thread that owns the skeleton and every link:
//! load, calibrate the probe costs, attach, then poll the ring buffer, run the overhead
//! controller and the live summary every second, write the kernel's counters every five, and
//! attach library copies that appear: at once when the library-load hook (bpf mmap.h) reports
//! that a traced process mapped one, else at the periodic rescan of /proc/PID/maps (every 1 s,
//! 2 s for all processes; the fallback where the hook is missing). Sampled ops' probes are
//! attached and detached on their schedule (sampling.rs), each switch cutting the segments
//! that measure their cost on the job (insitu.rs). At the end, drain and write the last window.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::mem::MaybeUninit;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use causeway_bpf::abi::{
    ProbeMode, RawEvent, RawLib, Record, Stat, StatKey, THREAD_SLOTS, decode_batch, decode_records,
    sum_percpu,
};
use causeway_bpf::libbpf_rs::{Link, MapCore, MapFlags, RingBufferBuilder};
use causeway_bpf::load::{
    LoadConfig, open_and_load, sock_tracepoints_supported, uprobe_multi_supported,
};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::catalog::op_by_id;
use causeway_store::{LibraryAttach, ModeSwitch};
use tracing::{debug, info, warn};

use crate::attach::{Attached, OpProbes, attach_host, attach_process, drop_links};
use crate::calibrate::calibrate;
use crate::discover::{LibFile, cuda_files_in_maps, cuda_processes, static_runtime_of};
use crate::error::CollectorError;
use crate::hold::Holds;
use crate::host;
use crate::insitu::{Counts, Meter, sampled_ops};
use crate::kernels::Kernels;
use crate::live::{Live, LiveView};
use crate::overhead_control::{Controller, is_call_op};
use crate::poll::{PollState, read_stats};
use crate::sampling::{DEFAULT_DUTY, Sampler};
use crate::sink::{Ctl, DropKind, Sink};
use crate::stacks::Stacks;
use crate::trace::{
    InSituSummary, MapAttach, MapHookSummary, Mode, OpSummary, OverheadSummary, PythonSummary,
    TraceArgs, TraceSummary, spawn,
};

fn map_err(map: &'static str) -> impl Fn(causeway_bpf::libbpf_rs::Error) -> CollectorError {
    move |source| CollectorError::Map { map, source }
}

fn set_op_mode(skel: &CausewaySkel<'_>, op: u16, mode: ProbeMode) -> Result<(), CollectorError> {
    skel.maps
        .op_mode
        .update(
            &u32::from(op).to_ne_bytes(),
            &mode.value().to_ne_bytes(),
            MapFlags::ANY,
        )
        .map_err(map_err("op_mode"))
}

/// Which probes `op` needs now: none while sampling has it detached, else what its mode times.
fn wanted(ctl: &Controller, sampler: &Sampler, op: u16) -> OpProbes {
    if sampler.is_detached(op) {
        OpProbes::Detached
    } else if ctl.mode(op).needs_return_probe() {
        OpProbes::EntryAndReturn
    } else {
        OpProbes::Entry
    }
}

/// Applies one switch in the order that keeps every call counted and never leaves a timed call
/// without its return probe: the mode goes first when return probes go away, last when they
/// come back. An op entering sampled mode starts with its probes attached (with `duty`); one
/// leaving it between its attached slices gets them back as soon as its old links are gone
/// (`detaching` links lists are still going: an old entry link and a new one on the same
/// function would count its calls twice).
fn apply(
    skel: &CausewaySkel<'_>,
    attached: &mut Attached,
    sampler: &mut Sampler,
    detaching: &AtomicUsize,
    s: &ModeSwitch,
    duty: Option<f64>,
) -> Result<(), CollectorError> {
    let (Some(from), Some(to)) = (
        ProbeMode::from_name(&s.previous),
        ProbeMode::from_name(&s.mode),
    ) else {
        return Ok(());
    };
    let op = s.op_id;
    let now = causeway_store::now_ns();
    // Leaving sampled mode between attached slices: every probe of the new mode comes back.
    let detached = from == ProbeMode::Sampled && to != from && sampler.stop(op, now);
    if to == ProbeMode::Sampled {
        sampler.sample(op, duty.unwrap_or(DEFAULT_DUTY), now);
    }
    if detached {
        wait_detached(detaching);
        set_op_mode(skel, op, to)?;
        let want = if to.needs_return_probe() {
            OpProbes::EntryAndReturn
        } else {
            OpProbes::Entry
        };
        attached.attach_op_probes(skel, op, want);
    } else if from.needs_return_probe() && !to.needs_return_probe() {
        set_op_mode(skel, op, to)?;
        attached.set_return_probes(skel, op, false);
    } else if !from.needs_return_probe() && to.needs_return_probe() {
        attached.set_return_probes(skel, op, true);
        set_op_mode(skel, op, to)?;
    } else {
        set_op_mode(skel, op, to)?;
    }
    let name = op_by_id(op).map_or("?", |o| o.name);
    info!(op = name, from = %s.previous, to = %s.mode, reason = %s.reason, overhead_pct = format!("{:.2}", s.overhead_pct), duty = ?duty.filter(|_| to == ProbeMode::Sampled), "probe mode changed");
    Ok(())
}

/// Waits (at most 5 s) until the detach thread has dropped every links list sent to it:
/// 35-48 ms a list for one sampled op on the development VM (RCU grace periods). Only an op
/// leaving sampled mode between its attached slices waits, once.
fn wait_detached(detaching: &AtomicUsize) {
    let since = Instant::now();
    while detaching.load(Ordering::Acquire) > 0 {
        if since.elapsed() >= Duration::from_secs(5) {
            warn!(
                "old probe links still going after 5 s: attaching anyway (some calls may be counted twice)"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Cumulative probe hits per (pid, op) of probed calls, for the controller: the calls, and the
/// driver entries the CUDA runtime made itself (not calls, but their probes trapped).
fn call_counts(stats: &HashMap<StatKey, Stat>) -> Vec<((u32, u16), u64)> {
    Counts::of(stats)
        .0
        .into_iter()
        .map(|(key, (_, hits))| (key, hits))
        .collect()
}

/// Records until a stop condition; returns the summary (written-event counts filled in by the
/// caller) and the number of events handed to the writer.
pub(crate) fn record(
    args: &TraceArgs,
    mode: &Mode,
    libs: Vec<LibFile>,
    stop: &AtomicBool,
    sink: &Sink,
    started: Instant,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
) -> Result<(TraceSummary, u64), CollectorError> {
    // Checked before the store was created (run_trace_with); read again here, where it is used.
    let pods = crate::trace::pod_source(args)?;
    let me = nix::unistd::gettid().as_raw() as u32;
    let cfg = LoadConfig {
        self_tgid: std::process::id(),
        spawner_tid: me,
        uprobes_enrol: matches!(mode, Mode::All),
        ringbuf_bytes: args.ringbuf_size,
        host: !args.no_host,
        bare: true,
        stacks: args.stacks,
        calib_tid: me,
        multi: uprobe_multi_supported() && !args.classic_uprobes,
        map_hook: !args.no_map_hook,
        sock_tracepoints: !args.no_host && !args.net_syscalls && sock_tracepoints_supported(),
    };
    let (boot_start_ns, start_ns) = (host::boottime_ns(), causeway_store::now_ns());
    let (mut storage, mut retry) = (MaybeUninit::uninit(), MaybeUninit::uninit());
    let skel = match open_and_load(&mut storage, &cfg) {
        Ok(skel) => skel,
        Err(err) if cfg.map_hook => {
            // The hook is an optimisation: load everything else and rescan.
            info!(%err, "loading with the library-load hook failed; loading without it (libraries mapped later are found by the periodic rescan)");
            open_and_load(
                &mut retry,
                &LoadConfig {
                    map_hook: false,
                    ..cfg.clone()
                },
            )?
        }
        Err(err) => return Err(err.into()),
    };

    // Costs first, while nothing else is attached.
    let calibration = calibrate(&skel, cfg.multi);
    let _ = sink.ctl.send(Ctl::Costs(calibration.rows()));
    let mut ctl = Controller::new(
        args.overhead_budget,
        calibration.clone(),
        causeway_store::now_ns(),
    );
    if args.exact_counts {
        ctl.exact_counts();
    }
    let mut sampler = Sampler::new(start_ns as u64);
    let mut switches = 0;
    let forced: Vec<ModeSwitch> = args
        .probe_modes
        .iter()
        .map(|&(op, m)| ctl.force(op, m, args.sample_duty / 100.0, causeway_store::now_ns()))
        .collect();
    for s in &forced {
        let m = ProbeMode::from_name(&s.mode).unwrap_or(ProbeMode::Full);
        set_op_mode(&skel, s.op_id, m)?;
        if let Some(d) = ctl.duty(s.op_id) {
            sampler.sample(s.op_id, d, causeway_store::now_ns());
        }
    }
    switches += forced.len();
    let _ = sink.ctl.send(Ctl::Modes(forced));

    let mut links = attach_process(&skel)?;
    if !args.no_host {
        links.extend(attach_host(&skel)?);
    }
    let mut map_hook = MapHookSummary::default();
    if let Some(link) = attach_map_hook(&skel) {
        links.push(link);
        map_hook.active = true;
    }
    // Processes of the command are held while the files they map are attached (hold.rs).
    let holds = if map_hook.active && matches!(mode, Mode::Command(_)) && !args.no_hold {
        Holds::start(&skel.maps.held, &skel.maps.hold_ctl, args.hold_timeout)
    } else {
        None
    };
    let mut mapped_seen = HashSet::new();
    let mut exes_checked = HashSet::new();
    // Mapped files looked at for a CUDA runtime linked in (by their maps identity).
    let mut objects_checked = HashSet::new();
    let mut attached = Attached::new(cfg.multi);
    for lib in &libs {
        attached.attach_lib(&skel, lib, args.nccl, |op| wanted(&ctl, &sampler, op));
    }
    for (op, kind) in attached.first_insns() {
        ctl.set_first_insn(op, kind);
    }
    // When tracing began for each process and library (store: library_attach).
    let mut attach_rows = Vec::new();
    let attached_at = causeway_store::now_ns();
    let enrol = |pid: u32| {
        skel.maps
            .targets
            .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
    };
    match mode {
        Mode::Pid(pid) => enrol(*pid).map_err(map_err("targets"))?,
        Mode::All => {
            for (pid, plibs) in cuda_processes() {
                let _ = enrol(pid);
                attach_rows.extend(plibs.iter().map(|l| running_row(pid, l, attached_at)));
            }
        }
        Mode::Command(_) => {}
    }
    if let Mode::Pid(pid) = mode {
        attach_rows.extend(libs.iter().map(|l| running_row(*pid, l, attached_at)));
    }
    if attached.probes() == 0 {
        let target = match mode {
            Mode::Pid(p) => format!("pid {p}"),
            Mode::Command(c) => format!("`{}`", c.join(" ")),
            Mode::All => "any process".into(),
        };
        // All-process mode waits for CUDA processes too: libraries are attached when a process
        // maps them (or at the rescan), programs with a static runtime when they are exec'd.
        if map_hook.active {
            info!(%target, "no CUDA library found yet; libraries the traced processes load later (dlopen, exec) are attached when they are mapped");
        } else {
            warn!(%target, "no CUDA library found yet; libraries the traced processes load later are found by a rescan every second (calls made before it are missed)");
        }
    }
    // Set up: what start-up alone touched is given back before recording, and before the
    // symboliser thread starts (trim.rs).
    let released = crate::trim::release_startup_pages();
    debug!(mib = released >> 20, "start-up pages released");
    let stacks = if args.stacks {
        let mut s = Stacks::start(sink.ctl.clone(), !args.no_python_frames).map_err(|source| {
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
        // Processes running already: their interpreters are looked for before recording
        // begins (a command's when it maps its first file, while held).
        match mode {
            Mode::Pid(pid) => look_python(&skel, Some(&mut s), [*pid]),
            Mode::All => look_python(
                &skel,
                Some(&mut s),
                cuda_processes().into_iter().map(|(p, _)| p),
            ),
            Mode::Command(_) => {}
        }
        Some(s)
    } else {
        None
    };
    if let Some(f) = on_ready {
        f();
    }
    if let Mode::Command(cmd) = mode {
        // Looked at already (attached, or checked for a static runtime): mapping or exec'ing
        // them holds no process.
        let exe = crate::discover::find_in_path(&cmd[0]);
        for path in libs.iter().map(|l| l.path.clone()).chain(exe) {
            if let Some(key) = kernel_file_key(&path) {
                mark_seen(&skel, &key);
            }
        }
    }
    let mut child = match mode {
        Mode::Command(cmd) => Some(spawn(cmd, args.json, args.stdio_is_protocol)?),
        _ => None,
    };
    let root_pid = child.as_ref().map(Child::id).or(args.pid);
    if let Some(c) = &child {
        let at = causeway_store::now_ns();
        attach_rows.extend(
            libs.iter()
                .map(|l| Began::BeforeStart.row(c.id(), &l.path, at, None, None)),
        );
    }
    let _ = sink.ctl.send(Ctl::Attach(std::mem::take(&mut attach_rows)));
    info!(probes = attached.probes(), files = attached.files(), pid = ?root_pid, "tracing");

    let kernels = Kernels::start(sink.ctl.clone())
        .inspect_err(|err| warn!(%err, "kernel naming thread not started: launches keep their stub addresses only"))
        .ok();
    let places = crate::places::Places::start(&sink.ctl, pods);
    let state = RefCell::new(PollState::new(
        host::mono_to_unix_offset(),
        start_ns,
        stacks,
        kernels,
        places,
    ));
    let mut rb = RingBufferBuilder::new();
    rb.add(&skel.maps.events, |data: &[u8]| {
        let mut st = state.borrow_mut();
        for rec in decode_records(data) {
            match rec {
                Ok(rec) => st.push_record(rec, sink),
                Err(e) => {
                    st.undecodable += 1;
                    debug!(error = %e, "undecodable record");
                }
            }
        }
        0
    })
    .map_err(map_err("events"))?;
    let rb = rb.build().map_err(map_err("events"))?;

    let mut live = Live::new();
    let mut command_exit = None;
    let (mut last_scan, mut last_tick, mut last_flush) =
        (Instant::now(), Instant::now(), Instant::now());
    let mut ticks = 0u64;
    // Detaching a sampled op's links waits for RCU grace periods: done on a thread of its own,
    // so that the ring keeps being drained meanwhile. Until it is done, no op is attached again
    // (an old entry link and a new one on the same function would count its calls twice).
    let (reap, reaped) = std::sync::mpsc::channel::<Vec<Link>>();
    let detaching = std::sync::Arc::new(AtomicUsize::new(0));
    // The in-situ cost of sampled ops' probes (insitu.rs), and the ops whose detached segment
    // begins once their links are gone.
    let mut meter = Meter::default();
    let mut off_pending: BTreeSet<u16> = BTreeSet::new();
    let reaper = std::thread::Builder::new()
        .name("causeway-detach".into())
        .spawn({
            let detaching = detaching.clone();
            move || {
                for links in reaped {
                    drop_links(links);
                    detaching.fetch_sub(1, Ordering::Release);
                }
            }
        })
        .map_err(|source| CollectorError::Os {
            what: "starting the detach thread",
            source,
        })?;
    loop {
        // Producers submit without wakeups (except when the ring fills, and the library-load
        // hook's records): poll on a timer (sooner when a sampled op's slice ends), then drain.
        let until_due = sampler.next_due_ns().map_or(50_000_000, |t| {
            (t - causeway_store::now_ns()).clamp(1_000_000, 50_000_000)
        });
        let until_due = if off_pending.is_empty() {
            until_due
        } else {
            until_due.min(2_000_000)
        };
        let _ = rb.poll(Duration::from_nanos(until_due as u64));
        let _ = rb.consume();
        // Sampled ops' switches, each cutting the in-situ meter's segments: one ends before the
        // switch starts, the next begins once it is done (for a detach, once its links are gone).
        let due = sampler.due(causeway_store::now_ns());
        let sampled = if due.is_empty() && off_pending.is_empty() {
            BTreeSet::new()
        } else {
            sampled_ops(&ctl)
        };
        let counts = || Counts::of(&read_stats(&skel));
        for (op, attach) in due {
            if attach {
                if detaching.load(Ordering::Acquire) == 0 {
                    let began = causeway_store::now_ns();
                    meter.end(op, began, &counts(), &sampled);
                    attached.attach_op_probes(&skel, op, OpProbes::EntryAndReturn);
                    let at = causeway_store::now_ns();
                    sampler.switched(op, true, began, at);
                    meter.begin(op, true, at, &counts(), &sampled);
                }
            } else {
                let at = causeway_store::now_ns();
                meter.end(op, at, &counts(), &sampled);
                sampler.switched(op, false, at, at);
                let (entries, exits) = attached.detach_op_probes(op);
                detaching.fetch_add(2, Ordering::Release);
                let _ = reap.send(entries);
                let _ = reap.send(exits);
                off_pending.insert(op);
            }
        }
        if !off_pending.is_empty() && detaching.load(Ordering::Acquire) == 0 {
            let (c, at) = (counts(), causeway_store::now_ns());
            for op in std::mem::take(&mut off_pending) {
                sampler.settled(op, at);
                if sampler.is_detached(op) {
                    meter.begin(op, false, at, &c, &sampled);
                }
            }
        }
        let want = |op| wanted(&ctl, &sampler, op);
        let mapped = std::mem::take(&mut state.borrow_mut().mapped);
        let mut looked_at = !mapped.is_empty();
        // Execs by traced processes, and in all-process mode program files exec'd by others:
        // once such a file is looked at the kernel stays quiet for it (a process gone too soon
        // to be looked at leaves it unmarked, and the next exec reports it again).
        let (execs, programs) = {
            let mut st = state.borrow_mut();
            (
                std::mem::take(&mut st.execs),
                std::mem::take(&mut st.programs),
            )
        };
        // Each held process's latest hold, read before its files are looked at.
        let to_release: BTreeMap<u32, Option<u64>> =
            holds.as_ref().map_or_else(BTreeMap::new, |h| {
                (mapped.iter().map(|m| m.pid))
                    .chain(programs.iter().map(|p| p.pid))
                    .map(|pid| (pid, h.generation(pid)))
                    .collect()
            });
        if let Some(d) = args.stall_attach.filter(|_| !to_release.is_empty()) {
            std::thread::sleep(d);
        }
        let mapped_pids: BTreeSet<u32> = mapped.iter().map(|m| m.pid).collect();
        let attached_before = map_hook.attached.len();
        for m in mapped {
            on_mapped(
                &skel,
                mode,
                &mut attached,
                args.nccl,
                &want,
                &m,
                &mut mapped_seen,
                &mut objects_checked,
                &mut map_hook,
            );
        }
        // The interpreter (libpython, or the program) is mapped by now, and a held process has
        // not run any Python yet: its Python frames are walked from its first call on.
        let py_pids: Vec<u32> = mapped_pids
            .iter()
            .copied()
            .chain(execs.iter().map(|(p, _)| *p))
            .collect();
        look_python(&skel, state.borrow_mut().stacks.as_mut(), py_pids);
        let programs = programs
            .iter()
            .map(|p| (p.pid, p.ts_mono_ns, Some(p.file_key())));
        for (pid, ts, key) in execs.into_iter().map(|(p, t)| (p, t, None)).chain(programs) {
            looked_at = true;
            let looked = on_exec(
                &skel,
                &mut attached,
                &want,
                pid,
                ts,
                &mut exes_checked,
                &mut map_hook,
            );
            if let Some(key) = key.filter(|_| looked) {
                mark_seen(&skel, &key);
            }
        }
        if looked_at {
            for (op, kind) in attached.first_insns() {
                ctl.set_first_insn(op, kind);
            }
        }
        if let Some(h) = &holds {
            for (pid, seen) in to_release {
                h.release(pid, seen);
            }
        }
        // Kernel stubs in the new files are named from a snapshot of the mappings taken now,
        // after the process was let go (a process that exits at once still has its launches
        // named).
        if let Some(k) = state.borrow_mut().kernels.as_mut() {
            for pid in mapped_pids {
                k.maps.refresh(pid);
            }
        }
        if map_hook.attached.len() > attached_before {
            let rows = map_hook.attached[attached_before..]
                .iter()
                .map(|a| {
                    let how = match &holds {
                        Some(h) if h.timed_out(a.pid) => Began::HoldTimeout,
                        Some(_) => Began::Held,
                        None => Began::Mapped,
                    };
                    let mapped = a.attached_ns - (a.latency_us * 1_000) as i64;
                    how.row(a.pid, &a.library, a.attached_ns, Some(mapped), None)
                })
                .collect();
            let _ = sink.ctl.send(Ctl::Attach(rows));
        }
        let pending = state
            .borrow_mut()
            .stacks
            .as_mut()
            .map(|s| std::mem::take(&mut s.py_pending))
            .unwrap_or_default();
        if !pending.is_empty() {
            look_python(&skel, state.borrow_mut().stacks.as_mut(), pending);
        }
        // Small batches are held briefly so a fast-waking ring does not flood the channel.
        if last_flush.elapsed() >= Duration::from_millis(100) {
            state.borrow_mut().flush(sink);
            last_flush = Instant::now();
        }
        if last_tick.elapsed() >= Duration::from_secs(1) {
            let interval = last_tick.elapsed().as_secs_f64();
            last_tick = Instant::now();
            ticks += 1;
            let stats = read_stats(&skel);
            let tick = ctl.tick(causeway_store::now_ns(), &call_counts(&stats), |pid| {
                state.borrow().cpu_reading(pid, boot_start_ns)
            });
            for s in &tick.switches {
                apply(
                    &skel,
                    &mut attached,
                    &mut sampler,
                    &detaching,
                    s,
                    ctl.duty(s.op_id),
                )?;
            }
            // Segments of ops that left sampled mode are dropped; ops that entered it (their
            // probes attached) start measuring.
            let sampled = sampled_ops(&ctl);
            for op in meter.open_ops() {
                if !sampled.contains(&op) {
                    meter.stop(op);
                }
            }
            off_pending.retain(|op| sampled.contains(op));
            let fresh: Vec<u16> = sampled
                .iter()
                .copied()
                .filter(|op| !meter.is_open(*op) && !off_pending.contains(op))
                .filter(|op| !sampler.is_detached(*op))
                .collect();
            if !fresh.is_empty() {
                let (c, at) = (Counts::of(&read_stats(&skel)), causeway_store::now_ns());
                for op in fresh {
                    meter.begin(op, true, at, &c, &sampled);
                }
            }
            let in_situ = meter.update(&mut ctl, causeway_store::now_ns());
            switches += tick.switches.len();
            if !tick.windows.is_empty() {
                let _ = sink.ctl.send(Ctl::Overhead(tick.windows));
            }
            if !tick.switches.is_empty() {
                let _ = sink.ctl.send(Ctl::Modes(tick.switches));
            }
            let mut st = state.borrow_mut();
            if live.enabled() {
                let now = causeway_store::now_ns();
                let ops = live.ops(
                    &stats,
                    interval,
                    |op| {
                        if is_call_op(op) {
                            ctl.mode(op).name()
                        } else {
                            "host"
                        }
                    },
                    |op| sampler.detached_ns(op, now),
                );
                live.draw(&LiveView {
                    seconds: started.elapsed().as_secs_f64(),
                    events: st.sent,
                    ring_drops: st.ring_drops.values().sum(),
                    channel_drops: st.channel_drops.values().sum(),
                    overhead_pct: ctl.overall_pct(),
                    budget_pct: ctl.budget_pct(),
                    ops,
                });
            }
            if ticks.is_multiple_of(5) {
                st.snapshot(
                    &stats,
                    &skel,
                    sink,
                    |op, now| sampler.detached_and_switching_ns(op, now),
                    |op, pid| meter.speedup(op, pid),
                    false,
                );
                if !in_situ.is_empty() {
                    let _ = sink.ctl.send(Ctl::InSitu(in_situ));
                }
                let calls: u64 = st.totals.values().map(|t| t.calls).sum();
                info!(
                    seconds = started.elapsed().as_secs(),
                    calls,
                    events = st.sent,
                    ringbuf_drops = st.ring_drops.values().sum::<u64>(),
                    channel_drops = st.channel_drops.values().sum::<u64>(),
                    overhead_pct = format!("{:.2}", ctl.overall_pct()),
                    "recording"
                );
            }
        }
        if last_scan.elapsed() >= Duration::from_secs(if matches!(mode, Mode::All) { 2 } else { 1 })
        {
            let found = rescan(
                &skel,
                mode,
                &mut attached,
                args.nccl,
                &|op| wanted(&ctl, &sampler, op),
                &mut objects_checked,
            );
            if !found.is_empty() {
                let now = causeway_store::now_ns();
                let rows = found
                    .iter()
                    .map(|(pid, l)| Began::Rescan.row(*pid, &l.path, now, None, None))
                    .collect();
                let _ = sink.ctl.send(Ctl::Attach(rows));
            }
            for (op, kind) in attached.first_insns() {
                ctl.set_first_insn(op, kind);
            }
            last_scan = Instant::now();
        }
        if stop.load(Ordering::Relaxed) {
            info!("interrupted: finishing the trace");
            break;
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if let Some(c) = child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            command_exit = status.code();
            info!(status = %status, "command exited");
            break;
        }
        if let Mode::Pid(pid) = mode
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            info!(pid, "traced process exited");
            break;
        }
    }
    if let Some(h) = holds {
        map_hook.hold = h.finish();
        if map_hook.hold.timeouts > 0 {
            let _ = sink.ctl.send(Ctl::Drop {
                kind: DropKind::HoldTimeout,
                op: None,
                count: map_hook.hold.timeouts,
                detail: format!(
                    "processes let go after {:?} before their libraries' probes were attached: their calls until then are missing",
                    args.hold_timeout
                ),
            });
        }
    }
    // Detach every program before the last read: a thread's last full-mode events can still be
    // in its batch (calls.h), read below once nothing appends to it or flushes it any more.
    let libraries = attached.libs().into_iter().map(|l| l.path).collect();
    drop(attached);
    drop_links(links);
    drop(reap);
    let _ = reaper.join();
    let _ = rb.consume();
    {
        let mut st = state.borrow_mut();
        for e in unflushed_events(&skel) {
            st.push_record(Record::Event(e), sink);
        }
    }
    drop(rb);
    live.finish();
    let mut st = state.into_inner();
    st.flush(sink);
    let stats = read_stats(&skel);
    let last = ctl.close(causeway_store::now_ns(), &call_counts(&stats), |pid| {
        st.cpu_reading(pid, boot_start_ns)
    });
    if !last.is_empty() {
        let _ = sink.ctl.send(Ctl::Overhead(last));
    }
    st.snapshot(
        &stats,
        &skel,
        sink,
        |op, now| sampler.detached_and_switching_ns(op, now),
        |op, pid| meter.speedup(op, pid),
        true,
    );
    let in_situ = meter.update(&mut ctl, causeway_store::now_ns());
    let in_situ_summary = in_situ
        .iter()
        .map(|&measured| InSituSummary {
            op: op_by_id(measured.op_id).map_or("?", |o| o.name),
            measured,
        })
        .collect();
    if !in_situ.is_empty() {
        let _ = sink.ctl.send(Ctl::InSitu(in_situ));
    }
    st.close_processes(sink);
    let kernel_summary = st.kernels.take().map(Kernels::finish).unwrap_or_default();
    if let Some(p) = st.places.take() {
        p.finish();
    }
    let python = python_summary(&skel, st.stacks.as_ref());
    if let Some(d) = python_drop(&python) {
        let _ = sink.ctl.send(d);
    }
    let distinct_stacks = st.stacks.take().map_or(0, |s| {
        let n = s.distinct;
        s.finish();
        n
    });
    if let Some(mut c) = child.filter(|_| command_exit.is_none()) {
        // Interrupted or timed out: the command keeps running untraced, as a detached job would.
        info!(
            pid = c.id(),
            "the command is still running; it is no longer traced"
        );
        let _ = c.try_wait();
    }
    let ops = st
        .totals
        .iter()
        .map(|(&op, t)| OpSummary {
            op: op_by_id(op)
                .map(|o| o.name.to_string())
                .unwrap_or_else(|| format!("op{op}")),
            calls: t.calls,
            stored: t.stored,
            timed: t.timed,
            mean_ns: t.total_ns.checked_div(t.timed).unwrap_or(0),
            mode: is_call_op(op).then(|| ctl.mode(op).name()),
            calls_estimated: t.estimated,
        })
        .collect();
    let summary = TraceSummary {
        db: args.db.clone(),
        seconds: 0.0,
        events_written: 0,
        ringbuf_drops: st.ring_drops.values().sum(),
        channel_drops: st.channel_drops.values().sum(),
        write_failed: 0,
        store_reopens: 0,
        libraries,
        processes: st.pids.len(),
        command_exit,
        ops,
        overhead: OverheadSummary {
            budget_pct: ctl.budget_pct(),
            estimated_pct: ctl.overall_pct(),
            cpu_ns: ctl.cpu_ns,
            probe_ns: ctl.probe_ns as u64,
            costs: calibration,
            mode_switches: switches,
            in_situ: in_situ_summary,
        },
        stacks: distinct_stacks,
        python,
        map_hook,
        kernels: kernel_summary,
        segments: None,
    };
    Ok((summary, st.sent))
}

/// Looks for CPython in `pids` and gives the kernel the layout of each one found (bpf python.h);
/// a process found not to run one (any more: it exec'd or exited) loses its entry.
fn look_python(
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

/// What the Python walks came to: the kernel's per-call counts and the stacks' statuses.
fn python_summary(skel: &CausewaySkel<'_>, stacks: Option<&Stacks>) -> PythonSummary {
    let Some((s, py)) = stacks.and_then(|s| Some((s, s.python.as_ref()?))) else {
        return PythonSummary::default();
    };
    let count = |slot: u32| {
        skel.maps
            .py_counts
            .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .map_or(0, |v| sum_percpu(&v))
    };
    PythonSummary {
        processes: py.found(),
        unsupported: py.unsupported(),
        walks: count(0),
        no_thread: count(1),
        truncated: count(2),
        bad_read: count(3),
        early_stacks: s.py_early(),
        stacks: s.py_statuses.clone(),
    }
}

/// The drop row for calls recorded without their Python frames, if any were.
fn python_drop(p: &PythonSummary) -> Option<Ctl> {
    let stacks = |k: &str| p.stacks.get(k).copied().unwrap_or(0);
    let (rejected, unreadable) = (stacks("rejected"), stacks("unreadable"));
    let count = p.no_thread + rejected + unreadable + p.unsupported + p.early_stacks;
    (count > 0).then(|| Ctl::Drop {
        kind: DropKind::PythonFrames,
        op: None,
        count,
        detail: format!(
            "Python frames missing: {} calls whose thread's interpreter state was not found, {rejected} stacks whose frames did not read as code objects, {unreadable} stacks of processes gone before their frames were read, {} stacks recorded before their process's interpreter was found, {} processes with an unsupported CPython",
            p.no_thread, p.early_stacks, p.unsupported
        ),
    })
}

/// The full-mode events still in the threads' batches (read when no program runs any more).
fn unflushed_events(skel: &CausewaySkel<'_>) -> Vec<RawEvent> {
    let mut out = Vec::new();
    for slot in 0..THREAD_SLOTS {
        let Ok(Some(v)) = skel.maps.batches.lookup(&slot.to_ne_bytes(), MapFlags::ANY) else {
            continue;
        };
        match decode_batch(&v) {
            Ok(events) => out.extend(events),
            Err(e) => debug!(error = %e, slot, "undecodable batch"),
        }
    }
    out
}

/// Attaches the library-load hook; `None` (logged once) where it was not loaded or does not
/// attach: new libraries are then found by the periodic rescan only.
fn attach_map_hook(skel: &CausewaySkel<'_>) -> Option<Link> {
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
fn on_mapped(
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
fn kernel_file_key(path: &std::path::Path) -> Option<[u8; causeway_bpf::abi::FILE_KEY_SIZE]> {
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
fn mark_seen(skel: &CausewaySkel<'_>, key: &[u8]) {
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
enum Began {
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

    fn row(
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
fn running_row(pid: u32, lib: &LibFile, attached_ns: i64) -> LibraryAttach {
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
    use causeway_bpf::abi::{BATCH_EVENTS, BATCH_SIZE, EVENT_SIZE};

    /// A `batches` value holding call events of `tids` (kind, op and pid set).
    fn batch(tids: &[u32]) -> Vec<u8> {
        let mut v = vec![0u8; BATCH_SIZE];
        v[0..4].copy_from_slice(&(tids.len() as u32).to_le_bytes());
        for (i, tid) in tids.iter().enumerate() {
            let e = &mut v[BATCH_EVENTS + i * EVENT_SIZE..][..EVENT_SIZE];
            e[0] = 1; // CW_KIND_CALL
            e[2..4].copy_from_slice(&3u16.to_le_bytes());
            e[4..8].copy_from_slice(&4242u32.to_le_bytes());
            e[8..12].copy_from_slice(&tid.to_le_bytes());
        }
        v
    }

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

    /// The end-of-trace read of the events left in the threads' batches, on the real map of a
    /// loaded object: every event of every slot that has some, in slot order. (Whether a thread
    /// still has events there when a trace ends depends on the scheduler, so the integration test
    /// `calls::events_still_batched_when_the_trace_ends_are_stored` cannot force this path.)
    #[test]
    fn events_left_in_the_batches_are_read_at_the_end() {
        if std::env::var_os("CAUSEWAY_SKIP_BPF_TESTS").is_some_and(|v| v == "1") {
            eprintln!(
                "events_left_in_the_batches_are_read_at_the_end: skipped (CAUSEWAY_SKIP_BPF_TESTS=1)"
            );
            return;
        }
        let mut storage = MaybeUninit::uninit();
        let cfg = LoadConfig {
            host: false,
            ..LoadConfig::default()
        };
        let skel = open_and_load(&mut storage, &cfg)
            .expect("load (needs root; CAUSEWAY_SKIP_BPF_TESTS=1 skips)");
        for (slot, tids) in [(7u32, &[70u32, 71][..]), (THREAD_SLOTS - 1, &[4095][..])] {
            skel.maps
                .batches
                .update(&slot.to_ne_bytes(), &batch(tids), MapFlags::ANY)
                .unwrap();
        }
        let tids: Vec<u32> = unflushed_events(&skel).iter().map(|e| e.tid).collect();
        assert_eq!(tids, [70, 71, 4095]);
    }
}
