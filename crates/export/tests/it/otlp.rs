//! OTLP export of real stores (the fixture written through the store's Writer, the demo
//! incident, the imported vLLM reference trace): every histogram's buckets add up to its count
//! and to the calls, buckets follow the contract's log2 bounds exactly, resources carry node,
//! cluster, process and rank, chains become log records with the severity mapping, and the
//! encoded requests decode again with the official opentelemetry-proto messages.

use std::collections::BTreeMap;

use causeway_demo::{Scenario, write_scenario};
use causeway_export::gather::gather;
use causeway_export::otlp::{self, LogsOptions};
use causeway_store::Reader;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, HistogramDataPoint, Metric, NumberDataPoint, metric::Data,
    number_data_point,
};
use prost::Message;

use crate::fixture::{self, UNSTORED_LAUNCHES};

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|k| k.key == key)
        .and_then(|k| k.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key) {
        Some(Value::StringValue(s)) => Some(s.clone()),
        None => None,
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key) {
        Some(Value::IntValue(v)) => Some(*v),
        None => None,
        other => panic!("{key} is not an int: {other:?}"),
    }
}

/// Round trip through the wire format: what a receiver decodes.
fn wire(r: &Reader, stored_only: bool) -> (ExportMetricsServiceRequest, ExportLogsServiceRequest) {
    let m = otlp::metrics_request(r).unwrap();
    let l = otlp::logs_request(
        r,
        &LogsOptions {
            observed_ns: 1_800_000_000_000_000_000,
            engine: !stored_only,
            stored: stored_only,
            prices: causeway_analysis::cost::Prices {
                gpu_hour: Some(2.0),
                ..Default::default()
            },
        },
    )
    .unwrap();
    let m2 = ExportMetricsServiceRequest::decode(m.encode_to_vec().as_slice()).unwrap();
    let l2 = ExportLogsServiceRequest::decode(l.encode_to_vec().as_slice()).unwrap();
    assert_eq!(m, m2);
    assert_eq!(l, l2);
    (m2, l2)
}

/// Every metric of the request with its resource attributes.
fn metrics(m: &ExportMetricsServiceRequest) -> Vec<(&[KeyValue], &Metric)> {
    let mut out = Vec::new();
    for rm in &m.resource_metrics {
        let res = rm.resource.as_ref().expect("resource");
        assert_eq!(
            text(&res.attributes, "service.name").as_deref(),
            Some("causeway")
        );
        for sm in &rm.scope_metrics {
            let scope = sm.scope.as_ref().expect("scope");
            assert_eq!(scope.name, "causeway");
            assert_eq!(scope.version, env!("CARGO_PKG_VERSION"));
            for metric in &sm.metrics {
                out.push((res.attributes.as_slice(), metric));
            }
        }
    }
    out
}

