//! The web report at `/` of every serve address: the page `causeway report` writes, served
//! live (it polls `GET /api/v1/report` for fresh data while a trace grows) under a strict
//! Content-Security-Policy header. Same token, Host and Origin rules as every other route.
//! Both take the window and filters as query parameters: `?since=5m&pid=42&node=n1`, and both
//! are answered from `report_cache` while the store is unchanged.

use causeway_hint::Hint as _;
use std::sync::Arc;
use std::time::Instant;

use causeway_report::{Mode, ReportData};
use causeway_tools::params::WindowParams;
use causeway_tools::{Context, ToolError};
use hyper::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::api::with_body;
use super::http::{Body, InBody, bare};
use super::report_cache::{self, Decision, Entry, ReportCache};

/// How often the live page asks for fresh data (ms).
pub const POLL_MS: u32 = 2000;

/// Decodes one `application/x-www-form-urlencoded` component (`+` and `%XX`).
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The window and filters of a query string; an unknown or malformed parameter is refused.
pub fn window_params(query: Option<&str>) -> Result<WindowParams, ToolError> {
    let mut p = WindowParams::default();
    for pair in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let bad = |rule: &str| ToolError::InvalidArgument {
            field: format!("/{}", causeway_store::sanitize::sanitize_with(k, 40)),
            rule: rule.into(),
            hint: "use ?since=5m, ?from=+30s&until=-10s, ?pid=N or ?node=NAME".into(),
        };
        let v = decode(v).ok_or_else(|| bad("not valid percent-encoded UTF-8"))?;
        match k {
            "since" => p.since = Some(v),
            "from" => p.from = Some(v),
            "until" => p.until = Some(v),
            "node" => p.node = Some(v),
            "pid" => p.pid = Some(v.parse().map_err(|_| bad("not a process id"))?),
            _ => return Err(bad("unknown parameter")),
        }
    }
    Ok(p)
}

/// The reports the live page is answered with, shared by every connection of a server.
pub type Reports = Arc<tokio::sync::Mutex<ReportCache>>;

/// What the blocking half found.
enum Outcome {
    /// A cached report (`current`: the store is unchanged since it was built).
    Cached(Arc<ReportData>, bool),
    /// A new build.
    Built(Entry),
}

/// The report of `q`: the cached one while the store is unchanged or was built too recently
/// ([`Entry::decide`]), else a new build. One request at a time builds or checks (the lock):
/// pages polling together wait for that one build instead of each starting theirs.
async fn build(
    ctx: Arc<Context>,
    reports: Reports,
    q: WindowParams,
) -> Result<Arc<ReportData>, ToolError> {
    let key = serde_json::to_string(&q).unwrap_or_default();
    let mut cache = reports.lock().await;
    let cached = cache.get(&key).cloned();
    let outcome = tokio::task::spawn_blocking(move || {
        ctx.with_reader(None, |r| {
            let version = report_cache::store_version(r)?;
            if let Some(e) = cached {
                match e.decide(&version, Instant::now()) {
                    Decision::Current => return Ok(Outcome::Cached(e.data, true)),
                    Decision::Stale => return Ok(Outcome::Cached(e.data, false)),
                    Decision::Build => {}
                }
            }
            let started = Instant::now();
            let data = causeway_report::build(r, &q, ctx.prices()).map_err(|e| match e {
                causeway_report::ReportError::Build(t) => t,
                other => ToolError::failed(other.to_string(), other.hint().unwrap_or_default()),
            })?;
            Ok(Outcome::Built(Entry {
                version,
                data: Arc::new(data),
                built: Instant::now(),
                took: started.elapsed(),
            }))
        })
    })
    .await
    .unwrap_or_else(|_| {
        Err(ToolError::failed(
            "building the report panicked",
            "see the server's log",
        ))
    })?;
    Ok(match outcome {
        Outcome::Built(e) => {
            let data = e.data.clone();
            cache.put(key, e);
            data
        }
        // Unchanged store: the same report, current as of now.
        Outcome::Cached(data, true) => {
            let mut d = (*data).clone();
            d.generated_ns = causeway_store::now_ns();
            Arc::new(d)
        }
        Outcome::Cached(data, false) => data,
    })
}

