//! Benchmark of `causeway collect`: 8 concurrent senders push OTLP metrics over HTTP and over
//! gRPC to the release binary on loopback; prints points/s committed (every request is
//! answered after its commit), points sent vs stored (zero loss), request latency p50/p99, and
//! a baseline from the same run: the same protobuf bodies decoded and written through the
//! ingest crate in-process, without the network.
//!
//! `cargo bench -p causeway --bench collect` (CAUSEWAY_BENCH_POINTS total points, default
//! 1,600,000; CAUSEWAY_BENCH_BATCH points per request, default 8,192: the
//! OpenTelemetry Collector batch processor's default send_batch_size).

#![allow(clippy::print_stdout)] // a benchmark prints its figures

#[path = "../tests/it/collect_server.rs"]
mod collect_server;

use collect_server::Server;
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_ingest::received::CollectedStore;
use causeway_ingest::{Ingest, IngestOptions, SubmitError, decode};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

const SENDERS: usize = 8;
const TOKEN: &str = "bench-token-0123456789abcdef0123";
const BASE_NS: u64 = 1_763_700_000_000_000_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

/// One request of `points` cumulative sum points from sender `s` (distinct times: every point
/// is its own row in metric_points).
fn request(s: usize, seq: usize, points: usize) -> Vec<u8> {
    let data_points = (0..points)
        .map(|k| NumberDataPoint {
            attributes: vec![
                kv("route", Value::StringValue(format!("/r{}", k % 16))),
                kv("status", Value::IntValue(200)),
            ],
            start_time_unix_nano: BASE_NS,
            time_unix_nano: BASE_NS + (seq * points + k) as u64,
            value: Some(number_data_point::Value::AsInt((seq * points + k) as i64)),
            ..NumberDataPoint::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", Value::StringValue("bench".into())),
                    kv("host.name", Value::StringValue(format!("sender-{s}"))),
                ],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "bench.requests".into(),
                    unit: "{request}".into(),
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
    .encode_to_vec()
}

/// What one run measured.
struct Run {
    seconds: f64,
    latencies: Vec<Duration>,
    retries: u64,
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

fn report(name: &str, points: usize, stored: u64, run: &mut Run, baseline: Option<f64>) -> f64 {
    run.latencies.sort();
    let rate = points as f64 / run.seconds;
    let ratio = baseline.map_or(String::new(), |b| format!("  {:.2}x of baseline", rate / b));
    println!(
        "{name:<10} {points:>9} sent {stored:>9} stored  loss {:>3}  {:>10.0} points/s  {:.2} s  p50 {:.1} ms  p99 {:.1} ms  retries {}{ratio}",
        points as u64 - stored.min(points as u64),
        rate,
        run.seconds,
        pct(&run.latencies, 0.5),
        pct(&run.latencies, 0.99),
        run.retries
    );
    rate
}

/// The baseline: decode + ingest in-process, 8 threads, each waiting for its commits.
fn baseline(bodies: &Arc<Vec<Vec<Vec<u8>>>>, dir: &std::path::Path) -> (Run, u64) {
    let db = dir.join("baseline.duckdb");
    let store = CollectedStore::create(&db, causeway_store::WriterOptions::default()).unwrap();
    let ingest = Arc::new(Ingest::start(store, IngestOptions::default()).unwrap());
    let t0 = Instant::now();
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let bodies = bodies.clone();
            let ingest = ingest.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut retries = 0;
                for body in &bodies[s] {
                    let t = Instant::now();
                    loop {
                        let req = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
                        let d = decode::metrics(&req);
                        let (tx, rx) = std::sync::mpsc::channel();
                        match ingest.submit(
                            d.rows,
                            Box::new(move |r| {
                                let _ = tx.send(r);
                            }),
                        ) {
                            Ok(()) => {
                                rx.recv().unwrap().unwrap();
                                break;
                            }
                            Err(SubmitError::Busy { .. }) => {
                                retries += 1;
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    lat.push(t.elapsed());
                }
                (lat, retries)
            })
        })
        .collect();
    let mut run = Run {
        seconds: 0.0,
        latencies: Vec::new(),
        retries: 0,
    };
    for t in threads {
        let (lat, r) = t.join().unwrap();
        run.latencies.extend(lat);
        run.retries += r;
    }
    run.seconds = t0.elapsed().as_secs_f64();
    let stats = ingest.shutdown().unwrap();
    (run, stored_rows(&db).min(stats.stored_items))
}

fn stored_rows(db: &std::path::Path) -> u64 {
    let r = causeway_store::Reader::open(db).unwrap();
    let n: i64 = r
        .prepare_trusted("SELECT count(*) FROM metric_points")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    n as u64
}

/// Ctrl-C; the points the server says it stored, checked against the file.
fn stop(s: Server, db: &std::path::Path) -> u64 {
    let summary = collect_server::stop(s);
    let said = summary["stored_items"].as_u64().unwrap();
    let rows = stored_rows(db);
    assert_eq!(said, rows, "the server's count and the file disagree");
    rows
}

async fn http_sender(
    addr: String,
    bodies: Arc<Vec<Vec<Vec<u8>>>>,
    s: usize,
) -> (Vec<Duration>, u64) {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut lat = Vec::new();
    let mut retries = 0;
    for body in &bodies[s] {
        let t = Instant::now();
        loop {
            let req = hyper::Request::post("/v1/metrics")
                .header("host", &addr)
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Full::new(hyper::body::Bytes::from(body.clone())))
                .unwrap();
            let resp = send.send_request(req).await.unwrap();
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await.unwrap();
            match status {
                200 => break,
                503 => {
                    retries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => panic!("HTTP {other}"),
            }
        }
        lat.push(t.elapsed());
    }
    (lat, retries)
}

async fn grpc_sender(
    addr: String,
    bodies: Arc<Vec<Vec<Vec<u8>>>>,
    s: usize,
) -> (Vec<Duration>, u64) {
    let mut client = MetricsServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    let mut lat = Vec::new();
    let mut retries = 0;
    for body in &bodies[s] {
        let msg = ExportMetricsServiceRequest::decode(body.as_slice()).unwrap();
        let t = Instant::now();
        loop {
            let mut req = tonic::Request::new(msg.clone());
            req.metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            match client.export(req).await {
                Ok(_) => break,
                Err(st) if st.code() == tonic::Code::Unavailable => {
                    retries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(st) => panic!("gRPC {st}"),
            }
        }
        lat.push(t.elapsed());
    }
    (lat, retries)
}

fn network(bodies: &Arc<Vec<Vec<Vec<u8>>>>, dir: &std::path::Path, grpc: bool) -> (Run, u64) {
    let db = dir.join(if grpc { "grpc.duckdb" } else { "http.duckdb" });
    let server = collect_server::start(&db, TOKEN, true);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = if grpc {
        server.grpc.clone()
    } else {
        server.http.clone()
    };
    let t0 = Instant::now();
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..SENDERS)
            .map(|s| {
                let bodies = bodies.clone();
                let addr = addr.clone();
                if grpc {
                    tokio::spawn(grpc_sender(addr, bodies, s))
                } else {
                    tokio::spawn(http_sender(addr, bodies, s))
                }
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let seconds = t0.elapsed().as_secs_f64();
    let mut run = Run {
        seconds,
        latencies: Vec::new(),
        retries: 0,
    };
    for (lat, r) in results {
        run.latencies.extend(lat);
        run.retries += r;
    }
    (run, stop(server, &db))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let total = env_usize("CAUSEWAY_BENCH_POINTS", 1_600_000);
    let batch = env_usize("CAUSEWAY_BENCH_BATCH", 8_192);
    let per_sender = total / SENDERS / batch;
    let points = per_sender * batch * SENDERS;
    let bodies: Arc<Vec<Vec<Vec<u8>>>> = Arc::new(
        (0..SENDERS)
            .map(|s| (0..per_sender).map(|q| request(s, q, batch)).collect())
            .collect(),
    );
    let bytes: usize = bodies.iter().flatten().map(Vec::len).sum();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "causeway collect: {SENDERS} senders x {per_sender} requests x {batch} points = {points} points ({:.1} MB of OTLP protobuf); load average {}",
        bytes as f64 / 1e6,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut base, stored) = baseline(&bodies, dir.path());
    let b = report("in-process", points, stored, &mut base, None);
    let (mut http, stored) = network(&bodies, dir.path(), false);
    report("OTLP/HTTP", points, stored, &mut http, Some(b));
    let (mut grpc, stored) = network(&bodies, dir.path(), true);
    report("OTLP/gRPC", points, stored, &mut grpc, Some(b));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average after: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
