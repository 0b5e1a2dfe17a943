//! Fleet fan-out: sends one query-API request (`/api/v1/tools/{name}`) to every node in
//! parallel over HTTP or HTTPS (rustls, optional client certificate for mTLS) with a bearer
//! token and a per-node timeout, estimates each node's clock offset NTP-style from
//! `/api/v1/time`, and returns per-node answers: an unreachable node is a warning (itself a
//! finding), not a failure of the whole request. Written on hyper's client connection API
//! because the server side already uses hyper and rustls; no extra HTTP stack is needed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use causeway_tools::fleet::{FleetHandle, NodeAnswer};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Largest answer accepted from one node.
const MAX_ANSWER_BYTES: usize = 8 << 20;
/// Clock samples per node (the one with the shortest round trip wins).
const CLOCK_SAMPLES: usize = 4;

/// How to reach the fleet.
#[derive(Clone)]
pub struct Fleet {
    /// `http://host:port`, `https://host:port` or `host:port` (http).
    pub nodes: Vec<String>,
    /// Bearer token.
    pub token: Option<String>,
    /// TLS client configuration for https nodes.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Per-node limit.
    pub timeout: Duration,
}

// By hand: the bearer token must not reach a log line.
impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("nodes", &self.nodes)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A TLS client configuration trusting `ca` (PEM), with an optional client certificate.
pub fn tls_config(
    ca: &PathBuf,
    client: Option<(&PathBuf, &PathBuf)>,
) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("{}: cannot read the CA certificates (PEM)", ca.display()))?
    {
        roots
            .add(c.with_context(|| format!("{}: bad PEM", ca.display()))?)
            .with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("configuring TLS")?
    .with_root_certificates(roots);
    Ok(match client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect())
                .with_context(|| {
                    format!("{}: cannot read the client certificate", cert.display())
                })?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("{}: cannot read the client key", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .context("the client certificate and key do not match")?
        }
        None => builder.with_no_client_auth(),
    })
}

fn split(node: &str) -> (bool, &str) {
    if let Some(rest) = node.strip_prefix("https://") {
        (true, rest.trim_end_matches('/'))
    } else {
        (
            false,
            node.strip_prefix("http://")
                .unwrap_or(node)
                .trim_end_matches('/'),
        )
    }
}

/// One request to one node: (status, body).
async fn request(
    fleet: &Fleet,
    node: &str,
    method: hyper::Method,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Bytes)> {
    let (https, authority) = split(node);
    if https && fleet.tls.is_none() {
        bail!(causeway_store::Hinted::new(
            format!("{node} is https but no CA was given"),
            "pass --ca-cert PEM"
        ));
    }
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let to = HttpTarget {
        authority,
        tls: if https { fleet.tls.as_ref() } else { None },
        token: fleet.token.as_deref(),
    };
    send(
        &to,
        method,
        path,
        "application/json",
        Bytes::from(payload),
        MAX_ANSWER_BYTES,
    )
    .await
}

/// Where one HTTP request goes (shared by the fleet fan-out and the OTLP push).
#[derive(Debug, Clone, Copy)]
pub struct HttpTarget<'a> {
    /// `host:port`.
    pub authority: &'a str,
    /// TLS client configuration: Some means https.
    pub tls: Option<&'a Arc<rustls::ClientConfig>>,
    /// Bearer token.
    pub token: Option<&'a str>,
}

/// Sends one HTTP/1.1 request and returns (status, body), the body capped at `max_answer`.
pub async fn send(
    to: &HttpTarget<'_>,
    method: hyper::Method,
    path: &str,
    content_type: &str,
    payload: Bytes,
    max_answer: usize,
) -> Result<(u16, Bytes)> {
    let authority = to.authority;
    let stream = TcpStream::connect(authority)
        .await
        .with_context(|| format!("cannot connect to {authority}"))?;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, content_type);
    if let Some(t) = to.token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Full::new(payload))?;
    macro_rules! exchange {
        ($io:expr) => {{
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new($io)).await?;
            tokio::spawn(conn);
            let resp = send.send_request(req).await?;
            let status = resp.status().as_u16();
            let bytes = Limited::new(resp.into_body(), max_answer)
                .collect()
                .await
                .map_err(|e| anyhow!("reading the answer: {e}"))?
                .to_bytes();
            (status, bytes)
        }};
    }
    Ok(if let Some(cfg) = to.tls {
        let host = authority.rsplit_once(':').map_or(authority, |h| h.0);
        let name =
            rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|_| anyhow!("{host}: not a valid TLS server name"))?;
        let tls = tokio_rustls::TlsConnector::from(cfg.clone())
            .connect(name, stream)
            .await
            .with_context(|| format!("TLS handshake with {authority} failed"))?;
        exchange!(tls)
    } else {
        exchange!(stream)
    })
}

/// NTP-style: several `/api/v1/time` samples, the shortest round trip wins;
/// offset = server time - midpoint of the request, uncertainty = half the round trip.
async fn clock(fleet: &Fleet, node: &str) -> Option<(i64, i64)> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..CLOCK_SAMPLES {
        let t0 = causeway_store::now_ns();
        let Ok((200, body)) = request(fleet, node, hyper::Method::GET, "/api/v1/time", None).await
        else {
            return best;
        };
        let t1 = causeway_store::now_ns();
        let server = serde_json::from_slice::<Value>(&body).ok()?["now_ns"].as_i64()?;
        let (offset, half_rtt) = (server - (t0 + (t1 - t0) / 2), (t1 - t0) / 2);
        if best.is_none_or(|b| half_rtt < b.1) {
            best = Some((offset, half_rtt));
        }
    }
    best
}

