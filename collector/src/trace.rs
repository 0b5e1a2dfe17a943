//! `causeway trace`: load and attach the probes, run the poll loop on this thread (it owns the
//! skeleton and links), and end cleanly on --duration, SIGINT/SIGTERM, or the command's exit.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use causeway_bpf::abi::decode_event;
use causeway_bpf::libbpf_rs::{self, MapCore, MapFlags, PrintLevel, RingBufferBuilder};
use causeway_bpf::load::{DEFAULT_RINGBUF_BYTES, LoadConfig, open_and_load};
use causeway_store::WriterOptions;
use causeway_store::catalog::op_by_id;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::attach::{Attached, attach_host, attach_process};
use crate::discover::{
    LibFile, command_libs, cuda_processes, find_in_path, libs_in_maps, links_cudart_statically,
    standard_libs,
};
use crate::error::CollectorError;
use crate::host;
use crate::poll::PollState;
use crate::sink::Sink;

/// Options of `causeway trace`.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Trace store file to create (DuckDB; must not exist yet).
    #[arg(long, value_name = "PATH")]
    pub db: PathBuf,
    /// Trace this process (and the processes it forks) instead of every CUDA process.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C or the command exits.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Node name stored with every row (default: CAUSEWAY_NODE or the hostname).
    #[arg(long)]
    pub node: Option<String>,
    /// Do not record host events (scheduler, block I/O, network); process fork/exec/exit still are.
    #[arg(long)]
    pub no_host: bool,
    /// Also probe NCCL (libnccl) collectives and send/recv.
    #[arg(long)]
    pub nccl: bool,
    /// Stream every event as one JSON object per line on stdout while recording.
    #[arg(long)]
    pub json: bool,
    /// BPF ring-buffer size in bytes (a power of two >= 4096).
    #[arg(long, default_value_t = DEFAULT_RINGBUF_BYTES, value_name = "BYTES")]
    pub ringbuf_size: u32,
    /// Command to start and trace with its process tree until it exits (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Our stdin/stdout carry a protocol (`causeway mcp --live` over stdio): the command gets
    /// no stdin and writes its stdout to stderr.
    #[arg(skip)]
    pub stdio_is_protocol: bool,
}

/// Per-op line of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    /// Catalogue name.
    pub op: String,
    /// Calls counted in the kernel (exact).
    pub calls: u64,
    /// Events submitted to the ring buffer.
    pub stored: u64,
    /// Mean duration in ns.
    pub mean_ns: u64,
}

/// What a trace recorded.
#[derive(Debug, Clone, Serialize)]
pub struct TraceSummary {
    /// The store file.
    pub db: PathBuf,
    /// Wall-clock length of the trace in seconds.
    pub seconds: f64,
    /// Events written to the store.
    pub events_written: u64,
    /// Events lost in the kernel (ring buffer full).
    pub ringbuf_drops: u64,
    /// Events lost between the poll and writer threads (channel full).
    pub channel_drops: u64,
    /// Events whose store append failed.
    pub write_failed: u64,
    /// Library files probed.
    pub libraries: Vec<PathBuf>,
    /// Processes that produced events.
    pub processes: usize,
    /// Exit code of the command (`-- COMMAND`), when it exited normally.
    pub command_exit: Option<i32>,
    /// Per-op kernel counters.
    pub ops: Vec<OpSummary>,
}

fn libbpf_log(level: PrintLevel, msg: String) {
    let msg = msg.trim_end();
    match level {
        PrintLevel::Warn => debug!(target: "libbpf", "{msg}"),
        _ => tracing::trace!(target: "libbpf", "{msg}"),
    }
}

/// How the trace picks its processes.
enum Mode {
    Pid(u32),
    Command(Vec<String>),
    All,
}

fn initial_libs(mode: &Mode) -> Result<Vec<LibFile>, CollectorError> {
    Ok(match mode {
        Mode::Pid(pid) => {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(CollectorError::NoSuchProcess(*pid));
            }
            let mut libs = libs_in_maps(*pid);
            let exe = PathBuf::from(format!("/proc/{pid}/exe"));
            if links_cudart_statically(&exe) {
                libs.push(LibFile {
                    library: causeway_bpf::probes::Library::Cudart,
                    path: exe,
                });
            }
            libs
        }
        Mode::Command(cmd) => {
            let exe = find_in_path(&cmd[0]).ok_or_else(|| CollectorError::Spawn {
                command: cmd[0].clone(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })?;
            command_libs(&exe)
        }
        Mode::All => {
            let mut libs = standard_libs();
            libs.extend(cuda_processes().into_iter().flat_map(|(_, l)| l));
            libs
        }
    })
}

fn preflight() -> Result<(), CollectorError> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(CollectorError::NoBtf);
    }
    Ok(())
}

