//! The registry as agents see it: listing order, annotations, the tools/list token budget, a
//! golden snapshot of every schema, and argument validation before handlers run.

use causeway_hint::Hint as _;
use causeway_tools::budget::{TOOLS_LIST_TOKENS, tokens};
use causeway_tools::{ToolError, call, tool_specs};
use serde_json::json;

use crate::fixture::ctx;

/// What a server without a fleet lists, in the shape of an MCP tools/list answer.
fn listing() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    listing_of(causeway_tools::listed(&ctx(dir.path())))
}

/// What a server started with --nodes lists (every tool, `query_fleet` included).
fn fleet_listing() -> serde_json::Value {
    listing_of(tool_specs().iter())
}

fn listing_of<'a>(specs: impl Iterator<Item = &'a causeway_tools::ToolSpec>) -> serde_json::Value {
    let tools: Vec<serde_json::Value> = specs
        .map(|s| {
            json!({
                "name": s.name,
                "title": s.title,
                "description": s.description,
                "inputSchema": s.input_schema,
                "outputSchema": s.output_schema,
                "annotations": {
                    "readOnlyHint": s.annotations.read_only,
                    "idempotentHint": s.annotations.idempotent,
                    "openWorldHint": s.annotations.open_world,
                },
            })
        })
        .collect();
    json!({ "tools": tools })
}

#[test]
fn tools_are_listed_in_a_fixed_order_and_read_only() {
    let names: Vec<&str> = tool_specs().iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "get_trace_stats",
            "get_causal_chains",
            "get_stacks",
            "get_steps",
            "compare_traces",
            "run_sql",
            "describe_trace",
            "list_traces",
            "get_check",
            "run_demo",
            "get_test_report",
            "query_fleet"
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let listed: Vec<&str> = causeway_tools::listed(&ctx(dir.path()))
        .map(|s| s.name)
        .collect();
    assert_eq!(
        listed,
        names[..names.len() - 1],
        "query_fleet needs a fleet"
    );
    for s in tool_specs() {
        // query_fleet reads other machines, whose traces grow: open world, not idempotent.
        let fleet = s.name == "query_fleet";
        assert!(
            s.annotations.read_only
                && s.annotations.idempotent != fleet
                && s.annotations.open_world == fleet,
            "{}",
            s.name
        );
        assert_eq!(s.input_schema["type"], "object", "{}", s.name);
        assert_eq!(
            s.input_schema["additionalProperties"], false,
            "{}: unknown fields must be refused",
            s.name
        );
        assert_eq!(s.output_schema["type"], "object", "{}", s.name);
        for (field, p) in s.input_schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert!(
                p["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{}.{field} has no description",
                s.name
            );
        }
    }
}

#[test]
fn tools_list_fits_the_token_budget() {
    let text = serde_json::to_string(&listing()).unwrap();
    let t = tokens(&text);
    eprintln!(
        "tools/list without a fleet: {t} tokens ({} chars)",
        text.len()
    );
    assert!(
        t < TOOLS_LIST_TOKENS,
        "tools/list is {t} tokens ({} chars), budget {TOOLS_LIST_TOKENS}",
        text.len()
    );
}

#[test]
fn tools_list_with_a_fleet_fits_the_token_budget() {
    let text = serde_json::to_string(&fleet_listing()).unwrap();
    let t = tokens(&text);
    eprintln!(
        "tools/list with query_fleet: {t} tokens ({} chars)",
        text.len()
    );
    assert!(
        t < TOOLS_LIST_TOKENS,
        "tools/list with query_fleet is {t} tokens ({} chars), budget {TOOLS_LIST_TOKENS}",
        text.len()
    );
}

#[test]
fn null_arguments_mean_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let r = call(
        &ctx(dir.path()),
        "get_causal_chains",
        json!({"pid": null, "since": null, "top_n": 2}),
    )
    .expect("nulls are dropped before validation");
    assert!(r.structured["chains"].as_array().unwrap().len() <= 2);
}

#[test]
fn query_fleet_without_a_fleet_says_how_to_configure_one() {
    let dir = tempfile::tempdir().unwrap();
    match call(
        &ctx(dir.path()),
        "query_fleet",
        json!({"action": "overview"}),
    ) {
        Err(e) => assert!(
            e.hint().unwrap_or_default().contains("--nodes"),
            "{:?}",
            e.hint()
        ),
        Ok(_) => panic!("no fleet is configured"),
    }
}

