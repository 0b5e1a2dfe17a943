//! `causeway trace`: records with the collector; with `--listen ADDR` the same process also
//! serves MCP over streamable HTTP from the growing store (live investigation), and with
//! `--otlp-endpoint URL` it pushes OTLP metrics from the growing store while it records.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use causeway_collector::{
    DEFAULT_OVERHEAD_BUDGET, DEFAULT_RINGBUF_BYTES, DEFAULT_SAMPLE_DUTY_PCT, ProbeMode, TraceArgs,
    parse_budget, parse_duty, parse_probe_mode,
};

use super::mcp::{
    HttpFlags, context, http_options, runtime, serve_http, start_live_recording_with,
};

/// Arguments of `causeway trace`.
#[derive(Debug, clap::Args)]
pub struct TraceCmd {
    #[command(flatten)]
    pub trace: TraceFlags,
    /// Also serve MCP, the query API and /metrics over HTTP on ADDR while recording (e.g.
    /// 127.0.0.1:8765; --serve is the old spelling).
    #[arg(long = "listen", visible_alias = "serve", value_name = "ADDR")]
    pub serve: Option<SocketAddr>,
    #[command(flatten, next_help_heading = "Serving (with --listen)")]
    pub http: HttpFlags,
    #[command(flatten, next_help_heading = "OTLP push (with --otlp-endpoint)")]
    pub otlp: crate::cli::PushFlags,
}

/// The recording options of `causeway trace` (and `mcp --live`), as the command line spells them.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceFlags {
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
    /// Cluster (job) id for processes whose environment names none ($CAUSEWAY_CLUSTER or
    /// torchrun's $TORCHELASTIC_RUN_ID in the process wins); stored with the node and processes.
    #[arg(long, env = "CAUSEWAY_CLUSTER")]
    pub cluster: Option<String>,
    /// Pod and container names for traced processes in Kubernetes pods: a URL answering a
    /// PodList (the kubelet's https://NODE:10250/pods, or the API server's
    /// /api/v1/pods?fieldSelector=spec.nodeName=NODE), or `in-cluster` (the API server, with
    /// this pod's service account and $NODE_NAME). Without it, cgroups keep container and pod
    /// ids only.
    #[arg(long, value_name = "URL|in-cluster")]
    pub kube_pods: Option<String>,
    /// Bearer token file for --kube-pods (a service account token).
    #[arg(long, value_name = "FILE", requires = "kube_pods")]
    pub kube_token_file: Option<PathBuf>,
    /// CA certificate (PEM) that signed the --kube-pods server's certificate.
    #[arg(long, value_name = "PEM", requires = "kube_pods")]
    pub kube_ca_cert: Option<PathBuf>,
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
    /// Keep the estimated cost of the probes under PCT % of each traced process's CPU time by
    /// moving hot calls to cheaper probe modes (aggregate, entry_only, then sampled: probes
    /// attached only part of the time, calls estimated); 100 never moves them.
    #[arg(long, default_value_t = DEFAULT_OVERHEAD_BUDGET, value_name = "PCT", value_parser = parse_budget)]
    pub overhead_budget: f64,
    /// Never sample: every call stays counted exactly (entry_only is the cheapest mode the
    /// budget uses), at the price of exceeding the budget on very hot calls.
    #[arg(long)]
    pub exact_counts: bool,
    /// Pin a call's probe mode, OP=full|aggregate|entry_only|sampled (repeatable); the budget
    /// leaves it.
    #[arg(long = "probe-mode", value_name = "OP=MODE", value_parser = parse_probe_mode)]
    pub probe_modes: Vec<(u16, ProbeMode)>,
    /// Share of the time (%) the probes of a call pinned to sampled mode are attached.
    #[arg(long, default_value_t = DEFAULT_SAMPLE_DUTY_PCT, value_name = "PCT", value_parser = parse_duty)]
    pub sample_duty: f64,
    /// Record the user-space call stack of every call made in full mode, symbolised by name
    /// (frames are found through frame pointers); in CPython 3.10-3.13 processes also the
    /// calling thread's Python frames (file, function, line).
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: record native frames only, not the Python frames of CPython processes.
    #[arg(long, requires = "stacks")]
    pub no_python_frames: bool,
    /// Attach one classic uprobe per function even where the kernel has uprobe.multi (the path
    /// used on kernels before 6.6; slower to detach).
    #[arg(long, hide = true)]
    pub classic_uprobes: bool,
    /// Do not load the library-load hook: libraries a process maps after the start are found by
    /// the periodic rescan of /proc/PID/maps only (every 1 s, 2 s for all processes).
    #[arg(long, hide = true)]
    pub no_map_hook: bool,
    /// How long a process of the command may be stopped while the probes of a library it just
    /// mapped (or a program it exec'd) are attached; past it, it runs on and the calls made
    /// before the attach are missed (counted in the summary).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s", value_name = "DURATION")]
    pub hold_timeout: Duration,
    /// Never stop the command's processes while their libraries are attached: calls made within
    /// milliseconds of mapping a CUDA library can then be missed.
    #[arg(long)]
    pub no_hold: bool,
    /// Time socket calls from system call entry to exit (whole-call durations, the send/recv
    /// family only; the path used on kernels before 6.3) instead of from their first block to
    /// their return; every system call on the machine pays for it (~170 ns each on the
    /// development VM), and every probed call's return where uretprobes return through a
    /// system call
    #[arg(long)]
    pub net_syscalls: bool,
    /// Command to start and trace with its process tree until it exits (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl TraceFlags {
    /// The library's options these flags spell.
    pub fn into_args(self) -> TraceArgs {
        TraceArgs {
            db: self.db,
            pid: self.pid,
            duration: self.duration,
            node: self.node,
            cluster: self.cluster,
            kube_pods: self.kube_pods,
            kube_token_file: self.kube_token_file,
            kube_ca_cert: self.kube_ca_cert,
            no_host: self.no_host,
            nccl: self.nccl,
            json: self.json,
            ringbuf_size: self.ringbuf_size,
            overhead_budget: self.overhead_budget,
            exact_counts: self.exact_counts,
            probe_modes: self.probe_modes,
            sample_duty: self.sample_duty,
            stacks: self.stacks,
            no_python_frames: self.no_python_frames,
            classic_uprobes: self.classic_uprobes,
            no_map_hook: self.no_map_hook,
            hold_timeout: self.hold_timeout,
            no_hold: self.no_hold,
            net_syscalls: self.net_syscalls,
            command: self.command,
            ..TraceArgs::with_db(PathBuf::new())
        }
    }
}

