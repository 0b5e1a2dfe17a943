//! The CLI's grammar and errors as a newcomer meets them: one spelling per idea, errors that name
//! the real problem (with hints naming commands that exist), no advice meant for agents, and no
//! quietly wrong output (an empty table for a process the trace does not have, an import that
//! counts a trace twice).

use crate::common::{causeway, ok, scratch, shared, vllm_store};

/// stderr of a run that must fail with exit code 1 (2 for clap's usage errors).
fn fails(code: i32, args: &[&str]) -> String {
    let out = causeway(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "causeway {args:?}: {err}");
    assert!(out.stdout.is_empty(), "causeway {args:?} printed data");
    err
}

/// Every `causeway WORD` a message tells people to run names a real command.
fn hinted_commands_exist(text: &str) {
    let told = [
        "`causeway ",
        "run causeway ",
        "hint: causeway ",
        "with causeway ",
    ];
    for (i, m) in told.iter().flat_map(|t| text.match_indices(t)) {
        let word: String = text[i + m.len()..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        if word.is_empty() {
            continue;
        }
        let help = causeway(&[&word, "--help"]);
        assert!(
            help.status.success(),
            "the message names `causeway {word}`, which does not exist: {text}"
        );
    }
}

#[test]
fn a_reference_trace_passed_as_a_store_says_to_import_it() {
    let src = shared("vllm-37343-logprobs-amplification.db");
    for cmd in ["stats", "explain", "describe"] {
        let err = fails(1, &[cmd, "--db", src.to_str().unwrap()]);
        assert!(
            err.starts_with(&format!(
                "error: {}: this is a reference trace (SQLite)",
                src.display()
            )),
            "{err}"
        );
        assert!(
            err.contains("causeway import") && !err.contains("extension"),
            "{err}"
        );
        hinted_commands_exist(&err);
    }
    let err = fails(1, &["stats", "--db", "/nonexistent/t.duckdb"]);
    hinted_commands_exist(&err);
    assert!(err.contains("causeway traces"), "{err}");
    let junk = scratch().join("junk.duckdb");
    std::fs::write(&junk, "plain text, no database here").unwrap();
    let err = fails(1, &["stats", "--db", junk.to_str().unwrap()]);
    assert!(err.contains("not a DuckDB file"), "{err}");
}

#[test]
fn window_forms_parse_and_bad_ones_get_their_own_hint() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    // `-5m` is a value, not a flag.
    let tail: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db, "--from", "-10s", "--json"])).unwrap();
    let since: serde_json::Value =
        serde_json::from_str(&ok(&["stats", "--db", db, "--since", "10s", "--json"])).unwrap();
    assert_eq!(tail["window"], since["window"]);
    assert_eq!(tail["events"], since["events"]);
    ok(&["explain", "--db", db, "--from", "+1s", "--until", "-1s"]);
    ok(&["stacks", "--db", db, "--from", "-20s", "--limit", "1"]);

    let err = fails(1, &["stats", "--db", db, "--since", "garbage"]);
    assert!(
        err.starts_with("error: cannot read duration 'garbage'"),
        "{err}"
    );
    let hint = err.lines().nth(1).unwrap();
    assert!(hint.starts_with("hint: ") && hint.contains("5m"), "{err}");
    assert!(
        !hint.contains("RFC 3339"),
        "a duration's hint, not a time's: {err}"
    );
}

#[test]
fn an_unknown_process_node_or_window_is_an_error_not_an_empty_table() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    for cmd in ["stats", "explain", "stacks"] {
        let err = fails(1, &[cmd, "--db", db, "--pid", "999999"]);
        assert!(
            err.contains("process 999999 is not in this trace"),
            "{cmd}: {err}"
        );
        let err = fails(1, &[cmd, "--db", db, "--node", "no-such-node"]);
        assert!(
            err.contains("node 'no-such-node' is not in this trace"),
            "{cmd}: {err}"
        );
        let err = fails(1, &[cmd, "--db", db, "--from", "+1h"]);
        assert!(err.contains("is outside the trace"), "{cmd}: {err}");
    }
}

#[test]
fn limits_are_stated_and_enforced() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    for bad in ["0", "100000"] {
        let err = fails(2, &["query", "--db", db, "--limit", bad, "SELECT 1"]);
        assert!(err.contains("1..=10000"), "{err}");
    }
    let help = ok(&["query", "--help"]);
    assert!(help.contains("1-10,000"), "{help}");
    fails(2, &["explain", "--db", db, "--limit", "0"]);
    fails(2, &["stacks", "--db", db, "--limit", "21"]);
    // explain pages like get_causal_chains: --top is the old spelling of --limit.
    let first: serde_json::Value =
        serde_json::from_str(&ok(&["explain", "--db", db, "--top", "1", "--json"])).unwrap();
    assert!(first["chains"].as_array().unwrap().len() <= 1);
}

