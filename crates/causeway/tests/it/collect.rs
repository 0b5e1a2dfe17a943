//! `causeway collect` end to end: the binary on loopback receives real OTLP protobuf over HTTP
//! (hyper client) and gRPC (tonic client), writes the cluster store, answers MCP/API calls over
//! it while it grows, and leaves a complete file on Ctrl-C.

use std::process::Command;

use crate::collect_server::{Server, stop};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::{Value as Json, json};

const BIN: &str = env!("CARGO_BIN_EXE_causeway");
const TOKEN: &str = "collect-test-token-0123456789abcdef";
const START: u64 = 1_763_700_000_000_000_000;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

fn node_resource(node: &str, pid: Option<i64>) -> Resource {
    let mut attributes = vec![
        kv("service.name", s("causeway")),
        kv("host.name", s(&format!("{node}.example"))),
        kv("causeway.node", s(node)),
        kv("causeway.cluster", s("llama-70b")),
    ];
    if let Some(pid) = pid {
        attributes.extend([
            kv("process.pid", Value::IntValue(pid)),
            kv("process.executable.name", s("python3")),
            kv("causeway.rank", Value::IntValue(3)),
            kv("causeway.local_rank", Value::IntValue(1)),
            kv("causeway.world_size", Value::IntValue(16)),
        ]);
    }
    Resource {
        attributes,
        ..Resource::default()
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "causeway".into(),
        version: "0.1.0".into(),
        ..InstrumentationScope::default()
    })
}

fn op_attrs() -> Vec<KeyValue> {
    vec![kv("op", s("cudaLaunchKernel")), kv("source", s("CUDA"))]
}

/// A cumulative causeway snapshot of cudaLaunchKernel at `end`: `calls` calls, 90% in the
/// 8-16 us bucket (log2 bucket 13), the rest in bucket 23 (8-16 ms).
fn op_snapshot(node: &str, calls: u64, end: u64) -> ResourceMetrics {
    let mut buckets = vec![0u64; 41];
    buckets[13] = calls * 9 / 10;
    buckets[23] = calls - buckets[13];
    let bounds: Vec<f64> = (0..40).map(|k| (1u64 << (k + 1)) as f64).collect();
    let sum_point = |v: i64| NumberDataPoint {
        attributes: op_attrs(),
        start_time_unix_nano: START,
        time_unix_nano: end,
        value: Some(number_data_point::Value::AsInt(v)),
        ..NumberDataPoint::default()
    };
    let sum = |name: &str, unit: &str, v: i64| Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Sum(Sum {
            data_points: vec![sum_point(v)],
            aggregation_temporality: 2,
            is_monotonic: true,
        })),
        ..Metric::default()
    };
    ResourceMetrics {
        resource: Some(node_resource(node, Some(4242))),
        scope_metrics: vec![ScopeMetrics {
            scope: scope(),
            metrics: vec![
                Metric {
                    name: "causeway.op.duration".into(),
                    unit: "ns".into(),
                    data: Some(Data::Histogram(Histogram {
                        data_points: vec![HistogramDataPoint {
                            attributes: op_attrs(),
                            start_time_unix_nano: START,
                            time_unix_nano: end,
                            count: calls,
                            sum: Some((calls * 100_000) as f64),
                            bucket_counts: buckets,
                            explicit_bounds: bounds,
                            ..HistogramDataPoint::default()
                        }],
                        aggregation_temporality: 2,
                    })),
                    ..Metric::default()
                },
                sum("causeway.op.calls", "{call}", calls as i64),
                sum("causeway.op.bytes", "By", 4096),
            ],
            ..ScopeMetrics::default()
        }],
        ..ResourceMetrics::default()
    }
}

fn drops(node: &str, count: i64, end: u64) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(node_resource(node, None)),
        scope_metrics: vec![ScopeMetrics {
            scope: scope(),
            metrics: vec![Metric {
                name: "causeway.drops".into(),
                unit: "{event}".into(),
                data: Some(Data::Sum(Sum {
                    data_points: vec![NumberDataPoint {
                        attributes: vec![kv("kind", s("ringbuf_full"))],
                        start_time_unix_nano: START,
                        time_unix_nano: end,
                        value: Some(number_data_point::Value::AsInt(count)),
                        ..NumberDataPoint::default()
                    }],
                    aggregation_temporality: 2,
                    is_monotonic: true,
                })),
                ..Metric::default()
            }],
            ..ScopeMetrics::default()
        }],
        ..ResourceMetrics::default()
    }
}

