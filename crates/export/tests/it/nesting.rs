//! Perfetto slices nest on every track: an independent checker reads the JSON back and finds no
//! partially overlapping slices on any (pid, tid), every flow has its start and end, each step
//! lies in a written slice on its track, and lane splitting loses no slice; run on a fixture
//! built to overlap, the dataloader-starvation demo, the imported sample cluster (when
//! ../shared/investigations is here) and under `max_events` caps down to 0.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use causeway_analysis::chains::{Chain, Severity};
use causeway_analysis::{ChainQuery, explain};
use causeway_demo::{Scenario, write_scenario};
use causeway_export::{PerfettoOptions, PerfettoSummary, write_perfetto};
use causeway_store::{Event, ProcessInfo, Reader, Writer, WriterOptions};
use serde_json::Value;

use crate::fixture::{LAUNCH, MEMCPY, SCHED_SWITCH, SYNC, T0};

/// Pairs (a, b) on one track where b starts inside a and ends after it. Slices are taken by
/// start, longer first, so a slice sharing its parent's start nests instead of counting.
fn partial_overlaps(slices: &[(i64, i64)]) -> usize {
    let mut v = slices.to_vec();
    v.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
    let mut active: Vec<i64> = Vec::new();
    let mut n = 0;
    for (s, e) in v {
        active.retain(|&end| end > s);
        n += active.iter().filter(|&&end| end < e).count();
        active.push(e);
    }
    n
}

/// Microseconds from the JSON back to integer ns (the writer has ns precision).
fn ns(v: &Value) -> i64 {
    (v.as_f64().expect("number") * 1000.0).round() as i64
}

/// What the checker found in one export.
#[derive(Debug, Default)]
struct Checked {
    /// X slices of traced threads (chain slices left out).
    slices: usize,
    /// Flows with both ends.
    flows: usize,
    /// Tracks named "... (overlap k)".
    overlap_tracks: usize,
    /// Output tid of each flow step: (flow id, phase) -> (pid, tid).
    steps: BTreeMap<(u64, String), (u64, u64)>,
}

/// Asserts that every track is well nested and every flow complete and bound; returns counts.
fn check(doc: &Value) -> Checked {
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let mut tracks: BTreeMap<(u64, u64), Vec<(i64, i64)>> = BTreeMap::new();
    let mut named = BTreeSet::new();
    let mut out = Checked::default();
    for e in events {
        let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        if e["ph"] == "M" && e["name"] == "thread_name" {
            named.insert(track);
            if e["args"]["name"].as_str().unwrap().contains("(overlap ") {
                out.overlap_tracks += 1;
            }
        }
        if e["ph"] == "X" {
            let start = ns(&e["ts"]);
            tracks
                .entry(track)
                .or_default()
                .push((start, start + ns(&e["dur"])));
            if e["cat"] != "chain" {
                out.slices += 1;
            }
        }
    }
    for (track, slices) in &tracks {
        assert!(named.contains(track), "track {track:?} has no thread_name");
        assert_eq!(
            partial_overlaps(slices),
            0,
            "slices of {track:?} overlap partially"
        );
    }
    let mut flows: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        if !matches!(ph, "s" | "t" | "f") {
            continue;
        }
        let id = e["id"].as_u64().expect("flow id");
        let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let ts = ns(&e["ts"]);
        // Perfetto binds a step to the slice open at its ts and closes a slice at its end.
        let inside = tracks
            .get(&track)
            .is_some_and(|v| v.iter().any(|&(s, end)| s <= ts && ts < end));
        assert!(
            inside,
            "flow {id} step {ph} at {ts} ns on {track:?} lies in no slice"
        );
        flows.entry(id).or_default().push(ph);
        out.steps.insert((id, ph.to_string()), track);
    }
    for (id, phases) in &flows {
        assert_eq!(phases.iter().filter(|p| **p == "s").count(), 1, "flow {id}");
        assert_eq!(phases.iter().filter(|p| **p == "f").count(), 1, "flow {id}");
    }
    out.flows = flows.len();
    out
}

