//! Snapshots of what the engine answers for agents and exports: the chains of demo scenarios as
//! JSON. Demo traces are deterministic, so any change here is a change in the engine. (The
//! person's report of the same scenarios: crates/tools/tests/it/report.rs.)

use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
use causeway_demo::{Scenario, write_scenario};
use causeway_store::Reader;

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
fn incident_chains() {
    let e = explain_demo(Scenario::Incident);
    let chains = serde_json::json!({ "chains": e.chains });
    insta::assert_json_snapshot!("incident_json", chains);
}

#[test]
fn sync_storm_chains() {
    let e = explain_demo(Scenario::SyncStorm);
    insta::assert_json_snapshot!("sync_storm_json", serde_json::json!({ "chains": e.chains }));
}

#[test]
fn healthy_has_no_chain() {
    assert!(explain_demo(Scenario::Healthy).chains.is_empty());
}
