//! The rows the store's writers append: events, processes, stack frames, kernel-side counts
//! and histograms, sessions. The recorder, the importer and the cluster store build these, and
//! each table with more than one writer is appended to by one function here.

use std::path::Path;

use duckdb::{Connection, params};

use crate::error::{DuckContext, Result};

/// One event, as the collector and the importer produce it. See `ops` for arg meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// ns since the Unix epoch.
    pub timestamp: i64,
    /// ns.
    pub duration: i64,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// Catalogue op id (`catalog::OPS`).
    pub op_id: u16,
    /// Op-specific argument 0.
    pub arg0: i64,
    /// Op-specific argument 1.
    pub arg1: i64,
    /// Return code (0 = success).
    pub ret_code: i32,
    /// CUDA device ordinal.
    pub gpu_id: i16,
    /// Stack id (0 = none).
    pub stack_hash: i64,
    /// cgroup id.
    pub cgroup_id: u64,
    /// Distributed rank, when known.
    pub rank: Option<i32>,
}

/// A process seen while tracing.
#[derive(Debug, Clone, Default)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Process name.
    pub comm: String,
    /// Command line.
    pub cmdline: String,
    /// First time seen (ns).
    pub first_seen_ns: i64,
    /// Last time seen (ns).
    pub last_seen_ns: i64,
    /// torchrun RANK.
    pub rank: Option<i32>,
    /// torchrun LOCAL_RANK.
    pub local_rank: Option<i32>,
    /// torchrun WORLD_SIZE.
    pub world_size: Option<i32>,
    /// Cluster id.
    pub cluster: String,
    /// cgroup (v2) id when first seen (0 = unknown).
    pub cgroup_id: u64,
    /// CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, as 'NAME=value; ...'.
    pub gpu_visible: String,
    /// NVIDIA device files open, e.g. 'nvidia0,nvidia3'.
    pub gpu_devices: String,
    /// The memory limit it ran under, bytes (its memory cgroup's or an ancestor's, the
    /// smallest; 0 = none or unknown).
    pub memory_limit: u64,
}

/// The CPython frames of one call stack (`python_stacks`, `python_frames`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PythonStack {
    /// The calling thread.
    pub tid: u32,
    /// ok, truncated, no_thread, rejected or unreadable.
    pub status: &'static str,
    /// Innermost first.
    pub frames: Vec<PythonFrame>,
}

/// One CPython frame: where the calling thread's Python code was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PythonFrame {
    /// Source file (`co_filename`).
    pub file: String,
    /// Qualified function name (`co_qualname`; 3.10: `co_name`).
    pub function: String,
    /// Source line, 0 when the instruction has none.
    pub line: u32,
    /// The outermost frame of one C-level call of the interpreter's eval loop: the frames up to
    /// it run inside one `_PyEval_EvalFrameDefault` native frame.
    pub entry: bool,
}

/// One frame of a call stack.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// Instruction pointer.
    pub ip: u64,
    /// Symbol (with +offset), empty if unresolved.
    pub symbol: String,
    /// File the frame is in.
    pub module: String,
    /// Offset within the symbol.
    pub offset: u64,
}

/// Kernel-side call counts for one (pid, op) and window.
#[derive(Debug, Clone, Default)]
pub struct OpCount {
    /// Process id.
    pub pid: u32,
    /// Op id.
    pub op_id: u16,
    /// Window start (ns).
    pub window_start_ns: i64,
    /// Window end (ns).
    pub window_end_ns: i64,
    /// Calls counted.
    pub calls: u64,
    /// Calls stored as rows.
    pub stored: u64,
    /// Sum of durations (ns).
    pub total_ns: u64,
    /// Sum of bytes.
    pub bytes: u64,
}

/// One bucket of a kernel-side log2 histogram.
#[derive(Debug, Clone, Default)]
pub struct HistogramBucket {
    /// Process id.
    pub pid: u32,
    /// Op id.
    pub op_id: u16,
    /// Window start (ns).
    pub window_start_ns: i64,
    /// Window end (ns).
    pub window_end_ns: i64,
    /// log2 of the lower bound in ns.
    pub log2_bucket: u8,
    /// Calls in the bucket.
    pub count: u64,
}