fn export(r: &Reader, opts: &PerfettoOptions) -> (PerfettoSummary, Value) {
    let mut bytes = Vec::new();
    let s = write_perfetto(r, opts, &mut bytes).unwrap();
    (s, serde_json::from_slice(&bytes).expect("valid JSON"))
}

/// The stored events the writer draws as slices (sched_switch, or a positive duration) among
/// the first `cap` by time, as intervals per (node, tid): read straight from the store.
fn input_slices(
    r: &Reader,
    switch_in: &BTreeSet<String>,
    cap: usize,
) -> BTreeMap<(String, u32), Vec<(i64, i64)>> {
    let mut stmt = r
        .prepare_trusted(
            "SELECT node, tid, op_id, timestamp, duration FROM event_data
             ORDER BY timestamp, node, seq LIMIT ?",
        )
        .unwrap();
    let rows: Vec<(String, u32, u16, i64, i64)> = stmt
        .query_map([cap as i64], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out: BTreeMap<(String, u32), Vec<(i64, i64)>> = BTreeMap::new();
    for (node, tid, op, ts, dur) in rows {
        let span = if op == SCHED_SWITCH {
            let start = if switch_in.contains(&node) {
                ts - dur
            } else {
                ts
            };
            (start, start + dur.max(0))
        } else if dur > 0 {
            (ts, ts + dur)
        } else {
            continue;
        };
        out.entry((node, tid)).or_default().push(span);
    }
    out
}

/// Partial overlaps per thread before lane splitting, and the slice count.
fn input_overlaps(r: &Reader, switch_in: &BTreeSet<String>, cap: usize) -> (usize, usize) {
    let per = input_slices(r, switch_in, cap);
    (
        per.values().map(|v| partial_overlaps(v)).sum(),
        per.values().map(Vec::len).sum(),
    )
}

/// Exports `r` with `opts`, checks it, and asserts no slice was lost to lane splitting.
fn export_checked(r: &Reader, opts: &PerfettoOptions) -> (PerfettoSummary, Checked, Value) {
    let (summary, doc) = export(r, opts);
    let c = check(&doc);
    let (_, n) = input_overlaps(r, &opts.switch_in_nodes, opts.max_events);
    assert_eq!(c.slices, n, "every stored slice is written once");
    assert_eq!(c.flows, summary.flows);
    assert_eq!(c.overlap_tracks, summary.overlap_tracks);
    (summary, c, doc)
}

fn ev(t: i64, duration: i64, op_id: u16, arg0: i64) -> Event {
    Event {
        timestamp: T0 + t,
        duration,
        pid: 300,
        tid: 300,
        comm: "overlapper".into(),
        op_id,
        arg0,
        ..Event::default()
    }
}

/// One thread whose calls overlap partially (an async copy outliving the sync that issued
/// it, a launch ending after both), plus proper nesting, a shared start, touching slices, an
/// off-CPU span across a call's end and an instant.
fn overlapping_store(dir: &Path) -> PathBuf {
    let path = dir.join("overlap.duckdb");
    let mut w = Writer::create(
        &path,
        WriterOptions {
            node: "gpu-a".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    w.upsert_process(&ProcessInfo {
        pid: 300,
        ppid: 1,
        comm: "overlapper".into(),
        cmdline: "overlapper".into(),
        first_seen_ns: T0,
        last_seen_ns: T0 + 10_000,
        rank: None,
        local_rank: None,
        world_size: None,
        cluster: String::new(),
        ..ProcessInfo::default()
    })
    .unwrap();
    for e in [
        ev(0, 1_000, SYNC, 0),             // P [0, 1000)
        ev(100, 100, LAUNCH, 1),           // inside P
        ev(500, 1_000, MEMCPY, 2),         // [500, 1500): partial with P
        ev(600, 100, LAUNCH, 3),           // inside P and the copy
        ev(900, 300, LAUNCH, 4),           // [900, 1200): partial with P, inside the copy
        ev(950, 650, MEMCPY, 5),           // [950, 1600): partial with P and the copy
        ev(2_000, 500, SYNC, 6),           // [2000, 2500)
        ev(2_000, 100, LAUNCH, 7),         // same start, shorter: nested
        ev(2_050, 1_000, SCHED_SWITCH, 0), // off-CPU [2050, 3050): partial with the sync
        ev(2_200, 0, LAUNCH, 8),           // an instant
        ev(4_000, 100, LAUNCH, 9),         // [4000, 4100)
        ev(4_100, 100, LAUNCH, 10),        // touching: a sibling
    ] {
        w.append(&e).unwrap();
    }
    w.finish().unwrap();
    path
}

/// A chain whose evidence is the two copies (the second one overlaps everything before it).
fn copies_chain() -> Chain {
    Chain {
        id: "copies".into(),
        detector: "test".into(),
        severity: Severity::High,
        summary: "copies".into(),
        root_cause: String::new(),
        explanation: String::new(),
        timeline: Vec::new(),
        recommendations: Vec::new(),
        evidence_sql:
            "SELECT timestamp, duration, tid FROM event_data WHERE op_id = 4 ORDER BY timestamp"
                .into(),
        time_lost_ns: 1,
        node: String::new(),
        origin: "engine".into(),
        detected_ns: 0,
        call_sites: None,
        scope: None,
        cost: None,
        per_step: None,
    }
}

/// The output tid of the thread named with `suffix`.
fn tid_named(doc: &Value, suffix: &str) -> u64 {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["name"] == "thread_name" && e["args"]["name"].as_str().unwrap().ends_with(suffix)
        })
        .unwrap_or_else(|| panic!("no thread named *{suffix}"))["tid"]
        .as_u64()
        .unwrap()
}

#[test]
fn partial_overlaps_go_to_overlap_tracks_and_flows_follow() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&overlapping_store(dir.path())).unwrap();
    let (before, n) = input_overlaps(&r, &BTreeSet::new(), usize::MAX >> 1);
    assert_eq!(n, 11, "the fixture's slices");
    // P/copy, P/launch 4, P/copy 5, copy/copy 5, launch 4/copy 5, sync/off-CPU, launch 7/off-CPU.
    assert_eq!(before, 7, "the fixture overlaps partially on one thread");
    let opts = PerfettoOptions {
        chains: vec![copies_chain()],
        ..PerfettoOptions::default()
    };
    let (summary, c, doc) = export_checked(&r, &opts);
    assert_eq!(c.overlap_tracks, 2, "{summary:?}");
    // The first copy and launch 4 nest on lane 2; copy 5 fits neither lane; the off-CPU span
    // goes on lane 2 again, which is free by then.
    let lane2 = tid_named(&doc, "(overlap 2)");
    let lane3 = tid_named(&doc, "(overlap 3)");
    assert_eq!(lane2, 10_000_300);
    let on = |tid: u64| -> Vec<String> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == tid)
            .map(|e| format!("{}@{}", e["name"].as_str().unwrap(), ns(&e["ts"])))
            .collect()
    };
    assert_eq!(
        on(lane2),
        [
            "cudaMemcpy@500",
            "cudaLaunchKernel@900",
            "off-CPU: preempted@2050"
        ]
    );
    assert_eq!(on(lane3), ["cudaMemcpy@950"]);
    assert_eq!(on(300).len(), 7, "the rest stays nested on the thread");
    // The flow's steps land in the copies, on the tracks the copies moved to.
    assert_eq!(c.flows, 1);
    assert_eq!(c.steps[&(1, "t".to_string())], (1, lane2));
    assert_eq!(c.steps[&(1, "f".to_string())], (1, lane3));

    // Capped after the first copy: the flow ends there; capped to nothing: no flow at all.
    let (_, c, _) = export_checked(
        &r,
        &PerfettoOptions {
            max_events: 3,
            ..opts.clone()
        },
    );
    assert_eq!(c.flows, 1);
    assert_eq!(c.steps[&(1, "f".to_string())], (1, lane2));
    assert!(!c.steps.contains_key(&(1, "t".to_string())));
    let (s, c, doc) = export_checked(
        &r,
        &PerfettoOptions {
            max_events: 0,
            ..opts.clone()
        },
    );
    assert_eq!((s.events, s.flows, c.flows, c.slices), (0, 0, 0, 0));
    assert!(
        !doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| matches!(e["ph"].as_str(), Some("s" | "t" | "f"))),
        "no flow without its ends"
    );
}