fn spawn(cmd: &[String], json: bool, stdio_is_protocol: bool) -> Result<Child, CollectorError> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    if stdio_is_protocol {
        c.stdin(Stdio::null());
    }
    if json || stdio_is_protocol {
        // stdout carries our JSON stream: the command's own output goes to stderr.
        let fd = std::os::fd::AsFd::as_fd(&std::io::stderr())
            .try_clone_to_owned()
            .map_err(|source| CollectorError::Os {
                what: "duplicating stderr",
                source,
            })?;
        c.stdout(Stdio::from(fd));
    }
    c.spawn().map_err(|source| CollectorError::Spawn {
        command: cmd.join(" "),
        source,
    })
}

impl TraceArgs {
    /// The options `causeway trace --db DB` would have (every other flag at its default), for
    /// programs that start a recording themselves (`causeway mcp --live`).
    pub fn with_db(db: PathBuf) -> TraceArgs {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            args: TraceArgs,
        }
        let mut a = <Defaults as clap::Parser>::parse_from(["trace", "--db", "-"]).args;
        a.db = db;
        a
    }
}

/// What a program embedding a recording hooks into it: `causeway trace --serve` and
/// `causeway mcp --live` serve the store while it grows.
#[derive(Default)]
pub struct TraceHooks {
    /// Ends the recording when set (as SIGINT does).
    pub stop: Option<Arc<AtomicBool>>,
    /// Called once, as soon as the store file exists, with a reader on the live database.
    pub on_store: Option<crate::sink::OnStore>,
}

impl std::fmt::Debug for TraceHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceHooks")
            .field("stop", &self.stop.is_some())
            .field("on_store", &self.on_store.is_some())
            .finish()
    }
}

/// Records a trace into `args.db` until the duration elapses, SIGINT/SIGTERM arrives, the
/// `-- COMMAND` exits or the `--pid` process is gone. The store file is complete on return.
pub fn run_trace(args: &TraceArgs) -> Result<TraceSummary, CollectorError> {
    run_trace_with(args, TraceHooks::default())
}

/// [`run_trace`] with hooks: an external stop flag and a live reader of the store.
pub fn run_trace_with(args: &TraceArgs, hooks: TraceHooks) -> Result<TraceSummary, CollectorError> {
    preflight()?;
    let mode = match (args.pid, args.command.is_empty()) {
        (Some(pid), true) => Mode::Pid(pid),
        (None, false) => Mode::Command(args.command.clone()),
        (None, true) => Mode::All,
        (Some(_), false) => {
            return Err(CollectorError::Usage(
                "--pid and -- COMMAND exclude each other".into(),
            ));
        }
    };
    let stop = hooks
        .stop
        .unwrap_or_else(|| Arc::new(AtomicBool::new(false)));
    let sig_ids = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .into_iter()
        .filter_map(|s| signal_hook::flag::register(s, stop.clone()).ok())
        .collect::<Vec<_>>();
    libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_log)));

    let started = Instant::now();
    let started_ns = causeway_store::now_ns();
    let pid_filter = match &mode {
        Mode::Pid(p) => p.to_string(),
        Mode::Command(c) => format!("command: {}", c.join(" ")),
        Mode::All => "all CUDA processes".into(),
    };
    let flags = format!(
        "no_host={} nccl={} ringbuf_size={}",
        args.no_host, args.nccl, args.ringbuf_size
    );
    let mut wopts = WriterOptions::default();
    if let Some(n) = &args.node {
        wopts.node = n.clone();
    }
    let libs = initial_libs(&mode)?;
    let sink = Sink::start(
        args.db.clone(),
        wopts,
        host::session_info(started_ns, pid_filter, flags),
        args.json,
        hooks.on_store,
    )?;
    let result = trace_loop(args, &mode, libs, &stop, &sink, started);
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    let sink_stats = sink.finish();
    let (mut summary, state_written) = result?;
    let sink_stats = sink_stats?;
    debug!(
        sent = state_written,
        written = sink_stats.written,
        "writer finished"
    );
    summary.events_written = sink_stats.written;
    summary.write_failed = sink_stats.write_failed;
    summary.seconds = started.elapsed().as_secs_f64();
    info!(db = %summary.db.display(), events = summary.events_written, ringbuf_drops = summary.ringbuf_drops, channel_drops = summary.channel_drops, "trace complete");
    Ok(summary)
}

