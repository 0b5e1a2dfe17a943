//! The OTLP metrics of a trace: per-process log2 latency histograms, calls, bytes and off-CPU
//! time, per-node drops, cumulative over the whole trace (docs/otlp.md).

use std::collections::BTreeMap;

use causeway_store::{Reader, StoreError};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{DROPS, OFFCPU_TIME, OP_BYTES, OP_CALLS, OP_DURATION, Resources, ns, s, scope};
use crate::gather::{Facts, LOG2_BUCKETS, OpFacts, SCHED_SWITCH, gather};

/// The histogram bounds: 2^(k+1) ns for k in 0..40 (2 ns .. 2^40 ns), so that bucket k holds
/// 2^k <= d < 2^(k+1) like causeway's log2 buckets, and the last one everything >= 2^40 ns.
pub fn explicit_bounds() -> Vec<f64> {
    (1..LOG2_BUCKETS as i32).map(|k| 2f64.powi(k)).collect()
}

/// Data points of one resource, by metric.
#[derive(Default)]
struct Points {
    durations: Vec<HistogramDataPoint>,
    calls: Vec<NumberDataPoint>,
    bytes: Vec<NumberDataPoint>,
    off_cpu: Vec<NumberDataPoint>,
    drops: Vec<NumberDataPoint>,
}

fn sum_metric(name: &str, unit: &str, description: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        description: description.into(),
        unit: unit.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

impl Points {
    fn into_metrics(self) -> Vec<Metric> {
        let mut m = Vec::new();
        if !self.durations.is_empty() {
            m.push(Metric {
                name: OP_DURATION.into(),
                description: "Duration of calls: the kernel's log2 histogram of every call where \
                              recorded, else the stored events"
                    .into(),
                unit: "ns".into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: self.durations,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Metric::default()
            });
        }
        for (name, unit, description, points) in [
            (
                OP_CALLS,
                "{call}",
                "Calls, counted in the kernel where recorded (also those not stored), else stored",
                self.calls,
            ),
            (
                OP_BYTES,
                "By",
                "Bytes moved or allocated by the calls",
                self.bytes,
            ),
            (
                OFFCPU_TIME,
                "ns",
                "Time the process's threads spent off the CPU, by state at switch-out",
                self.off_cpu,
            ),
            (DROPS, "{event}", "Events lost, by kind", self.drops),
        ] {
            if !points.is_empty() {
                m.push(sum_metric(name, unit, description, points));
            }
        }
        m
    }
}

/// The histogram data point of one op, from the kernel's histogram when there is one, else
/// from the stored events; None when neither timed a call.
fn duration_point(o: &OpFacts, attrs: &[KeyValue], span: (u64, u64)) -> Option<HistogramDataPoint> {
    let (buckets, sum, min_max) = match (&o.kernel_hist, &o.stored) {
        (Some(h), stored) => {
            let sum = match (&o.kernel, stored) {
                (Some(k), _) => k.total_ns as f64,
                (None, Some(st)) => st.sum_ns as f64,
                (None, None) => 0.0,
            };
            (h, sum, None)
        }
        (None, Some(st)) => (
            &st.log2,
            st.sum_ns as f64,
            Some((st.min_ns as f64, st.max_ns as f64)),
        ),
        (None, None) => return None,
    };
    let count: u64 = buckets.iter().sum();
    if count == 0 {
        return None;
    }
    Some(HistogramDataPoint {
        attributes: attrs.to_vec(),
        start_time_unix_nano: span.0,
        time_unix_nano: span.1,
        count,
        sum: Some(sum),
        bucket_counts: buckets.to_vec(),
        explicit_bounds: explicit_bounds(),
        min: min_max.map(|m| m.0),
        max: min_max.map(|m| m.1),
        ..HistogramDataPoint::default()
    })
}

fn int_point(attrs: Vec<KeyValue>, span: (u64, u64), v: i64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: span.0,
        time_unix_nano: span.1,
        value: Some(number_data_point::Value::AsInt(v)),
        ..NumberDataPoint::default()
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The metrics of the trace `r` reads (a finished file or a live recording), cumulative over
/// the whole trace.
pub fn metrics_request(r: &Reader) -> Result<ExportMetricsServiceRequest, StoreError> {
    Ok(metrics_from(&gather(r)?, causeway_store::now_ns()))
}

/// The metrics of already gathered facts; `now_ns` stands in for the times of an empty trace.
pub fn metrics_from(f: &Facts, now_ns: i64) -> ExportMetricsServiceRequest {
    let (start, end) = f.span.unwrap_or((now_ns, now_ns));
    let span = (ns(start), ns(end.max(start)));
    let mut procs: BTreeMap<(&str, u32), Points> = BTreeMap::new();
    let mut nodes: BTreeMap<&str, Points> = BTreeMap::new();
    for (k, o) in &f.ops {
        if k.op == SCHED_SWITCH {
            continue;
        }
        let attrs = vec![s("op", &k.op), s("source", &k.source)];
        let p = procs.entry((k.node.as_str(), k.pid)).or_default();
        if let Some(dp) = duration_point(o, &attrs, span) {
            p.durations.push(dp);
        }
        let calls = match (&o.kernel, &o.stored) {
            (Some(c), _) => clamp(c.calls),
            (None, Some(st)) => clamp(st.count),
            (None, None) => 0,
        };
        p.calls.push(int_point(attrs.clone(), span, calls));
        let bytes = match (&o.kernel, &o.stored) {
            (Some(c), _) if c.bytes > 0 => clamp(c.bytes),
            (_, Some(st)) => st.bytes,
            _ => 0,
        };
        if bytes > 0 {
            p.bytes.push(int_point(attrs, span, bytes));
        }
    }
    for x in &f.off_cpu {
        procs
            .entry((x.node.as_str(), x.pid))
            .or_default()
            .off_cpu
            .push(int_point(vec![s("state", &x.state)], span, x.ns));
    }
    for d in &f.drops {
        nodes
            .entry(d.node.as_str())
            .or_default()
            .drops
            .push(int_point(vec![s("kind", &d.kind)], span, d.count));
    }
    let res = Resources::new(f);
    let mut out = Vec::new();
    let mut push = |resource: Resource, points: Points| {
        let metrics = points.into_metrics();
        if !metrics.is_empty() {
            out.push(ResourceMetrics {
                resource: Some(resource),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope()),
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            });
        }
    };
    for ((node, pid), points) in procs {
        push(res.process(node, pid), points);
    }
    for (node, points) in nodes {
        push(res.node(node), points);
    }
    ExportMetricsServiceRequest {
        resource_metrics: out,
    }
}