/// Host facts of one recording.
#[derive(Debug, Clone, Default)]
pub struct SessionInfo {
    /// Recording start (ns).
    pub started_ns: i64,
    /// Host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// OS release.
    pub os_release: String,
    /// CPU model.
    pub cpu_model: String,
    /// Logical CPUs.
    pub cpu_cores: i32,
    /// Memory in MiB.
    pub mem_total_mb: i64,
    /// GPU model(s).
    pub gpu_model: String,
    /// NVIDIA driver version.
    pub gpu_driver: String,
    /// CUDA version.
    pub cuda_version: String,
    /// Python version of the traced job, if known.
    pub python_version: String,
    /// Version of the recorder.
    pub tool_version: String,
    /// Pids traced.
    pub pid_filter: String,
    /// Recorder flags.
    pub flags: String,
    /// Rank of the job on this node, when known.
    pub rank: Option<i32>,
    /// Local rank.
    pub local_rank: Option<i32>,
    /// World size.
    pub world_size: Option<i32>,
    /// 'recorded' or 'imported:<file>'.
    pub origin: String,
}

/// One stored causal chain: a finding as the `chains` table keeps it (the engine's or one
/// imported from a reference trace).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainRow {
    /// Chain id, unique per node.
    pub chain_id: String,
    /// Node the chain is about.
    pub node: String,
    /// Detector that found it.
    pub detector: String,
    /// When it was detected (ns).
    pub detected_ns: i64,
    /// HIGH, MEDIUM or LOW.
    pub severity: String,
    /// One-line summary.
    pub summary: String,
    /// Root cause.
    pub root_cause: String,
    /// Explanation.
    pub explanation: String,
    /// JSON array of strings.
    pub recommendations: String,
    /// JSON array of {layer, op, detail, duration_ns}.
    pub timeline: String,
    /// SQL that returns the evidence rows.
    pub evidence_sql: String,
    /// Time lost (ns).
    pub time_lost_ns: i64,
    /// The GPU op it is about, if one.
    pub cuda_op: String,
    /// p50 of that op (ns).
    pub p50_ns: i64,
    /// p99 of that op (ns).
    pub p99_ns: i64,
    /// p99 / p50.
    pub tail_ratio: f64,
    /// 'engine', 'collected' or 'imported:<file>'.
    pub origin: String,
}

/// A recording session as stored: its number and node beside the host facts.
#[derive(Debug, Clone, Default)]
pub struct SessionRow {
    /// Session number, unique per node.
    pub session_id: i64,
    /// Node it recorded.
    pub node: String,
    /// When it stopped (ns; 0 while running).
    pub stopped_ns: i64,
    /// The host facts.
    pub info: SessionInfo,
}

/// One periodic host snapshot (CPU, memory, load).
#[derive(Debug, Clone, Default)]
pub struct SystemSnapshot {
    /// When (ns).
    pub ts_ns: i64,
    /// CPU busy (%).
    pub cpu_pct: f64,
    /// Memory used (%).
    pub mem_pct: f64,
    /// Memory available (MiB).
    pub mem_avail_mb: i64,
    /// Swap used (MiB).
    pub swap_mb: i64,
    /// 1-minute load average.
    pub load_avg: f64,
}

/// What a cgroup is: its container and pod, where known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupInfo {
    /// Kernel cgroup id.
    pub cgroup_id: u64,
    /// Container id.
    pub container_id: String,
    /// cgroup path.
    pub cgroup_path: String,
    /// Pod name.
    pub pod_name: String,
    /// Namespace.
    pub namespace: String,
    /// Container runtime named by the path (containerd, cri-o, docker, podman, kubernetes,
    /// systemd) or ''.
    pub runtime: String,
    /// Pod uid from the path.
    pub pod_uid: String,
    /// Container name within the pod.
    pub container_name: String,
    /// Why pod metadata is missing, when it is.
    pub note: String,
}