/// Histogram points keyed by (node, pid, op).
fn histograms(
    m: &ExportMetricsServiceRequest,
) -> BTreeMap<(String, i64, String), HistogramDataPoint> {
    let mut out = BTreeMap::new();
    for (res, metric) in metrics(m) {
        if metric.name != otlp::OP_DURATION {
            continue;
        }
        assert_eq!(metric.unit, "ns");
        let Some(Data::Histogram(h)) = &metric.data else {
            panic!("{} is not a histogram", metric.name)
        };
        assert_eq!(
            h.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        for p in &h.data_points {
            let key = (
                text(res, "causeway.node").unwrap(),
                int(res, "process.pid").unwrap(),
                text(&p.attributes, "op").unwrap(),
            );
            assert!(text(&p.attributes, "source").is_some());
            assert!(out.insert(key, p.clone()).is_none());
        }
    }
    out
}

/// Sum points of `name` keyed by (node, pid or -1, the named data point attribute).
fn sums(
    m: &ExportMetricsServiceRequest,
    name: &str,
    unit: &str,
    by: &str,
) -> BTreeMap<(String, i64, String), i64> {
    let mut out = BTreeMap::new();
    for (res, metric) in metrics(m) {
        if metric.name != name {
            continue;
        }
        assert_eq!(metric.unit, unit, "{name}");
        let Some(Data::Sum(s)) = &metric.data else {
            panic!("{name} is not a sum")
        };
        assert!(s.is_monotonic, "{name}");
        assert_eq!(
            s.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        for p in &s.data_points {
            let NumberDataPoint {
                value: Some(number_data_point::Value::AsInt(v)),
                ..
            } = p
            else {
                panic!("{name}: not an int point")
            };
            let key = (
                text(res, "causeway.node").unwrap(),
                int(res, "process.pid").unwrap_or(-1),
                text(&p.attributes, by).unwrap(),
            );
            assert!(out.insert(key, *v).is_none());
        }
    }
    out
}

/// The contract's bucket of a duration: 2^k <= d < 2^(k+1), 0 below 2 ns, 40 from 2^40 ns.
fn bucket(d: i64) -> usize {
    if d < 2 {
        0
    } else {
        (63 - (d as u64).leading_zeros() as usize).min(40)
    }
}

fn check_histogram(p: &HistogramDataPoint) {
    assert_eq!(p.explicit_bounds.len(), 40);
    for (k, b) in p.explicit_bounds.iter().enumerate() {
        assert_eq!(*b, 2f64.powi(k as i32 + 1));
    }
    assert_eq!(p.bucket_counts.len(), 41);
    assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
    assert!(p.count > 0);
    assert!(p.start_time_unix_nano > 0 && p.start_time_unix_nano <= p.time_unix_nano);
}

#[test]
fn fixture_histograms_follow_the_log2_contract_and_match_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&fixture::fixture(dir.path())).unwrap();
    let (m, _) = wire(&r, false);
    let h = histograms(&m);
    let calls = sums(&m, otlp::OP_CALLS, "{call}", "op");
    for (k, p) in &h {
        check_histogram(p);
        assert_eq!(
            calls[k] as u64, p.count,
            "{k:?}: calls and the histogram's count"
        );
    }
    // Stored only: every duration in the bucket the contract names, exact sum, min and max.
    let sync = &h[&("gpu-a".into(), 101, "cudaStreamSynchronize".into())];
    let durations = fixture::boundary_durations();
    let mut want = vec![0u64; 41];
    for &d in &durations {
        want[bucket(d)] += 1;
    }
    assert_eq!(sync.bucket_counts, want);
    assert_eq!(sync.sum, Some(durations.iter().sum::<i64>() as f64));
    assert_eq!(sync.min, Some(0.0));
    assert_eq!(sync.max, Some(((1i64 << 45) + 1) as f64));
    // Kernel histogram: every call, also the unstored ones; no min/max (not all calls seen).
    let launch = &h[&("gpu-a".into(), 100, "cudaLaunchKernel".into())];
    let stored = fixture::launch_durations();
    assert_eq!(launch.count, stored.len() as u64 + UNSTORED_LAUNCHES);
    assert_eq!(
        launch.sum,
        Some((stored.iter().sum::<i64>() + 5 * 5_000) as f64)
    );
    assert_eq!(launch.min, None);
    assert_eq!(
        launch.bucket_counts[12],
        UNSTORED_LAUNCHES + 2,
        "4096..8192: 5 us, 7 us"
    );
    // Kernel-only op: counted and timed in the kernel, no stored events.
    let ksync = &h[&("gpu-a".into(), 100, "cudaStreamSynchronize".into())];
    assert_eq!((ksync.count, ksync.bucket_counts[21]), (12, 12));
    // The gathered stored events classify exactly like the contract.
    let facts = gather(&r).unwrap();
    let stored_sync = facts
        .ops
        .iter()
        .find(|(k, _)| k.pid == 101 && k.op == "cudaStreamSynchronize")
        .and_then(|(_, o)| o.stored.clone())
        .unwrap();
    assert_eq!(stored_sync.log2.to_vec(), want);
}