#[test]
fn tools_list_snapshot() {
    insta::assert_json_snapshot!("tools_list", listing());
}

fn invalid(name: &str, args: serde_json::Value) -> (String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    match call(&ctx(dir.path()), name, args) {
        Err(ToolError::InvalidArgument { field, rule, hint }) => (field, rule, hint),
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}

#[test]
fn arguments_are_validated_against_the_schema_before_the_handler() {
    let (field, rule, hint) = invalid("get_causal_chains", json!({"top_n": 0}));
    assert_eq!(field, "/top_n");
    assert!(rule.contains("minimum of 1"), "{rule}");
    assert!(hint.contains("get_causal_chains"), "{hint}");

    let (field, rule, _) = invalid("get_trace_stats", json!({"pid": "1234"}));
    assert_eq!(field, "/pid");
    assert!(rule.contains("integer"), "{rule}");

    let (field, rule, _) = invalid("get_trace_stats", json!({"pidd": 1}));
    assert_eq!(field, "(arguments)");
    assert!(rule.contains("pidd"), "{rule}");

    let (field, rule, _) = invalid("run_sql", json!({}));
    assert_eq!(field, "(arguments)");
    assert!(rule.contains("sql"), "{rule}");

    let (field, _, _) = invalid("get_stacks", json!({"max_frames": 1000}));
    assert_eq!(field, "/max_frames");
}

#[test]
fn unknown_tools_and_cursors_are_tool_errors_with_hints() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let e = call(&c, "drop_everything", json!({})).unwrap_err();
    assert!(matches!(e, ToolError::UnknownTool(_)));
    assert!(e.hint().unwrap_or_default().contains("tools/list"));
    let e = call(&c, "get_causal_chains", json!({"cursor": "not-a-cursor"})).unwrap_err();
    assert!(
        e.message().contains("/cursor") && e.hint().unwrap_or_default().contains("next_cursor"),
        "{e}"
    );
    let e = call(&c, "get_trace_stats", json!({"trace": "nope"})).unwrap_err();
    assert!(
        e.message().contains("no trace named 'nope'")
            && e.hint().unwrap_or_default().contains("list_traces"),
        "{e}"
    );
    let e = call(&c, "get_trace_stats", json!({"since": "yesterday"})).unwrap_err();
    assert!(e.message().contains("yesterday"), "{e}");
}

/// Prompts and agent configs written for the reference tool's MCP surface work unchanged:
/// its argument names are accepted where the meaning is the same, and give the same answer.
#[test]
fn the_reference_tools_argument_names_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let ours = call(&c, "get_causal_chains", json!({"limit": 1})).unwrap();
    let theirs = call(&c, "get_causal_chains", json!({"top_n": 1})).unwrap();
    assert_eq!(ours.structured, theirs.structured);
    assert_eq!(ours.structured["chains"].as_array().unwrap().len(), 1);

    let sql = "SELECT count(*) AS n FROM events";
    let ours = call(&c, "run_sql", json!({"sql": sql})).unwrap();
    let theirs = call(&c, "run_sql", json!({"query": sql})).unwrap();
    assert_eq!(ours.structured["rows"], theirs.structured["rows"]);

    let ours = call(&c, "get_trace_stats", json!({"pid": 72801, "since": "30s"})).unwrap();
    let theirs = call(
        &c,
        "get_trace_stats",
        json!({"pids": [72801], "since": "30s"}),
    )
    .unwrap();
    assert_eq!(ours.structured, theirs.structured);
    let stacks = call(&c, "get_stacks", json!({"pids": [72801], "top_n": 2})).unwrap();
    assert!(stacks.structured["stacks"].as_array().unwrap().len() <= 2);

    // An alias names itself in errors, and cannot be given with the field it stands for.
    let (field, rule, _) = invalid("get_causal_chains", json!({"top_n": 0}));
    assert_eq!(
        (field.as_str(), rule.contains("minimum of 1")),
        ("/top_n", true)
    );
    let (field, _, hint) = invalid("get_trace_stats", json!({"pids": [1, 2]}));
    assert_eq!(field, "/pids");
    assert!(hint.contains("once per pid"), "{hint}");
    let (field, rule, _) = invalid("run_sql", json!({"sql": sql, "query": sql}));
    assert_eq!(field, "/query");
    assert!(rule.contains("both"), "{rule}");
}
