//! `import`, `stats` and `query` as a person runs them: output snapshots, JSON shape, windows,
//! and bad input with clear errors and non-zero exits.

use crate::common::{causeway, ok, scratch, shared, vllm_store};

#[test]
fn stats_table_of_the_vllm_trace() {
    let db = vllm_store();
    let text = ok(&["stats", "--db", db.to_str().unwrap()]);
    insta::assert_snapshot!("stats_vllm", text);
}

#[test]
fn stats_json_has_the_documented_shape_and_published_figures() {
    let db = vllm_store();
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(v["events"], 10_869);
    assert!(v["first_ns"].as_i64().unwrap() < v["last_ns"].as_i64().unwrap());
    let ops = v["ops"].as_array().unwrap();
    let find = |name: &str| ops.iter().find(|o| o["op"] == name).unwrap().clone();
    let launch = find("cudaLaunchKernel");
    assert_eq!(launch["source"], "CUDA");
    assert_eq!(launch["count"], 550);
    assert_eq!(launch["p50_ns"], 20_300);
    assert_eq!(launch["p99_ns"], 5_079_382);
    for key in ["p95_ns", "max_ns", "mean_ns", "total_ns"] {
        assert!(launch[key].is_number(), "{key}");
    }
    assert_eq!(find("sched_switch")["count"], 7_757);
    assert_eq!(find("cudaDeviceSynchronize")["p99_ns"], 4_720_968);
    assert_eq!(find("cudaMemcpyAsync")["count"], 734);
    assert_eq!(find("cuLaunchKernel")["count"], 1_672);
    assert_eq!(v["drops"]["total"], 0);
}

#[test]
fn windows_are_anchored_to_the_trace_end() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    let all: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db, "--json"])).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db, "--since", "10s", "--json"])).unwrap();
    let end = all["trace_last_ns"].as_i64().unwrap();
    assert_eq!(last["window"]["until_ns"].as_i64().unwrap(), end);
    assert_eq!(
        last["window"]["from_ns"].as_i64().unwrap(),
        end - 10_000_000_000
    );
    assert!(last["events"].as_u64().unwrap() < all["events"].as_u64().unwrap());
    assert!(last["first_ns"].as_i64().unwrap() >= end - 10_000_000_000);

    let first: serde_json::Value = serde_json::from_str(&ok(&[
        "stats", "--db", db, "--from", "+0s", "--until", "+10s", "--json",
    ]))
    .unwrap();
    let begin = all["trace_first_ns"].as_i64().unwrap();
    assert_eq!(
        first["window"]["until_ns"].as_i64().unwrap(),
        begin + 10_000_000_000
    );

    let pid: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db, "--pid", "72801", "--json"])).unwrap();
    assert_eq!(pid["pid"], 72801);
    assert!(pid["events"].as_u64().unwrap() < all["events"].as_u64().unwrap());
}

#[test]
fn query_runs_guarded_sql() {
    let db = vllm_store();
    let text = ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "SELECT op, count(*) AS calls FROM events WHERE source = 'CUDA' GROUP BY op ORDER BY calls DESC, op",
    ]);
    insta::assert_snapshot!("query_cuda_ops", text);
    let json: serde_json::Value = serde_json::from_str(&ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "--limit",
        "3",
        "SELECT id FROM events ORDER BY timestamp",
    ]))
    .unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), 3);
    assert_eq!(json["truncated"], true);
}