/// A third-party gauge (kept in metric_points) plus, with `broken`, a histogram whose bucket
/// counts do not match its bounds (rejected: a partial success).
fn third_party(broken: bool) -> ResourceMetrics {
    let mut metrics = vec![Metric {
        name: "gpu.temperature".into(),
        unit: "Cel".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                attributes: vec![kv("gpu", Value::IntValue(0))],
                time_unix_nano: START + 5,
                value: Some(number_data_point::Value::AsDouble(71.5)),
                ..NumberDataPoint::default()
            }],
        })),
        ..Metric::default()
    }];
    if broken {
        metrics.push(Metric {
            name: "http.server.duration".into(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    bucket_counts: vec![1, 2, 3],
                    explicit_bounds: vec![1.0],
                    ..HistogramDataPoint::default()
                }],
                aggregation_temporality: 1,
            })),
            ..Metric::default()
        });
    }
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", s("dcgm-exporter")),
                kv("host.name", s("gpu-node-7")),
            ],
            ..Resource::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics,
            ..ScopeMetrics::default()
        }],
        ..ResourceMetrics::default()
    }
}

fn chain_log(node: &str, time_lost_ns: i64) -> ResourceLogs {
    let recs = Value::ArrayValue(ArrayValue {
        values: vec![AnyValue {
            value: Some(s("pin the tokenizer to other cores")),
        }],
    });
    ResourceLogs {
        resource: Some(node_resource(node, None)),
        scope_logs: vec![ScopeLogs {
            scope: scope(),
            log_records: vec![
                LogRecord {
                    time_unix_nano: START + 1_000,
                    observed_time_unix_nano: START + 2_000,
                    severity_number: 17,
                    severity_text: "HIGH".into(),
                    event_name: "causeway.chain".into(),
                    body: Some(AnyValue {
                        value: Some(s(
                            "cudaLaunchKernel p99 is 784x its p50: launcher preempted",
                        )),
                    }),
                    attributes: vec![
                        kv("causeway.chain.id", s("chain-1")),
                        kv("causeway.chain.detector", s("cpu_preemption")),
                        kv(
                            "causeway.chain.root_cause",
                            s("pid 4711 (tokenizer) preempted the launcher"),
                        ),
                        kv(
                            "causeway.chain.explanation",
                            s("the launching thread was off-CPU"),
                        ),
                        kv("causeway.chain.time_lost_ns", Value::IntValue(time_lost_ns)),
                        kv("causeway.chain.cuda_op", s("cudaLaunchKernel")),
                        kv("causeway.chain.p50_ns", Value::IntValue(11_000)),
                        kv("causeway.chain.p99_ns", Value::IntValue(8_624_000)),
                        kv("causeway.chain.tail_ratio", Value::DoubleValue(784.0)),
                        kv("causeway.chain.recommendations", recs),
                        kv("causeway.chain.timeline", s("[]")),
                        kv("causeway.chain.evidence_sql", s("SELECT 1")),
                    ],
                    ..LogRecord::default()
                },
                LogRecord {
                    time_unix_nano: START + 3_000,
                    severity_number: 9,
                    severity_text: "INFO".into(),
                    body: Some(AnyValue {
                        value: Some(s("checkpoint saved")),
                    }),
                    ..LogRecord::default()
                },
            ],
            ..ScopeLogs::default()
        }],
        ..ResourceLogs::default()
    }
}

fn start(db: &std::path::Path) -> Server {
    crate::collect_server::start(db, TOKEN, false)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One OTLP/HTTP POST with the hyper client: status and body.
fn post(
    addr: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    post_encoded(addr, path, token, content_type, None, body)
}

/// [`post`] with a Content-Encoding; an empty body makes it a GET.
fn post_encoded(
    addr: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    use http_body_util::{BodyExt, Full};
    rt().block_on(async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let method = if body.is_empty() { "GET" } else { "POST" };
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr)
            .header("content-type", content_type);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(e) = encoding {
            req = req.header("content-encoding", e);
        }
        let resp = send
            .send_request(req.body(Full::new(hyper::body::Bytes::from(body))).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        (status, body)
    })
}

fn metrics_req(rm: Vec<ResourceMetrics>) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: rm,
    }
    .encode_to_vec()
}

fn grpc_request<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

