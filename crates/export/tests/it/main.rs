//! Perfetto export of real stores (demo scenarios written through the store writer, and the
//! imported vLLM reference trace): the output is valid trace-event JSON with a process track per
//! node and a thread track per thread, every event is there, off-CPU spans sit where they
//! happened, chains are joined to their evidence by flows, and the bytes are deterministic.

mod fixture;
mod gather;
mod nesting;
mod otlp;
mod stacks;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use causeway_analysis::{ChainQuery, explain};
use causeway_demo::{Scenario, write_scenario};
use causeway_export::{PerfettoOptions, write_perfetto};
use causeway_store::Reader;
use serde_json::Value;

fn demo(dir: &Path, s: Scenario) -> PathBuf {
    let p = dir.join(format!("{}.duckdb", s.name()));
    write_scenario(&p, s, false).unwrap();
    p
}

fn export(r: &Reader, opts: &PerfettoOptions) -> (Vec<u8>, Value) {
    let mut out = Vec::new();
    write_perfetto(r, opts, &mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).expect("valid JSON");
    (out, v)
}

/// Checks the trace-event format rules Perfetto and chrome://tracing rely on; returns the
/// number of slices and instants per (pid, tid).
fn validate(doc: &Value) -> BTreeMap<(u64, u64), usize> {
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let mut processes = BTreeSet::new();
    let mut threads = BTreeSet::new();
    let mut per_track: BTreeMap<(u64, u64), usize> = BTreeMap::new();
    let mut last_ts: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut flows: BTreeMap<u64, Vec<(String, f64)>> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        let pid = e["pid"].as_u64().expect("pid");
        let tid = e["tid"].as_u64().expect("tid");
        assert!(e["name"].is_string(), "{e}");
        if ph == "M" {
            match e["name"].as_str().unwrap() {
                "process_name" => assert!(processes.insert(pid), "two names for pid {pid}"),
                "thread_name" => assert!(threads.insert((pid, tid)), "two names for {pid}/{tid}"),
                "process_sort_index" => {}
                other => panic!("unknown metadata {other}"),
            }
            assert!(e["args"].is_object());
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= 0.0, "{e}");
        match ph {
            "X" => assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}"),
            "i" => assert!(matches!(e["s"].as_str(), Some("t" | "p" | "g")), "{e}"),
            "s" | "t" | "f" => {
                if ph != "s" {
                    assert_eq!(e["bp"], "e", "{e}");
                }
                flows
                    .entry(e["id"].as_u64().expect("flow id"))
                    .or_default()
                    .push((ph.to_string(), ts));
                continue;
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
        let track = (pid, tid);
        if e["cat"] != "chain" {
            let prev = last_ts.insert(track, ts).unwrap_or(0.0);
            assert!(ts >= prev, "events of {track:?} are not in time order");
        }
        *per_track.entry(track).or_default() += 1;
    }
    for track in per_track.keys() {
        assert!(processes.contains(&track.0), "pid {} has no name", track.0);
        assert!(threads.contains(track), "thread {track:?} has no name");
    }
    for (id, steps) in &flows {
        assert_eq!(
            steps.first().unwrap().0,
            "s",
            "flow {id} does not start with s"
        );
        assert_eq!(
            steps.last().unwrap().0,
            "f",
            "flow {id} does not end with f"
        );
        assert_eq!(steps.iter().filter(|s| s.0 == "s" || s.0 == "f").count(), 2);
        assert!(
            steps.windows(2).all(|w| w[0].1 <= w[1].1),
            "flow {id} goes back in time"
        );
    }
    per_track
}

#[test]
fn incident_exports_every_event_with_chains_joined_to_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&demo(dir.path(), Scenario::Incident)).unwrap();
    let chains = explain(&r, &ChainQuery::default()).unwrap().chains;
    assert!(!chains.is_empty());
    let opts = PerfettoOptions {
        chains: chains.clone(),
        ..PerfettoOptions::default()
    };
    let (bytes, doc) = export(&r, &opts);
    let per_track = validate(&doc);
    let total = doc["otherData"]["events_in_trace"].as_u64().unwrap();
    let chain_pid = 2;
    let traced: usize = per_track
        .iter()
        .filter(|(t, _)| t.0 != chain_pid)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(traced as u64, total, "every event is a slice or an instant");
    assert_eq!(doc["otherData"]["events_cut"], 0);
    let chain_slices: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "chain" && e["ph"] == "X")
        .collect();
    assert_eq!(chain_slices.len(), chains.len());
    assert_eq!(chain_slices[0]["args"]["id"], chains[0].id.as_str());
    // The top chain (CPU contention of the feeding thread) points at that thread.
    let flow_end = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ph"] == "f" && e["id"] == 1)
        .expect("the top chain has a flow to its evidence");
    assert_eq!(flow_end["pid"], 1);
    assert_eq!(flow_end["tid"], 4242);
    // Off-CPU time is drawn on the thread where it happened.
    assert!(
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["cat"] == "sched" && e["tid"] == 4242 && e["name"] == "off-CPU: preempted")
    );
    let (again, _) = export(&r, &opts);
    assert!(again == bytes, "the same trace gives the same bytes");
}

