//! What agents read: every tool's text rendering on the vLLM reference trace, and the same
//! results rendered for people (the CLI's twins), under snapshot. Machine-dependent parts
//! (temporary paths, timings, this machine's check) are filtered or left out.

use causeway_tools::print::Audience;
use causeway_tools::{call, call_for};
use serde_json::json;

use crate::fixture::{ctx, shared};

/// Paths of temporary directories and query timings differ between runs.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r#""/tmp/[^"]*""#, r#""[TMP]""#),
        (r"/tmp/\S*", "[TMP]"),
        (r"\d+\.\d ms\)", "[MS] ms)"),
        (r"\(\d+ bytes\)", "([SIZE] bytes)"),
    ]
}

/// Each tool's arguments: windows, pages and a failing call, as an agent would send them.
fn calls() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    vec![
        ("stats", "get_trace_stats", json!({})),
        (
            "stats_pid_window",
            "get_trace_stats",
            json!({"pid": 72801, "since": "20s"}),
        ),
        ("chains", "get_causal_chains", json!({"limit": 2})),
        (
            "chains_stored",
            "get_causal_chains",
            json!({"limit": 1, "stored": true}),
        ),
        (
            "stacks",
            "get_stacks",
            json!({"op": "cudaLaunchKernel", "limit": 2, "max_frames": 4}),
        ),
        (
            "sql",
            "run_sql",
            json!({"sql": "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY n DESC, op", "limit": 5}),
        ),
        ("steps", "get_steps", json!({})),
        ("describe", "describe_trace", json!({})),
        ("list_traces", "list_traces", json!({})),
        ("demo", "run_demo", json!({"scenario": "sync-storm"})),
    ]
}

#[test]
fn every_tools_text_for_agents() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    insta::with_settings!({filters => filters()}, {
        for (label, name, args) in calls() {
            let out = call(&c, name, args.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_snapshot!(format!("agent_{label}"), out.text, &format!("{name} {args}"));
        }
    });
}

#[test]
fn the_same_results_for_people() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    insta::with_settings!({filters => filters()}, {
        for (label, name, args) in calls() {
            let out = call_for(&c, name, args.clone(), Audience::Person)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Agents' advice stays with agents.
            assert!(!out.text.contains(causeway_tools::DATA_NOTE), "{label}");
            assert!(!out.text.contains("call again"), "{label}");
            insta::assert_snapshot!(format!("person_{label}"), out.text, &format!("{name} {args}"));
        }
    });
}

/// `get_steps` on a real PyTorch profiler trace (rank 0 of two A100s with NCCL, recorded by
/// others), and `compare_traces` of it against itself, for agents and for people.
#[test]
fn steps_of_a_profiler_trace() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kineto.duckdb");
    causeway_import::import(
        &[shared("kineto/a100-rank0-of-2-nccl.pt.trace.json.gz")],
        &db,
        false,
        &causeway_import::ImportOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let c = causeway_tools::Context::new(db, vec![]);
    for (aud, label) in [
        (Audience::Agent, "agent_steps_kineto"),
        (Audience::Person, "person_steps_kineto"),
    ] {
        let out = call_for(&c, "get_steps", json!({"slowest": 2}), aud).unwrap();
        insta::assert_snapshot!(label, out.text);
    }
    // The run against itself: no difference beyond noise.
    for (aud, label) in [
        (Audience::Agent, "agent_diff_kineto_itself"),
        (Audience::Person, "person_diff_kineto_itself"),
    ] {
        let out = call_for(
            &c,
            "compare_traces",
            json!({"base": "kineto", "new": "kineto"}),
            aud,
        )
        .unwrap();
        insta::assert_snapshot!(label, out.text);
    }
}
