//! Streamable HTTP transport: rmcp's `StreamableHttpService` served through hyper-util, with
//! a bearer token (constant-time compare), optional TLS (rustls), and the limits of `limits.rs`
//! on every route (MCP, the query API, `/metrics`, the web report at `/`): Host and Origin
//! (DNS-rebinding and cross-site defence), declared and actual body sizes, header and body
//! deadlines, open connections, and MCP sessions in all and per client (`sessions.rs`). Refusals are bare 401/403/413 responses that
//! say nothing about the server, and 503 with `Retry-After` when a cap is reached.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use causeway_tools::Context;
use http_body_util::{BodyExt, Empty, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tower_service::Service;

use super::handler::CausewayServer;
use super::limits::{AcceptBackoff, AccessPolicy, DeadlineBody, declared_too_large};
use super::sessions::{Refusal, SESSION_HEADER, SessionGuard};

/// A 503 written straight to a connection over the cap, which is then closed.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// A bare 503 asking the client to come back.
fn unavailable() -> Response<Body> {
    let mut r = bare(StatusCode::SERVICE_UNAVAILABLE);
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("5"),
    );
    r
}

/// How the HTTP transport is exposed.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Address to bind.
    pub addr: SocketAddr,
    /// Bearer token every request must carry (required off loopback).
    pub token: Option<String>,
    /// PEM certificate chain and private key for TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// With TLS: require client certificates signed by these CAs (PEM), i.e. mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// Browser origins allowed besides the loopback ones.
    pub allowed_origins: Vec<String>,
    /// Host names (Host header) allowed besides the loopback ones.
    pub allowed_hosts: Vec<String>,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// Open connections served at once; more are answered 503.
    pub max_connections: usize,
    /// MCP sessions at once; a new `initialize` beyond it is answered 503.
    pub max_sessions: usize,
    /// MCP sessions one client (peer address) holds at once; beyond it, 503.
    pub max_sessions_per_client: usize,
    /// A session that no request named since its `initialize` is closed after this long.
    pub unused_session_timeout: std::time::Duration,
    /// Time a client has to send a request's headers (and an idle keep-alive connection lives).
    pub header_timeout: std::time::Duration,
    /// Time a client has to send a whole request body.
    pub body_timeout: std::time::Duration,
}

/// A request body as the routes read it: cut off when it has not all arrived in time.
pub(crate) type InBody = DeadlineBody<Incoming>;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

pub(crate) fn bare(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Empty::<Bytes>::new().boxed());
    *r.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
    }
    r
}

/// Constant-time comparison of the presented and expected token.
pub(crate) fn token_ok(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = presented.len() ^ expected.len();
    for (i, e) in expected.iter().enumerate() {
        diff |= usize::from(presented.get(i).copied().unwrap_or(0) ^ e);
    }
    diff == 0
}

fn authorized<B>(req: &Request<B>, token: Option<&str>) -> bool {
    let Some(expected) = token else { return true };
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| token_ok(t.trim().as_bytes(), expected.as_bytes()))
}

fn rmcp_config(o: &HttpOptions, policy: &AccessPolicy) -> StreamableHttpServerConfig {
    let loopback = o.addr.ip().is_loopback();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(policy.origins().to_vec())
        .enforce_origin_validation()
        .with_max_request_body_bytes(o.max_body_bytes);
    if !o.allowed_hosts.is_empty() {
        let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(o.allowed_hosts.iter().cloned());
        config = config.with_allowed_hosts(hosts);
    } else if !loopback {
        // Off loopback a token is mandatory, which already defeats DNS rebinding; clients
        // reach the server under names we cannot know in advance.
        config = config.disable_allowed_hosts();
    }
    config
}

