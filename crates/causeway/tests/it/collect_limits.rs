//! `causeway collect` under what senders can get wrong or overdo: gzip bodies of several
//! members, a request larger than the whole queue, messages it cannot decode, and large
//! requests arriving together against its memory limit. Every point acknowledged must be in
//! the store.

use std::io::Write;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::collect_server::{Server, start_with, stop};

const TOKEN: &str = "collect-limits-token-0123456789abcdef";
const BASE_NS: u64 = 1_763_700_000_000_000_000;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

/// A request of `points` cumulative-sum points from `sender`, batch `seq` (distinct times).
fn request(sender: &str, seq: u64, points: u64) -> ExportMetricsServiceRequest {
    let data_points = (0..points)
        .map(|k| NumberDataPoint {
            attributes: vec![kv("route", Value::StringValue(format!("/r{}", k % 16)))],
            start_time_unix_nano: BASE_NS,
            time_unix_nano: BASE_NS + seq * 10_000_000 + k,
            value: Some(number_data_point::Value::AsInt(k as i64)),
            ..NumberDataPoint::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", Value::StringValue("limits".into())),
                    kv("host.name", Value::StringValue(sender.into())),
                ],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "limits.requests".into(),
                    data: Some(Data::Sum(Sum {
                        data_points,
                        aggregation_temporality: 2,
                        is_monotonic: true,
                    })),
                    ..Metric::default()
                }],
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// One POST of a protobuf body over a fresh connection: status and the google.rpc.Status code
/// (or 0).
fn post(addr: &str, body: &[u8], encoding: Option<&str>) -> (u16, i32) {
    let mut req = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(e) = encoding {
        req.push_str(&format!("Content-Encoding: {e}\r\n"));
    }
    req.push_str("\r\n");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    // A server that refuses early answers before the body is sent and closes: the answer is
    // still there to read.
    let _ = s.write_all(req.as_bytes()).and_then(|()| s.write_all(body));
    let mut resp = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut resp);
    let text = String::from_utf8_lossy(&resp);
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(&resp[..0], |i| &resp[i + 4..]);
    let code = crate::mcp_status_code(body);
    (status, code)
}

fn stored(db: &std::path::Path, host: &str) -> i64 {
    let out = crate::common::ok(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        &format!("SELECT count(*) AS n FROM metric_points WHERE node = '{host}'"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rows"][0][0].as_i64().unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn grpc_export(
    c: &Server,
    req: tonic::Request<ExportMetricsServiceRequest>,
) -> (tonic::Code, String) {
    let url = format!("http://{}", c.grpc);
    rt().block_on(async {
        let mut client = MetricsServiceClient::connect(url)
            .await
            .unwrap()
            .max_encoding_message_size(usize::MAX);
        match client.export(req).await {
            Ok(_) => (tonic::Code::Ok, String::new()),
            Err(s) => (s.code(), s.message().to_string()),
        }
    })
}

fn authed<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    r
}

#[test]
fn gzip_members_queue_size_and_undecodable_messages() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.duckdb");
    let c = start_with(
        &db,
        TOKEN,
        false,
        &["--queue-items", "1000", "--max-otlp-body", "1048576"],
    );
    // Two gzip members, each holding half of the message: 200, and every point stored.
    let body = request("members", 0, 600).encode_to_vec();
    let (a, b) = body.split_at(body.len() / 2);
    let two = [gzip(a), gzip(b)].concat();
    assert_eq!(post(&c.http, &two, Some("gzip")).0, 200);
    // More points than the whole queue holds: refused for good (413, INVALID_ARGUMENT), over
    // HTTP and gRPC alike.
    let big = request("big", 1, 1500);
    let (status, code) = post(&c.http, &big.encode_to_vec(), None);
    assert_eq!((status, code), (413, tonic::Code::InvalidArgument as i32));
    let (code, message) = grpc_export(&c, authed(big));
    assert_eq!(code, tonic::Code::InvalidArgument, "{message}");
    assert!(message.contains("--queue-items"), "{message}");
    // A message over the size limit, and one that is not a message: INVALID_ARGUMENT (tonic
    // says OUT_OF_RANGE and INTERNAL, which OTLP senders would retry forever).
    let huge = request("huge", 2, 40_000);
    assert!(huge.encoded_len() > 1 << 20, "{}", huge.encoded_len());
    let (code, message) = grpc_export(&c, authed(huge));
    assert_eq!(code, tonic::Code::InvalidArgument, "{message}");
    assert!(message.contains("too large"), "{message}");
    let garbage = rt().block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", c.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        grpc.unary::<Garbage, ExportMetricsServiceRequest, _>(
            authed(Garbage { field: 7 }),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            ),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err()
        .code()
    });
    assert_eq!(garbage, tonic::Code::InvalidArgument);
    stop(c);
    assert_eq!(stored(&db, "members"), 600, "0 acknowledged points lost");
    assert_eq!(stored(&db, "big"), 0);
}

/// Field 1 of ExportMetricsServiceRequest (a message) sent as a number: not decodable.
#[derive(Clone, PartialEq, prost::Message)]
struct Garbage {
    #[prost(uint64, tag = "1")]
    field: u64,
}

fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Four senders of 24 MiB requests against a 512 MB limit: the requests being decoded never
/// hold more than the limit together (others are told to retry, and do), the process stays
/// under the bound docs/collect.md gives, and every acknowledged point is stored.
#[test]
fn large_requests_together_stay_within_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.duckdb");
    let c = start_with(
        &db,
        TOKEN,
        false,
        &["--memory-limit", "512MB", "--queue-items", "2000000"],
    );
    let pid = c.child.id();
    let base = rss(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(base));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let points = 400_000;
    let body = std::sync::Arc::new(request("s", 0, points).encode_to_vec());
    eprintln!("request body: {} MiB", body.len() >> 20);
    let senders: Vec<_> = (0..4)
        .map(|i| {
            let addr = c.http.clone();
            let host = format!("sender-{i}");
            std::thread::spawn(move || {
                let body = request(&host, 0, points).encode_to_vec();
                let started = Instant::now();
                let mut retries = 0;
                loop {
                    let (status, _) = post(&addr, &body, None);
                    match status {
                        200 => return retries,
                        // 0: the connection was reset while the body was still going out.
                        503 | 0 => {
                            retries += 1;
                            assert!(started.elapsed() < Duration::from_secs(300));
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        other => panic!("{host}: {other}"),
                    }
                }
            })
        })
        .collect();
    let retries: Vec<u32> = senders.into_iter().map(|s| s.join().unwrap()).collect();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    stop(c);
    eprintln!(
        "RSS {} MiB at start, peak {} MiB; retries per sender {retries:?}",
        base >> 20,
        peak >> 20
    );
    for i in 0..4 {
        assert_eq!(stored(&db, &format!("sender-{i}")), points as i64);
    }
    assert!(
        retries.iter().sum::<u32>() > 0,
        "the budget made senders wait"
    );
    // DuckDB's 512 MB and the requests' 512 MB, with the process's own size at start.
    assert!(
        peak < base + 2 * 512_000_000 + (128 << 20),
        "peak {} MiB",
        peak >> 20
    );
}