#[test]
fn each_node_is_a_process_track_and_the_cap_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&demo(dir.path(), Scenario::Straggler)).unwrap();
    let (_, doc) = export(&r, &PerfettoOptions::default());
    validate(&doc);
    let names: Vec<&str> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.len() >= 3 && names.iter().all(|n| n.starts_with("node ")),
        "{names:?}"
    );
    let (_, cut) = export(
        &r,
        &PerfettoOptions {
            max_events: 100,
            ..PerfettoOptions::default()
        },
    );
    let per_track = validate(&cut);
    assert_eq!(per_track.values().sum::<usize>(), 100);
    let total = cut["otherData"]["events_in_trace"].as_u64().unwrap();
    assert_eq!(
        cut["otherData"]["events_cut"].as_u64().unwrap(),
        total - 100
    );
    assert!(
        cut["otherData"]["note"]
            .as_str()
            .unwrap()
            .contains("first 100")
    );
}

/// The vLLM reference trace from ../shared imported into `dir`.
pub fn vllm(dir: &Path) -> PathBuf {
    shared_store(dir, "vllm-37343-logprobs-amplification.db")
}

/// A reference trace from ../shared (or $CAUSEWAY_SHARED_DIR) imported into `dir`.
pub fn shared_store(dir: &Path, name: &str) -> PathBuf {
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

#[test]
fn switch_in_stamped_nodes_draw_off_cpu_before_the_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let db = vllm(dir.path());
    let r = Reader::open(&db).unwrap();
    let node: String = r
        .prepare_trusted("SELECT min(node) FROM event_data")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    let (out_stamped, a) = export(&r, &PerfettoOptions::default());
    let (_, b) = export(
        &r,
        &PerfettoOptions {
            switch_in_nodes: BTreeSet::from([node]),
            ..PerfettoOptions::default()
        },
    );
    validate(&a);
    validate(&b);
    assert!(!out_stamped.is_empty());
    let offs = |d: &Value| -> Vec<(f64, f64)> {
        d["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "sched")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect()
    };
    let (sa, sb) = (offs(&a), offs(&b));
    assert_eq!(
        sa.len(),
        7_757,
        "every sched_switch of the vLLM trace is drawn"
    );
    for ((ta, da), (tb, db)) in sa.iter().zip(&sb) {
        assert_eq!(da, db);
        assert!(
            (tb + db - ta).abs() < 1e-3,
            "switch-in reading ends at the timestamp"
        );
    }
}

/// The Prometheus exposition of a real store: every histogram is cumulative, ends at +Inf with
/// its count, and the counts equal the stored events.
#[test]
fn prometheus_histograms_are_cumulative_and_exact() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&demo(dir.path(), Scenario::Incident)).unwrap();
    let text = causeway_export::prometheus::render(&r).unwrap();
    let mut series: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        if let Some(rest) = name_labels.strip_prefix("causeway_call_duration_seconds_bucket{") {
            let (labels, le) = rest.rsplit_once(",le=\"").unwrap();
            series
                .entry(labels.to_string())
                .or_default()
                .push((le.trim_end_matches("\"}").to_string(), value));
        } else if let Some(rest) = name_labels.strip_prefix("causeway_call_duration_seconds_count{")
        {
            counts.insert(rest.trim_end_matches('}').to_string(), value);
        }
    }
    assert!(!series.is_empty());
    let mut total = 0.0;
    for (labels, buckets) in &series {
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{labels}: not cumulative"
        );
        let (le, n) = buckets.last().unwrap();
        assert_eq!(le, "+Inf");
        assert_eq!(Some(n), counts.get(labels), "{labels}");
        total += n;
    }
    let stored: i64 = r
        .prepare_trusted("SELECT count(*) FROM event_data WHERE op_id <> 100")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(total as i64, stored);
}

/// The Prometheus text of the demo incident and of the fixture (kernel counts, drops, bytes,
/// off-CPU states), pinned byte for byte (checked equal to the renderer's output before its
/// queries moved into the shared gathering).
#[test]
fn prometheus_text_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&demo(dir.path(), Scenario::Incident)).unwrap();
    insta::assert_snapshot!(
        "prometheus_incident",
        causeway_export::prometheus::render(&r).unwrap()
    );
    let r = Reader::open(&fixture::fixture(dir.path())).unwrap();
    insta::assert_snapshot!(
        "prometheus_fixture",
        causeway_export::prometheus::render(&r).unwrap()
    );
}