/// Off-CPU time of one cgroup over one window.
#[derive(Debug, Clone, Default)]
pub struct CgroupSchedstat {
    /// Kernel cgroup id.
    pub cgroup_id: u64,
    /// Window start (ns).
    pub window_start_ns: i64,
    /// Window end (ns).
    pub window_end_ns: i64,
    /// p99 off-CPU time (ns).
    pub p99_off_cpu_ns: i64,
    /// Total off-CPU time (ns).
    pub total_off_cpu_ns: i64,
    /// Events counted.
    pub events: i64,
}

/// What a chain insert does with a chain id its node already has.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnConflict {
    /// Keep the stored chain (imports: the first file wins).
    Keep,
    /// Replace it (collect: a sender's newer view of the same finding).
    Replace,
}

/// Stores chains, each under its own node, with `origin` instead of theirs when given.
pub(crate) fn insert_chains(
    conn: &Connection,
    path: &Path,
    chains: &[ChainRow],
    conflict: OnConflict,
    origin: Option<&str>,
) -> Result<()> {
    let verb = match conflict {
        OnConflict::Keep => "INSERT",
        OnConflict::Replace => "INSERT OR REPLACE",
    };
    let tail = match conflict {
        OnConflict::Keep => " ON CONFLICT DO NOTHING",
        OnConflict::Replace => "",
    };
    let mut ins = conn
        .prepare(&format!(
            "{verb} INTO chains VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){tail}"
        ))
        .ctx(path, "preparing chain inserts")?;
    for c in chains {
        ins.execute(params![
            c.chain_id,
            c.node,
            c.detector,
            c.detected_ns,
            c.severity,
            c.summary,
            c.root_cause,
            c.explanation,
            c.recommendations,
            c.timeline,
            c.evidence_sql,
            c.time_lost_ns,
            c.cuda_op,
            c.p50_ns,
            c.p99_ns,
            c.tail_ratio,
            origin.unwrap_or(&c.origin)
        ])
        .ctx(path, "writing chains")?;
    }
    Ok(())
}

/// Inserts or updates cgroups of `node`: a stored cgroup keeps what it had where the new row
/// knows less (pod names arrive after the container id, or never); the note is the latest.
pub(crate) fn upsert_cgroups(
    conn: &Connection,
    path: &Path,
    node: &str,
    rows: &[CgroupInfo],
) -> Result<()> {
    let mut ins = conn
        .prepare(
            "INSERT INTO cgroups (node, cgroup_id, container_id, cgroup_path, pod_name, namespace,
                                     runtime, pod_uid, container_name, note)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (node, cgroup_id) DO UPDATE SET
                   container_id = CASE WHEN excluded.container_id = '' THEN cgroups.container_id ELSE excluded.container_id END,
                   cgroup_path = CASE WHEN excluded.cgroup_path = '' THEN cgroups.cgroup_path ELSE excluded.cgroup_path END,
                   pod_name = CASE WHEN excluded.pod_name = '' THEN cgroups.pod_name ELSE excluded.pod_name END,
                   namespace = CASE WHEN excluded.namespace = '' THEN cgroups.namespace ELSE excluded.namespace END,
                   runtime = CASE WHEN excluded.runtime = '' THEN cgroups.runtime ELSE excluded.runtime END,
                   pod_uid = CASE WHEN excluded.pod_uid = '' THEN cgroups.pod_uid ELSE excluded.pod_uid END,
                   container_name = CASE WHEN excluded.container_name = '' THEN cgroups.container_name ELSE excluded.container_name END,
                   note = excluded.note",
        )
        .ctx(path, "preparing cgroup inserts")?;
    for r in rows {
        ins.execute(params![
            node,
            r.cgroup_id,
            r.container_id,
            r.cgroup_path,
            r.pod_name,
            r.namespace,
            r.runtime,
            r.pod_uid,
            r.container_name,
            r.note
        ])
        .ctx(path, "writing cgroups")?;
    }
    Ok(())
}

