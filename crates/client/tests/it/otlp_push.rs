//! OTLP pushes against fake receivers: over HTTP the request lands on the endpoint's path
//! prefix with the token and the receiver's partial success is reported; over gRPC a tonic
//! receiver's answers and refusals come back as counts or as errors with what to do.

use std::time::Duration;

use causeway_client::otlp_push::{Protocol, Pushed, Target};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::logs::v1::ResourceLogs;
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use prost::Message;

use crate::common::{Answer, Node, Pki, Seen, dead_addr, hint_of};

const TOKEN: &str = "push-token";

fn metrics() -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            schema_url: "https://opentelemetry.io/schemas/1.24.0".into(),
            ..ResourceMetrics::default()
        }],
    }
}

fn logs() -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            schema_url: "https://opentelemetry.io/schemas/1.24.0".into(),
            ..ResourceLogs::default()
        }],
    }
}

fn target(url: &str, protocol: Protocol, timeout: Duration) -> Target {
    Target::new(url, protocol, Some(TOKEN.into()), None, timeout).unwrap()
}

/// An OTLP/HTTP receiver that rejects 3 points or 2 records of every request.
fn receiver() -> Node {
    Node::start(|req: &Seen| {
        let body = if req.path.ends_with("/v1/metrics") {
            ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess {
                    rejected_data_points: 3,
                    error_message: "3 points had no name".into(),
                }),
            }
            .encode_to_vec()
        } else {
            ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: 2,
                    error_message: "2 records too old".into(),
                }),
            }
            .encode_to_vec()
        };
        Answer::Reply(200, body)
    })
}

#[tokio::test]
async fn http_pushes_land_on_the_path_prefix_and_report_the_rejected() {
    let rx = receiver();
    let t = target(
        &format!("{}/otlp/", rx.url()),
        Protocol::Http,
        Duration::from_secs(60),
    );
    let m = metrics();
    assert_eq!(
        t.push_metrics(m.clone()).await.unwrap(),
        Pushed {
            bytes: m.encoded_len(),
            rejected: 3
        }
    );
    let l = logs();
    assert_eq!(
        t.push_logs(l.clone()).await.unwrap(),
        Pushed {
            bytes: l.encoded_len(),
            rejected: 2
        }
    );
    let seen = rx.seen();
    assert_eq!(
        seen.iter()
            .map(|s| (s.method.as_str(), s.path.as_str()))
            .collect::<Vec<_>>(),
        [("POST", "/otlp/v1/metrics"), ("POST", "/otlp/v1/logs")]
    );
    for s in &seen {
        assert_eq!(s.header("content-type"), Some("application/x-protobuf"));
        assert_eq!(s.header("authorization"), Some("Bearer push-token"));
    }
    assert_eq!(
        ExportMetricsServiceRequest::decode(&seen[0].body[..]).unwrap(),
        m
    );
    assert_eq!(
        ExportLogsServiceRequest::decode(&seen[1].body[..]).unwrap(),
        l
    );
}

#[tokio::test]
async fn an_answer_that_is_no_response_message_counts_as_all_taken() {
    // Some receivers answer 200 with an empty or JSON body.
    let rx = Node::start(|_: &Seen| Answer::Reply(200, b"\xff\xff not protobuf".to_vec()));
    let t = target(&rx.url(), Protocol::Http, Duration::from_secs(60));
    assert_eq!(t.push_metrics(metrics()).await.unwrap().rejected, 0);
}

#[tokio::test]
async fn http_refusals_are_errors_saying_what_to_check() {
    let unauthorized = Node::start(|_: &Seen| Answer::Reply(401, Vec::new()));
    let t = target(&unauthorized.url(), Protocol::Http, Duration::from_secs(60));
    let e = t.push_metrics(metrics()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} refused the push (HTTP 401): the bearer token is missing or wrong",
            unauthorized.url()
        )
    );
    assert!(hint_of(&e).contains("CAUSEWAY_TOKEN"), "{}", hint_of(&e));

    // The receiver's own words are quoted, without its control characters.
    let failing =
        Node::start(|_: &Seen| Answer::Reply(500, b"queue \x1b[31mfull\x1b[0m\n".to_vec()));
    let t = target(
        &format!("{}/prefix", failing.url()),
        Protocol::Http,
        Duration::from_secs(60),
    );
    let e = t.push_logs(logs()).await.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}/prefix: POST /prefix/v1/logs answered HTTP 500: queue",
            failing.url()
        )),
        "{e}"
    );
    assert!(e.contains("full") && !e.contains('\u{1b}'), "{e:?}");
    let empty = Node::start(|_: &Seen| Answer::Reply(404, Vec::new()));
    let t = target(&empty.url(), Protocol::Http, Duration::from_secs(60));
    let e = t.push_metrics(metrics()).await.unwrap_err();
    assert!(
        e.to_string().ends_with("answered HTTP 404: (empty body)"),
        "{e}"
    );
    assert!(hint_of(&e).contains("path prefix"), "{}", hint_of(&e));
}

