//! Pushes OTLP metrics and logs (built by `causeway_export::otlp`) to an OpenTelemetry
//! Collector or any OTLP receiver: OTLP/HTTP (protobuf, POST {endpoint}/v1/metrics and
//! /v1/logs) on the hyper client the fleet fan-out uses, or OTLP/gRPC on tonic's generated
//! clients; the bearer token goes in `Authorization` (header or metadata), TLS trusts --ca-cert.
//! [`live`] pushes periodically from a growing trace (`trace --otlp-endpoint`).

pub mod live;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use hyper::body::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;

use crate::fleet::{HttpTarget, send};

/// Largest answer read from a receiver.
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// Most characters of a receiver's error body quoted in a message.
const MAX_QUOTED: usize = 400;

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (the collector's port 4318).
    Http,
    /// OTLP/gRPC (the collector's port 4317).
    Grpc,
}

/// The OTLP options shared by `export --format otlp` and `trace --otlp-endpoint`, resolved.
#[derive(Clone)]
pub struct Target {
    /// The endpoint as given.
    pub url: String,
    protocol: Protocol,
    https: bool,
    /// `host:port`.
    authority: String,
    host: String,
    /// Path prefix for OTLP/HTTP ('' or `/prefix`).
    base_path: String,
    token: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    ca_pem: Option<Vec<u8>>,
    timeout: Duration,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("protocol", &self.protocol)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// One OTLP signal: its request and response messages, HTTP path and gRPC call.
trait Signal: Message + Sized + Send + 'static {
    /// The receiver's answer.
    type Response: Message + Default;
    /// OTLP/HTTP path below the endpoint.
    const PATH: &'static str;
    /// Points or records the receiver rejected (partial success).
    fn rejected(r: &Self::Response) -> i64;
    /// The gRPC `Export` call.
    async fn export(
        channel: tonic::transport::Channel,
        req: tonic::Request<Self>,
    ) -> Result<Self::Response, tonic::Status>;
}

impl Signal for ExportMetricsServiceRequest {
    type Response = ExportMetricsServiceResponse;
    const PATH: &'static str = "/v1/metrics";
    fn rejected(r: &Self::Response) -> i64 {
        r.partial_success
            .as_ref()
            .map_or(0, |p| p.rejected_data_points)
    }
    async fn export(
        channel: tonic::transport::Channel,
        req: tonic::Request<Self>,
    ) -> Result<Self::Response, tonic::Status> {
        Ok(MetricsServiceClient::new(channel)
            .export(req)
            .await?
            .into_inner())
    }
}

impl Signal for ExportLogsServiceRequest {
    type Response = ExportLogsServiceResponse;
    const PATH: &'static str = "/v1/logs";
    fn rejected(r: &Self::Response) -> i64 {
        r.partial_success
            .as_ref()
            .map_or(0, |p| p.rejected_log_records)
    }
    async fn export(
        channel: tonic::transport::Channel,
        req: tonic::Request<Self>,
    ) -> Result<Self::Response, tonic::Status> {
        Ok(LogsServiceClient::new(channel)
            .export(req)
            .await?
            .into_inner())
    }
}

/// What the receiver said about one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// Bytes sent (the encoded request).
    pub bytes: usize,
    /// Data points or log records the receiver rejected (partial success), 0 when all taken.
    pub rejected: i64,
}

fn bad_url(url: &str, why: &str) -> anyhow::Error {
    anyhow!(causeway_store::Hinted::new(
        format!("bad OTLP endpoint {url:?}: {why}"),
        "give a URL such as http://collector:4318 (--protocol http) or http://collector:4317 (--protocol grpc); https needs --ca-cert"
    ))
}

