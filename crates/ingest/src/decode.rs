//! OTLP -> store rows: maps causeway's own metrics and chain logs (the OTLP contract, see
//! docs/collect.md) back onto nodes, processes, op_counts, op_histograms, drops and chains, and
//! keeps every other data point and log record generically. Malformed points are rejected one
//! by one (an OTLP partial success); a request with nothing usable is an error.

use std::sync::Arc;

use causeway_store::received::{
    ChainRow, DropSnapshot, LogRow, MetricPoint, NodeRow, OpSnapshot, ProcessRow, Received,
    UNKNOWN_NODE,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::metrics::v1::{
    HistogramDataPoint, NumberDataPoint, metric::Data, number_data_point,
};
use serde_json::{Map, Value as Json};

/// Log2 buckets of causeway.op.duration: 40 explicit bounds 2^1 .. 2^40 ns, 41 buckets.
pub const OP_BUCKETS: usize = 41;

/// What decoding one request gave.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Rows to write.
    pub rows: Received,
    /// Data points or log records rejected as malformed.
    pub rejected: u64,
    /// Why the first one was rejected (empty when none was).
    pub error: String,
}

impl Decoded {
    fn reject(&mut self, why: String) {
        self.rejected += 1;
        if self.error.is_empty() {
            self.error = why;
        }
    }
}

/// The attributes of a resource that causeway reads.
struct Resource {
    node: String,
    json: Arc<str>,
    pid: Option<u32>,
    causeway: bool,
}

fn any_to_json(v: &AnyValue) -> Json {
    match &v.value {
        Some(Value::StringValue(s)) => Json::String(s.clone()),
        Some(Value::BoolValue(b)) => Json::Bool(*b),
        Some(Value::IntValue(i)) => Json::from(*i),
        Some(Value::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Json::Number)
            .unwrap_or(Json::Null),
        Some(Value::ArrayValue(a)) => Json::Array(a.values.iter().map(any_to_json).collect()),
        Some(Value::KvlistValue(l)) => Json::Object(attrs_map(&l.values)),
        Some(Value::BytesValue(b)) => Json::String(hex(b)),
        Some(Value::StringValueStrindex(_)) | None => Json::Null,
    }
}

fn attrs_map(kvs: &[KeyValue]) -> Map<String, Json> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map_or(Json::Null, any_to_json),
            )
        })
        .collect()
}

fn attrs_json(kvs: &[KeyValue]) -> String {
    if kvs.is_empty() {
        return "{}".into();
    }
    Json::Object(attrs_map(kvs)).to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn find<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn str_attr(kvs: &[KeyValue], key: &str) -> String {
    match find(kvs, key) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        _ => String::new(),
    }
}