fn tls_acceptor(
    cert: &PathBuf,
    key: &PathBuf,
    client_ca: Option<&PathBuf>,
) -> Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect())
        .with_context(|| {
            format!(
                "{}: cannot read the TLS certificate chain (PEM)",
                cert.display()
            )
        })?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("{}: cannot read the TLS private key (PEM)", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("configuring TLS")?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("{}: cannot read the client CA (PEM)", ca.display()))?
            {
                roots
                    .add(c.with_context(|| format!("{}: bad PEM", ca.display()))?)
                    .with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .context("building the client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context(causeway_store::Hinted::new(
            "the TLS certificate and key do not match",
            "pass the key of the --tls-cert certificate",
        ))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// OTLP/HTTP receiving next to MCP (`causeway collect`): the ingest queue and the largest
/// OTLP body in bytes.
#[derive(Debug, Clone)]
pub struct OtlpRoutes {
    /// Where received rows go.
    pub ingest: Arc<causeway_ingest::Ingest>,
    /// The memory the requests being decoded may hold together.
    pub budget: Arc<causeway_ingest::MemoryBudget>,
    /// Largest OTLP request body.
    pub max_body_bytes: usize,
}

/// Binds and serves until the process is stopped. `on_ready` gets the bound address.
pub async fn serve(
    ctx: Arc<Context>,
    o: HttpOptions,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<()> {
    serve_with(ctx, o, None, on_ready).await
}

/// [`serve`], plus OTLP/HTTP `POST /v1/metrics` and `/v1/logs` when `otlp` is given.
pub async fn serve_with(
    ctx: Arc<Context>,
    o: HttpOptions,
    otlp: Option<OtlpRoutes>,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<()> {
    let tls = match &o.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key, o.client_ca.as_ref())?),
        None => None,
    };
    let listener = TcpListener::bind(o.addr).await.with_context(|| {
        causeway_store::Hinted::new(
            format!("cannot listen on {}", o.addr),
            "choose another --listen address or port",
        )
    })?;
    let bound = listener.local_addr()?;
    let scheme = if o.tls.is_some() { "https" } else { "http" };
    let policy = Arc::new(AccessPolicy::new(
        super::api::allowed_hosts(&o),
        scheme,
        &o.allowed_origins,
    ));
    let mcp_ctx = ctx.clone();
    let manager = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(CausewayServer::new(mcp_ctx.clone())),
        manager.clone(),
        rmcp_config(&o, &policy),
    );
    let sessions = SessionGuard::new(
        manager,
        o.max_sessions,
        o.max_sessions_per_client,
        o.unused_session_timeout,
    );
    tokio::spawn(sessions.clone().run_expiry());
    let token: Option<Arc<str>> = o.token.as_deref().map(Arc::from);
    // One gatherer for every scrape: each reads only what was recorded since the last one.
    let gatherer = Arc::new(std::sync::Mutex::new(
        causeway_export::gather::Gatherer::default(),
    ));
    // One report cache for every page: polls of an unchanged store are answered from it.
    let reports: super::page::Reports = Arc::default();
    let max_body = o.max_body_bytes;
    let max_connections =
        super::limits::connection_cap(o.max_connections, super::limits::raise_fd_limit());
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let (header_timeout, body_timeout) = (o.header_timeout, o.body_timeout);
    let (max_sessions, per_client) = (o.max_sessions, o.max_sessions_per_client);
    tracing::info!(addr = %bound, tls = tls.is_some(), auth = token.is_some(), max_connections, max_sessions, per_client, "MCP over streamable HTTP");
    on_ready(bound);
    let mut backoff = AcceptBackoff::default();
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(s) => {
                backoff.succeeded();
                s
            }
            Err(e) => {
                // Out of descriptors: the pending connection stays queued; retrying at once
                // would spin on the same error.
                tokio::time::sleep(backoff.failed(&e)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(1),
                    stream.write_all(OVER_CAPACITY),
                )
                .await;
            });
            tracing::debug!(%peer, "503: at the connection cap");
            continue;
        };
        let service = service.clone();
        let token = token.clone();
        let tls = tls.clone();
        let ctx = ctx.clone();
        let policy = policy.clone();
        let otlp = otlp.clone();
        let gatherer = gatherer.clone();
        let sessions = sessions.clone();
        let reports = reports.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let handler = hyper::service::service_fn(move |req: Request<Incoming>| {
                let mut service = service.clone();
                let ok = authorized(&req, token.as_deref());
                let ctx = ctx.clone();
                let policy = policy.clone();
                let gatherer = gatherer.clone();
                let sessions = sessions.clone();
                let reports = reports.clone();
                let otlp = otlp.clone().filter(|_| {
                    matches!(
                        req.uri().path(),
                        super::otlp_receive::METRICS_PATH | super::otlp_receive::LOGS_PATH
                    )
                });
                async move {
                    if !ok {
                        tracing::info!(%peer, "401: missing or wrong bearer token");
                        if let Some(o) = &otlp {
                            o.ingest.count_unauthorized();
                        }
                        return Ok::<_, Infallible>(bare(StatusCode::UNAUTHORIZED));
                    }
                    if let Some(code) = policy.refuse(&req) {
                        tracing::info!(%peer, "403: Host or Origin not allowed");
                        return Ok(bare(code));
                    }
                    // OTLP routes answer an oversized body themselves, with a google.rpc.Status.
                    if otlp.is_none() && declared_too_large(&req, max_body) {
                        return Ok(bare(StatusCode::PAYLOAD_TOO_LARGE));
                    }
                    let req = req.map(|b| DeadlineBody::new(body_timeout, b));
                    if let Some(o) = otlp {
                        return Ok(super::otlp_receive::handle_http(
                            req,
                            o.ingest,
                            o.max_body_bytes,
                            o.budget,
                        )
                        .await);
                    }
                    if req.uri().path() == "/metrics" {
                        return Ok(super::api::metrics(&req, ctx, gatherer).await);
                    }
                    // GET only: a POST to `/` still reaches MCP, as it did before the page.
                    if req.uri().path() == "/"
                        && matches!(*req.method(), hyper::Method::GET | hyper::Method::HEAD)
                    {
                        return Ok(super::page::page(&req, ctx, reports).await);
                    }
                    if req.uri().path() == causeway_report::LIVE_DATA_PATH {
                        return Ok(super::page::data(&req, ctx, reports).await);
                    }
                    if req.uri().path().starts_with(super::api::PREFIX) {
                        return Ok(super::api::handle(req, ctx, max_body).await);
                    }
                    let starts = starts_a_session(&req);
                    if starts {
                        match sessions.admit(peer.ip()).await {
                            Ok(()) => {}
                            Err(Refusal::Server) => {
                                tracing::info!(%peer, max_sessions, "503: at the MCP session cap");
                                return Ok(unavailable());
                            }
                            Err(Refusal::Client) => {
                                tracing::info!(%peer, per_client, "503: at this client's MCP session cap");
                                return Ok(unavailable());
                            }
                        }
                    } else if let Some(id) = session_of(req.headers()) {
                        sessions.touched(id);
                    }
                    let resp = service.call(req).await?;
                    if starts && let Some(id) = session_of(resp.headers()) {
                        sessions.opened(id, peer.ip());
                    }
                    if resp.status() == StatusCode::FORBIDDEN {
                        tracing::info!(%peer, "403: Host or Origin not allowed");
                        return Ok(bare(StatusCode::FORBIDDEN));
                    }
                    Ok(resp)
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            let result = match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => builder.serve_connection(TokioIo::new(s), handler).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    }
                }
                None => {
                    builder
                        .serve_connection(TokioIo::new(stream), handler)
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// A POST to `/mcp` without a session id: an `initialize` that would create a session.
fn starts_a_session<B>(req: &Request<B>) -> bool {
    req.method() == hyper::Method::POST && !req.headers().contains_key(SESSION_HEADER)
}

/// The MCP session a request names, or a response created.
fn session_of(headers: &hyper::HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(token_ok(b"secret", b"secret"));
        assert!(!token_ok(b"secreT", b"secret"));
        assert!(!token_ok(b"secret-longer", b"secret"));
        assert!(!token_ok(b"", b"secret"));
    }

    fn with_headers(method: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri("/mcp");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn only_the_bearer_scheme_with_the_exact_token_is_authorized() {
        let auth = |v: &str| with_headers("POST", &[("Authorization", v)]);
        assert!(authorized(&auth("Bearer s3cret"), Some("s3cret")));
        // Surrounding blanks of the token itself are forgiven, not the scheme's spelling.
        assert!(authorized(&auth("Bearer  s3cret "), Some("s3cret")));
        for bad in [
            "bearer s3cret",
            "Basic s3cret",
            "s3cret",
            "Bearer s3cre",
            "Bearer ",
        ] {
            assert!(!authorized(&auth(bad), Some("s3cret")), "{bad}");
        }
        assert!(!authorized(&with_headers("GET", &[]), Some("s3cret")));
        // No token configured (loopback): every request passes.
        assert!(authorized(&with_headers("GET", &[]), None));
    }

    #[test]
    fn refusals_are_bare_and_a_401_names_the_scheme() {
        let r = bare(StatusCode::UNAUTHORIZED);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[hyper::header::WWW_AUTHENTICATE], "Bearer");
        let r = bare(StatusCode::FORBIDDEN);
        assert!(r.headers().is_empty(), "{:?}", r.headers());
        let r = unavailable();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[hyper::header::RETRY_AFTER], "5");
        assert!(OVER_CAPACITY.starts_with(b"HTTP/1.1 503 "));
    }

    #[test]
    fn a_post_without_a_session_id_starts_a_session() {
        assert!(starts_a_session(&with_headers("POST", &[])));
        let named = with_headers("POST", &[("Mcp-Session-Id", "abc")]);
        assert!(!starts_a_session(&named));
        assert_eq!(session_of(named.headers()), Some("abc"));
        assert!(!starts_a_session(&with_headers("GET", &[])));
        assert!(!starts_a_session(&with_headers("DELETE", &[])));
        assert_eq!(session_of(with_headers("POST", &[]).headers()), None);
    }

    /// A CA and a certificate it signed for 127.0.0.1, as PEM files in `dir`; returns
    /// (ca, cert, key, another key).
    fn pki(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let p = |n: &str| dir.join(n);
        std::fs::write(p("ca.pem"), ca.pem()).unwrap();
        std::fs::write(p("server.pem"), cert.pem()).unwrap();
        std::fs::write(p("server.key"), key.serialize_pem()).unwrap();
        let other = KeyPair::generate().unwrap();
        std::fs::write(p("other.key"), other.serialize_pem()).unwrap();
        (
            p("ca.pem"),
            p("server.pem"),
            p("server.key"),
            p("other.key"),
        )
    }

    #[test]
    fn tls_configuration_errors_say_which_file_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key, other) = pki(dir.path());
        assert!(tls_acceptor(&cert, &key, None).is_ok());
        assert!(tls_acceptor(&cert, &key, Some(&ca)).is_ok(), "mutual TLS");
        let missing = dir.path().join("missing.pem");
        let e = tls_acceptor(&missing, &key, None).err().expect("refused");
        assert!(
            format!("{e:#}").contains("missing.pem: cannot read the TLS certificate chain (PEM)"),
            "{e:#}"
        );
        let e = tls_acceptor(&cert, &missing, None).err().expect("refused");
        assert!(
            format!("{e:#}").contains("missing.pem: cannot read the TLS private key (PEM)"),
            "{e:#}"
        );
        let e = tls_acceptor(&cert, &key, Some(&missing))
            .err()
            .expect("refused");
        assert!(
            format!("{e:#}").contains("missing.pem: cannot read the client CA (PEM)"),
            "{e:#}"
        );
        // A key of another certificate: the message and the fix travel together.
        let e = tls_acceptor(&cert, &other, None).err().expect("refused");
        let h = e
            .downcast_ref::<causeway_store::Hinted>()
            .expect("a hinted error");
        assert_eq!(h.message, "the TLS certificate and key do not match");
        assert_eq!(h.hint, "pass the key of the --tls-cert certificate");
    }
}
