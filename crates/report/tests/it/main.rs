//! The report's data against what `stats` and `explain` compute on the same store: the page
//! shows the same findings in the same order, and every chart sums to the stats' numbers.

use causeway_hint::Hint as _;

use std::path::{Path, PathBuf};
use std::time::Instant;

use causeway_analysis::opsets::{is_gpu_source, is_sync};
use causeway_analysis::{ChainQuery, FindingsQuery, StatsQuery};
use causeway_report::{Mode, ReportData, build, render, write_file};
use causeway_store::Reader;
use causeway_tools::params::WindowParams;

/// A reference trace from ../shared (or $CAUSEWAY_SHARED_DIR) imported into `dir`.
fn shared_store(dir: &Path, name: &str) -> PathBuf {
    let shared = std::env::var_os("CAUSEWAY_SHARED_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/investigations"),
        PathBuf::from,
    );
    let src = shared.join(name);
    assert!(
        src.exists(),
        "{} is missing (tests read ../shared)",
        src.display()
    );
    let db = dir.join(name).with_extension("duckdb");
    causeway_import::import(
        &[src],
        &db,
        false,
        &causeway_import::ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    db
}

const VLLM: &str = "vllm-37343-logprobs-amplification.db";

/// Checks `d` against the stats and findings of the same query on `r`.
fn check_against_stats_and_findings(r: &Reader, q: &WindowParams, d: &ReportData) {
    let spec = q.spec().unwrap();
    let stats = causeway_tools::stats::stats_for(
        r,
        &StatsQuery {
            pid: q.pid,
            node: q.node.clone(),
            window: spec,
        },
    )
    .unwrap();
    let f = causeway_tools::stats::findings_for(
        r,
        &FindingsQuery {
            chains: ChainQuery {
                window: spec,
                pid: q.pid,
                node: q.node.clone(),
                top_n: None,
                prices: Default::default(),
            },
            ..FindingsQuery::default()
        },
    )
    .unwrap();
    let ids = |v: &[causeway_analysis::Chain]| v.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&d.findings),
        ids(&f.explain.chains),
        "findings in explain's order"
    );
    assert_eq!(d.evidence.len(), d.findings.len());
    assert_eq!(d.budgets, f.explain.budgets, "the budgets explain computes");
    assert_eq!(
        d.devices, f.explain.devices,
        "the device time explain computes"
    );
    assert_eq!(d.stats.events, stats.events);

    let tl = &d.timeline;
    let n = tl.t.len();
    assert!(n >= 1 && n <= causeway_report::series::MAX_BUCKETS as usize + 1);
    for s in [
        tl.off_cpu_ns.len(),
        tl.sync_ns.len(),
        tl.io_ns.len(),
        tl.gpu_calls.len(),
    ] {
        assert_eq!(s, n, "every series has a value per bucket");
    }
    let gpu_calls: u64 = stats
        .ops
        .iter()
        .filter(|o| is_gpu_source(&o.source))
        .map(|o| o.count)
        .sum();
    assert_eq!(
        tl.gpu_calls.iter().sum::<u64>(),
        gpu_calls,
        "GPU calls on the timeline"
    );
    let sync_ns: i64 = stats
        .ops
        .iter()
        .filter(|o| is_sync(&o.op))
        .map(|o| o.total_ns)
        .sum();
    assert_eq!(
        tl.sync_ns.iter().sum::<i64>(),
        sync_ns,
        "sync time on the timeline"
    );
    assert_eq!(
        tl.off_cpu_ns.iter().sum::<i64>(),
        stats.off_cpu.total_ns,
        "off-CPU on the timeline"
    );
    let io_ns: i64 = stats
        .ops
        .iter()
        .filter(|o| o.source == "IO")
        .map(|o| o.total_ns)
        .sum();
    assert_eq!(
        tl.io_ns.iter().sum::<i64>(),
        io_ns,
        "block I/O on the timeline"
    );

    for h in &d.histograms {
        let o = stats
            .ops
            .iter()
            .find(|o| o.op == h.op)
            .expect("a histogram of a listed op");
        assert_eq!(h.counts.len(), h.upper_ns.len());
        assert_eq!(h.total, h.counts.iter().sum::<u64>());
        if h.from == "exact" {
            assert_eq!(h.total, o.count, "{}: every stored call in a bucket", h.op);
            assert!(
                h.upper_ns.last().copied().unwrap_or(0) >= o.max_ns,
                "{}: the longest call fits",
                h.op
            );
        }
        assert!(
            h.upper_ns.windows(2).all(|w| w[0] < w[1]),
            "{}: buckets ascend",
            h.op
        );
    }
}