fn api(addr: &str, tool: &str, args: Json) -> Json {
    let (code, body) = post(
        addr,
        &format!("/api/v1/tools/{tool}"),
        Some(TOKEN),
        "application/json",
        args.to_string().into_bytes(),
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

fn query(db: &std::path::Path, sql: &str) -> Json {
    let out = crate::common::ok(&["query", "--db", db.to_str().unwrap(), "--json", sql]);
    serde_json::from_str::<Json>(&out).unwrap()["rows"].clone()
}

#[test]
fn collect_refuses_to_start_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.duckdb");
    let out = Command::new(BIN)
        .args(["collect", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .env_remove("CAUSEWAY_TOKEN")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!db.exists(), "nothing may be written without a token");
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stderr));
}

#[test]
fn collect_receives_otlp_over_http_and_grpc_into_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cluster.duckdb");
    let c = start(&db);
    let proto = "application/x-protobuf";

    // No token / wrong token: 401 over HTTP, UNAUTHENTICATED over gRPC; nothing stored.
    let body = metrics_req(vec![op_snapshot("node-a", 10, START + 1_000_000)]);
    assert_eq!(
        post(&c.http, "/v1/metrics", None, proto, body.clone()).0,
        401
    );
    assert_eq!(
        post(
            &c.http,
            "/v1/metrics",
            Some("wrong-token-wrong-token"),
            proto,
            body.clone()
        )
        .0,
        401
    );
    let grpc_url = format!("http://{}", c.grpc);
    let status = rt()
        .block_on(async {
            let mut client = MetricsServiceClient::connect(grpc_url.clone())
                .await
                .unwrap();
            client
                .export(grpc_request(
                    ExportMetricsServiceRequest::decode(body.as_slice()).unwrap(),
                    "wrong-token-wrong-token",
                ))
                .await
        })
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    // A body that is not OTLP: 400 with what was wrong (a google.rpc.Status).
    let (code, err) = post(
        &c.http,
        "/v1/metrics",
        Some(TOKEN),
        proto,
        b"\xff\xff not protobuf".to_vec(),
    );
    assert_eq!(code, 400);
    let st = causeway_status(&err);
    assert!(
        st.contains("not an OTLP ExportMetricsServiceRequest"),
        "{st}"
    );
    let (code, _) = post(
        &c.http,
        "/v1/metrics",
        Some(TOKEN),
        "application/json",
        b"{}".to_vec(),
    );
    assert_eq!(code, 415);

    // gzip bodies (what OpenTelemetry Collector exporters send by default) are inflated; other
    // encodings and broken gzip are refused with the reason.
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&metrics_req(vec![third_party(false)])).unwrap();
        e.finish().unwrap()
    };
    let send =
        |enc, body| post_encoded(&c.http, "/v1/metrics", Some(TOKEN), proto, Some(enc), body);
    assert_eq!(send("gzip", gz).0, 200);
    assert_eq!(send("br", b"x".to_vec()).0, 415);
    let (code, err) = send("gzip", b"not gzip".to_vec());
    assert_eq!(code, 400);
    assert!(
        causeway_status(&err).contains("not valid gzip"),
        "{}",
        causeway_status(&err)
    );

    // Two cumulative snapshots of the same (node, pid, op, start) over HTTP: the second
    // replaces the first, and a drop counter likewise.
    let (code, _) = post(&c.http, "/v1/metrics", Some(TOKEN), proto, body);
    assert_eq!(code, 200);
    let later = metrics_req(vec![
        op_snapshot("node-a", 30, START + 2_000_000),
        drops("node-a", 5, START + 2_000_000),
    ]);
    assert_eq!(
        post(&c.http, "/v1/metrics", Some(TOKEN), proto, later).0,
        200
    );
    let last = metrics_req(vec![drops("node-a", 7, START + 3_000_000)]);
    assert_eq!(
        post(&c.http, "/v1/metrics", Some(TOKEN), proto, last).0,
        200
    );

    // Over gRPC: third-party metrics with one malformed histogram (a partial success), and the
    // chain logs (sent twice: upserted, not duplicated).
    let partial = rt().block_on(async {
        let mut m = MetricsServiceClient::connect(grpc_url.clone())
            .await
            .unwrap();
        let resp: ExportMetricsServiceResponse = m
            .export(grpc_request(
                ExportMetricsServiceRequest {
                    resource_metrics: vec![third_party(true)],
                },
                TOKEN,
            ))
            .await
            .unwrap()
            .into_inner();
        let mut l = LogsServiceClient::connect(grpc_url.clone()).await.unwrap();
        for lost in [1_000_000_000, 8_900_000_000] {
            l.export(grpc_request(
                ExportLogsServiceRequest {
                    resource_logs: vec![chain_log("node-a", lost)],
                },
                TOKEN,
            ))
            .await
            .unwrap();
        }
        resp.partial_success
    });
    let partial = partial.expect("a partial success for the malformed histogram");
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial
            .error_message
            .contains("3 bucket counts for 1 bounds"),
        "{}",
        partial.error_message
    );

    // The MCP tools over the store being written: chains as sent, stats from the counters.
    // (A chain that arrived is another tool's claim: served on request, labelled.)
    let got = api(&c.http, "get_causal_chains", json!({"stored": true}));
    let chains = &got["structured"]["stored_chains"];
    assert_eq!(chains.as_array().unwrap().len(), 1, "{got}");
    assert_eq!(chains[0]["id"], "chain-1");
    assert_eq!(chains[0]["time_lost_ns"], 8_900_000_000i64);
    let stats = api(&c.http, "get_trace_stats", json!({}));
    let op = &stats["structured"]["ops"][0];
    assert_eq!(op["op"], "cudaLaunchKernel", "{stats}");
    assert_eq!(op["counted_calls"], 30, "{stats}");
    assert_eq!(op["percentiles"], "histogram_estimate", "{stats}");

    // Prometheus /metrics over the store being written, behind the same token.
    let (code, text) = post(&c.http, "/metrics", Some(TOKEN), "text/plain", Vec::new());
    let text = String::from_utf8_lossy(&text);
    assert_eq!(code, 200, "{text}");
    assert!(
        text.contains(
            "causeway_counted_calls_total{node=\"node-a\",source=\"CUDA\",op=\"cudaLaunchKernel\"} 30"
        ) && text.contains("causeway_dropped_events_total{node=\"node-a\",kind=\"ringbuf_full\"} 7"),
        "{text}"
    );

    let summary = stop(c);
    assert_eq!(summary["requests_unauthorized"], 3, "{summary}");
    assert_eq!(summary["requests_invalid"], 4, "{summary}");
    assert_eq!(summary["partial_successes"], 1, "{summary}");
    assert_eq!(summary["requests_busy"], 0, "{summary}");

    // The finished file, read by a separate process.
    assert_eq!(
        query(
            &db,
            "SELECT count(*), sum(calls), sum(total_ns), sum(bytes) FROM op_counts"
        ),
        json!([[1, 30, 3_000_000, 4096]])
    );
    assert_eq!(
        query(&db, "SELECT sum(count) FROM op_histograms"),
        json!([[30]])
    );
    assert_eq!(
        query(&db, "SELECT kind, sum(count) FROM drops GROUP BY kind"),
        json!([["ringbuf_full", 7]])
    );
    assert_eq!(
        query(
            &db,
            "SELECT count(*), max(time_lost_ns), max(origin) FROM chains"
        ),
        json!([[1, 8_900_000_000i64, "collected"]])
    );
    assert_eq!(
        query(
            &db,
            "SELECT node, hostname, \"cluster\", origin FROM nodes ORDER BY node"
        ),
        json!([
            ["gpu-node-7", "gpu-node-7", "", "collected"],
            ["node-a", "node-a.example", "llama-70b", "collected"]
        ])
    );
    assert_eq!(
        query(
            &db,
            "SELECT node, pid, comm, rank, local_rank, world_size, \"cluster\" FROM processes"
        ),
        json!([["node-a", 4242, "python3", 3, 1, 16, "llama-70b"]])
    );
    assert_eq!(
        query(
            &db,
            // Sent twice: in gzip'd HTTP and over gRPC.
            "SELECT node, metric, kind, value, attributes, count(*) FROM metric_points GROUP BY ALL"
        ),
        json!([[
            "gpu-node-7",
            "gpu.temperature",
            "gauge",
            71.5,
            "{\"gpu\":0}",
            2
        ]])
    );
    assert_eq!(
        // Generic records are kept as sent: the request went twice.
        query(
            &db,
            "SELECT node, severity_text, body, count(*) FROM log_records GROUP BY ALL"
        ),
        json!([["node-a", "INFO", "checkpoint saved", 2]])
    );
    // The overview tools' CLI twins work over a store of counters and chains.
    let dbs = db.to_str().unwrap();
    let described = crate::common::ok(&["describe", "--db", dbs]);
    assert!(
        described.contains("node \"node-a\" (\"collected\")")
            && described.contains("1 chains")
            && described.contains("0 events (kernel counters only) over "),
        "{described}"
    );
    // No events to analyse: explain says so, and points at the chains the nodes sent, which
    // --stored shows labelled as theirs.
    let explained = crate::common::ok(&["explain", "--db", dbs]);
    assert!(
        explained.contains("No causal chain") && explained.contains("--stored"),
        "{explained}"
    );
    let explained = crate::common::ok(&["explain", "--db", dbs, "--stored"]);
    assert!(
        explained.contains("cudaLaunchKernel p99 is 784x its p50")
            && explained.contains("pin the tokenizer to other cores")
            && explained.contains("not causeway's findings"),
        "{explained}"
    );
    // What a person reads over the collected store: stats estimated from the histograms.
    let text = crate::common::ok(&["stats", "--db", db.to_str().unwrap()]);
    insta::assert_snapshot!(text);
}

