//! OTLP over real transports: the `causeway` binary pushes to receivers that play the
//! OpenTelemetry Collector in this test, an OTLP/HTTP server on hyper and an OTLP/gRPC server
//! on tonic with opentelemetry-proto's generated services, over loopback. The token must
//! arrive, the payloads must decode, and refusals and failures must end in clear errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

use crate::common::{causeway, ok, scratch};

pub(crate) const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// One request a receiver got: (path or gRPC service, authorization, content type, body).
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub(crate) path: String,
    pub(crate) auth: String,
    content_type: String,
    pub(crate) body: Vec<u8>,
}

#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<Got>>>);

impl Log {
    pub(crate) fn take(&self) -> Vec<Got> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// How the HTTP receiver answers: 200 (with the token) or a fixed status and body.
#[derive(Clone)]
pub(crate) struct Answer(pub(crate) u16, pub(crate) &'static str);

/// An OTLP/HTTP receiver on loopback: answers 401 without `Bearer TOKEN`, else `answer`.
pub(crate) fn http_receiver(answer: Answer) -> (String, Log, tokio::runtime::Runtime) {
    receiver_on(answer, None)
}

/// The server side of TLS for the test's receivers: server.pem/server.key from `fleet::pki`.
fn tls_acceptor(dir: &Path) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// [`http_receiver`], over TLS when `tls` is given (https URL).
fn receiver_on(
    answer: Answer,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (String, Log, tokio::runtime::Runtime) {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let log = Log::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let l = log.clone();
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (l, answer, tls) = (l.clone(), answer.clone(), tls.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (l, answer) = (l.clone(), answer.clone());
                        async move {
                            let header = |n: hyper::header::HeaderName| {
                                req.headers()
                                    .get(n)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_string()
                            };
                            let got = Got {
                                path: req.uri().path().to_string(),
                                auth: header(hyper::header::AUTHORIZATION),
                                content_type: header(hyper::header::CONTENT_TYPE),
                                body: Vec::new(),
                            };
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes().to_vec())
                                .unwrap_or_default();
                            let authorized = got.auth == format!("Bearer {TOKEN}");
                            l.0.lock().unwrap().push(Got { body, ..got });
                            let (status, text) = if !authorized {
                                (401, "missing or bad token")
                            } else {
                                (answer.0, answer.1)
                            };
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .status(status)
                                    .header("content-type", "text/plain")
                                    .body(Full::new(Bytes::from(text)))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            });
        }
    });
    (format!("{scheme}://{addr}"), log, rt)
}

/// The OTLP/gRPC services of the test's receiver: record, then check the token.
#[derive(Clone)]
struct Grpc(Log);