async fn ask(fleet: &Fleet, node: &str, tool: &str, args: &Value) -> NodeAnswer {
    let started = Instant::now();
    let path = format!("/api/v1/tools/{tool}");
    let outcome = tokio::time::timeout(fleet.timeout, async {
        let answer = request(fleet, node, hyper::Method::POST, &path, Some(args)).await?;
        let clock = clock(fleet, node).await;
        Ok::<_, anyhow::Error>((answer, clock))
    })
    .await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let mut a = NodeAnswer {
        node: node.to_string(),
        ok: false,
        ms,
        clock_offset_ns: None,
        clock_uncertainty_ns: None,
        result: None,
        warning: None,
        refusal: None,
    };
    match outcome {
        Err(_) => a.warning = Some(format!("no answer within {:?}", fleet.timeout)),
        Ok(Err(e)) => a.warning = Some(format!("unreachable: {e:#}")),
        Ok(Ok(((status, body), clock))) => {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            a.clock_offset_ns = clock.map(|c| c.0);
            a.clock_uncertainty_ns = clock.map(|c| c.1);
            if status == 200 {
                a.ok = true;
                a.result = Some(v["structured"].clone());
            } else if status == 401 || status == 403 {
                a.warning = Some(format!(
                    "refused ({status}): check the token and --allow-host"
                ));
            } else {
                let message = v["error"].as_str().unwrap_or("error").to_string();
                let hint = v["hint"].as_str().unwrap_or("").to_string();
                a.warning = Some(format!("{status}: {message} (hint: {hint})"));
                a.refusal = Some(causeway_tools::fleet::Refusal {
                    status,
                    message,
                    hint,
                });
            }
        }
    }
    a
}

/// Runs `tool` with `args` on every node in parallel; answers in the order the nodes were given.
pub async fn fan_out(fleet: &Fleet, tool: &str, args: &Value) -> Vec<NodeAnswer> {
    let tasks: Vec<_> = fleet
        .nodes
        .iter()
        .map(|n| {
            let (fleet, n, tool, args) = (fleet.clone(), n.clone(), tool.to_string(), args.clone());
            tokio::spawn(async move { ask(&fleet, &n, &tool, &args).await })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (t, node) in tasks.into_iter().zip(&fleet.nodes) {
        out.push(
            t.await
                .unwrap_or_else(|_| failed(node, "the request task failed".into())),
        );
    }
    out
}

/// The bearer token from `file`, else $CAUSEWAY_TOKEN (trimmed; an empty variable = none). A
/// token file that holds nothing is refused: a server started with one would otherwise run
/// without authentication, and a client would send no token.
pub fn read_token(file: Option<&std::path::Path>) -> Result<Option<String>> {
    let Some(p) = file else {
        return Ok(std::env::var("CAUSEWAY_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()));
    };
    let token = std::fs::read_to_string(p)
        .with_context(|| format!("{}: cannot read the token file", p.display()))?
        .trim()
        .to_string();
    if token.is_empty() {
        bail!(causeway_store::Hinted::new(
            format!("{}: the token file is empty", p.display()),
            "write a token into it, e.g. `openssl rand -hex 32 > FILE`"
        ));
    }
    Ok(Some(token))
}

/// The fan-out as the tools crate takes it (`query_fleet`): blocks the calling thread, which is
/// a tool call's blocking-pool thread in a server, or a plain thread in the CLI.
pub fn handle(fleet: Fleet) -> FleetHandle {
    let nodes = fleet.nodes.clone();
    let fleet = Arc::new(fleet);
    FleetHandle {
        nodes,
        fan_out: Arc::new(move |tool: &str, args: &Value| {
            let run = fan_out(&fleet, tool, args);
            match tokio::runtime::Handle::try_current() {
                Ok(h) => h.block_on(run),
                Err(_) => match crate::runtime() {
                    Ok(rt) => rt.block_on(run),
                    Err(e) => fleet
                        .nodes
                        .iter()
                        .map(|n| failed(n, format!("cannot start the client runtime: {e:#}")))
                        .collect(),
                },
            }
        }),
    }
}

fn failed(node: &str, why: String) -> NodeAnswer {
    NodeAnswer {
        node: node.to_string(),
        ok: false,
        ms: 0.0,
        clock_offset_ns: None,
        clock_uncertainty_ns: None,
        result: None,
        warning: Some(why),
        refusal: None,
    }
}

/// Runs `tool` on the fleet from a synchronous command; returns the answers and the wall time
/// of the fan-out in ms.
pub fn run_blocking(fleet: &Fleet, tool: &str, params: &Value) -> Result<(Vec<NodeAnswer>, f64)> {
    let runtime = crate::runtime()?;
    let started = Instant::now();
    let answers = runtime.block_on(fan_out(fleet, tool, params));
    Ok((answers, started.elapsed().as_secs_f64() * 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_split_into_scheme_and_authority() {
        assert_eq!(split("https://gpu-1:8765/"), (true, "gpu-1:8765"));
        assert_eq!(split("http://gpu-1:8765"), (false, "gpu-1:8765"));
        assert_eq!(split("gpu-1:8765"), (false, "gpu-1:8765"));
        assert_eq!(split("[::1]:8765//"), (false, "[::1]:8765"));
        // Only the lower-case schemes are known; anything else is an authority to dial.
        assert_eq!(split("HTTPS://gpu-1:8765"), (false, "HTTPS://gpu-1:8765"));
    }

    #[test]
    fn a_failed_answer_says_why_and_nothing_else() {
        let a = failed("gpu-1:8765", "the request task failed".into());
        assert_eq!(a.node, "gpu-1:8765");
        assert!(!a.ok);
        assert_eq!(a.warning.as_deref(), Some("the request task failed"));
        assert!(a.result.is_none() && a.refusal.is_none() && a.clock_offset_ns.is_none());
    }
}
