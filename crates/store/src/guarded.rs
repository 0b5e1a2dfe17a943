//! Running a query from outside without letting it hold the process: a watchdog that
//! interrupts it at its time limit or when the process's memory passes a ceiling, cancellation
//! by a client that went away, and [`query_detached`], which answers the caller when a query
//! ignores its interrupt (DuckDB checks for interrupts between vectors; a single function call
//! on huge values may not return for minutes) and leaves it to finish on its own thread.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use causeway_sqlguard::GuardedSql;
use duckdb::InterruptHandle;

use crate::error::{Result, StoreError};
use crate::reader::{QueryLimits, QueryResult, Reader};

/// How long after its time limit a query may take to stop before it is abandoned.
pub const ABANDON_GRACE: Duration = Duration::from_millis(750);

/// Abandoned queries that may still run before new ones are refused ([`StoreError::Busy`]).
pub const MAX_ABANDONED: usize = 2;

/// How often the watchdog looks at the clock and the process's memory.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// The stack of the thread a query from outside runs on. DuckDB parses, binds and plans on
/// the calling thread, recursing through CTE chains, subqueries and expressions: Rust's default
/// 2 MiB overflowed and aborted the process. The memory is only reserved until it is touched.
pub const QUERY_STACK_BYTES: usize = 128 << 20;

/// Abandoned queries still running in this process.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// Abandoned queries still running in this process (shown in `/metrics` and logs).
pub fn abandoned_queries() -> usize {
    ABANDONED.load(Ordering::Relaxed)
}

/// Room a query gets above its connections' DuckDB memory limit for what DuckDB allocates
/// outside its buffer manager (vectors of one batch, function state).
pub const OUTSIDE_DUCKDB_LIMIT: u64 = 1 << 30;

/// The memory ceiling for queries on connections limited to `duckdb_limit` bytes: the
/// resident memory the process has now, plus that limit and [`OUTSIDE_DUCKDB_LIMIT`], but at
/// most three quarters of the machine's memory.
pub fn rss_ceiling_for(duckdb_limit: u64) -> u64 {
    let wanted = resident_bytes().unwrap_or(0) + duckdb_limit + OUTSIDE_DUCKDB_LIMIT;
    match total_memory_bytes() {
        Some(total) => wanted.min(total / 4 * 3),
        None => wanted,
    }
}

/// The ceiling when none is given: [`rss_ceiling_for`] the readers' default 2 GB, computed the
/// first time it is asked for.
pub fn default_rss_ceiling() -> u64 {
    static CEILING: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CEILING.get_or_init(|| rss_ceiling_for(2_000_000_000))
}

/// Bytes in a size as DuckDB's `memory_limit` takes it: `512MB`, `2GB`, `1.5GiB`, `1000000`
/// (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1_048_576.0,
        "gib" => 1_073_741_824.0,
        "tib" => 1_099_511_627_776.0,
        _ => return None,
    };
    let bytes = n * scale;
    (bytes.is_finite() && bytes >= 1.0).then_some(bytes as u64)
}

/// This process's resident memory (VmRSS), in bytes.
pub fn resident_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmRSS:")
}

fn total_memory_bytes() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemTotal:")
}

fn proc_kib(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Lets another thread cancel a running query (an HTTP client that disconnected, an MCP
/// `notifications/cancelled`). Cancelling before the query starts makes it fail at once.
#[derive(Default)]
pub struct QueryControl {
    cancelled: AtomicBool,
    handle: Mutex<Option<Arc<InterruptHandle>>>,
}

impl std::fmt::Debug for QueryControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryControl")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl QueryControl {
    /// A control nobody has cancelled.
    pub fn new() -> Arc<QueryControl> {
        Arc::new(QueryControl::default())
    }

    /// Interrupts the query running under this control, if any, and every later one.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        if let Some(h) = self.lock().as_ref() {
            h.interrupt();
        }
    }

    /// Whether [`QueryControl::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<InterruptHandle>>> {
        self.handle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection a query is about to run on: cancelling interrupts it until
    /// [`QueryControl::detach`] (an earlier cancel interrupts it at once).
    pub fn attach(&self, handle: Arc<InterruptHandle>) {
        let mut slot = self.lock();
        if self.is_cancelled() {
            handle.interrupt();
        }
        *slot = Some(handle);
    }

    /// The query ended.
    pub fn detach(&self) {
        *self.lock() = None;
    }
}

/// Why the watchdog stopped a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Time,
    Memory,
}

/// The thread that interrupts one query at its limits.
pub(crate) struct Watchdog {
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Option<Stop>>,
    limit_ms: u64,
    ceiling: u64,
}

