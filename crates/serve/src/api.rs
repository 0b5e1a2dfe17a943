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
