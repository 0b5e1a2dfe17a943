//! One answer everywhere: on every trace of the corpus (investigations/cases: the generator's
//! scenarios and healthy twins, the reference recordings in ../shared and our GPU recordings),
//! `causeway explain --json` and the MCP server's get_causal_chains structuredContent carry the
//! same chains in the same order, for the whole trace and for a window and a process; and
//! `causeway steps --json` and get_steps the same steps.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{ok, shared};
use crate::mcp::StdioServer;

/// Each corpus case's store in `dir`, named after the case.
fn corpus(dir: &Path) -> Vec<(String, PathBuf)> {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../investigations/cases");
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let case: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        let db = dir.join(format!("{name}.duckdb"));
        let d = db.to_str().unwrap();
        let trace = case["trace"].as_str().unwrap();
        if let Some(spec) = trace.strip_prefix("demo:") {
            let (scenario, healthy) = match spec.strip_suffix(":healthy") {
                Some(s) => (s, true),
                None => (spec, false),
            };
            let mut args = vec!["demo", scenario, "-o", d, "--json"];
            if healthy {
                args.push("--healthy");
            }
            ok(&args);
        } else if let Some(file) = trace.strip_prefix("recorded:") {
            // Our own GPU recordings, committed gzipped.
            let src = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../investigations/recorded")
                .join(file);
            let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(src).unwrap());
            std::io::copy(&mut gz, &mut std::fs::File::create(&db).unwrap()).unwrap();
        } else {
            let src = shared(trace.strip_prefix("shared:").unwrap());
            ok(&["import", src.to_str().unwrap(), "-o", d]);
        }
        out.push((name, db));
    }
    out
}

fn cli_explain(db: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["explain", "--db", db.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&args)).unwrap()
}

fn cli_chains(db: &Path, extra: &[&str]) -> Value {
    cli_explain(db, extra)["chains"].clone()
}

fn mcp_chains(s: &mut StdioServer, trace: &str, extra: Value) -> Value {
    mcp_result(s, trace, extra)["chains"].clone()
}

fn mcp_result(s: &mut StdioServer, trace: &str, extra: Value) -> Value {
    let mut args = json!({"trace": trace, "top_n": 20});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    let r = s.request(
        "tools/call",
        json!({"name": "get_causal_chains", "arguments": args}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    let sc = &r["result"]["structuredContent"];
    assert!(
        sc["total"].as_u64().unwrap() <= 20,
        "{trace}: more chains than a page"
    );
    sc.clone()
}

#[test]
fn explain_json_and_mcp_structured_content_agree_on_every_corpus_trace() {
    let dir = tempfile::tempdir().unwrap();
    let traces = corpus(dir.path());
    assert!(traces.len() >= 30, "{}", traces.len());
    let mut s = StdioServer::spawn(
        Command::new(env!("CARGO_BIN_EXE_causeway"))
            .args(["mcp", "--db"])
            .arg(&traces[0].1)
            .arg("--traces-dir")
            .arg(dir.path()),
    );
    s.initialize("2025-11-25");
    let mut with_chains = 0;
    let mut with_devices = 0;
    let mut with_steps = 0;
    for (name, db) in &traces {
        let full = cli_explain(db, &[]);
        let result = mcp_result(&mut s, name, json!({}));
        let (cli, mcp) = (&full["chains"], &result["chains"]);
        assert_eq!(
            cli, mcp,
            "{name}: explain --json and get_causal_chains differ"
        );
        // The device time: get_causal_chains gives the devices with a timeline (the host-side
        // estimate alone is in the budgets), with the figures explain gives.
        let measured: Vec<&Value> = full["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| !d["device"].is_null())
            .collect();
        let given: Vec<&Value> = result["devices"].as_array().unwrap().iter().collect();
        assert_eq!(measured, given, "{name}: the device time differs");
        with_devices += usize::from(!measured.is_empty());
        // Steps: `causeway steps --json` and get_steps give the same answer.
        let cli_steps: Value =
            serde_json::from_str(&ok(&["steps", "--db", db.to_str().unwrap(), "--json"])).unwrap();
        let r = s.request(
            "tools/call",
            json!({"name": "get_steps", "arguments": {"trace": name}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
        assert_eq!(
            cli_steps, r["result"]["structuredContent"],
            "{name}: steps --json and get_steps differ"
        );
        with_steps += usize::from(!cli_steps["series"].as_array().unwrap().is_empty());
        with_chains += usize::from(!cli.as_array().unwrap().is_empty());
    }
    assert!(with_chains >= 15, "{with_chains} traces with chains");
    assert!(
        with_devices >= 8,
        "{with_devices} traces with a device timeline"
    );
    assert!(with_steps >= 8, "{with_steps} traces with steps");
    // diff and compare_traces: the same comparison of two real profiler traces (HTA's
    // trace-diff pair), and of one against itself.
    let (a, b) = (
        "kineto-a100-rank3-of-8-control",
        "kineto-v100-rank1-of-2-test",
    );
    let path = |n: &str| traces.iter().find(|(x, _)| x == n).unwrap().1.clone();
    for (base, new) in [(a, b), (a, a)] {
        let cli: Value = serde_json::from_str(&ok(&[
            "diff",
            path(base).to_str().unwrap(),
            path(new).to_str().unwrap(),
            "--json",
        ]))
        .unwrap();
        let r = s.request(
            "tools/call",
            json!({"name": "compare_traces", "arguments": {"base": base, "new": new}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r}");
        assert_eq!(
            cli, r["result"]["structuredContent"],
            "{base} -> {new}: diff --json and compare_traces differ"
        );
    }

    // A window and a process of the vLLM recording: the same filters, the same answer.
    let vllm = "shared-vllm-37343-logprobs-amplification";
    let db = &traces.iter().find(|(n, _)| n == vllm).unwrap().1;
    for (cli_args, mcp_args) in [
        (vec!["--from", "+5s"], json!({"from": "+5s"})),
        (vec!["--since", "30s"], json!({"since": "30s"})),
        (vec!["--pid", "72801"], json!({"pid": 72801})),
    ] {
        let cli = cli_chains(db, &cli_args);
        assert_eq!(
            cli,
            mcp_chains(&mut s, vllm, mcp_args.clone()),
            "{cli_args:?} / {mcp_args}"
        );
    }
}
