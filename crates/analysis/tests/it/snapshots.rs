//! Snapshots of what people and agents read: the explain report (text and JSON) of demo
//! scenarios. Demo traces are deterministic, so any change here is a change in the engine.

use causeway_analysis::demo::{Scenario, write_scenario};
use causeway_analysis::report::render_text;
use causeway_analysis::{ChainQuery, ExplainOptions, explain_with};
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
fn incident_report() {
    let e = explain_demo(Scenario::Incident);
    insta::assert_snapshot!("incident_text", render_text(&e, false));
    let chains = serde_json::json!({ "chains": e.chains });
    insta::assert_json_snapshot!("incident_json", chains);
}

#[test]
fn sync_storm_report() {
    let e = explain_demo(Scenario::SyncStorm);
    insta::assert_snapshot!("sync_storm_text", render_text(&e, false));
    insta::assert_json_snapshot!("sync_storm_json", serde_json::json!({ "chains": e.chains }));
}

#[test]
fn healthy_report_says_so() {
    let e = explain_demo(Scenario::Healthy);
    let text = render_text(&e, false);
    assert!(e.chains.is_empty());
    assert!(text.contains("No causal chain"), "{text}");
    insta::assert_snapshot!("healthy_text", text);
}
