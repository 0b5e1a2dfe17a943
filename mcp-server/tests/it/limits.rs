//! The HTTP limits every serving address enforces, tested on a running `causeway serve`: one
//! Origin policy on every route, header and body timeouts, declared sizes, the connection and
//! MCP session caps, under a crowd of idle connections and a flood of `initialize` requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Http, listening_addr, raw, vllm_store};

fn serve(extra: &[&str]) -> Http {
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["serve", "--db"])
        .arg(vllm_store())
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env_remove("CAUSEWAY_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listening_addr(&mut child);
    Http { child, addr }
}

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Reads until the server closes the connection (or `limit` passes): what it sent, and when.
fn until_closed(s: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}"#;

/// A web page cannot reach a local server through any route: a cross-site POST with a
/// "simple" content type (no CORS preflight) carries its Origin and is refused.
#[test]
fn every_route_refuses_a_foreign_origin() {
    let srv = serve(&[]);
    let a = srv.addr.as_str();
    let sql = r#"{"sql": "SELECT 1"}"#;
    for (line, body) in [
        ("POST /api/v1/tools/run_sql", sql),
        ("GET /metrics", ""),
        ("GET /api/v1/time", ""),
        ("POST /mcp", INIT),
    ] {
        let (code, resp) = raw(
            a,
            line,
            a,
            &[
                ("Origin", "http://evil.example"),
                ("Content-Type", "text/plain"),
                ("Accept", "application/json, text/event-stream"),
            ],
            body,
        );
        assert_eq!(code, 403, "{line}: {resp}");
        let (code, resp) = raw(
            a,
            line,
            a,
            &[
                ("Origin", "http://localhost:3000"),
                ("Accept", "application/json, text/event-stream"),
            ],
            body,
        );
        assert_eq!(code, 200, "{line} from a loopback page: {resp}");
    }
}

/// Clients that send nothing, too slowly, or announce an absurd body are cut off on time.
#[test]
fn idle_slow_and_oversized_clients_are_cut_off() {
    let srv = serve(&["--header-timeout", "2s", "--body-timeout", "2s"]);
    let a = srv.addr.as_str();
    let limit = Duration::from_secs(8);
    // Connected, silent.
    let mut s = TcpStream::connect(a).unwrap();
    let (_, took) = until_closed(&mut s, limit);
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    // Headers that never finish.
    let mut s = TcpStream::connect(a).unwrap();
    s.write_all(b"GET /metr").unwrap();
    let (_, took) = until_closed(&mut s, limit);
    assert!(took < Duration::from_secs(4), "{took:?}");
    // A 10 GB body announced: refused before any of it is read.
    let mut s = TcpStream::connect(a).unwrap();
    write!(
        s,
        "POST /api/v1/tools/run_sql HTTP/1.1\r\nHost: {a}\r\nContent-Length: 10737418240\r\n\r\n"
    )
    .unwrap();
    let t = Instant::now();
    let mut line = String::new();
    BufReader::new(&mut s).read_line(&mut line).unwrap();
    assert!(line.contains(" 413 "), "{line}");
    assert!(t.elapsed() < Duration::from_secs(1));
    // A chunk of 2^64-1 bytes that never comes.
    let mut s = TcpStream::connect(a).unwrap();
    write!(
        s,
        "POST /api/v1/tools/run_sql HTTP/1.1\r\nHost: {a}\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\nabc"
    )
    .unwrap();
    let (resp, took) = until_closed(&mut s, limit);
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(
        resp.is_empty() || resp.contains(" 408 ") || resp.contains(" 413 "),
        "{resp}"
    );
    // A keep-alive connection left idle after an answer.
    let mut s = TcpStream::connect(a).unwrap();
    write!(s, "GET /api/v1/time HTTP/1.1\r\nHost: {a}\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains(" 200 "));
    let (_, took) = until_closed(&mut s, limit);
    assert!(took < Duration::from_secs(4), "{took:?}");
}

/// At the connection cap, one more client gets a 503 at once instead of waiting.
#[test]
fn past_the_connection_cap_clients_get_503() {
    let srv = serve(&["--max-connections", "8", "--header-timeout", "5s"]);
    let a = srv.addr.as_str();
    let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut s = TcpStream::connect(a).unwrap();
    let (resp, took) = until_closed(&mut s, Duration::from_secs(3));
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("Retry-After"), "{resp}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let (code, _) = raw(a, "GET /api/v1/time", a, &[], "");
    assert_eq!(code, 200);
}

/// One POST of `initialize` on a keep-alive connection; the status code.
fn initialize(s: &mut TcpStream, r: &mut BufReader<TcpStream>, addr: &str) -> u16 {
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{INIT}",
        INIT.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let code: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    if let Some(n) = length {
        let mut body = vec![0u8; n];
        r.read_exact(&mut body).unwrap();
    } else if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
        }
    }
    code
}

/// A thousand idle connections and a hundred thousand `initialize` requests: the server's
/// memory stays under the documented bound (docs/mcp.md, Limits: 1,024 sessions of about
/// 50 KB, idle connections of a few KB), and it answers throughout.
#[test]
fn a_crowd_of_connections_and_sessions_stays_bounded() {
    // This test process holds the thousand connections: room for them.
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < 4096 {
        setrlimit(Resource::RLIMIT_NOFILE, hard.min(4096), hard).unwrap();
    }
    let srv = serve(&["--header-timeout", "60s"]);
    let (a, pid) = (srv.addr.clone(), srv.child.id());
    let base = rss(pid);
    let idle: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(&a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let with_idle = rss(pid);
    let t = Instant::now();
    let (code, _) = raw(&a, "GET /api/v1/time", &a, &[], "");
    assert_eq!(code, 200);
    assert!(t.elapsed() < Duration::from_secs(1));
    // 100,000 initializes from 4 clients on keep-alive connections.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&a).unwrap();
                s.set_nodelay(true).unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut codes = std::collections::BTreeMap::<u16, u64>::new();
                for _ in 0..25_000 {
                    *codes.entry(initialize(&mut s, &mut r, &a)).or_default() += 1;
                }
                codes
            })
        })
        .collect();
    let mut codes = std::collections::BTreeMap::<u16, u64>::new();
    for w in workers {
        for (k, v) in w.join().unwrap() {
            *codes.entry(k).or_default() += v;
        }
    }
    let after = rss(pid);
    eprintln!(
        "RSS: {} MiB at start, {} MiB with 1,000 idle connections, {} MiB after 100,000 \
         initializes ({codes:?})",
        base >> 20,
        with_idle >> 20,
        after >> 20
    );
    assert_eq!(codes.values().sum::<u64>(), 100_000);
    // Four clients race past the check at most once each before their sessions exist.
    let created = codes.get(&200).copied().unwrap_or(0);
    assert!((1024..=1028).contains(&created), "{codes:?}");
    assert_eq!(codes.get(&503), Some(&(100_000 - created)), "{codes:?}");
    assert!(
        with_idle < base + (32 << 20),
        "idle connections cost {} MiB",
        (with_idle - base) >> 20
    );
    assert!(
        after < base + (160 << 20),
        "the crowd cost {} MiB",
        (after - base) >> 20
    );
    // Still answering a tool call and /metrics.
    let (code, _) = raw(
        &a,
        "POST /api/v1/tools/run_sql",
        &a,
        &[],
        r#"{"sql": "SELECT count(*) FROM events"}"#,
    );
    assert_eq!(code, 200);
    let (code, _) = raw(&a, "GET /metrics", &a, &[], "");
    assert_eq!(code, 200);
    drop(idle);
}
