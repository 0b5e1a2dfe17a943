//! The recording loop of `causeway trace`, on one thread that owns the skeleton and every link:
//! load, calibrate the probe costs and attach (setup.rs), then poll the ring buffer, run the
//! overhead controller and the live summary every tick, write the kernel's counters every few
//! ticks, and attach library copies that appear (libs.rs). Sampled ops' probes are attached and
//! detached on their schedule (modes.rs). At the end, drain and write the last window
//! (finish.rs). Intervals are in tuning.rs.
//!
//! [`Recording`] holds the loop's state; each step of the loop is one of its methods.

mod finish;
mod libs;
mod modes;
mod setup;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::mem::MaybeUninit;
use std::process::Child;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use causeway_bpf::abi::{Stat, StatKey, decode_records};
use causeway_bpf::libbpf_rs::{Link, RingBuffer, RingBufferBuilder};
use causeway_bpf::load::{
    LoadConfig, open_and_load, reclaim_tracepoints_supported, sock_tracepoints_supported,
    uprobe_multi_supported,
};
use causeway_bpf::skel::CausewaySkel;
use causeway_store::InSituRow;
use tracing::{debug, info, warn};

use crate::attach::Attached;
use crate::cost::CostModel;
use crate::discover::LibFile;
use crate::error::CollectorError;
use crate::estimate::SampledTime;
use crate::hold::Holds;
use crate::host;
use crate::insitu::{Counts, Meter};
use crate::kernels::Kernels;
use crate::live::{Live, LiveView};
use crate::overhead_control::{Controller, Switch, is_call_op};
use crate::poll::{PollState, read_stats};
use crate::sampling::Sampler;
use crate::sink::{Ctl, Sink};
use crate::trace::{MapHookSummary, Mode, TraceArgs, TraceSummary};
use crate::tuning::{
    FLUSH_EVERY_MS, POLL_MAX_NS, POLL_MIN_NS, POLL_SETTLING_NS, RESCAN_EVERY_ALL_S, RESCAN_EVERY_S,
    SNAPSHOT_TICKS, TICK_EVERY_S,
};
use modes::Detacher;
use setup::{attach_first, enrol, policy, start_command, start_stacks};

fn map_err(map: &'static str) -> impl Fn(causeway_bpf::libbpf_rs::Error) -> CollectorError {
    move |source| CollectorError::Map { map, source }
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
        reclaim_tracepoints: !args.no_host && reclaim_tracepoints_supported(),
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
    let ctx = Context {
        args,
        mode,
        sink,
        skel: &skel,
        started,
        boot_start_ns,
    };
    let mut rec = Recording::start(ctx, libs, start_ns, cfg.multi, pods, on_ready)?;
    let rb = ring(&skel, rec.state.clone(), sink)?;
    loop {
        rec.poll(&rb);
        rec.switch_slices();
        rec.on_mapped();
        if rec.clock.flush.elapsed() >= Duration::from_millis(FLUSH_EVERY_MS) {
            rec.state.borrow_mut().flush(sink);
            rec.clock.flush = Instant::now();
        }
        if rec.clock.tick.elapsed() >= Duration::from_secs(TICK_EVERY_S) {
            rec.tick()?;
        }
        if rec.clock.scan.elapsed() >= rec.rescan_every() {
            rec.rescan();
        }
        if rec.done(stop) {
            break;
        }
    }
    rec.finish(rb)
}