impl Grpc {
    fn record<T: Message>(
        &self,
        service: &str,
        req: &tonic::Request<T>,
    ) -> Result<(), tonic::Status> {
        let auth = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        self.0.0.lock().unwrap().push(Got {
            path: service.into(),
            auth: auth.clone(),
            content_type: "application/grpc".into(),
            body: req.get_ref().encode_to_vec(),
        });
        if auth == format!("Bearer {TOKEN}") {
            Ok(())
        } else {
            Err(tonic::Status::unauthenticated("bad token"))
        }
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.record("metrics", &req)?;
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.record("logs", &req)?;
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

fn grpc_receiver() -> (String, Log, tokio::runtime::Runtime) {
    grpc_receiver_on(None)
}

/// [`grpc_receiver`], over TLS with server.pem/server.key in `tls` when given.
fn grpc_receiver_on(tls: Option<&Path>) -> (String, Log, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let log = Log::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let svc = Grpc(log.clone());
    let mut server = tonic::transport::Server::builder();
    if let Some(dir) = tls {
        let identity = tonic::transport::Identity::from_pem(
            std::fs::read(dir.join("server.pem")).unwrap(),
            std::fs::read(dir.join("server.key")).unwrap(),
        );
        server = server
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .unwrap();
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    rt.spawn(
        server
            .add_service(MetricsServiceServer::new(svc.clone()))
            .add_service(LogsServiceServer::new(svc))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (format!("{scheme}://{addr}"), log, rt)
}

fn demo_store() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = scratch().join("otlp-incident.duckdb");
        ok(&["demo", "incident", "-o", p.to_str().unwrap()]);
        p
    })
    .clone()
}

/// `causeway export --db DB --format otlp --endpoint URL --token-file TF ARGS...`.
fn push(db: &str, url: &str, tf: &str, args: &[&str]) -> std::process::Output {
    let mut full = vec![
        "export",
        "--db",
        db,
        "--format",
        "otlp",
        "--endpoint",
        url,
        "--token-file",
        tf,
    ];
    full.extend_from_slice(args);
    causeway(&full)
}

fn token_file(dir: &Path, token: &str) -> String {
    let p = dir.join("token");
    std::fs::write(&p, format!("{token}\n")).unwrap();
    p.to_string_lossy().into_owned()
}

/// (data points, ops with histograms, chain records) of a decoded push.
fn decode(metrics: &[u8], logs: &[u8]) -> (usize, Vec<String>, usize) {
    let m = ExportMetricsServiceRequest::decode(metrics).expect("metrics decode");
    let l = ExportLogsServiceRequest::decode(logs).expect("logs decode");
    let mut points = 0;
    let mut ops = Vec::new();
    for metric in m
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
    {
        match &metric.data {
            Some(Data::Histogram(h)) => {
                for p in &h.data_points {
                    assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
                    for a in &p.attributes {
                        if let (true, Some(Value::StringValue(op))) = (
                            a.key == "op",
                            a.value.as_ref().and_then(|v| v.value.as_ref()),
                        ) {
                            ops.push(op.clone());
                        }
                    }
                }
                points += h.data_points.len();
            }
            Some(Data::Sum(s)) => points += s.data_points.len(),
            other => panic!("unexpected metric data {other:?}"),
        }
    }
    let records = l
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum();
    (points, ops, records)
}

/// The offline files of the same store: what the pushes must carry.
fn offline(dir: &Path, db: &str) -> (Vec<u8>, Vec<u8>) {
    let out = dir.join("otlp.pb");
    ok(&[
        "export",
        "--db",
        db,
        "--format",
        "otlp",
        "-o",
        out.to_str().unwrap(),
    ]);
    (
        std::fs::read(&out).unwrap(),
        std::fs::read(dir.join("otlp.logs.pb")).unwrap(),
    )
}

#[test]
fn export_pushes_over_otlp_http_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_store();
    let db = db.to_str().unwrap();
    let (url, log, _rt) = http_receiver(Answer(200, ""));
    let tf = token_file(dir.path(), TOKEN);
    let out = push(db, &url, &tf, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout is for data only");
    assert!(
        stderr.contains("pushed ") && stderr.contains(&url),
        "{stderr}"
    );
    let got = log.take();
    let paths: Vec<&str> = got.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/v1/metrics", "/v1/logs"],
        "metrics first, then logs"
    );
    for g in &got {
        assert_eq!(g.auth, format!("Bearer {TOKEN}"));
        assert_eq!(g.content_type, "application/x-protobuf");
    }
    let (points, ops, records) = decode(&got[0].body, &got[1].body);
    assert!(
        points > 0 && records > 0,
        "{points} points, {records} records"
    );
    assert!(ops.iter().any(|o| o == "cudaLaunchKernel"), "{ops:?}");
    let (file_metrics, _) = offline(dir.path(), db);
    assert!(
        file_metrics == got[0].body,
        "the push carries what -o writes"
    );

    // A path prefix is kept in front of /v1/...; the token also comes from CAUSEWAY_TOKEN.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["export", "--db", db, "--format", "otlp", "--endpoint"])
        .arg(format!("{url}/otlp/"))
        .env("CAUSEWAY_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paths: Vec<String> = log.take().into_iter().map(|g| g.path).collect();
    assert_eq!(paths, ["/otlp/v1/metrics", "/otlp/v1/logs"]);
}

#[test]
fn http_refusals_and_failures_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_store();
    let db = db.to_str().unwrap();
    let (url, log, _rt) = http_receiver(Answer(200, ""));
    let tf = token_file(dir.path(), "not-the-right-token-at-all");
    let out = push(db, &url, &tf, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused the push (HTTP 401)")
            && stderr.contains("hint: set CAUSEWAY_TOKEN"),
        "{stderr}"
    );
    assert_eq!(log.take().len(), 1, "nothing more is sent after a refusal");

    let (url, _log, _rt2) = http_receiver(Answer(500, "disk full on the collector"));
    let tf = token_file(dir.path(), TOKEN);
    let out = push(db, &url, &tf, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("answered HTTP 500: disk full on the collector"),
        "{stderr}"
    );

