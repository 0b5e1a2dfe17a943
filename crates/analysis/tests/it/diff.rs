//! Two runs compared step for step (issue 48): a pair of profiler traces written here that
//! differ only in the DataLoader's time, so the difference and its one part are known from the
//! design; every real Kineto trace against itself (no difference beyond noise); and real pairs,
//! whose parts must sum to the difference; and two runs without steps, compared over equal
//! windows of their GPU-calling thread, where the design fixes where the time moved.

use std::path::{Path, PathBuf};

use causeway_analysis::diff::{Side, compare, side, window_side, window_width};
use causeway_analysis::steps::{StepQuery, feeder};
use causeway_store::{Range, Reader, Step, Writer, WriterOptions};

use crate::device::{import, kineto_traces, x};
use crate::steps::designed_with;

fn side_of(db: &Path) -> Side {
    let r = Reader::open(db).unwrap();
    side(&r, &db.display().to_string(), &StepQuery::default())
        .unwrap()
        .unwrap()
}

fn store(dir: &Path, name: &str, json: &str) -> PathBuf {
    let src = dir.join(format!("{name}.pt.trace.json"));
    std::fs::write(&src, json).unwrap();
    let db = dir.join(format!("{name}.duckdb"));
    import(&src, &db);
    db
}

#[test]
fn a_slower_dataloader_is_the_whole_difference() {
    let dir = tempfile::tempdir().unwrap();
    let base = side_of(&store(dir.path(), "base", &designed_with(2000)));
    let new = side_of(&store(dir.path(), "new", &designed_with(7000)));
    let d = compare(&base, &new);
    let us = 1_000;
    // Every step 5 ms longer, all of it in the DataLoader.
    assert_eq!(d.difference_ns, 5000 * us);
    assert!(d.beyond_noise, "{}", d.summary);
    assert_eq!(d.parts[0].bucket, "input");
    assert_eq!(d.parts[0].per_step.delta_ns, 5000 * us);
    assert!(
        d.parts[1..].iter().all(|p| p.per_step.delta_ns == 0),
        "{:#?}",
        d.parts
    );
    let sum: i64 = d.parts.iter().map(|p| p.per_step.delta_ns).sum();
    assert_eq!(sum, d.difference_ns);
    assert_eq!(d.changed[0].kind, "cpu op");
    assert!(
        d.changed[0].name.starts_with("enumerate(DataLoader)"),
        "{:?}",
        d.changed[0]
    );
    assert_eq!(
        (d.changed[0].per_step.base_ns, d.changed[0].per_step.new_ns),
        (2000 * us, 7000 * us)
    );
    assert!(
        d.summary
            .starts_with("+5.00 ms per step (+40.0%): +5.00 ms input (enumerate(DataLoader)"),
        "{}",
        d.summary
    );
}

#[test]
fn a_run_against_itself_differs_by_nothing_and_real_pairs_parts_sum_to_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let mut sides = Vec::new();
    for src in kineto_traces() {
        let db = dir.path().join(
            src.file_name()
                .unwrap()
                .to_string_lossy()
                .replace(".pt.trace.json.gz", ".duckdb"),
        );
        import(&src, &db);
        let s = side_of(&db);
        let d = compare(&s, &s);
        assert_eq!(d.difference_ns, 0, "{}", src.display());
        assert!(!d.beyond_noise, "{}", src.display());
        assert!(d.parts.iter().all(|p| p.per_step.delta_ns == 0));
        assert!(d.changed.is_empty());
        assert!(
            d.summary.starts_with("no difference beyond noise"),
            "{}",
            d.summary
        );
        sides.push(s);
    }
    println!("base -> new | difference | parts sum | largest part");
    for (i, a) in sides.iter().enumerate() {
        for b in sides.iter().skip(i + 1) {
            let d = compare(a, b);
            let sum: i64 = d.parts.iter().map(|p| p.per_step.delta_ns).sum();
            // Each bucket's mean is rounded down to the ns: at most one ns apart per bucket.
            let tol = (d.difference_ns.abs() / 100).max(9);
            assert!(
                (sum - d.difference_ns).abs() <= tol,
                "{} -> {}: parts {sum} vs difference {}",
                a.trace,
                b.trace,
                d.difference_ns
            );
            println!(
                "{} -> {} | {:.2} ms | {:.2} ms | {} {:.2} ms",
                Path::new(&a.trace).file_stem().unwrap().to_string_lossy(),
                Path::new(&b.trace).file_stem().unwrap().to_string_lossy(),
                d.difference_ns as f64 / 1e6,
                sum as f64 / 1e6,
                d.parts[0].bucket,
                d.parts[0].per_step.delta_ns as f64 / 1e6
            );
        }
    }
}

