//! `causeway trace`: its options and summary, choosing the processes and libraries, and the
//! store's writer thread around the recording loop (recorder.rs), which runs on this thread and
//! ends cleanly on --duration, SIGINT/SIGTERM, or the command's exit.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::ProbeMode;
use causeway_bpf::libbpf_rs::{self, PrintLevel};
use causeway_bpf::load::DEFAULT_RINGBUF_BYTES;
use causeway_store::catalog::op_by_name;
use causeway_store::{InSituRow, WriterOptions};
use serde::Serialize;
use tracing::{debug, info};

use crate::cost::CostModel;
use crate::discover::{
    LibFile, command_libs, cuda_files_in_maps, cuda_processes, find_in_path, standard_libs,
    static_runtime_programs,
};
use crate::error::CollectorError;
use crate::host;
use crate::overhead_control::is_call_op;
use crate::sink::Sink;
use crate::tuning::{DEFAULT_DUTY, DUTY_MAX, DUTY_MIN};

/// DuckDB memory limit of the recording's writer. DuckDB's default (80% of RAM) lets its cache of
/// written blocks grow with the recording: at 100k events/s the collector's RSS passed 210 MiB in
/// 20 s; with 48 MB it peaked at 175 MiB over 30 s (docs/benchmarks.md). 16 MB is too little
/// for DuckDB to create the schema. Since commits hold exactly one row group and a new store's
/// indexes load on demand, 24 MB also records 100k events/s without a failed append, but a
/// long recording's own growth (the stack table's index, processes) needs room that DuckDB
/// cannot spill: 32 MB (peak RSS of probe_cost's sustained run: docs/benchmarks.md).
const WRITER_MEMORY: &str = "32MB";

/// DuckDB memory of the queries of a recording served while it records (`mcp --live`, the
/// agent) when the server names none ([`TraceHooks::query_memory`]): its live readers' queries
/// run in the writer's database, under its limit, which they cannot raise (the configuration
/// is locked). The written blocks it caches are dropped when the writer reopens the database
/// (`REOPEN_ROWS`), as they cannot be trimmed while readers hold it.
const SERVED_QUERY_MEMORY: &str = "256MB";

/// The DuckDB memory limit of a served recording: the writer's own and what its live readers'
/// queries may use (`query_memory`, a DuckDB size, [`SERVED_QUERY_MEMORY`] if none). The
/// writer comes first where they compete (`Writer` stops the readers' queries).
fn served_memory(query_memory: Option<&str>) -> Result<String, CollectorError> {
    let q = query_memory.unwrap_or(SERVED_QUERY_MEMORY);
    let size = |s: &str| {
        causeway_store::guarded::parse_size(s).ok_or_else(|| {
            CollectorError::Usage(format!(
                "query memory '{s}' is not a size (hint: write it as DuckDB takes it, e.g. 512MB)"
            ))
        })
    };
    Ok(format!(
        "{}KB",
        (size(WRITER_MEMORY)? + size(q)?).div_ceil(1000)
    ))
}

/// Longest time an event waits in the recording's writer before it is committed (and visible to
/// live readers, and safe from a SIGKILL of the tracer). With the poll thread's 100 ms batching
/// and the commit itself, a SIGKILL loses at most the last [`SIGKILL_LOSS_BOUND`]
/// (lifecycle tests). A 2 s bound was cheaper at 60k-120k events/s (full row groups written
/// once instead of through DuckDB's WAL: docs/benchmarks.md) but lost up to ~2.4 s.
const WRITER_FLUSH: Duration = Duration::from_millis(600);

/// What a SIGKILL of the tracer may lose at most: the events of this last stretch of time
/// (documented in docs/cli.md, checked by the collector's lifecycle tests).
pub const SIGKILL_LOSS_BOUND: Duration = Duration::from_secs(1);

/// Events the recording's writer hands to DuckDB at once, inside the transaction a whole row
/// group commits in: the writer's buffer and the appender's copy stay this small, where a whole
/// row group held ~11 MB in each (docs/benchmarks.md).
const WRITER_CHUNK: usize = 16_384;

/// Default `--overhead-budget` (% of each traced process's CPU time).
pub const DEFAULT_OVERHEAD_BUDGET: f64 = 1.0;

/// Default `--sample-duty` (%).
pub const DEFAULT_SAMPLE_DUTY_PCT: f64 = 100.0 * DEFAULT_DUTY;

/// Default `--hold-timeout`.
pub const DEFAULT_HOLD_TIMEOUT: Duration = Duration::from_secs(2);

