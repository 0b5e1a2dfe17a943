//! Creates the store's schema and documents every table and column for people and agents.

use duckdb::{Connection, params};

use crate::catalog::{OPS, Source};

/// Version written into `meta.schema_version`; bump with every file in `MIGRATIONS`.
/// 2: event rows moved to `event_rows` with `node_id` and `comm_id` (interned in `nodes` and
/// `comms`), `event_data` became a view with the version-1 columns, and the overhead
/// controller's tables (002_overhead.sql) were added.
/// 3: `metric_points` and `log_records` for what `causeway collect` receives over OTLP
/// (003_collected.sql).
/// 4: `probe_sampling`, what the estimated counts of sampled ops rest on (004_sampled.sql).
/// 5: `probe_in_situ`, the cost of sampled ops' probes measured on the job (005_in_situ.sql).
/// 6: `probe_sampling.switching_ns`, the detached time spent attaching or detaching the links
/// (006_switching.sql).
/// 7: `library_attach`, when tracing began for each process and library, and `kernels` with the
/// `kernel_launches` view (007_attach_kernels.sql).
/// 8: `tasks`, the names of tasks that are not traced but took a traced thread's CPU
/// (008_tasks.sql).
/// 9: where processes run: `processes.cgroup_id`, `gpu_visible`, `gpu_devices`, and the
/// container runtime, pod uid, container name and a note in `cgroups` (009_placement.sql).
/// 10: `python_stacks` and `python_frames`, the CPython frames of call stacks (010_python.sql).
/// 11: `processes.memory_limit`, the memory limit each process ran under (011_memory.sql).
/// 12: `python_frames.entry`, the Python frames a native caller entered (012_python_entry.sql).
/// 13: `gpu_activity`, `ranges`, `steps` and `correlations`, what a profiler recorded beside the
/// host's calls (013_device.sql).
pub const SCHEMA_VERSION: u32 = 13;

/// The oldest version this build reads: the event layout of version 2. Version-1 files are
/// refused with a hint to import or record them again.
pub const MIN_VERSION: u32 = 2;

/// The version-1 schema DDL (tables and views).
pub const SCHEMA_SQL: &str = include_str!("../sql/001_schema.sql");

/// Additive changes on top of 001: (version it brings a file to, DDL). New files get all of
/// them; `upgrade` applies the missing ones to an older (but readable) file opened for writing.
pub const MIGRATIONS: &[(u32, &str)] = &[
    (2, include_str!("../sql/002_overhead.sql")),
    (3, include_str!("../sql/003_collected.sql")),
    (4, include_str!("../sql/004_sampled.sql")),
    (5, include_str!("../sql/005_in_situ.sql")),
    (6, include_str!("../sql/006_switching.sql")),
    (7, include_str!("../sql/007_attach_kernels.sql")),
    (8, include_str!("../sql/008_tasks.sql")),
    (9, include_str!("../sql/009_placement.sql")),
    (10, include_str!("../sql/010_python.sql")),
    (11, include_str!("../sql/011_memory.sql")),
    (12, include_str!("../sql/012_python_entry.sql")),
    (13, include_str!("../sql/013_device.sql")),
];

/// Every relation of a store: what the SQL guard allows a query to read. The physical
/// `event_rows` and `comms` behind `event_data` are left out: they hold ids, not names.
pub const RELATIONS: &[&str] = &include!("relations.in");