/// Ten seconds of one thread (pid 100, tid 1) without steps, in µs: a launch every 0.5 s
/// ([k * 500000, +100], 20 launches, too few for a cadence) and, at the start of every second,
/// the DataLoader for `loader` µs ([s + 1000, +loader]).
fn no_steps(loader: i64) -> String {
    let mut ev = Vec::new();
    for k in 0..20i64 {
        ev.push(x(
            "cuda_runtime",
            "cudaLaunchKernel",
            100,
            1,
            k * 500_000,
            100,
            &format!(r#""correlation": {}"#, k + 1),
        ));
    }
    for s in 0..10i64 {
        ev.push(x(
            "cpu_op",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            100,
            1,
            s * 1_000_000 + 1000,
            loader,
            "",
        ));
    }
    format!(
        r#"{{"schemaVersion": 1, "distributedInfo": {{"rank": 0, "world_size": 1}}, "traceEvents": [{}]}}"#,
        ev.join(",\n")
    )
}

#[test]
fn runs_without_steps_are_compared_over_equal_windows_of_their_feeding_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (b, n) = (
        store(dir.path(), "base", &no_steps(100_000)),
        store(dir.path(), "new", &no_steps(400_000)),
    );
    let (rb, rn) = (Reader::open(&b).unwrap(), Reader::open(&n).unwrap());
    let q = StepQuery::default();
    assert!(
        side(&rb, "base", &q).unwrap().is_err(),
        "no steps by design"
    );
    let (fb, fnew) = (
        feeder(&rb, &q).unwrap().unwrap(),
        feeder(&rn, &q).unwrap().unwrap(),
    );
    assert_eq!((fb.pid, fb.tid), (100, 1));
    // Its first call to its last call's end: 9.5001 s, so nine whole 1-s windows.
    assert_eq!(fb.until_ns - fb.from_ns, 9_500_100_000);
    let width = window_width(&fb, &fnew);
    assert_eq!(width, 1_000_000_000);
    let d = compare(
        &window_side(&rb, "base", &fb, width).unwrap(),
        &window_side(&rn, "new", &fnew, width).unwrap(),
    );
    let ms = 1_000_000;
    assert_eq!((d.base.steps, d.new.steps), (9, 9));
    assert_eq!(d.unit, "1.00 s window");
    assert_eq!(d.difference_ns, 0, "equal windows");
    // Per window: the DataLoader 100 -> 400 ms, taken from the thread's other host time.
    assert_eq!(d.parts[0].bucket, "input");
    assert_eq!(d.parts[0].per_step.delta_ns, 300 * ms);
    assert_eq!(d.parts[1].bucket, "host");
    assert_eq!(d.parts[1].per_step.delta_ns, -300 * ms);
    assert!(d.parts[2..].iter().all(|p| p.per_step.delta_ns == 0));
    assert!(d.beyond_noise, "{}", d.summary);
    assert_eq!(
        d.summary,
        "no steps to align: per 1.00 s window, +300.00 ms input (enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ 10% -> 40% of the window), -300.00 ms host; kernel launches per window 2.0 -> 2.0 (+0.0%)"
    );
    // The items' SQL gives the figures back: the DataLoader's time in the new run's windows.
    // (prepare_trusted takes only 'static text: the test's own SQL is leaked for it.)
    let sql: &'static str = Box::leak(
        format!(
            "SELECT sum(ns)::BIGINT FROM ({}) WHERE kind = 'cpu op'",
            d.new.items_sql
        )
        .into_boxed_str(),
    );
    let total: i64 = rn
        .prepare_trusted(sql)
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    assert_eq!(total, 9 * 400 * ms);
    // A run against itself: nothing moved.
    let s = window_side(&rb, "base", &fb, width).unwrap();
    let same = compare(&s, &s);
    assert!(!same.beyond_noise, "{}", same.summary);
    assert!(
        same.summary
            .starts_with("no steps to align: per 1.00 s window, no part moved beyond noise"),
        "{}",
        same.summary
    );
}

/// A recording whose NVTX steps are ranges named `step N` (as `torch.cuda.nvtx.range_push(f"step
/// {i}")` makes them), each step `step_ms` long with a 2 ms `forward` range in it.
fn nvtx_steps(dir: &Path, name: &str, step_ms: i64) -> PathBuf {
    const T0: i64 = 1_700_000_000_000_000_000;
    const MS: i64 = 1_000_000;
    let db = dir.join(format!("{name}.duckdb"));
    let mut w = Writer::create(&db, WriterOptions::default()).unwrap();
    let (mut ranges, mut steps) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let start = T0 + i * step_ms * MS;
        let end = start + step_ms * MS;
        let range = |name: String, start_ns, end_ns, depth| Range {
            pid: 7,
            tid: 7,
            name,
            kind: "nvtx",
            start_ns,
            end_ns,
            depth,
        };
        ranges.push(range(format!("step {i}"), start, end, 0));
        ranges.push(range("forward".into(), start + MS, start + 3 * MS, 1));
        steps.push(Step {
            pid: 7,
            tid: 7,
            step: i,
            start_ns: start,
            end_ns: end,
            source: "nvtx",
        });
    }
    w.add_ranges(&ranges).unwrap();
    w.add_steps(&steps).unwrap();
    w.finish().unwrap();
    db
}

/// Regression (the lab's twins, issue 48): with NVTX steps named `step N`, every step's own
/// range was listed as a CPU op in its step, so "what changed most" was a list of single steps.
#[test]
fn a_steps_own_nvtx_range_is_not_a_change_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = side_of(&nvtx_steps(dir.path(), "base", 10));
    let new = side_of(&nvtx_steps(dir.path(), "new", 14));
    let d = compare(&base, &new);
    assert_eq!(d.difference_ns, 4_000_000);
    let names: Vec<&str> = d.changed.iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.iter().all(|n| !n.starts_with("step ")),
        "the steps' own ranges are listed as changes: {names:?}"
    );
    // The ranges inside the steps still are what ran in them (unchanged here: 2 ms each).
    assert!(
        base.items.keys().any(|(_, name)| name == "forward"),
        "forward is not an op of the base's steps"
    );
}
