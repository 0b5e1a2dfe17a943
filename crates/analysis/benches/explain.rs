//! Rerunnable benchmark of `explain`: on the imported vLLM reference trace (if
//! ../shared/investigations is present) and on a synthetic trace of 10M events (preempted
//! launching threads, checkpoint stalls, sleeping helper threads) written through the Writer.
//! Run: `cargo bench -p causeway-analysis --bench explain` (EVENTS=N to change the size).
//! SEGMENTS=N also writes the same events as N segment files of an agent's data directory and
//! times `explain` over the directory against the single store, in the same run.

// The figures / accuracy table printed on stdout are this target's output.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

use causeway_analysis::{ChainQuery, explain};
use causeway_demo::model::{Gen, Knobs, MS, T0, Thread, feed_loop, idle_thread};
use causeway_store::{Reader, Writer, WriterOptions};

fn time_explain(label: &str, db: &Path, runs: usize) {
    let r = Reader::open(db).expect("open");
    let mut best = f64::MAX;
    let mut chains = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let e = explain(&r, &ChainQuery::default()).expect("explain");
        best = best.min(t.elapsed().as_secs_f64());
        chains = e.chains.len();
    }
    println!(
        "{label}: explain best of {runs}: {:.1} ms ({chains} chains)",
        best * 1e3
    );
}

/// Where `explain`'s time goes (PHASES=1): the engine's steps, timed one by one.
fn phases(label: &str, db: &Path) {
    use causeway_analysis::{attribution, budget, detectors, facts, rates};
    let r = Reader::open(db).expect("open");
    let q = ChainQuery::default();
    let t = Instant::now();
    let ctx = facts::Ctx::load(&r, &q).expect("facts");
    let mut line = format!(
        "{label} phases: facts {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let budgets = budget::budgets(&ctx).expect("budgets");
    line.push_str(&format!(
        ", budgets {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    ));
    let t = Instant::now();
    let attr = attribution::attribute(&ctx).expect("attribution");
    let off = attribution::split(&ctx, &attr);
    let rates = rates::launch_rates(&ctx).expect("rates");
    let waits = detectors::waits::host_waits(&ctx).expect("waits");
    let reclaims = detectors::host_memory_pressure::reclaims(&ctx).expect("reclaims");
    let devices = causeway_analysis::device::device_times(&ctx, &budgets).expect("devices");
    line.push_str(&format!(
        ", attribution+rates+waits {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    ));
    let input = detectors::Input {
        ctx: &ctx,
        attr: &attr,
        split: &off,
        rates: &rates,
        waits: &waits,
        budgets: &budgets,
        reclaims: &reclaims,
        devices: &devices,
    };
    for (name, detect) in detectors::ALL {
        let t = Instant::now();
        detect(&input).expect("detector");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if ms >= 1.0 {
            line.push_str(&format!(", {name} {ms:.0} ms"));
        }
    }
    println!("{line}");
}

fn writer(path: &Path) -> Writer {
    Writer::create(
        path,
        WriterOptions {
            node: "bench-node".into(),
            ..WriterOptions::default()
        },
    )
    .expect("writer")
}

/// Writes about `target` synthetic events into `path` and, with `segments` = (dir, n), the same
/// events into n store files in `dir` (a new one every `target / n` events), as an agent's
/// closed segments.
fn synthetic(path: &Path, target: u64, segments: Option<(&Path, u64)>) -> u64 {
    let mut w = writer(path);
    let per = segments.map(|(_, n)| target.div_ceil(n.max(1)));
    let seg_path = |i: u64| segments.map(|(d, _)| d.join(format!("seg-{i:04}.duckdb")));
    let mut seg = seg_path(0).map(|p| writer(&p));
    let (mut seg_no, mut in_seg) = (0u64, 0u64);
    let knobs = Knobs {
        preempt: (0.1, MS, 4 * MS),
        preempt_by: 5151,
        checkpoint: Some((60_000 * MS, 10, 40 * MS)),
        ..Knobs::default()
    };
    let chunk = 10_000 * MS;
    let mut written = 0u64;
    let mut start = T0;
    let mut seed = 1;
    while written < target {
        for p in 0..4u32 {
            let mut g = Gen::new(seed);
            seed += 1;
            let pid = 10_000 + p * 100;
            let t = Thread::new(pid, pid, "python3", p as i16);
            feed_loop(&mut g, &t, start, chunk, &knobs);
            idle_thread(
                &mut g,
                &Thread::new(pid, pid + 1, "python3", -1),
                start,
                chunk,
                100 * MS,
            );
            for e in &g.events {
                w.append(e).expect("append");
            }
            if let Some(sw) = seg.as_mut() {
                for e in &g.events {
                    sw.append(e).expect("append");
                }
            }
            written += g.events.len() as u64;
            in_seg += g.events.len() as u64;
        }
        start += chunk;
        if per.is_some_and(|per| in_seg >= per) && written < target {
            seg.take().expect("segment").finish().expect("finish");
            seg_no += 1;
            in_seg = 0;
            seg = seg_path(seg_no).map(|p| writer(&p));
        }
    }
    w.finish().expect("finish");
    if let Some(sw) = seg {
        sw.finish().expect("finish");
    }
    written
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    // CAUSEWAY_SHARED_DIR overrides ../shared/investigations (e.g. from a git worktree).
    let shared = std::env::var_os("CAUSEWAY_SHARED_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations"),
            std::path::PathBuf::from,
        )
        .join("vllm-37343-logprobs-amplification.db");
    if shared.exists() {
        let db = dir.path().join("vllm.duckdb");
        causeway_import::import(
            &[shared],
            &db,
            false,
            &causeway_import::ImportOptions::default(),
            &mut |_| {},
        )
        .expect("import");
        time_explain("vllm-37343 (10,869 events)", &db, 10);
        if std::env::var_os("PHASES").is_some() {
            phases("vllm-37343", &db);
        }
    } else {
        println!("vllm-37343: skipped ({} not found)", shared.display());
    }
    let target: u64 = std::env::var("EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    // BENCH_DB=PATH keeps the synthetic store there (written once, reused) for profiling.
    let keep = std::env::var_os("BENCH_DB").map(std::path::PathBuf::from);
    let db = keep
        .clone()
        .unwrap_or_else(|| dir.path().join("synthetic.duckdb"));
    let segments: Option<u64> = std::env::var("SEGMENTS").ok().and_then(|s| s.parse().ok());
    let seg_dir = dir.path().join("segments");
    if segments.is_some() {
        std::fs::create_dir(&seg_dir).expect("segments dir");
    }
    let t = Instant::now();
    let n = if keep.is_some() && db.exists() && segments.is_none() {
        Reader::open(&db)
            .expect("open")
            .prepare_trusted("SELECT count(*) FROM event_data")
            .expect("count")
            .query_row([], |r| r.get::<_, u64>(0))
            .expect("count")
    } else {
        let _ = std::fs::remove_file(&db);
        synthetic(&db, target, segments.map(|n| (seg_dir.as_path(), n)))
    };
    println!(
        "synthetic: wrote {n} events in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    time_explain(&format!("synthetic ({n} events)"), &db, 3);
    if std::env::var_os("PHASES").is_some() {
        phases("synthetic", &db);
    }
    if let Some(k) = segments {
        let files = std::fs::read_dir(&seg_dir).expect("segments").count();
        time_explain(
            &format!("synthetic ({n} events) as {files} segments"),
            &seg_dir,
            3,
        );
        if std::env::var_os("PHASES").is_some() {
            phases(&format!("{k} segments"), &seg_dir);
        }
    }
}
