//! The OTLP/HTTP routes of `causeway collect` on a real server over a real cluster store:
//! metrics and logs of a real trace are committed before the answer, and every refusal is the
//! OTLP status code with a google.rpc.Status saying what was wrong.

use std::io::Write as _;
use std::sync::Arc;

use causeway_ingest::{Ingest, IngestOptions, MemoryBudget};
use causeway_serve::http::OtlpRoutes;
use causeway_serve::otlp_receive::RpcStatus;
use causeway_store::WriterOptions;
use causeway_store::received::CollectedStore;
use causeway_tools::Context;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message;

use crate::common::{Reply, Server, demo_store, options};

const TOKEN: &str = "collector-token";
const AUTH: &str = "Authorization: Bearer collector-token";
const PROTOBUF: &str = "Content-Type: application/x-protobuf";

/// A collector over a new cluster store taking OTLP bodies up to `max_body` bytes.
fn collector(max_body: usize) -> (Server, Arc<Ingest>) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cluster.duckdb");
    let store = CollectedStore::create(
        &db,
        WriterOptions {
            node: "collector".into(),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let ctx = Arc::new(Context::new(db, Vec::new()));
    ctx.insert_readers(store.live_readers().unwrap());
    let ingest = Arc::new(Ingest::start(store, IngestOptions::default()).unwrap());
    let mut o = options();
    o.token = Some(TOKEN.into());
    let routes = OtlpRoutes {
        ingest: ingest.clone(),
        budget: MemoryBudget::new(256 << 20),
        max_body_bytes: max_body,
    };
    (Server::start(dir, ctx, o, Some(routes)), ingest)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The google.rpc.Status of a refusal.
fn rpc_status(r: &Reply) -> RpcStatus {
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    RpcStatus::decode(&r.body[..]).unwrap()
}

#[test]
fn metrics_and_logs_of_a_real_trace_are_committed_before_the_answer() {
    let (srv, ingest) = collector(16 << 20);
    let reader = causeway_store::Reader::open(&demo_store().0).unwrap();
    let metrics = causeway_export::otlp::metrics_request(&reader).unwrap();
    let logs = causeway_export::otlp::logs_request(
        &reader,
        &causeway_export::otlp::LogsOptions::default(),
    )
    .unwrap();
    // Two gzip members back to back, as some exporters send a long body.
    let encoded = metrics.encode_to_vec();
    let (a, b) = encoded.split_at(encoded.len() / 2);
    let mut body = gzip(a);
    body.extend(gzip(b));
    let r = srv.send(
        "POST",
        "/v1/metrics",
        &[AUTH, PROTOBUF, "Content-Encoding: gzip"],
        &body,
    );
    assert_eq!(r.status, 200, "{:?}", rpc_status(&r));
    let answer = ExportMetricsServiceResponse::decode(&r.body[..]).unwrap();
    assert_eq!(answer.partial_success, None, "every point was taken");
    let stats = ingest.stats();
    assert_eq!(stats.requests_accepted, 1);
    // Committed before the answer (the queue's own count of waiting items drops just after
    // the writer answers, so it is not the witness).
    assert!(stats.stored_items > 0, "{stats:?}");
    let stored = stats.stored_items;

    let r = srv.send("POST", "/v1/logs", &[AUTH, PROTOBUF], &logs.encode_to_vec());
    assert_eq!(r.status, 200, "{:?}", rpc_status(&r));
    let answer = ExportLogsServiceResponse::decode(&r.body[..]).unwrap();
    assert_eq!(answer.partial_success, None);
    let stats = ingest.shutdown().unwrap();
    assert_eq!(stats.requests_accepted, 2);
    assert!(stats.stored_items >= stored, "{stats:?}");
    assert_eq!(stats.requests_invalid + stats.requests_unauthorized, 0);
}

#[test]
fn refusals_are_otlp_status_codes_saying_what_was_wrong() {
    const MAX: usize = 64 << 10;
    let (srv, ingest) = collector(MAX);
    let r = srv.send("POST", "/v1/metrics", &[PROTOBUF], b"");
    assert_eq!(r.status, 401);
    assert_eq!(ingest.stats().requests_unauthorized, 1);
    assert_eq!(srv.get("/v1/metrics", &[AUTH]).status, 405);

    // (headers, body, status, what the message says)
    let bomb = gzip(&vec![0u8; 1 << 20]);
    let cases: [(&[&str], &[u8], u16, &str); 5] = [
        (
            &[AUTH, "Content-Type: application/json"],
            b"{}",
            415,
            "send OTLP protobuf (application/x-protobuf)",
        ),
        (
            &[AUTH, PROTOBUF, "Content-Encoding: br"],
            b"x",
            415,
            "Content-Encoding 'br' is not supported",
        ),
        (
            &[AUTH, PROTOBUF],
            b"\xff\xff\xff\xff",
            400,
            "the body is not an OTLP ExportMetricsServiceRequest",
        ),
        (
            &[AUTH, PROTOBUF, "Content-Encoding: gzip"],
            b"not gzip",
            400,
            "the body is not valid gzip",
        ),
        (
            &[AUTH, PROTOBUF, "Content-Encoding: gzip"],
            &bomb,
            400,
            "the body inflates to more than 65536 bytes",
        ),
    ];
    for (headers, body, status, says) in cases {
        let r = srv.send("POST", "/v1/metrics", headers, body);
        assert_eq!(r.status, status, "{headers:?}");
        let s = rpc_status(&r);
        assert_eq!(s.code, tonic::Code::InvalidArgument as i32, "{s:?}");
        assert!(s.message.contains(says), "{}", s.message);
    }
    // Declared too large: refused from the headers, before the body is read.
    let r = srv.raw(
        "POST",
        "/v1/metrics",
        &[
            format!("Host: {}", srv.host()),
            AUTH.into(),
            PROTOBUF.into(),
            format!("Content-Length: {}", MAX + 1),
        ],
        b"",
    );
    assert_eq!(r.status, 413);
    let s = rpc_status(&r);
    assert_eq!(s.code, tonic::Code::InvalidArgument as i32);
    assert!(
        s.message.contains("larger than 65536 bytes") && s.message.contains("--max-otlp-body"),
        "{}",
        s.message
    );
    let stats = ingest.stats();
    assert_eq!(stats.requests_invalid, 6, "{stats:?}");
    assert_eq!(stats.requests_accepted, 0, "{stats:?}");
}