#[test]
fn fixture_counters_and_resources() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&fixture::fixture(dir.path())).unwrap();
    let (m, l) = wire(&r, false);
    let bytes = sums(&m, otlp::OP_BYTES, "By", "op");
    assert_eq!(
        bytes[&("gpu-a".into(), 100, "cudaMemcpy".into())],
        4096 + (1 << 20) + (3 << 20)
    );
    assert!(
        !bytes.contains_key(&("gpu-b".into(), 200, "ncclAllReduce".into())),
        "no bytes point where neither the kernel nor a memcpy counted bytes"
    );
    let off = sums(&m, otlp::OFFCPU_TIME, "ns", "state");
    assert_eq!(
        off,
        BTreeMap::from([
            (("gpu-a".into(), 100, "blocked".into()), 40_000_000),
            (("gpu-a".into(), 100, "other".into()), 1_000),
            (("gpu-a".into(), 100, "preempted".into()), 12_000_000),
            (("gpu-b".into(), 200, "blocked".into()), 2_000_000),
        ])
    );
    let drops = sums(&m, otlp::DROPS, "{event}", "kind");
    assert_eq!(
        drops,
        BTreeMap::from([
            (("gpu-a".into(), -1, "ringbuf_full".into()), 7),
            (("gpu-a".into(), -1, "sampled".into()), 3),
            (("gpu-b".into(), -1, "channel_full".into()), 2),
        ])
    );
    // Resources: process attributes from the processes table, node ones from nodes.
    let res: Vec<&[KeyValue]> = m
        .resource_metrics
        .iter()
        .map(|rm| rm.resource.as_ref().unwrap().attributes.as_slice())
        .collect();
    let find = |node: &str, pid: Option<i64>| {
        *res.iter()
            .find(|a| {
                text(a, "causeway.node").as_deref() == Some(node) && int(a, "process.pid") == pid
            })
            .unwrap_or_else(|| panic!("no resource for {node} {pid:?}"))
    };
    let a100 = find("gpu-a", Some(100));
    assert_eq!(
        text(a100, "host.name"),
        Some(causeway_store::default_node_name())
    );
    assert_eq!(text(a100, "causeway.cluster").as_deref(), Some("train-7"));
    assert_eq!(
        text(a100, "process.executable.name").as_deref(),
        Some("python3")
    );
    assert_eq!(int(a100, "causeway.rank"), Some(0));
    assert_eq!(int(a100, "causeway.local_rank"), Some(0));
    assert_eq!(int(a100, "causeway.world_size"), Some(2));
    let a101 = find("gpu-a", Some(101));
    assert_eq!(
        text(a101, "process.executable.name").as_deref(),
        Some("tokenizer")
    );
    assert_eq!(int(a101, "causeway.rank"), None, "unknown rank is omitted");
    // Container and pod, in OpenTelemetry's conventions, where the process ran in one.
    for (k, v) in [
        ("container.id", crate::fixture::CONTAINER_ID),
        ("container.runtime", "containerd"),
        ("k8s.pod.name", "trainer-0"),
        ("k8s.namespace.name", "ml-jobs"),
        ("k8s.pod.uid", "0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b"),
        ("k8s.container.name", "trainer"),
    ] {
        assert_eq!(text(a100, k).as_deref(), Some(v), "{k}");
        assert_eq!(text(a101, k), None, "{k}: not in a container");
    }
    let b200 = find("gpu-b", Some(200));
    assert_eq!(
        text(b200, "host.name").as_deref(),
        Some("gpu-b"),
        "node stands in for an unknown host"
    );
    assert_eq!(int(b200, "causeway.rank"), Some(1));
    let node_b = find("gpu-b", None);
    assert_eq!(text(node_b, "causeway.cluster").as_deref(), Some("train-7"));
    // Times: the whole trace, from the first window start to the last window end.
    let (start, end) = gather(&r).unwrap().span.unwrap();
    let last_event_end: i64 = r
        .prepare_trusted("SELECT max(timestamp + duration) FROM event_rows")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(
        start,
        fixture::T0 - 1_000_000,
        "the kernel window starts first"
    );
    assert_eq!(end, last_event_end.max(fixture::T0 + 120_000_000_000));
    for (_, metric) in metrics(&m) {
        if let Some(Data::Sum(s)) = &metric.data {
            for p in &s.data_points {
                assert_eq!(
                    (p.start_time_unix_nano, p.time_unix_nano),
                    (start as u64, end as u64)
                );
            }
        }
    }
    // A recording has no stored chains: the engine's (if any) are exported, each in a node
    // resource or the trace-wide one.
    for rl in &l.resource_logs {
        for sl in &rl.scope_logs {
            for rec in &sl.log_records {
                assert_eq!(rec.event_name, "causeway.chain");
            }
        }
    }
}

fn body(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        other => panic!("body is not a string: {other:?}"),
    }
}

