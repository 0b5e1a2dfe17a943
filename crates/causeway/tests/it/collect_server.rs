//! A `causeway collect` child on loopback (HTTP and gRPC), shared by the collect tests and the
//! collect benchmark (included there by path): start it, read its two addresses, stop it with
//! Ctrl-C and read the summary it prints.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The running server.
pub struct Server {
    pub child: Child,
    /// OTLP/HTTP, MCP and API address.
    pub http: String,
    /// OTLP/gRPC address.
    pub grpc: String,
}

/// Starts `causeway collect --db DB` with `token` in CAUSEWAY_TOKEN; its later stderr goes to
/// ours when `show_stderr`, else nowhere.
pub fn start(db: &Path, token: &str, show_stderr: bool) -> Server {
    start_with(db, token, show_stderr, &[])
}

/// [`start`] with more options for `collect`.
#[allow(dead_code)] // the benchmark includes this file and does not call it
pub fn start_with(db: &Path, token: &str, show_stderr: bool, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "collect",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--db",
        ])
        .arg(db)
        .args(extra)
        .env("CAUSEWAY_TOKEN", token)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start causeway collect");
    let mut err = BufReader::new(child.stderr.take().expect("stderr piped"));
    let (mut http, mut grpc) = (String::new(), String::new());
    while http.is_empty() || grpc.is_empty() {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "collect exited before listening"
        );
        let addr = line.trim().rsplit(' ').next().unwrap_or("").to_string();
        if line.contains("OTLP/gRPC listening on ") {
            grpc = addr;
        } else if line.contains("listening on ") {
            http = addr;
        }
    }
    std::thread::spawn(move || {
        if show_stderr {
            std::io::copy(&mut err, &mut std::io::stderr())
        } else {
            std::io::copy(&mut err, &mut std::io::sink())
        }
    });
    Server { child, http, grpc }
}

/// Ctrl-C, then the JSON summary it printed on stdout.
pub fn stop(s: Server) -> serde_json::Value {
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = s.child.wait_with_output().unwrap();
    assert!(out.status.success(), "collect failed: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}
