//! One source for how many calls a trace holds: per (node, pid, op) and window, the events the
//! store holds (`stored`, always counted from the events, never taken from a source tool's
//! counters), the calls the kernel or the source counted (`op_counts.calls`), and the scale
//! from the one to the other. `stats`, the time budget's coverage, every detector and every
//! evidence query read these figures through [`coverage_ctes`], so one quantity has one value
//! in every command.
//!
//! The scale is the counters' calls over the events stored in the same stretch (the counters'
//! windows), applied to the events in the window. It is refused (1) where the counters cannot
//! be right (fewer calls than stored events: `implausible`) and where it would put more time
//! inside the op than its threads' spans hold (`refused`): an estimate is never larger than
//! the trace can hold.

use std::sync::LazyLock;

use causeway_store::{Reader, StoreError, duckdb};

use crate::window::Window;

/// SQL string literal.
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The CTEs (without `WITH`) that define `coverage`: one row per (node, pid, op_id) with
/// events or counters in the window `[from, until]`, under an optional node and pid filter.
/// Columns: `node`, `pid`, `op_id`, `stored` (events in the window), `stored_ns` (their
/// durations), `calls` (calls in the window: the stored events times `scale` where the events
/// are a sample, the counters' own figure where no event was stored), `scale`, `counted` and
/// `counted_stored` (the counters' calls and the events stored over the counters' windows),
/// `counted_ns` (the counters' time), `implausible` (counters below the events they cover)
/// and `refused` (a scale that would exceed the threads' spans).
pub fn coverage_ctes(from: i64, until: i64, node: Option<&str>, pid: Option<u32>) -> String {
    ctes(
        &from.to_string(),
        &until.to_string(),
        &node.map_or("''".to_string(), lit),
        &pid.map_or(-1, i64::from).to_string(),
    )
}

/// [`coverage_ctes`] for the engine: `$1` the node ('' for all), `$2` and `$3` the window,
/// `$4` the pid (-1 for all).
static TRUSTED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {} SELECT node, pid::BIGINT, op_id::BIGINT, stored, calls, scale::DOUBLE, counted, counted_ns, implausible, refused FROM coverage ORDER BY node, pid, op_id",
        ctes("$2", "$3", "$1", "$4")
    )
});

/// The CTEs, each value an SQL expression.
fn ctes(from: &str, until: &str, node: &str, pid: &str) -> String {
    let node_f = format!(" AND ({node} = '' OR e.node = {node})");
    let node_c = format!(" AND ({node} = '' OR node = {node})");
    let pid_e = format!(" AND ({pid} < 0 OR e.pid = {pid})");
    let pid_c = format!(" AND ({pid} < 0 OR pid = {pid})");
    format!(
        "cov_e AS (SELECT e.node, e.pid, e.tid, e.op_id, count(*) AS n, sum(e.duration) AS ns, min(e.timestamp) AS a, max(e.timestamp::HUGEINT + e.duration) AS b \
FROM event_data e WHERE e.timestamp BETWEEN {from} AND {until}{node_f}{pid_e} GROUP BY ALL), \
cov_t AS (SELECT node, pid, tid, max(b) - min(a) AS span FROM cov_e GROUP BY ALL), \
cov_s AS (SELECT e.node, e.pid, e.op_id, sum(e.n) AS stored, sum(e.ns) AS stored_ns, sum(t.span) AS spans FROM cov_e e JOIN cov_t t ON t.node = e.node AND t.pid = e.pid AND t.tid = e.tid GROUP BY ALL), \
cov_c AS (SELECT node, pid, op_id, sum(calls) AS calls, sum(total_ns) AS counted_ns, min(window_start_ns) AS lo, max(window_end_ns) AS hi \
FROM op_counts WHERE window_end_ns >= {from} AND window_start_ns <= {until}{node_c}{pid_c} GROUP BY ALL), \
cov_r AS (SELECT c.node, c.pid, c.op_id, count(e.op_id) AS n FROM cov_c c \
LEFT JOIN event_data e ON e.node = c.node AND e.pid = c.pid AND e.op_id = c.op_id AND e.timestamp BETWEEN c.lo AND c.hi GROUP BY ALL), \
cov_x AS (SELECT coalesce(s.node, c.node) AS node, coalesce(s.pid, c.pid) AS pid, coalesce(s.op_id, c.op_id) AS op_id, \
coalesce(s.stored, 0)::BIGINT AS stored, coalesce(s.stored_ns, 0) AS stored_ns, coalesce(s.spans, 0) AS spans, \
least(coalesce(c.calls, 0), 9223372036854775807)::BIGINT AS counted, coalesce(r.n, 0)::BIGINT AS counted_stored, \
least(coalesce(c.counted_ns, 0), 9223372036854775807)::BIGINT AS counted_ns \
FROM cov_s s FULL JOIN cov_c c ON c.node = s.node AND c.pid = s.pid AND c.op_id = s.op_id \
LEFT JOIN cov_r r ON r.node = c.node AND r.pid = c.pid AND r.op_id = c.op_id), \
cov_y AS (SELECT *, counted < counted_stored AS implausible, \
counted_stored > 0 AND counted > counted_stored AND stored_ns::DOUBLE * counted / counted_stored > spans AS refused FROM cov_x), \
coverage AS (SELECT node, pid, op_id, stored, stored_ns, \
CASE WHEN counted_stored > 0 AND counted > counted_stored AND NOT refused THEN counted / counted_stored ELSE 1.0 END AS scale, \
CASE WHEN stored = 0 THEN greatest(counted, 0) WHEN counted_stored > 0 AND counted > counted_stored AND NOT refused \
THEN least(greatest(round(stored::DOUBLE * counted / counted_stored), stored), 9.2e18)::BIGINT ELSE stored END AS calls, \
counted, counted_stored, counted_ns, implausible, refused FROM cov_y)"
    )
}