#[test]
fn stored_chains_become_log_records_with_the_severity_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::vllm(dir.path());
    let r = Reader::open(&db).unwrap();
    let (m, l) = wire(&r, true);
    type Stored = (String, String, String, i64, String, String, i64, i64, f64);
    let stored: Vec<Stored> = r
        .prepare_trusted(
            "SELECT chain_id, node, severity, detected_ns, summary, recommendations, time_lost_ns,
                    p99_ns, tail_ratio
             FROM chains ORDER BY node, time_lost_ns DESC, chain_id",
        )
        .unwrap()
        .query_map([], causeway_store::row)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!stored.is_empty());
    let mut records = Vec::new();
    for rl in &l.resource_logs {
        let res = &rl.resource.as_ref().unwrap().attributes;
        for sl in &rl.scope_logs {
            assert_eq!(sl.scope.as_ref().unwrap().name, "causeway");
            for rec in &sl.log_records {
                records.push((text(res, "causeway.node").unwrap_or_default(), rec));
            }
        }
    }
    assert_eq!(records.len(), stored.len());
    for ((node, rec), s) in records.iter().zip(&stored) {
        assert_eq!(
            text(&rec.attributes, "causeway.chain.id").as_ref(),
            Some(&s.0)
        );
        assert_eq!(node, &s.1);
        let (num, txt) = match s.2.to_ascii_uppercase().as_str() {
            "HIGH" | "CRITICAL" => (17, "HIGH"),
            "MEDIUM" => (13, "MEDIUM"),
            _ => (9, "LOW"),
        };
        assert_eq!(
            (rec.severity_number, rec.severity_text.as_str()),
            (num, txt)
        );
        assert_eq!(rec.time_unix_nano, s.3 as u64);
        assert_eq!(rec.observed_time_unix_nano, 1_800_000_000_000_000_000);
        assert_eq!(rec.event_name, "causeway.chain");
        assert_eq!(body(&rec.body), s.4);
        let recs: Vec<String> = serde_json::from_str(&s.5).unwrap();
        match attr(&rec.attributes, "causeway.chain.recommendations") {
            Some(Value::ArrayValue(a)) => {
                let got: Vec<String> = a
                    .values
                    .iter()
                    .map(|v| match &v.value {
                        Some(Value::StringValue(s)) => s.clone(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(got, recs);
            }
            other => panic!("recommendations: {other:?}"),
        }
        assert_eq!(
            int(&rec.attributes, "causeway.chain.time_lost_ns"),
            Some(s.6)
        );
        assert_eq!(int(&rec.attributes, "causeway.chain.p99_ns"), Some(s.7));
        assert_eq!(
            attr(&rec.attributes, "causeway.chain.tail_ratio"),
            Some(&Value::DoubleValue(s.8))
        );
        for k in [
            "detector",
            "root_cause",
            "explanation",
            "cuda_op",
            "timeline",
            "evidence_sql",
        ] {
            assert!(
                text(&rec.attributes, &format!("causeway.chain.{k}")).is_some(),
                "{k}"
            );
        }
    }
    // The imported trace has no kernel counts: every histogram is over the stored events and
    // its count is the stored calls of that op.
    let h = histograms(&m);
    assert!(!h.is_empty());
    let calls = sums(&m, otlp::OP_CALLS, "{call}", "op");
    let mut total = 0;
    for (k, p) in &h {
        check_histogram(p);
        assert_eq!(calls[k] as u64, p.count);
        total += p.count;
    }
    let events: i64 = r
        .prepare_trusted("SELECT count(*) FROM events WHERE op <> 'sched_switch'")
        .unwrap()
        .query_row([], |row| row.get(0))
        .unwrap();
    assert_eq!(total as i64, events);
}

/// Every log record of a request.
fn records(l: &ExportLogsServiceRequest) -> Vec<&LogRecord> {
    l.resource_logs
        .iter()
        .flat_map(|rl| &rl.scope_logs)
        .flat_map(|sl| &sl.log_records)
        .collect()
}

/// The record of the chain `id`: every engine chain is one.
fn record_of<'a>(recs: &[&'a LogRecord], id: &str) -> &'a LogRecord {
    recs.iter()
        .find(|r| text(&r.attributes, "causeway.chain.id").as_deref() == Some(id))
        .copied()
        .unwrap_or_else(|| panic!("no record for chain {id}"))
}