impl Target {
    /// Parses `url` and reads the CA file; no connection is made yet.
    pub fn new(
        url: &str,
        protocol: Protocol,
        token: Option<String>,
        ca_cert: Option<&Path>,
        timeout: Duration,
    ) -> Result<Target> {
        let uri: hyper::Uri = url.parse().map_err(|e| bad_url(url, &format!("{e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(bad_url(url, &format!("unsupported scheme {other:?}"))),
            None => return Err(bad_url(url, "no scheme (http:// or https://)")),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad_url(url, "no host"))?
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let base_path = uri.path().trim_end_matches('/').to_string();
        if uri.query().is_some() {
            return Err(bad_url(url, "a query string is not allowed"));
        }
        if protocol == Protocol::Grpc && !base_path.is_empty() {
            return Err(bad_url(
                url,
                "an OTLP/gRPC endpoint takes no path (the service path is fixed)",
            ));
        }
        let (tls, ca_pem) = match (https, ca_cert) {
            (true, Some(ca)) => {
                let pem = std::fs::read(ca)
                    .with_context(|| format!("{}: cannot read the CA certificate", ca.display()))?;
                (
                    Some(Arc::new(crate::fleet::tls_config(&ca.to_path_buf(), None)?)),
                    Some(pem),
                )
            }
            (true, None) => bail!(causeway_store::Hinted::new(
                format!("{url} is https but no CA certificate was given"),
                "pass --ca-cert PEM with the CA that signed the receiver's certificate"
            )),
            (false, Some(_)) => bail!(causeway_store::Hinted::new(
                "--ca-cert is only used with an https:// endpoint",
                format!("use https://{authority} or drop --ca-cert")
            )),
            (false, None) => (None, None),
        };
        Ok(Target {
            url: url.to_string(),
            protocol,
            https,
            authority,
            host,
            base_path,
            token,
            tls,
            ca_pem,
            timeout,
        })
    }

    /// Sends the metrics request.
    pub async fn push_metrics(&self, req: ExportMetricsServiceRequest) -> Result<Pushed> {
        self.push(req).await
    }

    /// Sends the logs request.
    pub async fn push_logs(&self, req: ExportLogsServiceRequest) -> Result<Pushed> {
        self.push(req).await
    }

    async fn push<S: Signal>(&self, req: S) -> Result<Pushed> {
        let bytes = req.encoded_len();
        let rejected = match self.protocol {
            Protocol::Http => {
                let answer = self.post(S::PATH, req.encode_to_vec()).await?;
                S::Response::decode(answer).map_or(0, |r| S::rejected(&r))
            }
            Protocol::Grpc => {
                let channel = self.channel().await?;
                let resp =
                    tokio::time::timeout(self.timeout, S::export(channel, self.grpc_request(req)?))
                        .await
                        .map_err(|_| self.timed_out())?
                        .map_err(|s| self.grpc_error(s))?;
                S::rejected(&resp)
            }
        };
        Ok(Pushed { bytes, rejected })
    }

    fn timed_out(&self) -> anyhow::Error {
        anyhow!(causeway_store::Hinted::new(
            format!("{}: no answer within {:?}", self.url, self.timeout),
            "check that an OTLP receiver listens there"
        ))
    }

    fn refused(&self, code: String) -> anyhow::Error {
        anyhow!(causeway_store::Hinted::new(
            format!(
                "{} refused the push ({code}): the bearer token is missing or wrong",
                self.url
            ),
            "set CAUSEWAY_TOKEN or pass --token-file FILE with the token the receiver expects"
        ))
    }

    /// POST `body` to {base}{path}; returns the answer body of a 2xx.
    async fn post(&self, path: &str, body: Vec<u8>) -> Result<Bytes> {
        let to = HttpTarget {
            authority: &self.authority,
            tls: self.tls.as_ref(),
            token: self.token.as_deref(),
        };
        let full = format!("{}{path}", self.base_path);
        let (status, answer) = tokio::time::timeout(
            self.timeout,
            send(
                &to,
                hyper::Method::POST,
                &full,
                "application/x-protobuf",
                Bytes::from(body),
                MAX_ANSWER_BYTES,
            ),
        )
        .await
        .map_err(|_| self.timed_out())?
        .map_err(|e| {
            anyhow!(causeway_store::Hinted::new(format!("cannot push to {}: {e:#}", self.url), "check the endpoint and that an OTLP/HTTP receiver listens there (the OpenTelemetry Collector's default is port 4318)"))
        })?;
        match status {
            200..=299 => Ok(answer),
            401 | 403 => Err(self.refused(format!("HTTP {status}"))),
            _ => Err(anyhow!(causeway_store::Hinted::new(
                format!(
                    "{}: POST {full} answered HTTP {status}: {}",
                    self.url,
                    quote(&answer)
                ),
                "check that the endpoint is an OTLP/HTTP receiver and that its path prefix is right"
            ))),
        }
    }

    async fn channel(&self) -> Result<tonic::transport::Channel> {
        let scheme = if self.https { "https" } else { "http" };
        let mut ep =
            tonic::transport::Endpoint::from_shared(format!("{scheme}://{}", self.authority))
                .map_err(|e| bad_url(&self.url, &e.to_string()))?
                .connect_timeout(self.timeout)
                .timeout(self.timeout);
        if let Some(pem) = &self.ca_pem {
            ep = ep
                .tls_config(
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(tonic::transport::Certificate::from_pem(pem))
                        .domain_name(self.host.trim_matches(['[', ']'])),
                )
                .context("configuring TLS for gRPC")?;
        }
        ep.connect().await.map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                let s_text = s.to_string();
                if !msg.contains(&s_text) {
                    msg.push_str(&format!(": {s_text}"));
                }
                src = s.source();
            }
            anyhow!(causeway_store::Hinted::new(format!("cannot connect to {}: {msg}", self.url), "check the endpoint and that an OTLP/gRPC receiver listens there (the OpenTelemetry Collector's default is port 4317)"))
        })
    }

    fn grpc_request<T>(&self, msg: T) -> Result<tonic::Request<T>> {
        let mut req = tonic::Request::new(msg);
        if let Some(t) = &self.token {
            let v = format!("Bearer {t}").parse().map_err(|_| {
                anyhow!(causeway_store::Hinted::new(
                    "the bearer token has characters a gRPC header cannot carry",
                    "use a token of printable ASCII, e.g. `openssl rand -hex 32`"
                ))
            })?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }

    fn grpc_error(&self, s: tonic::Status) -> anyhow::Error {
        use tonic::Code;
        match s.code() {
            Code::Unauthenticated | Code::PermissionDenied => {
                self.refused(format!("gRPC {:?}", s.code()))
            }
            Code::Unavailable => anyhow!(causeway_store::Hinted::new(
                format!(
                    "cannot push to {}: unavailable: {}",
                    self.url,
                    quote(s.message().as_bytes())
                ),
                "check the endpoint and that an OTLP/gRPC receiver listens there"
            )),
            Code::Unimplemented => anyhow!(causeway_store::Hinted::new(
                format!(
                    "{} does not implement this OTLP service: {}",
                    self.url,
                    quote(s.message().as_bytes())
                ),
                "is it an OTLP/gRPC receiver? For OTLP/HTTP use --protocol http"
            )),
            code => anyhow!(causeway_store::Hinted::new(
                format!(
                    "{} answered gRPC {code:?}: {}",
                    self.url,
                    quote(s.message().as_bytes())
                ),
                "see the receiver's logs"
            )),
        }
    }
}

