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
