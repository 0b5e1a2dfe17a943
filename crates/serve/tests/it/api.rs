//! The query API (`/api/v1/...`) and `/metrics` on a real server over a demo store: tools run
//! with the registry's answers, every kind of tool error is its own status with the error and
//! its hint, and each route takes only its method.

use serde_json::json;

use crate::common::{Server, demo_store, options};

#[test]
fn a_tool_answers_from_the_served_store() {
    let srv = Server::demo(options());
    let r = srv.post_json(
        "/api/v1/tools/run_sql",
        r#"{"sql": "SELECT count(*) AS n FROM events"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["structured"]["columns"][0]["name"], "n");
    assert_eq!(v["structured"]["rows"], json!([[demo_store().1]]));
    assert!(v["text"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
}

#[test]
fn tool_errors_are_statuses_with_the_error_and_what_to_do() {
    let srv = Server::demo(options());
    let r = srv.post_json("/api/v1/tools/no_such_tool", "{}");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"error": "unknown tool 'no_such_tool'", "hint": "call tools/list for the tool names"})
    );
    // An argument of the wrong type breaks the tool's schema.
    let r = srv.post_json("/api/v1/tools/run_sql", r#"{"sql": 7}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid argument /sql"),
        "{v}"
    );
    assert!(v["hint"].as_str().is_some_and(|h| !h.is_empty()), "{v}");
    // Valid arguments the tool cannot answer: the query names no table of the schema.
    let r = srv.post_json(
        "/api/v1/tools/run_sql",
        r#"{"sql": "SELECT * FROM no_such_table"}"#,
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let v = r.json();
    assert!(
        v["error"].as_str().unwrap().contains("no_such_table"),
        "{v}"
    );
    assert!(v["hint"].as_str().is_some_and(|h| !h.is_empty()), "{v}");
}

#[test]
fn a_body_that_is_not_json_is_refused_with_an_example() {
    let srv = Server::demo(options());
    let r = srv.post_json("/api/v1/tools/run_sql", "SELECT 1");
    assert_eq!(r.status, 400);
    let v = r.json();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("the body is not JSON:"),
        "{v}"
    );
    assert!(
        v["hint"]
            .as_str()
            .unwrap()
            .contains(r#"{"sql": "SELECT 1"}"#),
        "{v}"
    );
    // No body at all is no arguments, which a tool without required ones takes.
    let r = srv.send("POST", "/api/v1/tools/get_trace_stats", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn each_route_takes_only_its_method() {
    let srv = Server::demo(options());
    for (method, path, status) in [
        ("GET", "/api/v1/tools/run_sql", 405),
        ("POST", "/api/v1/time", 405),
        ("GET", "/api/v1/nothing_here", 404),
        ("GET", "/api/v1/", 404),
        ("POST", "/metrics", 405),
        ("DELETE", "/api/v1/report", 405),
    ] {
        let r = srv.send(method, path, &[], b"");
        assert_eq!(r.status, status, "{method} {path}");
    }
}

#[test]
fn the_server_clock_is_read_while_the_request_is_answered() {
    let srv = Server::demo(options());
    let before = causeway_store::now_ns();
    let r = srv.get("/api/v1/time", &[]);
    let after = causeway_store::now_ns();
    assert_eq!(r.status, 200);
    let now = r.json()["now_ns"].as_i64().unwrap();
    assert!(
        before <= now && now <= after,
        "{before} <= {now} <= {after}"
    );
}

#[test]
fn metrics_are_the_prometheus_text_of_the_served_trace() {
    let srv = Server::demo(options());
    let r = srv.get("/metrics", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.text();
    assert!(text.contains("# TYPE causeway_"), "{text}");
    // Every sample line is `name{labels} value`, the value a number.
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
}