/// Parses `--overhead-budget`: a percentage in (0, 100].
pub fn parse_budget(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if v > 0.0 && v <= 100.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not a percentage in (0, 100]"))
    }
}

/// Parses `--sample-duty`: a percentage in [2, 50] (sampling.rs DUTY_MIN, DUTY_MAX).
pub fn parse_duty(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    let (lo, hi) = (100.0 * DUTY_MIN, 100.0 * DUTY_MAX);
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a percentage in [{lo}, {hi}]"))
    }
}

/// Parses `--probe-mode OP=MODE`.
pub fn parse_probe_mode(s: &str) -> Result<(u16, ProbeMode), String> {
    let (op, mode) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}': expected OP=MODE, e.g. cudaLaunchKernel=entry_only"))?;
    let op = op_by_name(op)
        .filter(|o| is_call_op(o.id))
        .ok_or_else(|| format!("'{op}' is not a probed CUDA/driver/NCCL call"))?;
    let mode = ProbeMode::from_name(mode).ok_or_else(|| {
        format!("'{mode}': the modes are full, aggregate, entry_only and sampled")
    })?;
    Ok((op.id, mode))
}

/// Options of a recording (`causeway trace`, `mcp --live`, the agent); the binary owns how
/// they are spelled on the command line.
#[derive(Debug, Clone)]
pub struct TraceArgs {
    /// Trace store file to create (DuckDB; must not exist yet).
    pub db: PathBuf,
    /// Trace this process (and the processes it forks) instead of every CUDA process.
    pub pid: Option<u32>,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C or the command exits.
    pub duration: Option<Duration>,
    /// Node name stored with every row (default: CAUSEWAY_NODE or the hostname).
    pub node: Option<String>,
    /// Cluster (job) id for processes whose environment names none ($CAUSEWAY_CLUSTER or
    /// torchrun's $TORCHELASTIC_RUN_ID in the process wins); stored with the node and processes.
    pub cluster: Option<String>,
    /// Pod and container names for traced processes in Kubernetes pods: a URL answering a
    /// PodList (the kubelet's https://NODE:10250/pods, or the API server's
    /// /api/v1/pods?fieldSelector=spec.nodeName=NODE), or `in-cluster` (the API server, with
    /// this pod's service account and $NODE_NAME). Without it, cgroups keep container and pod
    /// ids only.
    pub kube_pods: Option<String>,
    /// Bearer token file for --kube-pods (a service account token).
    pub kube_token_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the --kube-pods server's certificate.
    pub kube_ca_cert: Option<PathBuf>,
    /// Do not record host events (scheduler, block I/O, network); process fork/exec/exit still are.
    pub no_host: bool,
    /// Also probe NCCL (libnccl) collectives and send/recv.
    pub nccl: bool,
    /// Stream every event as one JSON object per line on stdout while recording.
    pub json: bool,
    /// BPF ring-buffer size in bytes (a power of two >= 4096).
    pub ringbuf_size: u32,
    /// Keep the estimated cost of the probes under PCT % of each traced process's CPU time by
    /// moving hot calls to cheaper probe modes (aggregate, entry_only, then sampled: probes
    /// attached only part of the time, calls estimated); 100 never moves them.
    pub overhead_budget: f64,
    /// Never sample: every call stays counted exactly (entry_only is the cheapest mode the
    /// budget uses), at the price of exceeding the budget on very hot calls.
    pub exact_counts: bool,
    /// Pin a call's probe mode, OP=full|aggregate|entry_only|sampled (repeatable); the budget
    /// leaves it.
    pub probe_modes: Vec<(u16, ProbeMode)>,
    /// Share of the time (%) the probes of a call pinned to sampled mode are attached.
    pub sample_duty: f64,
    /// Record the user-space call stack of every call made in full mode, symbolised by name
    /// (frames are found through frame pointers, and through code without them with the files'
    /// .eh_frame unwind tables); in CPython 3.10-3.13 processes also the calling thread's Python
    /// frames (file, function, line).
    pub stacks: bool,
    /// With --stacks: record native frames only, not the Python frames of CPython processes.
    pub no_python_frames: bool,
    /// Attach one classic uprobe per function even where the kernel has uprobe.multi (the path
    /// used on kernels before 6.6; slower to detach).
    pub classic_uprobes: bool,
    /// Do not load the library-load hook: libraries a process maps after the start are found by
    /// the periodic rescan of /proc/PID/maps only (every 1 s, 2 s for all processes).
    pub no_map_hook: bool,
    /// How long a process of the command may be stopped while the probes of a library it just
    /// mapped (or a program it exec'd) are attached; past it, it runs on and the calls made
    /// before the attach are missed (counted in the summary).
    pub hold_timeout: Duration,
    /// Never stop the command's processes while their libraries are attached: calls made within
    /// milliseconds of mapping a CUDA library can then be missed.
    pub no_hold: bool,
    /// Fault injection for tests: each attach after a mapping takes this much longer.
    pub stall_attach: Option<Duration>,
    /// Fault injection for tests: the CPython layout of this version ("3.12") is used for
    /// every interpreter found, whatever its own version.
    pub python_layout: Option<String>,
    /// Time socket calls from system call entry to exit (whole-call durations, the send/recv
    /// family only; the path used on kernels before 6.3) instead of from their first block to
    /// their return; every system call on the machine pays for it (~170 ns each on the
    /// development VM), and every probed call's return where uretprobes return through a
    /// system call
    pub net_syscalls: bool,
    /// Command to start and trace with its process tree until it exits (after `--`).
    pub command: Vec<String>,
    /// Our stdin/stdout carry a protocol (`causeway mcp --live` over stdio): the command gets
    /// no stdin and writes its stdout to stderr.
    pub stdio_is_protocol: bool,
}