#[test]
fn vllm_report_matches_stats_and_explain() {
    let dir = tempfile::tempdir().unwrap();
    let db = shared_store(dir.path(), VLLM);
    let r = Reader::open(&db).unwrap();
    let q = WindowParams::default();
    let d = build(&r, &q, &Default::default()).unwrap();
    assert!(!d.findings.is_empty(), "the vLLM trace has findings");
    assert!(!d.histograms.is_empty() && !d.budgets.is_empty());
    assert!(
        d.timeline.marks.iter().any(|m| m.kind == "finding"),
        "findings are placed on the timeline"
    );
    assert!(
        d.evidence.iter().any(|e| !e.rows.is_empty()),
        "evidence rows come back"
    );
    check_against_stats_and_findings(&r, &q, &d);

    // A window and a process filter give the same agreement.
    let pid = d.budgets[0].pid;
    let q = WindowParams {
        since: Some("20s".into()),
        pid: Some(pid),
        ..WindowParams::default()
    };
    let d = build(&r, &q, &Default::default()).unwrap();
    check_against_stats_and_findings(&r, &q, &d);
}

#[test]
fn report_file_is_self_contained_small_and_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let db = shared_store(dir.path(), VLLM);
    let r = Reader::open(&db).unwrap();
    let out = dir.path().join("report.html");
    let started = Instant::now();
    let w = write_file(
        &r,
        &WindowParams::default(),
        &Default::default(),
        &out,
        false,
    )
    .unwrap();
    let elapsed = started.elapsed();
    let page = std::fs::read_to_string(&out).unwrap();
    assert_eq!(page.len(), w.bytes);
    eprintln!(
        "report of {VLLM}: {} bytes, built in {:.0} ms ({:.0} ms with writing)",
        w.bytes,
        w.build_ms,
        elapsed.as_secs_f64() * 1e3
    );
    assert!(
        w.bytes < 1_000_000,
        "{} bytes: the report stays under 1 MB",
        w.bytes
    );
    for forbidden in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
        "url(http",
    ] {
        assert!(
            !page.contains(forbidden),
            "the page references a resource: {forbidden}"
        );
    }
    assert!(page.contains("http-equiv=\"Content-Security-Policy\""));
    assert!(page.contains("connect-src 'none'"));
    // Nothing but the file is left in the directory (no temporary sibling).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("report"))
        .collect();
    assert_eq!(names, vec!["report.html".to_string()]);
    // An existing file is kept without force, replaced with it.
    let again = write_file(
        &r,
        &WindowParams::default(),
        &Default::default(),
        &out,
        false,
    )
    .unwrap_err();
    let hint = again.hint().unwrap_or_default();
    assert!(hint.contains("--force"), "hint: {hint}");
    write_file(
        &r,
        &WindowParams::default(),
        &Default::default(),
        &out,
        true,
    )
    .unwrap();
}

#[test]
fn unknown_process_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let db = shared_store(dir.path(), VLLM);
    let r = Reader::open(&db).unwrap();
    let q = WindowParams {
        pid: Some(4_000_000),
        ..WindowParams::default()
    };
    let e = build(&r, &q, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("4000000"), "{e}");
    assert!(e.hint().is_some_and(|h| !h.is_empty()));
}

#[test]
fn multi_node_trace_has_a_row_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let db = shared_store(dir.path(), "sample-cluster.db");
    let r = Reader::open(&db).unwrap();
    let d = build(&r, &WindowParams::default(), &Default::default()).unwrap();
    assert!(d.stats.nodes.len() > 1, "sample-cluster has several nodes");
    assert_eq!(
        d.nodes.iter().map(|n| n.node.clone()).collect::<Vec<_>>(),
        d.stats.nodes,
        "one row per node, in stats' order"
    );
    assert_eq!(
        d.nodes.iter().map(|n| n.events).sum::<u64>(),
        d.stats.events,
        "the nodes' events add up"
    );
    check_against_stats_and_findings(&r, &WindowParams::default(), &d);
    let page = render(&d, Mode::Live { poll_ms: 1000 });
    assert!(page.contains("data-mode=\"live\""));
    assert!(
        !page.contains("http-equiv"),
        "the live page's policy is a header"
    );
}