/// Exports a demo scenario with its chains, uncapped and under caps down to 0, through the
/// checker; returns the partial overlaps before splitting and the uncapped summary and check.
fn demo_checked(s: Scenario) -> (usize, PerfettoSummary, Checked) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("{}.duckdb", s.name()));
    write_scenario(&p, s, false).unwrap();
    let r = Reader::open(&p).unwrap();
    let opts = PerfettoOptions {
        chains: explain(&r, &ChainQuery::default()).unwrap().chains,
        ..PerfettoOptions::default()
    };
    let (before, n) = input_overlaps(&r, &BTreeSet::new(), opts.max_events);
    let (summary, checked, _) = export_checked(&r, &opts);
    eprintln!(
        "{}: {n} slices, {before} partial overlaps before splitting; after: 0, {} overlap \
         tracks, {} flows",
        s.name(),
        summary.overlap_tracks,
        checked.flows
    );
    for cap in [0, 1, 50, 1_000] {
        let (s, c, _) = export_checked(
            &r,
            &PerfettoOptions {
                max_events: cap,
                ..opts.clone()
            },
        );
        assert_eq!(s.events, (cap as u64).min(summary.events));
        assert!(c.flows <= checked.flows);
        if cap == 0 {
            assert_eq!(
                (c.flows, c.slices),
                (0, 0),
                "max_events 0: no flow, no slice"
            );
        }
    }
    (before, summary, checked)
}