/// Per-op line of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    /// Catalogue name.
    pub op: String,
    /// Calls counted in the kernel (exact), or estimated where the op was sampled.
    pub calls: u64,
    /// Events submitted to the ring buffer.
    pub stored: u64,
    /// Calls whose duration was measured (not entry-only).
    pub timed: u64,
    /// Mean measured duration in ns.
    pub mean_ns: u64,
    /// Probe mode at the end of the trace (probed calls only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    /// `calls` includes calls estimated while the op's probes were detached (sampled mode).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub calls_estimated: bool,
}

/// What the overhead controller saw and did.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadSummary {
    /// --overhead-budget (%).
    pub budget_pct: f64,
    /// Estimated probe time over CPU time of the traced processes, whole trace (%).
    pub estimated_pct: f64,
    /// CPU time of the traced processes with probed calls (ns).
    pub cpu_ns: u64,
    /// Estimated time spent in probes (ns).
    pub probe_ns: u64,
    /// Calibrated per-call costs (ns) by kind of first instruction, and how they were obtained.
    pub costs: CostModel,
    /// Probe-mode switches made (forced ones included).
    pub mode_switches: usize,
    /// Sampled ops' probe costs measured on the job (the last measurement of each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_situ: Vec<InSituSummary>,
}

/// What a sampled op's probes cost the job, measured on it (store: probe_in_situ).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InSituSummary {
    /// Op name.
    pub op: &'static str,
    /// The measurement, as stored.
    #[serde(flatten)]
    pub measured: InSituRow,
}

/// A library file attached because the library-load hook saw a traced process map it.
#[derive(Debug, Clone, Serialize)]
pub struct MapAttach {
    /// The process that mapped it.
    pub pid: u32,
    /// The file whose probes were attached.
    pub library: PathBuf,
    /// From the mapping (mmap's return in the kernel) to its probes attached, in µs.
    pub latency_us: u64,
    /// When the probes were attached (ns since the Unix epoch).
    pub attached_ns: i64,
}

/// The library-load hook: libraries attached the moment a traced process mapped them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MapHookSummary {
    /// Whether the hook was loaded and attached; without it, libraries mapped after the start
    /// are found by the periodic rescan (every 1 s, 2 s for all processes).
    pub active: bool,
    /// Records received: at most one per file (a CUDA library, or any file a traced process
    /// maps executable), unless several processes map a new file at the same moment.
    pub records: u64,
    /// Files attached because of a record.
    pub attached: Vec<MapAttach>,
    /// Processes of the command stopped until their new files' probes were attached.
    pub hold: crate::hold::HoldSummary,
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
    /// Times the writer closed the store and opened it again to free DuckDB's metadata of the
    /// row groups written (every `causeway_store::REOPEN_ROWS` events).
    pub store_reopens: u64,
    /// Library files probed.
    pub libraries: Vec<PathBuf>,
    /// Processes that produced events.
    pub processes: usize,
    /// Exit code of the command (`-- COMMAND`), when it exited normally.
    pub command_exit: Option<i32>,
    /// Per-op kernel counters.
    pub ops: Vec<OpSummary>,
    /// The overhead controller.
    pub overhead: OverheadSummary,
    /// Distinct user stacks recorded (`--stacks`).
    pub stacks: u64,
    /// Of them, those whose native frames came from unwinding the copied stack memory with the
    /// files' unwind tables (deeper than the frame-pointer walk).
    pub stacks_unwound: u64,
    /// Python frames of the stacks (`--stacks` in CPython processes).
    pub python: PythonSummary,
    /// Libraries attached when they were mapped (the library-load hook).
    pub map_hook: MapHookSummary,
    /// Kernels named from the launches' host stubs.
    pub kernels: crate::kernels::KernelSummary,
    /// NVTX ranges and marks recorded (`ranges`, kind nvtx / nvtx_mark) from the command.
    pub nvtx_ranges: u64,
    /// Rolling segments (the agent): `db` is their data directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsSummary>,
}

