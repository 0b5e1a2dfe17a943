//! An agent's data directory reads as one trace: `explain` over a scenario written as closed
//! segments gives the findings and budgets it gives over the same events in one file.

use causeway_analysis::{ChainQuery, explain};
use causeway_demo::{Scenario, write_scenario, write_scenario_segments};
use causeway_store::Reader;

#[test]
fn explain_over_segments_is_explain_over_one_file() {
    for s in [
        Scenario::CpuContention,
        Scenario::SyncStorm,
        Scenario::DataloaderStarvation,
        Scenario::Incident,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("one.duckdb");
        let segs = dir.path().join("segments");
        std::fs::create_dir(&segs).unwrap();
        let one = write_scenario(&file, s, false).unwrap();
        let split = write_scenario_segments(&segs, s, false, 3).unwrap();
        assert_eq!(
            one.events,
            split.events,
            "{}: every event in one segment",
            s.name()
        );
        let a = explain(&Reader::open(&file).unwrap(), &ChainQuery::default()).unwrap();
        let b = explain(&Reader::open(&segs).unwrap(), &ChainQuery::default()).unwrap();
        assert!(!a.chains.is_empty(), "{}: a finding to compare", s.name());
        let key = |e: &causeway_analysis::Explain| {
            e.chains
                .iter()
                .map(|c| (c.detector.clone(), c.summary.clone(), c.time_lost_ns))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&a), key(&b), "{}: the same findings", s.name());
        assert_eq!(a.budgets, b.budgets, "{}: the same budgets", s.name());
    }
}
