//! `causeway mcp` end to end with raw JSON-RPC: stdio handshake and tool calls, tools/list budget on the wire, and the HTTP transport's refusals (token off
//! loopback, 401 without the bearer token, 403 for a foreign Origin, 413 for a huge body).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Http, raw};

const BIN: &str = env!("CARGO_BIN_EXE_causeway");

fn vllm() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/investigations/vllm-37343-logprobs-amplification.db");
        assert!(src.exists(), "{} is missing", src.display());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("vllm.duckdb");
        let st = Command::new(BIN)
            .args(["import"])
            .arg(&src)
            .arg("--db")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        (dir, out)
    })
    .1
}

pub(crate) struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioServer {
    fn start() -> Self {
        Self::spawn(Command::new(BIN).args(["mcp", "--db"]).arg(vllm()))
    }

    /// Speaks MCP over stdio with the server `cmd` starts.
    pub(crate) fn spawn(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        StdioServer {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
            if v["id"] == id {
                return v;
            }
        }
    }

    pub(crate) fn initialize(&mut self, version: &str) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn stdio_answers_initialize_and_tools_in_2025_11_25() {
    vllm();
    let started = Instant::now();
    let mut s = StdioServer::start();
    let init = s.initialize("2025-11-25");
    let ready = started.elapsed();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "causeway");
    assert!(
        ready < Duration::from_secs(5),
        "first answer after {ready:?}"
    );

    let list = s.request("tools/list", json!({}));
    let wire = serde_json::to_string(&list["result"]).unwrap();
    assert!(
        wire.len() / 4 < 3_000,
        "tools/list is {} tokens on the wire",
        wire.len() / 4
    );
    let tools = list["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 11);
    for t in tools {
        assert_eq!(t["annotations"]["readOnlyHint"], true);
        assert_eq!(t["annotations"]["openWorldHint"], false);
        assert!(t["outputSchema"].is_object());
    }

    let stats = s.request(
        "tools/call",
        json!({"name": "get_trace_stats", "arguments": {}}),
    );
    assert_ne!(stats["result"]["isError"], true, "{stats}");
    assert_eq!(stats["result"]["structuredContent"]["events"], 10869);
    let bad = s.request(
        "tools/call",
        json!({"name": "get_stacks", "arguments": {"limit": "five"}}),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let text = bad["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/limit") && text.contains("hint:"), "{text}");

    let prompt = s.request(
        "prompts/get",
        json!({"name": "investigate", "arguments": {}}),
    );
    let msg = prompt["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap();
    assert!(msg.contains("get_causal_chains"));
    let res = s.request("resources/read", json!({"uri": "causeway://ops"}));
    assert!(
        res["result"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cudaLaunchKernel")
    );
}

/// `get_check` and `causeway check --json` are one inspection (the collector's) shaped by one
/// function: the tool's structured result is the command's JSON.
#[test]
fn get_check_is_what_causeway_check_prints() {
    vllm();
    let mut s = StdioServer::start();
    s.initialize("2025-11-25");
    let tool = s.request("tools/call", json!({"name": "get_check", "arguments": {}}));
    assert_ne!(tool["result"]["isError"], true, "{tool}");
    let tool = &tool["result"]["structuredContent"];
    let out = Command::new(BIN)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Running processes may come and go between the two inspections; the rest is fixed.
    for field in [
        "can_trace",
        "kernel",
        "items",
        "nvidia_driver",
        "gpus",
        "libraries",
        "problems",
    ] {
        assert_eq!(tool[field], cli[field], "{field}");
    }
    assert_eq!(out.status.success(), cli["can_trace"] == true);
    let names: Vec<&str> = tool["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "kernel",
            "btf",
            "privileges",
            "uprobes",
            "tracefs",
            "sockets",
            "reclaim"
        ]
    );
}

/// 2026-07-28 is stateless (`server/discover`, exercised by conformance/run-e2e.sh with the
/// Python SDK); an `initialize` offering it settles on the newest handshake revision.
#[test]
fn initialize_offering_2026_07_28_settles_on_2025_11_25() {
    let mut s = StdioServer::start();
    let init = s.initialize("2026-07-28");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
}

#[test]
fn a_missing_trace_fails_before_serving() {
    let out = Command::new(BIN)
        .args(["mcp", "--db", "/nonexistent/t.duckdb"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout (it is the protocol stream)"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no such trace file") && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn http_off_loopback_requires_a_token() {
    let out = Command::new(BIN)
        .args(["mcp", "--db"])
        .arg(vllm())
        .args(["--http", "0.0.0.0:0"])
        .env_remove("CAUSEWAY_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without a bearer token") && err.contains("CAUSEWAY_TOKEN"),
        "{err}"
    );
}

fn http_server(token: &str) -> Http {
    let mut child = Command::new(BIN)
        .args(["mcp", "--db"])
        .arg(vllm())
        .args(["--http", "127.0.0.1:0", "--max-body", "4096"])
        .env("CAUSEWAY_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::listening_addr(&mut child);
    Http { child, addr }
}

/// A POST to the MCP endpoint (JSON or event-stream answers accepted).
fn post(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut all = vec![("Accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    raw(addr, "POST /mcp", addr, &all, body)
}

#[test]
fn http_refuses_without_details() {
    let token = "0123456789abcdef0123456789abcdef";
    let srv = http_server(token);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}})
    .to_string();
    let bearer = format!("Bearer {token}");

    let (code, resp) = post(&srv.addr, &[], &init);
    assert_eq!(code, 401, "{resp}");
    assert!(
        resp.ends_with("\r\n\r\n") || resp.contains("content-length: 0"),
        "no details: {resp}"
    );
    let (code, _) = post(
        &srv.addr,
        &[("Authorization", "Bearer wrong-token-wrong-token")],
        &init,
    );
    assert_eq!(code, 401);

    let (code, resp) = post(
        &srv.addr,
        &[
            ("Authorization", &bearer),
            ("Origin", "https://evil.example"),
        ],
        &init,
    );
    assert_eq!(code, 403, "{resp}");

    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(10_000));
    let (code, _) = post(&srv.addr, &[("Authorization", &bearer)], &big);
    assert_eq!(code, 413);

    let (code, resp) = post(
        &srv.addr,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://localhost:6274"),
        ],
        &init,
    );
    assert_eq!(code, 200, "{resp}");
    assert!(
        resp.contains("\"protocolVersion\":\"2025-11-25\""),
        "{resp}"
    );
}

fn get(addr: &str, host: &str, headers: &[(&str, &str)], path: &str) -> (u16, String) {
    raw(addr, &format!("GET {path}"), host, headers, "")
}

/// `/metrics` on the serve address: Prometheus text with exact histograms, behind the same
/// bearer token and Host check as MCP.
#[test]
fn metrics_are_served_next_to_mcp() {
    let token = "0123456789abcdef0123456789abcdef";
    let srv = http_server(token);
    let bearer = format!("Bearer {token}");
    let (code, _) = get(&srv.addr, &srv.addr, &[], "/metrics");
    assert_eq!(code, 401);
    let (code, _) = get(
        &srv.addr,
        "evil.example",
        &[("Authorization", &bearer)],
        "/metrics",
    );
    assert_eq!(code, 403);
    let (code, resp) = get(
        &srv.addr,
        &srv.addr,
        &[("Authorization", &bearer)],
        "/metrics",
    );
    assert_eq!(code, 200, "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{resp}"
    );
    assert!(
        resp.contains("# TYPE causeway_call_duration_seconds histogram"),
        "{resp}"
    );
    assert!(
        resp.contains("causeway_call_duration_seconds_count{node=\"")
            && resp.contains("op=\"cudaLaunchKernel\"} 550"),
        "{resp}"
    );
    assert!(resp.contains("causeway_off_cpu_seconds_total{"), "{resp}");
}

fn post_api(addr: &str, token: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let bearer = format!("Bearer {token}");
    let (code, resp) = raw(
        addr,
        &format!("POST {path}"),
        addr,
        &[("Authorization", &bearer)],
        body,
    );
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (
        code,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

/// The query API next to MCP: the same tools, validation and SQL guard, as plain JSON over
/// HTTP (what fleet fan-out and scripts call), plus the server clock.
#[test]
fn query_api_runs_registry_tools_behind_the_token() {
    let token = "0123456789abcdef0123456789abcdef";
    let srv = http_server(token);
    let (code, v) = post_api(
        &srv.addr,
        token,
        "/api/v1/tools/run_sql",
        r#"{"sql": "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'"}"#,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["structured"]["rows"][0][0], 550);
    let (code, v) = post_api(
        &srv.addr,
        token,
        "/api/v1/tools/run_sql",
        r#"{"sql": "DROP TABLE events"}"#,
    );
    assert_eq!(code, 422, "{v}");
    assert!(v["hint"].as_str().is_some_and(|h| !h.is_empty()), "{v}");
    let (code, v) = post_api(
        &srv.addr,
        token,
        "/api/v1/tools/get_causal_chains",
        r#"{"top_n": 0}"#,
    );
    assert_eq!(code, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("/top_n"), "{v}");
    let (code, _) = post_api(&srv.addr, token, "/api/v1/tools/nope", "{}");
    assert_eq!(code, 404);
    let (code, _) = post_api(
        &srv.addr,
        "wrong-token-wrong-token",
        "/api/v1/tools/run_sql",
        "{}",
    );
    assert_eq!(code, 401);
    let bearer = format!("Bearer {token}");
    let (code, resp) = get(
        &srv.addr,
        &srv.addr,
        &[("Authorization", &bearer)],
        "/api/v1/time",
    );
    assert_eq!(code, 200, "{resp}");
    assert!(resp.contains("\"now_ns\":"), "{resp}");
}

/// `causeway serve` is the HTTP server of a recorded trace: MCP, query API and metrics; it
/// refuses to listen off loopback without a token.
#[test]
fn serve_listens_with_the_query_api() {
    let mut child = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(vllm())
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("CAUSEWAY_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::listening_addr(&mut child);
    let srv = Http { child, addr };
    let (code, resp) = get(&srv.addr, &srv.addr, &[], "/api/v1/time");
    assert_eq!(code, 200, "{resp}");
    let off = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(vllm())
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("CAUSEWAY_TOKEN")
        .output()
        .unwrap();
    assert!(!off.status.success());
    assert!(String::from_utf8_lossy(&off.stderr).contains("without a bearer token"));
}