/// A receiver's answer for a message: text, control characters stripped, capped.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let s = causeway_store::sanitize::sanitize_with(text.trim(), MAX_QUOTED);
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

/// `FILE` with `.logs` before its extension: `otlp.pb` -> `otlp.logs.pb`, `out` -> `out.logs`.
pub fn logs_path(metrics: &Path) -> std::path::PathBuf {
    let stem = metrics
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match metrics.extension() {
        Some(ext) => format!("{stem}.logs.{}", ext.to_string_lossy()),
        None => format!("{stem}.logs"),
    };
    metrics.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_file_sits_beside_the_metrics_file() {
        assert_eq!(
            logs_path(Path::new("/tmp/x/otlp.pb")),
            Path::new("/tmp/x/otlp.logs.pb")
        );
        assert_eq!(logs_path(Path::new("out")), Path::new("out.logs"));
    }

    #[test]
    fn endpoints_are_checked() {
        let t = |u: &str, p| Target::new(u, p, None, None, Duration::from_secs(1));
        let ok = t("http://127.0.0.1:4318/otlp/", Protocol::Http).unwrap();
        assert_eq!(ok.authority, "127.0.0.1:4318");
        assert_eq!(ok.base_path, "/otlp");
        assert_eq!(
            t("http://[::1]", Protocol::Grpc).unwrap().authority,
            "[::1]:80"
        );
        for (bad, why) in [
            ("collector:4318", "scheme"),
            ("ftp://x:1", "unsupported scheme"),
            ("http://", "bad OTLP endpoint"),
            ("http://x:4317/v1", "takes no path"),
        ] {
            let p = if bad.ends_with("/v1") {
                Protocol::Grpc
            } else {
                Protocol::Http
            };
            let e = format!("{:#}", t(bad, p).unwrap_err());
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = t("https://x:4318", Protocol::Http).unwrap_err();
        let hint = &e.downcast_ref::<causeway_store::Hinted>().unwrap().hint;
        assert!(hint.contains("--ca-cert"), "{e}: {hint}");
    }

    #[test]
    fn ports_default_by_scheme_and_ipv6_hosts_keep_their_brackets() {
        let t = |u: &str| Target::new(u, Protocol::Http, None, None, Duration::from_secs(1));
        let plain = t("http://collector").unwrap();
        assert_eq!(
            (plain.authority.as_str(), plain.https),
            ("collector:80", false)
        );
        assert_eq!(plain.base_path, "");
        let v6 = t("http://[fd00::7]:4318/").unwrap();
        assert_eq!(v6.authority, "[fd00::7]:4318");
        assert_eq!(v6.base_path, "", "a lone slash is no prefix");
        let e = t("http://collector:4318/v1?x=1").unwrap_err();
        assert!(
            format!("{e:#}").contains("a query string is not allowed"),
            "{e:#}"
        );
    }

    /// A PEM CA certificate in `dir`.
    fn ca_file(dir: &Path) -> std::path::PathBuf {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let path = dir.join("ca.pem");
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        path
    }

    #[test]
    fn a_ca_goes_with_https_only() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca_file(dir.path());
        let t = |u: &str, ca: &Path| {
            Target::new(u, Protocol::Grpc, None, Some(ca), Duration::from_secs(1))
        };
        let https = t("https://collector.example", &ca).unwrap();
        assert_eq!(https.authority, "collector.example:443");
        assert!(https.https && https.tls.is_some() && https.ca_pem.is_some());
        let e = t("http://collector:4317", &ca).unwrap_err();
        let h = e.downcast_ref::<causeway_store::Hinted>().unwrap();
        assert_eq!(
            h.message,
            "--ca-cert is only used with an https:// endpoint"
        );
        assert_eq!(h.hint, "use https://collector:4317 or drop --ca-cert");
        let missing = dir.path().join("missing.pem");
        let e = t("https://collector:4317", &missing).unwrap_err();
        assert!(
            format!("{e:#}").contains("missing.pem: cannot read the CA certificate"),
            "{e:#}"
        );
    }

    #[test]
    fn the_token_never_reaches_a_debug_line() {
        let t = Target::new(
            "http://127.0.0.1:4318",
            Protocol::Http,
            Some("hunter2-token".into()),
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        let text = format!("{t:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<set>"), "{text}");
    }

    #[test]
    fn receiver_text_is_quoted_clean_and_short() {
        assert_eq!(quote(b""), "(empty body)");
        assert_eq!(quote(b"  \n "), "(empty body)");
        assert_eq!(quote(b" queue full\n"), "queue full");
        let q = quote(b"bad \x1b[2J\x07 input");
        assert!(!q.contains('\u{1b}') && !q.contains('\u{7}'), "{q:?}");
        // Capped, and marked as cut.
        let long = quote(&[b'x'; 10_000]);
        assert_eq!(long, format!("{}…", "x".repeat(MAX_QUOTED)));
        // Not UTF-8: quoted lossily rather than refused.
        assert!(quote(b"\xff\xfe oops").ends_with("oops"));
    }

    #[test]
    fn grpc_status_codes_become_errors_with_what_to_check() {
        let t = Target::new(
            "http://collector:4317",
            Protocol::Grpc,
            None,
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        let hinted = |s: tonic::Status| {
            let e = t.grpc_error(s);
            let h = e.downcast_ref::<causeway_store::Hinted>().unwrap().clone();
            (h.message, h.hint)
        };
        for s in [
            tonic::Status::unauthenticated("no"),
            tonic::Status::permission_denied("no"),
        ] {
            let code = s.code();
            let (m, h) = hinted(s);
            assert_eq!(
                m,
                format!(
                    "http://collector:4317 refused the push (gRPC {code:?}): the bearer token is missing or wrong"
                )
            );
            assert!(h.contains("--token-file"), "{h}");
        }
        let (m, _) = hinted(tonic::Status::unavailable(""));
        assert_eq!(
            m,
            "cannot push to http://collector:4317: unavailable: (empty body)"
        );
        let (m, h) = hinted(tonic::Status::unimplemented("unknown service"));
        assert!(
            m.contains("does not implement this OTLP service: unknown service"),
            "{m}"
        );
        assert!(h.contains("--protocol http"), "{h}");
        let (m, h) = hinted(tonic::Status::resource_exhausted("slow down"));
        assert_eq!(
            m,
            "http://collector:4317 answered gRPC ResourceExhausted: slow down"
        );
        assert_eq!(h, "see the receiver's logs");
    }

    #[test]
    fn a_token_is_sent_as_bearer_metadata_if_a_header_can_carry_it() {
        let t = |token: &str| {
            Target::new(
                "http://collector:4317",
                Protocol::Grpc,
                Some(token.into()),
                None,
                Duration::from_secs(1),
            )
            .unwrap()
        };
        let req = t("abc123").grpc_request(()).unwrap();
        assert_eq!(
            req.metadata().get("authorization").unwrap(),
            "Bearer abc123"
        );
        let e = t("two\nlines").grpc_request(()).unwrap_err();
        let h = e.downcast_ref::<causeway_store::Hinted>().unwrap();
        assert!(h.hint.contains("printable ASCII"), "{}", h.hint);
    }
}
