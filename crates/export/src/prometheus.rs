//! Prometheus text exposition (format 0.0.4) of a trace, served at `/metrics` next to MCP:
//! per-(node, source, op) call counters and exact latency histograms over the stored events,
//! calls counted in the kernel, bytes moved, off-CPU time by state, and dropped events.
//! The numbers come from [`crate::gather`], shared with the OTLP export.

use std::collections::BTreeMap;
use std::fmt::Write;

use causeway_store::sanitize::sanitize_with;
use causeway_store::{Reader, StoreError};

use crate::gather::{Facts, PROM_BUCKETS_NS, StoredCalls, gather};

/// Upper bounds of the latency buckets in ns: 1 us x 4^k, 1 us .. about 16.8 s.
pub const BUCKETS_NS: [i64; 13] = PROM_BUCKETS_NS;

/// A label value: sanitised, with `\`, `"` and newlines escaped as the format requires.
fn label(v: &str) -> String {
    sanitize_with(v, 120)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn header(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

/// Stored calls of one (node, source, op), summed over processes.
#[derive(Default)]
struct Series {
    count: u64,
    sum: i64,
    bytes: i64,
    /// Calls per bucket, not cumulative (the last entry is above every bound).
    buckets: [u64; BUCKETS_NS.len() + 1],
}

impl Series {
    fn add(&mut self, s: &StoredCalls) {
        self.count += s.count;
        self.sum += s.sum_ns;
        self.bytes += s.bytes;
        for (a, b) in self.buckets.iter_mut().zip(&s.prom) {
            *a += b;
        }
    }
}

/// Renders the metrics of the trace `r` reads (a finished file or a live recording).
pub fn render(r: &Reader) -> Result<String, StoreError> {
    Ok(render_facts(&gather(r)?))
}

/// Renders already gathered facts.
pub fn render_facts(f: &Facts) -> String {
    let mut o = String::new();
    let mut ops: BTreeMap<(&str, &str, &str), Series> = BTreeMap::new();
    let mut counted: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for (k, facts) in &f.ops {
        let key = (k.node.as_str(), k.source.as_str(), k.op.as_str());
        if let Some(s) = &facts.stored {
            ops.entry(key).or_default().add(s);
        }
        if let Some(c) = &facts.kernel {
            *counted.entry(key).or_default() += c.calls;
        }
    }
    let nodes: Vec<_> = f.nodes.iter().filter(|n| n.events > 0).collect();

    header(
        &mut o,
        "causeway_events",
        "gauge",
        "Events stored in the trace, per node.",
    );
    for n in &nodes {
        let _ = writeln!(
            o,
            "causeway_events{{node=\"{}\"}} {}",
            label(&n.node),
            n.events
        );
    }
    header(
        &mut o,
        "causeway_last_event_timestamp_seconds",
        "gauge",
        "Time of the newest event per node (seconds since the Unix epoch).",
    );
    for n in &nodes {
        let _ = writeln!(
            o,
            "causeway_last_event_timestamp_seconds{{node=\"{}\"}} {:.9}",
            label(&n.node),
            secs(n.last_event_ns.unwrap_or(0))
        );
    }

    header(
        &mut o,
        "causeway_call_duration_seconds",
        "histogram",
        "Duration of every stored call, exact over the stored events (CUDA, driver, NCCL, host).",
    );
    for ((node, source, op), s) in &ops {
        let l = format!(
            "node=\"{}\",source=\"{}\",op=\"{}\"",
            label(node),
            label(source),
            label(op)
        );
        let mut cumulative = 0;
        for (b, n) in BUCKETS_NS.iter().zip(&s.buckets) {
            cumulative += n;
            let _ = writeln!(
                o,
                "causeway_call_duration_seconds_bucket{{{l},le=\"{}\"}} {cumulative}",
                secs(*b)
            );
        }
        let _ = writeln!(
            o,
            "causeway_call_duration_seconds_bucket{{{l},le=\"+Inf\"}} {}",
            s.count
        );
        let _ = writeln!(
            o,
            "causeway_call_duration_seconds_sum{{{l}}} {:.9}",
            secs(s.sum)
        );
        let _ = writeln!(o, "causeway_call_duration_seconds_count{{{l}}} {}", s.count);
    }

    header(
        &mut o,
        "causeway_bytes_total",
        "counter",
        "Bytes moved by memcpy/memset calls (stored events).",
    );
    for ((node, source, op), s) in ops.iter().filter(|x| x.1.bytes > 0) {
        let _ = writeln!(
            o,
            "causeway_bytes_total{{node=\"{}\",source=\"{}\",op=\"{}\"}} {}",
            label(node),
            label(source),
            label(op),
            s.bytes
        );
    }

    header(
        &mut o,
        "causeway_counted_calls_total",
        "counter",
        "Calls counted in the kernel, including those not stored individually.",
    );
    for ((node, source, op), n) in &counted {
        let _ = writeln!(
            o,
            "causeway_counted_calls_total{{node=\"{}\",source=\"{}\",op=\"{}\"}} {n}",
            label(node),
            label(source),
            label(op)
        );
    }

    header(
        &mut o,
        "causeway_off_cpu_seconds_total",
        "counter",
        "Time traced threads spent off the CPU, by state at switch-out.",
    );
    let mut off: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for x in &f.off_cpu {
        *off.entry((x.node.as_str(), x.state.as_str())).or_default() += x.ns;
    }
    for ((node, state), ns) in &off {
        let _ = writeln!(
            o,
            "causeway_off_cpu_seconds_total{{node=\"{}\",state=\"{state}\"}} {:.9}",
            label(node),
            secs(*ns)
        );
    }

    header(
        &mut o,
        "causeway_dropped_events_total",
        "counter",
        "Events lost, by kind (ring buffer full, channel full, write failed, sampled, ...).",
    );
    for d in &f.drops {
        let _ = writeln!(
            o,
            "causeway_dropped_events_total{{node=\"{}\",kind=\"{}\"}} {}",
            label(&d.node),
            label(&d.kind),
            d.count
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
        assert!(!label("x\ny\u{202e}").contains('\n'));
    }
}