#[test]
fn engine_findings_are_exported_and_stored_chains_only_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("incident.duckdb");
    write_scenario(&p, Scenario::Incident, false).unwrap();
    let r = Reader::open(&p).unwrap();
    let (_, l) = wire(&r, false);
    let found = causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default())
        .unwrap()
        .chains;
    assert!(!found.is_empty());
    let recs = records(&l);
    assert_eq!(recs.len(), found.len());
    for c in &found {
        let rec = record_of(&recs, &c.id);
        assert_eq!(rec.severity_text, c.severity.as_str());
        assert_eq!(body(&rec.body), c.summary);
        assert_eq!(
            int(&rec.attributes, "causeway.chain.p99_ns"),
            None,
            "unknown: omitted"
        );
        let timeline = text(&rec.attributes, "causeway.chain.timeline").unwrap();
        let parsed: Vec<causeway_analysis::TimelineItem> = serde_json::from_str(&timeline).unwrap();
        assert_eq!(parsed, c.timeline);
        // The cost: time lost x the GPUs (the demo records none: one per GPU-calling process)
        // in GPU-hours, at the 2.0 per GPU-hour `wire` prices it at.
        let k = c.cost.as_ref().expect("every engine chain has a cost");
        assert_eq!(k.gpus_from, "assumed");
        let gpu_hours = c.time_lost_ns as f64 * f64::from(k.gpus) / 3.6e12;
        assert_eq!(
            int(&rec.attributes, "causeway.chain.cost.gpus"),
            Some(i64::from(k.gpus))
        );
        let num = |k: &str| match attr(&rec.attributes, k) {
            Some(Value::DoubleValue(v)) => *v,
            other => panic!("{k}: {other:?}"),
        };
        // Kept to 6 significant digits.
        assert!((num("causeway.chain.cost.gpu_hours") - gpu_hours).abs() <= 1e-5 * gpu_hours);
        assert!((num("causeway.chain.cost") - 2.0 * gpu_hours).abs() <= 2e-5 * gpu_hours);
        assert_eq!(
            text(&rec.attributes, "causeway.chain.cost.currency").as_deref(),
            Some("USD")
        );
    }
    let off = otlp::logs_request(
        &r,
        &LogsOptions {
            observed_ns: 1,
            engine: false,
            stored: false,
            prices: Default::default(),
        },
    )
    .unwrap();
    assert!(off.resource_logs.is_empty());
}