/// The `message` of a google.rpc.Status body.
fn causeway_status(body: &[u8]) -> String {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
    }
    RpcStatus::decode(body).unwrap().message
}

/// The sender and the receiver together: `causeway export --format otlp` of two recorded
/// traces, one over OTLP/HTTP and one over OTLP/gRPC, into one `causeway collect` store keeps
/// every node's counted calls, histograms and chains, and a repeated (cumulative) push does
/// not count anything twice.
#[test]
fn exports_of_two_nodes_collect_into_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cluster.duckdb");
    let tf = dir.path().join("token");
    std::fs::write(&tf, TOKEN).unwrap();
    let demo = dir.path().join("incident.duckdb");
    crate::common::ok(&["demo", "incident", "-o", demo.to_str().unwrap()]);
    let vllm = crate::common::vllm_store();
    let server = start(&db);
    let push = |src: &std::path::Path, url: String, protocol: &str| {
        crate::common::ok(&[
            "export",
            "--db",
            src.to_str().unwrap(),
            "--format",
            "otlp",
            "--endpoint",
            &url,
            "--protocol",
            protocol,
            "--token-file",
            tf.to_str().unwrap(),
        ]);
    };
    push(&vllm, format!("http://{}", server.http), "http");
    push(&demo, format!("http://{}", server.grpc), "grpc");
    // Cumulative metrics sent again replace the snapshot instead of adding to it.
    push(&vllm, format!("http://{}", server.http), "http");
    stop(server);

    let launches = "SELECT n.node, (SELECT coalesce(sum(c.calls), 0) FROM op_counts c JOIN ops o ON o.op_id = c.op_id
          WHERE c.node = n.node AND o.op = 'cudaLaunchKernel')::BIGINT AS calls,
        (SELECT coalesce(sum(h.count), 0) FROM op_histograms h JOIN ops o ON o.op_id = h.op_id
          WHERE h.node = n.node AND o.op = 'cudaLaunchKernel')::BIGINT AS in_histograms,
        (SELECT count(*) FROM chains c WHERE c.node = n.node)::BIGINT AS chains
      FROM nodes n ORDER BY n.node";
    let got = query(&db, launches);
    let rows = got.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{got}");
    for src in [&vllm, &demo] {
        let node = query(src, "SELECT node FROM nodes")[0][0].clone();
        // What the sender counted: the kernel's counts where the trace has them, else its events.
        let counted = query(
            src,
            "SELECT coalesce(nullif((SELECT sum(calls) FROM op_counts c JOIN ops o ON o.op_id = c.op_id
                 WHERE o.op = 'cudaLaunchKernel'), 0),
               (SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'))::BIGINT",
        )[0][0]
            .as_i64()
            .unwrap();
        let row = rows
            .iter()
            .find(|r| r[0] == node)
            .expect("the node arrived");
        assert!(counted > 0);
        assert_eq!(row[1].as_i64().unwrap(), counted, "calls of {node}: {row}");
        assert_eq!(
            row[2].as_i64().unwrap(),
            counted,
            "histogram of {node}: {row}"
        );
        assert!(row[3].as_i64().unwrap() > 0, "chains of {node}: {row}");
    }
    // An export sends causeway's findings (not the chains the source file stored), once even
    // when pushed twice.
    let explain: Json = serde_json::from_str(&crate::common::ok(&[
        "explain",
        "--db",
        vllm.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let found = explain["chains"].as_array().unwrap().len();
    assert!(found > 0);
    let vllm_node = query(&vllm, "SELECT node FROM nodes")[0][0].clone();
    let row = rows.iter().find(|r| r[0] == vllm_node).unwrap();
    assert_eq!(row[3], found, "every finding, once");
    assert_eq!(
        query(&db, "SELECT count(*) FROM nodes WHERE origin = 'collected'")[0][0],
        2
    );
}