fn finish(args: &TraceCmd, summary: &causeway_collector::TraceSummary) -> Result<()> {
    if args.trace.json {
        Ok(())
    } else {
        crate::print_json(summary)
    }
}

/// Stores the steps inferred for processes without NVTX steps (`causeway steps` infers the
/// same); the recording stands without them where that fails.
pub(crate) fn store_inferred_steps(db: &std::path::Path) {
    match crate::cmd::steps::store_inferred(db) {
        Ok(n) => tracing::info!(steps = n, db = %db.display(), "inferred steps stored"),
        Err(e) => tracing::warn!(error = %e, db = %db.display(), "inferred steps not stored"),
    }
}

/// Runs `trace`: the summary goes to stdout as JSON unless events stream there (`--json`).
pub fn run(args: &TraceCmd) -> Result<()> {
    let push = args.otlp.target()?.map(|t| (t, args.otlp.otlp_interval));
    let trace = args.trace.clone().into_args();
    let opts = args
        .serve
        .map(|a| http_options(a, &args.http))
        .transpose()?;
    let ctx = context(&trace.db, &[])?;
    let db = trace.db.clone();
    let summary = record(trace, ctx, opts, push, None, "trace")?;
    store_inferred_steps(&db);
    finish(args, &summary)
}

/// Records `trace`; with `opts` also serves it over HTTP while it records, with `push` pushes
/// OTLP from it every interval, and with `segments` records into rolling segments (the agent).
pub fn record(
    trace: TraceArgs,
    ctx: causeway_tools::Context,
    opts: Option<causeway_serve::http::HttpOptions>,
    push: Option<(causeway_client::otlp_push::Target, Duration)>,
    segments: Option<causeway_collector::SegmentHandle>,
    what: &'static str,
) -> Result<causeway_collector::TraceSummary> {
    if opts.is_none() && push.is_none() && segments.is_none() {
        return Ok(causeway_collector::run_trace(&trace)?);
    }
    let ctx = Arc::new(ctx);
    let rolling = segments.is_some();
    let dir = trace.db.clone();
    let (stop, recorder) = start_live_recording_with(&ctx, trace, segments)?;
    if rolling {
        // The line a supervisor (or a test) waits for: the probes are attached.
        eprintln!("causeway {what}: recording into {}", dir.display());
    }
    let pushed = Arc::new(AtomicBool::new(false));
    let pusher = push
        .map(|(t, interval)| {
            causeway_client::otlp_push::live::spawn_pusher(ctx.clone(), t, interval, pushed.clone())
        })
        .transpose()?;
    let Some(opts) = opts else {
        let summary = recorder
            .join()
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"));
        pushed.store(true, Ordering::Relaxed);
        if let Some(p) = pusher {
            let _ = p.join();
        }
        return Ok(summary??);
    };
    let runtime = runtime()?;
    // Serve until the recording ends (duration, Ctrl-C, the command's exit): the server and
    // the recorder share the process, and the finished file can be served by `causeway mcp`.
    let done = Arc::new(tokio::sync::Notify::new());
    let watcher = {
        let done = done.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = recorder.join();
            stop.store(true, Ordering::Relaxed);
            done.notify_one();
            r
        })
    };
    let served = runtime.block_on(serve_http(ctx, opts, what, {
        let done = done.clone();
        async move { done.notified().await }
    }));
    stop.store(true, Ordering::Relaxed);
    let summary = watcher
        .join()
        .and_then(|r| r)
        .map_err(|_| anyhow::anyhow!("the recording thread panicked"))??;
    pushed.store(true, Ordering::Relaxed);
    if let Some(p) = pusher {
        let _ = p.join();
    }
    served?;
    Ok(summary)
}