fn int_attr(kvs: &[KeyValue], key: &str) -> Option<i64> {
    match find(kvs, key) {
        Some(Value::IntValue(i)) => Some(*i),
        Some(Value::StringValue(s)) => s.parse().ok(),
        Some(Value::DoubleValue(d)) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

fn double_attr(kvs: &[KeyValue], key: &str) -> f64 {
    match find(kvs, key) {
        Some(Value::DoubleValue(d)) => *d,
        Some(Value::IntValue(i)) => *i as f64,
        _ => 0.0,
    }
}

fn ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Reads the resource: its node (causeway.node, else host.name, else service.name), and for
/// causeway resources the node and process rows.
fn resource(attrs: &[KeyValue], span: (i64, i64), out: &mut Received) -> Resource {
    let mut node = str_attr(attrs, "causeway.node");
    let hostname = str_attr(attrs, "host.name");
    if node.is_empty() {
        node = hostname.clone();
    }
    if node.is_empty() {
        node = str_attr(attrs, "service.name");
    }
    if node.is_empty() {
        node = UNKNOWN_NODE.into();
    }
    let causeway =
        str_attr(attrs, "service.name") == "causeway" || find(attrs, "causeway.node").is_some();
    let cluster = str_attr(attrs, "causeway.cluster");
    let pid = int_attr(attrs, "process.pid").and_then(|p| u32::try_from(p).ok());
    out.nodes.push(NodeRow {
        node: node.clone(),
        hostname,
        cluster: cluster.clone(),
    });
    if causeway && let Some(pid) = pid {
        let small = |k| int_attr(attrs, k).and_then(|v| i32::try_from(v).ok());
        out.processes.push(ProcessRow {
            node: node.clone(),
            pid,
            comm: str_attr(attrs, "process.executable.name"),
            rank: small("causeway.rank"),
            local_rank: small("causeway.local_rank"),
            world_size: small("causeway.world_size"),
            cluster,
            first_seen_ns: span.0,
            last_seen_ns: span.1,
            cgroup: causeway_store::CgroupInfo {
                cgroup_id: int_attr(attrs, "causeway.cgroup_id")
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0),
                container_id: str_attr(attrs, "container.id"),
                runtime: str_attr(attrs, "container.runtime"),
                pod_name: str_attr(attrs, "k8s.pod.name"),
                namespace: str_attr(attrs, "k8s.namespace.name"),
                pod_uid: str_attr(attrs, "k8s.pod.uid"),
                container_name: str_attr(attrs, "k8s.container.name"),
                ..causeway_store::CgroupInfo::default()
            },
        });
    }
    Resource {
        node,
        json: Arc::from(attrs_json(attrs)),
        pid,
        causeway,
    }
}

fn number(p: &NumberDataPoint) -> Option<f64> {
    match p.value {
        Some(number_data_point::Value::AsDouble(d)) => Some(d),
        Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
        None => None,
    }
}

fn number_u64(p: &NumberDataPoint) -> Option<u64> {
    match p.value {
        Some(number_data_point::Value::AsInt(i)) => u64::try_from(i).ok(),
        Some(number_data_point::Value::AsDouble(d)) if d >= 0.0 && d.fract() == 0.0 => {
            Some(d as u64)
        }
        _ => None,
    }
}

/// causeway.op.duration buckets as log2 buckets, when the point has the contract's layout.
fn log2_buckets(p: &HistogramDataPoint) -> Option<Vec<u64>> {
    if p.bucket_counts.len() != OP_BUCKETS || p.explicit_bounds.len() != OP_BUCKETS - 1 {
        return None;
    }
    let bounds_ok = p
        .explicit_bounds
        .iter()
        .enumerate()
        .all(|(k, b)| *b == (1u64 << (k + 1)) as f64);
    bounds_ok.then(|| p.bucket_counts.clone())
}

fn temporality(t: i32) -> &'static str {
    match t {
        1 => "delta",
        2 => "cumulative",
        _ => "",
    }
}

/// The time span of every point in a request, for process first/last seen.
fn metrics_span(req: &ExportMetricsServiceRequest) -> (i64, i64) {
    let (mut lo, mut hi) = (i64::MAX, 0i64);
    let mut see = |s: u64, t: u64| {
        if s > 0 {
            lo = lo.min(ns(s));
        }
        lo = lo.min(ns(t));
        hi = hi.max(ns(t));
    };
    for rm in &req.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                match &m.data {
                    Some(Data::Gauge(g)) => g
                        .data_points
                        .iter()
                        .for_each(|p| see(p.start_time_unix_nano, p.time_unix_nano)),
                    Some(Data::Sum(g)) => g
                        .data_points
                        .iter()
                        .for_each(|p| see(p.start_time_unix_nano, p.time_unix_nano)),
                    Some(Data::Histogram(g)) => g
                        .data_points
                        .iter()
                        .for_each(|p| see(p.start_time_unix_nano, p.time_unix_nano)),
                    _ => {}
                }
            }
        }
    }
    if lo == i64::MAX { (0, 0) } else { (lo, hi) }
}

/// Decodes a metrics request.
pub fn metrics(req: &ExportMetricsServiceRequest) -> Decoded {
    let mut d = Decoded::default();
    let span = metrics_span(req);
    for rm in &req.resource_metrics {
        let attrs = rm
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let res = resource(attrs, span, &mut d.rows);
        for sm in &rm.scope_metrics {
            let scope: Arc<str> = Arc::from(sm.scope.as_ref().map_or("", |s| s.name.as_str()));
            for m in &sm.metrics {
                metric(&res, &scope, m, &mut d);
            }
        }
    }
    d
}

fn generic(
    res: &Resource,
    scope: &Arc<str>,
    name: &Arc<str>,
    unit: &Arc<str>,
    kind: &'static str,
) -> MetricPoint {
    MetricPoint {
        node: res.node.clone(),
        resource: res.json.clone(),
        scope: scope.clone(),
        metric: name.clone(),
        unit: unit.clone(),
        kind,
        ..MetricPoint::default()
    }
}