fn trace_loop(
    args: &TraceArgs,
    mode: &Mode,
    libs: Vec<LibFile>,
    stop: &AtomicBool,
    sink: &Sink,
    started: Instant,
) -> Result<(TraceSummary, u64), CollectorError> {
    let cfg = LoadConfig {
        self_tgid: std::process::id(),
        spawner_tid: nix::unistd::gettid().as_raw() as u32,
        uprobes_enrol: matches!(mode, Mode::All),
        ringbuf_bytes: args.ringbuf_size,
        host: !args.no_host,
        bare: false,
    };
    let mut storage = MaybeUninit::uninit();
    let skel = open_and_load(&mut storage, &cfg)?;
    let mut links = attach_process(&skel)?;
    if !args.no_host {
        links.extend(attach_host(&skel)?);
    }
    let mut attached = Attached::default();
    for lib in &libs {
        attached.attach_lib(&skel, lib, args.nccl);
    }
    let enrol = |pid: u32| {
        skel.maps
            .targets
            .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
    };
    match mode {
        Mode::Pid(pid) => enrol(*pid).map_err(|source| CollectorError::Map {
            map: "targets",
            source,
        })?,
        Mode::All => {
            for (pid, _) in cuda_processes() {
                let _ = enrol(pid);
            }
        }
        Mode::Command(_) => {}
    }
    if attached.probes() == 0 {
        let target = match mode {
            Mode::Pid(p) => format!("pid {p}"),
            Mode::Command(c) => format!("`{}`", c.join(" ")),
            Mode::All => "any process".into(),
        };
        if matches!(mode, Mode::All) {
            return Err(CollectorError::NoCudaLibrary { target });
        }
        warn!(%target, "no CUDA library found yet; rescanning while tracing (libraries loaded with dlopen are attached when they appear)");
    }
    let mut child = match mode {
        Mode::Command(cmd) => Some(spawn(cmd, args.json, args.stdio_is_protocol)?),
        _ => None,
    };
    let root_pid = child.as_ref().map(Child::id).or(args.pid);
    info!(probes = attached.probes(), files = attached.files(), pid = ?root_pid, "tracing");

    let state = RefCell::new(PollState::new(host::mono_to_unix_offset()));
    let mut rb = RingBufferBuilder::new();
    rb.add(&skel.maps.events, |data: &[u8]| {
        let mut st = state.borrow_mut();
        match decode_event(data) {
            Ok(raw) => st.push(raw, sink),
            Err(e) => {
                st.undecodable += 1;
                debug!(error = %e, "undecodable record");
            }
        }
        0
    })
    .map_err(|source| CollectorError::Map {
        map: "events",
        source,
    })?;
    let rb = rb.build().map_err(|source| CollectorError::Map {
        map: "events",
        source,
    })?;

    let mut command_exit = None;
    let (mut last_scan, mut last_stats, mut last_flush) =
        (Instant::now(), Instant::now(), Instant::now());
    loop {
        // Producers submit without wakeups (except when the ring fills): poll on a timer, then drain.
        let _ = rb.poll(Duration::from_millis(50));
        let _ = rb.consume();
        // Small batches are held briefly so a fast-waking ring does not flood the channel.
        if last_flush.elapsed() >= Duration::from_millis(100) {
            state.borrow_mut().flush(sink);
            last_flush = Instant::now();
        }

        if last_stats.elapsed() >= Duration::from_secs(5) {
            let mut st = state.borrow_mut();
            st.snapshot(&skel, sink);
            let calls: u64 = st.totals.values().map(|t| t.calls).sum();
            info!(
                seconds = started.elapsed().as_secs(),
                calls,
                events = st.sent,
                ringbuf_drops = st.ring_drops.values().sum::<u64>(),
                channel_drops = st.channel_drops.values().sum::<u64>(),
                "recording"
            );
            last_stats = Instant::now();
        }
        if last_scan.elapsed() >= Duration::from_secs(if matches!(mode, Mode::All) { 2 } else { 1 })
        {
            rescan(&skel, mode, &mut attached, args.nccl);
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
    let _ = rb.consume();
    drop(rb);
    let mut st = state.into_inner();
    st.flush(sink);
    st.snapshot(&skel, sink);
    st.close_processes(sink);
    drop(links);
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
            mean_ns: t.total_ns.checked_div(t.calls).unwrap_or(0),
        })
        .collect();
    let summary = TraceSummary {
        db: args.db.clone(),
        seconds: 0.0,
        events_written: 0,
        ringbuf_drops: st.ring_drops.values().sum(),
        channel_drops: st.channel_drops.values().sum(),
        write_failed: 0,
        libraries: attached.libs().into_iter().map(|l| l.path).collect(),
        processes: st.pids.len(),
        command_exit,
        ops,
    };
    Ok((summary, st.sent))
}

/// Attaches library copies that appeared in traced processes since the last scan.
fn rescan(
    skel: &causeway_bpf::skel::CausewaySkel<'_>,
    mode: &Mode,
    attached: &mut Attached,
    nccl: bool,
) {
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
        for lib in libs_in_maps(pid) {
            if !attached.contains(&lib) && attached.attach_lib(skel, &lib, nccl) > 0 {
                info!(pid, lib = %lib.path.display(), "new library copy attached");
            }
        }
        if matches!(mode, Mode::All) {
            let _ = skel
                .maps
                .targets
                .update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY);
        }
    }
}