#[test]
fn query_refuses_writes_with_a_reason_and_a_hint() {
    let db = vllm_store();
    let out = causeway(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "DROP TABLE event_data",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: query refused"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn import_refuses_to_overwrite_and_names_bad_files() {
    let src = shared("sample-gpu-node-01.db");
    let out = scratch().join("n1.duckdb");
    let out_s = out.to_str().unwrap();
    ok(&["import", src.to_str().unwrap(), "-o", out_s]);
    let again = causeway(&["import", src.to_str().unwrap(), "-o", out_s]);
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("already exists") && err.contains("--force"),
        "{err}"
    );
    ok(&["import", src.to_str().unwrap(), "-o", out_s, "--force"]);

    let junk = scratch().join("junk.db");
    std::fs::write(&junk, "not sqlite").unwrap();
    let bad = causeway(&[
        "import",
        junk.to_str().unwrap(),
        "-o",
        scratch().join("j.duckdb").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(
        err.lines().next().unwrap(),
        format!("error: {}: not an SQLite database", junk.display())
    );
    assert!(err.lines().nth(1).unwrap().starts_with("hint: "), "{err}");
    assert!(!scratch().join("j.duckdb").exists());
}

#[test]
fn stats_on_a_missing_or_foreign_file_fails_clearly() {
    let out = causeway(&["stats", "--db", "/nonexistent/trace.duckdb"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/trace.duckdb: no such trace file"),
        "{err}"
    );
    let bad_time = causeway(&[
        "stats",
        "--db",
        vllm_store().to_str().unwrap(),
        "--from",
        "yesterday",
    ]);
    assert_eq!(bad_time.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_time.stderr).contains("cannot read time 'yesterday'"));
    let usage = causeway(&["stats"]);
    assert_eq!(usage.status.code(), Some(2), "clap usage errors exit 2");
}

#[test]
fn export_writes_perfetto_json_atomically_and_refuses_to_overwrite() {
    let db = vllm_store();
    let out = scratch().join("vllm.perfetto.json");
    let _ = std::fs::remove_file(&out);
    let args = [
        "export",
        "--db",
        db.to_str().unwrap(),
        "--format",
        "perfetto",
        "-o",
        out.to_str().unwrap(),
    ];
    let run = causeway(&args);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("exported 10869 events"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("valid JSON");
    assert_eq!(doc["otherData"]["events_in_trace"], 10869);
    // The imported trace stamps sched_switch at switch-in: its chains and spans are drawn.
    assert!(
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["cat"] == "chain")
    );
    let again = causeway(&args);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--force"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let missing = causeway(&[
        "export",
        "--db",
        "/nonexistent.duckdb",
        "-o",
        scratch().join("x.json").to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    assert!(!scratch().join("x.json").exists(), "nothing is left behind");
    // (Only this test's files: other tests write their own temporaries in the same directory.)
    let leftovers: Vec<_> = std::fs::read_dir(scratch())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.contains(".tmp-") && (n.contains("x.json") || n.contains("vllm.perfetto.json"))
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn merge_takes_reference_node_traces_and_refuses_a_source_as_output() {
    let out = scratch().join("merged-cluster.duckdb");
    let _ = std::fs::remove_file(&out);
    let srcs: Vec<String> = ["01", "02", "03"]
        .iter()
        .map(|n| {
            shared(&format!("sample-gpu-node-{n}.db"))
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut args = vec!["merge"];
    args.extend(srcs.iter().map(String::as_str));
    args.extend(["-o", out.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(report["events"], 600);
    let nodes: Vec<&str> = report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
        })
        .collect();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert_eq!(report["sources"][0]["path"], srcs[0].as_str());
    let stats = ok(&["stats", "--db", out.to_str().unwrap(), "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["events"], 600);
    assert_eq!(stats["nodes"].as_array().unwrap().len(), 3);
    let refused = causeway(&[
        "merge",
        out.to_str().unwrap(),
        &srcs[0],
        "-o",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("one of the sources") && err.contains("hint:"),
        "{err}"
    );
}

/// An import interrupted by SIGINT or SIGTERM leaves no temporary file behind.
#[test]
fn an_interrupted_import_leaves_nothing() {
    let sources: Vec<String> = [
        "vllm-37343-logprobs-amplification.db",
        "sample-cluster.db",
        "sample-gpu-node-01.db",
        "sample-gpu-node-02.db",
        "sample-gpu-node-03.db",
    ]
    .iter()
    .map(|n| shared(n).to_string_lossy().into_owned())
    .collect();
    for signal in [nix::sys::signal::SIGINT, nix::sys::signal::SIGTERM] {
        let mut caught = false;
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("out.duckdb");
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
                .arg("import")
                .args(&sources)
                .arg("--db")
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let started = std::time::Instant::now();
            let temp = loop {
                let found = std::fs::read_dir(dir.path())
                    .unwrap()
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().contains(".tmp-"));
                if found || started.elapsed() > std::time::Duration::from_secs(20) {
                    break found;
                }
                if child.try_wait().unwrap().is_some() {
                    break false;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            };
            if !temp {
                let _ = child.wait();
                continue;
            }
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
            let output = child.wait_with_output().unwrap();
            if output.status.success() {
                // It finished before the signal arrived: try again.
                continue;
            }
            caught = true;
            let left: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert!(left.is_empty(), "{signal:?} left {left:?}");
            let err = String::from_utf8_lossy(&output.stderr);
            assert!(
                err.contains("interrupted; removed 1 unfinished file"),
                "{err}"
            );
            break;
        }
        assert!(caught, "{signal:?}: the import was never caught running");
    }
}

#[test]
fn explain_breakdown_is_the_budgets_of_explain() {
    let db = vllm_store();
    let d = db.to_str().unwrap();
    let text = ok(&["explain", "--db", d, "--breakdown"]);
    assert!(
        text.starts_with("where the time went") && text.contains("VLLM::EngineCor"),
        "{text}"
    );
    assert!(!text.contains("root cause"), "only the budgets: {text}");
    let budgets: serde_json::Value =
        serde_json::from_str(&ok(&["explain", "--db", d, "--breakdown", "--json"])).unwrap();
    let full: serde_json::Value =
        serde_json::from_str(&ok(&["explain", "--db", d, "--json"])).unwrap();
    assert_eq!(budgets, full["budgets"]);
    assert!(!budgets.as_array().unwrap().is_empty());
}

/// Issue 50: the report for people points at each finding's evidence instead of printing
/// kilobytes of SQL; `--evidence N` prints finding N's, the same text `--json` carries, and
/// `-v` puts every finding's SQL back in the report.
#[test]
fn explain_points_at_the_evidence_and_prints_it_on_request() {
    let db = vllm_store();
    let d = db.to_str().unwrap();
    let text = ok(&["explain", "--db", d]);
    let full: serde_json::Value =
        serde_json::from_str(&ok(&["explain", "--db", d, "--json"])).unwrap();
    let chains = full["chains"].as_array().unwrap();
    assert!(!chains.is_empty());
    assert!(
        text.contains("evidence: causeway explain --evidence 1 ") && !text.contains("WITH "),
        "{text}"
    );
    for (i, c) in chains.iter().enumerate() {
        let sql = ok(&["explain", "--db", d, "--evidence", &(i + 1).to_string()]);
        assert_eq!(sql.trim_end(), c["evidence_sql"].as_str().unwrap());
        // Ready for `causeway query`.
        ok(&["query", "--db", d, "--json", sql.trim_end()]);
    }
    let verbose = ok(&["explain", "--db", d, "-v"]);
    assert!(
        verbose.contains(chains[0]["evidence_sql"].as_str().unwrap()),
        "{verbose}"
    );
    let past = causeway(&["explain", "--db", d, "--evidence", "99"]);
    let err = String::from_utf8_lossy(&past.stderr);
    assert!(!past.status.success() && past.stdout.is_empty(), "{err}");
    assert!(
        err.contains("--evidence 99: the report has") && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn from_first_sql_with_a_where_clause_runs() {
    let db = vllm_store();
    let out = ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "FROM events WHERE op = 'cudaLaunchKernel' ORDER BY duration DESC LIMIT 2",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 2, "{v}");
}
