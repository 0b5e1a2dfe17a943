//! What every HTTP address enforces before a request reaches a route (MCP, the query API,
//! `/metrics`, OTLP): one Host and Origin policy (a web page must not query a local server: a
//! browser sends `Origin` on every cross-site POST, even the "simple" ones that skip CORS
//! preflight), the declared body size, a deadline for the whole body, a cap on open
//! connections, and a quiet, backed-off accept loop when the process runs out of file
//! descriptors. MCP sessions have their caps in `sessions.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::Request;
use hyper::StatusCode;

/// Who may send requests from a browser, and under which Host names.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    /// Host names (without port) allowed in the `Host` header; None: any (off loopback without
    /// `--allow-host`, where a token is mandatory).
    hosts: Option<Vec<String>>,
    /// Allowed `Origin` values: `scheme://host:port`, a port of `*` matching any.
    origins: Vec<String>,
}

impl AccessPolicy {
    /// The policy of a server: `hosts` as [`super::api::allowed_hosts`] gives them, and the
    /// loopback origins of `scheme` plus `extra_origins`.
    pub fn new(hosts: Option<Vec<String>>, scheme: &str, extra_origins: &[String]) -> Self {
        let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("{scheme}://{h}:*"))
            .collect();
        origins.extend(extra_origins.iter().cloned());
        Self { hosts, origins }
    }

    /// The allowed origins (for rmcp's own check of `/mcp`).
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// 403 for a Host or Origin outside the policy.
    pub fn refuse<B>(&self, req: &Request<B>) -> Option<StatusCode> {
        if !self.host_ok(req) || !self.origin_ok(req) {
            return Some(StatusCode::FORBIDDEN);
        }
        None
    }

    fn host_ok<B>(&self, req: &Request<B>) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = match host.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => host,
        };
        hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    fn origin_ok<B>(&self, req: &Request<B>) -> bool {
        let Some(origin) = req.headers().get(hyper::header::ORIGIN) else {
            // Not a browser (curl, agents, fleet fan-out, OTLP exporters).
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        self.origins
            .iter()
            .any(|allowed| origin_matches(allowed, origin))
    }
}

/// Whether `origin` (`scheme://host[:port]`) matches `allowed`, whose port may be `*`.
fn origin_matches(allowed: &str, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    match allowed.strip_suffix(":*") {
        Some(base) => {
            origin.eq_ignore_ascii_case(base)
                || origin
                    .get(..base.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(base))
                    && origin[base.len()..]
                        .strip_prefix(':')
                        .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        }
        None => origin.eq_ignore_ascii_case(allowed.trim_end_matches('/')),
    }
}

/// 413 when the request declares a body larger than `max` (before reading any of it).
pub fn declared_too_large<B>(req: &Request<B>, max: usize) -> bool {
    req.headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().parse::<u128>().map_or(true, |n| n > max as u128))
}

/// A request body that must arrive whole before a deadline set when its headers were read: a
/// client dripping a byte now and then under a large Content-Length is cut off as surely as one
/// that stops, instead of holding its connection slot for as long as it keeps dripping.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    within: Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> DeadlineBody<B> {
    /// `inner`, which must end within `within` from now.
    pub fn new(within: Duration, inner: B) -> Self {
        Self {
            inner,
            within,
            deadline: Box::pin(tokio::time::sleep(within)),
        }
    }
}

/// The error of a body that did not arrive in time.
#[derive(Debug)]
pub struct BodyTimedOut(Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {:?}", self.0)
    }
}

impl std::error::Error for BodyTimedOut {}

/// What a body wrapped in [`DeadlineBody`] fails with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::future::Future as _;
        let this = self.get_mut();
        if this.deadline.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.within)))));
        }
        std::pin::Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Logs accept failures at most once per period, with how many there were, and says how long
/// to back off before accepting again.
#[derive(Debug)]
pub struct AcceptBackoff {
    delay: Duration,
    failures: AtomicU64,
    last_log: Option<Instant>,
}

/// Longest pause between accept attempts while they fail.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Least time between two log lines about failing accepts.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            failures: AtomicU64::new(0),
            last_log: None,
        }
    }
}

