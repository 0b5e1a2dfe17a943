//! The agent's day, compressed: a recording at a sustained event rate into rolling segments
//! closed every `CAUSEWAY_BENCH_PERIOD` (default 2.5 s: 24 rotations a minute, a day of the
//! default hourly segments), retention capped at `CAUSEWAY_BENCH_KEEP_MIB`, against the same
//! recording into one file in the same run. Reports drops, events stored per call made, peak
//! RSS, the data directory's largest size, the rotations and the probe-mode switches (launches
//! are pinned to full mode; `CAUSEWAY_BENCH_UNPINNED=1` leaves them to the controller). With
//! `CAUSEWAY_BENCH_SERVE=1` the segments are also recorded served, as the agent serves them:
//! two live readers run a report's heaviest queries back to back meanwhile. Root (real eBPF):
//! `cargo bench -p causeway-collector --bench segments`.

// A bench reports on stdout.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use causeway_collector::{SegmentPolicy, TraceArgs, TraceHooks, TraceSummary, run_trace_with};

#[path = "../tests/it/standin.rs"]
#[allow(dead_code)]
mod standin;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return std::fs::metadata(p).map_or(0, |m| m.len());
    };
    rd.filter_map(Result::ok)
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                dir_bytes(&p)
            } else {
                std::fs::metadata(&p).map_or(0, |m| m.len())
            }
        })
        .sum()
}

struct Run {
    summary: TraceSummary,
    peak_rss_mib: f64,
    peak_disk_mib: f64,
    launches: u64,
    /// Served: the live readers' queries answered and failed (stopped by the writer or out
    /// of memory).
    queries: Option<(u64, u64)>,
}

/// What a report asks of the trace: launches per kernel address with their median, and the
/// launches named (the query that ran out of memory in the agent's test).
const SERVED_QUERIES: [&str; 2] = [
    "SELECT arg0, quantile_disc(duration, 0.5)::BIGINT, count(*) FROM events GROUP BY arg0",
    "SELECT count(*) FROM kernel_launches",
];

/// Memory the served queries are given (`[serve] query_memory`).
const SERVED_QUERY_MEMORY: &str = "256MB";