    // Nobody listens: a connection error naming the endpoint, with the default port as hint.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = causeway(&[
        "export",
        "--db",
        db,
        "--format",
        "otlp",
        "--endpoint",
        &format!("http://127.0.0.1:{port}"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot push to http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: "), "{stderr}");
}

#[test]
fn export_pushes_over_otlp_grpc_with_the_token_as_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_store();
    let db = db.to_str().unwrap();
    let (url, log, _rt) = grpc_receiver();
    let tf = token_file(dir.path(), TOKEN);
    let out = push(db, &url, &tf, &["--protocol", "grpc"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = log.take();
    let services: Vec<&str> = got.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(services, ["metrics", "logs"]);
    assert!(got.iter().all(|g| g.auth == format!("Bearer {TOKEN}")));
    let (points, ops, records) = decode(&got[0].body, &got[1].body);
    assert!(points > 0 && records > 0);
    assert!(ops.iter().any(|o| o == "cudaLaunchKernel"));
    let (file_metrics, _) = offline(dir.path(), db);
    assert!(
        file_metrics == got[0].body,
        "the push carries what -o writes"
    );

    let bad = token_file(dir.path(), "a-wrong-token-of-some-length");
    let out = push(db, &url, &bad, &["--protocol", "grpc"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refused the push (gRPC Unauthenticated)") && stderr.contains("hint:"),
        "{stderr}"
    );
}

/// https endpoints over both transports trust the CA given with --ca-cert, and only it.
#[test]
fn pushes_over_tls_trust_the_given_ca() {
    let dir = tempfile::tempdir().unwrap();
    crate::fleet::pki(dir.path());
    let db = demo_store();
    let db = db.to_str().unwrap();
    let tf = token_file(dir.path(), TOKEN);
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let (url, log, _rt) = receiver_on(Answer(200, ""), Some(tls_acceptor(dir.path())));
    let (gurl, glog, _grt) = grpc_receiver_on(Some(dir.path()));
    assert!(url.starts_with("https://") && gurl.starts_with("https://"));
    for (url, protocol, log) in [(&url, "http", &log), (&gurl, "grpc", &glog)] {
        let out = push(db, url, &tf, &["--protocol", protocol, "--ca-cert", ca]);
        assert!(
            out.status.success(),
            "{protocol}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = log.take();
        assert_eq!(got.len(), 2, "{protocol}");
        decode(&got[0].body, &got[1].body);
        // A CA that did not sign the receiver's certificate is refused by the handshake.
        let other = tempfile::tempdir().unwrap();
        crate::fleet::pki(other.path());
        let out = push(
            db,
            url,
            &tf,
            &[
                "--protocol",
                protocol,
                "--ca-cert",
                other.path().join("ca.pem").to_str().unwrap(),
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{protocol}: {stderr}");
        assert!(stderr.contains("hint:"), "{protocol}: {stderr}");
        assert!(
            log.take().is_empty(),
            "{protocol}: nothing arrives unverified"
        );
    }
}

#[test]
fn otlp_export_rejects_bad_input_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_store();
    let db = db.to_str().unwrap();
    let out_file = dir.path().join("m.pb");
    let o = out_file.to_str().unwrap();
    for (args, want) in [
        (vec!["--format", "otlp"], "needs --endpoint URL"),
        (
            vec!["--format", "otlp", "-o", "-"],
            "cannot write to stdout",
        ),
        (
            vec!["--format", "otlp", "--endpoint", "collector:4318"],
            "no scheme",
        ),
        (
            vec!["--format", "otlp", "--endpoint", "https://127.0.0.1:9"],
            "--ca-cert",
        ),
        (
            vec![
                "--format",
                "otlp",
                "--protocol",
                "grpc",
                "--endpoint",
                "http://h:4317/x",
            ],
            "takes no path",
        ),
        (
            vec![
                "--format",
                "otlp",
                "--protocol",
                "quic",
                "--endpoint",
                "http://h:1",
            ],
            "quic",
        ),
        (vec!["--format", "xml", "-o", o], "xml"),
        (vec!["--endpoint", "http://h:1"], "only for --format otlp"),
        (vec!["--format", "perfetto"], "needs an output file"),
    ] {
        let mut full = vec!["export", "--db", db];
        full.extend(args.iter().copied());
        let out = causeway(&full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    assert!(!out_file.exists());
    // An existing logs file is refused before anything is written.
    std::fs::write(dir.path().join("m.logs.pb"), b"keep").unwrap();
    let out = causeway(&["export", "--db", db, "--format", "otlp", "-o", o]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert!(!out_file.exists(), "nothing half-written");
    ok(&["export", "--db", db, "--format", "otlp", "-o", o, "--force"]);
    assert!(out_file.exists());
    let logs = std::fs::read(dir.path().join("m.logs.pb")).unwrap();
    assert_ne!(logs, b"keep");
    assert!(decode(&std::fs::read(&out_file).unwrap(), &logs).2 > 0);
    // --no-chains: the same metrics, no log records.
    ok(&[
        "export",
        "--db",
        db,
        "--format",
        "otlp",
        "-o",
        o,
        "--force",
        "--no-chains",
    ]);
    let logs = std::fs::read(dir.path().join("m.logs.pb")).unwrap();
    assert_eq!(decode(&std::fs::read(&out_file).unwrap(), &logs).2, 0);
}

/// cudaLaunchKernel calls in a pushed metrics request (`causeway.op.calls`).
pub(crate) fn launch_calls(body: &[u8]) -> i64 {
    let m = ExportMetricsServiceRequest::decode(body).unwrap();
    let mut n = 0;
    for metric in m
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == "causeway.op.calls")
    {
        let Some(Data::Sum(s)) = &metric.data else {
            panic!("calls is not a sum")
        };
        for p in &s.data_points {
            let launch = p.attributes.iter().any(|a| {
                a.key == "op"
                    && matches!(a.value.as_ref().and_then(|v| v.value.as_ref()),
                        Some(Value::StringValue(op)) if op == "cudaLaunchKernel")
            });
            if let (
                true,
                Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(v)),
            ) = (launch, p.value)
            {
                n += v;
            }
        }
    }
    n
}

/// `trace --otlp-endpoint` pushes cumulative metrics while recording the stand-in workload
/// (1.5 s of launches, a push every 200 ms), and once more with the chains at the end, also
/// while it serves MCP (`--serve`); its summary still goes to stdout.
#[test]
fn trace_pushes_metrics_while_recording() {
    if !crate::trace::bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = crate::trace::standin();
    let db = dir.path().join("t.duckdb");
    let (url, log, _rt) = http_receiver(Answer(200, ""));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "trace",
            "--db",
            db.to_str().unwrap(),
            "--otlp-endpoint",
            &url,
        ])
        .args(["--otlp-interval", "200ms", "--serve", "127.0.0.1:0"])
        .args(["--", &workload, "hold", "1500"])
        .env("CAUSEWAY_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    assert_eq!(summary["command_exit"], 0);
    let got = log.take();
    let metrics: Vec<&Got> = got.iter().filter(|g| g.path == "/v1/metrics").collect();
    let logs: Vec<&Got> = got.iter().filter(|g| g.path == "/v1/logs").collect();
    assert!(
        metrics.len() >= 3,
        "{} metric pushes: {stderr}",
        metrics.len()
    );
    assert_eq!(logs.len(), 1, "the chains go once, at the end");
    assert_eq!(got.last().unwrap().path, "/v1/logs");
    assert!(got.iter().all(|g| g.auth == format!("Bearer {TOKEN}")));
    decode(&metrics.last().unwrap().body, &logs[0].body);
    let calls: Vec<i64> = metrics.iter().map(|g| launch_calls(&g.body)).collect();
    assert!(
        calls.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {calls:?}"
    );
    assert!(
        calls[0] < *calls.last().unwrap(),
        "pushed while growing: {calls:?}"
    );
    let rows = ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "SELECT sum(calls) AS n FROM op_counts c JOIN ops o USING (op_id) WHERE o.op = 'cudaLaunchKernel'",
    ]);
    let v: serde_json::Value = serde_json::from_str(&rows).unwrap();
    assert_eq!(
        v["rows"][0][0].as_i64(),
        calls.last().copied(),
        "the final push has every counted launch: {calls:?} vs {rows}"
    );
    assert!(stderr.contains("OTLP push(es)"), "{stderr}");
    assert!(stderr.contains("causeway trace: listening on"), "{stderr}");
}

/// A receiver that is down costs warnings, never the recording.
#[test]
fn trace_goes_on_when_the_receiver_is_down() {
    if !crate::trace::bpf_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = crate::trace::standin();
    let db = dir.path().join("t.duckdb");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = causeway(&[
        "trace",
        "--db",
        db.to_str().unwrap(),
        "--otlp-endpoint",
        &format!("http://127.0.0.1:{port}"),
        "--otlp-interval",
        "200ms",
        "--",
        &workload,
        "calls",
        dir.path().join("out.txt").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("OTLP metrics push failed"), "{stderr}");
    let rows = ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "SELECT count(*) AS n FROM events WHERE op = 'cudaLaunchKernel'",
    ]);
    assert!(rows.contains("100"), "{rows}");
}