impl AcceptBackoff {
    /// An accept failed: how long to wait before the next one.
    pub fn failed(&mut self, error: &std::io::Error) -> Duration {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if self.last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            tracing::warn!(
                error = %error,
                failures = n,
                "accepting connections fails (out of file descriptors?); backing off"
            );
            self.last_log = Some(Instant::now());
            self.failures.store(0, Ordering::Relaxed);
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(5), MAX_BACKOFF);
        self.delay
    }

    /// An accept worked.
    pub fn succeeded(&mut self) {
        self.delay = Duration::ZERO;
    }
}

/// Raises this process's soft limit on open files to its hard limit (at most 65,536), so the
/// connection cap, not the descriptor limit, is what a crowd of clients meets; returns the
/// soft limit in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    let want = hard.min(65_536);
    if want > soft && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok() {
        return want;
    }
    soft
}

/// Open connections a server accepts at most, given `requested` and the descriptor limit
/// (room is kept for the store's files, the ring buffers and the runtime).
pub fn connection_cap(requested: usize, fd_limit: u64) -> usize {
    requested.min(fd_limit.saturating_sub(128).max(16) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri("/api/v1/tools/run_sql");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn foreign_origins_are_refused_on_every_route() {
        let p = AccessPolicy::new(
            Some(vec!["localhost".into(), "127.0.0.1".into()]),
            "http",
            &["https://inspector.example:443".into()],
        );
        assert_eq!(p.refuse(&req(&[("Host", "127.0.0.1:8765")])), None);
        assert_eq!(
            p.refuse(&req(&[
                ("Host", "127.0.0.1:8765"),
                ("Origin", "http://localhost:5173")
            ])),
            None
        );
        assert_eq!(
            p.refuse(&req(&[
                ("Host", "127.0.0.1:8765"),
                ("Origin", "https://inspector.example:443")
            ])),
            None
        );
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example:80",
            "http://localhost:80x",
            "null",
            "https://localhost:1",
        ] {
            assert_eq!(
                p.refuse(&req(&[("Host", "127.0.0.1:8765"), ("Origin", bad)])),
                Some(StatusCode::FORBIDDEN),
                "{bad}"
            );
        }
        assert_eq!(
            p.refuse(&req(&[("Host", "evil.example")])),
            Some(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn declared_sizes() {
        assert!(declared_too_large(
            &req(&[("Content-Length", "10737418240")]),
            1 << 20
        ));
        assert!(declared_too_large(
            &req(&[("Content-Length", "99999999999999999999999999")]),
            1 << 20
        ));
        assert!(declared_too_large(
            &req(&[("Content-Length", "x")]),
            1 << 20
        ));
        assert!(!declared_too_large(
            &req(&[("Content-Length", "100")]),
            1 << 20
        ));
        assert!(!declared_too_large(&req(&[]), 1 << 20));
    }

    #[test]
    fn origin_patterns_match_a_port_or_none_and_nothing_else() {
        let any_port = "http://localhost:*";
        for ok in [
            "http://localhost",
            "http://localhost/",
            "http://LOCALHOST:8080",
            "http://localhost:5173/",
        ] {
            assert!(origin_matches(any_port, ok), "{ok}");
        }
        // A longer host sharing the prefix, an empty or non-numeric port, another scheme.
        for bad in [
            "http://localhostx:80",
            "http://localhost:",
            "http://localhost:80a",
            "https://localhost:80",
            "http://localhost:80/path",
        ] {
            assert!(!origin_matches(any_port, bad), "{bad}");
        }
        // Without `:*` the origin must be the same, its port included.
        let exact = "https://inspector.example:443/";
        assert!(origin_matches(exact, "https://INSPECTOR.example:443"));
        assert!(!origin_matches(exact, "https://inspector.example"));
        assert!(!origin_matches(exact, "https://inspector.example:4430"));
    }

    #[test]
    fn hosts_are_checked_by_name_without_their_port() {
        let p = AccessPolicy::new(
            Some(vec![
                "localhost".into(),
                "[::1]".into(),
                "trace.example".into(),
            ]),
            "http",
            &[],
        );
        for ok in [
            "localhost",
            "LOCALHOST:8765",
            "[::1]:8765",
            "trace.example:80",
        ] {
            assert_eq!(p.refuse(&req(&[("Host", ok)])), None, "{ok}");
        }
        // A port that is not a number leaves the whole value as the name; no Host at all is
        // no allowed name either.
        for bad in ["localhost:http", "other.example:8765", "::1"] {
            assert_eq!(
                p.refuse(&req(&[("Host", bad)])),
                Some(StatusCode::FORBIDDEN),
                "{bad}"
            );
        }
        assert_eq!(p.refuse(&req(&[])), Some(StatusCode::FORBIDDEN));
    }

    #[test]
    fn without_a_host_list_any_host_passes_but_origins_are_still_checked() {
        // Off loopback without --allow-host: a token guards the server, Host is not checked.
        let p = AccessPolicy::new(None, "https", &[]);
        assert_eq!(
            p.refuse(&req(&[("Host", "gpu-node-7.internal:8765")])),
            None
        );
        assert_eq!(p.refuse(&req(&[])), None);
        assert_eq!(
            p.refuse(&req(&[
                ("Host", "gpu-node-7.internal"),
                ("Origin", "https://localhost:1")
            ])),
            None
        );
        // The loopback origins are those of the server's own scheme.
        assert_eq!(
            p.refuse(&req(&[("Origin", "http://localhost:1")])),
            Some(StatusCode::FORBIDDEN)
        );
        assert!(p.origins().iter().all(|o| o.starts_with("https://")));
    }

    #[test]
    fn the_connection_cap_leaves_descriptors_for_the_store() {
        assert_eq!(connection_cap(100, 65_536), 100);
        assert_eq!(connection_cap(4096, 1024), 1024 - 128);
        // A tiny descriptor limit still serves a few connections.
        assert_eq!(connection_cap(4096, 100), 16);
        assert_eq!(connection_cap(4096, 0), 16);
        assert_eq!(connection_cap(8, 0), 8);
    }

    #[test]
    fn the_raised_fd_limit_is_within_the_hard_limit() {
        use nix::sys::resource::{Resource, getrlimit};
        let (soft_before, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let raised = raise_fd_limit();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(raised, soft, "it reports the limit in force");
        assert!(
            raised >= soft_before && raised <= hard,
            "{soft_before} {raised} {hard}"
        );
    }

    /// A body whose client sent the headers and then nothing more.
    struct Silent;

    impl hyper::body::Body for Silent {
        type Data = hyper::body::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_fails_at_its_deadline() {
        use http_body_util::BodyExt as _;
        let within = Duration::from_millis(50);
        // The outer timeout only keeps a broken deadline from hanging the test.
        let read = tokio::time::timeout(
            Duration::from_secs(30),
            DeadlineBody::new(within, Silent).collect(),
        )
        .await
        .expect("the deadline ends the body");
        let e = read.expect_err("a body that never ends is an error");
        assert!(e.is::<BodyTimedOut>(), "{e}");
        assert_eq!(e.to_string(), "the request body did not arrive within 50ms");
    }

    #[tokio::test]
    async fn a_whole_body_within_its_deadline_passes_through() {
        use http_body_util::{BodyExt as _, Full};
        const SQL: &[u8] = br#"{"sql": "SELECT 1"}"#;
        let body = DeadlineBody::new(
            Duration::from_secs(3600),
            Full::new(hyper::body::Bytes::from_static(SQL)),
        );
        assert_eq!(
            hyper::body::Body::size_hint(&body).exact(),
            Some(SQL.len() as u64),
            "the size hint is the inner body's"
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], SQL);
    }

    #[test]
    fn backoff_grows_and_resets() {
        let mut b = AcceptBackoff::default();
        let e = std::io::Error::from_raw_os_error(24);
        let d1 = b.failed(&e);
        let d2 = b.failed(&e);
        assert!(d2 > d1);
        for _ in 0..20 {
            b.failed(&e);
        }
        assert_eq!(b.failed(&e), MAX_BACKOFF);
        b.succeeded();
        assert_eq!(b.failed(&e), Duration::from_millis(5));
    }
}