/// Runs [`SERVED_QUERIES`] back to back on two of `readers` until `stop`; counts into `counts`.
fn serve(
    readers: Vec<causeway_store::SharedReader>,
    stop: &Arc<AtomicBool>,
    counts: &Arc<(AtomicU64, AtomicU64)>,
) -> Vec<std::thread::JoinHandle<()>> {
    readers
        .into_iter()
        .take(2)
        .map(|r| {
            let (stop, counts) = (stop.clone(), counts.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for q in SERVED_QUERIES {
                        let g = r.lock().unwrap_or_else(|p| p.into_inner());
                        let ok = g.prepare_trusted(q).is_ok_and(|mut st| {
                            st.query_map([], |row| row.get::<_, i64>(0))
                                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                                .is_ok()
                        });
                        drop(g);
                        let c = if ok { &counts.0 } else { &counts.1 };
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect()
}

fn run(
    s: &standin::Standin,
    db: &Path,
    per_s: u64,
    seconds: u64,
    policy: Option<SegmentPolicy>,
    served: bool,
) -> Run {
    let threads = 2u64;
    let calls = per_s * seconds / threads;
    let out = db.with_extension("rate");
    let mut a = TraceArgs::with_db(db.to_path_buf());
    a.node = Some("bench".into());
    a.no_host = true;
    // Launches pinned to full mode: this measures rotation, which must store every event, not
    // the overhead controller (a 100% budget can still be exceeded by the calibrated cost of
    // 100k calls a second on a busy machine; the switches column shows whether it was).
    a.overhead_budget = 100.0;
    if std::env::var_os("CAUSEWAY_BENCH_UNPINNED").is_none() {
        a.probe_modes = vec![(3, causeway_collector::ProbeMode::Full)];
    }
    a.command = vec![
        s.exe().to_string(),
        "rate".into(),
        calls.to_string(),
        out.display().to_string(),
        threads.to_string(),
        per_s.to_string(),
    ];
    let samples = Arc::new(Mutex::new((0u64, 0u64)));
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (samples, stop, path) = (samples.clone(), stop.clone(), db.to_path_buf());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (rss, disk) = (rss_kib(), dir_bytes(&path));
                let mut m = samples.lock().unwrap();
                m.0 = m.0.max(rss);
                m.1 = m.1.max(disk);
                drop(m);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let servers = Arc::new(Mutex::new(Vec::new()));
    let on_store: Option<causeway_collector::OnStore> = served.then(|| {
        let (stop, counts, servers) = (stop.clone(), counts.clone(), servers.clone());
        Box::new(move |readers: Vec<causeway_store::SharedReader>| {
            *servers.lock().unwrap() = serve(readers, &stop, &counts);
        }) as causeway_collector::OnStore
    });
    let hooks = TraceHooks {
        segments: policy.map(|p| Arc::new(RwLock::new(p))),
        query_memory: served.then(|| SERVED_QUERY_MEMORY.to_string()),
        on_store,
        ..TraceHooks::default()
    };
    let summary = run_trace_with(&a, hooks).expect("trace (run as root)");
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    for t in std::mem::take(&mut *servers.lock().unwrap()) {
        t.join().unwrap();
    }
    let (rss, disk) = *samples.lock().unwrap();
    let launches = summary
        .ops
        .iter()
        .find(|o| o.op == "cudaLaunchKernel")
        .map_or(0, |o| o.stored);
    Run {
        summary,
        peak_rss_mib: rss as f64 / 1024.0,
        peak_disk_mib: disk as f64 / 1_048_576.0,
        launches,
        queries: served.then(|| {
            (
                counts.0.load(Ordering::Relaxed),
                counts.1.load(Ordering::Relaxed),
            )
        }),
    }
}

fn main() {
    let per_s = env_u64("CAUSEWAY_BENCH_RATE", 100_000);
    let seconds = env_u64("CAUSEWAY_BENCH_SECONDS", 60);
    let period = Duration::from_millis(env_u64("CAUSEWAY_BENCH_PERIOD_MS", 2_500));
    let keep_mib = env_u64("CAUSEWAY_BENCH_KEEP_MIB", 64);
    let s = standin::get();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let one = if std::env::var("CAUSEWAY_BENCH_ONLY_SEGMENTS").is_ok() {
        None
    } else {
        Some(run(
            s,
            &dir.path().join("one.duckdb"),
            per_s,
            seconds,
            None,
            false,
        ))
    };
    let policy = SegmentPolicy {
        period,
        max_bytes: 1 << 30,
        max_age: Duration::from_secs(86_400),
        max_total_bytes: keep_mib << 20,
        serve_window: Duration::from_secs(3600),
    };
    let seg = run(
        s,
        &dir.path().join("segments"),
        per_s,
        seconds,
        Some(policy.clone()),
        false,
    );
    let served = std::env::var_os("CAUSEWAY_BENCH_SERVE").map(|_| {
        run(
            s,
            &dir.path().join("served"),
            per_s,
            seconds,
            Some(policy),
            true,
        )
    });
    println!(
        "\nsegments bench: {per_s} calls/s asked for {seconds} s (2 threads), period {period:?}, retention {keep_mib} MiB ({:.0} s in all)",
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10} {:>9} {:>8} {:>9}",
        "recording",
        "calls",
        "stored",
        "written",
        "ring",
        "channel",
        "peak RSS",
        "peak disk",
        "closed",
        "deleted",
        "switches"
    );
    for (name, r) in [
        ("one file", one.as_ref()),
        ("segments", Some(&seg)),
        ("served", served.as_ref()),
    ] {
        let Some(r) = r else { continue };
        let (closed, deleted) = r
            .summary
            .segments
            .as_ref()
            .map_or((0, 0), |s| (s.closed, s.deleted));
        let calls = r
            .summary
            .ops
            .iter()
            .find(|o| o.op == "cudaLaunchKernel")
            .map_or(0, |o| o.calls);
        println!(
            "{name:<14} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7.1} MiB {:>6.1} MiB {closed:>9} {deleted:>8} {:>9}",
            calls,
            r.launches,
            r.summary.events_written,
            r.summary.ringbuf_drops,
            r.summary.channel_drops,
            r.peak_rss_mib,
            r.peak_disk_mib,
            r.summary.overhead.mode_switches,
        );
    }
    println!(
        "RSS segments / one file: {:.2}x; disk bound {keep_mib} MiB + one open segment",
        seg.peak_rss_mib / one.as_ref().map_or(f64::NAN, |o| o.peak_rss_mib)
    );
    if let Some(r) = &served {
        let (ok, failed) = r.queries.unwrap_or_default();
        println!(
            "served ({SERVED_QUERY_MEMORY} for queries): {ok} queries answered, {failed} failed; RSS served / segments: {:.2}x",
            r.peak_rss_mib / seg.peak_rss_mib
        );
    }
    if let Ok(keep) = std::env::var("CAUSEWAY_BENCH_KEEP_DIR") {
        let _ = std::fs::rename(dir.path().join("segments"), &keep);
        println!("segments kept in {keep}");
    }
}