fn metric(
    res: &Resource,
    scope: &Arc<str>,
    m: &opentelemetry_proto::tonic::metrics::v1::Metric,
    d: &mut Decoded,
) {
    let name: Arc<str> = Arc::from(m.name.as_str());
    let unit: Arc<str> = Arc::from(m.unit.as_str());
    if m.name.is_empty() {
        d.reject("a metric has no name".into());
        return;
    }
    let Some(data) = &m.data else {
        d.reject(format!("metric '{}' has no data", m.name));
        return;
    };
    match data {
        Data::Gauge(g) => {
            for p in &g.data_points {
                let Some(v) = number(p) else {
                    d.reject(format!("a point of gauge '{}' has no value", m.name));
                    continue;
                };
                d.rows.points.push(MetricPoint {
                    attributes: attrs_json(&p.attributes),
                    start_ns: ns(p.start_time_unix_nano),
                    time_ns: ns(p.time_unix_nano),
                    value: Some(v),
                    ..generic(res, scope, &name, &unit, "gauge")
                });
            }
        }
        Data::Sum(s) => {
            let cumulative = s.aggregation_temporality == 2;
            for p in &s.data_points {
                let Some(v) = number(p) else {
                    d.reject(format!("a point of sum '{}' has no value", m.name));
                    continue;
                };
                if res.causeway && cumulative && causeway_sum(res, &m.name, p, d) {
                    continue;
                }
                d.rows.points.push(MetricPoint {
                    monotonic: Some(s.is_monotonic),
                    temporality: temporality(s.aggregation_temporality),
                    attributes: attrs_json(&p.attributes),
                    start_ns: ns(p.start_time_unix_nano),
                    time_ns: ns(p.time_unix_nano),
                    value: Some(v),
                    ..generic(res, scope, &name, &unit, "sum")
                });
            }
        }
        Data::Histogram(h) => {
            let cumulative = h.aggregation_temporality == 2;
            for p in &h.data_points {
                if p.bucket_counts.len() != p.explicit_bounds.len() + 1
                    && !p.bucket_counts.is_empty()
                {
                    d.reject(format!(
                        "histogram '{}': {} bucket counts for {} bounds (expected bounds + 1)",
                        m.name,
                        p.bucket_counts.len(),
                        p.explicit_bounds.len()
                    ));
                    continue;
                }
                if res.causeway
                    && cumulative
                    && m.name == "causeway.op.duration"
                    && let (Some(pid), Some(op)) = (res.pid, op_of(p.attributes.as_slice()))
                    && let Some(buckets) = log2_buckets(p)
                {
                    d.rows.ops.push(OpSnapshot {
                        node: res.node.clone(),
                        pid,
                        op_id: op,
                        start_ns: ns(p.start_time_unix_nano),
                        time_ns: ns(p.time_unix_nano),
                        total_ns: p.sum.map(|s| s.max(0.0) as u64),
                        buckets: Some(buckets),
                        ..OpSnapshot::default()
                    });
                    continue;
                }
                d.rows.points.push(MetricPoint {
                    temporality: temporality(h.aggregation_temporality),
                    attributes: attrs_json(&p.attributes),
                    start_ns: ns(p.start_time_unix_nano),
                    time_ns: ns(p.time_unix_nano),
                    count: Some(p.count),
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                    bucket_counts: Some(p.bucket_counts.clone()),
                    bounds: Some(p.explicit_bounds.clone()),
                    ..generic(res, scope, &name, &unit, "histogram")
                });
            }
        }
        Data::ExponentialHistogram(h) => {
            for p in &h.data_points {
                let mut attrs = attrs_map(&p.attributes);
                // Kept generically: the scale and offsets go with the attributes.
                attrs.insert(
                    "otlp.exponential".into(),
                    serde_json::json!({
                        "scale": p.scale,
                        "zero_count": p.zero_count,
                        "positive_offset": p.positive.as_ref().map_or(0, |b| b.offset),
                        "negative_offset": p.negative.as_ref().map_or(0, |b| b.offset),
                        "negative_bucket_counts": p.negative.as_ref().map_or(Vec::new(), |b| b.bucket_counts.clone()),
                    }),
                );
                d.rows.points.push(MetricPoint {
                    temporality: temporality(h.aggregation_temporality),
                    attributes: Json::Object(attrs).to_string(),
                    start_ns: ns(p.start_time_unix_nano),
                    time_ns: ns(p.time_unix_nano),
                    count: Some(p.count),
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                    bucket_counts: Some(
                        p.positive
                            .as_ref()
                            .map_or(Vec::new(), |b| b.bucket_counts.clone()),
                    ),
                    ..generic(res, scope, &name, &unit, "exponential_histogram")
                });
            }
        }
        Data::Summary(s) => {
            for p in &s.data_points {
                d.rows.points.push(MetricPoint {
                    attributes: attrs_json(&p.attributes),
                    start_ns: ns(p.start_time_unix_nano),
                    time_ns: ns(p.time_unix_nano),
                    count: Some(p.count),
                    sum: Some(p.sum),
                    bounds: Some(p.quantile_values.iter().map(|q| q.quantile).collect()),
                    bucket_values: Some(p.quantile_values.iter().map(|q| q.value).collect()),
                    ..generic(res, scope, &name, &unit, "summary")
                });
            }
        }
    }
}