fn error_response(e: &ToolError) -> Response<Body> {
    let status = match e {
        ToolError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    with_body(
        status,
        "application/json",
        serde_json::json!({"error": e.message(), "hint": e.hint()}).to_string(),
    )
}

fn no_store(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `GET /`: the live page, with the policy as a header.
pub async fn page(req: &Request<InBody>, ctx: Arc<Context>, reports: Reports) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return bare(StatusCode::METHOD_NOT_ALLOWED);
    }
    let q = match window_params(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return error_response(&e),
    };
    let mode = Mode::Live { poll_ms: POLL_MS };
    match build(ctx, reports, q).await {
        Ok(d) => {
            let mut r = with_body(
                StatusCode::OK,
                "text/html; charset=utf-8",
                causeway_report::render(&d, mode),
            );
            let csp = causeway_report::content_security_policy(mode);
            if let Ok(v) = HeaderValue::from_str(&csp) {
                r.headers_mut().insert(CONTENT_SECURITY_POLICY, v);
            }
            r.headers_mut().insert(
                hyper::header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            no_store(r)
        }
        Err(e) => error_response(&e),
    }
}

/// `GET /api/v1/report`: the data the page renders, as JSON.
pub async fn data(req: &Request<InBody>, ctx: Arc<Context>, reports: Reports) -> Response<Body> {
    if req.method() != Method::GET {
        return bare(StatusCode::METHOD_NOT_ALLOWED);
    }
    let q = match window_params(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return error_response(&e),
    };
    match build(ctx, reports, q).await {
        Ok(d) => no_store(with_body(
            StatusCode::OK,
            "application/json",
            causeway_report::data_json(&d).to_string(),
        )),
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_become_window_params() {
        let p = window_params(Some("since=5m&pid=42&node=gpu%2Dnode+1")).unwrap();
        assert_eq!(p.since.as_deref(), Some("5m"));
        assert_eq!(p.pid, Some(42));
        assert_eq!(p.node.as_deref(), Some("gpu-node 1"));
        assert!(window_params(None).unwrap().since.is_none());
        assert!(window_params(Some("pid=x")).is_err());
        assert!(window_params(Some("sql=select")).is_err());
        assert!(window_params(Some("from=%zz")).is_err());
    }

    #[test]
    fn form_components_decode_or_are_refused() {
        assert_eq!(decode("a+b%20c%2B").as_deref(), Some("a b c+"));
        assert_eq!(decode("%E2%9C%93").as_deref(), Some("\u{2713}"));
        assert_eq!(decode("").as_deref(), Some(""));
        // A cut escape, a non-hex escape and bytes that are not UTF-8.
        for bad in ["%", "%2", "abc%zz", "%ff%fe"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_refused_parameter_is_named_with_what_to_send() {
        let e = window_params(Some("since=5m&limit=10")).unwrap_err();
        assert_eq!(e.message(), "invalid argument /limit: unknown parameter");
        assert!(e.hint().unwrap().contains("?since=5m"), "{e:?}");
        let e = window_params(Some("pid=-1")).unwrap_err();
        assert_eq!(e.message(), "invalid argument /pid: not a process id");
        let e = window_params(Some("node=%C3%28")).unwrap_err();
        assert_eq!(
            e.message(),
            "invalid argument /node: not valid percent-encoded UTF-8"
        );
        // A long key is cut before it is echoed back.
        let long = "k".repeat(500);
        let e = window_params(Some(&format!("{long}=1"))).unwrap_err();
        assert!(e.message().len() < 120, "{}", e.message());
    }

    #[test]
    fn every_window_parameter_is_read_and_empty_pairs_are_skipped() {
        let p = window_params(Some("&from=%2B30s&&until=-10s&since&pid=7&")).unwrap();
        assert_eq!(p.from.as_deref(), Some("+30s"));
        assert_eq!(p.until.as_deref(), Some("-10s"));
        assert_eq!(p.since.as_deref(), Some(""), "a bare key is an empty value");
        assert_eq!(p.pid, Some(7));
        assert_eq!(p.node, None);
    }
}
