//! Runs every case of `investigations/cases/*.json` (demo scenarios, their healthy baselines,
//! reference traces imported from `../shared/investigations/` at test time and our own real-GPU
//! recordings in `investigations/recorded/`), prints an accuracy table (real recordings and
//! synthetic scenarios apart), and requires top-1 = 100% and zero chains on healthy cases, except
//! a miss a case lists with its reason (`engine_known_miss`), which the table shows. Every case
//! says how its label was established, and a recording's `checks` (SQL with bounds) prove its
//! problem is in the data; every chain's evidence SQL must pass the SQL guard and return rows on
//! the store; every time budget must close (its buckets sum to its span within 1%).

use std::path::{Path, PathBuf};

use causeway_analysis::detectors::{figures_not_in_rows, loss_in_rows};
use causeway_analysis::{ChainQuery, explain};
use causeway_demo::{Scenario, write_scenario};
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
    /// Why the engine gets this case wrong today; the case then may miss (and must: a fixed
    /// miss fails until the entry is removed).
    #[serde(default)]
    engine_known_miss: Option<String>,
    /// SQL on the store proving the label's premise, each value within its bounds.
    #[serde(default)]
    checks: Vec<Check>,
    /// Where the expected finding's calls come from, by the workload's design (a recording
    /// with stacks): its busiest call site and the least share of its calls with a stack.
    #[serde(default)]
    expected_site: Option<ExpectedSite>,
}

#[derive(Debug, Deserialize)]
struct ExpectedSite {
    /// The end of the site's `file:line`.
    site: String,
    /// Its function.
    function: String,
    min_share: f64,
}

#[derive(Debug, Deserialize)]
struct Check {
    what: String,
    sql: String,
    min: Option<f64>,
    max: Option<f64>,
}

