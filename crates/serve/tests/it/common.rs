//! The harness: a demo store written once per test process, a server started on a runtime of
//! its own per test, and a minimal HTTP/1.1 client that reads exactly one response.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use causeway_serve::http::{HttpOptions, OtlpRoutes};
use causeway_tools::Context;

/// The scenario served: small, and with a causal chain to report.
const SCENARIO: causeway_demo::Scenario = causeway_demo::Scenario::SyncStorm;

/// Long enough that no test meets a deadline it does not set itself, on a busy machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The demo store of this test process (written once, in a directory of this process so that
/// concurrent test processes never share it; each server serves a copy) and its event count.
pub fn demo_store() -> &'static (PathBuf, u64) {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static STORE: OnceLock<(PathBuf, u64)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
        let path = dir.path().join(format!("{}.duckdb", SCENARIO.name()));
        let summary = causeway_demo::write_scenario(&path, SCENARIO, false).unwrap();
        (path, summary.events)
    })
}

/// The options of a loopback server with generous limits; tests narrow what they test.
pub fn options() -> HttpOptions {
    HttpOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: None,
        tls: None,
        client_ca: None,
        allowed_origins: Vec::new(),
        allowed_hosts: Vec::new(),
        max_body_bytes: 1 << 20,
        max_connections: 64,
        max_sessions: 16,
        max_sessions_per_client: 16,
        unused_session_timeout: Duration::from_secs(300),
        header_timeout: PATIENCE,
        body_timeout: PATIENCE,
    }
}

/// A server running on its own runtime until dropped.
pub struct Server {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Tool calls still running on the blocking pool are not waited for.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Server {
    /// Serves a copy of the demo store with `o`.
    pub fn demo(o: HttpOptions) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("trace.duckdb");
        std::fs::copy(&demo_store().0, &db).unwrap();
        let ctx = Arc::new(Context::new(db, Vec::new()));
        Server::start(dir, ctx, o, None)
    }

    /// Serves `ctx` (whose files are in `dir`) with `o`, plus the OTLP routes when given.
    pub fn start(
        dir: tempfile::TempDir,
        ctx: Arc<Context>,
        o: HttpOptions,
        routes: Option<OtlpRoutes>,
    ) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let result = causeway_serve::http::serve_with(ctx, o, routes, move |bound| {
                let _ = tx.send(bound);
            })
            .await;
            // Only an error ends the accept loop; say it instead of a bare timeout.
            if let Err(e) = result {
                eprintln!("the server stopped: {e:#}");
            }
        });
        let addr = rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("the server did not start: {e}"));
        Server {
            addr,
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    /// `Host` as a client of this server sends it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// One request with a body and `Host: 127.0.0.1:port`; `headers` are `Name: value` lines.
    pub fn send(&self, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Reply {
        let mut all = vec![format!("Host: {}", self.host())];
        all.extend(headers.iter().map(|h| h.to_string()));
        if !body.is_empty() || method == "POST" {
            all.push(format!("Content-Length: {}", body.len()));
        }
        self.raw(method, path, &all, body)
    }

    /// `GET path` with `headers`.
    pub fn get(&self, path: &str, headers: &[&str]) -> Reply {
        self.send("GET", path, headers, b"")
    }

    /// `POST path` of JSON.
    pub fn post_json(&self, path: &str, body: &str) -> Reply {
        self.send(
            "POST",
            path,
            &["Content-Type: application/json"],
            body.as_bytes(),
        )
    }

    /// One request exactly as given (no header added), then its response.
    pub fn raw(&self, method: &str, path: &str, headers: &[String], body: &[u8]) -> Reply {
        let mut s = self.connect();
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        read_response(&mut BufReader::new(s), method == "HEAD")
    }

    /// A connection whose reads give up after [`PATIENCE`].
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s
    }
}

/// One response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// (lower-case name, value).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of header `name`, if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {status} {body}",
                status = self.status,
                body = String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response: status, headers, and the body (sized, chunked, or up to the close;
/// none for an answer to HEAD).
pub fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> Reply {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if head {
        // An answer to HEAD has the headers of the GET and no body.
    } else if let Some(n) = find("content-length") {
        body.resize(n.parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
        r.read_to_end(&mut body).unwrap();
    }
    Reply {
        status,
        headers,
        body,
    }
}
