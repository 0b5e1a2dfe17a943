//! Integration tests of the collector against the real kernel: stand-in CUDA libraries built
//! from C at test time, traced with `run_trace`, and the resulting DuckDB store queried.
//!
//! They need root (CI runs as root). Not root: they fail with a message, unless
//! CAUSEWAY_SKIP_BPF_TESTS=1 is set explicitly. Traces run one at a time (timing assertions).

mod calls;
mod discovery;
mod kernels;
mod lifecycle;
mod mapped;
mod memory;
mod net;
mod nvtx;
mod overhead;
mod overrun;
mod placement;
mod python;
mod real_runtime;
mod sched;
mod stacks;
mod standin;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use causeway_collector::{TraceArgs, TraceSummary, run_trace};

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the one-trace-at-a-time lock, or returns None when BPF tests are explicitly skipped.
pub fn bpf_test() -> Option<MutexGuard<'static, ()>> {
    if std::env::var("CAUSEWAY_SKIP_BPF_TESTS").as_deref() == Ok("1") {
        eprintln!("CAUSEWAY_SKIP_BPF_TESTS=1: skipping a test that needs root and BPF");
        return None;
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests load BPF programs and need root (CI runs as root); run them with sudo, \
         or set CAUSEWAY_SKIP_BPF_TESTS=1 to skip them explicitly"
    );
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Trace arguments for `-- COMMAND` with the defaults of the CLI.
pub fn args(db: &Path, command: &[&str]) -> TraceArgs {
    let mut a = TraceArgs::with_db(db.to_path_buf());
    a.duration = Some(Duration::from_secs(60));
    a.node = Some("test".into());
    a.ringbuf_size = 8 << 20;
    a.command = command.iter().map(|s| s.to_string()).collect();
    a
}

/// Runs a trace and returns its summary.
pub fn trace(args: &TraceArgs) -> TraceSummary {
    let s = run_trace(args).unwrap_or_else(|e| panic!("trace failed: {e}"));
    eprintln!("summary: {}", serde_json::to_string(&s).unwrap());
    s
}

/// A fresh store path in a temporary directory.
pub fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("t.duckdb")
}

/// Opens a finished store read-only.
pub fn open(db: &Path) -> duckdb::Connection {
    let cfg = duckdb::Config::default()
        .access_mode(duckdb::AccessMode::ReadOnly)
        .unwrap();
    duckdb::Connection::open_with_flags(db, cfg).unwrap()
}

/// One integer from a query.
pub fn q(db: &Path, sql: &str) -> i64 {
    open(db)
        .query_row(sql, [], |r| r.get::<_, i64>(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Rows of integers from a query.
pub fn rows(db: &Path, sql: &str, cols: usize) -> Vec<Vec<i64>> {
    let c = open(db);
    let mut st = c.prepare(sql).unwrap();
    st.query_map([], |r| {
        (0..cols)
            .map(|i| r.get::<_, i64>(i))
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// Events stored for `op` (by name) and the kernel's count of its calls.
pub fn op_totals(db: &Path, op: &str) -> (i64, i64) {
    op_totals_of(db, op, None)
}

/// `op_totals` of one process (`Some(pid)`) or of all of them.
pub fn op_totals_of(db: &Path, op: &str, pid: Option<u32>) -> (i64, i64) {
    let only = pid.map(|p| format!(" AND pid = {p}")).unwrap_or_default();
    let events = q(
        db,
        &format!("SELECT count(*) FROM events WHERE op = '{op}'{only}"),
    );
    let counted = q(
        db,
        &format!(
            "SELECT coalesce(sum(calls), 0)::BIGINT FROM op_counts JOIN ops USING (op_id) \
             WHERE ops.op = '{op}'{only}"
        ),
    );
    (events, counted)
}

/// Return codes of `op`'s stored events, in time order.
pub fn ret_codes(db: &Path, op: &str) -> Vec<i64> {
    rows(
        db,
        &format!("SELECT ret_code FROM events WHERE op = '{op}' ORDER BY timestamp"),
        1,
    )
    .into_iter()
    .map(|r| r[0])
    .collect()
}

/// The pid of the traced command (the process that exec'd the workload).
pub fn command_pid(db: &Path) -> i64 {
    q(
        db,
        "SELECT min(pid) FROM events WHERE op = 'process_exit' OR op = 'cudaLaunchKernel' OR op = 'cudaDeviceSynchronize'",
    )
}
