//! The plain HTTP endpoints next to MCP on every serve address: `GET /metrics` (Prometheus text)
//! and the query API for scripts and fleet fan-out: `POST /api/v1/tools/{name}` runs one tool of
//! the registry (the same typed functions, validation and guard as MCP) and `GET /api/v1/time`
//! returns the server's clock for offset estimation. Bearer token (checked before), Host check
//! and body limit as for MCP.

use causeway_hint::Hint as _;
use std::sync::Arc;

use causeway_tools::{Context, ToolError};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::http::{Body, HttpOptions, InBody, bare};

/// Path prefix of the query API.
pub const PREFIX: &str = "/api/v1/";

/// Host names the plain endpoints answer to: the loopback names plus `--allow-host`
/// (DNS-rebinding defence, as rmcp applies to MCP), or any host off loopback without
/// `--allow-host` (a token is required there).
pub fn allowed_hosts(o: &HttpOptions) -> Option<Vec<String>> {
    if o.allowed_hosts.is_empty() && !o.addr.ip().is_loopback() {
        return None;
    }
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()];
    hosts.extend(o.allowed_hosts.iter().cloned());
    Some(hosts)
}

pub(crate) fn with_body(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    with_body(status, "application/json", v.to_string())
}

/// `GET /metrics`: the Prometheus text exposition of the served trace. `gatherer` is the
/// server's: a scrape of a live recording reads only the events recorded since the last one.
pub async fn metrics(
    req: &Request<InBody>,
    ctx: Arc<Context>,
    gatherer: Arc<std::sync::Mutex<causeway_export::gather::Gatherer>>,
) -> Response<Body> {
    if req.method() != Method::GET {
        return bare(StatusCode::METHOD_NOT_ALLOWED);
    }
    let text = tokio::task::spawn_blocking(move || {
        ctx.with_reader(None, |r| {
            let mut g = gatherer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Ok(causeway_export::prometheus::render_facts(&g.update(r)?))
        })
    })
    .await;
    match text {
        Ok(Ok(t)) => with_body(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            t,
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e.message(), "rendering /metrics failed");
            bare(StatusCode::INTERNAL_SERVER_ERROR)
        }
        Err(_) => bare(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn tool_error(e: &ToolError) -> Response<Body> {
    let status = match e {
        ToolError::UnknownTool(_) => StatusCode::NOT_FOUND,
        ToolError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        ToolError::Failed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    };
    json_response(status, &json!({"error": e.message(), "hint": e.hint()}))
}

/// `/api/v1/...`: `GET time`, `POST tools/{name}` with the tool's arguments as a JSON object.
pub async fn handle(req: Request<InBody>, ctx: Arc<Context>, max_body: usize) -> Response<Body> {
    let path = req
        .uri()
        .path()
        .strip_prefix(PREFIX)
        .unwrap_or("")
        .to_string();
    if path == "time" {
        if req.method() != Method::GET {
            return bare(StatusCode::METHOD_NOT_ALLOWED);
        }
        return json_response(StatusCode::OK, &json!({"now_ns": causeway_store::now_ns()}));
    }
    let Some(name) = path.strip_prefix("tools/").map(str::to_string) else {
        return bare(StatusCode::NOT_FOUND);
    };
    if req.method() != Method::POST {
        return bare(StatusCode::METHOD_NOT_ALLOWED);
    }
    let body = match Limited::new(req.into_body(), max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return bare(StatusCode::PAYLOAD_TOO_LARGE);
        }
        // The whole body did not arrive within --body-timeout, or the client went away.
        Err(_) => return bare(StatusCode::REQUEST_TIMEOUT),
    };
    let args: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"error": format!("the body is not JSON: {e}"), "hint": "send the tool's arguments as a JSON object, e.g. {\"sql\": \"SELECT 1\"}"}),
                );
            }
        }
    };
    // A client that disconnects drops this future: run_tool then cancels the call's queries.
    match super::handler::run_tool(ctx, name, args, std::future::pending()).await {
        Ok(out) => json_response(
            StatusCode::OK,
            &json!({"structured": out.structured, "text": out.text}),
        ),
        Err(e) => tool_error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn options(addr: &str, allow_host: &[&str]) -> HttpOptions {
        HttpOptions {
            addr: addr.parse().unwrap(),
            token: None,
            tls: None,
            client_ca: None,
            allowed_origins: Vec::new(),
            allowed_hosts: allow_host.iter().map(|h| h.to_string()).collect(),
            max_body_bytes: 1 << 20,
            max_connections: 64,
            max_sessions: 8,
            max_sessions_per_client: 4,
            unused_session_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn hosts_follow_the_listen_address_and_allow_host() {
        let loopback = ["localhost", "127.0.0.1", "[::1]"];
        assert_eq!(
            allowed_hosts(&options("127.0.0.1:8765", &[])).unwrap(),
            loopback
        );
        assert_eq!(allowed_hosts(&options("[::1]:0", &[])).unwrap(), loopback);
        // Off loopback, names are unknown in advance: any host (the token is mandatory there).
        assert_eq!(allowed_hosts(&options("0.0.0.0:8765", &[])), None);
        // --allow-host narrows it again, and adds to the loopback names.
        assert_eq!(
            allowed_hosts(&options("0.0.0.0:8765", &["trace.example"])).unwrap(),
            ["localhost", "127.0.0.1", "[::1]", "trace.example"]
        );
    }

    #[tokio::test]
    async fn tool_errors_become_statuses_with_the_error_and_hint_as_json() {
        for (e, status) in [
            (ToolError::UnknownTool("nope".into()), StatusCode::NOT_FOUND),
            (
                ToolError::InvalidArgument {
                    field: "/sql".into(),
                    rule: "required".into(),
                    hint: "send {\"sql\": ...}".into(),
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                ToolError::failed("no such table", "see causeway://schema"),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
        ] {
            let r = tool_error(&e);
            assert_eq!(r.status(), status, "{e:?}");
            assert_eq!(r.headers()[hyper::header::CONTENT_TYPE], "application/json");
            let body = r.into_body().collect().await.unwrap().to_bytes();
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v, json!({"error": e.message(), "hint": e.hint()}));
        }
    }
}