/// The ring buffer, its records decoded into `state`.
fn ring<'a>(
    skel: &CausewaySkel<'_>,
    state: Rc<RefCell<PollState>>,
    sink: &'a Sink,
) -> Result<RingBuffer<'a>, CollectorError> {
    let mut rb = RingBufferBuilder::new();
    rb.add(&skel.maps.events, move |data: &[u8]| {
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
    rb.build().map_err(map_err("events"))
}

/// What a recording reads and never changes.
struct Context<'a, 's> {
    args: &'a TraceArgs,
    mode: &'a Mode,
    sink: &'a Sink,
    skel: &'a CausewaySkel<'s>,
    started: Instant,
    /// CLOCK_BOOTTIME when the trace started (ns): processes started later are new.
    boot_start_ns: u64,
}

/// When the loop's periodic steps last ran.
struct Clock {
    scan: Instant,
    tick: Instant,
    flush: Instant,
    ticks: u64,
}

/// The sampled ops' schedule and what it measures: the policy (the controller) decides which
/// ops are sampled and at what duty; this attaches and detaches them on time.
struct Sampling {
    sampler: Sampler,
    /// The in-situ cost of sampled ops' probes (insitu.rs).
    meter: Meter,
    /// Ops whose detached segment begins once their links are gone.
    off_pending: BTreeSet<u16>,
    detacher: Detacher,
}

/// The schedule's detached time and the meter's speedups: what an estimate needs.
impl SampledTime for (&Sampler, &Meter) {
    fn detached_and_switching_ns(&self, op: u16, now_ns: i64) -> (i64, i64) {
        self.0.detached_and_switching_ns(op, now_ns)
    }
    fn speedup(&self, op: u16, pid: u32) -> Option<f64> {
        self.1.speedup(op, pid)
    }
    fn sampled_ops(&self) -> Vec<u16> {
        self.0.ops()
    }
    fn is_sampled(&self, op: u16) -> bool {
        self.0.is_sampled(op)
    }
    fn between(&self, op: u16, from_ns: i64, to_ns: i64) -> (i64, i64) {
        self.0.between(op, from_ns, to_ns)
    }
}

impl SampledTime for Sampling {
    fn detached_and_switching_ns(&self, op: u16, now_ns: i64) -> (i64, i64) {
        (&self.sampler, &self.meter).detached_and_switching_ns(op, now_ns)
    }
    fn speedup(&self, op: u16, pid: u32) -> Option<f64> {
        (&self.sampler, &self.meter).speedup(op, pid)
    }
    fn sampled_ops(&self) -> Vec<u16> {
        self.sampler.ops()
    }
    fn is_sampled(&self, op: u16) -> bool {
        self.sampler.is_sampled(op)
    }
    fn between(&self, op: u16, from_ns: i64, to_ns: i64) -> (i64, i64) {
        self.sampler.between(op, from_ns, to_ns)
    }
}

/// Library discovery: what has been attached and looked at, and the processes held meanwhile.
struct Discovery {
    attached: Attached,
    /// Files reported by the library-load hook (by their maps identity).
    mapped_seen: HashSet<(u64, u64)>,
    /// Program files checked for a statically linked runtime.
    exes_checked: HashSet<(u64, u64)>,
    /// Mapped files looked at for a CUDA runtime linked in.
    objects_checked: HashSet<(u64, u64)>,
    /// Processes of the command held while the files they map are attached (hold.rs).
    holds: Option<Holds>,
    map_hook: MapHookSummary,
    /// The NVTX injection library the command is given (nvtx.rs), its probe in `links`.
    nvtx: Option<std::path::PathBuf>,
}

/// One recording in progress.
struct Recording<'a, 's> {
    ctx: Context<'a, 's>,
    calibration: CostModel,
    ctl: Controller,
    sampling: Sampling,
    found: Discovery,
    /// The always-on links (process lifecycle, host events, the library-load hook).
    links: Vec<Link>,
    /// Shared with the ring buffer's callback.
    state: Rc<RefCell<PollState>>,
    live: Live,
    clock: Clock,
    child: Option<Child>,
    command_exit: Option<i32>,
    /// Mode switches recorded (forced and decided).
    switches: usize,
}

impl<'a, 's> Recording<'a, 's> {
    /// Calibrates the probe costs (while nothing else is attached), applies the forced modes,
    /// attaches the always-on programs and the libraries found so far, starts the helper
    /// threads, then the command (if any): everything before the first poll.
    fn start(
        ctx: Context<'a, 's>,
        libs: Vec<LibFile>,
        start_ns: i64,
        multi: bool,
        pods: Option<causeway_placement::PodSource>,
        on_ready: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Recording<'a, 's>, CollectorError> {
        let (calibration, mut ctl, sampler, forced) = policy(&ctx, start_ns, multi)?;
        let (links, found) = attach_first(&ctx, &libs, &mut ctl, &sampler, multi)?;
        enrol(&ctx, &libs, &found)?;
        // What start-up alone touched is given back before recording, and before the
        // symboliser thread starts (trim.rs).
        let released = crate::trim::release_startup_pages();
        debug!(mib = released >> 20, "start-up pages released");
        let stacks = start_stacks(&ctx)?;
        if let Some(f) = on_ready {
            f();
        }
        let child = start_command(&ctx, &libs, found.nvtx.as_deref())?;
        let root_pid = child.as_ref().map(Child::id).or(ctx.args.pid);
        info!(probes = found.attached.probes(), files = found.attached.files(), pid = ?root_pid, "tracing");
        let kernels = Kernels::start(ctx.sink.ctl.clone())
            .inspect_err(|err| warn!(%err, "kernel naming thread not started: launches keep their stub addresses only"))
            .ok();
        let places = crate::places::Places::start(&ctx.sink.ctl, pods);
        let state = PollState::new(
            host::mono_to_unix_offset(),
            start_ns,
            stacks,
            kernels,
            places,
        );
        let now = Instant::now();
        Ok(Recording {
            calibration,
            ctl,
            sampling: Sampling {
                sampler,
                meter: Meter::default(),
                off_pending: BTreeSet::new(),
                detacher: Detacher::start()?,
            },
            found,
            links,
            state: Rc::new(RefCell::new(state)),
            live: Live::new(),
            clock: Clock {
                scan: now,
                tick: now,
                flush: now,
                ticks: 0,
            },
            child,
            command_exit: None,
            switches: forced,
            ctx,
        })
    }

    /// Waits for records (producers submit without wakeups, except when the ring fills and
    /// for the library-load hook's records: a timer, sooner when a sampled op's slice ends),
    /// then drains the ring.
    fn poll(&self, rb: &RingBuffer<'_>) {
        let s = &self.sampling;
        let mut wait = s.sampler.next_due_ns().map_or(POLL_MAX_NS, |t| {
            (t - causeway_store::now_ns()).clamp(POLL_MIN_NS, POLL_MAX_NS)
        });
        if !s.off_pending.is_empty() {
            wait = wait.min(POLL_SETTLING_NS);
        }
        let _ = rb.poll(Duration::from_nanos(wait as u64));
        let _ = rb.consume();
    }

    /// One tick: the controller's window (policy), then what the tick reports (accounting).
    fn tick(&mut self) -> Result<(), CollectorError> {
        let interval = self.clock.tick.elapsed().as_secs_f64();
        self.clock.tick = Instant::now();
        self.clock.ticks += 1;
        let stats = read_stats(self.ctx.skel);
        let in_situ = self.control(&stats)?;
        self.report(&stats, interval, in_situ);
        Ok(())
    }

    /// The controller's window: measures the probes' cost, applies the switches it decides
    /// and follows them with the in-situ meter; returns the meter's rows.
    fn control(
        &mut self,
        stats: &HashMap<StatKey, Stat>,
    ) -> Result<Vec<InSituRow>, CollectorError> {
        let sink = self.ctx.sink;
        let state = self.state.clone();
        let boot_start_ns = self.ctx.boot_start_ns;
        let tick = self.ctl.tick(
            causeway_store::now_ns(),
            &call_counts(stats),
            |pid| state.borrow().cpu_reading(pid, boot_start_ns),
            &self.sampling,
        );
        // A window of counts ends where an op enters or leaves sampled mode: its estimate
        // scales the calls counted while attached by the share of the window attached, which
        // holds only where that share was the duty all along (a loop's start in full mode
        // before it would dilute the rate).
        if tick.switches.iter().any(|s| {
            (s.from.mode == crate::ProbeMode::Sampled) != (s.to.mode == crate::ProbeMode::Sampled)
        }) {
            let mut st = state.borrow_mut();
            st.snapshot(stats, self.ctx.skel, sink, &self.sampling, false);
        }
        for s in &tick.switches {
            self.apply(s)?;
        }
        let in_situ = self.follow_sampled();
        self.switches += tick.switches.len();
        if !tick.windows.is_empty() {
            let _ = sink.ctl.send(Ctl::Overhead(tick.windows));
        }
        if !tick.switches.is_empty() {
            let rows = tick.switches.iter().map(Switch::row).collect();
            let _ = sink.ctl.send(Ctl::Modes(rows));
        }
        Ok(in_situ)
    }

    /// The live summary, and every few ticks the kernel's counters and the in-situ rows.
    fn report(&mut self, stats: &HashMap<StatKey, Stat>, interval: f64, in_situ: Vec<InSituRow>) {
        let (skel, sink) = (self.ctx.skel, self.ctx.sink);
        let mut st = self.state.borrow_mut();
        let (ctl, sampler) = (&self.ctl, &self.sampling.sampler);
        if self.live.enabled() {
            let now = causeway_store::now_ns();
            let ops = self.live.ops(
                stats,
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
            self.live.draw(&LiveView {
                seconds: self.ctx.started.elapsed().as_secs_f64(),
                events: st.sent,
                ring_drops: st.ring_drops.values().sum(),
                channel_drops: st.channel_drops.values().sum(),
                overhead_pct: ctl.overall_pct(),
                budget_pct: ctl.budget_pct(),
                ops,
            });
        }
        // Not right after a snapshot taken at a mode switch (control), on this tick.
        let fresh =
            causeway_store::now_ns() - st.window_start_ns() < (TICK_EVERY_S * 500_000_000) as i64;
        if self.clock.ticks.is_multiple_of(SNAPSHOT_TICKS) && !fresh {
            st.snapshot(stats, skel, sink, &self.sampling, false);
            if !in_situ.is_empty() {
                let _ = sink.ctl.send(Ctl::InSitu(in_situ));
            }
            let calls: u64 = st.totals.values().map(|t| t.calls).sum();
            info!(
                seconds = self.ctx.started.elapsed().as_secs(),
                calls,
                events = st.sent,
                ringbuf_drops = st.ring_drops.values().sum::<u64>(),
                channel_drops = st.channel_drops.values().sum::<u64>(),
                overhead_pct = format!("{:.2}", ctl.overall_pct()),
                "recording"
            );
        }
    }

    /// How often traced processes' maps are rescanned.
    fn rescan_every(&self) -> Duration {
        Duration::from_secs(if matches!(self.ctx.mode, Mode::All) {
            RESCAN_EVERY_ALL_S
        } else {
            RESCAN_EVERY_S
        })
    }

    /// Whether to stop: interrupted, out of time, or the traced command or process is gone.
    fn done(&mut self, stop: &AtomicBool) -> bool {
        if stop.load(Ordering::Relaxed) {
            info!("interrupted: finishing the trace");
            return true;
        }
        if self
            .ctx
            .args
            .duration
            .is_some_and(|d| self.ctx.started.elapsed() >= d)
        {
            return true;
        }
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            self.command_exit = status.code();
            info!(status = %status, "command exited");
            return true;
        }
        if let Mode::Pid(pid) = self.ctx.mode
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            info!(pid, "traced process exited");
            return true;
        }
        false
    }
}
