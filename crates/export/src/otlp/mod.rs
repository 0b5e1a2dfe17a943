//! OTLP export of a trace (docs/otlp.md): an `ExportMetricsServiceRequest` with real log2
//! histograms of op latencies, call/byte/off-CPU/drop counters ([`metrics`]), and an
//! `ExportLogsServiceRequest` with one log record per causal chain ([`logs`]), each under
//! resources that name the node, cluster, process and rank (built here). Made from
//! [`crate::gather`] (the data Prometheus reads too) and the `chains` table; sending them is
//! the binary's job.

mod logs;
mod metrics;

use std::collections::BTreeMap;

use causeway_store::sanitize::sanitize_with;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::gather::{Facts, NodeFacts};

pub use logs::{LogsOptions, logs_request, severity};
pub use metrics::{explicit_bounds, metrics_from, metrics_request};

/// Instrumentation scope name of everything causeway exports.
pub const SCOPE_NAME: &str = "causeway";
/// Histogram of op durations (ns), attributes {op, source}.
pub const OP_DURATION: &str = "causeway.op.duration";
/// Calls (kernel-counted where recorded), attributes {op, source}.
pub const OP_CALLS: &str = "causeway.op.calls";
/// Bytes moved or allocated, attributes {op, source}.
pub const OP_BYTES: &str = "causeway.op.bytes";
/// Off-CPU time of a process (ns), attributes {state}.
pub const OFFCPU_TIME: &str = "causeway.offcpu.time";
/// Events lost on a node, attributes {kind}.
pub const DROPS: &str = "causeway.drops";
/// `event_name` of a causal chain's log record.
pub const CHAIN_EVENT: &str = "causeway.chain";

/// Longest process name exported (names come from the traced machine: sanitised).
const MAX_NAME_CHARS: usize = 256;

pub(crate) fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

/// A string attribute, through the sanitiser's final pass (values may come from the trace).
pub(crate) fn s(key: &str, v: &str) -> KeyValue {
    kv(
        key,
        Value::StringValue(causeway_store::sanitize::sanitize_text(v)),
    )
}

pub(crate) fn i(key: &str, v: i64) -> KeyValue {
    kv(key, Value::IntValue(v))
}

/// Builds resources: one per node and one per (node, pid), keys omitted when unknown or empty.
pub(crate) struct Resources<'a> {
    nodes: BTreeMap<&'a str, &'a NodeFacts>,
    facts: &'a Facts,
}

impl<'a> Resources<'a> {
    pub(crate) fn new(facts: &'a Facts) -> Self {
        Resources {
            nodes: facts.nodes.iter().map(|n| (n.node.as_str(), n)).collect(),
            facts,
        }
    }

    fn node_attrs(&self, node: &str, process_cluster: &str) -> Vec<KeyValue> {
        let mut a = vec![s("service.name", SCOPE_NAME)];
        if node.is_empty() {
            return a;
        }
        let n = self.nodes.get(node);
        let host = n.map(|n| n.hostname.as_str()).filter(|h| !h.is_empty());
        a.push(s("host.name", host.unwrap_or(node)));
        a.push(s("causeway.node", node));
        let cluster = n
            .map(|n| n.cluster.as_str())
            .filter(|c| !c.is_empty())
            .unwrap_or(process_cluster);
        if !cluster.is_empty() {
            a.push(s("causeway.cluster", cluster));
        }
        a
    }

    pub(crate) fn node(&self, node: &str) -> Resource {
        Resource {
            attributes: self.node_attrs(node, ""),
            ..Resource::default()
        }
    }

    pub(crate) fn process(&self, node: &str, pid: u32) -> Resource {
        let p = self.facts.processes.get(&(node.to_string(), pid));
        let mut a = self.node_attrs(node, p.map_or("", |p| p.cluster.as_str()));
        a.push(i("process.pid", i64::from(pid)));
        if let Some(p) = p {
            let comm = sanitize_with(&p.comm, MAX_NAME_CHARS);
            if !comm.is_empty() {
                a.push(s("process.executable.name", &comm));
            }
            // The cgroup the rest describe, so a collector stores them as the recorder did.
            if p.cgroup_id != 0 && !(p.container_id.is_empty() && p.pod_uid.is_empty()) {
                a.push(i("causeway.cgroup_id", p.cgroup_id as i64));
            }
            // OpenTelemetry's semantic conventions for containers and Kubernetes.
            for (k, v) in [
                ("container.id", &p.container_id),
                ("container.runtime", &p.runtime),
                ("k8s.pod.name", &p.pod_name),
                ("k8s.namespace.name", &p.namespace),
                ("k8s.pod.uid", &p.pod_uid),
                ("k8s.container.name", &p.container_name),
            ] {
                if !v.is_empty() {
                    a.push(s(k, v));
                }
            }
            for (k, v) in [
                ("causeway.rank", p.rank),
                ("causeway.local_rank", p.local_rank),
                ("causeway.world_size", p.world_size),
            ] {
                if let Some(v) = v {
                    a.push(i(k, i64::from(v)));
                }
            }
        }
        Resource {
            attributes: a,
            ..Resource::default()
        }
    }
}

pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..InstrumentationScope::default()
    }
}

pub(crate) fn ns(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