fn op_of(attrs: &[KeyValue]) -> Option<u16> {
    let op = str_attr(attrs, "op");
    causeway_store::catalog::op_by_name(&op).map(|o| o.id)
}

/// Maps a cumulative causeway Sum point onto op_counts or drops; false when it is not one of
/// ours (or names an op this build does not know) and is kept generically.
fn causeway_sum(res: &Resource, name: &str, p: &NumberDataPoint, d: &mut Decoded) -> bool {
    let start = ns(p.start_time_unix_nano);
    let time = ns(p.time_unix_nano);
    match name {
        "causeway.op.calls" | "causeway.op.bytes" => {
            let (Some(pid), Some(op), Some(v)) = (res.pid, op_of(&p.attributes), number_u64(p))
            else {
                return false;
            };
            let calls = name == "causeway.op.calls";
            d.rows.ops.push(OpSnapshot {
                node: res.node.clone(),
                pid,
                op_id: op,
                start_ns: start,
                time_ns: time,
                calls: calls.then_some(v),
                bytes: (!calls).then_some(v),
                ..OpSnapshot::default()
            });
            true
        }
        "causeway.drops" => {
            let kind = str_attr(&p.attributes, "kind");
            let Some(v) = number_u64(p) else { return false };
            if kind.is_empty() {
                return false;
            }
            d.rows.drops.push(DropSnapshot {
                node: res.node.clone(),
                kind,
                start_ns: start,
                time_ns: time,
                count: v,
            });
            true
        }
        _ => false,
    }
}

fn body_text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        None => String::new(),
        Some(_) => v.map(any_to_json).unwrap_or(Json::Null).to_string(),
    }
}