impl Watchdog {
    /// Starts watching the query about to run on the connection of `handle`.
    pub(crate) fn start(handle: Arc<InterruptHandle>, limits: &QueryLimits) -> Watchdog {
        let (done, rx) = mpsc::channel::<()>();
        let timeout = limits.timeout;
        let ceiling = limits.max_rss_bytes.unwrap_or_else(default_rss_ceiling);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            loop {
                let left = timeout.saturating_sub(started.elapsed());
                match rx.recv_timeout(left.min(WATCH_EVERY)) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return None,
                }
                let stop = if started.elapsed() >= timeout {
                    Some(Stop::Time)
                } else if resident_bytes().is_some_and(|rss| rss > ceiling) {
                    Some(Stop::Memory)
                } else {
                    None
                };
                if let Some(stop) = stop {
                    handle.interrupt();
                    tracing::info!(?stop, "interrupted a query");
                    return Some(stop);
                }
            }
        });
        Watchdog {
            done,
            thread,
            limit_ms: timeout.as_millis() as u64,
            ceiling,
        }
    }

    /// The query returned: the watchdog stops; the error it caused, if it interrupted it.
    pub(crate) fn finish(self) -> Option<StoreError> {
        let _ = self.done.send(());
        match self.thread.join().ok().flatten()? {
            Stop::Time => Some(StoreError::Timeout {
                limit_ms: self.limit_ms,
            }),
            Stop::Memory => Some(StoreError::MemoryLimit {
                limit_mib: self.ceiling >> 20,
            }),
        }
    }
}

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const ABANDONED_STATE: u8 = 2;

/// Runs a guarded query on its own thread and waits at most its time limit plus
/// [`ABANDON_GRACE`]. A query that does not stop by then is abandoned: the caller gets
/// [`StoreError::Abandoned`] and the query keeps `reader` (a pooled reader stays busy) until it
/// returns. While [`MAX_ABANDONED`] abandoned queries still run, new ones get
/// [`StoreError::Busy`].
pub fn query_detached<R>(
    reader: R,
    sql: GuardedSql,
    limits: QueryLimits,
    control: Arc<QueryControl>,
) -> Result<QueryResult>
where
    R: Deref<Target = Mutex<Reader>> + Send + 'static,
{
    let running = abandoned_queries();
    if running >= MAX_ABANDONED {
        return Err(StoreError::Busy { running });
    }
    let state = Arc::new(AtomicU8::new(RUNNING));
    let (tx, rx) = mpsc::channel();
    let wait = limits.timeout + ABANDON_GRACE;
    let limit_ms = limits.timeout.as_millis() as u64;
    let thread_state = state.clone();
    spawn_query_thread(move || {
        let outcome = {
            let r = reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            r.query_controlled(&sql, &limits, Some(&control))
        };
        drop(reader);
        if thread_state.swap(FINISHED, Ordering::SeqCst) == ABANDONED_STATE {
            ABANDONED.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("an abandoned query finished");
        }
        let _ = tx.send(outcome);
    })
    .map_err(|e| StoreError::Query {
        message: format!("cannot start a query thread: {e}"),
        hint: "the machine is out of threads or memory; try again later".into(),
    })?;
    match rx.recv_timeout(wait) {
        Ok(outcome) => outcome,
        Err(_) => {
            if state
                .compare_exchange(RUNNING, ABANDONED_STATE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                let now = ABANDONED.fetch_add(1, Ordering::SeqCst) + 1;
                tracing::warn!(
                    abandoned = now,
                    limit_ms,
                    "a query ignored its interrupt and was abandoned"
                );
                Err(StoreError::Abandoned { limit_ms })
            } else {
                rx.recv().unwrap_or(Err(StoreError::Abandoned { limit_ms }))
            }
        }
    }
}

/// Starts the thread a query from outside runs on, with a [`QUERY_STACK_BYTES`] stack.
fn spawn_query_thread(
    run: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("causeway-query".into())
        .stack_size(QUERY_STACK_BYTES)
        .spawn(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recursion as deep as DuckDB's planner goes on the largest query the guard accepts
    /// (tens of MiB) fits the query thread; on a default 2 MiB thread it aborted the process.
    #[test]
    fn query_thread_holds_deep_recursion() {
        fn descend(levels: u32) -> u64 {
            let frame = std::hint::black_box([levels as u8; 1024]);
            if levels == 0 {
                u64::from(frame[0])
            } else {
                descend(levels - 1) + u64::from(frame[1023])
            }
        }
        let (tx, rx) = mpsc::channel();
        spawn_query_thread(move || {
            let _ = tx.send(descend(32 * 1024));
        })
        .unwrap()
        .join()
        .unwrap();
        assert!(rx.recv().is_ok());
    }

    #[test]
    fn sizes_parse_as_duckdb_takes_them() {
        assert_eq!(parse_size("2GB"), Some(2_000_000_000));
        assert_eq!(parse_size("512 MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5gb"), Some(1_500_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("2XB"), None);
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().unwrap() > 1 << 20);
        assert!(rss_ceiling_for(1 << 30) > resident_bytes().unwrap());
    }
}