/// What the rolling segments did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SegmentsSummary {
    /// Segments closed.
    pub closed: u64,
    /// Closed segments deleted by retention.
    pub deleted: u64,
}

/// How the Python frames of `--stacks` went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PythonSummary {
    /// Processes found running a supported CPython.
    pub processes: u64,
    /// Processes running a CPython with no tested layout (none of their frames recorded).
    pub unsupported: u64,
    /// Walks of a thread's frames at recorded calls (the kernel's count, per call).
    pub walks: u64,
    /// Calls whose thread's interpreter state was not found (recorded without Python frames).
    pub no_thread: u64,
    /// Walks cut at the 32-frame limit.
    pub truncated: u64,
    /// Walks that stopped at a frame that could not be read.
    pub bad_read: u64,
    /// Distinct stacks of CPython processes recorded before their interpreter was found (a
    /// process not started by the trace, before its first stack arrived): no Python frames.
    pub early_stacks: u64,
    /// Distinct stacks by the status of their Python frames (python_stacks.status).
    pub stacks: std::collections::BTreeMap<&'static str, u64>,
}

fn libbpf_log(level: PrintLevel, msg: String) {
    let msg = msg.trim_end();
    match level {
        PrintLevel::Warn => debug!(target: "libbpf", "{msg}"),
        _ => tracing::trace!(target: "libbpf", "{msg}"),
    }
}

/// How the trace picks its processes.
pub(crate) enum Mode {
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
            // The program itself and every shared object it maps, for a runtime linked in.
            cuda_files_in_maps(*pid, &mut HashSet::new())
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
            let mut checked = HashSet::new();
            for (pid, _) in cuda_processes() {
                libs.extend(cuda_files_in_maps(pid, &mut checked));
            }
            libs.extend(static_runtime_programs());
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

pub(crate) fn spawn(
    cmd: &[String],
    json: bool,
    stdio_is_protocol: bool,
    nvtx_injection: Option<&std::path::Path>,
) -> Result<Child, CollectorError> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    if let Some(lib) = nvtx_injection {
        c.env(crate::nvtx::INJECTION_VAR, lib);
    }
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
    /// The options `causeway trace --db DB` has (every other flag at its default), for
    /// programs that start a recording themselves (`causeway mcp --live`, the agent, tests).
    pub fn with_db(db: PathBuf) -> TraceArgs {
        TraceArgs {
            db,
            pid: None,
            duration: None,
            node: None,
            cluster: None,
            kube_pods: None,
            kube_token_file: None,
            kube_ca_cert: None,
            no_host: false,
            nccl: false,
            json: false,
            ringbuf_size: DEFAULT_RINGBUF_BYTES,
            overhead_budget: DEFAULT_OVERHEAD_BUDGET,
            exact_counts: false,
            probe_modes: Vec::new(),
            sample_duty: DEFAULT_SAMPLE_DUTY_PCT,
            stacks: false,
            no_python_frames: false,
            classic_uprobes: false,
            no_map_hook: false,
            hold_timeout: DEFAULT_HOLD_TIMEOUT,
            no_hold: false,
            stall_attach: None,
            python_layout: None,
            net_syscalls: false,
            command: Vec::new(),
            stdio_is_protocol: false,
        }
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
    /// Called once when the probes are attached and recording has begun (before the
    /// `-- COMMAND` starts): calls from then on are recorded.
    pub on_ready: Option<Box<dyn FnOnce() + Send>>,
    /// Record into rolling segments in the directory `db` names, closed and kept as this
    /// policy (shared: the agent changes it on SIGHUP) says.
    pub segments: Option<crate::segments::SegmentHandle>,
    /// DuckDB memory the live readers' queries may use (`--query-memory`, `[serve]
    /// query_memory`), on top of the writer's; with `on_store` only.
    pub query_memory: Option<String>,
}

impl std::fmt::Debug for TraceHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceHooks")
            .field("stop", &self.stop.is_some())
            .field("on_store", &self.on_store.is_some())
            .field("on_ready", &self.on_ready.is_some())
            .field("segments", &self.segments)
            .field("query_memory", &self.query_memory)
            .finish()
    }
}

