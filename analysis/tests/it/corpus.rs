//! Runs every case of `investigations/cases/*.json` (demo scenarios, their healthy baselines
//! and reference traces imported from `../shared/investigations/` at test time), prints an
//! accuracy table, and requires top-1 = 100% and zero chains on healthy cases. Every chain's
//! evidence SQL must pass the SQL guard and run on the store.

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
    #[allow(dead_code)]
    notes: String,
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
    let (mut cases, mut correct, mut healthy, mut false_chains, mut skipped) = (0, 0, 0, 0, 0);
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
            r.query(&g, &QueryLimits::default()).unwrap_or_else(|e| {
                panic!(
                    "{}: evidence SQL failed: {e}\n{}",
                    case.name, c.evidence_sql
                )
            });
        }
        let top = e
            .chains
            .first()
            .map_or("-".to_string(), |c| c.detector.clone());
        cases += 1;
        let ok = if case.healthy {
            healthy += 1;
            false_chains += e.chains.len();
            e.chains.is_empty()
        } else {
            let hit = case.expected_top.as_deref() == Some(top.as_str());
            correct += usize::from(hit);
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
    let labelled = cases - healthy;
    println!(
        "\ncases {cases} (skipped {skipped}), top-1 correct {correct}/{labelled} ({:.0}%), healthy {healthy} with {false_chains} false chains\n",
        correct as f64 * 100.0 / labelled.max(1) as f64
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(correct, labelled);
    assert_eq!(false_chains, 0);
}
