//! Helpers: run the built binary, locate the shared reference traces, import them once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

/// The reference trace `name` from ../shared/investigations.
pub fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/investigations")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing (tests read ../shared/investigations)",
        p.display()
    );
    p
}

/// Runs `causeway ARGS` with colour off.
pub fn causeway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("CAUSEWAY_LOG")
        // Prices come from the user's config file: none here, unless a test names one.
        .env_remove("CAUSEWAY_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/causeway-tests")
        .output()
        .expect("run causeway")
}

/// stdout of a successful run.
pub fn ok(args: &[&str]) -> String {
    let out = causeway(args);
    assert!(
        out.status.success(),
        "causeway {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A directory that lives for the whole test binary.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// The vLLM reference trace imported once per test binary.
pub fn vllm_store() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = scratch().join("vllm.duckdb");
        let src = shared("vllm-37343-logprobs-amplification.db");
        ok(&["import", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        out
    })
    .clone()
}

/// Waits for a serving `causeway` child to announce `listening on ADDR` on stderr and returns
/// ADDR; the rest of its stderr is drained in the background so it never blocks.
pub fn listening_addr(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    while !line.contains("listening on ") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the server exited before listening"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    line.trim().rsplit(' ').next().unwrap().to_string()
}

/// A serving `causeway` child, killed when dropped.
pub struct Http {
    /// The process.
    pub child: Child,
    /// The address it listens on.
    pub addr: String,
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One raw HTTP/1.1 request (Connection: close): status and the whole response.
pub fn raw(
    addr: &str,
    request_line: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{request_line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if !body.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, resp)
}