/// Records a trace into `args.db` until the duration elapses, SIGINT/SIGTERM arrives, the
/// `-- COMMAND` exits or the `--pid` process is gone. The store file is complete on return.
pub fn run_trace(args: &TraceArgs) -> Result<TraceSummary, CollectorError> {
    run_trace_with(args, TraceHooks::default())
}

/// Where pod names come from, from --kube-pods and its files (None: not asked for).
pub(crate) fn pod_source(
    args: &TraceArgs,
) -> Result<Option<causeway_placement::PodSource>, CollectorError> {
    let Some(url) = args.kube_pods.as_deref() else {
        return Ok(None);
    };
    let source = if url == "in-cluster" {
        let node = std::env::var("NODE_NAME").map_err(|_| {
            CollectorError::PodSource(
                "in-cluster needs NODE_NAME (set it from spec.nodeName with the downward API)"
                    .into(),
            )
        })?;
        causeway_placement::PodSource::in_cluster(&node)
    } else {
        causeway_placement::PodSource::new(
            url,
            args.kube_token_file.as_deref(),
            args.kube_ca_cert.as_deref(),
        )
    };
    source.map(Some).map_err(CollectorError::PodSource)
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
    // A bad --kube-pods is a usage error before anything is created.
    pod_source(args)?;
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
    let forced: Vec<String> = args
        .probe_modes
        .iter()
        .map(|(op, m)| {
            let name = causeway_store::catalog::op_by_id(*op).map_or("?", |o| o.name);
            format!("{name}={}", m.name())
        })
        .collect();
    let flags = format!(
        "no_host={} nccl={} ringbuf_size={} overhead_budget={} exact_counts={} stacks={} probe_modes={} sample_duty={}",
        args.no_host,
        args.nccl,
        args.ringbuf_size,
        args.overhead_budget,
        args.exact_counts,
        args.stacks,
        forced.join(","),
        args.sample_duty
    );
    let mut wopts = WriterOptions {
        memory_limit: Some(if hooks.on_store.is_some() {
            served_memory(hooks.query_memory.as_deref())?
        } else {
            WRITER_MEMORY.into()
        }),
        threads: Some(1),
        flush_interval: WRITER_FLUSH,
        chunk_rows: WRITER_CHUNK,
        // Live readers' queries share the writer's database and may need its cache and its
        // temporary directory; a recording nobody reads until it ends needs neither.
        trim_cache: hooks.on_store.is_none(),
        // With live readers too: they are locked and given new connections meanwhile.
        reopen_rows: causeway_store::REOPEN_ROWS,
        ..WriterOptions::default()
    };
    if let Some(n) = &args.node {
        wopts.node = n.clone();
    }
    if let Some(c) = &args.cluster {
        host::set_default_cluster(c);
    }
    let libs = initial_libs(&mode)?;
    let segments = hooks
        .segments
        .map(|policy| crate::segments::Segments::start(&args.db, policy))
        .transpose()?;
    let store_path = match &segments {
        Some(s) => {
            wopts.timeline = s.timeline();
            s.open_path().to_path_buf()
        }
        None => args.db.clone(),
    };
    let rolling = segments.is_some();
    let sink = Sink::start(
        store_path,
        wopts,
        host::session_info(started_ns, pid_filter, flags),
        args.json,
        hooks.on_store,
        segments,
    )?;
    let result = crate::recorder::record(args, &mode, libs, &stop, &sink, started, hooks.on_ready);
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
    summary.store_reopens = sink_stats.reopens;
    if rolling {
        summary.segments = Some(SegmentsSummary {
            closed: sink_stats.segments_closed,
            deleted: sink_stats.segments_deleted,
        });
    }
    summary.seconds = started.elapsed().as_secs_f64();
    info!(db = %summary.db.display(), events = summary.events_written, ringbuf_drops = summary.ringbuf_drops, channel_drops = summary.channel_drops, "trace complete");
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::served_memory;

    /// A served recording's DuckDB holds the writer's 32 MB and the queries' own.
    #[test]
    fn a_served_recording_adds_the_query_memory_to_the_writers() {
        assert_eq!(served_memory(Some("512MB")).unwrap(), "544000KB");
        assert_eq!(served_memory(Some("1GiB")).unwrap(), "1105742KB");
        assert_eq!(served_memory(None).unwrap(), "288000KB");
        let e = served_memory(Some("lots")).unwrap_err().to_string();
        assert!(e.contains("'lots' is not a size"), "{e}");
    }
}
