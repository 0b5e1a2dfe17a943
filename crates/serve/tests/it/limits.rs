//! What every route enforces before it answers, on a real server: the bearer token, the Host
//! and Origin policy, the declared and actual body sizes, the body deadline, the connection
//! cap, and the MCP session caps.

use std::io::{BufReader, Read, Write};
use std::time::Duration;

use crate::common::{PATIENCE, Server, options, read_response};

const ROUTES: [&str; 3] = ["/api/v1/time", "/metrics", "/"];

#[test]
fn without_the_bearer_token_every_route_is_401() {
    let mut o = options();
    o.token = Some("s3cret-token".into());
    let srv = Server::demo(o);
    for path in ROUTES {
        for auth in [
            None,
            Some("Authorization: Bearer wrong"),
            Some("Authorization: Basic s3cret-token"),
            Some("Authorization: Bearer s3cret-toke"),
        ] {
            let r = srv.get(path, auth.as_slice());
            assert_eq!(r.status, 401, "{path} {auth:?}");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
            assert!(r.body.is_empty(), "a refusal says nothing about the server");
        }
        let r = srv.get(path, &["Authorization: Bearer s3cret-token"]);
        assert_eq!(r.status, 200, "{path}");
    }
}

#[test]
fn foreign_hosts_and_origins_are_403_and_allowed_ones_served() {
    let mut o = options();
    o.allowed_hosts = vec!["trace.example".into()];
    o.allowed_origins = vec!["https://inspector.example:443".into()];
    let srv = Server::demo(o);
    let host = |h: &str| vec![format!("Host: {h}")];
    for path in ROUTES {
        for bad in ["evil.example", "evil.example:80", "127.0.0.2"] {
            let r = srv.raw("GET", path, &host(bad), b"");
            assert_eq!(r.status, 403, "{path} Host {bad}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://localhost.evil.example:80",
        ] {
            let origin = format!("Origin: {bad}");
            let r = srv.get(path, &[origin.as_str()]);
            assert_eq!(r.status, 403, "{path} Origin {bad}");
        }
        let r = srv.raw("GET", path, &host("trace.example:8765"), b"");
        assert_eq!(r.status, 200, "{path} via --allow-host");
        for ok in ["http://localhost:5173", "https://inspector.example:443"] {
            let origin = format!("Origin: {ok}");
            let r = srv.get(path, &[origin.as_str()]);
            assert_eq!(r.status, 200, "{path} Origin {ok}");
        }
    }
}

#[test]
fn bodies_over_the_limit_are_413_whether_declared_or_not() {
    let mut o = options();
    o.max_body_bytes = 1024;
    let srv = Server::demo(o);
    let sql = format!(r#"{{"sql": "SELECT 1"{}}}"#, " ".repeat(900));
    assert!(sql.len() <= 1024);
    let r = srv.post_json("/api/v1/tools/run_sql", &sql);
    assert_eq!(r.status, 200, "{}", r.text());
    // Declared: refused from the headers, before a byte of the body is read.
    let r = srv.raw(
        "POST",
        "/api/v1/tools/run_sql",
        &[
            format!("Host: {}", srv.host()),
            "Content-Length: 1025".into(),
        ],
        b"",
    );
    assert_eq!(r.status, 413);
    // Not declared (chunked): refused once the body read passes the limit.
    let chunk = vec![b' '; 1500];
    let mut body = format!("{:x}\r\n", chunk.len()).into_bytes();
    body.extend_from_slice(&chunk);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let r = srv.raw(
        "POST",
        "/api/v1/tools/run_sql",
        &[
            format!("Host: {}", srv.host()),
            "Transfer-Encoding: chunked".into(),
        ],
        &body,
    );
    assert_eq!(r.status, 413);
}

#[test]
fn a_body_that_stops_arriving_is_408_at_the_deadline() {
    let mut o = options();
    o.body_timeout = Duration::from_millis(300);
    let srv = Server::demo(o);
    let mut s = srv.connect();
    let head = format!(
        "POST /api/v1/tools/run_sql HTTP/1.1\r\nHost: {}\r\nContent-Length: 100\r\n\r\n{{\"sql\":",
        srv.host()
    );
    s.write_all(head.as_bytes()).unwrap();
    // The rest never comes; the answer does, once the deadline passed.
    let r = read_response(&mut BufReader::new(s), false);
    assert_eq!(r.status, 408);
}

#[test]
fn past_the_connection_cap_a_connection_gets_503_and_is_closed() {
    let mut o = options();
    o.max_connections = 1;
    let srv = Server::demo(o);
    // The first connection takes the only slot (accepted first: it connected first) ...
    let held = srv.connect();
    // ... so the next one is answered 503 and closed without a request.
    let mut next = srv.connect();
    let mut answer = String::new();
    next.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer:?}"
    );
    assert!(answer.contains("Retry-After: 1\r\n"), "{answer:?}");
    // The slot comes back when the holder leaves (once its connection task has ended).
    drop(held);
    let t = std::time::Instant::now();
    while !answers_200(&srv) {
        assert!(t.elapsed() < PATIENCE, "the slot never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a `GET /api/v1/time` on a new connection is answered 200 (not 503, and not cut off:
/// a connection over the cap may be closed before the request is read, which resets it).
fn answers_200(srv: &Server) -> bool {
    let mut s = srv.connect();
    let req = format!(
        "GET /api/v1/time HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        srv.host()
    );
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    if s.write_all(req.as_bytes()).is_ok() {
        while let Ok(n @ 1..) = s.read(&mut buf) {
            answer.extend_from_slice(&buf[..n]);
        }
    }
    answer.starts_with(b"HTTP/1.1 200 ")
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}"#;

/// One MCP `initialize`: the status, and the session id when one was created.
fn initialize(srv: &Server) -> (u16, Option<String>, Option<String>) {
    let r = srv.send(
        "POST",
        "/mcp",
        &[
            "Accept: application/json, text/event-stream",
            "Content-Type: application/json",
        ],
        INIT.as_bytes(),
    );
    (
        r.status,
        r.header("mcp-session-id").map(str::to_string),
        r.header("retry-after").map(str::to_string),
    )
}

#[test]
fn a_client_past_its_session_share_is_503_and_asked_to_come_back() {
    let mut o = options();
    o.max_sessions_per_client = 2;
    let srv = Server::demo(o);
    let (a, b) = (initialize(&srv), initialize(&srv));
    assert_eq!((a.0, b.0), (200, 200));
    let (ida, idb) = (a.1.expect("a session id"), b.1.expect("a session id"));
    assert_ne!(ida, idb);
    let (status, id, retry) = initialize(&srv);
    assert_eq!(status, 503);
    assert_eq!(id, None);
    assert_eq!(retry.as_deref(), Some("5"));
}

#[test]
fn past_the_server_s_session_cap_every_client_is_503() {
    let mut o = options();
    o.max_sessions = 1;
    let srv = Server::demo(o);
    assert_eq!(initialize(&srv).0, 200);
    let (status, _, retry) = initialize(&srv);
    assert_eq!(status, 503);
    assert_eq!(retry.as_deref(), Some("5"));
    // The query API is not MCP: it has no sessions to run out of.
    assert_eq!(srv.get("/api/v1/time", &[]).status, 200);
}