/// (table, column, unit, meaning) for every column an agent is likely to query.
pub const COLUMN_DOCS: &[(&str, &str, &str, &str)] = &[
    ("events", "id", "", "unique event id '<node>:<seq>'"),
    (
        "events",
        "seq",
        "",
        "per-node sequence number, in recording order",
    ),
    (
        "events",
        "timestamp",
        "ns since Unix epoch",
        "when the call was entered / the event happened (sched_switch: switch-out)",
    ),
    (
        "events",
        "duration",
        "ns",
        "see ops.duration_meaning: call duration, off-CPU time, I/O latency",
    ),
    ("events", "pid", "", "process id (tgid) on its node"),
    ("events", "tid", "", "thread id"),
    (
        "events",
        "comm",
        "",
        "thread name at the time (data from the traced machine)",
    ),
    ("events", "node", "", "machine the event was recorded on"),
    (
        "events",
        "source",
        "",
        "CUDA, DRIVER, HOST, IO, TCP, NET, GRAPH, NCCL (see sources)",
    ),
    (
        "events",
        "op",
        "",
        "operation name, e.g. cudaLaunchKernel, sched_switch (see ops)",
    ),
    ("events", "op_id", "", "numeric op id (join key to ops)"),
    (
        "events",
        "arg0",
        "",
        "op-specific, see ops.arg0_meaning (bytes for memcpy/alloc, next pid for sched_switch)",
    ),
    (
        "events",
        "arg1",
        "",
        "op-specific, see ops.arg1_meaning (copy direction, preempted(0)/blocked(1))",
    ),
    (
        "events",
        "ret_code",
        "",
        "return code of the call (0 = success); 0 for host events",
    ),
    (
        "events",
        "gpu_id",
        "",
        "CUDA device ordinal when known, else 0",
    ),
    (
        "events",
        "stack_hash",
        "",
        "call stack id, join stack_frames/stacks on stack_hash; 0 = none",
    ),
    (
        "events",
        "cgroup_id",
        "",
        "cgroup of the thread; join cgroups for container/pod",
    ),
    (
        "events",
        "rank",
        "",
        "distributed rank of the process (torchrun RANK) when known",
    ),
    ("ops", "op", "", "operation name used in events.op"),
    (
        "ops",
        "duration_meaning",
        "",
        "what events.duration measures for this op",
    ),
    (
        "ops",
        "arg0_meaning",
        "",
        "what events.arg0 holds for this op",
    ),
    (
        "ops",
        "arg1_meaning",
        "",
        "what events.arg1 holds for this op",
    ),
    (
        "ops",
        "reference_name",
        "",
        "name used by the reference tool, where different",
    ),
    (
        "processes",
        "comm",
        "",
        "process name (data from the traced machine)",
    ),
    (
        "processes",
        "cmdline",
        "",
        "command line (data from the traced machine)",
    ),
    (
        "processes",
        "cgroup_id",
        "",
        "the process's cgroup (v2) when first seen; join cgroups on node, cgroup_id for its container and pod",
    ),
    (
        "processes",
        "gpu_visible",
        "",
        "CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES of the process, as 'NAME=value; ...' ('' = unset)",
    ),
    (
        "processes",
        "gpu_devices",
        "",
        "NVIDIA device files the process had open when first seen, e.g. 'nvidia0,nvidia3'",
    ),
    (
        "processes",
        "memory_limit",
        "bytes",
        "the memory limit the process ran under when first seen: its memory cgroup's or an ancestor's, the smallest (0 = none or unknown); a process at its limit reclaims memory itself (mm_reclaim events, arg1 = 1)",
    ),
    (
        "cgroups",
        "runtime",
        "",
        "containerd, cri-o, docker, podman, kubernetes (runtime not in the path), systemd or '' (plain cgroup)",
    ),
    (
        "cgroups",
        "container_id",
        "",
        "container id from the cgroup path (64 hex digits), '' when not a container",
    ),
    (
        "cgroups",
        "pod_uid",
        "",
        "Kubernetes pod uid from the cgroup path",
    ),
    (
        "cgroups",
        "pod_name",
        "",
        "pod name from the kubelet or API server ('' when not asked or not known: see note)",
    ),
    (
        "cgroups",
        "container_name",
        "",
        "container name within the pod, from the kubelet or API server",
    ),
    (
        "cgroups",
        "note",
        "",
        "why pod metadata is missing, when it is (unreachable, refused, malformed answer)",
    ),
    ("stack_frames", "depth", "", "0 = innermost frame"),
    (
        "python_stacks",
        "status",
        "",
        "how the calling thread's CPython frames were walked: ok, truncated (deeper than 32 frames: the outermost are cut), partial (a frame could not be read: the ones inside it are kept), no_thread (the thread's interpreter state was not found: none recorded), rejected (a recorded frame did not read as a code object: none kept), unreadable (the process was gone)",
    ),
    (
        "python_frames",
        "depth",
        "",
        "0 = innermost Python frame (the one that made the call); join stack_frames on stack_hash for the native frames",
    ),
    (
        "python_frames",
        "function",
        "",
        "qualified function name (co_qualname; CPython 3.10: co_name) (data from the traced machine)",
    ),
    (
        "python_frames",
        "line",
        "",
        "source line being run in that frame, 0 when the instruction has none",
    ),
    (
        "python_frames",
        "entry",
        "",
        "true: the outermost frame of one C-level eval call (it runs inside the next _PyEval_EvalFrameDefault frame of stack_frames); NULL before schema 12",
    ),
    (
        "stack_frames",
        "symbol",
        "",
        "resolved symbol as the file names it (mangled for C++, for exact matching; get_stacks shows it demangled), with +offset; empty when unresolved",
    ),
    (
        "stack_frames",
        "module",
        "",
        "file the frame is in (libcudart.so.12, _C.so, ...)",
    ),
    ("chains", "severity", "", "HIGH, MEDIUM or LOW"),
    (
        "chains",
        "time_lost_ns",
        "ns",
        "estimated time the workload lost to this cause (ranking key)",
    ),
    ("chains", "recommendations", "", "JSON array of strings"),
    (
        "chains",
        "timeline",
        "",
        "JSON array of {layer, op, detail, duration_ns}",
    ),
    (
        "chains",
        "evidence_sql",
        "",
        "a query that shows the rows behind the chain",
    ),
    (
        "op_counts",
        "calls",
        "",
        "calls in the window, counted in the kernel (exact, includes unstored calls); for an op in sampled probe mode an estimate, see probe_sampling",
    ),
    ("op_counts", "stored", "", "calls with a row in event_data"),
    (
        "op_counts",
        "total_ns",
        "ns",
        "sum of durations of all counted calls",
    ),
    (
        "op_histograms",
        "log2_bucket",
        "",
        "bucket b counts calls with 2^b <= duration_ns < 2^(b+1)",
    ),
    (
        "drops",
        "kind",
        "",
        "ringbuf_full, channel_full, write_failed, sampled, import_skipped (imported calls whose op is not in the catalogue), import_invalid",
    ),
    ("drops", "count", "", "events lost of this kind"),
    (
        "sessions",
        "started_ns",
        "ns since Unix epoch",
        "recording start",
    ),
    (
        "sessions",
        "stopped_ns",
        "ns since Unix epoch",
        "recording end (0 if the recorder died)",
    ),
    (
        "nodes",
        "node_id",
        "",
        "small number standing for the node in the stored event rows",
    ),
    (
        "nodes",
        "clock_offset_ns",
        "ns",
        "estimated clock offset to the reference node; NULL when unknown",
    ),
    (
        "system_snapshots",
        "cpu_pct",
        "%",
        "host CPU utilisation at the sample",
    ),
    (
        "system_snapshots",
        "mem_avail_mb",
        "MiB",
        "available host memory",
    ),
    (
        "cgroup_schedstat",
        "total_off_cpu_ns",
        "ns",
        "off-CPU time of the cgroup's threads in the window",
    ),
    (
        "probe_costs",
        "mode",
        "",
        "full, aggregate, entry_only (causeway's probes) or bare_pair, bare_entry (empty probes)",
    ),
    (
        "probe_costs",
        "first_insn",
        "",
        "first instruction of the probed function: push, nop (emulated), endbr64, other (single-stepped on most kernels)",
    ),
    (
        "probe_costs",
        "ns_per_call",
        "ns",
        "time a probed call costs the traced thread in that mode, calibrated at trace start",
    ),
    (
        "probe_modes",
        "mode",
        "",
        "full (events), aggregate (histograms only), entry_only (counts only, no durations), sampled (full, with the probes attached part of the time: counts estimated)",
    ),
    (
        "probe_modes",
        "reason",
        "",
        "forced (--probe-mode), over_budget, under_budget (--overhead-budget), in_situ_check (sampled for a while to measure its cost on the job), checked (back after that check)",
    ),
    (
        "probe_modes",
        "overhead_pct",
        "%",
        "estimated probe overhead of the worst traced process when the mode changed",
    ),
    (
        "probe_overhead",
        "cpu_ns",
        "ns",
        "CPU time (user + system) of the process in the window",
    ),
    (
        "probe_overhead",
        "probe_ns",
        "ns",
        "estimated time spent in causeway's probes in the window (calls x cost of the mode)",
    ),
    (
        "probe_overhead",
        "calls",
        "",
        "probe hits in the window: calls counted (sampled ops: while attached), and driver calls the CUDA runtime made itself (they trap, but are not calls)",
    ),
    (
        "probe_overhead",
        "budget_pct",
        "%",
        "the --overhead-budget in force",
    ),
    (
        "kernels",
        "address",
        "",
        "what the process's launches pass as events.arg0 (cudaLaunchKernel's host stub or CUDA 13 handle, cuLaunchKernel's CUfunction): join on node, pid, address, or read kernel_launches",
    ),
    (
        "kernels",
        "name",
        "",
        "the kernel's demangled name without parameters (at::native::vectorized_elementwise_kernel<4, ...>); symbol has the raw one",
    ),
    (
        "kernel_launches",
        "kernel",
        "",
        "the launched kernel's name (kernels.name): launch events (cudaLaunchKernel, cuLaunchKernel, cuLaunchKernelEx) whose kernel was named",
    ),
    (
        "tasks",
        "tid",
        "",
        "a task that is not traced and took a traced thread's CPU: join sched_switch events' arg0 (the task that ran next) on node and tid for its name and process",
    ),
    (
        "library_attach",
        "how",
        "",
        "how tracing began for this process and library: before_start (attached before the command started), held (the process was stopped from its mapping until attached), hold_timeout (held, then let go before the attach), mapped (attached when the mapping was seen, not held), rescan (found by the periodic rescan), running (mapped by a process already running when the trace began)",
    ),
    (
        "library_attach",
        "attached_ns",
        "ns",
        "when the library's probes were attached: calls of pid into it before are not in the trace",
    ),
    (
        "library_attach",
        "complete",
        "",
        "true when no call of pid into the library can be missing before attached_ns",
    ),
    (
        "probe_sampling",
        "observed_ns",
        "ns",
        "time the op's probes were attached in the window; op_counts.calls = calls counted x (observed_ns + switching_ns + (detached time - switching_ns) x speedup) / observed_ns, speedup = the process's detached / attached progress rate once measured (as in probe_in_situ; its first rows wait up to 20 s for it), else 1",
    ),
    (
        "probe_sampling",
        "switching_ns",
        "ns",
        "part of the detached time spent attaching or detaching the op's links, when its probes still slow the process though no call is counted: estimated at the attached rate (0 in files older than schema 6)",
    ),
    (
        "probe_sampling",
        "counted",
        "",
        "calls the kernel counted while the probes were attached (all processes)",
    ),
    (
        "probe_in_situ",
        "pid",
        "",
        "the process measured: the one with the most probe hits of the op while attached",
    ),
    (
        "probe_in_situ",
        "attached_rate",
        "1/s",
        "the process's progress (calls of its ops not sampled) per second while the op's probes were attached",
    ),
    (
        "probe_in_situ",
        "detached_rate",
        "1/s",
        "the same while they were detached",
    ),
    (
        "probe_in_situ",
        "slowdown",
        "",
        "share of the progress lost while attached: 1 - attached_rate / detached_rate (cumulative since the op was first sampled; the last row per op is the best)",
    ),
    (
        "probe_in_situ",
        "slowdown_se",
        "",
        "standard error of slowdown, from the spread of the segments between switches",
    ),
    (
        "probe_in_situ",
        "lost_ns_per_hit",
        "ns",
        "time the job lost per probe hit of the op: slowdown x attached_ns / hits",
    ),
    (
        "probe_in_situ",
        "calibrated_ns_per_hit",
        "ns",
        "the calibrated full-mode cost per call of the op (probe_costs)",
    ),
    (
        "probe_in_situ",
        "factor",
        "",
        "what the overhead controller scales the op's calibrated costs by: (slowdown - 2 x slowdown_se) x attached_ns / hits / calibrated, when above 1, else 1",
    ),
    (
        "metric_points",
        "node",
        "",
        "causeway.node of the sending resource, else host.name, else service.name",
    ),
    (
        "metric_points",
        "resource",
        "",
        "resource attributes of the sender, JSON object (data from the sending machine)",
    ),
    (
        "metric_points",
        "kind",
        "",
        "gauge, sum, histogram, exponential_histogram or summary",
    ),
    (
        "metric_points",
        "temporality",
        "",
        "cumulative (value since start_ns) or delta (value in [start_ns, time_ns]); '' for gauges",
    ),
    (
        "metric_points",
        "attributes",
        "",
        "data point attributes, JSON object",
    ),
    (
        "metric_points",
        "start_ns",
        "ns since Unix epoch",
        "start of the interval the point covers (0 when not sent)",
    ),
    (
        "metric_points",
        "time_ns",
        "ns since Unix epoch",
        "time of the point",
    ),
    (
        "metric_points",
        "value",
        "metric_points.unit",
        "value of a gauge or sum point",
    ),
    (
        "metric_points",
        "bucket_counts",
        "",
        "histogram bucket counts; bucket i holds values <= bounds[i] (1-based lists: bucket_counts[1])",
    ),
    (
        "metric_points",
        "bounds",
        "metric_points.unit",
        "explicit histogram bounds, or summary quantiles (their values in bucket_values)",
    ),
    (
        "metric_points",
        "received_ns",
        "ns since Unix epoch",
        "when causeway collect received the point",
    ),
    (
        "gpu_activity",
        "pid",
        "",
        "the process that launched it (an imported profiler trace's profiled process)",
    ),
    (
        "gpu_activity",
        "device",
        "",
        "CUDA device ordinal the work ran on",
    ),
    (
        "gpu_activity",
        "stream",
        "",
        "stream id as the source numbers it (Kineto: args.stream)",
    ),
    (
        "gpu_activity",
        "kind",
        "",
        "kernel, memcpy, memset or sync: the device's own timeline (busy while any row is open)",
    ),
    (
        "gpu_activity",
        "name",
        "",
        "kernels: demangled, without return type and parameters (at::native::vectorized_elementwise_kernel<4, ...>); copies and memsets as the source names them (Memcpy HtoD (Pinned -> Device)) (data from the traced machine)",
    ),
    (
        "gpu_activity",
        "raw_name",
        "",
        "the name exactly as the source wrote it, for exact matching",
    ),
    (
        "gpu_activity",
        "start_ns",
        "ns since Unix epoch",
        "when the device started it (measured on the device)",
    ),
    (
        "gpu_activity",
        "end_ns",
        "ns since Unix epoch",
        "when the device finished it",
    ),
    (
        "gpu_activity",
        "bytes",
        "bytes",
        "bytes copied or set; NULL for kernels",
    ),
    (
        "gpu_activity",
        "correlation",
        "",
        "id of the runtime/driver call that launched it: join correlations on node, pid, correlation for the call's events.seq",
    ),
    (
        "ranges",
        "kind",
        "",
        "cpu_op (an operator), user_annotation (record_function), nvtx, python_function",
    ),
    (
        "ranges",
        "name",
        "",
        "the op or annotation, e.g. aten::mm, enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__, Optimizer.step#SGD.step (data from the traced machine)",
    ),
    (
        "ranges",
        "start_ns",
        "ns since Unix epoch",
        "when the range opened",
    ),
    (
        "ranges",
        "end_ns",
        "ns since Unix epoch",
        "when the range closed",
    ),
    (
        "ranges",
        "depth",
        "",
        "nesting on its thread: 0 = outermost, 1 = inside one other range, ...",
    ),
    ("steps", "step", "", "the step's index (ProfilerStep#N: N)"),
    (
        "steps",
        "start_ns",
        "ns since Unix epoch",
        "when the step began",
    ),
    (
        "steps",
        "end_ns",
        "ns since Unix epoch",
        "when the step ended",
    ),
    (
        "steps",
        "source",
        "",
        "profiler (ProfilerStep#N ranges), nvtx (NVTX ranges) or inferred (from the feeding thread's cadence)",
    ),
    (
        "correlations",
        "seq",
        "",
        "events.seq of the runtime/driver call on its node",
    ),
    (
        "correlations",
        "correlation",
        "",
        "the call's correlation id: gpu_activity rows with the same node, pid and correlation are the device work it launched",
    ),
    (
        "log_records",
        "severity_number",
        "",
        "OTLP severity: 9 INFO, 13 WARN, 17 ERROR, 0 unspecified",
    ),
    (
        "log_records",
        "body",
        "",
        "log body: strings as sent, other values as JSON (data from the sending machine)",
    ),
    (
        "log_records",
        "attributes",
        "",
        "log record attributes, JSON object",
    ),
];