/// One (node, pid, op) of [`coverage`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpCoverage {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// Op id.
    pub op_id: u16,
    /// Events the store holds in the window.
    pub stored: u64,
    /// Calls in the window: `stored` scaled where the events are a sample of the counted calls.
    pub calls: u64,
    /// `calls / stored` where scaled, else 1.
    pub scale: f64,
    /// The counters' calls over their windows (0 without counters).
    pub counted: u64,
    /// The counters' time (ns).
    pub counted_ns: i64,
    /// The counters say fewer calls than the events they cover: not extrapolated.
    pub implausible: bool,
    /// The scale would put more time inside the op than its threads' spans: not extrapolated.
    pub refused: bool,
}

impl OpCoverage {
    /// Whether `calls` is an estimate (scaled from the stored events).
    pub fn scaled(&self) -> bool {
        self.scale > 1.0
    }
}

/// Coverage of every (node, pid, op) in the window under the filters.
pub fn coverage(
    r: &Reader,
    window: &Window,
    node: Option<&str>,
    pid: Option<u32>,
) -> Result<Vec<OpCoverage>, StoreError> {
    let map = |e| StoreError::Duck {
        path: r.path().to_path_buf(),
        action: "counting stored and counted calls",
        source: e,
    };
    let mut st = r.prepare_trusted(TRUSTED.as_str())?;
    let params = duckdb::params![
        node.unwrap_or(""),
        window.from_ns,
        window.until_ns,
        pid.map_or(-1, i64::from)
    ];
    let rows = st
        .query_map(params, |row| {
            Ok(OpCoverage {
                node: row.get(0)?,
                pid: row.get::<_, i64>(1)? as u32,
                op_id: row.get::<_, i64>(2)? as u16,
                stored: row.get::<_, i64>(3)?.max(0) as u64,
                calls: row.get::<_, i64>(4)?.max(0) as u64,
                scale: row.get(5)?,
                counted: row.get::<_, i64>(6)?.max(0) as u64,
                counted_ns: row.get(7)?,
                implausible: row.get(8)?,
                refused: row.get(9)?,
            })
        })
        .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
        .map_err(map)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evidence queries carry the coverage CTE: an agent's `run_sql` must accept it as the
    /// engine wrote it (the lab's scaled sync storm once failed to parse).
    #[test]
    fn the_coverage_ctes_pass_the_guard() {
        let sql = format!(
            "WITH {}, r AS (SELECT o.op, c.scale FROM coverage c JOIN ops o USING (op_id)) SELECT * FROM r",
            coverage_ctes(0, 1_000_000_000, Some("n'1"), Some(42))
        );
        causeway_sqlguard::guard(&sql, &causeway_store::default_policy(), None)
            .unwrap_or_else(|e| panic!("{e}\n{sql}"));
        causeway_sqlguard::guard(&TRUSTED, &causeway_store::default_policy(), None)
            .unwrap_or_else(|e| panic!("{e}"));
        // Nested as sync_storm nests its launches' query in a CTE.
        let nested = format!(
            "WITH l AS (SELECT count(*) AS n FROM ({sql})) SELECT q.*, (SELECT n FROM l) AS n FROM ({sql}) q"
        );
        causeway_sqlguard::guard(&nested, &causeway_store::default_policy(), None)
            .unwrap_or_else(|e| panic!("{e}\n{nested}"));
    }
}