#[test]
fn paged_commands_take_the_cursor_they_print() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    let page1 = ok(&["stacks", "--db", db, "--limit", "1"]);
    assert!(page1.contains("more: run again with --cursor 1"), "{page1}");
    let page2 = ok(&["stacks", "--db", db, "--limit", "1", "--cursor", "1"]);
    let first_stack = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("stack "))
            .map(str::to_string)
    };
    assert_ne!(first_stack(&page1), first_stack(&page2));
    assert!(page2.contains("--cursor 2"), "{page2}");
    // People do not get the agents' advice.
    for text in [&page1, &page2] {
        assert!(!text.contains(causeway_tools::DATA_NOTE), "{text}");
        assert!(!text.contains("call again"), "{text}");
        assert!(!text.contains("causeway://"), "{text}");
    }
    let err = fails(1, &["stacks", "--db", db, "--op", "cudaLaunchKernal"]);
    assert!(!err.contains("causeway://"), "{err}");
}

#[test]
fn traces_lists_the_stores_it_can_open_without_a_db() {
    let dir = scratch().join("traces-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(vllm_store(), dir.join("vllm.duckdb")).unwrap();
    std::fs::write(dir.join("half-copied.duckdb"), b"not a database").unwrap();
    std::fs::copy(
        shared("sample-gpu-node-01.db"),
        dir.join("reference.duckdb"),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(&[
        "traces",
        "--traces-dir",
        dir.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let names: Vec<&str> = v["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["vllm"]);
    let err = fails(1, &["traces", "--traces-dir", "/nonexistent/dir"]);
    assert!(
        err.starts_with("error: /nonexistent/dir: no such directory"),
        "{err}"
    );
}

#[test]
fn the_same_trace_is_never_imported_twice() {
    let src = shared("sample-gpu-node-01.db");
    let src = src.to_str().unwrap();
    let out = scratch().join("twice.duckdb");
    let out_s = out.to_str().unwrap();
    let err = fails(1, &["import", src, src, "-o", out_s]);
    assert!(
        err.contains("the same trace") && err.contains("twice"),
        "{err}"
    );
    let copy = scratch().join("copy-of-node-01.db");
    std::fs::copy(src, &copy).unwrap();
    let err = fails(1, &["import", src, copy.to_str().unwrap(), "-o", out_s]);
    assert!(err.contains("identical contents"), "{err}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn outputs_are_dash_o_everywhere_and_the_old_db_spelling_warns() {
    let src = shared("sample-gpu-node-02.db");
    let new = scratch().join("o-new.duckdb");
    ok(&[
        "import",
        src.to_str().unwrap(),
        "--output",
        new.to_str().unwrap(),
    ]);
    let old = scratch().join("o-old.duckdb");
    let out = causeway(&[
        "import",
        src.to_str().unwrap(),
        "--db",
        old.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("deprecated") && err.contains("-o/--output"),
        "{err}"
    );
    assert!(old.exists());
    for cmd in ["import", "demo", "merge", "export", "report"] {
        let help = ok(&[cmd, "--help"]);
        assert!(help.contains("-o, --output"), "{cmd}: {help}");
    }
    // An imported node was traced elsewhere: it carries no host name of this machine (OTLP
    // host.name falls back to the node's own name).
    let hosts = ok(&[
        "query",
        "--db",
        new.to_str().unwrap(),
        "--json",
        "SELECT node, hostname FROM nodes",
    ]);
    let v: serde_json::Value = serde_json::from_str(&hosts).unwrap();
    for row in v["rows"].as_array().unwrap() {
        assert_eq!(row[1], "", "{row}");
    }
}

/// `(command, flags)` of every `causeway COMMAND ... --flag` the document shows in code spans
/// (table rows and examples): what it tells people they can type.
fn documented_flags(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for span in doc.split('`').skip(1).step_by(2) {
        let Some(rest) = span.trim_start_matches("sudo ").strip_prefix("causeway ") else {
            continue;
        };
        let command: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        // Everything after `--` is the traced command's.
        let own = rest.split(" -- ").next().unwrap_or(rest);
        let flags = own
            .split(|c: char| c.is_whitespace() || "[]|(),=/".contains(c))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches(['.', ':']).to_string())
            .collect();
        out.push((command, flags));
    }
    out
}

#[test]
fn documented_flags_are_the_ones_clap_takes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut help = std::collections::HashMap::new();
    let mut checked = 0;
    for doc in ["README.md", "docs/cli.md", "docs/mcp.md", "docs/collect.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for (command, flags) in documented_flags(&text) {
            let h: &String = help.entry(command.clone()).or_insert_with(|| {
                let out = causeway(&[&command, "--help"]);
                assert!(
                    out.status.success(),
                    "{doc} documents `causeway {command}`, which does not exist"
                );
                String::from_utf8(out.stdout).unwrap()
            });
            for f in flags {
                // A flag or one of its visible aliases, as --help lists them.
                let known = h.contains(&format!("{f} "))
                    || h.contains(&format!("{f},"))
                    || h.contains(&format!("{f}]"))
                    || h.contains(&format!("{f}\n"));
                assert!(
                    known,
                    "{doc}: `causeway {command} {f}` is not a flag of {command}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} documented flags found");
}

/// The tables people read, on the vLLM reference trace (stats and query have their own).
#[test]
fn cli_tables_of_the_vllm_trace() {
    let db = vllm_store();
    let db = db.to_str().unwrap();
    for (name, args) in [
        ("explain_vllm", vec!["explain", "--db", db]),
        (
            "explain_breakdown_vllm",
            vec!["explain", "--db", db, "--breakdown"],
        ),
        ("describe_vllm", vec!["describe", "--db", db]),
        (
            "stacks_vllm",
            vec![
                "stacks",
                "--db",
                db,
                "--op",
                "cudaLaunchKernel",
                "--limit",
                "2",
                "--max-frames",
                "4",
            ],
        ),
        (
            "stats_pid_window_vllm",
            vec!["stats", "--db", db, "--pid", "72801", "--from", "-20s"],
        ),
    ] {
        insta::assert_snapshot!(name, ok(&args));
    }
}

/// Every error type gives its hint through the one registry `main` asks (`causeway_hint::of`),
/// bare or under context: the report's errors were missing from the hand-kept list it replaced.
#[test]
fn every_error_gives_its_hint_through_one_registry() {
    use causeway_hint::Hint;
    fn through_main(e: anyhow::Error, own: Option<String>, what: &str) {
        assert!(own.is_some(), "{what}: no hint of its own");
        assert_eq!(causeway_hint::of(&e), own, "{what}");
        let wrapped = e.context("while answering");
        assert_eq!(causeway_hint::of(&wrapped), own, "{what}, under a context");
    }
    let Err(store) = causeway_store::Reader::open(std::path::Path::new("/nonexistent/t.duckdb"))
    else {
        panic!("a store that does not exist opened");
    };
    let exists = || causeway_store::StoreError::Exists {
        path: "/tmp/r.html".into(),
    };
    let own = causeway_report::ReportError::Write(exists()).hint();
    through_main(
        anyhow::Error::new(causeway_report::ReportError::Write(exists())),
        own,
        "ReportError",
    );
    let own = store.hint();
    through_main(anyhow::Error::new(store), own, "StoreError");
    let time = "yesterday"
        .parse::<causeway_analysis::TimeRef>()
        .unwrap_err();
    let own = time.hint();
    through_main(anyhow::Error::new(time), own, "TimeError");
    let tool = causeway_tools::ToolError::UnknownTool("drop_everything".into());
    let own = tool.hint();
    through_main(anyhow::Error::new(tool), own, "ToolError");
    let refused = causeway_sqlguard::guard(
        "DROP TABLE events",
        &causeway_sqlguard::Policy::new(["events"]),
        None,
    )
    .unwrap_err();
    let own = refused.hint();
    through_main(anyhow::Error::new(refused), own, "Rejection");
    let no_steps = causeway_analysis::diff::NoSteps {
        trace: "base".into(),
    };
    let own = no_steps.hint();
    through_main(anyhow::Error::new(no_steps), own, "NoSteps");
}

/// A real PyTorch profiler trace with its `ProfilerStep#N` events taken out (a trace without
/// step annotations): the import stores the steps inferred from the training thread's cadence
/// (source `inferred`, as many as the profiler's 5, which `steps` reports too), and leaves the
/// node as imported (the first version re-registered it as recorded, and the engine reads an
/// imported node's switches by its origin).
#[test]
fn an_import_without_profiler_steps_stores_the_inferred_ones_and_keeps_its_node() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(shared("kineto/a100-rank0-of-16.pt.trace.json.gz")).unwrap(),
    )
    .read_to_string(&mut text)
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array_mut().unwrap();
    let before = events.len();
    events.retain(|e| {
        !e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("ProfilerStep#"))
    });
    assert_eq!(
        before - events.len(),
        5,
        "the trace's 5 ProfilerStep events"
    );
    let src = dir.path().join("unmarked.pt.trace.json");
    std::fs::write(&src, serde_json::to_vec(&v).unwrap()).unwrap();
    let db = dir.path().join("t.duckdb");
    let d = db.to_str().unwrap();
    ok(&["import", src.to_str().unwrap(), "-o", d]);
    let count = |sql: &str| -> String {
        let out = ok(&["query", "--db", d, "--json", sql]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["rows"][0][0].to_string()
    };
    assert_eq!(
        count("SELECT count(*) FROM steps WHERE source = 'inferred'"),
        "5"
    );
    assert_eq!(
        count("SELECT count(*) FROM steps WHERE source <> 'inferred'"),
        "0"
    );
    assert_eq!(
        count("SELECT count(*) FROM nodes WHERE origin LIKE 'imported%'"),
        "1"
    );
    let steps: serde_json::Value =
        serde_json::from_str(&ok(&["steps", "--db", d, "--json"])).unwrap();
    let s = &steps["series"][0];
    assert_eq!(s["source"], "inferred", "{steps}");
    assert_eq!(s["count"], 5, "{steps}");
}