/// Creates every table and view and fills the lookup tables. Runs in one transaction.
pub fn create(conn: &Connection) -> duckdb::Result<()> {
    conn.execute_batch("BEGIN TRANSACTION")?;
    let result = create_inner(conn);
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn create_inner(conn: &Connection) -> duckdb::Result<()> {
    conn.execute_batch(SCHEMA_SQL)?;
    for (_, ddl) in MIGRATIONS {
        conn.execute_batch(ddl)?;
    }
    let mut meta = conn.prepare("INSERT INTO meta VALUES (?, ?)")?;
    for (k, v) in [
        ("schema_version", SCHEMA_VERSION.to_string()),
        ("created_by", format!("causeway {}", env!("CARGO_PKG_VERSION"))),
        ("timestamp_unit", "ns since the Unix epoch".to_string()),
        ("duration_unit", "ns".to_string()),
        (
            "example_query",
            "SELECT op, count(*) AS calls, quantile_disc(duration, 0.99) / 1e3 AS p99_us FROM events WHERE source IN ('CUDA', 'DRIVER') GROUP BY op ORDER BY calls DESC".to_string(),
        ),
    ] {
        meta.execute(params![k, v])?;
    }
    let mut src = conn.appender("sources")?;
    for s in Source::ALL {
        src.append_row(params![s.id(), s.name(), s.description()])?;
    }
    src.flush()?;
    let mut op = conn.appender("ops")?;
    for o in OPS {
        op.append_row(params![
            o.id,
            o.source.name(),
            o.name,
            o.description,
            o.duration,
            o.arg0,
            o.arg1,
            o.reference_name
        ])?;
    }
    op.flush()?;
    document_columns(conn)
}

/// Fills `schema_columns` for every column that has no row yet (new files and upgrades).
fn document_columns(conn: &Connection) -> duckdb::Result<()> {
    // The hand-written lines go into a staging table in one append, join the catalog, and go.
    conn.execute_batch(
        "CREATE TABLE _column_docs (table_name VARCHAR, column_name VARCHAR, unit VARCHAR, meaning VARCHAR)",
    )?;
    let mut doc = conn.appender("_column_docs")?;
    for (table, column, unit, meaning) in COLUMN_DOCS {
        doc.append_row(params![table, column, unit, meaning])?;
    }
    doc.flush()?;
    drop(doc);
    // Only what a query may read is listed (RELATIONS are plain names, no quotes); columns
    // without a hand-written line still get a row with their type.
    let readable = RELATIONS
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(", ");
    conn.execute_batch(&format!(
        "INSERT INTO schema_columns
         SELECT c.table_name, c.column_name, c.data_type, coalesce(d.unit, ''), coalesce(d.meaning, '')
         FROM information_schema.columns c
         LEFT JOIN _column_docs d USING (table_name, column_name)
         WHERE c.table_schema = 'main' AND c.table_name IN ({readable})
           AND NOT EXISTS (SELECT 1 FROM schema_columns s
                           WHERE s.table_name = c.table_name AND s.column_name = c.column_name);
         DROP TABLE _column_docs;"
    ))?;
    Ok(())
}

/// Brings a file of schema version `found` up to [`SCHEMA_VERSION`] (additive migrations only),
/// in one transaction. A file already current is left alone.
pub fn upgrade(conn: &Connection, found: u32) -> duckdb::Result<()> {
    if found >= SCHEMA_VERSION {
        return Ok(());
    }
    conn.execute_batch("BEGIN TRANSACTION")?;
    let result = (|| {
        for (version, ddl) in MIGRATIONS {
            if *version > found {
                conn.execute_batch(ddl)?;
            }
        }
        document_columns(conn)?;
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'",
            params![SCHEMA_VERSION.to_string()],
        )?;
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