#[test]
fn dataloader_demo_nests_and_caps_leave_no_dangling_flow() {
    let (before, summary, _) = demo_checked(Scenario::DataloaderStarvation);
    assert!(
        before > 0,
        "the demo has partially overlapping calls on a thread"
    );
    assert!(summary.overlap_tracks > 0);
}

#[test]
fn incident_flows_survive_lane_splitting_and_caps() {
    let (_, _, checked) = demo_checked(Scenario::Incident);
    assert!(
        checked.flows > 0,
        "the incident's chains point at their evidence"
    );
}

#[test]
fn sample_cluster_nests() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::shared_store(dir.path(), "sample-cluster.db");
    let r = Reader::open(&db).unwrap();
    // The nodes `causeway export` reads as switch-in stamped, as it does.
    let switch_in: BTreeSet<String> = causeway_analysis::convention::resume_nodes(&r)
        .unwrap()
        .split('\u{1f}')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let opts = PerfettoOptions {
        chains: explain(&r, &ChainQuery::default()).unwrap().chains,
        switch_in_nodes: switch_in,
        ..PerfettoOptions::default()
    };
    let (before, n) = input_overlaps(&r, &opts.switch_in_nodes, opts.max_events);
    eprintln!("sample cluster: {n} slices, {before} partial overlaps before splitting");
    assert!(before > 0, "the sample cluster overlaps partially");
    let (s, c, _) = export_checked(&r, &opts);
    eprintln!(
        "sample cluster: {} overlap tracks, {} flows after",
        s.overlap_tracks, c.flows
    );
    for cap in [0, 100] {
        export_checked(
            &r,
            &PerfettoOptions {
                max_events: cap,
                ..opts.clone()
            },
        );
    }
}
