//! The report's two aggregates over stored events that no other command prints: the timeline
//! (GPU calls, off-CPU time, sync waits and block I/O per time bucket) and log2 latency
//! histograms per op. Both read the same rows, window and filters as `stats`, so their sums
//! equal its counts and totals.

use std::collections::BTreeMap;

use causeway_analysis::opsets::{is_gpu_source, is_sync};
use causeway_analysis::{OpStats, TraceStats};
use causeway_store::catalog::{self, Source};
use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};
use serde::Serialize;

/// Buckets a timeline has at most: enough to zoom into, few enough to stay small.
pub const MAX_BUCKETS: i64 = 400;

/// Histograms shown at most (the ops with the most time first).
pub const MAX_HISTOGRAMS: usize = 40;

/// The op whose duration is a traced thread's off-CPU time (what `stats`' off-CPU sums).
const SCHED_SWITCH: &str = "sched_switch";

const NODE_ID_SQL: &str = "SELECT coalesce(max(node_id), -2)::BIGINT FROM nodes WHERE node = ?";

const TIMELINE_SQL: &str = "
SELECT ((timestamp - $1) // $3)::BIGINT AS b, op_id::BIGINT, count(*)::BIGINT,
       coalesce(sum(duration)::DOUBLE, 0)
FROM event_rows
WHERE timestamp BETWEEN $1 AND $2
  AND ($4::BIGINT < 0 OR pid = $4::BIGINT)
  AND ($5::BIGINT = -1 OR node_id = $5::BIGINT)
GROUP BY ALL";

const EXACT_HIST_SQL: &str = "
SELECT op_id::BIGINT,
       (CASE WHEN duration < 2 THEN 0 ELSE floor(log2(duration::DOUBLE)) END)::BIGINT AS b,
       count(*)::BIGINT
FROM event_rows
WHERE timestamp BETWEEN $1 AND $2
  AND ($3::BIGINT < 0 OR pid = $3::BIGINT)
  AND ($4::BIGINT = -1 OR node_id = $4::BIGINT)
GROUP BY ALL ORDER BY 1, 2";

const KERNEL_HIST_SQL: &str = "
SELECT log2_bucket::BIGINT, least(sum(count), 9223372036854775807::HUGEINT)::BIGINT
FROM op_histograms
WHERE op_id = $1 AND window_end_ns >= $2 AND window_start_ns <= $3
  AND ($4::BIGINT < 0 OR pid = $4::BIGINT)
  AND ($5::VARCHAR = '' OR node = $5::VARCHAR)
GROUP BY ALL ORDER BY 1";

/// Activity over the window, one value per bucket in each series.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Timeline {
    /// Bucket width (ns).
    pub bucket_ns: i64,
    /// Start of bucket 0: the window's start (ns since the epoch).
    pub start_ns: i64,
    /// Start of each bucket, in seconds after `start_ns`.
    pub t: Vec<f64>,
    /// GPU-library calls (CUDA, driver, graphs, NCCL) starting in the bucket.
    pub gpu_calls: Vec<u64>,
    /// Off-CPU time of traced threads (sched_switch durations) starting in the bucket (ns).
    pub off_cpu_ns: Vec<i64>,
    /// Time in synchronisation calls starting in the bucket (ns).
    pub sync_ns: Vec<i64>,
    /// Block I/O request time starting in the bucket (ns).
    pub io_ns: Vec<i64>,
    /// Findings and stalls placed on the timeline.
    pub marks: Vec<Mark>,
}

/// Something placed on the timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mark {
    /// Seconds after the timeline's start.
    pub t: f64,
    /// `finding` or `stall`.
    pub kind: &'static str,
    /// The chain id for a finding; the thread for a stall.
    pub id: String,
    /// What it is, in a few words.
    pub label: String,
}

/// The log2 latency histogram of one op.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Histogram {
    /// Source name.
    pub source: String,
    /// Op name.
    pub op: String,
    /// `exact` (every stored event's duration) or `kernel_histogram` (the kernel's log2
    /// buckets; nothing was stored).
    pub from: &'static str,
    /// Upper bound of each non-empty bucket (ns): bucket b holds durations in [2^b, 2^(b+1)).
    pub upper_ns: Vec<i64>,
    /// Calls in each bucket.
    pub counts: Vec<u64>,
    /// Calls in all (the sum of `counts`).
    pub total: u64,
}

fn duck(r: &Reader, action: &'static str) -> impl Fn(duckdb::Error) -> StoreError {
    let path = r.path().to_path_buf();
    move |source| StoreError::Duck {
        path: path.clone(),
        action,
        source,
    }
}

/// The node id a filter names: -1 for every node, -2 for a node the file lacks.
fn node_id(r: &Reader, node: Option<&str>) -> Result<i64, StoreError> {
    match node.filter(|n| !n.is_empty()) {
        None => Ok(-1),
        Some(n) => r
            .prepare_trusted(NODE_ID_SQL)?
            .query_row([n], |row| row.get(0))
            .map_err(duck(r, "looking up the node")),
    }
}

/// The bucket width for a window: about [`MAX_BUCKETS`] buckets, at least 1 ms.
pub fn bucket_ns(from_ns: i64, until_ns: i64) -> i64 {
    let span = until_ns.saturating_sub(from_ns).max(1);
    (span / MAX_BUCKETS + 1).max(1_000_000)
}

