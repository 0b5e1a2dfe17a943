//! Snapshots of the report people read (`causeway explain`, `causeway demo`): demo scenarios'
//! findings rendered by the one printer the CLI calls. Demo traces are deterministic, so a change
//! here is a change in the engine or in the rendering.

use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
use causeway_demo::{Scenario, write_scenario};
use causeway_store::Reader;
use causeway_tools::print::explain::report;

fn explain_demo(s: Scenario) -> causeway_analysis::Explain {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("demo.duckdb");
    write_scenario(&p, s, false).unwrap();
    let r = Reader::open(&p).unwrap();
    explain_with(
        &r,
        &ChainQuery::default(),
        ExplainOptions { per_process: true },
    )
    .unwrap()
}

#[test]
fn incident_report() {
    let e = explain_demo(Scenario::Incident);
    insta::assert_snapshot!("incident_text", report(&e, false));
}

#[test]
fn sync_storm_report() {
    let e = explain_demo(Scenario::SyncStorm);
    insta::assert_snapshot!("sync_storm_text", report(&e, false));
}

#[test]
fn healthy_report_says_so() {
    let e = explain_demo(Scenario::Healthy);
    let text = report(&e, false);
    assert!(e.chains.is_empty());
    assert!(text.contains("No causal chain"), "{text}");
    insta::assert_snapshot!("healthy_text", text);
}