/// Appends kernel-side call counts, each with its node (the recorder's, an imported file's or
/// a sending agent's).
pub(crate) fn append_op_counts<'a>(
    conn: &Connection,
    path: &Path,
    rows: impl IntoIterator<Item = (&'a str, &'a OpCount)>,
) -> Result<()> {
    let mut app = conn
        .appender("op_counts")
        .ctx(path, "opening the op_counts appender")?;
    for (node, r) in rows {
        app.append_row(params![
            node,
            r.pid,
            r.op_id,
            r.window_start_ns,
            r.window_end_ns,
            r.calls,
            r.stored,
            r.total_ns,
            r.bytes
        ])
        .ctx(path, "recording op counts")?;
    }
    app.flush().ctx(path, "flushing op counts")
}

/// Appends buckets of kernel-side log2 histograms, each with its node.
pub(crate) fn append_histograms<'a>(
    conn: &Connection,
    path: &Path,
    rows: impl IntoIterator<Item = (&'a str, &'a HistogramBucket)>,
) -> Result<()> {
    let mut app = conn
        .appender("op_histograms")
        .ctx(path, "opening the op_histograms appender")?;
    for (node, r) in rows {
        app.append_row(params![
            node,
            r.pid,
            r.op_id,
            r.window_start_ns,
            r.window_end_ns,
            r.log2_bucket,
            r.count
        ])
        .ctx(path, "recording a histogram")?;
    }
    app.flush().ctx(path, "flushing histograms")
}

/// Inserts or updates the process row of `node` (names and last_seen move forward; unknown
/// fields keep what was stored).
pub(crate) fn upsert_process(
    conn: &Connection,
    path: &Path,
    node: &str,
    p: &ProcessInfo,
) -> Result<()> {
    conn.execute(
        "INSERT INTO processes (node, pid, ppid, comm, cmdline, first_seen_ns, last_seen_ns, rank,
                                local_rank, world_size, cluster, cgroup_id, gpu_visible, gpu_devices,
                                memory_limit)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (node, pid) DO UPDATE SET
           ppid = CASE WHEN excluded.ppid = 0 THEN processes.ppid ELSE excluded.ppid END,
           comm = CASE WHEN excluded.comm = '' THEN processes.comm ELSE excluded.comm END,
           cmdline = CASE WHEN excluded.cmdline = '' THEN processes.cmdline ELSE excluded.cmdline END,
           first_seen_ns = least(processes.first_seen_ns, excluded.first_seen_ns),
           last_seen_ns = greatest(processes.last_seen_ns, excluded.last_seen_ns),
           rank = coalesce(excluded.rank, processes.rank),
           local_rank = coalesce(excluded.local_rank, processes.local_rank),
           world_size = coalesce(excluded.world_size, processes.world_size),
           cluster = CASE WHEN excluded.cluster = '' THEN processes.cluster ELSE excluded.cluster END,
           cgroup_id = CASE WHEN excluded.cgroup_id = 0 THEN processes.cgroup_id ELSE excluded.cgroup_id END,
           gpu_visible = CASE WHEN excluded.gpu_visible = '' THEN processes.gpu_visible ELSE excluded.gpu_visible END,
           gpu_devices = CASE WHEN excluded.gpu_devices = '' THEN processes.gpu_devices ELSE excluded.gpu_devices END,
           memory_limit = CASE WHEN excluded.memory_limit = 0 THEN processes.memory_limit ELSE excluded.memory_limit END",
        params![
            node,
            p.pid,
            p.ppid,
            p.comm,
            p.cmdline,
            p.first_seen_ns,
            p.last_seen_ns,
            p.rank,
            p.local_rank,
            p.world_size,
            p.cluster,
            p.cgroup_id,
            p.gpu_visible,
            p.gpu_devices,
            p.memory_limit
        ],
    )
    .ctx(path, "recording a process")?;
    // The node belongs to the cluster (job) its traced processes name, unless one was set.
    if !p.cluster.is_empty() {
        conn.execute(
            "UPDATE nodes SET cluster = ? WHERE node = ? AND cluster = ''",
            params![p.cluster, node],
        )
        .ctx(path, "recording the node's cluster")?;
    }
    Ok(())
}
