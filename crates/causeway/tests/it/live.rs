//! Live investigation end to end (root, like every BPF test): `causeway mcp --live` records a
//! stand-in CUDA workload and answers MCP over stdio from the growing store, and
//! `causeway trace --listen` answers MCP over streamable HTTP while it records.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::ok;
use crate::trace::{is_root, standin};

const BIN: &str = env!("CARGO_BIN_EXE_causeway");

fn bpf_tests() -> bool {
    if std::env::var("CAUSEWAY_SKIP_BPF_TESTS").as_deref() == Ok("1") {
        return false;
    }
    assert!(
        is_root(),
        "live tracing needs root (CI is root); set CAUSEWAY_SKIP_BPF_TESTS=1 to skip explicitly"
    );
    true
}

fn launches(db: &str) -> u64 {
    let out = ok(&[
        "query",
        "--db",
        db,
        "--json",
        "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["rows"][0][0].as_u64().unwrap()
}

/// Calls `get_trace_stats` through `call` until the live store has events, then once more
/// later: the count must have grown while the workload runs.
fn grows(mut call: impl FnMut() -> Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let r = call();
        assert_ne!(r["isError"], true, "{r}");
        let n = r["structuredContent"]["events"].as_u64().unwrap();
        if n > 0 {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "no events reached the live store"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The collector's writer flushes at least every 2 s (collector::trace::WRITER_FLUSH).
    std::thread::sleep(Duration::from_millis(2_500));
    let later = call()["structuredContent"]["events"].as_u64().unwrap();
    assert!(
        later > first,
        "the live store did not grow: {first} then {later}"
    );
}

#[test]
fn mcp_live_serves_a_growing_trace_over_stdio() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = standin();
    let db = dir.path().join("live.duckdb");
    // The command writes to stdout: it must reach stderr, not the MCP stream.
    let script = format!("echo not-json-rpc; exec {workload} hold 6000");
    let mut child = Command::new(BIN)
        .args(["mcp", "--live", "--db"])
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut id = 0u64;
    let mut request = move |method: &str, params: Value| -> Value {
        id += 1;
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
            if v["id"] == id {
                return v;
            }
        }
    };
    let init = request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "causeway", "{init}");
    grows(|| {
        request(
            "tools/call",
            json!({"name": "get_trace_stats", "arguments": {}}),
        )["result"]
            .clone()
    });
    let sql = request(
        "tools/call",
        json!({"name": "run_sql", "arguments": {"sql": "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'"}}),
    );
    assert!(
        sql["result"]["structuredContent"]["rows"][0][0]
            .as_u64()
            .unwrap()
            > 0,
        "{sql}"
    );
    // The client leaves: the recording ends and the file is complete.
    drop(request);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("not-json-rpc") && err.contains("recorded "),
        "{err}"
    );
    assert!(launches(db.to_str().unwrap()) > 0);
}

/// One HTTP/1.1 POST to /mcp; returns the status, the headers and the JSON-RPC messages of
/// the body (plain JSON or server-sent events, chunked or not).
fn post(addr: &str, session: Option<&str>, body: &Value) -> (u16, String, Vec<Value>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(id) = session {
        req.push_str(&format!(
            "Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-11-25\r\n"
        ));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, mut rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut content = String::new();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            content.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
    } else {
        content = rest.to_string();
    }
    let messages = content
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("data:").unwrap_or(l).trim();
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
        })
        .collect();
    (status, head.to_string(), messages)
}

#[test]
fn trace_serve_answers_over_http_while_recording() {
    if !bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = standin();
    let db = dir.path().join("served.duckdb");
    let mut child = Command::new(BIN)
        .args(["trace", "--db"])
        .arg(&db)
        .args(["--listen", "127.0.0.1:0", "--", &workload, "hold", "6000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::listening_addr(&mut child);

    let (code, head, init) = post(
        &addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}}),
    );
    assert_eq!(code, 200, "{head}");
    assert_eq!(
        init[0]["result"]["serverInfo"]["name"], "causeway",
        "{init:?}"
    );
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .expect("a session id");
    let (code, _, _) = post(
        &addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert!(code == 202 || code == 200, "{code}");
    let mut id = 1;
    grows(|| {
        id += 1;
        let (code, head, msgs) = post(
            &addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "get_trace_stats", "arguments": {}}}),
        );
        assert_eq!(code, 200, "{head}");
        msgs.into_iter()
            .find(|m| m["id"] == id)
            .expect("a response")["result"]
            .clone()
    });
    // The recording ends with the command; the server stops with it and the summary follows.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).expect("the trace summary");
    assert_eq!(summary["command_exit"], 0);
    assert!(launches(db.to_str().unwrap()) > 0);
}
