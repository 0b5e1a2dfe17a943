//! Prometheus text exposition (format 0.0.4) of a trace, served at `/metrics` next to MCP:
//! per-(node, source, op) call counters and exact latency histograms over the stored events,
//! calls counted in the kernel, bytes moved, off-CPU time by state, and dropped events.

use std::fmt::Write;
use std::sync::LazyLock;

use causeway_store::sanitize::sanitize_with;

use crate::duck;
use causeway_store::{Reader, StoreError};

/// Upper bounds of the latency buckets in ns: 1 us x 4^k, 1 us .. about 16.8 s.
pub const BUCKETS_NS: [i64; 13] = [
    1_000,
    4_000,
    16_000,
    64_000,
    256_000,
    1_024_000,
    4_096_000,
    16_384_000,
    65_536_000,
    262_144_000,
    1_048_576_000,
    4_194_304_000,
    16_777_216_000,
];

static OPS_SQL: LazyLock<String> = LazyLock::new(|| {
    let buckets: Vec<String> = BUCKETS_NS
        .iter()
        .map(|b| format!("count(*) FILTER (WHERE d.duration <= {b})::BIGINT"))
        .collect();
    format!(
        "SELECT d.node, o.source, o.op, count(*)::BIGINT, sum(d.duration)::BIGINT,
           sum(CASE WHEN o.op LIKE '%emcpy%' OR o.op LIKE '%Memset%' THEN d.arg0 ELSE 0 END)::BIGINT, {}
         FROM event_data d JOIN ops o ON o.op_id = d.op_id
         WHERE o.op <> 'sched_switch'
         GROUP BY ALL ORDER BY 1, 2, 3",
        buckets.join(", ")
    )
});

const COUNTED_SQL: &str = "SELECT c.node, o.source, o.op, sum(c.calls)::BIGINT
  FROM op_counts c JOIN ops o ON o.op_id = c.op_id GROUP BY ALL ORDER BY 1, 2, 3";
const OFF_CPU_SQL: &str = "SELECT node,
    CASE arg1 WHEN 0 THEN 'preempted' WHEN 1 THEN 'blocked' ELSE 'other' END AS state,
    sum(duration)::BIGINT, count(*)::BIGINT
  FROM event_data WHERE op_id = 100 GROUP BY ALL ORDER BY 1, 2";
const DROPS_SQL: &str =
    "SELECT node, kind, sum(count)::BIGINT FROM drops GROUP BY ALL ORDER BY 1, 2";
const NODES_SQL: &str =
    "SELECT node, count(*)::BIGINT, max(timestamp)::BIGINT FROM event_data GROUP BY 1 ORDER BY 1";

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

/// Renders the metrics of the trace `r` reads (a finished file or a live recording).
pub fn render(r: &Reader) -> Result<String, StoreError> {
    let mut o = String::new();
    type OpRow = (String, String, String, i64, i64, i64, Vec<i64>);
    let ops: Vec<OpRow> = r
        .prepare_trusted(OPS_SQL.as_str())?
        .query_map([], |row| {
            let mut buckets = Vec::with_capacity(BUCKETS_NS.len());
            for i in 0..BUCKETS_NS.len() {
                buckets.push(row.get(6 + i)?);
            }
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                buckets,
            ))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "computing per-op metrics"))?;

    header(
        &mut o,
        "causeway_events",
        "gauge",
        "Events stored in the trace, per node.",
    );
    let nodes: Vec<(String, i64, i64)> = r
        .prepare_trusted(NODES_SQL)?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "counting events per node"))?;
    for (node, n, _) in &nodes {
        let _ = writeln!(o, "causeway_events{{node=\"{}\"}} {n}", label(node));
    }
    header(
        &mut o,
        "causeway_last_event_timestamp_seconds",
        "gauge",
        "Time of the newest event per node (seconds since the Unix epoch).",
    );
    for (node, _, last) in &nodes {
        let _ = writeln!(
            o,
            "causeway_last_event_timestamp_seconds{{node=\"{}\"}} {:.9}",
            label(node),
            secs(*last)
        );
    }

    header(
        &mut o,
        "causeway_call_duration_seconds",
        "histogram",
        "Duration of every stored call, exact over the stored events (CUDA, driver, NCCL, host).",
    );
    for (node, source, op, count, sum, _, buckets) in &ops {
        let l = format!(
            "node=\"{}\",source=\"{}\",op=\"{}\"",
            label(node),
            label(source),
            label(op)
        );
        for (b, n) in BUCKETS_NS.iter().zip(buckets) {
            let _ = writeln!(
                o,
                "causeway_call_duration_seconds_bucket{{{l},le=\"{}\"}} {n}",
                secs(*b)
            );
        }
        let _ = writeln!(
            o,
            "causeway_call_duration_seconds_bucket{{{l},le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            o,
            "causeway_call_duration_seconds_sum{{{l}}} {:.9}",
            secs(*sum)
        );
        let _ = writeln!(o, "causeway_call_duration_seconds_count{{{l}}} {count}");
    }

    header(
        &mut o,
        "causeway_bytes_total",
        "counter",
        "Bytes moved by memcpy/memset calls (stored events).",
    );
    for (node, source, op, _, _, bytes, _) in ops.iter().filter(|x| x.5 > 0) {
        let _ = writeln!(
            o,
            "causeway_bytes_total{{node=\"{}\",source=\"{}\",op=\"{}\"}} {bytes}",
            label(node),
            label(source),
            label(op)
        );
    }

    header(
        &mut o,
        "causeway_counted_calls_total",
        "counter",
        "Calls counted in the kernel, including those not stored individually.",
    );
    let counted: Vec<(String, String, String, i64)> = r
        .prepare_trusted(COUNTED_SQL)?
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading counted calls"))?;
    for (node, source, op, n) in &counted {
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
    let off: Vec<(String, String, i64, i64)> = r
        .prepare_trusted(OFF_CPU_SQL)?
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "summing off-CPU time"))?;
    for (node, state, ns, _) in &off {
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
    let drops: Vec<(String, String, i64)> = r
        .prepare_trusted(DROPS_SQL)?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(duck(r, "reading drop counters"))?;
    for (node, kind, n) in &drops {
        let _ = writeln!(
            o,
            "causeway_dropped_events_total{{node=\"{}\",kind=\"{}\"}} {n}",
            label(node),
            label(kind)
        );
    }
    Ok(o)
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