/// The timeline of the window `stats` describes, under its filters.
pub fn timeline(
    r: &Reader,
    s: &TraceStats,
    pid: Option<u32>,
    node: Option<&str>,
) -> Result<Timeline, StoreError> {
    let (from, until) = (s.window.from_ns, s.window.until_ns);
    let width = bucket_ns(from, until);
    let n = (until.saturating_sub(from).max(0) / width + 1) as usize;
    let mut tl = Timeline {
        bucket_ns: width,
        start_ns: from,
        t: (0..n).map(|i| (i as i64 * width) as f64 / 1e9).collect(),
        gpu_calls: vec![0; n],
        off_cpu_ns: vec![0; n],
        sync_ns: vec![0; n],
        io_ns: vec![0; n],
        marks: Vec::new(),
    };
    if s.events == 0 {
        return Ok(tl);
    }
    let pid = pid.map_or(-1, i64::from);
    let node_id = node_id(r, node)?;
    let mut stmt = r.prepare_trusted(TIMELINE_SQL)?;
    let rows = stmt
        .query_map(
            duckdb::params![from, until, width, pid, node_id],
            causeway_store::row::<(i64, i64, i64, f64)>,
        )
        .map_err(duck(r, "reading the timeline"))?;
    for row in rows {
        let (b, op_id, count, total) = row.map_err(duck(r, "reading the timeline"))?;
        let (Some(op), Ok(b)) = (catalog::op_by_id(op_id as u16), usize::try_from(b)) else {
            continue;
        };
        if b >= n {
            continue;
        }
        let total = total as i64;
        if is_gpu_source(op.source.name()) {
            tl.gpu_calls[b] += count as u64;
        }
        if is_sync(op.name) {
            tl.sync_ns[b] += total;
        }
        if op.name == SCHED_SWITCH {
            tl.off_cpu_ns[b] += total;
        }
        if op.source == Source::Io {
            tl.io_ns[b] += total;
        }
    }
    Ok(tl)
}

/// Whether an op's durations mean anything: it was timed and some call took time.
fn has_durations(o: &OpStats) -> bool {
    o.percentiles != "none" && o.max_ns > 0
}

/// Latency histograms of the ops `stats` lists (those with durations), the most total time
/// first, at most [`MAX_HISTOGRAMS`]; the second value is how many were left out.
pub fn histograms(
    r: &Reader,
    s: &TraceStats,
    pid: Option<u32>,
    node: Option<&str>,
) -> Result<(Vec<Histogram>, usize), StoreError> {
    let mut ops: Vec<&OpStats> = s.ops.iter().filter(|o| has_durations(o)).collect();
    ops.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.op.cmp(&b.op)));
    let left_out = ops.len().saturating_sub(MAX_HISTOGRAMS);
    ops.truncate(MAX_HISTOGRAMS);
    let pid = pid.map_or(-1, i64::from);
    let mut exact: BTreeMap<u16, Vec<(i64, u64)>> = BTreeMap::new();
    if ops.iter().any(|o| o.percentiles != "histogram_estimate") {
        let node_id = node_id(r, node)?;
        let mut stmt = r.prepare_trusted(EXACT_HIST_SQL)?;
        let rows = stmt
            .query_map(
                duckdb::params![s.window.from_ns, s.window.until_ns, pid, node_id],
                causeway_store::row::<(i64, i64, i64)>,
            )
            .map_err(duck(r, "reading latency histograms"))?;
        for row in rows {
            let (op_id, b, count) = row.map_err(duck(r, "reading latency histograms"))?;
            exact
                .entry(op_id as u16)
                .or_default()
                .push((b, count as u64));
        }
    }
    let mut out = Vec::with_capacity(ops.len());
    for o in ops {
        let Some(info) = catalog::op_by_name(&o.op) else {
            continue;
        };
        let (from, buckets) = if o.percentiles == "histogram_estimate" {
            let mut stmt = r.prepare_trusted(KERNEL_HIST_SQL)?;
            let rows = stmt
                .query_map(
                    duckdb::params![
                        i64::from(info.id),
                        s.window.from_ns,
                        s.window.until_ns,
                        pid,
                        node.unwrap_or("")
                    ],
                    causeway_store::row::<(i64, i64)>,
                )
                .map_err(duck(r, "reading kernel histograms"))?;
            let mut v = Vec::new();
            for row in rows {
                let (b, c) = row.map_err(duck(r, "reading kernel histograms"))?;
                v.push((b, c.max(0) as u64));
            }
            ("kernel_histogram", v)
        } else {
            ("exact", exact.remove(&info.id).unwrap_or_default())
        };
        let upper_ns = buckets
            .iter()
            .map(|(b, _)| 1i64.checked_shl(*b as u32 + 1).unwrap_or(i64::MAX) - 1)
            .collect();
        let counts: Vec<u64> = buckets.iter().map(|(_, c)| *c).collect();
        out.push(Histogram {
            source: o.source.clone(),
            op: o.op.clone(),
            from,
            upper_ns,
            total: counts.iter().sum(),
            counts,
        });
    }
    Ok((out, left_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_the_window_in_at_most_the_cap() {
        let from = 1_000_000_000_000;
        for span in [0, 1, 999_999, 60_000_000_000, 3_600_000_000_000] {
            let w = bucket_ns(from, from + span);
            assert!(w >= 1_000_000, "at least 1 ms, got {w}");
            let n = span / w + 1;
            assert!(n <= MAX_BUCKETS + 1, "{n} buckets for a span of {span} ns");
        }
    }
}
