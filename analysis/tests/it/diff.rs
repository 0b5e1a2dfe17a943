//! Two runs compared step for step (issue 48): a pair of profiler traces written here that
//! differ only in the DataLoader's time, so the difference and its one part are known from the
//! design; every real Kineto trace against itself (no difference beyond noise); and real pairs,
//! whose parts must sum to the difference.

use std::path::{Path, PathBuf};

use causeway_analysis::diff::{Side, compare, side};
use causeway_analysis::steps::StepQuery;
use causeway_store::{Range, Reader, Step, Writer, WriterOptions};

use crate::device::{import, kineto_traces};
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