/// Decodes a logs request: chain records become chains, the rest log_records.
pub fn logs(req: &ExportLogsServiceRequest) -> Decoded {
    let mut d = Decoded::default();
    for rl in &req.resource_logs {
        let attrs = rl
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let (lo, hi) = rl
            .scope_logs
            .iter()
            .flat_map(|s| &s.log_records)
            .fold((i64::MAX, 0), |(lo, hi), l| {
                (lo.min(ns(l.time_unix_nano)), hi.max(ns(l.time_unix_nano)))
            });
        let span = if lo == i64::MAX { (0, 0) } else { (lo, hi) };
        let res = resource(attrs, span, &mut d.rows);
        for sl in &rl.scope_logs {
            let scope: Arc<str> = Arc::from(sl.scope.as_ref().map_or("", |s| s.name.as_str()));
            for l in &sl.log_records {
                if l.event_name == "causeway.chain" {
                    let a = l.attributes.as_slice();
                    let id = str_attr(a, "causeway.chain.id");
                    if id.is_empty() {
                        d.reject(
                            "a causeway.chain log record has no causeway.chain.id attribute".into(),
                        );
                        continue;
                    }
                    let recs = match find(a, "causeway.chain.recommendations") {
                        Some(Value::ArrayValue(v)) => Json::Array(
                            v.values
                                .iter()
                                .map(|x| Json::String(body_text(Some(x))))
                                .collect(),
                        )
                        .to_string(),
                        _ => "[]".into(),
                    };
                    let timeline = str_attr(a, "causeway.chain.timeline");
                    d.rows.chains.push(ChainRow {
                        node: res.node.clone(),
                        chain_id: id,
                        detector: str_attr(a, "causeway.chain.detector"),
                        detected_ns: ns(l.time_unix_nano),
                        severity: if l.severity_text.is_empty() {
                            match l.severity_number {
                                17.. => "HIGH",
                                13..=16 => "MEDIUM",
                                _ => "LOW",
                            }
                            .into()
                        } else {
                            l.severity_text.clone()
                        },
                        summary: body_text(l.body.as_ref()),
                        root_cause: str_attr(a, "causeway.chain.root_cause"),
                        explanation: str_attr(a, "causeway.chain.explanation"),
                        recommendations: recs,
                        timeline: if timeline.is_empty() {
                            "[]".into()
                        } else {
                            timeline
                        },
                        evidence_sql: str_attr(a, "causeway.chain.evidence_sql"),
                        time_lost_ns: int_attr(a, "causeway.chain.time_lost_ns").unwrap_or(0),
                        cuda_op: str_attr(a, "causeway.chain.cuda_op"),
                        p50_ns: int_attr(a, "causeway.chain.p50_ns").unwrap_or(0),
                        p99_ns: int_attr(a, "causeway.chain.p99_ns").unwrap_or(0),
                        tail_ratio: double_attr(a, "causeway.chain.tail_ratio"),
                        origin: "collected".into(),
                    });
                    continue;
                }
                d.rows.logs.push(LogRow {
                    node: res.node.clone(),
                    resource: res.json.clone(),
                    scope: scope.clone(),
                    time_ns: ns(l.time_unix_nano),
                    observed_ns: ns(l.observed_time_unix_nano),
                    severity_number: l.severity_number,
                    severity_text: l.severity_text.clone(),
                    event_name: l.event_name.clone(),
                    body: body_text(l.body.as_ref()),
                    attributes: attrs_json(&l.attributes),
                    trace_id: hex(&l.trace_id),
                    span_id: hex(&l.span_id),
                });
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{
        Histogram, Metric, ResourceMetrics, ScopeMetrics,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..KeyValue::default()
        }
    }

    fn request(res: Vec<KeyValue>, metric: Metric) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: res,
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![metric],
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }

    fn histogram(name: &str, counts: Vec<u64>, bounds: Vec<f64>) -> Metric {
        Metric {
            name: name.into(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes: vec![kv("op", Value::StringValue("cudaLaunchKernel".into()))],
                    start_time_unix_nano: 10,
                    time_unix_nano: 20,
                    count: counts.iter().sum(),
                    sum: Some(1e6),
                    bucket_counts: counts,
                    explicit_bounds: bounds,
                    ..HistogramDataPoint::default()
                }],
                aggregation_temporality: 2,
            })),
            ..Metric::default()
        }
    }

    fn causeway_resource() -> Vec<KeyValue> {
        vec![
            kv("service.name", Value::StringValue("causeway".into())),
            kv("causeway.node", Value::StringValue("n1".into())),
            kv("process.pid", Value::IntValue(7)),
        ]
    }

    #[test]
    fn op_duration_with_the_contract_layout_becomes_a_log2_snapshot() {
        let bounds: Vec<f64> = (0..40).map(|k| (1u64 << (k + 1)) as f64).collect();
        let mut counts = vec![0; 41];
        counts[13] = 5;
        let d = metrics(&request(
            causeway_resource(),
            histogram("causeway.op.duration", counts, bounds),
        ));
        assert_eq!(d.rejected, 0);
        assert!(d.rows.points.is_empty());
        let s = &d.rows.ops[0];
        assert_eq!(
            (s.node.as_str(), s.pid, s.op_id, s.start_ns, s.time_ns),
            ("n1", 7, 3, 10, 20)
        );
        assert_eq!(s.buckets.as_ref().unwrap()[13], 5);
        assert_eq!(s.total_ns, Some(1_000_000));
        assert_eq!(d.rows.items(), 1);
    }

    #[test]
    fn other_bounds_or_senders_are_kept_generically() {
        let d = metrics(&request(
            causeway_resource(),
            histogram("causeway.op.duration", vec![1, 2], vec![5.0]),
        ));
        assert!(d.rows.ops.is_empty());
        assert_eq!(d.rows.points[0].kind, "histogram");
        assert_eq!(d.rows.points[0].bucket_counts, Some(vec![1, 2]));
        let third = vec![kv("host.name", Value::StringValue("h".into()))];
        let d = metrics(&request(
            third,
            histogram(
                "causeway.op.duration",
                vec![0; 41],
                (0..40).map(|k| (1u64 << (k + 1)) as f64).collect(),
            ),
        ));
        assert!(
            d.rows.ops.is_empty(),
            "only causeway resources map onto op tables"
        );
        assert_eq!(d.rows.points[0].node, "h");
    }

    #[test]
    fn malformed_histograms_are_rejected_with_the_reason() {
        let d = metrics(&request(
            causeway_resource(),
            histogram("latency", vec![1, 2, 3], vec![1.0]),
        ));
        assert_eq!(d.rejected, 1);
        assert_eq!(
            d.error,
            "histogram 'latency': 3 bucket counts for 1 bounds (expected bounds + 1)"
        );
        assert_eq!(d.rows.items(), 0);
    }
}