/// A finding about a process that recorded steps carries what it costs per step, as `explain`
/// says it: the starvation demo with 40 NVTX steps of 500 ms added to the trainer (pid 4242).
#[test]
fn a_findings_cost_per_step_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("starved.duckdb");
    write_scenario(&p, Scenario::DataloaderStarvation, false).unwrap();
    {
        let c = causeway_store::duckdb::Connection::open(&p).unwrap();
        let t0 = causeway_demo::model::T0;
        for k in 0..40i64 {
            c.execute(
                "INSERT INTO steps VALUES ('demo-node', 4242, 4242, ?, ?, ?, 'nvtx')",
                causeway_store::duckdb::params![
                    k,
                    t0 + k * 500_000_000,
                    t0 + (k + 1) * 500_000_000
                ],
            )
            .unwrap();
        }
    }
    let r = Reader::open(&p).unwrap();
    let (_, l) = wire(&r, false);
    let found = causeway_analysis::explain(&r, &causeway_analysis::ChainQuery::default())
        .unwrap()
        .chains;
    let with: Vec<_> = found.iter().filter(|c| c.per_step.is_some()).collect();
    assert!(!with.is_empty(), "{found:#?}");
    let recs = records(&l);
    for c in &found {
        let rec = record_of(&recs, &c.id);
        let a = &rec.attributes;
        match &c.per_step {
            None => assert_eq!(int(a, "causeway.chain.per_step.lost_per_step_ns"), None),
            Some(k) => {
                assert_eq!(k.steps, 40);
                assert_eq!(
                    int(a, "causeway.chain.per_step.lost_per_step_ns"),
                    Some(k.lost_per_step_ns)
                );
                assert_eq!(int(a, "causeway.chain.per_step.steps"), Some(40));
                assert_eq!(
                    text(a, "causeway.chain.per_step.source").as_deref(),
                    Some("nvtx")
                );
                assert_eq!(
                    int(a, "causeway.chain.per_step.step_ns"),
                    Some(20_000_000_000)
                );
                assert_eq!(
                    int(a, "causeway.chain.per_step.median_step_ns"),
                    Some(500_000_000)
                );
                assert_eq!(
                    int(a, "causeway.chain.per_step.in_window_ns"),
                    Some(k.in_window_ns)
                );
                assert!(k.lost_per_step_ns > 0 && k.lost_per_step_ns <= 500_000_000);
            }
        }
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::StringValue(s) => format!("{s:?}"),
        Value::IntValue(i) => i.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn show_attrs(attrs: &[KeyValue]) -> String {
    attrs
        .iter()
        .map(|kv| {
            let v = kv.value.as_ref().and_then(|v| v.value.as_ref());
            format!("{}={}", kv.key, v.map(show).unwrap_or_default())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The fixture's metrics as a person reads them: resources, metrics with unit, and points
/// (histograms as their non-empty buckets `k:n`, bucket k = [2^k, 2^(k+1)) ns).
#[test]
fn fixture_metrics_summary() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reader::open(&fixture::fixture(dir.path())).unwrap();
    let (m, _) = wire(&r, false);
    let mut o = String::new();
    for rm in &m.resource_metrics {
        let res = show_attrs(&rm.resource.as_ref().unwrap().attributes);
        o.push_str(&format!("resource {res}\n"));
        for metric in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            o.push_str(&format!("  {} [{}]\n", metric.name, metric.unit));
            match &metric.data {
                Some(Data::Histogram(h)) => {
                    for p in &h.data_points {
                        let buckets: Vec<String> = p
                            .bucket_counts
                            .iter()
                            .enumerate()
                            .filter(|(_, n)| **n > 0)
                            .map(|(k, n)| format!("{k}:{n}"))
                            .collect();
                        o.push_str(&format!(
                            "    {} count={} sum={} min={:?} max={:?} buckets {}\n",
                            show_attrs(&p.attributes),
                            p.count,
                            p.sum.unwrap_or_default(),
                            p.min,
                            p.max,
                            buckets.join(" ")
                        ));
                    }
                }
                Some(Data::Sum(s)) => {
                    for p in &s.data_points {
                        let Some(number_data_point::Value::AsInt(v)) = p.value else {
                            panic!("not an int")
                        };
                        o.push_str(&format!("    {} {v}\n", show_attrs(&p.attributes)));
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let host = format!("{:?}", causeway_store::default_node_name());
    insta::assert_snapshot!(o.replace(&host, "\"<this host>\""));
}

/// Timing of one OTLP metrics export (what `trace --otlp-endpoint` does per push) and of the
/// Prometheus text over a larger store: `CAUSEWAY_BENCH_EVENTS` calls (default 2,000,000) of
/// 8 processes written through the Writer. Run explicitly:
/// `cargo test -p causeway-export --test it otlp::metrics_export_timing -- --ignored --nocapture`
#[test]
#[ignore = "timing; run explicitly"]
fn metrics_export_timing() {
    let n: i64 = std::env::var("CAUSEWAY_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.duckdb");
    let mut w = causeway_store::Writer::create(
        &path,
        causeway_store::WriterOptions {
            node: "bench".into(),
            ..causeway_store::WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        w.append(&causeway_store::Event {
            timestamp: fixture::T0 + i * 1_000,
            duration: 1_000 + (i * 7919) % 5_000_000,
            pid: 1_000 + (i % 8) as u32,
            tid: 1_000 + (i % 8) as u32,
            comm: "python3".into(),
            op_id: [fixture::LAUNCH, fixture::MEMCPY, fixture::SYNC][(i % 3) as usize],
            arg0: 4096,
            ..causeway_store::Event::default()
        })
        .unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    let mut best = (f64::MAX, f64::MAX, 0);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let m = otlp::metrics_request(&r).unwrap();
        let otlp_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let text = causeway_export::prometheus::render(&r).unwrap();
        let prom_s = t.elapsed().as_secs_f64();
        let total: u64 = histograms(&m).values().map(|p| p.count).sum();
        assert_eq!(total as i64, n);
        assert!(text.contains("causeway_call_duration_seconds_count"));
        best = (
            best.0.min(otlp_s),
            best.1.min(prom_s),
            m.encode_to_vec().len(),
        );
    }
    eprintln!(
        "{n} events: OTLP metrics request {:.3} s ({} bytes encoded), Prometheus text {:.3} s (best of 3)",
        best.0, best.2, best.1
    );
}
