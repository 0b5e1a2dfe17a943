//! Runs every case of `investigations/cases/*.json` (demo scenarios, their healthy baselines
//! and reference traces imported from `../shared/investigations/` at test time), prints an
//! accuracy table (real recordings and synthetic scenarios apart), and requires top-1 = 100%
//! and zero chains on healthy cases. Every case says how its label was established; every
//! chain's evidence SQL must pass the SQL guard and return rows on the store; every time
//! budget must close (its buckets sum to its span within 1%).

use std::path::{Path, PathBuf};

use causeway_analysis::demo::{Scenario, write_scenario};
use causeway_analysis::{ChainQuery, explain};
use causeway_store::{QueryLimits, Reader};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    trace: String,
    source_issue: Option<String>,
    expected_top: Option<String>,
    healthy: bool,
    /// `real` (a recording) or `synthetic` (our generator).
    kind: String,
    /// How the label was established, independently of the engine.
    established_by: String,
    #[allow(dead_code)]
    notes: String,
}

/// Cases and hits of one kind.
#[derive(Default)]
struct Tally {
    cases: usize,
    correct: usize,
    labelled: usize,
    healthy: usize,
    false_chains: usize,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds the case's store in `dir`; None when a shared trace is not on this machine.
fn materialise(case: &Case, dir: &Path) -> Option<PathBuf> {
    let out = dir.join(format!(
        "{}.duckdb",
        case.name.replace([' ', '(', ')', '/'], "_")
    ));
    if let Some(spec) = case.trace.strip_prefix("demo:") {
        let (name, healthy) = match spec.strip_suffix(":healthy") {
            Some(n) => (n, true),
            None => (spec, false),
        };
        let s = Scenario::parse(name)
            .unwrap_or_else(|| panic!("{}: unknown scenario {name}", case.name));
        write_scenario(&out, s, healthy).expect("demo trace");
        return Some(out);
    }
    let file = case
        .trace
        .strip_prefix("shared:")
        .unwrap_or_else(|| panic!("{}: trace must be demo: or shared:", case.name));
    // CAUSEWAY_SHARED_DIR overrides ../shared/investigations (e.g. from a git worktree).
    let shared = std::env::var_os("CAUSEWAY_SHARED_DIR")
        .map_or_else(|| root().join("../shared/investigations"), PathBuf::from);
    let src = shared.join(file);
    if !src.exists() {
        eprintln!(
            "skipping {}: {} is not on this machine",
            case.name,
            src.display()
        );
        return None;
    }
    causeway_store::import::import(
        &[src],
        &out,
        false,
        &causeway_store::import::ImportOptions::default(),
        &mut |_| {},
    )
    .expect("import");
    Some(out)
}

#[test]
fn corpus_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("investigations/cases"))
        .expect("investigations/cases")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "corpus too small: {}", files.len());
    let mut tally: std::collections::BTreeMap<String, Tally> = Default::default();
    let mut skipped = 0;
    let mut failures = Vec::new();
    println!(
        "\n{:<48} {:<24} {:<24} {:>6}  OK",
        "CASE", "EXPECTED", "TOP", "CHAINS"
    );
    for f in &files {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(f).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(
            case.healthy,
            case.expected_top.is_none(),
            "{}: healthy cases have no expected_top",
            case.name
        );
        assert!(
            matches!(case.kind.as_str(), "real" | "synthetic"),
            "{}: kind is real or synthetic",
            case.name
        );
        assert!(
            case.established_by.len() >= 40,
            "{}: say how the label was established (the design, the published issue, or a manual analysis with its SQL)",
            case.name
        );
        let Some(db) = materialise(&case, dir.path()) else {
            skipped += 1;
            continue;
        };
        let r = Reader::open(&db).unwrap();
        let e = explain(&r, &ChainQuery::default()).unwrap();
        for c in &e.chains {
            let g =
                causeway_sqlguard::guard(&c.evidence_sql, r.policy(), None).unwrap_or_else(|e| {
                    panic!(
                        "{}: evidence SQL refused: {e}\n{}",
                        case.name, c.evidence_sql
                    )
                });
            let rows = r.query(&g, &QueryLimits::default()).unwrap_or_else(|e| {
                panic!(
                    "{}: evidence SQL failed: {e}\n{}",
                    case.name, c.evidence_sql
                )
            });
            assert!(
                !rows.rows.is_empty(),
                "{}: {} evidence SQL returns no row\n{}",
                case.name,
                c.detector,
                c.evidence_sql
            );
        }
        for b in &e.budgets {
            let gap = (b.bucket_sum_ns() - b.span_ns).abs();
            assert!(
                gap as f64 <= 0.01 * b.span_ns.max(1) as f64,
                "{}: the budget of {} (pid {}, tid {:?}) does not close: buckets {} ns, span {} ns",
                case.name,
                b.comm,
                b.pid,
                b.tid,
                b.bucket_sum_ns(),
                b.span_ns
            );
        }
        let top = e
            .chains
            .first()
            .map_or("-".to_string(), |c| c.detector.clone());
        let t = tally.entry(case.kind.clone()).or_default();
        t.cases += 1;
        let ok = if case.healthy {
            t.healthy += 1;
            t.false_chains += e.chains.len();
            e.chains.is_empty()
        } else {
            let hit = case.expected_top.as_deref() == Some(top.as_str());
            t.labelled += 1;
            t.correct += usize::from(hit);
            hit
        };
        if !ok {
            failures.push(format!(
                "{}: expected {:?}, got {:?}",
                case.name,
                case.expected_top,
                e.chains
                    .iter()
                    .map(|c| (&c.detector, c.time_lost_ns))
                    .collect::<Vec<_>>()
            ));
        }
        let name = match &case.source_issue {
            Some(i) => format!("{} [{i}]", case.name),
            None => case.name.clone(),
        };
        println!(
            "{:<48} {:<24} {:<24} {:>6}  {}",
            name,
            case.expected_top.as_deref().unwrap_or("(healthy)"),
            top,
            e.chains.len(),
            if ok { "yes" } else { "NO" }
        );
    }
    println!("\nskipped {skipped}");
    for (kind, t) in &tally {
        println!(
            "{kind}: cases {}, top-1 correct {}/{} ({:.0}%), healthy {} with {} false chains",
            t.cases,
            t.correct,
            t.labelled,
            t.correct as f64 * 100.0 / t.labelled.max(1) as f64,
            t.healthy,
            t.false_chains
        );
    }
    println!();
    assert!(failures.is_empty(), "{failures:#?}");
    for t in tally.values() {
        assert_eq!(t.correct, t.labelled);
        assert_eq!(t.false_chains, 0);
    }
}