/// Cases and hits of one kind.
#[derive(Default)]
struct Tally {
    cases: usize,
    correct: usize,
    labelled: usize,
    healthy: usize,
    false_chains: usize,
    known_misses: usize,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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
    if let Some(file) = case.trace.strip_prefix("recorded:") {
        // Our own recordings are committed gzipped (a DuckDB store compresses ~10x).
        let src = root().join("investigations/recorded").join(file);
        let gz = std::fs::File::open(&src)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", case.name, src.display()));
        let mut dst = std::fs::File::create(&out).unwrap();
        std::io::copy(&mut flate2::read::GzDecoder::new(gz), &mut dst)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", case.name, src.display()));
        return Some(out);
    }
    let file = case
        .trace
        .strip_prefix("shared:")
        .unwrap_or_else(|| panic!("{}: trace must be demo:, shared: or recorded:", case.name));
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
    causeway_import::import(
        &[src],
        &out,
        false,
        &causeway_import::ImportOptions::default(),
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
    // Traces and findings the invariants (crate::invariants) were checked on.
    let (mut invariant_traces, mut invariant_findings) = (0, 0);
    let mut failures = Vec::new();
    // Findings whose time lost was found in their evidence rows.
    let mut losses_in_rows = std::collections::BTreeSet::new();
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
        for c in &case.checks {
            let g = causeway_sqlguard::guard(&c.sql, r.policy(), None)
                .unwrap_or_else(|e| panic!("{}: check '{}' refused: {e}", case.name, c.what));
            let rows = r
                .query(&g, &QueryLimits::default())
                .unwrap_or_else(|e| panic!("{}: check '{}' failed: {e}", case.name, c.what));
            let v = rows
                .rows
                .first()
                .and_then(|row| row.first())
                .and_then(|v| v.as_f64());
            let v =
                v.unwrap_or_else(|| panic!("{}: check '{}' returned no number", case.name, c.what));
            assert!(
                c.min.is_none_or(|m| v >= m) && c.max.is_none_or(|m| v <= m),
                "{}: check '{}' = {v}, outside [{:?}, {:?}]: the recording no longer shows its premise",
                case.name,
                c.what,
                c.min,
                c.max
            );
        }
        let e = explain(&r, &ChainQuery::default()).unwrap();
        let broken = causeway_analysis::invariants::check(&r, &e).unwrap();
        assert!(
            broken.is_empty(),
            "{}: figures larger than the trace, or counts that disagree between commands:\n{}",
            case.name,
            broken.join("\n")
        );
        invariant_traces += 1;
        invariant_findings += e.chains.len();
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
            let missing = figures_not_in_rows(&c.summary, &rows.rows);
            assert!(
                missing.is_empty(),
                "{}: {} figures of the summary are not in its evidence rows: {missing:?}\n{}\n{}",
                case.name,
                c.detector,
                c.summary,
                c.evidence_sql
            );
            if let Some(found) = loss_in_rows(&c.detector, &c.summary, c.time_lost_ns, &rows.rows) {
                losses_in_rows.insert(c.detector.clone());
                assert!(
                    found,
                    "{}: {} lost {} ns, which is neither a cell nor a column's sum of its evidence rows\n{}\n{:?}",
                    case.name, c.detector, c.time_lost_ns, c.evidence_sql, rows.rows
                );
            }
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
        // Findings whose threads share one process's GPU idle speak once per process.
        let mut per_process = std::collections::HashSet::new();
        for c in e
            .chains
            .iter()
            .filter(|c| ["host_bound", "dataloader_starvation"].contains(&c.detector.as_str()))
        {
            let pid = c.scope.as_ref().map(|s| s.pid);
            assert!(
                per_process.insert((c.detector.clone(), c.node.clone(), pid)),
                "{}: two {} findings for process {pid:?}",
                case.name,
                c.detector
            );
        }
        if let Some(want) = &case.expected_site {
            let cs = e
                .chains
                .first()
                .and_then(|c| c.call_sites.as_ref())
                .unwrap_or_else(|| panic!("{}: the top finding names no call site", case.name));
            let best = cs.sites.first().expect("a site");
            let share = best.calls as f64 / cs.calls_with_stack.max(1) as f64;
            assert!(
                best.kind == "python"
                    && best.site.ends_with(&want.site)
                    && best.detail == want.function
                    && share >= want.min_share,
                "{}: the top finding's busiest call site is {} ({} of {} calls with a stack), not {} in {} with at least {:.0}%",
                case.name,
                best.words(),
                best.calls,
                cs.calls_with_stack,
                want.site,
                want.function,
                want.min_share * 100.0
            );
        }
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
        if let Some(why) = &case.engine_known_miss {
            assert!(
                !ok,
                "{}: listed as a known miss ({why}) but the engine now gets it right: remove engine_known_miss",
                case.name
            );
            t.known_misses += 1;
        } else if !ok {
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
            match (ok, &case.engine_known_miss) {
                (true, _) => "yes",
                (false, Some(_)) => "NO (known miss)",
                (false, None) => "NO",
            }
        );
    }
    println!("\nskipped {skipped}");
    println!(
        "invariants (no figure larger than the trace, one count everywhere): {invariant_traces} traces, {invariant_findings} findings checked, 0 violations"
    );
    println!("time lost found in the evidence rows: {losses_in_rows:?}");
    // The cases hold findings of ten of them (the lab's recordings hold the others:
    // slow_copies, network_wait and host_memory_pressure on a starving loop and the
    // peer-relative straggler).
    if skipped == 0 {
        assert_eq!(
            losses_in_rows.len(),
            10,
            "detectors whose loss was checked against their rows: {losses_in_rows:?}"
        );
    }
    for (kind, t) in &tally {
        println!(
            "{kind}: cases {}, top-1 correct {}/{} ({:.0}%), healthy {} with {} false chains, {} known misses",
            t.cases,
            t.correct,
            t.labelled,
            t.correct as f64 * 100.0 / t.labelled.max(1) as f64,
            t.healthy,
            t.false_chains,
            t.known_misses
        );
    }
    println!();
    assert!(failures.is_empty(), "{failures:#?}");
    // Every miss is either a failure above or a listed known miss.
}