#[tokio::test]
async fn an_absent_or_silent_receiver_is_an_error_not_a_hang() {
    let url = format!("http://{}", dead_addr());
    let e = target(&url, Protocol::Http, Duration::from_secs(60))
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("cannot push to {url}: ")),
        "{e}"
    );
    assert!(hint_of(&e).contains("port 4318"), "{}", hint_of(&e));

    let silent = Node::start(|_: &Seen| Answer::Silent);
    let e = target(&silent.url(), Protocol::Http, Duration::from_millis(300))
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: no answer within 300ms", silent.url())
    );
    assert_eq!(hint_of(&e), "check that an OTLP receiver listens there");
}

#[tokio::test]
async fn https_pushes_trust_the_given_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let rx = Node::start_tls(pki.server_config(false), |_: &Seen| {
        Answer::Reply(200, Vec::new())
    });
    let url = format!("https://{}", rx.addr);
    let t = Target::new(
        &url,
        Protocol::Http,
        None,
        Some(&pki.ca),
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(t.push_metrics(metrics()).await.unwrap().rejected, 0);
    assert_eq!(
        rx.seen()[0].header("authorization"),
        None,
        "no token, none sent"
    );
    // A CA that did not sign the receiver's certificate.
    let other = tempfile::tempdir().unwrap();
    let stranger = Pki::new(other.path());
    let t = Target::new(
        &url,
        Protocol::Http,
        None,
        Some(&stranger.ca),
        Duration::from_secs(60),
    )
    .unwrap();
    let e = format!("{:#}", t.push_metrics(metrics()).await.unwrap_err());
    assert!(e.contains("TLS handshake with"), "{e}");
}

/// An OTLP/gRPC metrics receiver whose answer depends on the token it is sent.
#[derive(Debug, Clone, Copy)]
struct Grpc;

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let auth = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match auth {
            "Bearer push-token" => Ok(tonic::Response::new(ExportMetricsServiceResponse {
                partial_success: Some(ExportMetricsPartialSuccess {
                    rejected_data_points: req.get_ref().resource_metrics.len() as i64,
                    error_message: "every resource rejected".into(),
                }),
            })),
            "Bearer busy" => Err(tonic::Status::unavailable("queue full")),
            "Bearer broken" => Err(tonic::Status::internal("disk \x07full")),
            _ => Err(tonic::Status::unauthenticated("who are you")),
        }
    }
}

/// Serves [`Grpc`] (metrics only) on loopback; its URL.
fn grpc_receiver() -> String {
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(Grpc))
            .serve_with_incoming(incoming),
    );
    format!("http://{addr}")
}

fn grpc_target(url: &str, token: &str) -> Target {
    Target::new(
        url,
        Protocol::Grpc,
        Some(token.into()),
        None,
        Duration::from_secs(60),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_answers_and_refusals_come_back_as_counts_or_errors_with_a_fix() {
    let url = grpc_receiver();
    let m = metrics();
    assert_eq!(
        grpc_target(&url, TOKEN)
            .push_metrics(m.clone())
            .await
            .unwrap(),
        Pushed {
            bytes: m.encoded_len(),
            rejected: 1
        }
    );
    let e = grpc_target(&url, "wrong")
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{url} refused the push (gRPC Unauthenticated): the bearer token is missing or wrong"
        )
    );
    let e = grpc_target(&url, "busy")
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot push to {url}: unavailable: queue full")
    );
    let e = grpc_target(&url, "broken")
        .push_metrics(metrics())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{url} answered gRPC Internal: disk ")) && text.ends_with("full"),
        "{text:?}"
    );
    assert!(
        !text.contains('\u{7}'),
        "the receiver's control characters are not quoted"
    );
    assert_eq!(hint_of(&e), "see the receiver's logs");
    // Logs are not served there.
    let e = grpc_target(&url, TOKEN)
        .push_logs(logs())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{url} does not implement this OTLP service")),
        "{e}"
    );
    assert!(hint_of(&e).contains("--protocol http"), "{}", hint_of(&e));
}

#[tokio::test]
async fn grpc_without_a_receiver_or_with_an_unsendable_token_fails_early() {
    let url = format!("http://{}", dead_addr());
    let e = grpc_target(&url, TOKEN)
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("cannot connect to {url}")),
        "{e}"
    );
    assert!(hint_of(&e).contains("port 4317"), "{}", hint_of(&e));
    // A token a header cannot carry is refused before anything is sent.
    let url = grpc_receiver();
    let e = grpc_target(&url, "line\nbreak")
        .push_metrics(metrics())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the bearer token has characters a gRPC header cannot carry"
    );
}
